"""Benchmark: each JSON Lines format's read against ``orjson.loads`` over the same lines.

    python tests/benchmarks/bench_json_load.py            # 400 copies of each format's corpus file, 3 rounds
    python tests/benchmarks/bench_json_load.py --small    # 20 copies, 1 round, reports only (for CI)

For each format, its own corpus file (the sample dump where the corpus is not beside the project) is copied once
per step, as a 400-step run holds it, and read three ways, in interleaved rounds (the best of each):

- ``orjson``: ``orjson.loads`` of every line of every copy, on one core (the bytes already in memory, each file's
  values kept until the next file's);
- ``jobs=1``: the format's own ``read`` of every copy, one after another, on one core;
- ``jobs=2``: the same copies split between two worker processes (as ``--jobs 2`` reads a run's files).

Targets: ``jobs=1`` at least 60% of ``orjson``'s rate, ``jobs=2`` at least 1.5 times that (0.9 of ``orjson`` on
one core). Checked at full size; reported at --small.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
SAMPLES = ROOT / "sample_dumps"
MIN_SHARE_OF_ORJSON = 0.6
MIN_GAIN_WITH_TWO_JOBS = 1.5
# format -> (corpus file, sample file standing in for it, the file's name under each step's directory)
FILES = {
    "verl": ("verl/rollout_data_v1/5.jsonl", "verl_v1/rollout_data/3.jsonl", "{step}.jsonl"),
    "areal": (
        "areal/experiments/logs/rl/gsm8k-agent-grpo/trial0/rollout/3/102.jsonl",
        "areal/rollout/2/40.jsonl",
        "rollout/{step}/100.jsonl",
    ),
    "nemo_rl": ("nemo_rl/grpo/train_data_step3.jsonl", "nemo_rl/train_data_step3.jsonl", "train_data_step{step}.jsonl"),
    "open_instruct": (
        "open_instruct/rollouts/oi_default_rollouts_000000.jsonl",
        "open_instruct/rollouts/demo_rollouts_000000.jsonl",
        "s{step}/rollouts/demo_rollouts_000000.jsonl",
    ),
    "tinker": (
        "tinker/iteration_000003/train_rollout_summaries.jsonl",
        "tinker/iteration_000001/train_rollout_summaries.jsonl",
        "iteration_{step:06d}/train_rollout_summaries.jsonl",
    ),
    "prime_rl": (
        "prime_rl/rollouts/step_1/train/all/traces.jsonl",
        "prime_rl/rollouts/step_1/train/all/traces.jsonl",
        "rollouts/step_{step}/train/all/traces.jsonl",
    ),
    "roll": (
        "roll/agentic/rollout_dump_data.step_3.jsonl",
        "roll/rollout_dump_data.step_2.jsonl",
        "rollout_dump_data.step_{step}.jsonl",
    ),
    "generic": ("", "generic/rollouts.jsonl", "step{step}.jsonl"),
}


def _source(name: str) -> Path:
    corpus, sample, _ = FILES[name]
    return CORPUS / corpus if corpus and (CORPUS / corpus).is_file() else SAMPLES / sample


def _copies(name: str, steps: int, directory: Path) -> list[Path]:
    source, pattern = _source(name), FILES[name][2]
    paths = []
    for step in range(1, steps + 1):
        path = directory / name / pattern.format(step=step)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, path)
        paths.append(path)
    return paths


def _read_all(name: str, paths: list[Path]) -> int:
    from rollaudit._loaders.options import LoadOptions
    from rollaudit._loaders.registry import FORMATS

    loader = FORMATS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sum(loader.read(path, LoadOptions()).num_rows for path in paths)


def _orjson_all(files: list[list[bytes]]) -> int:
    """Every line parsed, a file's values kept until the next file (as a reader keeps them)."""
    import orjson

    loads = orjson.loads
    return sum(len([loads(line) for line in lines]) for lines in files)


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(name: str, steps: int, rounds: int, pool: concurrent.futures.Executor, directory: Path) -> dict:
    paths = _copies(name, steps, directory)
    size = sum(path.stat().st_size for path in paths)
    lines = [[line for line in path.read_bytes().split(b"\n") if line.strip()] for path in paths]
    halves = [paths[0::2], paths[1::2]]
    _read_all(name, paths[:2])  # warm-up: imports and first calls
    best = {"orjson": float("inf"), "jobs=1": float("inf"), "jobs=2": float("inf")}
    for _ in range(rounds):
        best["orjson"] = min(best["orjson"], _timed(lambda: _orjson_all(lines)))
        best["jobs=1"] = min(best["jobs=1"], _timed(lambda: _read_all(name, paths)))
        best["jobs=2"] = min(best["jobs=2"], _timed(lambda: list(pool.map(_read_all, [name, name], halves))))
    return {"bytes": size, **best}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="20 copies, 1 round, report only")
    parser.add_argument("--formats", nargs="*", default=sorted(FILES))
    args = parser.parse_args(argv)
    steps, rounds = (20, 1) if args.small else (400, 3)
    failed = []
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as temporary, concurrent.futures.ProcessPoolExecutor(2, context) as pool:
        list(pool.map(_read_all, ["generic", "generic"], [[], []]))  # start both workers before timing
        print(f"{'format':14} {'MB':>7} {'orjson MB/s':>12} {'jobs=1 MB/s':>12} {'share':>6} ", end="")
        print(f"{'jobs=2 MB/s':>12} {'gain':>5}")
        for name in args.formats:
            result = measure(name, steps, rounds, pool, Path(temporary))
            megabytes = result["bytes"] / 1e6
            rates = {key: megabytes / result[key] for key in ("orjson", "jobs=1", "jobs=2")}
            share, gain = rates["jobs=1"] / rates["orjson"], rates["jobs=2"] / rates["jobs=1"]
            print(
                f"{name:14} {megabytes:7.1f} {rates['orjson']:12.0f} {rates['jobs=1']:12.0f} {share:6.2f} "
                f"{rates['jobs=2']:12.0f} {gain:5.2f}"
            )
            if (
                share < MIN_SHARE_OF_ORJSON
                or rates["jobs=2"] < MIN_GAIN_WITH_TWO_JOBS * MIN_SHARE_OF_ORJSON * rates["orjson"]
            ):
                failed.append(name)
    print("share: each format's read rate on one core as a share of orjson.loads's on one core (target >= 0.6)")
    print("gain: the rate with two worker processes over one (target: jobs=2 >= 1.5 x 0.6 of orjson's one-core rate)")
    if failed and not args.small:
        print("below target: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
