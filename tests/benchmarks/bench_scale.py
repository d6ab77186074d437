"""Benchmark: how ``compare`` scales with a run's steps in time and memory, against a pandas script of its report.

    python tests/benchmarks/bench_scale.py            # verl runs of 400 and 2,000 steps, 3 rounds (~1.1 GB on disk)
    python tests/benchmarks/bench_scale.py --small    # 8 and 40 steps, 1 round (CI: reports only)
    python tests/benchmarks/bench_scale.py --set ARROW_DEFAULT_MEMORY_POOL=system   # compare under a setting

The runs are verl V1 rollout dumps (``rollout_data/{step}.jsonl``, ~460 KB a step, 1,024 outputs of 64 prompts),
written by :func:`bench_whole_runs.write_verl`; the smaller run is the first steps of the larger one (hard links: the
writer is deterministic step after step). Each command runs in its own process, rounds interleaved (median):

- ``rollaudit compare DIR --no-cache --json``: the JSON report is what a CI job keeps and reads, and it holds every
  step's and every prompt's numbers that the pandas script computes too (the terminal report shows the worst of
  them, at a width that depends on the terminal);
- the pandas script a user writes for the same report: ``pd.read_json`` of every file, verl's uid split into the
  prompt and the session (the trajectory), the advantages under ``batch``, ``prompt`` and ``verl-grpo-v1`` (the
  sessions deduplicated, each by its last output: what ``compare`` audits on these dumps, whose sessions' outputs
  carry different scores, so that ``trajectory`` with its first-output default is not auditable, and the script
  counts those sessions), and against ``prompt``: sign changes (and reversals), non-zero, spurious and lost counts,
  the differences and the cosine, per step and over the run; per prompt its counts; the group-size histograms.
  Its counts are checked against the JSON report's each round (``reports_agree``).

Peak memory is that of the whole process tree (``compare`` reads in worker processes): the sum of the resident sets
of the command and every descendant, sampled every 20 ms with psutil (``peak_mb``); beside it, ``os.wait4``'s
``ru_maxrss``, the largest single process of the tree (``largest_process_mb``), which sampling cannot miss.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.benchmarks.bench_whole_runs import write_verl

SAMPLE_SECONDS = 0.02
BYTES_PER_STEP = 470_000  # what write_verl writes a step, with room

PANDAS_SCRIPT = r"""
import sys, glob, json
import numpy as np, pandas as pd

EPS, TOL = 1e-6, 1e-6
paths = sorted(glob.glob(sys.argv[1] + "/rollout_data/*.jsonl"))
frames = [pd.read_json(path, lines=True, dtype=False) for path in paths]
df = pd.concat(frames, ignore_index=True)
del frames
uid = df["uid"].str.rsplit("_", n=2, expand=True)
df["prompt"] = uid[0]
df["trajectory"] = uid[0] + "_" + uid[1]
del uid
score = df["score"].astype("float64")


def normalised(values, groups, singleton):
    mean, std, size = groups.transform("mean"), groups.transform("std"), groups.transform("size")
    return ((values - mean) / (std + EPS)).where(size > 1, singleton)


adv = {
    "batch": normalised(score, score.groupby(df["step"]), 0.0),
    "prompt": normalised(score, score.groupby([df["step"], df["prompt"]], sort=False), 0.0),
}
# verl-grpo-v1: one member per session (its last output's score), singleton raw; every output gets its session's value.
last = df.assign(score=score).groupby(["step", "prompt", "trajectory"], sort=False)["score"].last().reset_index()
sessions = last.groupby(["step", "prompt"], sort=False)["score"]
last["adv"] = normalised(last["score"], sessions, last["score"] / (1 + EPS))
spread = df[["step", "trajectory"]].merge(last[["step", "trajectory", "adv"]], how="left")["adv"]
adv["verl-grpo-v1"] = pd.Series(spread.to_numpy(), index=df.index)
varying = int((df.assign(score=score).groupby(["step", "trajectory"], sort=False)["score"].nunique() > 1).sum())


def sign(values):
    return np.sign(values).where(values.abs() > TOL, 0.0)


