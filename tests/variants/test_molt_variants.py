"""Molt runs written by Molt's own code beyond the corpus (``tests/fixtures/variants/molt``): each group estimator
as the run's own setting, rewards past the clip, multi-segment rollouts, another clip range, force_sync_mode, and
8 data-parallel ranks whose balancing drops samples after the dump; each with the values Molt's own
compute_advantages_and_returns gave. Molt saves no config: the run's settings are given as a user would, with
``--config``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import rollaudit


def pc_is_null(column) -> np.ndarray:
    return np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)


VARIANTS = Path(__file__).resolve().parents[1] / "fixtures" / "variants" / "molt"
NAMES = sorted(path.name for path in VARIANTS.iterdir() if path.is_dir()) if VARIANTS.is_dir() else []
GROUP_PRESETS = {
    "grpo": "molt-grpo",
    "dr_grpo": "molt-dr-grpo",
    "rloo": "molt-rloo",
    "reinforce_baseline": "molt-reinforce-baseline",
}


def _expected(name: str):
    frame = pq.read_table(VARIANTS / name / "expected.parquet").to_pandas()
    return frame.sort_values(["file_step", "index"]).reset_index(drop=True)


def _config(tmp_path: Path, expected) -> Path:
    """The run's settings, as a user would write them for --config (Molt saves none)."""
    estimator = str(expected["estimator"].iloc[0])
    clipped, stored = expected["reward_clipped"].to_numpy(), expected["reward_stored"].to_numpy()
    bound = 5.0 if np.any((np.abs(stored) > 5) & (np.abs(clipped) == 5)) else 10.0
    # 8 ranks where balancing dropped samples (dp8_balance), else the 1 actor GPU of the other runs.
    gpus = 1 if (expected["trained_at_step"] >= 0).all() else 8
    path = tmp_path / "config.yaml"
    path.write_text(
        f"algo:\n  advantage:\n    estimator: {estimator}\nreward:\n  clip_range: [-{bound}, {bound}]\n"
        f"actor:\n  num_gpus_per_node: {gpus}\n"
    )
    return path


@pytest.mark.parametrize("name", NAMES)
def test_the_group_estimators_equal_molts_own(tmp_path, name):
    expected = _expected(name)
    table = rollaudit.load(VARIANTS / name / "rollout_dump", config=_config(tmp_path, expected))
    assert table.num_rows == len(expected)
    assert table.column("prompt").to_pylist() == expected["group_id"].tolist()
    assert table.column("trajectory").to_pylist() == expected["rollout_id"].tolist()
    assert np.array_equal(table.column("clipped_reward").to_numpy(), expected["reward_clipped"].to_numpy())
    trained = expected["trained_at_step"].to_numpy() >= 0
    # Balancing drops each step's trailing samples past a multiple of the ranks, before the advantages: with the
    # ranks in the config, those rows are not trained, and the others' advantages are Molt's.
    assert np.array_equal(
        pc_is_null(table.column("not_trained"))
        if "not_trained" in table.column_names
        else np.ones(table.num_rows, dtype=bool),
        trained,
    )
    presets = list(GROUP_PRESETS.values())
    recomputed = rollaudit.recompute(table, presets, device="cpu")
    for index, estimator in enumerate(GROUP_PRESETS):
        want = expected[f"molt_{estimator}_first"].to_numpy()
        keep = trained & np.isfinite(want)
        actual = recomputed.column(index).to_numpy()[keep]
        assert np.max(np.abs(actual - want[keep]) / np.maximum(1.0, np.abs(want[keep]))) <= 1e-6, (name, estimator)


@pytest.mark.parametrize("name", NAMES)
def test_the_config_names_the_runs_estimator_as_a_fact(tmp_path, name):
    expected = _expected(name)
    config = _config(tmp_path, expected)
    report = rollaudit.audit(rollaudit.load(VARIANTS / name / "rollout_dump", config=config), device="cpu")
    estimator = str(expected["estimator"].iloc[0])
    trained = report.trained_with
    if estimator in GROUP_PRESETS:
        assert (trained.scheme, trained.evidence) == (GROUP_PRESETS[estimator], "config")
        assert "config.yaml" in trained.why and f"algo.advantage.estimator={estimator}" in trained.why
    else:
        assert trained.scheme is None and "not reproducible" in trained.why
