"""Benchmark for the recompute kernel (issue 2), measured as ratios in one run.

    python tests/benchmarks/bench_recompute.py            # 10M samples in ~1M uneven groups
    python tests/benchmarks/bench_recompute.py --samples 200000

Targets: ``prompt`` at least 3x faster than the equivalent pandas
``groupby().transform("mean"/"std")``; ``batch`` + ``prompt`` + ``trajectory``
together at most 2x the time of ``prompt`` alone. Each timing is the best of
``--repeat`` runs on the same table.
"""

from __future__ import annotations

import argparse
import json
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


def best_of(repeat: int, function) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return best, result


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    table = uneven_table(args.samples)
    frame = pd.DataFrame({"prompt": table.column("prompt").to_numpy(), "reward": table.column("reward").to_numpy()})
    rollaudit.recompute(table.slice(0, 1000), ["batch", "prompt", "trajectory"], device="cpu")  # import + warm-up

    pandas_seconds, expected = best_of(args.repeat, lambda: pandas_prompt(frame))
    prompt_seconds, got = best_of(args.repeat, lambda: rollaudit.recompute(table, ["prompt"], device="cpu"))
    three_seconds, _ = best_of(
        args.repeat, lambda: rollaudit.recompute(table, ["batch", "prompt", "trajectory"], device="cpu")
    )
    np.testing.assert_allclose(got.column(0).to_numpy(), expected, atol=1e-9)
    result = {
        "samples": table.num_rows,
        "prompts": len(np.unique(frame["prompt"])),
        "pandas_seconds": round(pandas_seconds, 4),
        "prompt_seconds": round(prompt_seconds, 4),
        "three_schemes_seconds": round(three_seconds, 4),
        "speedup_vs_pandas": round(pandas_seconds / prompt_seconds, 2),
        "three_over_prompt": round(three_seconds / prompt_seconds, 2),
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
