"""Benchmark: ``rollaudit compare`` against the scripts a user writes instead (``../shared/bench``: pandas, polars,
DuckDB), whole processes, rounds interleaved, time and peak memory (the process tree's largest resident set).

    python tests/benchmarks/bench_vs_scripts.py                    # the four runs below, 3 rounds
    python tests/benchmarks/bench_vs_scripts.py --runs real:500    # one run: KIND:STEPS
    python tests/benchmarks/bench_vs_scripts.py --small            # CI: 8 steps each, one round, reports only

Runs, written here (deterministic), verl's V1 rollout dumps (``{step}.jsonl``: ``input``, ``output``, ``gts``,
``score``, ``step``, ``uid``):

- ``corpus:STEPS``: the corpus's verl files (400 and 432 rows of about 1 KB, agentic uids) one a step, in turn,
  each line's ``step`` written as the step's;
- ``real:STEPS``: 256 rows a step (32 prompts, 8 sessions of 1-3 turns), responses of 1,500-4,500 words (about
  17 KB a row), as reasoning models write them; past 100 steps, the first hundred again in turn, each line's
  ``step`` written as the step's (writing gigabytes of fresh text would take longer than reading them).

Each round runs, in turn: ``python -c "import torch"``, ``rollaudit compare DIR --no-cache --json``, a warm
``--cache`` re-audit (its cache written once before the rounds), and each script. Printed per run: the median
seconds and peak MB of each; the targets' left sides: rollaudit's time beyond torch's import against the fastest
script's time, and its peak against that script's peak plus torch's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
CORPUS_FILES = [SHARED / "corpus" / "verl" / "rollout_data_v1" / name for name in ("5.jsonl", "6.jsonl")]
SCRIPTS = {name: SHARED / "bench" / f"{name}_same.py" for name in ("duckdb", "polars", "pandas")}
DEFAULT_RUNS = ("corpus:400", "corpus:2000", "real:100", "real:500")
REAL_PROMPTS, REAL_SESSIONS, REAL_DISTINCT = 32, 8, 100
_STEP = re.compile(rb'"step": \d+')


def write_corpus(folder: Path, steps: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    sources = [path.read_bytes() for path in CORPUS_FILES]
    for step in range(steps):
        text = _STEP.sub(f'"step": {step}'.encode(), sources[step % len(sources)])
        (folder / f"{step}.jsonl").write_bytes(text)
    return folder


def write_real(folder: Path, steps: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(17)
    vocabulary = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(4000)
    ]
    words = rng.choices(vocabulary, k=200_000)  # a long text; each response is a window of it
    for step in range(min(steps, REAL_DISTINCT)):
        lines = []
        for prompt in range(REAL_PROMPTS):
            uid = f"{rng.getrandbits(128):032x}"
            question = " ".join(rng.choices(vocabulary, k=rng.randint(60, 200)))
            sessions, rows = 0, 0
            while rows < REAL_SESSIONS:
                turns = min(rng.randint(1, 3), REAL_SESSIONS - rows)
                for turn in range(turns):
                    count = rng.randint(1500, 4500)
                    start = rng.randrange(len(words) - count)
                    lines.append(
                        {
                            "input": f"system\nYou are a careful reasoner.\nuser\nProblem {step}.{prompt}: {question}",
                            "output": "<think>" + " ".join(words[start : start + count]) + "</think> \\boxed{42}",
                            "gts": "42",
                            "score": float(rng.random() < 0.4),
                            "step": step,
                            "uid": f"{uid}_{sessions}_{turn}",
                        }
                    )
                sessions, rows = sessions + 1, rows + turns
        (folder / f"{step}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    for step in range(REAL_DISTINCT, steps):
        text = (folder / f"{step % REAL_DISTINCT}.jsonl").read_bytes()
        (folder / f"{step}.jsonl").write_bytes(_STEP.sub(f'"step": {step}'.encode(), text))
    return folder


WRITERS = {"corpus": write_corpus, "real": write_real}


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Seconds and peak resident MB of ``command`` and its children (its workers' largest, or its own)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    error = process.stderr.read().decode() if process.stderr else ""
    if process.stderr:
        process.stderr.close()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{error[-2000:]}")
    return elapsed, usage.ru_maxrss / 1024


def commands(run: Path, cache: Path) -> dict[str, tuple[list[str], dict[str, str] | None]]:
    python = sys.executable
    compare = [python, "-m", "rollaudit", "compare", str(run), "--json"]
    return {
        "import_torch": ([python, "-c", "import torch"], None),
        "rollaudit": ([*compare, "--no-cache"], None),
        "rollaudit_warm": ([*compare, "--cache", str(cache)], None),
        **{name: ([python, str(script), str(run)], None) for name, script in SCRIPTS.items()},
    }


def measure(kind: str, steps: int, rounds: int, scratch: Path, skip: set[str]) -> dict[str, object]:
    run = WRITERS[kind](scratch / f"{kind}_{steps}", steps)
    megabytes = sum(path.stat().st_size for path in run.iterdir()) / 1e6
    cache = scratch / f"cache_{kind}_{steps}"
    chosen = {name: value for name, value in commands(run, cache).items() if name not in skip}
    timed(*chosen["rollaudit_warm"])  # writes the cache the warm rounds read
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in chosen}
    for _ in range(rounds):
        for name, (command, env) in chosen.items():
            samples[name].append(timed(command, env))
    result: dict[str, object] = {"run": f"{kind}:{steps}", "megabytes": round(megabytes)}
    for name, values in samples.items():
        result[f"{name}_s"] = round(statistics.median(value[0] for value in values), 2)
        result[f"{name}_mb"] = round(max(value[1] for value in values))
    scripts = [name for name in SCRIPTS if name in samples]
    fastest = min(scripts, key=lambda name: result[f"{name}_s"])  # type: ignore[arg-type, return-value]
    torch_s, torch_mb = result["import_torch_s"], result["import_torch_mb"]
    result["fastest"] = fastest
    result["beyond_torch_s"] = round(result["rollaudit_s"] - torch_s, 2)  # type: ignore[operator]
    result["warm_beyond_torch_s"] = round(result["rollaudit_warm_s"] - torch_s, 2)  # type: ignore[operator]
    result["fastest_s"], result["fastest_mb"] = result[f"{fastest}_s"], result[f"{fastest}_mb"]
    result["peak_allowed_mb"] = result["fastest_mb"] + torch_mb  # type: ignore[operator]
    shutil.rmtree(run)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="*", default=list(DEFAULT_RUNS), help="KIND:STEPS, KIND corpus or real")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="8 steps of each kind, one round: reports only")
    parser.add_argument("--skip", nargs="*", default=[], help="commands left out (pandas is slow on big runs)")
    args = parser.parse_args(argv)
    runs, rounds = (["corpus:8", "real:8"], 1) if args.small else (args.runs, args.rounds)
    available = {name for name in ("duckdb", "polars") if _importable(name)}
    skip = set(args.skip) | {name for name in ("duckdb", "polars") if name not in available}
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for run in runs:
            kind, _, steps = run.partition(":")
            results.append(measure(kind, int(steps), rounds, Path(scratch), skip))
            print(json.dumps(results[-1]), flush=True)
    print(json.dumps(results, indent=2))
    return 0


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    sys.exit(main())
