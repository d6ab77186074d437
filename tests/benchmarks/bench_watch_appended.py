"""Benchmark: ``rollaudit watch`` beside a run that appends every step to one file.

    python tests/benchmarks/bench_watch_appended.py            # 1,000 steps of open-instruct and of torchtitan
    python tests/benchmarks/bench_watch_appended.py --small    # 40 steps (CI: reports only)

open-instruct (``--save_traces``: a line per response, 8 a step, one shard) and torchtitan (``rollout_samples.jsonl``:
4 groups of 8 rollouts a step, the recorder keeping 2 of each) append each step to one file, as their writers do. A
writer (this process) appends step k + 1 as soon as step k - 1's record is in ``--jsonl``; step k's record comes
once step k + 1 is appended (the newest step of such a file may still be landing). Measured on the ``rollaudit watch
RUN --jsonl FILE --no-cache`` process, per step: the time from the append to the record it completes, as the median
of the first 50 steps after the first (which pays torch's import) and of the last 50, and their ratio (flat: 1); its
resident memory at the first and the last of those.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "sample_dumps")]

import generate_torchtitan  # noqa: E402

from tests.benchmarks.bench_watch import rss_mb, start_watch, wait_for_records  # noqa: E402

WINDOW = 50


def open_instruct_writer(run: Path) -> tuple[Path, Callable[[int], bytes]]:
    """``{run_name}_rollouts_000000.jsonl`` and the lines of a step: 2 prompts of 60 tokens, n = 4 responses of
    50-400 tokens each (centered advantages)."""
    folder = run / "rollouts"
    folder.mkdir(parents=True)
    rng = random.Random(7)

    def step_lines(step: int) -> bytes:
        lines = []
        for prompt in range(2):
            tokens = [rng.randrange(5, 30000) for _ in range(60)]
            rewards = [float(rng.random() < 0.5) for _ in range(4)]
            mean = sum(rewards) / 4
            for place, reward in enumerate(rewards):
                index = prompt * 4 + place
                line = {
                    "step": step, "sample_idx": index, "prompt_idx": prompt,
                    "prompt_tokens": tokens,
                    "response_tokens": [rng.randrange(5, 30000) for _ in range(rng.randrange(50, 400))],
                    "reward": reward, "advantage": reward - mean, "finish_reason": "stop", "dataset": "gsm8k",
                    "ground_truth": "4", "request_info": None,
                }  # fmt: skip
                lines.append(json.dumps(line) + "\n")
        return "".join(lines).encode()

    return folder / "bench_rollouts_000000.jsonl", step_lines


def torchtitan_writer(run: Path) -> tuple[Path, Callable[[int], bytes]]:
    """``outputs/rl/rollout_samples.jsonl`` and a step's record calls, as torchtitan's recorder writes them (k = 1,
    into a file of its own beside the run): 4 groups of 8 sampled under policy version ``step - 1``."""
    recorder = generate_torchtitan.Recorder(run.parent / "recorder")
    config = generate_torchtitan.RunConfig(seed=3, group_size=8)
    rng = random.Random(3)

    def step_lines(step: int) -> bytes:
        start = recorder.path.stat().st_size if recorder.path.exists() else 0
        for group_id in range(4 * (step - 1), 4 * step):
            group = generate_torchtitan._group(rng, config, group_id, step - 1, config.group_size)
            for rollout in group["rollouts"]:
                for turn in rollout["turns"]:
                    turn["max_policy_version"] = step - 1  # one version a step: the step is 1 + it
            recorder.record(is_validation=False, rollout_groups=[group])
        with open(recorder.path, "rb") as handle:
            handle.seek(start)
            return handle.read()

    return run / "outputs" / "rl" / generate_torchtitan.FILE_NAME, step_lines


def measure(writer: Callable[[Path], tuple[Path, Callable[[int], bytes]]], steps: int) -> dict:
    window = min(WINDOW, (steps - 1) // 2)
    with tempfile.TemporaryDirectory() as scratch:
        run, records = Path(scratch) / "run", Path(scratch) / "audit.jsonl"
        run.mkdir()
        target, step_lines = writer(run)
        pending = [step_lines(step) for step in range(1, steps + 2)]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(pending[0])
        watch = start_watch(run, records)
        latencies, memory = [], {}
        try:
            for step in range(1, steps + 1):
                with open(target, "ab") as handle:
                    handle.write(pending[step])  # step + 1 lands: step is whole
                latencies.append(wait_for_records(records, step, watch, time.perf_counter(), 300))
                if step in (window + 1, steps):
                    memory[step] = rss_mb(watch.pid)
        finally:
            watch.terminate()
            watch.wait(timeout=60)
        last = json.loads(records.read_text().splitlines()[-1])
        assert last["step"] == steps and last.get("error") is None, last
        size = target.stat().st_size
    start, end = statistics.median(latencies[1 : 1 + window]), statistics.median(latencies[-window:])
    return {
        "steps": steps,
        "file_mb": round(size / 1e6, 1),
        "first_step_s": round(latencies[0], 3),
        "start_median_s": round(start, 4),
        "end_median_s": round(end, 4),
        "end_over_start": round(end / start, 3),
        "rss_mb": {str(step): round(value, 1) for step, value in memory.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="40 steps (CI)")
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args(argv)
    steps = 40 if args.small else args.steps
    numbers = {
        "open_instruct": measure(open_instruct_writer, steps),
        "torchtitan": measure(torchtitan_writer, steps),
    }
    print(f"watch: {steps} steps appended to one file, a step at a time")
    print(json.dumps(numbers, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
