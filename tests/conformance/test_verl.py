"""verl's own dumps (the V1 trainer's and the legacy v0 trainer's) against verl's own estimators."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rollaudit
from tests.conformance.conftest import assert_matches, corpus

V1_PRESETS = {
    "verl-grpo-v1": "grpo",
    "verl-grpo-v1(scale=none)": "grpo_nostd",
    "verl-grpo": "grpo_rowwise",
    "verl-grpo(scale=none)": "grpo_rowwise_nostd",
    "verl-rloo": "rloo",
    "verl-rloo-vectorized": "rloo_vectorized",
}
V0_PRESETS = {"verl-grpo": "grpo", "verl-rloo": "rloo", "verl-rloo-vectorized": "rloo_vectorized"}
DUMPS = [(5, "rollout_data_v1/5.jsonl", V1_PRESETS), (6, "rollout_data_v1/6.jsonl", V1_PRESETS)]
DUMPS += [(9, "rollout_data_v0/9.jsonl", V0_PRESETS)]


def expected_rows(step: int):
    """The expected values of the dump's samples: its padding rows are no samples, and rollaudit leaves them out."""
    expected = pq.read_table(corpus("verl") / f"expected_{step}.parquet").to_pandas()
    return expected[~expected["is_padding"]].reset_index(drop=True)


@pytest.mark.parametrize(("step", "dump", "presets"), DUMPS, ids=["v1-5", "v1-6", "v0-9"])
def test_every_preset_equals_verls_own_values(step, dump, presets):
    table = rollaudit.load(corpus("verl") / dump)
    expected = expected_rows(step)
    assert table.num_rows == len(expected)
    if step == 9:
        # v0 keeps no uid: its rows of one prompt share the input text exactly, so the texts are verl's groups.
        pairs = set(zip(table.column("prompt").to_pylist(), expected["prompt_key"], strict=True))
        assert len(pairs) == len({text for text, _ in pairs}) == len({key for _, key in pairs}) == 24
    else:
        assert table.column("prompt").to_pylist() == expected["prompt_key"].tolist()
        assert table.column("trajectory").to_pylist() == expected["session_key"].tolist()
        assert table.column("output_index").to_pylist() == expected["output_index"].tolist()
    assert table.column("reward").to_pylist() == expected["reward"].tolist()
    # f32_degenerate: verl's float32 std of a constant group is one ulp off 0, far from exact arithmetic's 0.
    keep = ~expected["f32_degenerate"].to_numpy()
    recomputed = rollaudit.recompute(table, list(presets), device="cpu")
    for preset, column in presets.items():
        assert_matches(
            f"verl: {preset} = {column}", recomputed.column(f"advantage:{preset}").to_numpy(), expected[column], keep
        )


@pytest.mark.parametrize(("step", "dump"), [(5, "rollout_data_v1/5.jsonl"), (9, "rollout_data_v0/9.jsonl")])
def test_reinforce_plus_plus_baseline_on_a_table_with_the_response_lengths(step, dump):
    """verl dumps hold no token counts: the whitening needs them, so the test gives them from the parquet."""
    table = rollaudit.load(corpus("verl") / dump)
    with pytest.raises(rollaudit.SchemeError, match="response length"):
        rollaudit.recompute(table, ["verl-rpp-baseline"], device="cpu")
    expected = expected_rows(step)
    index = table.column_names.index("response_length")
    with_lengths = table.set_column(index, "response_length", pa.array(expected["response_length"]))
    recomputed = rollaudit.recompute(with_lengths, ["verl-rpp-baseline"], device="cpu").column(0).to_numpy()
    assert_matches(
        "verl: verl-rpp-baseline = reinforce_plus_plus_baseline", recomputed, expected["reinforce_plus_plus_baseline"]
    )


def test_v1_groups_by_the_prompt_uid_never_by_the_input_text():
    report = rollaudit.audit(rollaudit.load(corpus("verl") / "rollout_data_v1" / "5.jsonl"), device="cpu")
    assert (report.info["prompts"], report.info["trajectories"], report.info["samples"]) == (40, 282, 392)
    found = report.info["found"]["verl V1 (uid = prompt_session_output)"]
    assert found == {"prompts": 40, "sessions": 282, "outputs": 392, "padding rows left out": 8}


def test_a_v1_run_directory_loads_both_steps_with_their_padding_counted():
    table = rollaudit.load(corpus("verl") / "rollout_data_v1")
    assert sorted(set(table.column("step").to_pylist())) == [5, 6]
    found = rollaudit.audit(table, schemes=["prompt"], device="cpu").info["found"]
    assert found["verl V1 (uid = prompt_session_output)"]["padding rows left out"] == 17