reference = adv["prompt"]
reference_sign = sign(reference)
summary, per_step, per_prompt = {}, {}, {}
prompt_keys = [df["step"], df["prompt"]]
for name, values in adv.items():
    value_sign = sign(values)
    rows = pd.DataFrame({
        "step": df["step"],
        "flip": value_sign != reference_sign,
        "strict": value_sign * reference_sign == -1,
        "nonzero": value_sign != 0,
        "nonzero_reference": reference_sign != 0,
        "spurious": (reference_sign == 0) & (value_sign != 0),
        "lost": (reference_sign != 0) & (value_sign == 0),
        "diff": (values - reference).abs(),
        "sr": values * reference, "ss": values * values, "rr": reference * reference,
    })
    steps = rows.groupby("step").agg(
        sign_flip_rate=("flip", "mean"), strict_flip_rate=("strict", "mean"), nonzero=("nonzero", "sum"),
        nonzero_reference=("nonzero_reference", "sum"), spurious_nonzero=("spurious", "sum"),
        lost_signal=("lost", "sum"),
        max_abs_diff=("diff", "max"), mean_abs_diff=("diff", "mean"), sr=("sr", "sum"), ss=("ss", "sum"),
        rr=("rr", "sum"), compared=("flip", "size"),
    )
    steps["nonzero_inflation"] = steps["nonzero"] / steps["nonzero_reference"].replace(0, np.nan)
    steps["advantage_cosine"] = steps["sr"] / np.sqrt(steps["ss"] * steps["rr"])
    per_step[name] = steps.drop(columns=["sr", "ss", "rr"])
    whole = rows.drop(columns="step").agg(["mean", "sum", "max"])
    summary[name] = {
        "sign_flip_rate": float(whole.loc["mean", "flip"]), "strict_flip_rate": float(whole.loc["mean", "strict"]),
        "nonzero": int(whole.loc["sum", "nonzero"]), "nonzero_reference": int(whole.loc["sum", "nonzero_reference"]),
        "spurious_nonzero": int(whole.loc["sum", "spurious"]), "lost_signal": int(whole.loc["sum", "lost"]),
        "max_abs_diff": float(whole.loc["max", "diff"]), "mean_abs_diff": float(whole.loc["mean", "diff"]),
        "advantage_cosine": float(whole.loc["sum", "sr"] / np.sqrt(whole.loc["sum", "ss"] * whole.loc["sum", "rr"])),
        "compared": len(rows),
    }
    prompts = rows.assign(values=values).groupby(prompt_keys, sort=False)
    per_prompt[f"mean_advantage:{name}"] = prompts["values"].mean()
    if name != "prompt":
        per_prompt[f"flips:{name}"] = prompts["flip"].sum()
        per_prompt[f"spurious:{name}"] = prompts["spurious"].sum()
