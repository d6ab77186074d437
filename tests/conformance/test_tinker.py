"""tinker-cookbook's own rollout summaries against its own compute_advantages (both iterations)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

import rollaudit
from tests.conformance.conftest import assert_matches, compare_json, corpus

# The README's table: 68 trajectories in 12 groups a file, of these sizes.
SIZES = [1, 3, 4, 4, 6, 6, 6, 6, 8, 8, 8, 8]


@pytest.mark.parametrize("iteration", [3, 4])
def test_tinker_center_equals_tinkers_own_values(iteration):
    path = corpus("tinker") / f"iteration_{iteration:06d}" / "train_rollout_summaries.jsonl"
    table = rollaudit.load(path)
    expected = pq.read_table(corpus("tinker") / f"expected_iteration_{iteration:06d}.parquet").to_pandas()
    assert table.num_rows == 68 and set(table.column("step").to_pylist()) == {iteration}
    sizes = np.bincount(table.column("prompt").to_numpy())
    assert sorted(sizes.tolist()) == SIZES
    assert len(set(table.column("trajectory").to_pylist())) == 68
    # One expected row per training datum: each is its trajectory's line (several datums may share one).
    lines = expected["line"].to_numpy()
    assert table.column("prompt").to_numpy()[lines].tolist() == expected["group_idx"].tolist()
    assert table.column("reward").to_numpy()[lines].tolist() == expected["total_reward"].tolist()
    presets = ["tinker-center", "prompt(scale=none)", "tinker-center(drop=constant)"]
    recomputed = rollaudit.recompute(table, presets, device="cpu")
    worst = assert_matches(
        f"tinker: tinker-center = tinker_center (iteration {iteration})",
        recomputed.column(0).to_numpy()[lines],
        expected["tinker_center"],
    )
    assert worst <= 6e-8  # float32 as upstream: 0.0 and 6.0e-08, the README's own self-check
    assert_matches(
        f"tinker: prompt(scale=none) = tinker_center (iteration {iteration})",
        recomputed.column(1).to_numpy()[lines],
        expected["tinker_center"],
    )
    # remove_constant_reward_groups: the dropped groups are NaN on both sides (not trained).
    dropped = recomputed.column(2).to_numpy()[lines]
    assert np.array_equal(np.isnan(dropped), expected["dropped_constant_reward_group"].to_numpy())
    assert_matches(
        f"tinker: tinker-center(drop=constant) = tinker_center_rcg (iteration {iteration})",
        dropped,
        expected["tinker_center_rcg"],
    )


def test_compare_on_the_run_directory_names_tinker_and_its_default():
    report = compare_json(corpus("tinker"))
    assert report["load"]["format"] == "tinker" and report["info"]["steps"] == 2
    assert report["trained_with"]["scheme"] == "tinker-center"
    assert report["trained_with"]["evidence"] == "framework default"
    assert report["info"]["samples"] == 136 and report["info"]["prompts"] == 24
