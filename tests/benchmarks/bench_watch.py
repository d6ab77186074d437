"""Benchmark: ``rollaudit watch`` beside a run whose steps land back to back.

    python tests/benchmarks/bench_watch.py            # 1,000 steps of 5,000 samples, 30 s idle
    python tests/benchmarks/bench_watch.py --small    # 30 steps, 2 s idle (CI: reports only)

A writer (this process) lands one generic Parquet step at a time (5,000 samples of 1,250 prompts, written under a
hidden name and renamed into place, as trainers save), the next one as soon as the previous step's record is in
``--jsonl``. Measured on the ``rollaudit watch RUN --jsonl FILE --no-cache`` process: the time from a step's file
being in place to its record (median, 95th percentile, max), its resident memory at step 100 and at the last step
(growth), and its CPU over an idle stretch with nothing landing (as a share of one core).
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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
SAMPLES, PROMPTS = 5000, 1250


def write_step(run: Path, step: int, rng: np.random.Generator) -> None:
    table = pa.table(
        {
            "step": np.full(SAMPLES, step, dtype=np.int64),
            "prompt": np.repeat(np.arange(PROMPTS, dtype=np.int64), SAMPLES // PROMPTS),
            "reward": rng.integers(0, 2, SAMPLES).astype(np.float64),
        }
    )
    staging = run / f".step_{step:05d}.parquet"
    pq.write_table(table, staging)
    staging.rename(run / f"step_{step:05d}.parquet")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def records_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def start_watch(run: Path, records: Path, *options: str) -> subprocess.Popen:
    """``rollaudit watch RUN --jsonl RECORDS --no-cache`` with ``options``, as a user starts it."""
    return subprocess.Popen(
        [sys.executable, "-m", "rollaudit", "watch", str(run), "--jsonl", str(records), "--no-cache", *options],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_for_records(records: Path, count: int, watch: subprocess.Popen, since: float, limit: float) -> float:
    """Seconds from ``since`` until ``records`` holds ``count`` records (SystemExit once the watch has died or
    ``limit`` seconds have passed)."""
    while records_in(records) < count:
        if time.perf_counter() > since + limit or watch.poll() is not None:
            raise SystemExit(f"no record {count}: {watch.stderr.read().decode() if watch.stderr else ''}")
        time.sleep(0.002)
    return time.perf_counter() - since


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="30 steps and 2 s idle (CI)")
    args = parser.parse_args(argv)
    steps, idle = (30, 2.0) if args.small else (1000, 30.0)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as scratch:
        run, records = Path(scratch) / "run", Path(scratch) / "audit.jsonl"
        run.mkdir()
        watch = start_watch(run, records, "-s", "batch")
        latencies, memory = [], {}
        try:
            for step in range(1, steps + 1):
                write_step(run, step, rng)
                latencies.append(wait_for_records(records, step, watch, time.perf_counter(), 120))
                if step in (min(100, steps // 3), steps):
                    memory[step] = rss_mb(watch.pid)
            before = cpu_seconds(watch.pid)
            time.sleep(idle)
            idle_cpu = (cpu_seconds(watch.pid) - before) / idle
        finally:
            watch.terminate()
            watch.wait(timeout=60)
        last = json.loads(records.read_text().splitlines()[-1])
        assert last["step"] == steps and last["samples"] == SAMPLES, last
    steady = latencies[1:]  # the first step pays torch's import
    first_memory, last_memory = memory[min(memory)], memory[max(memory)]
    numbers = {
        "steps": steps,
        "samples_per_step": SAMPLES,
        "first_step_s": round(latencies[0], 3),
        "latency_median_s": round(statistics.median(steady), 4),
        "latency_p95_s": round(sorted(steady)[int(0.95 * (len(steady) - 1))], 4),
        "latency_max_s": round(max(steady), 4),
        "rss_mb": {str(step): round(value, 1) for step, value in memory.items()},
        "rss_growth_mb": round(last_memory - first_memory, 1),
        "idle_seconds": idle,
        "idle_cpu_share": round(idle_cpu, 4),
    }
    print(f"watch: {steps} steps of {SAMPLES:,} samples landing back to back")
    print(json.dumps(numbers, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
