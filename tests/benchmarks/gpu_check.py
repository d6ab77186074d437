"""The GPU path, proven: the CUDA tests, then 100M samples in 10M uneven groups on ``device="cuda"`` against the CPU.

    python tests/benchmarks/gpu_check.py                    # on a machine with CUDA: the whole check
    python tests/benchmarks/gpu_check.py --samples 1000000  # smaller (also runs without CUDA: CPU side only)

Schemes: ``batch``, ``prompt``, ``trajectory`` and three presets (``slime-2204``, ``verl-rloo``, ``nemo-loo``).
Each runs once to warm up, then ``--repeat`` times on each device; the results must agree to 1e-9 (absolute,
NaN where NaN). Prints the times, the CUDA/CPU ratios and one JSON line; exit 1 when a result differs or a CUDA
test fails, 0 otherwise (and 0, saying so, where there is no CUDA device).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
# Random rewards differ inside a trajectory, so the trajectory scheme names its representative; nemo-loo in float64
# (its float32 default follows MKL's CPU summation order, which a GPU does not share).
SCHEMES = (
    "batch",
    "prompt",
    "trajectory(representative=first)",
    "slime-2204",
    "verl-rloo",
    "nemo-loo(dtype=float64)",
)
TOLERANCE = 1e-9


def uneven_table(samples: int, groups: int, seed: int = 0) -> pa.Table:
    """``samples`` samples in about ``groups`` prompts of uneven size (1..2x the mean), 1..4 trajectories each."""
    import rollaudit

    rng = np.random.default_rng(seed)
    mean = samples / groups
    sizes = rng.integers(1, max(2, int(2 * mean)), size=int(groups * 1.1) + 1)
    prompt = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)[:samples]
    trajectory = prompt * 4 + rng.integers(0, 4, size=len(prompt))
    reward = (rng.random(len(prompt)) < rng.random(len(sizes))[prompt]).astype(np.float64)
    return rollaudit.make_table(reward=reward, prompt=prompt, trajectory=trajectory)


def timed(table: pa.Table, scheme: str, device: str, repeat: int) -> tuple[float, np.ndarray]:
    import torch

    import rollaudit

    rollaudit.recompute(table, [scheme], device=device)  # warm-up: kernels, allocator, the device's context
    best, values = float("inf"), None
    for _ in range(repeat):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        result = rollaudit.recompute(table, [scheme], device=device)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
        values = result.column(0).to_numpy()
    return best, values


def cuda_tests() -> int:
    """The test suite's CUDA tests (they skip without a device)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda"]
    command.append("tests/audit/test_kernel.py")
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000_000)
    parser.add_argument("--groups", type=int, default=None, help="prompts (default: a tenth of the samples)")
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args(argv)
    import torch

    has_cuda = torch.cuda.is_available()
    if has_cuda:
        print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
        if cuda_tests() != 0:
            print("CUDA tests failed")
            return 1
    else:
        print("no CUDA device: the CUDA tests and the cuda side are skipped; the CPU side runs")
    groups = options.groups or max(1, options.samples // 10)
    started = time.perf_counter()
    table = uneven_table(options.samples, groups)
    print(f"{table.num_rows:,} samples in {len(np.unique(table.column('prompt').to_numpy())):,} prompts "
          f"(built in {time.perf_counter() - started:.1f} s)")  # fmt: skip
    summary: dict[str, dict[str, float]] = {}
    failed = False
    for scheme in SCHEMES:
        cpu_seconds, cpu = timed(table, scheme, "cpu", options.repeat)
        row = {"cpu_s": cpu_seconds}
        if has_cuda:
            cuda_seconds, cuda = timed(table, scheme, "cuda", options.repeat)
            same_nan = bool(np.array_equal(np.isnan(cpu), np.isnan(cuda)))
            finite = ~np.isnan(cpu)
            difference = float(np.max(np.abs(cpu[finite] - cuda[finite]), initial=0.0))
            row.update(cuda_s=cuda_seconds, speedup=cpu_seconds / cuda_seconds, max_abs_diff=difference)
            ok = same_nan and difference <= TOLERANCE
            failed |= not ok
            verdict = "ok" if ok else "DIFFERS"
            print(f"{scheme:>12}: cpu {cpu_seconds:7.3f} s  cuda {cuda_seconds:7.3f} s  "
                  f"{cpu_seconds / cuda_seconds:6.1f}x  max |diff| {difference:.2e}  {verdict}")  # fmt: skip
        else:
            print(f"{scheme:>12}: cpu {cpu_seconds:7.3f} s")
        summary[scheme] = row
    print(json.dumps({"samples": table.num_rows, "cuda": has_cuda, "schemes": summary}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
