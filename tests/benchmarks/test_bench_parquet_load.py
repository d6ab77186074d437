"""The Parquet load benchmark at a small size, so CI keeps it runnable (ratios are reported, not asserted)."""

import json

from tests.benchmarks.bench_parquet_load import READERS, main


def test_parquet_load_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    output = capsys.readouterr().out
    for reader in READERS:
        assert f"{reader:>10}: " in output
    numbers = json.loads(output.strip().splitlines()[-1])
    assert numbers["rows"] == 400_000 and numbers["load_time_ratio"] > 0 and numbers["load_peak_ratio"] > 0
