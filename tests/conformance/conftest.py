"""The conformance corpus: dumps written by each framework's own code and the upstream advantages in
``expected*.parquet`` (``../shared/corpus`` beside the project, or ``$ROLLAUDIT_CORPUS``). Absent, every test here
skips with one line. The worst difference of every preset against its upstream column is printed at the end."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("ROLLAUDIT_CORPUS", ROOT.parent / "shared" / "corpus"))
TOLERANCE = 1e-5
WORST: dict[str, float] = {}
"""``framework: preset = column`` -> the largest absolute difference seen (relative, where a test says so)."""


def corpus(framework: str) -> Path:
    """The conformance set of one framework, or a skip saying where it was looked for (a failure in CI, where a
    missing corpus would otherwise pass every test unseen)."""
    path = CORPUS / framework
    if not path.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"no conformance corpus at {path} in CI (set ROLLAUDIT_CORPUS)")
        pytest.skip(f"no conformance corpus at {path} (set ROLLAUDIT_CORPUS)")
    return path


def assert_matches(
    label: str, actual, expected, keep=None, tolerance: float = TOLERANCE, relative: bool = False
) -> float:
    """``actual`` equals ``expected`` elementwise within ``tolerance`` (NaN where it is NaN), on the rows ``keep``
    says; the worst difference is recorded under ``label`` and returned."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (label, actual.shape, expected.shape)
    if keep is not None:
        actual, expected = actual[np.asarray(keep, dtype=bool)], expected[np.asarray(keep, dtype=bool)]
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(actual), nan), f"{label}: NaN at rows {np.flatnonzero(np.isnan(actual) != nan)}"
    difference = np.abs(actual[~nan] - expected[~nan])
    if relative:
        difference = difference / np.maximum(1.0, np.abs(expected[~nan]))
    worst = float(difference.max()) if difference.size else 0.0
    WORST[label] = max(WORST.get(label, 0.0), worst)
    assert worst <= tolerance, f"{label}: worst difference {worst:.3g} at row {int(np.argmax(difference))}"
    return worst


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not WORST:
        return
    terminalreporter.section("conformance: worst difference per preset (abs; relative where marked)")
    width = max(len(label) for label in WORST)
    for label, worst in sorted(WORST.items()):
        terminalreporter.write_line(f"{label:<{width}}  {worst:.2e}")


def compare_json(directory: Path) -> dict:
    """``rollaudit compare DIRECTORY --json`` as a user runs it (a fresh process, no cache): exit 0 and its report."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "rollaudit", "compare", str(directory), "--json", "--no-cache", "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