by_prompt = score.groupby(prompt_keys, sort=False)
prompt_rows = pd.DataFrame({
    "samples": by_prompt.size(), "trajectories": df["trajectory"].groupby(prompt_keys, sort=False).nunique(),
    "mean_reward": by_prompt.mean(), "no_signal": by_prompt.nunique() == 1, **per_prompt,
})
sizes = df.groupby(["step", "trajectory"], sort=False).size()
histograms = {
    "samples_per_prompt": prompt_rows["samples"].value_counts().sort_index().to_dict(),
    "trajectories_per_prompt": prompt_rows["trajectories"].value_counts().sort_index().to_dict(),
    "samples_per_trajectory": sizes.value_counts().sort_index().to_dict(),
}
step_groups = prompt_rows.groupby(level=0).agg(
    prompts=("samples", "size"), samples=("samples", "sum"), trajectories=("trajectories", "sum"),
    smallest_group=("samples", "min"), median_group=("samples", "median"), largest_group=("samples", "max"),
    group_size_std=("samples", "std"),
)
flips = [column for column in prompt_rows if column.startswith("flips:")]
worst = prompt_rows.assign(worst=prompt_rows[flips].max(axis=1)).nlargest(5, "worst")
low = min(float(values.min()) for values in adv.values())
high = max(float(values.max()) for values in adv.values())
distributions = {name: np.histogram(values, bins=40, range=(low, high))[0].tolist() for name, values in adv.items()}
print(json.dumps({
    "samples": len(df), "steps": int(df["step"].nunique()), "prompts": len(prompt_rows),
    "trajectories": int(sizes.size), "trajectories_with_varying_scores": varying, "summary": summary,
    "per_step_rows": sum(len(frame) for frame in per_step.values()), "step_groups": len(step_groups),
    "histograms": {name: {int(k): int(v) for k, v in counts.items()} for name, counts in histograms.items()},
    "worst_prompts": len(worst), "distributions": len(distributions),
}))
"""

COUNTS = ("nonzero", "nonzero_reference", "spurious_nonzero", "lost_signal", "compared")
RATES = ("sign_flip_rate", "strict_flip_rate", "max_abs_diff", "mean_abs_diff", "advantage_cosine")


def run_measured(command: list[str], output: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run ``command`` (its stdout to ``output``): wall seconds, the peak of its process tree's summed resident sets
    (sampled) and the largest single process of the tree (``ru_maxrss`` over the command and its reaped
    descendants, from ``os.wait4``), in MB."""
    import psutil

    with output.open("wb") as sink:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=sink, stderr=subprocess.PIPE, env=env)
        root = psutil.Process(child.pid)
        peak = 0
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            total = 0
            try:
                processes = [root, *root.children(recursive=True)]
            except psutil.Error:
                processes = []
            for process in processes:
                with contextlib.suppress(psutil.Error):
                    total += process.memory_info().rss
            peak = max(peak, total)
            time.sleep(SAMPLE_SECONDS)
        elapsed = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.stderr is not None
    errors = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({child.returncode}):\n{errors[-2000:]}")
    return {"seconds": elapsed, "peak_mb": peak / 1e6, "largest_process_mb": usage.ru_maxrss * 1024 / 1e6}


def reports_agree(report_path: Path, pandas_path: Path) -> bool:
    """Whether the pandas script's counts and rates equal those of the JSON report, scheme by scheme."""
    report = json.loads(report_path.read_text(encoding="utf-8"))
    pandas = json.loads(pandas_path.read_text(encoding="utf-8").strip().splitlines()[-1])
    info = report["info"]
    if (info["samples"], info["steps"], info["prompts"], info["trajectories"]) != (
        pandas["samples"],
        pandas["steps"],
        pandas["prompts"],
        pandas["trajectories"],
    ):
        return False
    if set(report["summary"]) != set(pandas["summary"]):
        return False

    def by_size(histograms: dict[str, dict[str, int]]) -> dict[str, dict[int, int]]:
        return {name: {int(size): count for size, count in sizes.items()} for name, sizes in histograms.items()}

    if by_size(report["histograms"]) != by_size(pandas["histograms"]):
        return False
    for name, row in report["summary"].items():
        theirs = pandas["summary"][name]
        if any(row[key] != theirs[key] for key in COUNTS):
            return False
        if any(abs(row[key] - theirs[key]) > 1e-9 * max(1.0, abs(row[key])) for key in RATES):
            return False
    return True


def _run_of(source: Path, target: Path, steps: int) -> Path:
    """The first ``steps`` steps of ``source`` as a run of their own (hard links, copies where links fail)."""
    folder = target / "rollout_data"
    folder.mkdir(parents=True)
    for step in range(steps):
        name = f"{step}.jsonl"
        try:
            os.link(source / "rollout_data" / name, folder / name)
        except OSError:
            shutil.copyfile(source / "rollout_data" / name, folder / name)
    return target


