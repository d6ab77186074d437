"""Fuzz-suite settings: hypothesis profiles, a warm-up, and the per-loader counts printed at the end.

The profiles live in :mod:`tests.fuzz.harness` (``ROLLAUDIT_FUZZ_PROFILE``: ``ci``
by default, ``long``, ``smoke``).
"""

from __future__ import annotations

import pytest

from tests.fuzz import harness


@pytest.fixture(scope="session", autouse=True)
def _warm_up() -> None:
    harness.warm_up()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not harness.STATS:
        return
    harness.write_stats()
    terminalreporter.section("rollaudit fuzz cases per loader")
    for name, stats in sorted(harness.STATS.items()):
        if name == "cli":
            terminalreporter.write_line(f"{name:8} {stats.cases:7} runs: {stats.tables} exit 0, {stats.errors} exit 2")
            continue
        terminalreporter.write_line(
            f"{name:8} {stats.cases:7} cases: {stats.tables} tables ({stats.audits} audited, {stats.audit_errors} "
            f"audit errors), {stats.errors} RollauditErrors; slowest {stats.slowest_seconds:.3f} s"
        )
