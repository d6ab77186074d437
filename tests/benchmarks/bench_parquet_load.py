"""Benchmark: rollaudit.load of a large generic Parquet table against pyarrow.parquet.read_table.

    python tests/benchmarks/bench_parquet_load.py            # 40M rows (~200 MB), 3 rounds, checks the targets
    python tests/benchmarks/bench_parquet_load.py --small    # 400k rows (~2 MB), 1 round, reports only (for CI)
    python tests/benchmarks/bench_parquet_load.py --text-prompt   # the prompt key as text (its counts checked)

The table is a generic one: ``step`` (50 steps), ``prompt`` (a group key, 8
rows a group; ``--text-prompt``: its text) and ``reward`` (float32, plain
encoded), Snappy-compressed, a million rows a row group. Each measurement
runs in a fresh process: imports, one read of a tiny table of the same shape
with the same reader (warm-up: lazy imports, the capped child's start), then
one timed read of the big table; its peak memory is the process's
``ru_maxrss`` plus that of its children (the capped child, stopped before
measuring). Readers: ``read_table`` (``pq.read_table``), ``load``
(``rollaudit.load``, no cache), ``read`` (the capped reader alone: what
``load`` reads before building the canonical table) and ``child`` (the same
read forced through the capped child, as every Parquet file was read before
footers bounded reads in process). Rounds are interleaved; medians.
Targets: ``load`` at most 2x ``read_table``'s time and 1.5x its peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_TIME_RATIO = 2.0
MAX_PEAK_RATIO = 1.5
ROWS = 40_000_000
SMALL_ROWS = 400_000
STEPS = 50
GROUP = 8
READERS = ("read_table", "load", "read", "child")


def write_table(path: Path, rows: int, *, text_prompt: bool = False, reward_type: str = "float32") -> Path:
    """A generic rollout table of ``rows`` rows (``STEPS`` steps, prompts of ``GROUP`` rows) as Parquet."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    per_step = max(rows // STEPS, GROUP)
    rows = per_step * STEPS
    groups = np.arange(rows, dtype=np.int64) // GROUP
    prompt = pa.array(groups)
    if text_prompt:
        prompt = pa.array([f"prompt {index}" for index in range(rows // GROUP)]).take(prompt)
    table = pa.table(
        {
            "step": np.repeat(np.arange(STEPS, dtype=np.int64), per_step),
            "prompt": prompt,
            "reward": np.random.default_rng(0).random(rows, dtype=np.dtype(reward_type)),
        }
    )
    # Rewards plain (random floats do not dictionary-encode); a step's prompt texts fit one dictionary page.
    pq.write_table(table, path, use_dictionary=["step", "prompt"], dictionary_pagesize_limit=1 << 23)
    return path


# ---------------------------------------------------------------------------------------------------------------------
# The child: one reader, one measurement.


def child(reader: str, table_path: str, warmup_path: str) -> None:
    sys.path.insert(0, str(ROOT))
    import pyarrow.parquet as pq

    import rollaudit
    import rollaudit._loaders.run.load  # imported here so that the timed call pays no import
    from rollaudit._loaders.arrow import capped

    if reader == "child":
        capped.read_parquet_in_bound = lambda path, columns: None

    def run(path: str):
        if reader == "read_table":
            return pq.read_table(path)
        if reader == "load":
            return rollaudit.load(path, cache=False)
        return capped.read_arrow(Path(path), "parquet", ["step", "prompt", "reward"])

    run(warmup_path)
    start = time.perf_counter()
    result = run(table_path)
    seconds = time.perf_counter() - start
    rows = result.num_rows
    capped._stop_worker()  # waited for: its peak joins RUSAGE_CHILDREN
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(json.dumps({"reader": reader, "seconds": seconds, "peak_bytes": own + children, "rows": rows}))


# ---------------------------------------------------------------------------------------------------------------------
# The parent: the table, rounds, ratios.


def measure(reader: str, table: Path, warmup: Path) -> dict:
    command = [sys.executable, __file__, "--child", reader, str(table), str(warmup)]
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT, env=environment)
    if done.returncode != 0:
        raise SystemExit(f"{reader} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a small table and one round; report, do not check")
    parser.add_argument("--rows", type=int, default=None, help=f"rows of the table (default {ROWS:,})")
    parser.add_argument("--rounds", type=int, default=None, help="fresh-process rounds per reader")
    parser.add_argument("--text-prompt", action="store_true", help="the prompt key as text")
    parser.add_argument("--child", nargs=3, metavar=("READER", "TABLE", "WARMUP"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        child(*options.child)
        return 0
    rows = options.rows or (SMALL_ROWS if options.small else ROWS)
    rounds = options.rounds or (1 if options.small else 3)
    with tempfile.TemporaryDirectory(prefix="rollaudit-bench-") as scratch:
        table = write_table(Path(scratch) / "rollouts.parquet", rows, text_prompt=options.text_prompt)
        warmup = write_table(Path(scratch) / "warmup.parquet", 1000, text_prompt=options.text_prompt)
        size = table.stat().st_size
        print(f"table: {rows:,} rows, {size / 1e6:.1f} MB of Parquet; {rounds} round(s)")
        results: dict[str, list[dict]] = {reader: [] for reader in READERS}
        for _ in range(rounds):
            for reader in READERS:  # interleaved, so that a noisy moment hits every reader alike
                results[reader].append(measure(reader, table, warmup))
    seconds = {reader: statistics.median(run["seconds"] for run in runs) for reader, runs in results.items()}
    peak = {reader: statistics.median(run["peak_bytes"] for run in runs) for reader, runs in results.items()}
    for reader in READERS:
        print(f"{reader:>10}: {seconds[reader]:7.3f} s   peak {peak[reader] / 1e6:8.1f} MB")
    ratios = {
        "load_time_ratio": seconds["load"] / seconds["read_table"],
        "load_peak_ratio": peak["load"] / peak["read_table"],
        "read_time_ratio": seconds["read"] / seconds["read_table"],
        "read_peak_ratio": peak["read"] / peak["read_table"],
        "child_time_ratio": seconds["child"] / seconds["read_table"],
        "child_peak_ratio": peak["child"] / peak["read_table"],
    }
    failed = False
    for name, target in (("load_time_ratio", MAX_TIME_RATIO), ("load_peak_ratio", MAX_PEAK_RATIO)):
        passed = ratios[name] <= target
        print(f"{name}: {ratios[name]:.2f}x read_table  (target <= {target}: {'ok' if passed else 'MISSED'})")
        failed |= not passed
    print(json.dumps({"rows": rows, "file_bytes": size, **ratios}))
    return 1 if failed and not options.small else 0


if __name__ == "__main__":
    sys.exit(main())
