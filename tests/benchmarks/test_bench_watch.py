"""The watch benchmark at a small size, so CI keeps it runnable (numbers are reported, not asserted)."""

import json

from tests.benchmarks.bench_watch import main


def test_watch_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    output = capsys.readouterr().out
    numbers = json.loads(output[output.index("\n{") + 1 :])
    assert numbers["steps"] == 30 and numbers["latency_median_s"] > 0 and numbers["idle_cpu_share"] >= 0
    assert set(numbers["rss_mb"]) == {"10", "30"}
