"""OpenPipe ART's own trajectory logs against its own tokenize_trajectory_groups (both steps, both settings)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit import InputError
from tests.conformance.conftest import assert_matches, compare_json, corpus

TRAIN = "rollaudit-synth/models/agent-001/trajectories/train"
# The README's table: rows (trajectories) and group sizes per file.
SIZES = {3: [1, 3, 4, 4, 4, 4, 4, 5, 6, 6, 6, 8], 4: [1, 3, 4, 4, 4, 5, 6, 6, 6, 6, 6, 8]}


@pytest.mark.parametrize("step", [3, 4])
def test_art_grpo_equals_arts_own_values(step):
    table = rollaudit.load(corpus("art") / ".art" / TRAIN / f"{step:04d}.parquet")
    expected = pq.read_table(corpus("art") / f"expected_train_{step:04d}.parquet").to_pandas()
    assert table.num_rows == len(expected) == sum(SIZES[step])
    assert sorted(np.bincount(table.column("prompt").to_numpy()).tolist()) == SIZES[step]
    rows = expected["row"].to_numpy()
    assert table.column("prompt").to_numpy()[rows].tolist() == expected["group_index"].tolist()
    assert (table.column("trajectory").to_numpy()[rows] % (1 << 31)).tolist() == expected["traj_pos"].tolist()
    recomputed = rollaudit.recompute(table, ["art-grpo", "art-grpo(scale=none)"], device="cpu")
    for column, name in ((0, "art_grpo_scaled"), (1, "art_grpo_unscaled")):
        values = expected[name].to_numpy()
        keep = ~np.isnan(values)  # a trajectory without a trainable turn yields no training row upstream
        assert int((~keep).sum()) == 1
        worst = assert_matches(
            f"art: {['art-grpo', 'art-grpo(scale=none)'][column]} = {name} (step {step})",
            recomputed.column(column).to_numpy()[rows],
            values,
            keep,
        )
        assert worst <= 1e-15


def test_compare_on_the_directory_above_the_dot_directory():
    report = compare_json(corpus("art"))
    assert report["load"]["format"] == "art" and report["info"]["step_values"] == [3, 4]
    assert report["trained_with"]["scheme"] == "art-grpo"
    assert report["trained_with"]["evidence"] == "framework default"
    assert report["info"]["samples"] == 114 and report["info"]["prompts"] == 24


def test_two_art_runs_are_named_never_merged(tmp_path):
    import shutil

    for model in ("agent-001", "agent-002"):
        target = tmp_path / ".art" / "p" / "models" / model / "trajectories" / "train"
        target.mkdir(parents=True)
        shutil.copy(corpus("art") / ".art" / TRAIN / "0003.parquet", target / "0003.parquet")
    with pytest.raises(InputError, match=r"holds 2 runs \(not merged\): p/models/agent-001 \(art"):
        rollaudit.load(tmp_path)
    assert list(rollaudit.find_runs(tmp_path)) == ["p/models/agent-001", "p/models/agent-002"]
    assert rollaudit.load(tmp_path, run="agent-002").num_rows == rollaudit.load(tmp_path, run="agent-001").num_rows
