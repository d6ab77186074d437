"""rollaudit on AReaL's own reward normalisation (``tests/findings/upstream_areal.py`` wrote the fixtures, from
AReaL at cbff54d6; AReaL #1419 and #1673).

Without group metadata AReaL slices each batch into consecutive groups of ``group_size`` rows; the rows after the
last full slice keep mean 0 and std 0 and get ``r / 1e-5``. The defective fixtures must get
``tail-rows-unnormalised`` on exactly those rows; the controls (the same batches with ``traj_group_sizes`` given,
and batches whose prompts are the slices) must get no finding and a named preset.

The rows that show the defect are computed here from the table alone: each step's rows past its last full slice.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.findings.upstream_fixtures import (
    assert_control_is_a_preset,
    assert_found_on,
    audit,
    column,
    described,
    fixture,
)

CODE = "tail-rows-unnormalised"
EPS = 1e-5
DEFECTIVE = {"areal_stride_binary": 4, "areal_stride_continuous": 8}
"""Fixture: AReaL's group_size (the stride)."""
CONTROLS = {"areal_group_binary": 4, "areal_group_continuous": 8, "areal_stride_divisible": 4}


def tail_rows(table: pa.Table, stride: int) -> list[int]:
    """Each step's rows after its last full slice of ``stride`` (rows in batch order within a step)."""
    step = column(table, "step")
    rows: list[int] = []
    for at_step in np.unique(step):
        in_step = np.flatnonzero(step == at_step)
        rows += in_step[len(in_step) - len(in_step) % stride :].tolist()
    return sorted(rows)


def per_prompt(table: pa.Table) -> np.ndarray:
    """AReaL's group norm per prompt: (r - mean) / (unbiased std + eps), a one-row prompt 0."""
    reward, key = column(table, "reward"), column(table, "step") * 1_000_000 + column(table, "prompt_id")
    out = np.zeros(len(reward))
    for value in np.unique(key):
        rows = key == value
        std = reward[rows].std(ddof=1) if rows.sum() > 1 else 1.0
        out[rows] = (reward[rows] - reward[rows].mean()) / (std + EPS)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# The fixtures are what they say (numpy, not rollaudit).


@pytest.mark.parametrize("name", [*DEFECTIVE, *CONTROLS])
def test_fixture_layout(name: str) -> None:
    path = fixture(name)
    assert path.stat().st_size < 50_000
    table = pq.read_table(path)
    assert table.column_names == ["step", "prompt_id", "reward", "advantage"]
    step = column(table, "step")
    assert sorted(set(step.tolist())) == [0, 1, 2] and np.all(np.diff(step) >= 0)
    for at_step in (0, 1, 2):
        assert 35 <= int((step == at_step).sum()) <= 45


@pytest.mark.parametrize("name", list(DEFECTIVE))
def test_defective_fixture_is_the_stride_arithmetic(name: str) -> None:
    """Tail rows r / eps (float32); every other row its prompt's value; no tail row ties with its prompt's."""
    table = pq.read_table(fixture(name))
    reward, advantage = column(table, "reward"), column(table, "advantage")
    tail = np.zeros(table.num_rows, dtype=bool)
    tail[tail_rows(table, DEFECTIVE[name])] = True
    assert tail.any() and not tail.all()
    np.testing.assert_allclose(advantage[tail], (reward[tail] / EPS).astype(np.float32), rtol=1e-6)
    correct = per_prompt(table)
    np.testing.assert_allclose(advantage[~tail], correct[~tail], rtol=1e-5, atol=1e-5)
    assert not np.isclose(advantage[tail], correct[tail], rtol=1e-5, atol=1e-5).any()


@pytest.mark.parametrize("name", list(CONTROLS))
def test_control_fixture_is_per_prompt(name: str) -> None:
    table = pq.read_table(fixture(name))
    np.testing.assert_allclose(column(table, "advantage"), per_prompt(table), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# What rollaudit must say.


@pytest.mark.parametrize("name", list(DEFECTIVE))
def test_defective_gets_tail_rows_unnormalised_on_the_tail(name: str) -> None:
    expected = tail_rows(pq.read_table(fixture(name)), DEFECTIVE[name])
    assert_found_on(name, CODE, expected, DEFECTIVE[name])


@pytest.mark.parametrize("name", list(DEFECTIVE))
def test_defective_gets_no_other_code(name: str) -> None:
    """The tail explains every row that differs: no second code on them (a tail row whose prompt's other rows share
    one reward is not a near-constant group)."""
    report = audit(fixture(name))
    assert [finding.code for finding in report.findings] == [CODE], f"{name}: {described(report)}"


@pytest.mark.parametrize("name", list(CONTROLS))
def test_control_gets_no_finding_and_a_preset(name: str) -> None:
    # The preset fits to rollaudit's own fit tolerance (areal-group fits to float32 rounding; a preset with eps 1e-6
    # is within 1e-4 of it).
    assert_control_is_a_preset(name)