def measure(sizes: tuple[int, int], rounds: int, settings: dict[str, str] | None = None) -> dict[str, object]:
    """The numbers; ``settings``: environment variables for ``compare`` (not for pandas), e.g. its Arrow pool."""
    env = {**os.environ, **settings} if settings else None
    small, large = sizes
    scratch_root = Path(tempfile.gettempdir())
    needed = BYTES_PER_STEP * large * 1.2
    free = shutil.disk_usage(scratch_root).free
    if free < needed:
        raise SystemExit(f"{scratch_root} has {free / 1e9:.1f} GB free; the runs need {needed / 1e9:.1f} GB")
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as scratch:
        base = Path(scratch)
        started = time.perf_counter()
        runs = {large: write_verl(base / f"verl_{large}", large)}
        runs[small] = _run_of(runs[large], base / f"verl_{small}", small)
        print(f"wrote the runs in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        script = base / "pandas_report.py"
        script.write_text(PANDAS_SCRIPT, encoding="utf-8")
        measured: dict[int, dict[str, list[dict[str, float]]]] = {size: {"compare": [], "pandas": []} for size in sizes}
        agree: dict[int, bool] = {size: True for size in sizes}
        for round_ in range(rounds):
            for size in sizes:
                run = runs[size]
                report, pandas = base / f"report_{size}.json", base / f"pandas_{size}.json"
                compare = [sys.executable, "-m", "rollaudit", "compare", str(run), "--no-cache", "--json"]
                measured[size]["compare"].append(run_measured(compare, report, env))
                measured[size]["pandas"].append(run_measured([sys.executable, str(script), str(run)], pandas))
                agree[size] = agree[size] and reports_agree(report, pandas)
                print(f"round {round_ + 1}/{rounds}, {size} steps:", json.dumps(measured[size]), file=sys.stderr)
        megabytes = {
            size: sum(p.stat().st_size for p in (runs[size] / "rollout_data").iterdir()) / 1e6 for size in sizes
        }
    results: dict[str, object] = {}
    medians: dict[int, dict[str, dict[str, float]]] = {}
    for size in sizes:
        medians[size] = {
            tool: {key: statistics.median(one[key] for one in rounds_) for key in rounds_[0]}
            for tool, rounds_ in measured[size].items()
        }
        ours, theirs = medians[size]["compare"], medians[size]["pandas"]
        results[str(size)] = {
            "steps": size,
            "megabytes": round(megabytes[size], 1),
            "seconds": round(ours["seconds"], 3),
            "peak_mb": round(ours["peak_mb"], 1),
            "largest_process_mb": round(ours["largest_process_mb"], 1),
            "pandas_seconds": round(theirs["seconds"], 3),
            "pandas_peak_mb": round(theirs["peak_mb"], 1),
            "pandas_largest_process_mb": round(theirs["largest_process_mb"], 1),
            "speed_ratio": round(theirs["seconds"] / ours["seconds"], 2),  # pandas time / compare time
            "memory_ratio": round(ours["peak_mb"] / theirs["peak_mb"], 3),  # compare peak / pandas peak
            "reports_agree": agree[size],
        }
    steps_ratio = large / small
    results["scaling"] = {
        "steps_ratio": steps_ratio,
        "time_linearity": round(
            medians[large]["compare"]["seconds"] / medians[small]["compare"]["seconds"] / steps_ratio, 3
        ),
        "peak_ratio": round(medians[large]["compare"]["peak_mb"] / medians[small]["compare"]["peak_mb"], 3),
        "largest_process_ratio": round(
            medians[large]["compare"]["largest_process_mb"] / medians[small]["compare"]["largest_process_mb"], 3
        ),
        "pandas_time_linearity": round(
            medians[large]["pandas"]["seconds"] / medians[small]["pandas"]["seconds"] / steps_ratio, 3
        ),
        "pandas_peak_ratio": round(medians[large]["pandas"]["peak_mb"] / medians[small]["pandas"]["peak_mb"], 3),
        "rounds": rounds,
        "compare_settings": settings or {},
    }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="8 and 40 steps, one round: reports only")
    parser.add_argument("--steps", type=int, nargs=2, default=(400, 2000), metavar=("SMALL", "LARGE"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="an environment variable for compare alone"
    )
    args = parser.parse_args(argv)
    sizes, rounds = ((8, 40), 1) if args.small else (tuple(sorted(args.steps)), args.rounds)
    settings = dict(setting.split("=", 1) for setting in args.set)
    print(json.dumps(measure(sizes, rounds, settings), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
