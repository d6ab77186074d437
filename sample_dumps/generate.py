"""Write the committed slime sample dumps (deterministic: same bytes on every run).

    python sample_dumps/generate.py            # rewrite the dumps next to this script
    python sample_dumps/generate.py --check    # exit 1 if a committed dump differs from a fresh one

Every dump is a real ``torch.save`` file in slime's layout (see
/work/shared/spec/formats.md and sample_dumps/README.md). The helpers
(``rollout_sample``, ``save_rollout_dump``, ``save_train_dump``,
``write_torch_zip``, ``benchmark_dump``) are also what the tests and the
load benchmark build their own dumps with.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import random
import statistics
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
VOCABULARY = 151_000  # a Qwen-sized vocabulary: most token ids need 4 bytes in a pickle


# ---------------------------------------------------------------------------------------------------------------------
# One sample, as slime's dump writes it (a shallow copy of Sample.__dict__, status as a string).


def rollout_sample(
    rng: random.Random,
    *,
    group_index: int | None,
    index: int | None,
    reward: Any,
    rollout_id: int | None = None,
    response_length: int | None = None,
    prompt_length: int = 12,
    status: str = "completed",
    remove_sample: bool = False,
    routed_experts: bool = False,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A sample dict with every key slime writes; token lists are random but reproducible from ``rng``."""
    if response_length is None:
        response_length = rng.randint(4, 40)
    prompt_tokens = [rng.randrange(VOCABULARY) for _ in range(prompt_length)]
    response_tokens = [rng.randrange(VOCABULARY) for _ in range(response_length)]
    sample: dict[str, Any] = {
        "group_index": group_index,
        "index": index,
        "rollout_id": rollout_id,
        "prompt": [{"role": "user", "content": f"problem {group_index}"}],
        "tokens": prompt_tokens + response_tokens,
        "multimodal_inputs": None,
        "multimodal_train_inputs": None,
        "response": f"answer of sample {index}",
        "response_length": response_length,
        "label": f"label {group_index}",
        "reward": reward,
        "loss_mask": [1] * response_length,
        "weight_versions": ["3"],
        "rollout_log_probs": [round(-rng.random() * 2, 6) for _ in range(response_length)],
        "teacher_log_probs": None,
        "rollout_routed_experts": (
            torch.tensor([[rng.randrange(64) for _ in range(4)] for _ in range(response_length)], dtype=torch.int32)
            if routed_experts
            else None
        ),
        "rollout_top_p_token_ids": None,
        "rollout_top_p_token_offsets": None,
        "remove_sample": remove_sample,
        "status": status,
        "metadata": {},
        "train_metadata": None,
        "session_id": None,
        "generate_function_path": None,
        "custom_rm_path": None,
        "non_generation_time": 0.0,
        "spec_info": {"spec_accept_token_num": 0, "spec_draft_token_num": 0},
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": prompt_length},
    }
    if extra:
        sample.update(extra)
    return sample


def save_rollout_dump(path: str | Path, rollout_id: int, samples: list[dict[str, Any]]) -> Path:
    """``--save-debug-rollout-data``: ``torch.save({"rollout_id": ..., "samples": [...]})``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": rollout_id, "samples": samples}, path)
    return path


def save_train_dump(
    path: str | Path,
    rollout_id: int,
    samples: list[dict[str, Any]],
    *,
    raw_reward: list[float],
    rank: int = 0,
    dp_shards: list[dict[str, Any]] | None = None,
) -> Path:
    """``--save-debug-train-data`` (format_version 2): the trainer's view of one step."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format_version": 2,
        "rollout_id": rollout_id,
        "rank": rank,
        "samples": samples,
        "dp_shards": dp_shards or [],
        "raw_reward": raw_reward,
    }
    torch.save(payload, path)
    return path


def train_sample(
    rollout: dict[str, Any],
    *,
    position: int,
    normalized: float,
    data_parallel_rank: int,
    raw_reward: float,
    advantages: torch.Tensor | None = None,
) -> dict[str, Any]:
    """One sample of a train dump, joined to ``rollout`` by ``sample_index`` = its ``index``."""
    length = rollout["response_length"]
    if advantages is None:
        advantages = torch.full((length,), normalized, dtype=torch.float32)
    return {
        "data_parallel_rank": data_parallel_rank,
        "sample_index": rollout["index"],
        "rollout_position": position,
        "tokens": torch.tensor(rollout["tokens"], dtype=torch.int64),
        "response_lengths": length,
        "total_lengths": len(rollout["tokens"]),
        "loss_masks": torch.tensor(rollout["loss_mask"], dtype=torch.int32),
        "rewards": normalized,
        "local_raw_reward": raw_reward,
        "truncated": int(rollout["status"] == "truncated"),
        "rollout_ids": position if rollout["rollout_id"] is None else rollout["rollout_id"],
        "source_names": "default",
        "rollout_log_probs": torch.tensor(rollout["rollout_log_probs"], dtype=torch.float32),
        "log_probs": torch.tensor([value - 0.01 for value in rollout["rollout_log_probs"]], dtype=torch.float32),
        "kl": torch.zeros(length, dtype=torch.float32),
        "advantages": advantages,
        "returns": advantages.clone(),
        "rollout_mask_sums": torch.tensor([float(length)], dtype=torch.float32),
    }


