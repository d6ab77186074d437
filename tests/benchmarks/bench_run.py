"""Benchmark: auditing a whole slime run: files per second by engine, the cache, and start-up.

    python tests/benchmarks/bench_run.py            # 100 dumps of ~5 MB; checks warm cache >= 20x cold jobs=1
    python tests/benchmarks/bench_run.py --small    # 8 dumps of ~0.3 MB; reports only (for CI)

Each mode runs in a fresh process that imports rollaudit and loads a tiny
warm-up dump first (paying the lazy imports: pandas, Parquet), then times one
``rollaudit.load`` of the whole run directory. That is the per-file part: the
interpreter and import cost is the same whether the run has 1 or 100 files,
and is measured on its own under ``startup``. Modes: ``jobs1`` (one
process, no cache), ``jobs2`` (two forkserver workers, their start
included), ``cache_fill`` (one process, writing the cache) then
``warm_cache`` (every file from the cache) in the same process (the cache
key holds the source of rollaudit's loaders: a loader edited between two
processes would rightly miss), ``ray`` (Ray tasks on a local Ray with 2
CPUs; ``ray.init`` timed apart as ``ray_init_s``, a second load as
``ray_warm`` once Ray's workers are up; skipped when ray is not installed).
``cpu_parallelism``: how many CPU-bound processes really run at once here
(two pure-Python loops side by side against one; 2.0 on two idle cores), to
read the ``jobs2`` and ``ray`` numbers by.

Start-up: ``python -c "import rollaudit"``, ``rollaudit --help``, and the
time to the first recompute (a fresh process: import, load a small dump,
recompute), each the median of 3 fresh processes (1 with ``--small``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIN_WARM_CACHE_SPEEDUP = 20.0
MODES = ("jobs1", "jobs2", "cache", "ray")


def _generator():
    spec = importlib.util.spec_from_file_location("sample_dumps_generate", ROOT / "sample_dumps" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_run(directory: Path, files: int, samples: int = 40, tokens: int = 2000, seed: int = 0) -> list[Path]:
    """``files`` slime rollout dumps ``<step>.pt`` (steps 0, 1, ...): ``samples`` samples in prompts of 8, each with
    ``tokens`` response tokens, log-probs and loss mask as Python lists, as slime writes them (~16 bytes a token)."""
    import numpy as np

    generate = _generator()
    rng = np.random.default_rng(seed)
    python_rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for step in range(files):
        rows = []
        for position in range(samples):
            sample = generate.rollout_sample(
                python_rng,
                group_index=step * samples + position // 8,
                index=step * samples + position,
                reward=float(rng.random() < 0.5),
                response_length=1,
            )
            # The token-sized fields, made fast: distinct lists per sample (pickle's memo would share equal objects).
            sample["tokens"] = rng.integers(0, 150_000, tokens + 12).tolist()
            sample["rollout_log_probs"] = np.round(-rng.random(tokens) * 2, 6).tolist()
            sample["loss_mask"] = [1] * tokens
            sample["response_length"] = tokens
            rows.append(sample)
        written.append(generate.save_rollout_dump(directory / f"{step}.pt", step, rows))
    return written


# ---------------------------------------------------------------------------------------------------------------------
# The child: one mode, one measurement.


def child(mode: str, run: str, cache: str, warmup: str) -> None:
    import rollaudit
    import rollaudit._loaders.run.load  # imported before the clock starts

    rollaudit.load(warmup, cache=Path(cache) / "warmup")  # lazy imports: pandas (pyarrow's first array), Parquet
    rollaudit.load(warmup, cache=Path(cache) / "warmup")
    result: dict = {"mode": mode}
    keywords: dict = {"jobs": 1}
    if mode == "jobs2":
        keywords = {"jobs": 2}
    elif mode == "cache":
        keywords = {"jobs": 1, "cache": Path(cache) / "run"}
    elif mode == "ray":
        import ray

        started = time.perf_counter()
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        result["ray_init_s"] = time.perf_counter() - started
        keywords = {"engine": "ray"}
    started = time.perf_counter()
    table = rollaudit.load(run, **keywords)
    result["seconds"] = time.perf_counter() - started
    if mode in ("ray", "cache"):
        started = time.perf_counter()
        again = rollaudit.load(run, **keywords)
        result["warm_seconds"] = time.perf_counter() - started
        assert again.equals(table)
    result["rows"] = table.num_rows
    print(json.dumps(result))


def _measure(mode: str, run: Path, cache: Path, warmup: Path) -> dict:
    command = [sys.executable, __file__, "--child", mode, str(run), str(cache), str(warmup)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _wall(command: list[str], rounds: int = 3) -> float:
    """Median wall time of a fresh process running ``command``."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True, cwd=ROOT)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


