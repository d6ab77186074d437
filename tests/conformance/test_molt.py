"""Molt's own rollout_step{N}.pt dumps, read without running anything, against Molt's own estimators."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import rollaudit
from tests.conformance.conftest import assert_matches, corpus

# preset -> the column of Molt's compute_advantages_and_returns with that estimator (first action token)
UPSTREAM = {
    "molt-grpo": "molt_grpo_first",
    "molt-dr-grpo": "molt_dr_grpo_first",
    "molt-rloo": "molt_rloo_first",
    "molt-reinforce-baseline": "molt_reinforce_baseline_first",
    "molt-reinforce-nokl": "molt_reinforce_nokl_first",
}


def _expected():
    frame = pq.read_table(corpus("molt") / "expected_reinforce_default.parquet").to_pandas()
    return frame.sort_values(["file_step", "index"]).reset_index(drop=True)


def test_the_dumps_read_as_their_groups_and_rollouts():
    table = rollaudit.load(corpus("molt") / "reinforce_default" / "rollout_dump")
    expected = _expected()
    assert table.num_rows == 26 == len(expected)
    assert table.column("prompt").to_pylist() == expected["group_id"].tolist()
    assert table.column("trajectory").to_pylist() == expected["rollout_id"].tolist()
    assert table.column("step").to_pylist() == expected["file_step"].tolist()
    assert_matches("molt: reward = reward_stored", table.column("reward"), expected["reward_stored"], tolerance=0)
    assert_matches("molt: clipped", table.column("clipped_reward"), expected["reward_clipped"], tolerance=0)
    assert table.column("response_length").to_pylist() == expected["n_action_tokens"].astype(float).tolist()
    report = rollaudit.audit(table, device="cpu")
    assert report.info["prompts"] == 6 and report.info["samples"] == 26


@pytest.mark.parametrize("preset", sorted(UPSTREAM))
def test_each_group_estimator_equals_molts_own(preset):
    table = rollaudit.load(corpus("molt") / "reinforce_default" / "rollout_dump")
    recomputed = rollaudit.recompute(table, [preset], device="cpu")
    assert_matches(
        f"molt: {preset} = {UPSTREAM[preset]}", recomputed.column(0), _expected()[UPSTREAM[preset]], tolerance=1e-7
    )


def test_the_default_estimator_is_said_not_reproducible_and_the_lost_batch_named():
    report = rollaudit.audit(rollaudit.load(corpus("molt") / "reinforce_default" / "rollout_dump"), device="cpu")
    assert report.trained_with.scheme is None
    assert "per-token KL" in report.trained_with.why and "not reproducible" in report.trained_with.why
    assert any("rollout_step0.pt holds Molt's second generation batch" in note for note in report.info["loader_notes"])


def test_no_code_of_molt_or_ray_is_imported_or_run():
    """The pickles name molt's Experience and ray.ObjectRef: reading them imports neither, in a fresh process."""
    script = (
        "import sys, rollaudit; "
        f"t = rollaudit.load({str(corpus('molt') / 'reinforce_default' / 'rollout_dump')!r}); "
        "assert t.num_rows == 26; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('molt', 'ray')))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
