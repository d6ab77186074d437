"""The shared-core benchmark at a small size, so CI keeps it runnable (ratios are reported, not asserted)."""

from tests.benchmarks.bench_shared_core import main


def test_shared_core_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    assert "busy neighbour, rollaudit's default" in capsys.readouterr().out