_LOOP = "sum(range(20_000_000))"


def cpu_parallelism() -> float:
    """Two CPU-bound processes side by side against one: 2.0 when two cores are free, 1.0 when one is."""
    alone = _wall([sys.executable, "-c", _LOOP], rounds=1)
    started = time.perf_counter()
    pair = [subprocess.Popen([sys.executable, "-c", _LOOP]) for _ in range(2)]
    for process in pair:
        process.wait()
    return 2 * alone / (time.perf_counter() - started)


def startup(small_dump: Path, rounds: int) -> dict:
    # The console script's own code, without a launcher in front (a pyenv shim alone costs ~0.1 s).
    help_command = [sys.executable, "-c", "from rollaudit._cli import main; main()", "--help"]
    first_recompute = f"import rollaudit; rollaudit.recompute(rollaudit.load({str(small_dump)!r}))"
    return {
        "import_rollaudit_s": _wall([sys.executable, "-c", "import rollaudit"], rounds),
        "rollaudit_help_s": _wall(help_command, rounds),
        "first_recompute_s": _wall([sys.executable, "-c", first_recompute], rounds),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="8 small dumps; report, do not check")
    parser.add_argument("--files", type=int, default=None, help="dumps in the run (default 100, small 8)")
    parser.add_argument("--child", nargs=4, metavar=("MODE", "RUN", "CACHE", "WARMUP"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        child(*options.child)
        return 0
    files = options.files or (8 if options.small else 100)
    # ~16 bytes a token: 128 samples x 2600 tokens is ~5.3 MB a dump.
    samples, tokens = (16, 1200) if options.small else (128, 2600)
    has_ray = importlib.util.find_spec("ray") is not None
    with tempfile.TemporaryDirectory(prefix="rollaudit-bench-run-") as scratch:
        run = Path(scratch) / "run"
        started = time.perf_counter()
        dumps = write_run(run, files, samples, tokens)
        megabytes = sum(path.stat().st_size for path in dumps) / 1e6
        print(
            f"run: {files} dumps, {megabytes:.0f} MB ({megabytes / files:.1f} MB each), "
            f"written in {time.perf_counter() - started:.1f} s"
        )
        warmup = write_run(Path(scratch) / "warmup", 1, 8, 16)[0]
        results = {}
        for mode in MODES:
            if mode == "ray" and not has_ray:
                print("ray: not installed, skipped")
                continue
            results[mode] = _measure(mode, run, Path(scratch) / "cache", warmup)
        parallelism = round(cpu_parallelism(), 2)
        numbers: dict = {"files": files, "megabytes": round(megabytes, 1), "cpu_parallelism": parallelism}
        cache = results.pop("cache")
        results["cache_fill"] = cache
        results["warm_cache"] = {"seconds": cache["warm_seconds"]}
        for mode, result in results.items():
            numbers[f"{mode}_files_per_s"] = round(files / result["seconds"], 2)
            numbers[f"{mode}_s"] = round(result["seconds"], 3)
        if "ray" in results:
            numbers["ray_init_s"] = round(results["ray"]["ray_init_s"], 2)
            numbers["ray_warm_files_per_s"] = round(files / results["ray"]["warm_seconds"], 2)
        cold = results["jobs1"]["seconds"]
        numbers["warm_cache_speedup_over_jobs1"] = round(cold / results["warm_cache"]["seconds"], 1)
        numbers["jobs2_speedup_over_jobs1"] = round(cold / results["jobs2"]["seconds"], 2)
        measured = startup(warmup, rounds=1 if options.small else 3)
        numbers["startup"] = {name: round(value, 3) for name, value in measured.items()}
    for mode, result in results.items():
        print(f"{mode:>11}: {result['seconds']:7.3f} s  {files / result['seconds']:8.1f} files/s")
    speedup = numbers["warm_cache_speedup_over_jobs1"]
    passed = speedup >= MIN_WARM_CACHE_SPEEDUP
    print(
        f"warm cache speed-up over cold jobs=1, per file: {speedup:.1f}x "
        f"(target >= {MIN_WARM_CACHE_SPEEDUP:.0f}: {'ok' if passed else 'MISSED'})"
    )
    print(json.dumps(numbers))
    return 0 if passed or options.small else 1


if __name__ == "__main__":
    sys.exit(main())
