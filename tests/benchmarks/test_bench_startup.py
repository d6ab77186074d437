"""The start-up benchmark at a small size, so CI keeps it runnable (numbers are reported, not asserted)."""

import json

from tests.benchmarks.bench_startup import main


def test_startup_benchmark_runs_small(capsys):
    assert main(["--small"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    commands = ("compare_no_cache", "compare_cached", "gate")
    assert set(numbers) == {"import_torch_s", "rounds", "bytecode", *(f"{name}_s" for name in commands)} | {
        f"{name}_excess_s" for name in commands
    }
    assert (
        numbers["rounds"] == 1
        and numbers["bytecode"] is True
        and all(numbers[f"{name}_s"] > 0 for name in ("import_torch", *commands))
    )
