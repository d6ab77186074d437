"""Benchmark: peak memory of ``inspect`` and ``compare`` on a big table, against reading the table alone.

    python tests/benchmarks/bench_big_table.py            # 12M rows (288 MB of arrays), 3 rounds, checks the targets
    python tests/benchmarks/bench_big_table.py --small    # 400k rows, 1 round, reports only (for CI)

The table is a generic Parquet one of three 8-byte columns (``step``, ``prompt``, ``reward``: 50 steps, prompts
of 8 rows, random float64 rewards). Each command runs as a user runs it, in a fresh process:
``rollaudit inspect T`` and ``rollaudit compare T --no-cache --json``, and the reference, a process that
imports torch and reads the table with ``pq.read_table`` (what any audit must at least hold). A command's peak is
the ``ru_maxrss`` of its largest process (the table is read in process: its footer bounds its decoding).
Rounds are interleaved; medians. Targets: ``inspect`` at most 0.75 GB, ``compare`` at most 1.1 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.bench_parquet_load import write_table  # noqa: E402

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


def measure(command: list[str]) -> dict[str, float]:
    """Seconds and peak bytes of one command, in a fresh wrapper so that its children's peak is its alone."""
    wrapper = (
        "import json, resource, subprocess, sys, time\n"
        "start = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
        "seconds = time.perf_counter() - start\n"
        "if done.returncode: sys.exit(done.stderr.decode(errors='replace'))\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
        "print(json.dumps({'seconds': seconds, 'peak_bytes': peak}))\n"
    )
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", wrapper, *command], capture_output=True, text=True, check=False, env=environment
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[1:4])} failed:\n{done.stderr}")
    return json.loads(done.stdout)


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
                runs[name].append(measure(command))
    numbers: dict[str, dict[str, float]] = {}
    for name, measured in runs.items():
        seconds = statistics.median(run["seconds"] for run in measured)
        peak_gb = statistics.median(run["peak_bytes"] for run in measured) / 1e9
        numbers[name] = {"seconds": round(seconds, 3), "peak_gb": round(peak_gb, 3)}
        print(f"{name:>10}: {seconds:7.2f} s   peak {peak_gb:6.3f} GB")
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
