"""Write the committed table samples: verl, TRL, agent-lightning, generic, NeMo-RL style and ART (deterministic).

    python sample_dumps/generate_tables.py            # rewrite the samples next to this script
    python sample_dumps/generate_tables.py --check    # exit 1 if a committed sample differs from a fresh one

Each writer follows its framework's own layout field by field (see
/work/shared/spec/formats.md and sample_dumps/README.md). Fixed seeds:
regenerating gives the same bytes (Parquet and Feather files are also
accepted by ``--check`` when only the writer's version stamp differs and
the tables read back equal).
"""

from __future__ import annotations

import csv
import io
import json
import random
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import samples_cli
import torch

HERE = Path(__file__).resolve().parent
TRL_EPSILON = 1e-4  # TRL: advantages / (std_grouped_rewards + 1e-4)


# ---------------------------------------------------------------------------------------------------------------------
# verl: trainer.rollout_data_dir writes {global_step}.jsonl, one json.dumps(entry, ensure_ascii=False) a line.


def balanced_order(lengths: list[int], partitions: int) -> list[int]:
    """verl's ``_balance_batch`` order: equal-size partitions of similar total length, each in index order, one
    after the other. (verl uses Karmarkar-Karp; this greedy longest-first fill gives the same kind of order.)"""
    size = len(lengths) // partitions
    buckets: list[list[int]] = [[] for _ in range(partitions)]
    totals = [0] * partitions
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        open_buckets = [b for b in range(partitions) if len(buckets[b]) < size]
        target = min(open_buckets, key=lambda b: (totals[b], b))
        buckets[target].append(index)
        totals[target] += lengths[index]
    return [index for bucket in buckets for index in sorted(bucket)]


def verl_lines(rng: random.Random, step: int, problems: list[tuple[int, int]], n: int) -> list[dict[str, Any]]:
    """The lines of one step: n responses per prompt, repeated interleaved (verl's rollout.n), then balanced."""
    lines = []
    lengths = []
    for a, b in problems:
        prompt = (
            f"<|im_start|>user\nWhat is {a} + {b}? Put the answer in \\boxed{{}}.<|im_end|>\n<|im_start|>assistant\n"
        )
        for _ in range(n):
            right = rng.random() < 0.55
            answer = a + b if right else a + b + rng.choice([-2, -1, 1, 3])
            reasoning = " ".join(["Let me add the numbers."] * rng.randint(1, 6))
            output = f"{reasoning} {a} + {b} = {answer}. So the answer is \\boxed{{{answer}}} ✓"
            lines.append(
                {
                    "input": prompt,
                    "output": output,
                    "gts": str(a + b),
                    "score": 1.0 if right else 0.0,
                    "step": step,
                    # reward_extra_infos_dict: every key whose list has one value per sample
                    "acc": right,
                    "pred": str(answer),
                }
            )
            lengths.append(len(prompt) + len(output))
    return [lines[index] for index in balanced_order(lengths, partitions=4)]


def write_verl(root: Path) -> list[Path]:
    rng = random.Random(2024)
    folder = root / "verl" / "rollout_data"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    steps = {1: [(12, 30), (7, 8), (101, 5), (33, 44), (9, 9), (250, 250)], 2: [(4, 5), (12, 30), (60, 7), (81, 19)]}
    for step, problems in steps.items():
        lines = verl_lines(rng, step, problems, n=4)
        path = folder / f"{step}.jsonl"
        path.write_text("".join(json.dumps(entry, ensure_ascii=False) + "\n" for entry in lines), encoding="utf-8")
        written.append(path)
    return written


