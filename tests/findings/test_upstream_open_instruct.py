"""rollaudit on open-instruct's own data preparation (``tests/findings/upstream_open_instruct.py`` wrote the
fixtures, from open-instruct at e6c3044; open-instruct #1794).

With ``mask_truncated_completions`` the truncated rows leave the batch before ``scores.reshape(-1, n)``, so the
advantages are taken over consecutive slices of n of the rows left, and slices straddle prompts. The defective
fixtures (centered with n 4, standard with n 6) must get ``straddling-slices`` on exactly the rows of the slices
that hold more than one prompt; the controls (the same steps with the filter off) must get no finding and a named
preset.

The rows that show the defect are computed here from the table alone: each step's rows in slices of n, the slices
with more than one ``prompt_id``.
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

CODE = "straddling-slices"
DEFECTIVE = {"oi_masktrunc_centered_n4": (4, "centered"), "oi_masktrunc_standard_n6": (6, "standard")}
"""Fixture: (num_samples_per_prompt_rollout, advantage_normalization_type)."""
CONTROLS = {"oi_nofilter_centered_n4": (4, "centered"), "oi_nofilter_standard_n6": (6, "standard")}


def slice_keys(table: pa.Table, n: int) -> np.ndarray:
    """(step, i // n) per row, i the row's place in its step: open-instruct's prompt_idx groups."""
    step = column(table, "step")
    place = np.zeros(len(step), dtype=np.int64)
    for at_step in np.unique(step):
        rows = np.flatnonzero(step == at_step)
        place[rows] = np.arange(len(rows)) // n
    return step * 1_000_000 + place


def straddling_rows(table: pa.Table, n: int) -> list[int]:
    keys, prompt = slice_keys(table, n), column(table, "prompt_id")
    rows: list[int] = []
    for key in np.unique(keys):
        members = np.flatnonzero(keys == key)
        if len(np.unique(prompt[members])) > 1:
            rows += members.tolist()
    return sorted(rows)


def grouped(reward: np.ndarray, keys: np.ndarray, normalization: str) -> np.ndarray:
    """open-instruct's arithmetic per key: r - mean, over population std + 1e-8 for ``standard``."""
    out = np.zeros(len(reward))
    for key in np.unique(keys):
        rows = keys == key
        centred = reward[rows] - reward[rows].mean()
        out[rows] = centred / (reward[rows].std() + 1e-8) if normalization == "standard" else centred
    return out


def prompt_keys(table: pa.Table) -> np.ndarray:
    return column(table, "step") * 1_000_000 + column(table, "prompt_id")


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
    n = {**DEFECTIVE, **CONTROLS}[name][0]
    for at_step in (0, 1, 2):
        assert int((step == at_step).sum()) % n == 0  # else open-instruct's reshape raises


@pytest.mark.parametrize("name", list(DEFECTIVE))
def test_defective_fixture_is_the_slice_arithmetic(name: str) -> None:
    """Advantages fit slices of n of the rows left; they differ from the prompts' exactly on the straddlers."""
    n, normalization = DEFECTIVE[name]
    table = pq.read_table(fixture(name))
    reward, advantage = column(table, "reward"), column(table, "advantage")
    np.testing.assert_allclose(advantage, grouped(reward, slice_keys(table, n), normalization), rtol=0, atol=1e-12)
    differ = ~np.isclose(advantage, grouped(reward, prompt_keys(table), normalization), rtol=0, atol=1e-9)
    assert np.flatnonzero(differ).tolist() == straddling_rows(table, n) != []


@pytest.mark.parametrize("name", list(CONTROLS))
def test_control_fixture_is_per_prompt(name: str) -> None:
    n, normalization = CONTROLS[name]
    table = pq.read_table(fixture(name))
    reward, advantage = column(table, "reward"), column(table, "advantage")
    np.testing.assert_allclose(advantage, grouped(reward, prompt_keys(table), normalization), rtol=0, atol=1e-12)
    assert straddling_rows(table, n) == []


# ---------------------------------------------------------------------------------------------------------------------
# What rollaudit must say.


@pytest.mark.parametrize("name", list(DEFECTIVE))
def test_defective_gets_straddling_slices_on_the_straddlers(name: str) -> None:
    n = DEFECTIVE[name][0]
    assert_found_on(name, CODE, straddling_rows(pq.read_table(fixture(name)), n), n)


@pytest.mark.parametrize("name", list(DEFECTIVE))
def test_defective_gets_no_other_code(name: str) -> None:
    report = audit(fixture(name))
    assert [finding.code for finding in report.findings] == [CODE], f"{name}: {described(report)}"


@pytest.mark.parametrize("name", list(CONTROLS))
def test_control_gets_no_finding_and_a_preset(name: str) -> None:
    # Within rollaudit's fit tolerance: the table has no prompt_idx column, so oi-standard (std + 1e-8) cannot be
    # named; a preset with std + 1e-6 is within 1e-4 of it.
    assert_control_is_a_preset(name)
