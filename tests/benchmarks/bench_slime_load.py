"""Benchmark: rollaudit.load on large slime dumps against torch.load and against reading the bytes.

    python tests/benchmarks/bench_slime_load.py            # 40 MB and 160 MB dumps, 3 rounds, checks the targets
    python tests/benchmarks/bench_slime_load.py --small    # a few MB, 1 round, reports only (for CI)
    python tests/benchmarks/bench_slime_load.py --safe     # torch.load(weights_only=True) too (minutes)

Each measurement runs in a fresh process: import torch and rollaudit, load a
small dump once with the same loader (warm-up), then time one load of the
big dump and record its peak resident memory above the pre-load level.
Loaders: ``rollaudit`` (rollaudit.load), ``unsafe`` (torch.load with
weights_only=False: runs code named by the file), ``bytes`` (the file read
into memory: the disk's floor) and, with --safe, ``safe`` (torch.load with
weights_only=True: a pure-Python unpickler).
Targets: rollaudit at least 5x faster than ``unsafe``, and its
peak memory growth at most 1x the file's size.
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
MIN_SPEEDUP_OVER_UNSAFE = 5.0
MAX_GROWTH_PER_FILE_BYTE = 1.0
SIZES = {"40 MB": (800, 3500), "160 MB": (3200, 3500)}
SMALL_SIZES = {"4 MB": (100, 3000)}


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
    import rollaudit._loaders.run.load  # imported here so that the timed call pays no import

    def run(path: str):
        if loader == "rollaudit":
            return rollaudit.load(path, cache=False)
        if loader == "bytes":
            with open(path, "rb") as stream:
                return stream.read()
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
    parser.add_argument("--safe", action="store_true", help="also time torch.load(weights_only=True) (slow)")
    parser.add_argument("--rounds", type=int, default=None, help="fresh-process rounds per loader")
    parser.add_argument("--child", nargs=3, metavar=("LOADER", "DUMP", "WARMUP"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        child(*options.child)
        return 0
    loaders = ("rollaudit", "unsafe", "bytes", *(("safe",) if options.safe else ()))
    rounds = options.rounds or (1 if options.small else 3)
    generate = _generator()
    failed = False
    summary = {}
    with tempfile.TemporaryDirectory(prefix="rollaudit-bench-") as scratch:
        warmup = generate.save_rollout_dump(Path(scratch) / "warmup.pt", 0, generate.spec_4_3_4_step())
        for label, (samples, tokens) in (SMALL_SIZES if options.small else SIZES).items():
            dump = generate.benchmark_dump(Path(scratch) / label / "0.pt", samples=samples, tokens=tokens)
            size = dump.stat().st_size
            print(f"dump {label}: {size / 1e6:.1f} MB, {samples} samples of ~{tokens} tokens; {rounds} round(s)")
            results: dict[str, list[dict]] = {loader: [] for loader in loaders}
            for _ in range(rounds):
                for loader in loaders:  # interleaved, so that a noisy moment hits every loader alike
                    results[loader].append(measure(loader, dump, warmup))
            dump.unlink()
            seconds = {loader: statistics.median(run["seconds"] for run in runs) for loader, runs in results.items()}
            peak = {loader: statistics.median(run["peak_bytes"] for run in runs) for loader, runs in results.items()}
            for loader in loaders:
                rate = size / 1e6 / seconds[loader]
                print(f"{loader:>10}: {seconds[loader]:7.3f} s  {rate:8.0f} MB/s   peak +{peak[loader] / 1e6:8.1f} MB")
            speedup = seconds["unsafe"] / seconds["rollaudit"]
            growth = peak["rollaudit"] / size
            of_disk = seconds["bytes"] / seconds["rollaudit"]
            checks = [
                (f"speedup over torch.load(weights_only=False): {speedup:.2f}x", speedup >= MIN_SPEEDUP_OVER_UNSAFE,
                 ">= 5"),
                (f"peak memory growth per byte of dump: {growth:.2f}", growth <= MAX_GROWTH_PER_FILE_BYTE, "<= 1"),
            ]  # fmt: skip
            print(f"rollaudit reads at {of_disk:.1%} of the speed of reading the bytes")
            for text, passed, target in checks:
                print(f"{text}  (target {target}: {'ok' if passed else 'MISSED'})")
                failed |= not passed
            summary[label] = {"speedup_over_unsafe": speedup, "growth_per_byte": growth, "share_of_disk": of_disk}
    print(json.dumps(summary))
    return 1 if failed and not options.small else 0


if __name__ == "__main__":
    sys.exit(main())
