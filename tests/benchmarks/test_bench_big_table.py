"""The big-table memory benchmark at a small size, so CI keeps it runnable (peaks are reported, not asserted)."""

import json

from tests.benchmarks.bench_big_table import main


def test_big_table_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    output = capsys.readouterr().out
    numbers = json.loads(output.strip().splitlines()[-1])
    assert numbers["rows"] == 400_000
    for command in ("read_table", "inspect", "compare"):
        assert numbers[command]["seconds"] > 0 and numbers[command]["peak_gb"] > 0
    assert numbers["compare"]["peak_over_read_table"] > 0
