"""Write the committed samples of the agentic frameworks' own dumps: verl V1, AReaL, rllm, NeMo-RL, ROLL, tinker.

    python sample_dumps/generate_agentic.py            # rewrite the samples next to this script
    python sample_dumps/generate_agentic.py --check    # exit 1 if a committed sample differs from a fresh one

Each writer follows its framework's layout field by field, as the conformance sets' READMEs describe it
(``shared/corpus/<framework>/README.md``): small, synthetic, fixed seeds (regenerating gives the same bytes), with
the shapes that matter to an audit: uneven groups, multi-output sessions, padding rows, calls of one attempt,
context resets, unnamed trajectories, dynamic sampling, multi-step trajectories.
"""

from __future__ import annotations

import json
import random
import sys
import uuid
from pathlib import Path
from typing import Any

import samples_cli

HERE = Path(__file__).resolve().parent


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _write_lines(path: Path, rows: list[dict[str, Any]], **dump: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, **dump) + "\n" for row in rows), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------------------------
# verl V1: uid = {prompt_uid}_{session_id}_{output_index}, rows sorted by uid, padding rows pad<hex>_<i>_0 at the end.


def write_verl_v1(root: Path) -> list[Path]:
    rng = random.Random(21)
    rows = []
    for prompt in range(5):
        prompt_uid = _uuid(rng)
        for session in range(rng.choice([1, 2, 4])):
            reward = float(rng.choice([0.0, 1.0, 0.5]))
            for output in range(rng.choice([1, 1, 2, 3])):
                rows.append(
                    {
                        "input": f"system\nSolve it.\nuser\nTask {prompt} (part {output})\nassistant\n",
                        "output": f"answer {rng.randint(0, 99)}",
                        "gts": str(prompt),
                        "score": reward,
                        "step": 3,
                        "uid": f"{prompt_uid}_{session}_{output}",
                    }
                )
    rows.sort(key=lambda row: (row["uid"].rsplit("_", 2)[0], *map(int, row["uid"].rsplit("_", 2)[1:])))
    padding = f"pad{rng.getrandbits(128):032x}"
    pad_rows = [
        {"input": "", "output": "", "gts": "0", "score": 0.0, "step": 3, "uid": f"{padding}_{i}_0"} for i in range(3)
    ]
    return [_write_lines(root / "verl_v1" / "rollout_data" / "3.jsonl", rows + pad_rows, ensure_ascii=False)]


# ---------------------------------------------------------------------------------------------------------------------
# AReaL: rollout/{version}/{task_id}.jsonl, one row per LLM call, no attempt key.


def write_areal(root: Path) -> list[Path]:
    rng = random.Random(22)
    paths = []
    for task in range(40, 44):
        rows = []
        for attempt in range(rng.choice([3, 4])):
            reward = float(rng.choice([0.0, 1.0]))
            for _ in range(rng.randint(1, 3)):  # the calls of one attempt, each with the attempt's reward
                prompt_len, generated = rng.randint(20, 40), rng.randint(3, 12)
                rows.append(
                    {
                        "task_id": task,
                        "sample_idx": len(rows),
                        "seqlen": prompt_len + generated,
                        "prompt_len": prompt_len,
                        "head_version": 2,
                        "tail_version": 2,
                        "version_rle": [[2, generated]],
                        "reward": reward,
                        "prompt": f"<|im_start|>user\nTask {task}<|im_end|>\n",
                        "completion": f"Answer {attempt}.<|im_end|>",
                        "original_reward": reward,
                    }
                )
        paths.append(_write_lines(root / "areal" / "rollout" / "2" / f"{task}.jsonl", rows))
    return paths


# ---------------------------------------------------------------------------------------------------------------------
# rllm: episodes/train_step_{N}_epoch_{E}/episode_hash{h}_id{task}_{rollout}.json (json.dumps indent=2) and
# batch_summary.json.


def _chat(turns: list[str], reset: int | None = None) -> list[list[dict[str, str]]]:
    """Each step's chat_completions: the conversation so far plus the reply; at ``reset`` the history restarts."""
    steps, history = [], [{"role": "system", "content": "Solve; use tools."}]
    for index, turn in enumerate(turns):
        if index == reset:
            history = [{"role": "system", "content": "Summary of the work so far."}]
        history = [*history, {"role": "user", "content": turn}, {"role": "assistant", "content": f"step {index}"}]
        steps.append(list(history))
    return steps


