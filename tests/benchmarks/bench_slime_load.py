"""Benchmark: rollaudit.load on a large slime dump against torch.load, side by side.

    python tests/benchmarks/bench_slime_load.py            # ~40 MB dump, 3 rounds, checks the targets
    python tests/benchmarks/bench_slime_load.py --small    # a few MB, 1 round, reports only (for CI)

Each measurement runs in a fresh process: import torch and rollaudit, load a
small dump once with the same loader (warm-up), then time one load of the
big dump and record its peak resident memory above the pre-load level.
Loaders: ``rollaudit`` (rollaudit.load), ``unsafe`` (torch.load with
weights_only=False: fast, runs code named by the file) and ``safe``
(torch.load with weights_only=True: safe, pure-Python unpickler).
Targets (issue 3): rollaudit at least 6x faster than ``safe``, at most
1.25x the time and 1.25x the peak memory of ``unsafe``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOADERS = ("rollaudit", "unsafe", "safe")
MIN_SPEEDUP_OVER_SAFE = 6.0
MAX_TIME_RATIO_TO_UNSAFE = 1.25
MAX_MEMORY_RATIO_TO_UNSAFE = 1.25


def _generator():
    spec = importlib.util.spec_from_file_location("sample_dumps_generate", ROOT / "sample_dumps" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------------------------------
# The child: one loader, one measurement.


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> bool:
    """Linux resets the peak-RSS counter (VmHWM) on writing 5 to clear_refs."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(loader: str, dump: str, warmup: str) -> None:
    import torch

    sys.path.insert(0, str(ROOT))
    import rollaudit
    import rollaudit._loaders.load  # imported here so that the timed call pays no import

    def run(path: str):
        if loader == "rollaudit":
            return rollaudit.load(path)
        return torch.load(path, weights_only=loader == "safe")

    run(warmup)
    _reset_peak()
    before = _resident_bytes()
    start = time.perf_counter()
    result = run(dump)
    seconds = time.perf_counter() - start
    peak = _peak_bytes() - before
    del result
    print(json.dumps({"loader": loader, "seconds": seconds, "peak_bytes": peak}))


# ---------------------------------------------------------------------------------------------------------------------
# The parent: dumps, rounds, ratios.


def measure(loader: str, dump: Path, warmup: Path) -> dict:
    command = [sys.executable, __file__, "--child", loader, str(dump), str(warmup)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{loader} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a small dump and one round; report, do not check")
    parser.add_argument("--rounds", type=int, default=None, help="fresh-process rounds per loader")
    parser.add_argument("--child", nargs=3, metavar=("LOADER", "DUMP", "WARMUP"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        child(*options.child)
        return 0
    samples, tokens = (100, 1000) if options.small else (800, 3500)
    rounds = options.rounds or (1 if options.small else 3)
    generate = _generator()
    with tempfile.TemporaryDirectory(prefix="rollaudit-bench-") as scratch:
        dump = generate.benchmark_dump(Path(scratch) / "rollout_data" / "0.pt", samples=samples, tokens=tokens)
        warmup = generate.save_rollout_dump(Path(scratch) / "warmup.pt", 0, generate.spec_4_3_4_step())
        size_mb = dump.stat().st_size / 1e6
        print(f"dump: {size_mb:.1f} MB, {samples} samples of ~{tokens} tokens; {rounds} round(s), fresh process each")
        results: dict[str, list[dict]] = {loader: [] for loader in LOADERS}
        for _ in range(rounds):
            for loader in LOADERS:  # interleaved, so that a noisy moment hits every loader alike
                results[loader].append(measure(loader, dump, warmup))
    seconds = {loader: statistics.median(run["seconds"] for run in runs) for loader, runs in results.items()}
    peak = {loader: statistics.median(run["peak_bytes"] for run in runs) for loader, runs in results.items()}
    for loader in LOADERS:
        print(f"{loader:>9}: {seconds[loader]:7.3f} s   peak +{peak[loader] / 1e6:8.1f} MB")
    speedup = seconds["safe"] / seconds["rollaudit"]
    time_ratio = seconds["rollaudit"] / seconds["unsafe"]
    memory_ratio = peak["rollaudit"] / max(peak["unsafe"], 1)
    checks = [
        (f"speedup over torch.load(weights_only=True): {speedup:.2f}x", speedup >= MIN_SPEEDUP_OVER_SAFE, ">= 6"),
        (f"time / torch.load(weights_only=False): {time_ratio:.2f}", time_ratio <= MAX_TIME_RATIO_TO_UNSAFE, "<= 1.25"),
        (
            f"peak memory / torch.load(weights_only=False): {memory_ratio:.2f}",
            memory_ratio <= MAX_MEMORY_RATIO_TO_UNSAFE,
            "<= 1.25",
        ),
    ]
    failed = False
    for text, passed, target in checks:
        print(f"{text}  (target {target}: {'ok' if passed else 'MISSED'})")
        failed |= not passed
    print(json.dumps({"speedup_over_safe": speedup, "time_ratio_to_unsafe": time_ratio, "memory_ratio": memory_ratio}))
    return 1 if failed and not options.small else 0


if __name__ == "__main__":
    sys.exit(main())
