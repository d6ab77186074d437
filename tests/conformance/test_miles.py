"""miles' own dumps (a --dump-details run of agent fan-out, DP 2) against miles' own _normalize_rewards_by_rollout."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import rollaudit
from tests.conformance.conftest import assert_matches, compare_json, corpus

PRESETS = {"miles-grpo": "miles_grpo_std", "miles-grpo(scale=none)": "miles_grpo_nostd"}
# The README's tables: per step, (group_index, samples, trajectories) of each prompt, and the train side.
PROMPTS = {
    4: [(40, 7, 4), (41, 5, 4), (42, 7, 4), (43, 3, 1), (44, 1, 1), (45, 5, 4), (46, 4, 4), (47, 7, 3), (48, 6, 4),
        (49, 7, 4)],
    5: [(50, 5, 4), (51, 4, 4), (52, 3, 1), (53, 1, 1), (54, 5, 4), (55, 4, 4), (56, 6, 4), (57, 4, 4), (58, 4, 3),
        (59, 4, 4)],
}  # fmt: skip
TRAINED = {4: 50, 5: 39}
DROPPED = {4: [50, 51], 5: [39]}
NONZERO = {4: 36, 5: 27}


@pytest.fixture(scope="module")
def run():
    return rollaudit.load(corpus("miles"))


def _step(run, step: int):
    return run.filter(pc.equal(run.column("step"), step))


@pytest.mark.parametrize("step", [4, 5])
def test_rows_prompts_and_trajectories_are_the_readmes(run, step):
    table = _step(run, step)
    expected = pq.read_table(corpus("miles") / f"expected_{step}.parquet").to_pandas()
    assert table.num_rows == len(expected) == sum(size for _, size, _ in PROMPTS[step])
    assert table.column("position").to_pylist() == expected["position"].tolist()
    assert table.column("prompt").to_pylist() == expected["group_index"].tolist()
    assert table.column("trajectory").to_pylist() == expected["trajectory_key"].tolist()
    assert table.column("reward").to_pylist() == expected["reward"].tolist()
    prompts = table.column("prompt").to_numpy()
    trajectories = table.column("trajectory").to_numpy()
    found = [
        (int(key), int((prompts == key).sum()), len(set(trajectories[prompts == key]))) for key in np.unique(prompts)
    ]
    assert found == PROMPTS[step]
    assert len(set(trajectories)) == 33 and len(set(table.column("index").to_pylist())) == 33
    truncated = np.flatnonzero(np.array(table.column("status").to_pylist()) == "truncated").tolist()
    assert truncated == {4: [26, 38], 5: [21, 38]}[step]


@pytest.mark.parametrize("step", [4, 5])
def test_miles_grpo_equals_miles_own_values(run, step):
    """Every row, float32 rounding only (the README's self-check: at most 1.3e-07); the README names no artefact
    rows to leave out."""
    table = _step(run, step)
    expected = pq.read_table(corpus("miles") / f"expected_{step}.parquet").to_pandas()
    recomputed = rollaudit.recompute(table, list(PRESETS), device="cpu")
    for preset, column in PRESETS.items():
        worst = assert_matches(
            f"miles: {preset} = {column}", recomputed.column(f"advantage:{preset}").to_numpy(), expected[column]
        )
        assert worst <= 2e-7
    assert int((np.abs(expected["miles_grpo_std"]) > 1e-6).sum()) == NONZERO[step]


@pytest.mark.parametrize("step", [4, 5])
def test_the_train_rows_join_on_index_and_tokens(run, step):
    """Fan-out siblings share ``index`` (so ``sample_indices`` repeats): every trained sample gets its own row's
    ``rewards``; the samples the schedule dropped have none."""
    table = _step(run, step)
    expected = pq.read_table(corpus("miles") / f"expected_{step}.parquet").to_pandas()
    recorded = table.column("recorded_advantage").to_numpy(zero_copy_only=False)
    trained = expected["train_rank"].notna().to_numpy()
    assert int(trained.sum()) == TRAINED[step] and np.flatnonzero(~trained).tolist() == DROPPED[step]
    assert np.array_equal(~np.isnan(recorded), trained)
    worst = assert_matches(
        f"miles: recorded (train dump) = train_rewards, step {step}", recorded, expected["train_rewards"]
    )
    assert worst == 0.0
    assert_matches(f"miles: recorded = miles_grpo_std, step {step}", recorded, expected["miles_grpo_std"], keep=trained)
    assert len(set(expected["index"][trained])) == 32 < trained.sum()  # sample_indices alone could not join them


def test_what_the_load_found(run):
    found = rollaudit.audit(run, device="cpu").info["found"]
    counts = found["miles (prompt = group_index, trajectory = rollout_id, else index)"]
    assert counts["prompts"] == 20 and counts["trajectories"] == 66 and counts["samples"] == 92
    assert counts["trained samples (train dump)"] == 89 and counts["samples the train schedule dropped"] == 3
    assert counts["train rank files"] == 4


def test_compare_on_the_run_root_names_miles_and_matches_its_recorded_advantages():
    report = compare_json(corpus("miles"))
    assert report["load"]["format"] == "miles" and report["info"]["steps"] == 2
    assert report["info"]["samples"] == 92 and report["info"]["prompts"] == 20
    assert report["trained_with"]["scheme"] == "miles-grpo"
    assert report["trained_with"]["evidence"] != "framework default"  # the recorded advantages outrank it
    assert report["recorded"]["best_match"] == "miles-grpo"


def test_slime_reads_none_of_it():
    """The miles files are miles', and slime's own corpus stays slime's."""
    from rollaudit._loaders.run.load import detect_format

    root = corpus("miles")
    for path in [*sorted((root / "rollout_data").iterdir()), *sorted((root / "train_data").iterdir())]:
        assert detect_format(path) == "miles", path
    slime = root.parent / "slime"
    if slime.is_dir():
        for path in [*sorted((slime / "rollout_data").iterdir()), *sorted((slime / "train_data").iterdir())]:
            assert detect_format(path) == "slime", path
