"""The JSON Lines load benchmark at a small size, so CI keeps it runnable (ratios are reported, not asserted)."""

from tests.benchmarks.bench_json_load import main


def test_json_load_benchmark_runs_small(capsys):
    assert main(["--small", "--formats", "verl", "tinker"]) == 0
    output = capsys.readouterr().out
    assert "verl" in output and "tinker" in output
    assert "share: the JSON Lines reader's rate on the fields a format reads, as a share of a one-core" in output
