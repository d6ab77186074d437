"""verl's two RLOO estimators, run with verl's own code on one batch (``tests/findings/upstream_verl.py``:
verl-project/verl 1dda039, ``compute_advantage`` with ``rloo`` and ``rloo_vectorized``): ``rloo`` leaves a
one-sample prompt its raw reward (verl #7150), ``rloo_vectorized`` gives it 0.

The rows that must show ``singleton-raw-reward`` are computed here from the table alone: the one-sample prompts
whose reward is not 0 (a one-sample prompt with reward 0 gets 0 from both estimators, so it shows nothing).
"""

from __future__ import annotations

import numpy as np

from tests.findings.upstream_fixtures import FIXTURES, audit, columns

RLOO = FIXTURES / "verl_rloo.parquet"
RLOO_VECTORIZED = FIXTURES / "verl_rloo_vectorized.parquet"
FLOAT32 = 1e-6
"""verl computes in float32: its values are within this of the exact ones here (|A| < 2)."""


def group_sizes(table: dict[str, np.ndarray]) -> np.ndarray:
    """Per row: how many rows share its (step, prompt_id)."""
    keys = list(zip(table["step"].tolist(), table["prompt_id"].tolist(), strict=True))
    counts: dict[tuple[int, str], int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    return np.asarray([counts[key] for key in keys])


def leave_one_out(table: dict[str, np.ndarray]) -> np.ndarray:
    """r minus the mean of the prompt's other samples; 0 for a one-sample prompt."""
    reward, sizes = table["reward"], group_sizes(table)
    keys = np.asarray([f"{step}/{prompt}" for step, prompt in zip(table["step"], table["prompt_id"], strict=True)])
    out = np.zeros(len(reward))
    for key in np.unique(keys):
        at = np.flatnonzero(keys == key)
        if at.size > 1:
            out[at] = reward[at] - (reward[at].sum() - reward[at]) / (at.size - 1)
    assert np.all(out[sizes == 1] == 0)
    return out


def raw_singletons(table: dict[str, np.ndarray]) -> set[int]:
    """The rows of one-sample prompts whose reward is not 0."""
    return set(np.flatnonzero((group_sizes(table) == 1) & (table["reward"] != 0)).tolist())


def test_fixtures_hold_what_verl_computed() -> None:
    rloo, vectorized = columns(RLOO), columns(RLOO_VECTORIZED)
    assert set(rloo) == {"step", "prompt_id", "reward", "advantage"}
    for name in ("step", "prompt_id", "reward"):
        assert np.array_equal(rloo[name], vectorized[name]), name
    sizes = group_sizes(rloo)
    single = sizes == 1
    assert set(rloo["step"].tolist()) == {0, 1, 2}
    assert int(single.sum()) == 6 and bool(np.any(rloo["reward"][single] == 0))
    expected = leave_one_out(rloo)
    assert np.abs(rloo["advantage"] - expected)[~single].max() < FLOAT32
    assert np.abs(vectorized["advantage"] - expected).max() < FLOAT32
    assert np.array_equal(rloo["advantage"][single], rloo["reward"][single])
    assert np.all(vectorized["advantage"][single] == 0)


def test_rloo_gets_singleton_raw_reward_on_its_one_sample_prompts() -> None:
    table = columns(RLOO)
    expected = raw_singletons(table)
    assert len(expected) == 5
    report = audit(RLOO)
    assert report.trained_with.scheme == "verl-rloo"
    assert [finding.code for finding in report.findings] == ["singleton-raw-reward"], [
        finding.to_dict() for finding in report.findings
    ]
    finding = report.findings[0]
    assert finding.severity == "error"
    assert finding.rows == len(expected)
    assert finding.groups == len(expected)
    assert set(finding.steps) == {int(table["step"][row]) for row in expected}
    assert finding.examples
    for example in finding.examples:
        assert len(example.rows) == 1 and set(example.rows) <= expected, example.to_dict()
        (row,) = example.rows
        assert example.step == int(table["step"][row]) and example.prompt == table["prompt_id"][row]


def test_rloo_vectorized_gets_no_finding() -> None:
    report = audit(RLOO_VECTORIZED)
    assert report.findings == [], [finding.to_dict() for finding in report.findings]
    # areal-loo is the same arithmetic (r minus the mean of the others, a one-row group 0), and so is swift-rloo, in
    # the float32 verl computed in too: on a table that names no framework, either may fit best.
    assert report.trained_with.scheme in {"verl-rloo-vectorized", "areal-loo", "swift-rloo"}
