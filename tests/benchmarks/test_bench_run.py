"""The whole-run benchmark at a small size, so CI keeps it runnable (numbers are reported, not asserted)."""

import json

from tests.benchmarks.bench_run import main


def test_run_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    output = capsys.readouterr().out
    numbers = json.loads(output.strip().splitlines()[-1])
    assert numbers["files"] == 8 and numbers["jobs1_files_per_s"] > 0 and numbers["warm_cache_files_per_s"] > 0
    assert set(numbers["startup"]) == {"import_rollaudit_s", "rollaudit_help_s", "first_recompute_s"}