def legacy_normalized(
    rewards: list[float], n_samples_per_prompt: int, batch_size: int, eps: float = 1e-6
) -> list[float]:
    """slime's reward post-processing before PR #2204: per-prompt slices when N == n*B, else batch-wide."""
    if len(rewards) == n_samples_per_prompt * batch_size:
        groups = [
            rewards[start : start + n_samples_per_prompt] for start in range(0, len(rewards), n_samples_per_prompt)
        ]
    else:
        groups = [rewards]
    normalized: list[float] = []
    for group in groups:
        mean = statistics.fmean(group)
        std = statistics.stdev(group) if len(group) > 1 else float("nan")
        normalized.extend((reward - mean) / (std + eps) for reward in group)
    return normalized


# ---------------------------------------------------------------------------------------------------------------------
# Hand-made torch zips, for dumps torch.save would refuse to write (tests of hostile input).


def write_torch_zip(
    path: str | Path,
    data_pkl: bytes,
    storages: dict[str, bytes] | None = None,
    *,
    archive: str = "archive",
    byteorder: bytes | None = b"little",
) -> Path:
    """A zip in torch.save's layout around any pickle bytes: ``archive/data.pkl``, ``archive/data/<key>``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as out:
        out.writestr(f"{archive}/data.pkl", data_pkl)
        if byteorder is not None:
            out.writestr(f"{archive}/byteorder", byteorder)
        for key, data in (storages or {}).items():
            out.writestr(f"{archive}/data/{key}", data)
        out.writestr(f"{archive}/version", b"3\n")
    return path


# ---------------------------------------------------------------------------------------------------------------------
# The committed dumps.


def fanout_step(rollout_id: int = 3) -> list[dict[str, Any]]:
    """An agent fan-out step: each trajectory became several samples sharing ``rollout_id``; groups are uneven.

    Samples per prompt: 8, 9, 10, 12, 28, a one-trajectory prompt (5 samples),
    an all-zero prompt and an all-one prompt (8 each). Prompts 2 and 3 are
    interleaved, as custom rollouts may write them.
    """
    rng = random.Random(1000 + rollout_id)
    # Per prompt: (samples of each trajectory, reward of each trajectory).
    plans = [
        ([2, 2, 2, 2], [1.0, 0.0, 0.0, 1.0]),
        ([3, 3, 3], [0.0, 1.0, 0.0]),
        ([1, 2, 3, 4], [1.0, 0.0, 0.0, 0.0]),
        ([3, 3, 3, 3], [0.0, 1.0, 1.0, 1.0]),
        ([2, 3, 4, 5, 3, 4, 3, 4], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]),
        ([5], [1.0]),
        ([2, 2, 2, 2], [0.0, 0.0, 0.0, 0.0]),
        ([1, 2, 3, 2], [1.0, 1.0, 1.0, 1.0]),
    ]
    first_group = rollout_id * len(plans)
    next_index = rollout_id * 1000
    trajectories_of: list[list[list[dict[str, Any]]]] = []
    for prompt, (fanouts, rewards) in enumerate(plans):
        trajectories = []
        for attempt, (fanout, reward) in enumerate(zip(fanouts, rewards, strict=True)):
            base_index = next_index
            samples = []
            for turn in range(fanout):
                last = turn == fanout - 1
                samples.append(
                    rollout_sample(
                        rng,
                        group_index=first_group + prompt,
                        index=next_index,
                        rollout_id=base_index,
                        reward=reward,
                        status="truncated" if last and attempt == 1 and prompt == 4 else "completed",
                        routed_experts=prompt == 0,
                        extra={"trace": {"attempt": attempt, "turn": turn, "tool_calls": turn}},
                    )
                )
                next_index += 1
            trajectories.append(samples)
        trajectories_of.append(trajectories)
    ordered: list[dict[str, Any]] = []
    for prompt, trajectories in enumerate(trajectories_of):
        if prompt == 3:
            continue  # written interleaved with prompt 2 below
        if prompt == 2:
            for left, right in zip(trajectories, trajectories_of[3], strict=True):
                ordered.extend(left + right)
            continue
        for samples in trajectories:
            ordered.extend(samples)
    return ordered


def uniform_step(rollout_id: int = 5, prompts: int = 8, n_samples_per_prompt: int = 8) -> list[dict[str, Any]]:
    """A plain GRPO step: n samples per prompt everywhere, no fan-out (``rollout_id`` None), and every
    prompt partly solved, so each has a learning signal: batch-wide centring then changes magnitudes,
    never signs (0/1 rewards flip only in prompts that are all 0 or all 1)."""
    rng = random.Random(2000 + rollout_id)
    samples = []
    for prompt in range(prompts):
        solved = rng.randint(1, n_samples_per_prompt - 1)
        rewards = [1.0] * solved + [0.0] * (n_samples_per_prompt - solved)
        rng.shuffle(rewards)
        for reward in rewards:
            index = rollout_id * 1000 + len(samples)
            samples.append(rollout_sample(rng, group_index=rollout_id * prompts + prompt, index=index, reward=reward))
    return samples


def reward_key_step(rollout_id: int = 2) -> list[dict[str, Any]]:
    """A ``--reward-key score`` run: every reward is a dict; the trainer used ``reward["score"]``."""
    rng = random.Random(3000 + rollout_id)
    samples = []
    for prompt in range(4):
        for _ in range(4):
            accuracy = float(rng.random() < 0.5)
            formatting = float(rng.random() < 0.8)
            reward = {"score": accuracy + 0.1 * formatting, "acc": accuracy, "format": formatting}
            index = rollout_id * 1000 + len(samples)
            samples.append(rollout_sample(rng, group_index=rollout_id * 4 + prompt, index=index, reward=reward))
    return samples


SPEC_REWARDS = [0.0, 1.0, 2.0, 3.0, 5.0, 5.0, 5.0, 10.0, 11.0, 12.0, 13.0]
SPEC_PROMPTS = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2]


def spec_4_3_4_step() -> list[dict[str, Any]]:
    """The spec's worked vector (slime PR #2204): rewards 0..3 | 5,5,5 | 10..13 in groups of 4, 3, 4."""
    rng = random.Random(4000)
    return [
        rollout_sample(rng, group_index=prompt, index=position, reward=reward)
        for position, (reward, prompt) in enumerate(zip(SPEC_REWARDS, SPEC_PROMPTS, strict=True))
    ]


