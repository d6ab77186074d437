"""The findings the field's reproductions must get (``tests/findings/reproductions.py``): each defective table its
code, on the rows that show it; each control none, and a named preset for what it trained with.

The self-checks below them hold the reproductions themselves to rollaudit's own arithmetic: each control's
advantages are its preset's (``rollaudit.recompute``), each defective table's are the buggy framework's, and the
rows said to show a defect are exactly the rows where the two tables differ.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import rollaudit
from tests.findings.reproductions import (
    AREAL_EPS,
    CASES,
    GRPO_EPS,
    REJECTED,
    Reproduction,
    write_parquet,
)

CASE_IDS = list(CASES)


@functools.cache
def reproduction(case: str) -> Reproduction:
    return CASES[case]()


def values(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False))


def audit_file(table: pa.Table, path: Path) -> rollaudit.Report:
    """``rollaudit.audit(rollaudit.load(path))`` of ``table`` written to ``path`` as Parquet."""
    write_parquet(table, path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rollaudit.RollauditWarning)
        return rollaudit.audit(rollaudit.load(path))


def described(report: rollaudit.Report) -> list[dict[str, Any]]:
    return [finding.to_dict() for finding in report.findings]


# ---------------------------------------------------------------------------------------------------------------------
# What the audit must find (fails until detection lands).


@pytest.mark.parametrize("case", CASE_IDS)
def test_defective_table_gets_its_code_on_its_rows(case: str, tmp_path: Path) -> None:
    repro = reproduction(case)
    report = audit_file(repro.defective, tmp_path / "defective.parquet")
    codes = [finding.code for finding in report.findings]
    assert repro.code in codes, f"{case}: expected {repro.code}, found {codes}"
    finding = next(finding for finding in report.findings if finding.code == repro.code)
    assert finding.rows == len(repro.rows), f"{case}: {finding.to_dict()}"
    assert finding.examples, f"{case}: a finding with no example to look at: {finding.to_dict()}"
    expected = set(repro.rows)
    steps = values(repro.defective, "step")
    for example in finding.examples:
        assert example.rows, f"{case}: an example without rows: {example.to_dict()}"
        assert set(example.rows) <= expected, f"{case}: {example.to_dict()} outside the rows {sorted(expected)}"
        assert {int(steps[row]) for row in example.rows} == {example.step}, f"{case}: {example.to_dict()}"
    assert finding.to_dict()["code"] == repro.code


@pytest.mark.parametrize("case", CASE_IDS)
def test_control_table_gets_no_finding(case: str, tmp_path: Path) -> None:
    repro = reproduction(case)
    report = audit_file(repro.control, tmp_path / "control.parquet")
    assert report.findings == [], f"{case}: {described(report)}"
    assert report.trained_with.scheme is not None, f"{case}: {report.trained_with.to_dict()}"


def test_compare_prints_the_code(tmp_path: Path) -> None:
    path = write_parquet(reproduction("batch-as-group").defective, tmp_path / "batch.parquet")
    environment = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "rollaudit", "compare", str(path), "--no-cache"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "batch-as-group" in done.stdout, done.stdout


# ---------------------------------------------------------------------------------------------------------------------
# Self-checks: the reproductions are what they say (these pass today).


def canonical(repro: Reproduction, rows: np.ndarray, keys: np.ndarray | None = None) -> pa.Table:
    """The reproduction's ``rows`` as a canonical table, grouped by ``keys`` (default: the true prompt)."""
    table = repro.defective
    extra: dict[str, Any] = {}
    if "agent" in table.column_names:
        extra["agent"] = values(table, "agent")[rows]
    trajectory = values(table, "trajectory_id")[rows] if "trajectory_id" in table.column_names else None
    prompt = values(table, "prompt_id") if keys is None else keys
    return rollaudit.make_table(
        reward=values(table, "reward")[rows],
        prompt=prompt[rows],
        trajectory=trajectory,
        step=values(table, "step")[rows],
        **extra,
    )


def recomputed(table: pa.Table, scheme: str) -> np.ndarray:
    return values(rollaudit.recompute(table, [scheme]), f"advantage:{scheme}").astype(np.float64)


def tolerance(scheme: str | None) -> dict[str, float]:
    """float64 presets to the last digits; NeMo-RL's float32 moments to float32's rounding."""
    return {"rtol": 1e-5, "atol": 1e-6} if scheme and scheme.startswith("nemo") else {"rtol": 1e-9, "atol": 1e-12}


