"""Benchmark: what a command costs beyond torch's import, on a small bundled sample.

    python tests/benchmarks/bench_startup.py               # 7 rounds
    python tests/benchmarks/bench_startup.py --small       # 1 round (CI: reports only)
    python tests/benchmarks/bench_startup.py --no-bytecode # every module compiled from source, every run

Whole processes, rounds interleaved (medians): ``python -c "import torch"`` (the floor every audit pays), then
``rollaudit compare <sample> --no-cache``, the same read from a warm cache, and ``rollaudit gate <sample>`` with
one rule. Each command's excess is its median minus import torch's: the imports and work of rollaudit itself.
Modules' bytecode is cached as an installed package's is (in a scratch ``PYTHONPYCACHEPREFIX``, filled by a first
run of each command), unless ``--no-bytecode``.
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
SAMPLE = ROOT / "sample_dumps" / "dump_details"


def _run(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):  # a gate whose rule fails exits 1: its time still counts
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def measure(rounds: int, bytecode: bool = True) -> dict[str, float]:
    rollaudit = [sys.executable, "-m", "rollaudit"]
    commands = {
        "import_torch": [sys.executable, "-c", "import torch"],
        "compare_no_cache": [*rollaudit, "compare", str(SAMPLE), "--no-cache"],
        "compare_cached": [*rollaudit, "compare", str(SAMPLE)],
        "gate": [*rollaudit, "gate", str(SAMPLE), "--no-cache", "--max", "trained:strict_flip_rate=0"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "XDG_CACHE_HOME": os.path.join(scratch, "cache")}
        if bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "bytecode")
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        for command in commands.values():  # the bytecode written, the cache the cached rounds read filled
            _run(command, env)
        for _ in range(rounds):
            for name, command in commands.items():
                times[name].append(_run(command, env))
    medians = {name: statistics.median(values) for name, values in times.items()}
    results = {f"{name}_s": round(value, 3) for name, value in medians.items()}
    for name in ("compare_no_cache", "compare_cached", "gate"):
        results[f"{name}_excess_s"] = round(medians[name] - medians["import_torch"], 3)
    results["rounds"] = rounds
    results["bytecode"] = bytecode
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="one round: reports only")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-bytecode", action="store_true", help="compile every module from source, every run")
    args = parser.parse_args(argv)
    print(json.dumps(measure(1 if args.small else args.rounds, bytecode=not args.no_bytecode), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