DUMP_DETAILS_GROUPS = [4, 6, 3, 1, 5, 7]
DUMP_DETAILS_N = 4
DUMP_DETAILS_GLOBAL_BATCH = 8


def dump_details_step(rollout_id: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """A ``--dump-details`` pair of one step: rollout samples, train samples, and the train dump's other keys.

    26 samples in uneven groups with n_samples_per_prompt = 4 and 6 prompts:
    26 != 4 * 6, so legacy slime normalized batch-wide; that is what the
    recorded advantages hold. The last 2 samples do not fill a global batch
    of 8 and are missing from the train dump.
    """
    rng = random.Random(5000 + rollout_id)
    rollout: list[dict[str, Any]] = []
    for prompt, size in enumerate(DUMP_DETAILS_GROUPS):
        solved = rng.randint(0, size)
        rewards = [1.0] * solved + [0.0] * (size - solved)
        rng.shuffle(rewards)
        for reward in rewards:
            rollout.append(rollout_sample(rng, group_index=prompt, index=len(rollout), reward=reward))
    raw = [sample["reward"] for sample in rollout]
    normalized = legacy_normalized(raw, DUMP_DETAILS_N, len(DUMP_DETAILS_GROUPS))
    kept = len(rollout) // DUMP_DETAILS_GLOBAL_BATCH * DUMP_DETAILS_GLOBAL_BATCH
    data_parallel_ranks = [position % 2 for position in range(kept)]
    train = [
        train_sample(
            rollout[position],
            position=position,
            normalized=normalized[position],
            data_parallel_rank=data_parallel_ranks[position],
            raw_reward=raw[position],
        )
        for position in range(kept)
    ]
    shards = [
        {
            "rank": rank,
            "data_parallel_rank": rank,
            "sample_indices": [position for position in range(kept) if data_parallel_ranks[position] == rank],
            "partition": [position for position in range(kept) if data_parallel_ranks[position] == rank],
            "micro_batch_indices": [[[0, 1, 2, 3]]],
            "num_microbatches": [kept // 2 // 4],
            "global_batch_sizes": [DUMP_DETAILS_GLOBAL_BATCH],
        }
        for rank in (0, 1)
    ]
    return rollout, train, {"raw_reward": raw, "dp_shards": shards}


def benchmark_dump(path: str | Path, samples: int = 800, tokens: int = 3000, seed: int = 7) -> Path:
    """A large rollout step for the load benchmark: ``samples`` samples of about ``tokens`` tokens each.

    Token ids and log-probs are Python lists, as slime writes them; they are
    what makes real dumps tens or hundreds of MB.
    """
    rng = random.Random(seed)
    rows = []
    for position in range(samples):
        response_length = max(1, tokens - 200 + rng.randint(-100, 100))
        rows.append(
            rollout_sample(
                rng,
                group_index=position // 8,
                index=position,
                reward=float(rng.random() < 0.5),
                response_length=response_length,
                prompt_length=200,
            )
        )
    return save_rollout_dump(path, 0, rows)


# ---------------------------------------------------------------------------------------------------------------------
# miles (a slime fork): its --dump-details layout (shared/corpus/miles/README.md).

MILES_SESSIONS = [[2, 1, 3, 1], [1, 1, 1, 1], [3], [2, 2, 1], [1, 2, 1, 2], [4, 1, 2], [2]]
"""Samples per agent session (attempt) of each prompt: fan-out, a one-session prompt, 3 of 4 attempts run."""
SLIME_ONLY_FIELDS = ("custom_rm_path", "session_id", "rollout_top_p_token_ids", "rollout_top_p_token_offsets")


def miles_normalized(prompts: list[int], trajectories: list[int], rewards: list[float]) -> list[float]:
    """miles' _normalize_rewards_by_rollout (float32): per prompt, one reward per rollout, unbiased std + 1e-6."""
    normalized = [0.0] * len(rewards)
    for prompt in dict.fromkeys(prompts):
        rows = [row for row, key in enumerate(prompts) if key == prompt]
        firsts = {trajectories[row]: rewards[row] for row in reversed(rows)}
        values = torch.tensor(list(reversed(firsts.values())), dtype=torch.float)
        centred = values - values.mean()
        if len(values) > 1 and values.std() > 0:
            centred = centred / (values.std() + 1e-6)
        by_rollout = dict(zip(reversed(firsts), centred.tolist(), strict=True))
        for row in rows:
            normalized[row] = by_rollout[trajectories[row]]
    return normalized


def write_miles_run(
    directory: str | Path,
    rollout_ids: tuple[int, ...] = (7,),
    *,
    sessions: list[list[int]] | None = None,
    response_length: tuple[int, int] = (6, 30),
    global_batch: int = 8,
    data_parallel: int = 2,
    tensor_parallel: int = 1,
    seed: int = 9000,
) -> list[Path]:
    """``--dump-details directory`` of a miles agent run: ``rollout_data/{id}.pt``, ``train_data/{id}_{rank}.pt``
    (one per global rank; ``tensor_parallel`` ranks write each DP shard) and the ``trajectory/{id}.jsonl`` sidecar.

    Each session's samples are deep copies of its base sample (they share ``index``); ``rollout_id`` is the base
    index on every sibling of a session of more than one sample, None otherwise. The train side keeps whole steps
    of ``global_batch`` rollouts (the rest is dropped), deals the rollouts to DP ranks and shuffles each rank's rows
    (micro-batch order). In the first prompt, the first session's two siblings have byte-identical tokens.
    """
    directory = Path(directory)
    written: list[Path] = []
    for rollout_id in rollout_ids:
        rng = random.Random(seed + rollout_id)
        samples: list[dict[str, Any]] = []
        for prompt, attempts in enumerate(sessions or MILES_SESSIONS):
            group_index = rollout_id * 100 + prompt
            for attempt, count in enumerate(attempts):
                index = group_index * 4 + attempt
                reward = rng.choice([0.0, 0.25, 1.0, 1.0])
                for branch in range(count):
                    sample = rollout_sample(
                        rng,
                        group_index=group_index,
                        index=index,
                        reward=reward,
                        rollout_id=index if count > 1 else None,
                        response_length=rng.randint(*response_length),
                        status="truncated" if branch == count - 1 and rng.random() < 0.1 else "completed",
                        extra={"rollout_indexer_topk": None, "opd_reverse_kl": None, "adapter": None},
                    )
                    if prompt == 0 and attempt == 0 and branch == 1:
                        sample["tokens"] = list(samples[-1]["tokens"])  # a sibling identical to the one before
                        sample["response_length"] = samples[-1]["response_length"]
                        sample["loss_mask"] = list(samples[-1]["loss_mask"])
                        sample["rollout_log_probs"] = list(samples[-1]["rollout_log_probs"])
                    for key in SLIME_ONLY_FIELDS:
                        sample.pop(key)
                    sample.update(reward_spec=None, routing_key=None)
                    sample["metadata"] = {"branch": f"b{branch}", "truncated": sample["status"] == "truncated"}
                    samples.append(sample)
        path = directory / "rollout_data" / f"{rollout_id}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"rollout_id": rollout_id, "metadata": {}, "samples": samples}, path)
        written.append(path)
        sidecar = directory / "trajectory" / f"{rollout_id}.jsonl"
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            {"sample_index": s["index"], "group_index": s["group_index"], "status": s["status"], "reward": s["reward"]}
            for s in samples
        ]
        sidecar.write_text("".join(json.dumps(line) + "\n" for line in lines))
        written.append(sidecar)
        trajectories = [s["index"] if s["rollout_id"] is None else s["rollout_id"] for s in samples]
        raw = [s["reward"] for s in samples]
        normalized = miles_normalized([s["group_index"] for s in samples], trajectories, raw)
        rollouts = list(dict.fromkeys(trajectories))
        kept = rollouts[: len(rollouts) // global_batch * global_batch]
        for shard in range(data_parallel):
            mine = set(kept[shard::data_parallel])
            rows = [row for row, key in enumerate(trajectories) if key in mine]
            rng.shuffle(rows)
            columns: dict[str, Any] = {
                "tokens": [torch.tensor(samples[row]["tokens"], dtype=torch.int64) for row in rows],
                "response_lengths": [samples[row]["response_length"] for row in rows],
                "rewards": [normalized[row] for row in rows],
                "truncated": [int(samples[row]["status"] == "truncated") for row in rows],
                "loss_masks": [torch.tensor(samples[row]["loss_mask"], dtype=torch.int32) for row in rows],
                "sample_indices": [samples[row]["index"] for row in rows],
                "rollout_ids": [trajectories[row] for row in rows],
                "raw_reward": raw,
                "total_lengths": [len(samples[row]["tokens"]) for row in rows],
                "num_rollouts": [global_batch],
                "advantages": [
                    torch.full((samples[row]["response_length"],), normalized[row], dtype=torch.float32) for row in rows
                ],
            }
            for rank in range(shard * tensor_parallel, (shard + 1) * tensor_parallel):
                path = directory / "train_data" / f"{rollout_id}_{rank}.pt"
                path.parent.mkdir(parents=True, exist_ok=True)
                payload = {"rollout_id": rollout_id, "rank": rank, "rollout_data": columns}
                torch.save({**payload, "cp_rank": 0, "cp_size": 1, "qkv_format": "thd"}, path)
                written.append(path)
    return written


# ---------------------------------------------------------------------------------------------------------------------


def write_all(directory: Path) -> list[Path]:
    """Write every committed dump under ``directory``; returns their paths."""
    written = [
        save_rollout_dump(directory / "fanout" / "rollout_data" / "3.pt", 3, fanout_step(3)),
        save_rollout_dump(directory / "uniform.pt", 5, uniform_step(5)),
        save_rollout_dump(directory / "reward_key.pt", 2, reward_key_step(2)),
        save_rollout_dump(directory / "spec_4_3_4.pt", 0, spec_4_3_4_step()),
    ]
    rollout, train, extra = dump_details_step(0)
    details = directory / "dump_details"
    written.append(save_rollout_dump(details / "rollout_data" / "0.pt", 0, rollout))
    written.append(save_train_dump(details / "train_data" / "0_0.pt", 0, train, **extra))
    written.extend(write_miles_run(directory / "miles"))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the committed dumps with fresh ones")
    parser.add_argument("--out", type=Path, default=HERE, help="where to write (default: next to this script)")
    options = parser.parse_args(argv)
    if not options.check:
        for path in write_all(options.out):
            print(f"{path.relative_to(options.out)}: {path.stat().st_size} bytes")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        fresh = write_all(Path(scratch))
        stale = [
            path.relative_to(scratch)
            for path in fresh
            if not (options.out / path.relative_to(scratch)).is_file()
            or not filecmp.cmp(path, options.out / path.relative_to(scratch), shallow=False)
        ]
    for name in stale:
        print(f"differs from a fresh one: {name}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