def write_rllm(root: Path) -> list[Path]:
    rng = random.Random(23)
    folder = root / "rllm" / "episodes" / "train_step_1_epoch_0"
    files = []
    for task in ("t-1", "t-2", "t-3"):
        for rollout in range(3):
            trajectories = []
            names = ["solver", "judge"] if task == "t-2" else (["default_traj_name"] if task == "t-3" else ["solver"])
            for name in names:
                turns = [f"{task} turn {k}" for k in range(rng.randint(1, 3))]
                chats = _chat(turns, reset=2 if len(turns) == 3 else None)
                reward = None if task == "t-3" else float(rng.choice([0.0, 1.0]))
                steps = [
                    {
                        "observation": turn,
                        "thought": "",
                        "action": f"step {k}",
                        "reward": float(k == len(turns) - 1),
                        "done": k == len(turns) - 1,
                        "model_response": f"step {k}",
                        "chat_completions": chat,
                        "timing": {},
                    }
                    for k, (turn, chat) in enumerate(zip(turns, chats, strict=True))
                ]
                trajectories.append(
                    {
                        "name": name,
                        "uid": _uuid(rng),
                        "reward": reward,
                        "num_steps": len(steps),
                        "timing": {},
                        "steps": steps,
                    }
                )
            episode = {
                "training_step": 1,
                "epoch": 0,
                "episode_id": f"{task}:{rollout}",
                "session_id": None,
                "task": {"question": task, "id": task},
                "task_hash": f"{rng.getrandbits(32):08x}",
                "is_correct": True,
                "termination_reason": "env_done",
                "metrics": {},
                "metadata": {},
                "timing": {},
                "trajectories": trajectories,
            }
            path = folder / f"episode_hash{episode['task_hash']}_id{task}_{rollout}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(episode, indent=2, default=str) + "\n", encoding="utf-8")
            files.append(path)
    summary = folder / "batch_summary.json"
    summary.write_text(
        json.dumps(
            {
                "training_step": 1,
                "epoch": 0,
                "mode": "train",
                "num_episodes": len(files),
                "episode_files": [path.name for path in files],
                "summary_stats": {},
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    return [*files, summary]


# ---------------------------------------------------------------------------------------------------------------------
# NeMo-RL: train_data_step{N}.jsonl, every value a batch of one; dynamic sampling (filtered_rewards).


def write_nemo_rl(root: Path) -> list[Path]:
    rng = random.Random(24)
    rows = []
    width = 14
    for prompt in range(4):
        prompt_ids = [rng.randint(100, 9999) for _ in range(rng.randint(4, 6))]
        for _ in range(rng.choice([2, 4, 4])):
            response = [rng.randint(100, 9999) for _ in range(rng.randint(2, 4))]
            ids = prompt_ids + response + [rng.randint(100, 9999)]  # the environment's reply: not loss-masked
            reward = float(rng.choice([0.0, 1.0, 0.5]))
            mask = [0] * len(prompt_ids) + [1] * len(response) + [0]
            pad = width - len(ids)
            rows.append(
                {
                    "content": [[f"<|user|> problem {prompt} <|assistant|>", "answer", "Environment: correct"]],
                    "rewards": [float(rng.choice([0.0, 1.0]))],  # the unfiltered batch: not aligned with the rows
                    "filtered_rewards": [reward],
                    "input_lengths": [len(ids)],
                    "token_ids": [ids + [0] * pad],
                    "token_loss_mask": [mask + [0] * pad],
                    "sample_loss_mask": [1.0],
                    "advantages": [[0.0] * width],  # filled below: NeMo-RL's leave-one-out value on every position
                    "generation_logprobs": [[0.0] * width],
                    "prev_logprobs": [[0.0] * width],
                    "idx": len(rows),
                    "_prompt": prompt,
                }
            )
    for row in rows:
        peers = [
            other["filtered_rewards"][0] for other in rows if other["_prompt"] == row["_prompt"] and other is not row
        ]
        mine = row["filtered_rewards"][0]
        if peers:
            baseline = sum(peers) / len(peers)
            spread = (sum((p - baseline) ** 2 for p in peers) / (len(peers) - 1)) ** 0.5 if len(peers) > 1 else 0.0
            value = (mine - baseline) / (spread + 1e-6) if spread > 0 else mine - baseline
        else:
            value = 0.0
        row["advantages"] = [[value] * width]
    for row in rows:
        del row["_prompt"]
    return [_write_lines(root / "nemo_rl" / "train_data_step3.jsonl", rows)]


# ---------------------------------------------------------------------------------------------------------------------
# ROLL: rollout_dump_data.step_{N}.jsonl, ONE line of columns, one entry per trajectory.


def write_roll(root: Path) -> list[Path]:
    rng = random.Random(25)
    columns: dict[str, list] = {"trajectory_data": [], "messages": [], "tools": [], "exp_name": [], "global_step": []}
    for tag, group in (("SWEEnv", 1), ("SWEEnv", 2), ("TerminalEnv", 3)):
        seed = rng.randint(0, 1_000_000)
        for env_id in range(group * 10, group * 10 + 3):
            steps = rng.randint(1, 4)
            final = float(rng.choice([0.0, 1.0, 0.5]))
            rewards = [rng.choice([0.0, -0.1]) for _ in range(steps - 1)] + [final]
            data = {
                "trajectory_id": f"{tag}_{group}_{env_id}",
                "env_info": {"env_id": env_id, "group_id": group, "tag": tag, "seed": seed, "episode_id": 2},
                "reward_info": {"episode_reward": sum(rewards), "step_rewards": rewards, "final_reward": final},
            }
            columns["trajectory_data"].append(json.dumps(data))
            columns["messages"].append(json.dumps([[{"role": "user", "content": "fix it"}]]))
            columns["tools"].append("[]")
            columns["exp_name"].append("sample")
            columns["global_step"].append(2)
    return [_write_lines(root / "roll" / "rollout_dump_data.step_2.jsonl", [columns])]


# ---------------------------------------------------------------------------------------------------------------------
# tinker-cookbook: iteration_{N:06d}/train_rollout_summaries.jsonl, a line per trajectory, groups in batch order.


def write_tinker(root: Path) -> list[Path]:
    rng = random.Random(26)
    paths = []
    for iteration in (1, 2):
        rows = []
        # Uneven groups (one trajectory lost to a rollout error, a singleton), one constant group, multi-turn steps.
        for group, (size, kind) in enumerate([(4, "mixed"), (3, "mixed"), (4, "all1"), (1, "singleton"), (6, "frac")]):
            for trajectory in range(size):
                final = {"all1": 1.0, "frac": rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])}.get(kind, rng.choice([0.0, 1.0]))
                turns, observation, steps = rng.randint(1, 3), 12, []
                for turn in range(turns):
                    action = rng.randint(2, 9)
                    penalty = -0.1 if kind == "mixed" and rng.random() < 0.2 else 0.0
                    done = turn == turns - 1
                    steps.append(
                        {
                            "step_idx": turn,
                            "ob_len": observation,
                            "ac_len": action,
                            "reward": penalty,
                            "episode_done": done,
                            "metrics": {"stop/completed": 1.0} if done else {},
                            "logs": {},
                        }
                    )
                    observation += action + rng.randint(3, 8)
                rows.append(
                    {
                        "schema_version": 1,
                        "split": "train",
                        "iteration": iteration,
                        "group_idx": group,
                        "traj_idx": trajectory,
                        "tags": ["math", "rlvr"],
                        "sampling_client_step": iteration,
                        "total_reward": sum(step["reward"] for step in steps) + final,
                        "final_reward": final,
                        "trajectory_metrics": {"correct": final},
                        "steps": steps,
                        "final_ob_len": observation,
                    }
                )
        path = root / "tinker" / f"iteration_{iteration:06d}" / "train_rollout_summaries.jsonl"
        paths.append(_write_lines(path, rows))
    return paths


# ---------------------------------------------------------------------------------------------------------------------
# prime-rl: rollouts/step_{N}/train/{all,effective}/traces.jsonl, an episode (verifiers Episode.to_record()) a line.


def _prime_trace(rng: random.Random, agent: str, trainable: bool, rewards: dict[str, float], ok: bool = True) -> dict:
    turns = rng.randint(1, 3) if ok else 1
    nodes: list[dict[str, Any]] = [
        {"message": {"role": "user", "content": "task"}, "sampled": False, "token_ids": [151644, 872, 1001, 151645],
         "mask": [False] * 4, "is_content": [], "logprobs": []}
    ]  # fmt: skip
    calls, prompt = [], 4
    for _ in range(turns):
        length = rng.randint(3, 9)
        nodes.append(
            {"parent": len(nodes) - 1, "message": {"role": "assistant", "content": "reply"}, "sampled": True,
             "token_ids": [151644, 77091] + [1000 + rng.randint(0, 9999) for _ in range(length)],
             "mask": [False, False] + [True] * length, "is_content": [], "logprobs": [-0.5] * length}
        )  # fmt: skip
        calls.append({"node": len(nodes) - 1, "finish_reason": "stop",
                      "usage": {"prompt_tokens": prompt, "completion_tokens": length}})  # fmt: skip
        prompt += length + 2
    return {
        "version": 1, "id": rng.randbytes(16).hex(), "agent": {"name": agent, "trainable": trainable},
        "nodes": nodes, "calls": calls, "rewards": {name: {"score": score, "weight": 1.0 if name != "judge" else 0.5}
                                                    for name, score in rewards.items()} if ok else {},
        "metrics": {}, "info": {}, "is_completed": ok, "ok": ok,
        "stop_condition": "agent_completed" if ok else "error", "errors": [] if ok else [{"type": "TimeoutError",
                                                                                           "message": "timeout"}],
    }  # fmt: skip


def write_prime_rl(root: Path) -> list[Path]:
    """Two envs: ``delegate`` (GRPO over a main and its subs, a non-trainable judge, an errored sub; one group
    arrives over step_1 and step_2) and ``proposer-solver`` (hierarchical GRPO, solvers per episode)."""
    import numpy as np

    rng = random.Random(31)
    run = root / "prime_rl" / "rollouts"
    groups = [("delegate", _uuid(rng), 4), ("proposer-solver", _uuid(rng), 2), ("delegate", _uuid(rng), 4)]
    episodes = []
    for env, group, size in groups:
        for _ in range(size):
            if env == "delegate":
                traces = [_prime_trace(rng, "main", True, {"correct": float(rng.random() < 0.5), "judge": 0.5})]
                traces += [
                    _prime_trace(rng, "sub", True, {"coverage": rng.choice([0.0, 1 / 3, 1.0])}, ok=rng.random() > 0.2)
                    for _ in range(rng.randint(0, 2))
                ]
                traces.append(_prime_trace(rng, "judge", False, {}))
            else:
                traces = [_prime_trace(rng, "proposer", True, {"learnability": 0.75})]
                traces += [_prime_trace(rng, "solver", True, {"correct": float(rng.random() < 0.5)}) for _ in range(3)]
            episodes.append({"id": rng.randbytes(16).hex(), "env": {"id": env, "name": env}, "group": {"id": group},
                             "run": {"type": "train", "work": {"type": "train", "step": 1}}, "ok": True,
                             "errors": [], "traces": traces})  # fmt: skip
    # Arrival: the last group's final episode arrives in step 2 (with the run's second batch).
    arrived = {1: episodes[:-1], 2: episodes[-1:]}
    paths = [
        _write_lines(run / f"step_{step}/train/all/traces.jsonl", rows, separators=(",", ":"))
        for step, rows in arrived.items()
    ]
    # Scoring: grpo (float32, r - mean) on delegate, hierarchical (solvers per episode, float64) on proposer-solver.
    shipped: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for env, group, _ in groups:
        members = [
            (episode, trace)
            for episode in episodes
            if episode["group"]["id"] == group
            for trace in episode["traces"]
            if trace["agent"]["trainable"] and trace["ok"]
        ]
        rewards = [sum(r["score"] * r["weight"] for r in trace["rewards"].values()) for _, trace in members]
        if env == "delegate":
            values = np.asarray(rewards, dtype=np.float32)
            advantages = [float(a) for a in values - values.mean()]
        else:
            keys = [(t["agent"]["name"], e["id"] if t["agent"]["name"] == "solver" else None) for e, t in members]
            advantages = [
                r - sum(q for q, other in zip(rewards, keys, strict=True) if other == key) / keys.count(key)
                for r, key in zip(rewards, keys, strict=True)
            ]
        step = 2 if group == groups[-1][1] else 1
        for episode in {id(e): e for e, _ in members}.values():
            kept = []
            for (owner, trace), advantage in zip(members, advantages, strict=True):
                if owner is episode and advantage != 0.0:
                    nodes = [dict(node, advantages=[advantage] * sum(node["mask"])) if node["sampled"] else node
                             for node in trace["nodes"]]  # fmt: skip
                    kept.append(dict(trace, nodes=nodes, info={"advantage": advantage}))
            if kept:
                shipped[step].append(dict(episode, traces=kept))
    paths += [
        _write_lines(run / f"step_{step}/train/effective/traces.jsonl", rows, separators=(",", ":"))
        for step, rows in shipped.items()
    ]
    metrics = [{"step": step, "train/reward/mean": 0.5} for step in (1, 2)]
    paths.append(_write_lines(root / "prime_rl" / "metrics.jsonl", metrics))
    return paths


WRITERS = (write_verl_v1, write_areal, write_rllm, write_nemo_rl, write_roll, write_tinker, write_prime_rl)


def write_all(root: Path) -> list[Path]:
    """Write every sample under ``root``; the paths relative to it."""
    return [path.relative_to(root) for writer in WRITERS for path in writer(root)]


def main(argv: list[str] | None = None) -> int:
    return samples_cli.run(argv, __doc__ or "", HERE, write_all)


if __name__ == "__main__":
    sys.exit(main())
