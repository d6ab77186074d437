"""agent-lightning's GRPO advantages before and after its PR #462, run with agent-lightning's own code on one
batch of multi-call rollouts (``tests/findings/upstream_agl.py``: the batch built by
``AgentModeDaemon.get_train_data_batch``, one row per LLM call carrying its rollout's reward in bfloat16; before:
verl's ``compute_advantage`` over every row of a data_id; after: the PR's ``compute_grpo_outcome_advantage`` with
``compute_mean_std_cross_all_data=False``, each rollout once).

Before #462 a rollout of k calls counts k times in its prompt's mean and std: ``turn-level-bias``, a warning, on the
rows whose advantage moves when each rollout counts once. Those rows are computed here from the table alone, in
float64: the generator chose the batch so that every row moves by 0 or by at least ``MARGIN``, far more than the
bfloat16 error, so the set does not hang on the precision.
"""

from __future__ import annotations

import numpy as np

from tests.findings.upstream_fixtures import FIXTURES, audit, columns

BEFORE = FIXTURES / "agl_before_462.parquet"
AFTER = FIXTURES / "agl_after_462.parquet"
MARGIN = 0.15
"""The least move of a row that moves (``tests/findings/upstream_agl.py``)."""
BFLOAT16 = 0.075
"""agent-lightning's scores and verl's GRPO arithmetic are bfloat16 here: values within this of the float64 ones."""


def _grpo(reward: np.ndarray) -> np.ndarray:
    """(r - mean) / (unbiased std + 1e-6) over one group of at least two members."""
    assert reward.size > 1
    return (reward - reward.mean()) / (reward.std(ddof=1) + 1e-6)


def grpo(table: dict[str, np.ndarray], *, once: bool) -> np.ndarray:
    """GRPO per (step, prompt_id): every row a member, or (``once``) each trajectory once with its reward, its
    advantage given to all its rows."""
    prompt = np.asarray([f"{step}/{key}" for step, key in zip(table["step"], table["prompt_id"], strict=True)])
    out = np.zeros(len(prompt))
    for key in np.unique(prompt):
        at = np.flatnonzero(prompt == key)
        if not once:
            out[at] = _grpo(table["reward"][at])
            continue
        _, first, member = np.unique(table["trajectory_id"][at], return_index=True, return_inverse=True)
        out[at] = _grpo(table["reward"][at][first])[member.reshape(-1)]
    return out


def moved_rows(table: dict[str, np.ndarray]) -> np.ndarray:
    """The rows whose advantage moves when each trajectory counts once."""
    moved = np.abs(grpo(table, once=False) - grpo(table, once=True))
    assert np.all((moved == 0) | (moved >= MARGIN)), "a row moves by less than the margin"
    return np.flatnonzero(moved > 0)


def test_fixtures_hold_what_agent_lightning_computed() -> None:
    before, after = columns(BEFORE), columns(AFTER)
    assert set(before) == {"step", "prompt_id", "trajectory_id", "reward", "advantage"}
    for name in ("step", "prompt_id", "trajectory_id", "reward"):
        assert np.array_equal(before[name], after[name]), name
    assert set(before["step"].tolist()) == {0, 1, 2}
    trajectories: dict[str, set[float]] = {}
    prompts: dict[tuple[int, str], set[str]] = {}
    for step, prompt, trajectory, reward in zip(
        before["step"], before["prompt_id"], before["trajectory_id"], before["reward"], strict=True
    ):
        trajectories.setdefault(trajectory, set()).add(float(reward))
        prompts.setdefault((int(step), prompt), set()).add(trajectory)
    assert all(len(rewards) == 1 for rewards in trajectories.values()), "a trajectory's rows with several rewards"
    assert {len(members) for members in prompts.values()} <= {2, 3, 4}
    calls = {int(np.sum(before["trajectory_id"] == trajectory)) for trajectory in trajectories}
    assert calls == {1, 2, 3, 4}
    assert set(np.unique(before["reward"]).tolist()) - {0.0, 1.0}, "no continuous reward"
    assert np.abs(before["advantage"] - grpo(before, once=False)).max() < BFLOAT16
    assert np.abs(after["advantage"] - grpo(after, once=True)).max() < BFLOAT16


def test_before_462_gets_turn_level_bias_on_the_rows_that_move() -> None:
    table = columns(BEFORE)
    expected = set(moved_rows(table).tolist())
    assert len(expected) == 78
    report = audit(BEFORE)
    codes = [finding.code for finding in report.findings]
    assert "turn-level-bias" in codes, [finding.to_dict() for finding in report.findings]
    finding = next(finding for finding in report.findings if finding.code == "turn-level-bias")
    assert finding.severity == "warning"
    assert finding.rows == len(expected)
    assert finding.detail["rows_moved"] == len(expected)
    groups = {(int(table["step"][row]), table["prompt_id"][row]) for row in expected}
    assert finding.groups == len(groups)
    assert set(finding.steps) == {step for step, _ in groups}
    assert finding.examples
    for example in finding.examples:
        assert example.rows and set(example.rows) <= expected, example.to_dict()
        assert {(int(table["step"][row]), table["prompt_id"][row]) for row in example.rows} == {
            (example.step, example.prompt)
        }


def test_before_462_gets_no_error() -> None:
    report = audit(BEFORE)
    errors = [finding.to_dict() for finding in report.findings if finding.severity == "error"]
    assert errors == []


def test_after_462_gets_no_finding_and_no_advice() -> None:
    report = audit(AFTER)
    assert report.findings == [], [finding.to_dict() for finding in report.findings]
    assert report.advice == []
    # agl-rollout: each trajectory once with its first row's reward, verl's GRPO (a singleton raw), in bfloat16:
    # the PR's arithmetic.
    assert report.trained_with.scheme == "agl-rollout"
