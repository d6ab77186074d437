"""rllm's own episode logs against rllm's own advantage code (both training steps)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

import rollaudit
from tests.conformance.conftest import assert_matches, corpus

PRESETS = {
    "rllm-grpo": "rllm_grpo",
    "rllm-grpo(scale=none)": "rllm_grpo_nostd",
    "rllm-rloo": "rllm_rloo",
    "rllm-verl-legacy": "verl_legacy_uid_grpo",
    "rllm-grpo(singleton=raw)": "rllm_grpo_min1",
    "rllm-rloo(singleton=raw)": "rllm_rloo_min1",
}


def step_directory(step: int):
    return corpus("rllm") / "logs" / "rllm-math" / "agent-grpo" / "episodes" / f"train_step_{step}_epoch_0"


@pytest.mark.parametrize("step", [7, 8])
def test_every_preset_equals_rllms_own_values(step):
    table = rollaudit.load(step_directory(step))
    expected = pq.read_table(corpus("rllm") / "expected" / f"train_step_{step}_epoch_0.parquet").to_pandas()
    # rllm's rows are in group order; rollaudit keeps episode order: align by (trajectory uid, segment).
    rows = {
        key: row
        for row, key in enumerate(
            zip(table.column("trajectory").to_pylist(), table.column("segment").to_pylist(), strict=True)
        )
    }
    order = np.array([rows[key] for key in zip(expected["traj_uid"], expected["segment"], strict=True)])
    assert len(rows) == len(expected)
    assert np.array(table.column("prompt").to_pylist())[order].tolist() == expected["group_id"].tolist()
    assert table.column("reward").to_numpy()[order].tolist() == expected["reward"].tolist()
    recomputed = rollaudit.recompute(table, list(PRESETS), device="cpu")
    for preset, column in PRESETS.items():
        assert_matches(
            f"rllm: {preset} = {column}", recomputed.column(f"advantage:{preset}").to_numpy()[order], expected[column]
        )


def test_the_run_directory_the_summary_and_what_compare_says():
    run = corpus("rllm") / "logs" / "rllm-math" / "agent-grpo"
    table = rollaudit.load(run)
    assert sorted(set(table.column("step").to_pylist())) == [7, 8] and table.num_rows == 210 + 208
    summary = rollaudit.load(step_directory(7) / "batch_summary.json")  # the summary reads its episodes
    assert summary.num_rows == 210
    report = rollaudit.audit(table, schemes=["rllm-grpo"], device="cpu")
    found = report.info["found"]["rllm (prompt = task_id:trajectory name, trajectory = uid)"]
    assert found["groups of one trajectory (rllm drops them from training)"] == 2
    assert found["trajectories split by a context reset"] == 10
    assert "min_trajs_per_group" in report.info["scheme_notes"]["rllm-grpo"][0]
    assert report.summary.loc["rllm-grpo", "undefined"] == 2
