"""The recompute benchmark at a small size, so CI keeps it runnable (ratios are reported, not asserted)."""

from tests.benchmarks.bench_recompute import main


def test_recompute_benchmark_runs_small():
    result = main(["--samples", "50000", "--repeat", "1"])
    assert result["samples"] == 50000 and result["prompt_seconds"] > 0
