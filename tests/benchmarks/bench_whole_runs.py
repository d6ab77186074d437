"""Benchmark: whole runs as a user audits them, against the pandas script people write instead.

    python tests/benchmarks/bench_whole_runs.py               # 400 steps a run, 3 rounds
    python tests/benchmarks/bench_whole_runs.py --small       # 12 steps a run, 1 round (CI: reports only)

Three runs, written here (deterministic), one file a step:

- ``verl``: verl's V1 trainer's rollout dumps (``rollout_data/{step}.jsonl``, ~450 KB a step: 1,024 outputs of
  64 prompts, uid = ``{prompt uid}_{session}_{output}``);
- ``trl``: TRL's GRPOTrainer completions (``completions/completions_{step:05d}.parquet``, 512 rows a step, two
  reward functions and the advantage);
- ``slime``: slime's rollout dumps (``rollout_data/{step}.pt``, 256 samples a step with their tokens).

Each is measured in whole processes, rounds interleaved (median): ``rollaudit compare DIR`` (its default: the
cache on, cold: a fresh cache directory each round), the same with ``--no-cache``, and the script a user writes
with pandas (``pd.read_json``/``pd.read_parquet``, ``torch.load`` for slime) computing the per-prompt scheme
alone. In one process: ``rollaudit.load`` of the run (MB/s) after the imports, and ``compare`` of one small
dump, with its start-up apart (the interpreter and the imports an audit needs: torch, pandas, pyarrow, rich).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_dumps"))

VERL_PROMPTS, VERL_OUTPUTS = 64, 16
TRL_ROWS, TRL_GENERATIONS = 512, 8
SLIME_SAMPLES, SLIME_N = 256, 8

PANDAS_SCRIPTS = {
    "verl": """
import sys, glob, pandas as pd
frames = [pd.read_json(path, lines=True) for path in sorted(glob.glob(sys.argv[1] + "/rollout_data/*.jsonl"))]
df = pd.concat(frames, ignore_index=True)
df["prompt"] = df["uid"].str.rsplit("_", n=2).str[0]
g = df.groupby(["step", "prompt"])["score"]
df["advantage"] = (df["score"] - g.transform("mean")) / (g.transform("std") + 1e-6)
print(len(df), float(df["advantage"].abs().sum()))
""",
    "trl": """
import sys, glob, pandas as pd
df = pd.concat([pd.read_parquet(p) for p in sorted(glob.glob(sys.argv[1] + "/completions/*.parquet"))])
df["reward"] = df["accuracy_reward"] + df["format_reward"]
g = df.groupby(["step", "prompt"])["reward"]
df["adv"] = (df["reward"] - g.transform("mean")) / (g.transform("std") + 1e-4)
print(len(df), float(df["adv"].abs().sum()))
""",
    "slime": """
import sys, glob, torch, pandas as pd
rows = []
for path in sorted(glob.glob(sys.argv[1] + "/rollout_data/*.pt")):
    dump = torch.load(path, weights_only=False)
    rows += [(dump["rollout_id"], s["group_index"], s["reward"]) for s in dump["samples"]]
