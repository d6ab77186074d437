"""ROLL's own agentic dumps against ROLL's own reward normalization (both steps)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import rollaudit
from tests.conformance.conftest import assert_matches, corpus

PRESETS = {
    "roll-grpo": "roll_grpo_trajgroup_mean_std",
    "roll-grpo(scale=none)": "roll_grpo_trajgroup_mean",
    "roll-grpo-tags": "roll_grpo_tags_mean_std",
    "roll-grpo-batch": "roll_grpo_batch_mean_std",
    "roll-grpo-batch(scale=none)": "roll_grpo_batch_mean",
}


@pytest.mark.parametrize("step", [3, 4])
def test_every_preset_equals_rolls_own_values(step):
    table = rollaudit.load(corpus("roll") / "agentic" / f"rollout_dump_data.step_{step}.jsonl")
    expected = pq.read_table(corpus("roll") / "agentic" / f"expected_step{step}.parquet").to_pandas()
    assert table.column("prompt").to_pylist() == expected["traj_group_id"].tolist()
    assert table.column("trajectory").to_pylist() == expected["traj_id"].tolist()
    assert table.column("tag").to_pylist() == expected["tag"].tolist()
    assert table.column("env_step").to_pylist() == expected["step"].tolist()
    # ROLL casts the scores to float32: the parquet's row_score is -0.1 as a float32, the dump's -0.1 a double.
    assert table.column("reward").to_pylist() == pytest.approx(expected["row_score"].tolist(), abs=1e-7)
    recomputed = rollaudit.recompute(table, list(PRESETS), device="cpu")
    for preset, column in PRESETS.items():
        assert_matches(
            f"roll: {preset} = {column}", recomputed.column(f"advantage:{preset}").to_numpy(), expected[column]
        )


def test_the_dump_directory_and_the_step_weighting_note():
    table = rollaudit.load(corpus("roll") / "agentic")
    assert sorted(set(table.column("step").to_pylist())) == [3, 4] and table.num_rows == 147 + 138
    report = rollaudit.audit(table, schemes=["roll-grpo"], device="cpu")
    assert report.info["found"]["ROLL (prompt = traj_group_id, trajectory = traj_id)"]["trajectories"] == 112
    assert any("5-step trajectory weighs 5 times" in note for note in report.info["loader_notes"])
