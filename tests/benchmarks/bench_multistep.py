"""Benchmark: whole runs. A 10-step table whose prompt keys repeat across steps, and a 50-step Parquet file.

    python tests/benchmarks/bench_multistep.py            # 5M samples in 10 steps; 10M Parquet rows in 50 steps
    python tests/benchmarks/bench_multistep.py --small    # 200k and 400k (for CI)

Ratios in one process, rounds interleaved (best of ``--repeat``). Targets: ``audit`` of ``batch``,
``prompt``, ``trajectory`` at least 1.5x faster than pandas ``groupby(['step', 'prompt']).transform`` computing
``prompt`` alone; ``audit`` at most 1.5x ``recompute`` of the same schemes; the three schemes on 10 steps within
1.3x of the same samples as one step; ``rollaudit.load`` of the Parquet run at most 2x
``pyarrow.parquet.read_table`` and its peak memory at most 1.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
# Random rewards differ inside a trajectory: the trajectory scheme names its representative (the same work).
SCHEMES = ["batch", "prompt", "trajectory(representative=first)"]


def step_table(samples: int, steps: int, seed: int = 0) -> pa.Table:
    """``samples`` samples in ``steps`` steps; each step reuses the same prompt ids (a dataset's epoch), groups of
    1..19 samples, 1..4 trajectories a prompt whose ids also repeat across steps."""
    import rollaudit

    rng = np.random.default_rng(seed)
    per_step = samples // steps
    sizes = rng.integers(1, 20, size=per_step // 10 + 1)
    prompt_one = np.repeat(np.arange(len(sizes)), sizes)[:per_step]
    per_step = len(prompt_one)
    prompt = np.tile(prompt_one, steps)
    step = np.repeat(np.arange(steps), per_step)
    trajectory = prompt * 4 + rng.integers(0, 4, size=len(prompt))
    reward = (rng.random(len(prompt)) < 0.5).astype(np.float64)
    return rollaudit.make_table(reward=reward, prompt=prompt, trajectory=trajectory, step=step)


def best(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def tables_part(samples: int, repeat: int) -> dict[str, float]:
    import rollaudit

    table = step_table(samples, 10)
    # The same samples as one step: every (step, prompt) and (step, trajectory) of the run a key of its own.
    steps = table.column("step").to_numpy()
    one_step = table
    for name in ("prompt", "trajectory"):
        keys = table.column(name).to_numpy()
        one_step = one_step.set_column(
            one_step.column_names.index(name), name, pa.array(keys + steps * (int(keys.max()) + 1))
        )
    one_step = one_step.set_column(
        one_step.column_names.index("step"), "step", pa.array(np.zeros(len(steps), np.int64))
    )
    one_step = one_step.set_column(
        one_step.column_names.index("position"), "position", pa.array(np.arange(table.num_rows, dtype=np.int64))
    )
    frame = table.select(["step", "prompt", "reward"]).to_pandas()

    def pandas_prompt() -> None:
        grouped = frame.groupby(["step", "prompt"])["reward"]
        mean, std = grouped.transform("mean"), grouped.transform("std")
        np.asarray((frame["reward"] - mean) / (std + 1e-6))

    rollaudit.audit(table, SCHEMES)  # warm-up
    times = {"pandas_prompt": [], "audit": [], "recompute": [], "recompute_one_step": []}
    for _ in range(repeat):  # interleaved rounds
        times["pandas_prompt"].append(best(pandas_prompt, 1))
        times["audit"].append(best(lambda: rollaudit.audit(table, SCHEMES), 1))
        times["recompute"].append(best(lambda: rollaudit.recompute(table, SCHEMES), 1))
        times["recompute_one_step"].append(best(lambda: rollaudit.recompute(one_step, SCHEMES), 1))
    return {name: min(values) for name, values in times.items()}


def _peak_child(kind: str, path: str) -> None:
    sys.path.insert(0, str(ROOT))
    import pyarrow.parquet as pq

    # Each side's modules are imported before the clock starts (rollaudit's loaders are imported on first use).
    from rollaudit import load

    def peak() -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM"))

    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    with open("/proc/self/statm") as statm:
        before = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    start = time.perf_counter()
    if kind == "pyarrow":
        pq.read_table(path)
    else:
        load(path, cache=False)
    print(json.dumps({"seconds": time.perf_counter() - start, "peak": peak() - before}))


def parquet_part(rows: int, repeat: int) -> dict[str, float]:
    import pyarrow.parquet as pq

    table = step_table(rows, 50)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "run.parquet"
        pq.write_table(table.select(["step", "prompt", "trajectory", "reward"]), path)
        results: dict[str, list[dict]] = {"pyarrow": [], "rollaudit": []}
        for _ in range(repeat):
            for kind in results:
                command = [sys.executable, __file__, "--child", kind, str(path)]
                done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
                results[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {
        f"{kind}_{measure}": min(run[measure] for run in runs)
        for kind, runs in results.items()
        for measure in ("seconds", "peak")
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        _peak_child(*options.child)
        return 0
    samples, rows = (200_000, 400_000) if options.small else (5_000_000, 10_000_000)
    repeat = options.repeat or (1 if options.small else 5)
    tables = tables_part(samples, repeat)
    parquet = parquet_part(rows, max(1, repeat // 2))
    ratios = {
        "audit_speedup_over_pandas_prompt": tables["pandas_prompt"] / tables["audit"],
        "audit_over_recompute": tables["audit"] / tables["recompute"],
        "ten_steps_over_one": tables["recompute"] / tables["recompute_one_step"],
        "load_over_pyarrow": parquet["rollaudit_seconds"] / parquet["pyarrow_seconds"],
        "peak_over_pyarrow": parquet["rollaudit_peak"] / max(parquet["pyarrow_peak"], 1),
    }
    targets = {
        "audit_speedup_over_pandas_prompt": (">=", 1.5),
        "audit_over_recompute": ("<=", 1.5),
        "ten_steps_over_one": ("<=", 1.3),
        "load_over_pyarrow": ("<=", 2.0),
        "peak_over_pyarrow": ("<=", 1.5),
    }
    for name, value in tables.items():
        print(f"{name:>20}: {value:.3f} s")
    for name, value in parquet.items():
        print(f"{name:>20}: {value / 1e6:.1f} MB" if name.endswith("peak") else f"{name:>20}: {value:.3f} s")
    failed = False
    for name, value in ratios.items():
        sign, target = targets[name]
        ok = value >= target if sign == ">=" else value <= target
        failed |= not ok
        print(f"{name}: {value:.2f} (target {sign} {target}: {'ok' if ok else 'MISSED'})")
    print(json.dumps({**tables, **parquet, **ratios}))
    return 1 if failed and not options.small else 0


if __name__ == "__main__":
    sys.exit(main())
