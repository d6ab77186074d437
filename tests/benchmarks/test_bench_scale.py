"""The scale benchmark at a small size, so CI keeps it runnable (numbers are reported, not asserted)."""

import json

from tests.benchmarks.bench_scale import main


def test_scale_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    assert set(numbers) == {"8", "40", "scaling"}
    for size in ("8", "40"):
        run = numbers[size]
        assert run["steps"] == int(size) and run["reports_agree"] is True
        for key in ("megabytes", "seconds", "peak_mb", "largest_process_mb", "pandas_seconds", "pandas_peak_mb"):
            assert run[key] > 0, key
        assert run["speed_ratio"] > 0 and run["memory_ratio"] > 0
    scaling = numbers["scaling"]
    assert scaling["steps_ratio"] == 5 and scaling["time_linearity"] > 0 and scaling["peak_ratio"] > 0