@pytest.mark.parametrize("case", CASE_IDS)
def test_control_holds_its_presets_advantages(case: str) -> None:
    repro = reproduction(case)
    trained = np.flatnonzero(repro.trained)
    expected = recomputed(canonical(repro, trained), repro.control_scheme)
    control = values(repro.control, "advantage")
    close = tolerance(repro.control_scheme)
    np.testing.assert_allclose(control[trained], expected, close["rtol"], close["atol"])
    assert np.all(control[~repro.trained] == 0.0)


@pytest.mark.parametrize("case", CASE_IDS)
def test_defective_holds_the_buggy_frameworks_advantages(case: str) -> None:
    repro = reproduction(case)
    defective = values(repro.defective, "advantage")
    if repro.defective_scheme is None:  # rows-misaligned: the control's column, rolled
        assert repro.shift > 0
        np.testing.assert_array_equal(np.roll(defective, -repro.shift), values(repro.control, "advantage"))
        return
    every = np.arange(repro.defective.num_rows)
    # Every row of the framework's groups counts, trained or not (masked-rows-in-baseline: the defect itself).
    expected = recomputed(canonical(repro, every, repro.defective_keys), repro.defective_scheme)
    trained = repro.trained
    close = tolerance(repro.defective_scheme)
    np.testing.assert_allclose(defective[trained], expected[trained], close["rtol"], close["atol"], equal_nan=True)


@pytest.mark.parametrize("case", CASE_IDS)
def test_rows_that_show_it_are_the_rows_that_differ(case: str) -> None:
    repro = reproduction(case)
    defective, control = values(repro.defective, "advantage"), values(repro.control, "advantage")
    differ = repro.trained & ~np.isclose(defective, control, rtol=1e-9, atol=1e-12, equal_nan=True)
    assert tuple(int(row) for row in np.flatnonzero(differ)) == repro.rows
    assert repro.rows, case


@pytest.mark.parametrize("case", CASE_IDS)
def test_layout(case: str, tmp_path: Path) -> None:
    """3 steps of about 10 prompts; the two tables alike but the advantage; the rows as rollaudit reads them."""
    repro = reproduction(case)
    defective, control = repro.defective, repro.control
    assert defective.schema == control.schema
    assert defective.drop_columns(["advantage"]).equals(control.drop_columns(["advantage"]))
    assert defective.column_names[:2] == ["step", "prompt_id"]
    assert defective.column_names[-2:] == ["reward", "advantage"]
    assert defective.schema.field("step").type == pa.int64() and defective.schema.field("reward").type == pa.float64()
    step, prompt = values(defective, "step"), values(defective, "prompt_id")
    assert sorted(set(step.tolist())) == [0, 1, 2] and np.all(np.diff(step) >= 0)
    for at_step in (0, 1, 2):
        assert 9 <= len(set(prompt[step == at_step].tolist())) <= 11
    assert list(repro.rows) == sorted(set(repro.rows))
    assert repro.rows[0] >= 0 and repro.rows[-1] < defective.num_rows
    loaded = rollaudit.load(write_parquet(defective, tmp_path / "defective.parquet"))
    assert loaded.num_rows == defective.num_rows
    np.testing.assert_array_equal(values(loaded, "step"), step)
    np.testing.assert_array_equal(values(loaded, "prompt"), prompt)
    np.testing.assert_array_equal(values(loaded, "reward"), values(defective, "reward"))
    recorded = values(loaded, "recorded_advantage").astype(np.float64)
    np.testing.assert_array_equal(recorded, values(defective, "advantage"))  # NaN where NaN
    if "trajectory_id" in defective.column_names:
        np.testing.assert_array_equal(values(loaded, "trajectory"), values(defective, "trajectory_id"))
    if "agent" in defective.column_names:
        np.testing.assert_array_equal(values(loaded, "agent"), values(defective, "agent"))


def test_grpo_matches_recompute_by_hand() -> None:
    """The arithmetic the reproductions use, on a hand-sized table, against ``rollaudit.recompute``."""
    reward = np.asarray([1.0, 0.0, 0.0, 1.0, 1.0, 0.3, 0.9, 0.6, 2.0])
    prompt = np.asarray([7, 7, 7, 8, 8, 9, 9, 9, 10])
    table = rollaudit.make_table(reward=reward, prompt=prompt)
    mean, std = 1 / 3, np.std([1.0, 0.0, 0.0], ddof=1)
    by_hand = [(r - mean) / (std + GRPO_EPS) for r in (1.0, 0.0, 0.0)] + [0.0, 0.0]
    by_hand += [(r - 0.6) / (np.std([0.3, 0.9, 0.6], ddof=1) + GRPO_EPS) for r in (0.3, 0.9, 0.6)] + [0.0]
    np.testing.assert_allclose(recomputed(table, "prompt"), by_hand, rtol=1e-12)
    np.testing.assert_allclose(recomputed(table, "dr-grpo"), [2 / 3, -1 / 3, -1 / 3, 0, 0, -0.3, 0.3, 0, 0], atol=1e-12)


