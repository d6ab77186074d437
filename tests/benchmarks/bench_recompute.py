"""Benchmark for the recompute kernel, measured as ratios in one run.

    python tests/benchmarks/bench_recompute.py            # 10M samples in ~1M uneven groups
    python tests/benchmarks/bench_recompute.py --samples 200000

Targets: ``prompt`` at least 3x faster than the equivalent pandas
``groupby().transform("mean"/"std")``; ``batch`` + ``prompt`` + ``trajectory``
together at most 2x the time of ``prompt`` alone.

The three contenders run in turn, ``--repeat`` rounds of pandas, ``prompt``
and the three schemes, so that each sees the same machine: on a VM whose freed
memory goes back to the host, first touches of fresh pages cost more than the
arithmetic, and that cost drifts over a run. Ratios are of the best times and
of the median times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pandas as pd
import pyarrow as pa

import rollaudit


def uneven_table(samples: int, seed: int = 0) -> pa.Table:
    """~samples/10 prompts of 1..19 samples (mean 10), 1..4 trajectories each, 0/1 rewards."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 20, size=samples // 10 + 1)
    prompt = np.repeat(np.arange(len(sizes)), sizes)[:samples]
    trajectory = prompt * 4 + rng.integers(0, 4, size=len(prompt))
    reward = (rng.random(len(prompt)) < rng.random(len(sizes))[prompt]).astype(np.float64)
    return rollaudit.make_table(reward=reward, prompt=prompt, trajectory=trajectory)


def pandas_prompt(frame: pd.DataFrame, eps: float = 1e-6) -> np.ndarray:
    """The same ``prompt`` scheme with pandas: group mean and unbiased std, one-sample groups 0."""
    grouped = frame.groupby("prompt", sort=False)["reward"]
    mean = grouped.transform("mean")
    std = grouped.transform("std")
    advantage = (frame["reward"] - mean) / (std + eps)
    return advantage.where(grouped.transform("size") > 1, 0.0).to_numpy()


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5, help="rounds")
    args = parser.parse_args(argv)

    table = uneven_table(args.samples)
    frame = pd.DataFrame({"prompt": table.column("prompt").to_numpy(), "reward": table.column("reward").to_numpy()})
    # Same numbers first (this also imports torch and warms up), then only the clock.
    got = rollaudit.recompute(table, ["prompt"], device="cpu").column(0).to_numpy()
    np.testing.assert_allclose(got, pandas_prompt(frame), atol=1e-9)
    del got

    contenders = {
        "pandas": lambda: pandas_prompt(frame),
        "prompt": lambda: rollaudit.recompute(table, ["prompt"], device="cpu"),
        "three_schemes": lambda: rollaudit.recompute(
            table, ["batch", "prompt", "trajectory(representative=first)"], device="cpu"
        ),
    }
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.repeat):
        for name, function in contenders.items():
            started = time.perf_counter()
            function()
            seconds[name].append(time.perf_counter() - started)
    best = {name: min(times) for name, times in seconds.items()}
    median = {name: statistics.median(times) for name, times in seconds.items()}
    result = {
        "samples": table.num_rows,
        "prompts": len(np.unique(frame["prompt"])),
        "rounds": args.repeat,
        **{f"{name}_seconds": round(best[name], 4) for name in contenders},
        "speedup_vs_pandas": round(best["pandas"] / best["prompt"], 2),
        "three_over_prompt": round(best["three_schemes"] / best["prompt"], 2),
        "median_speedup_vs_pandas": round(median["pandas"] / median["prompt"], 2),
        "median_three_over_prompt": round(median["three_schemes"] / median["prompt"], 2),
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
