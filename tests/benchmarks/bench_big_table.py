"""Benchmark: peak memory of ``inspect`` and ``compare`` on a big table, against reading the table alone.

    python tests/benchmarks/bench_big_table.py            # 12M rows (288 MB of arrays), 3 rounds, checks the targets
    python tests/benchmarks/bench_big_table.py --small    # 400k rows, 1 round, reports only (for CI)

The table is a generic Parquet one of three 8-byte columns (``step``, ``prompt``, ``reward``: 50 steps, prompts
of 8 rows, random float64 rewards). Each command runs as a user runs it, in a fresh process:
``rollaudit inspect T`` and ``rollaudit compare T --no-cache --json``, and the reference, a process that
imports torch and reads the table with ``pq.read_table`` (what any audit must at least hold). A command's peak is
its process tree's summed resident sets, sampled (``bench_scale.run_measured``: the capped reader child that walks
the footer included, the libraries both map counted twice), and beside it the largest single process's
``ru_maxrss`` (the table is read in process, its footer bounding its decoding). The targets are checked on the
latter.
Rounds are interleaved; medians. Targets: ``inspect`` at most 0.75 GB, ``compare`` at most 1.1 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.bench_parquet_load import write_table  # noqa: E402
from tests.benchmarks.bench_scale import run_measured  # noqa: E402

ROWS = 12_000_000
SMALL_ROWS = 400_000
TARGET_PEAK_GB = {"inspect": 0.75, "compare": 1.1}
READ_TABLE = "import sys, torch, pyarrow.parquet as pq; pq.read_table(sys.argv[1])"


def commands(table: Path) -> dict[str, list[str]]:
    return {
        "read_table": [sys.executable, "-c", READ_TABLE, str(table)],
        "inspect": [sys.executable, "-m", "rollaudit", "inspect", str(table)],
        "compare": [sys.executable, "-m", "rollaudit", "compare", str(table), "--no-cache", "--json"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", action="store_true", help="400k rows and one round; report, do not check")
    parser.add_argument("--rows", type=int, default=None, help=f"rows of the table (default {ROWS:,})")
    parser.add_argument("--rounds", type=int, default=None)
    options = parser.parse_args(argv)
    rows = options.rows or (SMALL_ROWS if options.small else ROWS)
    rounds = options.rounds or (1 if options.small else 3)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rollaudit-bench-") as scratch:
        table = write_table(Path(scratch) / "rollouts.parquet", rows, reward_type="float64")
        print(f"table: {rows:,} rows, {table.stat().st_size / 1e6:.1f} MB of Parquet; {rounds} round(s)")
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in commands(table)}
        for _ in range(rounds):
            for name, command in commands(table).items():  # interleaved: a noisy moment hits every command alike
                measured = run_measured(command, Path(scratch) / "output", {**os.environ, "PYTHONPATH": str(ROOT)})
                runs[name].append(measured)
    numbers: dict[str, dict[str, float]] = {}
    for name, measured in runs.items():
        seconds = statistics.median(run["seconds"] for run in measured)
        tree_gb = statistics.median(run["peak_mb"] for run in measured) / 1e3
        largest_gb = statistics.median(run["largest_process_mb"] for run in measured) / 1e3
        numbers[name] = {
            "seconds": round(seconds, 3),
            "peak_gb": round(largest_gb, 3),
            "tree_peak_gb": round(tree_gb, 3),
        }
        print(f"{name:>10}: {seconds:7.2f} s   peak {largest_gb:6.3f} GB (its process tree: {tree_gb:6.3f} GB)")
    failed = False
    for name, target in TARGET_PEAK_GB.items():
        numbers[name]["peak_over_read_table"] = round(numbers[name]["peak_gb"] / numbers["read_table"]["peak_gb"], 2)
        passed = numbers[name]["peak_gb"] <= target
        print(f"{name} peak: {numbers[name]['peak_gb']:.3f} GB (target <= {target}: {'ok' if passed else 'MISSED'})")
        failed |= not passed
    print(f"({time.perf_counter() - started:.0f} s in all)")
    print(json.dumps({"rows": rows, **numbers}))
    return 1 if failed and not options.small else 0


if __name__ == "__main__":
    sys.exit(main())