def verl_per_step_input_lines(rng: random.Random, step: int, tasks: int, n: int) -> list[dict[str, Any]]:
    """A multi-step fork's lines (verl-agent and its descendants) in verl's v0 layout: one row per environment step
    of each of the n episodes of a task, that step's observation as ``input``, the episode's reward as ``score`` and
    no ``uid`` or ``traj_uid``. The n episodes of a task start from the same observation, then diverge."""
    lines = []
    for task in range(tasks):
        start = f"You are in room {task}. Find the key and open the door.\nAvailable actions: look, go, take."
        for episode in range(n):
            solved = rng.random() < 0.5
            observation = start
            for turn in range(rng.randint(2, 5)):
                action = rng.choice(["look", "go north", "go east", "take key"])
                lines.append(
                    {
                        "input": observation,
                        "output": f"<action>{action}</action>",
                        "gts": "open door",
                        "score": 1.0 if solved else 0.0,
                        "step": step,
                    }
                )
                observation = f"{start}\n[episode {episode}, turn {turn + 1}] You did: {action}. You see a corridor."
    return lines


def write_verl_per_step_inputs(path: Path, step: int = 1) -> Path:
    """One ``{step}.jsonl`` of per-step observations as ``input`` (no uid): its groups cannot be read from it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = verl_per_step_input_lines(random.Random(7), step, tasks=3, n=4)
    path.write_text("".join(json.dumps(entry, ensure_ascii=False) + "\n" for entry in lines), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------------------------
# TRL: GRPOTrainer(log_completions=True) writes completions/completions_{global_step:05d}.parquet.


def trl_advantages(rewards_per_func: torch.Tensor, weights: torch.Tensor, num_generations: int) -> torch.Tensor:
    """TRL's advantage (scale_rewards="group"), in float32 as TRL computes it.

    nan-sum of the weighted functions; a row where every function returned None (NaN) is unscorable: its reward
    is NaN, left out of the group's nan-aware mean and unbiased std, and its advantage is set to 0.
    """
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    grouped = rewards.view(-1, num_generations)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    count = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    variance = torch.nanmean((grouped - mean) ** 2, dim=1, keepdim=True) * count / (count - 1)
    std = torch.sqrt(variance)
    advantages = ((grouped - mean) / (std + TRL_EPSILON)).view(-1)
    return torch.nan_to_num(advantages, nan=0.0)  # TRL: unscorable rows carry no learning signal


def write_trl(root: Path) -> list[Path]:
    rng = random.Random(7)
    num_generations = 4
    step = 10
    # Slices 2 and 3 hold the same prompt text (the dataset has it twice): two groups all the same.
    problems = ["Name a prime above 50.", "Sort 3, 1, 2.", "Spell 'cat' backwards.", "Spell 'cat' backwards.",
                "Is 91 prime?", "Capital of Peru?"]  # fmt: skip
    prompts, completions, accuracy, formatting = [], [], [], []
    for group, problem in enumerate(problems):
        text = f"<|im_start|>system\nThink step by step.<|im_end|>\n<|im_start|>user\n{problem}<|im_end|>\n"
        for member in range(num_generations):
            prompts.append(text)
            completions.append(f"<think>attempt {member} of group {group}</think> answer {rng.randint(0, 99)}")
            if group == 0:
                accuracy.append(1.0)  # a group every completion solved: std 0, advantages 0
                formatting.append(0.5)
                continue
            correct = rng.random() < 0.5
            accuracy.append(1.0 if correct else 0.0)
            formatting.append(0.5 if rng.random() < 0.7 else 0.0)
    accuracy[9] = float("nan")  # the accuracy function returned None: nan-sum counts it 0
    formatting[14] = float("nan")
    accuracy[18], formatting[18] = float("nan"), float("nan")  # every function None: unscorable
    per_func = torch.tensor([accuracy, formatting], dtype=torch.float32).T
    advantages = trl_advantages(per_func, torch.ones(2), num_generations)
    rows = len(prompts)
    table = pa.table(
        {
            "step": pa.array([step] * rows, pa.int64()),
            "prompt": pa.array(prompts, pa.large_string()),
            "completion": pa.array(completions, pa.large_string()),
            # TRL logs rewards_per_func[:, i].tolist(): float32 values as Python floats
            "accuracy_reward": pa.array(per_func[:, 0].tolist(), pa.float64()),
            "format_reward": pa.array(per_func[:, 1].tolist(), pa.float64()),
            "advantage": pa.array(advantages.tolist(), pa.float64()),
        }
    )
    folder = root / "trl" / "completions"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"completions_{step:05d}.parquet"
    pq.write_table(table, path, compression="snappy")
    return [path]


# ---------------------------------------------------------------------------------------------------------------------
# agent-lightning: no dump of its own; users export the training rows (one per LLM call) with data_id, rollout_id.


def write_agl(root: Path) -> list[Path]:
    rng = random.Random(11)
    attempts_per_task = {0: 3, 1: 3, 2: 1, 3: 2}
    rollouts = []
    for task, attempts in attempts_per_task.items():
        data_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        for attempt in range(attempts):
            rollout_id = f"ro-{rng.getrandbits(48):012x}"
            reward = 0.0 if task == 3 else float(rng.random() < 0.5) + (0.5 if attempt == 0 else 0.0)
            calls = rng.randint(1, 4)
            rollouts.append(
                [
                    {
                        "data_id": data_id,
                        "rollout_id": rollout_id,
                        "attempt": attempt,
                        "sequence_id": call,
                        "step": 7,
                        "reward": reward,  # the attempt's final reward, on every call it made
                        "response_length": rng.randint(8, 120),
                        "status": "succeeded" if reward > 0 else "failed",
                    }
                    for call in range(calls)
                ]
            )
    rng.shuffle(rollouts)  # attempts finish in any order; each attempt's calls stay together
    rows = [row for rollout in rollouts for row in rollout]
    table = pa.Table.from_pylist(rows)
    folder = root / "agl"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "rollouts.parquet"
    pq.write_table(table, path, compression="snappy")
    return [path]


# ---------------------------------------------------------------------------------------------------------------------
# Generic: one small table as CSV, JSON Lines and Feather (common column names, two steps).


def generic_rows() -> list[dict[str, Any]]:
    rng = random.Random(5)
    rows = []
    for step in (0, 1):
        for prompt in range(3):
            for sample in range(2):
                rows.append(
                    {
                        "step": step,
                        "uid": f"q{step}-{prompt}",
                        "traj_uid": f"t{step}-{prompt}-{sample}",
                        "score": round(rng.random(), 3),
                        "response_length": rng.randint(5, 60),
                        "status": "completed",
                    }
                )
    return rows


def write_generic(root: Path) -> list[Path]:
    rows = generic_rows()
    folder = root / "generic"
    folder.mkdir(parents=True, exist_ok=True)
    csv_path, jsonl_path, feather_path = folder / "rollouts.csv", folder / "rollouts.jsonl", folder / "rollouts.feather"
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    csv_path.write_text(text.getvalue(), encoding="utf-8")
    jsonl_path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    feather.write_feather(pa.Table.from_pylist(rows), feather_path, compression="uncompressed")
    return [csv_path, jsonl_path, feather_path]


# ---------------------------------------------------------------------------------------------------------------------
# NeMo-RL style: train_data_step{N}.jsonl with content, rewards, per-token advantages and masks, plus a prompt_id
# the user exported (NeMo-RL writes none).


def leave_one_out(rewards: np.ndarray) -> np.ndarray:
    """The spec's ``nemo-loo``: baseline and unbiased std of the other members; divide by (std + 1e-6) only where
    std > 0 (NeMo-RL's GRPOAdvantageEstimator)."""
    count = len(rewards)
    if count <= 1:
        return np.zeros(count)
    result = np.empty(count)
    for member in range(count):
        others = np.delete(rewards, member)
        centred = rewards[member] - others.mean()
        std = others.std(ddof=1) if len(others) > 1 else 0.0
        result[member] = centred / (std + 1e-6) if std > 0 else centred
    return result


def write_nemo(root: Path) -> list[Path]:
    rng = random.Random(3)
    sizes = [4, 4, 3, 1]
    prompt_ids, rewards = [], []
    for prompt_id, size in enumerate(sizes):
        for _ in range(size):
            prompt_ids.append(100 + prompt_id)
            rewards.append(float(rng.choice([0.0, 1.0, 1.0, 0.25])))
    rewards_array = np.array(rewards)
    ids = np.array(prompt_ids)
    advantages = np.zeros(len(rewards))
    for prompt_id in np.unique(ids):
        members = ids == prompt_id
        advantages[members] = leave_one_out(rewards_array[members])
    lines = []
    for row, (prompt_id, reward) in enumerate(zip(prompt_ids, rewards, strict=True)):
        prompt_tokens, response_tokens = rng.randint(3, 6), rng.randint(2, 8)
        tokens = prompt_tokens + response_tokens
        value = float(np.float32(advantages[row]))  # NeMo-RL logs float32 tensors' tolist()
        lines.append(
            {
                "content": [
                    {"role": "user", "content": f"Problem {prompt_id}"},
                    {"role": "assistant", "content": f"Answer {row}"},
                ],
                "rewards": reward,
                # per token, prompt tokens included: masked out of the loss (and 0 here)
                "advantages": [0.0] * prompt_tokens + [value] * response_tokens,
                "token_loss_mask": [0] * prompt_tokens + [1] * response_tokens,
                "sample_loss_mask": 1,
                "generation_logprobs": [0.0] * prompt_tokens
                + [round(-rng.random(), 4) for _ in range(response_tokens)],
                "prev_logprobs": [0.0] * prompt_tokens + [round(-rng.random(), 4) for _ in range(response_tokens)],
                "input_lengths": tokens,
                "prompt_id": prompt_id,
            }
        )
    folder = root / "nemo"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train_data_step3.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return [path]


# ---------------------------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------------------------
# OpenPipe ART: .art/{project}/models/{model}/trajectories/train/{step:04d}.parquet, a row per trajectory, group by
# group (the writer of ART 458eb16: no trajectory id, the trajectory is its place in its group).


def write_art(root: Path) -> list[Path]:
    rng = random.Random(27)
    message = pa.struct(
        [("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.string()),
         ("tool_call_id", pa.string()), ("trainable", pa.bool_())]
    )  # fmt: skip
    groups, rewards, messages = [], [], []
    # Uneven groups (a trajectory lost to an exception), a singleton, an all-0 group, shaped rewards.
    for group, (size, kind) in enumerate([(4, "mixed"), (3, "shaped"), (1, "singleton"), (4, "all0"), (6, "frac")]):
        for _ in range(size):
            reward = {
                "mixed": float(rng.choice([0, 1])),
                "shaped": round(rng.uniform(-0.5, 1.5), 3),
                "all0": 0.0,
                "frac": rng.choice([0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
            }.get(kind, 1.0)
            turns = [{"role": "system", "content": "Solve the task.", "tool_calls": None, "tool_call_id": None,
                      "trainable": False},
                     {"role": "user", "content": f"task {group}", "tool_calls": None, "tool_call_id": None,
                      "trainable": False}]  # fmt: skip
            for turn in range(rng.randint(1, 3)):
                turns.append(
                    {"role": "assistant", "content": f"step {turn}", "tool_calls": None, "tool_call_id": None,
                     "trainable": True}
                )  # fmt: skip
            groups.append(group)
            rewards.append(reward)
            messages.append(turns)
    rows = len(rewards)
    table = pa.table(
        {
            "group_index": pa.array(groups, pa.int64()),
            "group_metadata": pa.array([None] * rows, pa.string()),
            "group_metrics": pa.array([None] * rows, pa.string()),
            "group_logs": pa.array([None] * rows, pa.list_(pa.string())),
            "reward": pa.array(rewards, pa.float64()),
            "metrics": pa.array(['{"correct": %s}' % (reward == 1.0) for reward in rewards], pa.string()),
            "metadata": pa.array([None] * rows, pa.string()),
            "tools": pa.array([None] * rows, pa.string()),
            "loss_mask": pa.array([None] * rows, pa.string()),
            "logs": pa.array([None] * rows, pa.list_(pa.string())),
            "messages": pa.array(messages, pa.list_(message)),
        }
    )
    folder = root / "art" / ".art" / "demo" / "models" / "agent" / "trajectories" / "train"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "0001.parquet"
    pq.write_table(table, path, compression="zstd")
    return [path]


# ---------------------------------------------------------------------------------------------------------------------
# open-instruct --save_traces: {rollouts_save_path}/{run_name}_rollouts_{shard:06d}.jsonl, every step's batch appended,
# a line per response; prompt_idx = sample_idx // n; advantages as its data-preparation loop makes them (centered).


def write_open_instruct(root: Path) -> list[Path]:
    rng = random.Random(31)
    n, vocabulary = 4, {"<pad>": 0, "<eos>": 1}

    def ids(text: str) -> list[int]:  # a word-level stand-in tokenizer: ids assigned on first sight
        return [vocabulary.setdefault(word, len(vocabulary)) for word in text.split()]

    lines: list[dict[str, Any]] = []
    for step, prompts in ((1, 5), (2, 4)):
        scores: list[float] = []
        rows: list[dict[str, Any]] = []
        while len(scores) < prompts * n:
            a, b = rng.randint(2, 40), rng.randint(2, 40)
            group = [10.0 * rng.choice([0, 1]) for _ in range(n)]
            if len(set(group)) == 1:
                continue  # filter_zero_std_samples (the default): a zero-std group never reaches the batch
            prompt = ids(f"user: what is {a} plus {b} ? assistant:")
            for reward in group:
                answer = a + b if reward else a + b + rng.randint(1, 9)
                words = " ".join(f"think{rng.randint(0, 30)}" for _ in range(rng.randint(3, 12)))
                truncated = rng.random() < 0.1
                response = ids(f"{words} the answer is {answer}") + ([] if truncated else [1])
                logprobs = [round(-rng.random(), 4) for _ in response]
                rows.append(
                    {"prompt_tokens": prompt, "response_tokens": response, "reward": reward,
                     "finish_reason": "length" if truncated else "stop", "dataset": "gsm8k",
                     "ground_truth": str(a + b), "request_info": None, "logprobs": logprobs}
                )  # fmt: skip
            scores += group
        grouped = np.array(scores, dtype=np.float64).reshape(-1, n)
        advantages = (grouped - grouped.mean(-1, keepdims=True)).reshape(-1)  # centered, float64
        for index, row in enumerate(rows):
            lines.append(
                {"step": step, "sample_idx": index, "prompt_idx": index // n, **row,
                 "advantage": float(advantages[index])}
            )  # fmt: skip
    # Key order as _save_rollouts writes it.
    order = ("step", "sample_idx", "prompt_idx", "prompt_tokens", "response_tokens", "reward", "advantage",
             "finish_reason", "dataset", "ground_truth", "request_info", "logprobs")  # fmt: skip
    folder = root / "open_instruct" / "rollouts"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "demo_rollouts_000000.jsonl"
    path.write_text("".join(json.dumps({key: line[key] for key in order}) + "\n" for line in lines))
    metadata = folder / "demo_metadata.jsonl"
    record = {"run_name": "demo", "git_commit": "e6c3044aa6201c8bfa4573c1b03142af599e730d",
              "model_name": "demo-model", "timestamp": "2026-01-01T00:00:00+00:00"}  # fmt: skip
    metadata.write_text(json.dumps(record) + "\n")
    return [path, metadata]


WRITERS = (write_verl, write_trl, write_agl, write_generic, write_nemo, write_art, write_open_instruct)


def write_all(root: Path) -> list[Path]:
    """Write every sample under ``root``; the paths relative to it."""
    return [path.relative_to(root) for writer in WRITERS for path in writer(root)]


def _same(committed: Path, fresh: Path) -> bool:
    if committed.read_bytes() == fresh.read_bytes():
        return True
    # A pyarrow upgrade changes the writer stamp inside Parquet/Feather files, not the data: compare the tables.
    if fresh.suffix == ".parquet":
        return pq.read_table(committed).equals(pq.read_table(fresh), check_metadata=True)
    if fresh.suffix == ".feather":
        return feather.read_table(committed).equals(feather.read_table(fresh), check_metadata=True)
    return False


def main(argv: list[str] | None = None) -> int:
    return samples_cli.run(argv, __doc__ or "", HERE, write_all, _same)


if __name__ == "__main__":
    sys.exit(main())