df = pd.DataFrame(rows, columns=["step", "prompt", "reward"])
g = df.groupby(["step", "prompt"])["reward"]
df["adv"] = (df["reward"] - g.transform("mean")) / (g.transform("std") + 1e-6)
print(len(df), float(df["adv"].abs().sum()))
""",
}


def write_verl(root: Path, steps: int) -> Path:
    folder = root / "rollout_data"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(11)
    system = "You are a careful assistant. Think step by step and give the final answer in a box. " * 2
    for step in range(steps):
        lines = []
        for prompt in range(VERL_PROMPTS):
            uid = f"{rng.getrandbits(128):032x}"
            for output in range(VERL_OUTPUTS):
                session, index = divmod(output, 2)
                lines.append(
                    {
                        "input": f"system\n{system}\nuser\nProblem {step}.{prompt}: compute {rng.randint(0, 10**6)}",
                        "output": f"<think>{'x' * rng.randint(40, 120)}</think> answer {rng.randint(0, 99)}",
                        "gts": str(prompt),
                        "score": float(rng.choice([0.0, 1.0])),
                        "step": step,
                        "uid": f"{uid}_{session}_{index}",
                    }
                )
        lines.sort(key=lambda line: line["uid"])
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (folder / f"{step}.jsonl").write_text(text, encoding="utf-8")
    return root


def write_trl(root: Path, steps: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = root / "completions"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(12)
    for step in range(steps):
        prompts = [f"Question {step}.{row // TRL_GENERATIONS}: {'y' * 200}" for row in range(TRL_ROWS)]
        accuracy = [float(rng.random() < 0.5) for _ in range(TRL_ROWS)]
        formatting = [0.5 * (rng.random() < 0.7) for _ in range(TRL_ROWS)]
        table = pa.table(
            {
                "step": pa.array([step] * TRL_ROWS, pa.int64()),
                "prompt": prompts,
                "completion": [f"answer {rng.randint(0, 99)} {'z' * 100}" for _ in range(TRL_ROWS)],
                "accuracy_reward": accuracy,
                "format_reward": formatting,
                "advantage": [0.0] * TRL_ROWS,
            }
        )
        pq.write_table(table, folder / f"completions_{step:05d}.parquet")
    return root


def write_slime(root: Path, steps: int) -> Path:
    from generate import rollout_sample, save_rollout_dump

    rng = random.Random(13)
    for step in range(steps):
        samples = [
            rollout_sample(
                rng,
                group_index=index // SLIME_N,
                index=index,
                reward=float(rng.choice([0.0, 1.0])),
                rollout_id=step,
                response_length=64,
            )
            for index in range(SLIME_SAMPLES)
        ]
        save_rollout_dump(root / "rollout_data" / f"{step}.pt", step, samples)
    return root


WRITERS = {"verl": write_verl, "trl": write_trl, "slime": write_slime}


def _run(command: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def _size(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def _load_seconds(run: Path) -> float:
    script = (
        "import sys, time, rollaudit, pyarrow\n"
        "rollaudit.load(sys.argv[2])\n"  # the imports and a first file: what a second run pays no more
        "t = time.perf_counter(); rollaudit.load(sys.argv[1], cache=False)\n"
        "print(time.perf_counter() - t)\n"
    )
    first = next(path for path in sorted(run.rglob("*")) if path.is_file())
    done = subprocess.run(
        [sys.executable, "-c", script, str(run), str(first)], capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def measure(steps: int, rounds: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    rollaudit = [sys.executable, "-m", "rollaudit", "compare"]
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        for name, writer in WRITERS.items():
            run = writer(base / name, steps)
            script = base / f"{name}_pandas.py"
            script.write_text(PANDAS_SCRIPTS[name], encoding="utf-8")
            times: dict[str, list[float]] = {"compare": [], "compare_no_cache": [], "pandas": [], "load": []}
            for round_ in range(rounds):
                env = {**os.environ, "XDG_CACHE_HOME": str(base / f"cache_{name}_{round_}")}
                times["compare"].append(_run([*rollaudit, str(run), "--quiet"], env))
                times["compare_no_cache"].append(_run([*rollaudit, str(run), "--quiet", "--no-cache"]))
                times["pandas"].append(_run([sys.executable, str(script), str(run)]))
                times["load"].append(_load_seconds(run))
            medians = {key: statistics.median(values) for key, values in times.items()}
            megabytes = _size(run) / 1e6
            results[name] = {
                "steps": steps,
                "megabytes": round(megabytes, 1),
                **{f"{key}_s": round(value, 3) for key, value in medians.items()},
                "compare_vs_pandas": round(medians["pandas"] / medians["compare"], 2),
                "compare_no_cache_vs_pandas": round(medians["pandas"] / medians["compare_no_cache"], 2),
                "load_mb_per_s": round(megabytes / medians["load"], 1),
            }
            print(name, json.dumps(results[name]), flush=True)
    small = ROOT / "sample_dumps" / "fanout" / "rollout_data" / "3.pt"
    # What every compare pays before and besides its work: the interpreter and the imports of an audit.
    imports = "import rollaudit._cli, rollaudit._audit.api, rollaudit._audit.engine.encode, rich.console, pyarrow"
    startup = [_run([sys.executable, "-c", imports]) for _ in range(rounds)]
    whole = [_run([*rollaudit, str(small), "--quiet", "--no-cache"]) for _ in range(rounds)]
    results["small_dump"] = {
        "compare_s": round(statistics.median(whole), 3),
        "startup_s": round(statistics.median(startup), 3),
    }
    print("small_dump", json.dumps(results["small_dump"]), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="12 steps, one round: reports only")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    steps, rounds = (12, 1) if args.small else (args.steps, args.rounds)
    results = measure(steps, rounds)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