# ---------------------------------------------------------------------------------------------------------------------
# Self-checks: what each defect looks like in its rows.


def test_near_constant_rows_blow_up_in_float32() -> None:
    repro = reproduction("near-constant-blowup")
    defective, control = values(repro.defective, "advantage"), values(repro.control, "advantage")
    reward, prompt = values(repro.defective, "reward"), values(repro.defective, "prompt_id")
    rows = list(repro.rows)
    assert len(rows) == 3
    assert np.all((np.abs(defective[rows]) > 100) & (np.abs(defective[rows]) < 1e5)), defective[rows]
    assert np.max(np.abs(control)) < 3
    for row in rows:
        peers = np.setdiff1d(np.flatnonzero(prompt == prompt[row]), [row])
        assert len(peers) == 7 and len(set(reward[peers].tolist())) == 1  # the true leave-one-out std is 0
        assert control[row] == pytest.approx(float(np.float32(reward[row]) - np.float32(reward[peers[0]])), abs=1e-6)


def test_tail_rows_are_reward_over_eps() -> None:
    repro = reproduction("tail-rows-unnormalised")
    defective, reward = values(repro.defective, "advantage"), values(repro.defective, "reward")
    rows = list(repro.rows)
    np.testing.assert_allclose(defective[rows], reward[rows] / AREAL_EPS)
    assert np.all(defective[rows] > 4.99e4)  # a reward of 1 is 1e5, of 0.5 5e4
    counts = np.bincount(values(repro.defective, "step"))
    assert [int(count) % 4 for count in counts] == [2, 3, 1]


def test_singleton_cases() -> None:
    nan = reproduction("nan-advantages")
    rows = list(nan.rows)
    assert np.all(np.isnan(values(nan.defective, "advantage")[rows]))
    assert np.all(np.isfinite(values(nan.defective, "reward")))
    assert np.all(values(nan.control, "advantage")[rows] == 0.0)
    raw = reproduction("singleton-raw-reward")
    rows = list(raw.rows)
    np.testing.assert_allclose(values(raw.defective, "advantage")[rows], 1.0 / (1.0 + GRPO_EPS))
    assert np.all(values(raw.control, "advantage")[rows] == 0.0)
    for repro in (nan, raw):
        prompt = values(repro.defective, "prompt_id")
        lone = [row for row in range(len(prompt)) if (prompt == prompt[row]).sum() == 1]
        assert lone == list(repro.rows)


def test_masked_rows_are_rejected_and_outside_the_rows_that_show_it() -> None:
    repro = reproduction("masked-rows-in-baseline")
    status = values(repro.defective, "status")
    rejected = np.flatnonzero(status == REJECTED)
    assert len(rejected) >= 9 and not set(rejected.tolist()) & set(repro.rows)
    prompt = values(repro.defective, "prompt_id")
    assert set(prompt[list(repro.rows)].tolist()) == set(prompt[rejected].tolist())


def test_rows_misaligned_first_rows_get_the_last() -> None:
    for shift in (1, 2):
        repro = reproduction(f"rows-misaligned/shift-{shift}")
        defective, control = values(repro.defective, "advantage"), values(repro.control, "advantage")
        np.testing.assert_array_equal(defective[:shift], control[-shift:])
        np.testing.assert_array_equal(defective[shift:], control[:-shift])


def test_turn_level_rows_change_by_a_fifth_or_more() -> None:
    repro = reproduction("turn-level-bias")
    defective, control = values(repro.defective, "advantage"), values(repro.control, "advantage")
    rows = list(repro.rows)
    change = np.abs(defective[rows] - control[rows]) / np.maximum(np.abs(defective[rows]), np.abs(control[rows]))
    assert np.all(change >= 0.2)
    trajectory, prompt = values(repro.defective, "trajectory_id"), values(repro.defective, "prompt_id")
    for key in set(prompt[rows].tolist()):
        lengths = np.unique(trajectory[prompt == key], return_counts=True)[1]
        assert len(set(lengths.tolist())) > 1  # trajectories of several lengths


def test_mixed_scales_differ_tenfold() -> None:
    repro = reproduction("mixed-reward-scales")
    agent, reward, prompt = (values(repro.defective, name) for name in ("agent", "reward", "prompt_id"))
    for key in set(prompt.tolist()):
        solver = reward[(prompt == key) & (agent == "solver")]
        judge = reward[(prompt == key) & (agent == "judge")]
        assert len(solver) >= 2 and len(judge) >= 2
        assert np.ptp(judge) >= 4 >= 1 >= np.ptp(solver) and np.max(solver) <= 1
