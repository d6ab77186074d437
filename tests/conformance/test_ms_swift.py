"""ms-swift's own completions.jsonl against its own compute_advantages: the recorded advantages, and every
estimator and scale_rewards mode upstream computed on the same rewards."""

from __future__ import annotations

import pyarrow.parquet as pq

import rollaudit
from tests.conformance.conftest import assert_matches, corpus

RUN = "grpo_default/output/v0-20261207-000000"
# preset -> the upstream column of compute_advantages with that estimator and scale_rewards (no KL)
UPSTREAM = {
    "swift-grpo": "swift_grpo_group_nokl",
    "swift-grpo-batch": "swift_grpo_batch_nokl",
    "swift-grpo-none": "swift_grpo_none_nokl",
    "swift-rloo": "swift_rloo_none_nokl",
    "swift-rloo-group": "swift_rloo_group_nokl",
    "swift-rpp": "swift_reinforce_plus_plus_batch_nokl",
    "swift-rpp-group": "swift_reinforce_plus_plus_group_nokl",
}


def _expected():
    return pq.read_table(corpus("ms_swift") / "expected_grpo_default.parquet").to_pandas()


def test_the_run_reads_as_its_groups_with_the_recorded_advantages():
    table = rollaudit.load(corpus("ms_swift") / RUN)
    expected = _expected()
    assert table.num_rows == 48 == len(expected)
    assert table.column("step").to_pylist() == expected["step"].tolist()
    assert table.column("position").to_pylist() == expected["row"].tolist()
    keys = list(zip(table.column("step").to_pylist(), table.column("prompt").to_pylist(), strict=True))
    truth = expected["group_key"].tolist()
    assert len(set(keys)) == len(set(truth)) == 6 and len(set(zip(keys, truth, strict=True))) == 6
    assert_matches(
        "ms-swift: reward = reward_weighted_f32", table.column("reward"), expected["reward_weighted_f32"], tolerance=0
    )
    assert_matches(
        "ms-swift: recorded = swift_advantage",
        table.column("recorded_advantage"),
        expected["swift_advantage"],
        tolerance=0,
    )
    notes = rollaudit.audit(table, device="cpu").info["loader_notes"]
    assert any(note.startswith("group size G=8: inferred from the dump") for note in notes), notes


def test_every_preset_equals_upstreams_values():
    table = rollaudit.load(corpus("ms_swift") / RUN)
    expected = _expected()
    recomputed = rollaudit.recompute(table, list(UPSTREAM), device="cpu")
    for index, (preset, column) in enumerate(UPSTREAM.items()):
        assert_matches(f"ms-swift: {preset} = {column}", recomputed.column(index), expected[column], tolerance=5e-7)


def test_the_default_preset_is_named_from_the_recorded_advantages():
    report = rollaudit.audit(rollaudit.load(corpus("ms_swift") / RUN), device="cpu")
    trained = report.trained_with
    assert (trained.scheme, trained.evidence) == ("swift-grpo", "recorded")
    assert report.info["samples"] == 48 and report.info["prompts"] == 6
