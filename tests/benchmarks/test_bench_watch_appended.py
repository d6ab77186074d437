"""The appended-file watch benchmark at a small size, so CI keeps it runnable (numbers are reported, not asserted)."""

import json

from tests.benchmarks.bench_watch_appended import main


def test_watch_appended_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    output = capsys.readouterr().out
    numbers = json.loads(output[output.index("\n{") + 1 :])
    for name in ("open_instruct", "torchtitan"):
        assert numbers[name]["steps"] == 40 and numbers[name]["end_over_start"] > 0
        assert set(numbers[name]["rss_mb"]) == {"20", "40"}
