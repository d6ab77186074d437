"""The slime load benchmark at a small size, so CI keeps it runnable (ratios are reported, not asserted)."""

from tests.benchmarks.bench_slime_load import main


def test_slime_load_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    output = capsys.readouterr().out
    assert "speedup over torch.load(weights_only=False)" in output
    assert "peak memory growth per byte of dump" in output
