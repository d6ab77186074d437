"""The whole-runs benchmark at a small size, so CI keeps it runnable (numbers are reported, not asserted)."""

import json

from tests.benchmarks.bench_whole_runs import main


def test_whole_runs_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    output = capsys.readouterr().out
    numbers = json.loads(output[output.index("\n{") + 1 :])
    assert set(numbers) == {"verl", "trl", "slime", "small_dump"}
    for run in ("verl", "trl", "slime"):
        assert numbers[run]["steps"] == 12 and numbers[run]["load_mb_per_s"] > 0 and numbers[run]["pandas_s"] > 0
    assert numbers["small_dump"]["startup_s"] > 0 and numbers["small_dump"]["compare_s"] > 0  # one round: no order
