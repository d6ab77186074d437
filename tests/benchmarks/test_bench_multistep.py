"""The whole-run benchmark at a small size, so CI keeps it runnable (ratios are reported, not asserted)."""

from tests.benchmarks.bench_multistep import main


def test_multistep_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    output = capsys.readouterr().out
    assert "audit_over_recompute" in output and "load_over_pyarrow" in output
