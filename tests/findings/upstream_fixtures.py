"""What the tests of the upstream reproductions share: the fixtures' folder, reading them, auditing them, and the
two checks every such test makes (a finding on exactly the rows that show its defect; a control with no finding
and a named preset within rollaudit's fit tolerance)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import rollaudit
from rollaudit._audit.findings.finding import Finding

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "findings"


def fixture(name: str) -> Path:
    return FIXTURES / f"{name}.parquet"


def column(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False))


def columns(path: Path) -> dict[str, np.ndarray]:
    return {name: np.asarray(values) for name, values in pq.read_table(path).to_pydict().items()}


def audit(path: Path) -> rollaudit.Report:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rollaudit.RollauditWarning)
        return rollaudit.audit(rollaudit.load(path))


def described(report: rollaudit.Report) -> list[dict[str, object]]:
    return [finding.to_dict() for finding in report.findings]


def assert_found_on(name: str, code: str, expected: Sequence[int], n: int) -> Finding:
    """The fixture ``name`` gets ``code`` on exactly the ``expected`` rows, in their steps, with the stride ``n``
    where it says one, and examples among those rows, each in its own step."""
    table = pq.read_table(fixture(name))
    report = audit(fixture(name))
    found = [finding for finding in report.findings if finding.code == code]
    assert found, f"{name}: expected {code} on {len(expected)} rows {list(expected)}, found {described(report)}"
    finding = found[0]
    step = column(table, "step")
    assert finding.rows == len(expected), f"{name}: rows {list(expected)}: {finding.to_dict()}"
    assert tuple(finding.steps) == tuple(sorted({int(step[row]) for row in expected})), finding.to_dict()
    assert finding.detail.get("n", n) == n, finding.to_dict()
    assert finding.examples, finding.to_dict()
    for example in finding.examples:
        assert example.rows and set(example.rows) <= set(expected), f"{name}: {example.to_dict()} not in {expected}"
        assert {int(step[row]) for row in example.rows} == {example.step}, example.to_dict()
    return finding


def assert_control_is_a_preset(name: str) -> None:
    """The control ``name`` gets no finding, and the preset it is said to train with reproduces its advantages to
    rollaudit's own fit tolerance (1e-4)."""
    report = audit(fixture(name))
    assert report.findings == [], f"{name}: {described(report)}"
    scheme = report.trained_with.scheme
    assert scheme is not None, f"{name}: {report.trained_with.to_dict()}"
    table = pq.read_table(fixture(name))
    canonical = rollaudit.make_table(
        reward=column(table, "reward"), prompt=column(table, "prompt_id"), step=column(table, "step")
    )
    named = column(rollaudit.recompute(canonical, [scheme]), f"advantage:{scheme}").astype(np.float64)
    np.testing.assert_allclose(named, column(table, "advantage"), rtol=0, atol=1e-4, err_msg=scheme)
