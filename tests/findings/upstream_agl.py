"""Rebuilds the agent-lightning fixtures of ``tests/findings/test_upstream_agl.py`` with agent-lightning's own code,
before and after its PR #462 (trajectory-level deduplication in GRPO).

Upstream: microsoft/agent-lightning.

* before: 5f3093d62a88961118054edb620dfce49f3f5577 (2026-01-19, "Pipeline maintainence (#451)"), the base of
  PR #462. ``agentlightning/verl/trainer.py::AgentLightningTrainer._train_step`` sets ``uid`` to the batch's
  ``data_id_list`` and calls verl's ``compute_advantage`` (``verl/trainer/ppo/ray_trainer.py``, adv_estimator
  ``grpo`` -> ``verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage``): every training sample (one per
  LLM call, trace aggregator level ``transition``) is a member of its prompt's mean and std.
* after: ba0a8ffec878092c1a384c2ed353be0a2fab74b8 (2026-01-21, "add GRPO with trajectory-level deduplication
  support", the head of PR #462; not merged into main, whose v1.0 rewrite has its own rollout-level advantage).
  ``_train_step`` calls the PR's ``agentlightning/verl/trainer.py::compute_grpo_outcome_advantage`` with
  ``index=uid`` (data_id), ``traj_index=rollout_id_list`` and ``compute_mean_std_cross_all_data`` from
  ``algorithm.compute_mean_std_cross_all_data``, here False (its default, True, keeps the old arithmetic: checked
  below): each (data_id, rollout_id) counts once, with its first sample's score.
* verl: verl-project/verl v0.7.0 (f9c855f7cf04d603c9546bc01776c74806a879c1, 2026-01-05; agent-lightning asked
  for ``verl>=0.6.0`` then).

Both versions build the batch with the same ``agentlightning/verl/daemon.py::AgentModeDaemon.get_train_data_batch``
(unchanged by the PR), run unbound on a stand-in daemon holding our completed ``RolloutLegacy`` objects: one row
per triplet, each carrying its rollout's ``final_reward`` as a bfloat16 score on its last response token, rows in
completion order. Then, as ``_train_step`` does: ``uid = data_id_list``, verl's ``compute_response_mask``,
``token_level_rewards = token_level_scores``, the advantage. The rows ``_train_step`` drops after the advantage
(prompts over ``max_prompt_length``: none here; the random floor to a multiple of the PPO mini-batch) are kept: the
tables hold every row the advantage saw. The advantage written is each row's value at its first response token
(bfloat16 as float64); the reward written is the rollout's reward as reported (float64).

The batches are ours: 3 steps of 6 prompts, 2 to 4 rollouts each, 1 to 4 LLM calls per rollout (random token
ids), rewards 0/1 or continuous (two decimals). Per step: one prompt whose rollouts all got 1 (advantage 0 either
way), one whose rollouts are all single calls (nothing to deduplicate), one whose rollouts all made 2 calls (the
same weights, a different std), the others mixed; rollouts complete in a random order. Every row's advantage
either stays or moves by at least ``MARGIN`` when each rollout counts once, so that which rows move does not hang on
bfloat16 rounding.

Run from the repository root, outside the project's environment (the tests import nothing of this)::

    git -C AGL_MIRROR archive --prefix=agl-before/ 5f3093d62a88961118054edb620dfce49f3f5577 -- . ':!uv.lock' \\
        | tar x -C /tmp
    git -C AGL_MIRROR archive --prefix=agl-after/ ba0a8ffec878092c1a384c2ed353be0a2fab74b8 -- . ':!uv.lock' \\
        | tar x -C /tmp
    git -C VERL_MIRROR archive --prefix=verl-v0.7.0/ v0.7.0 | tar x -C /tmp
    python -m tests.findings.upstream_agl --before /tmp/agl-before --after /tmp/agl-after --verl /tmp/verl-v0.7.0

in a Python with torch, numpy, pyarrow, pydantic, tensordict, omegaconf, codetiming, tqdm, ray, requests, flask,
gunicorn, starlette, aiologic and gpustat installed (other heavy imports are inert stubs:
``tests.findings.upstream_verl.install_stubs``).

Writes ``agl_before_462.parquet`` and ``agl_after_462.parquet`` (``--out``, default
``tests/fixtures/findings``), columns ``step``, ``prompt_id`` (data_id), ``trajectory_id`` (rollout_id),
``reward``, ``advantage``; the two share every column but ``advantage``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.findings.upstream_verl import FIXTURES, first_token_values, import_from, seeded_uuids, write_table

BEFORE_COMMIT = "5f3093d62a88961118054edb620dfce49f3f5577"
AFTER_COMMIT = "ba0a8ffec878092c1a384c2ed353be0a2fab74b8"
VERL_COMMIT = "f9c855f7cf04d603c9546bc01776c74806a879c1"
BEFORE, AFTER = "agl_before_462.parquet", "agl_after_462.parquet"
STEPS = (0, 1, 2)
PROMPTS_PER_STEP = 6
MAX_PROMPT_LENGTH, MAX_RESPONSE_LENGTH = 48, 24
AGL_PACKAGES = ("agentlightning",)


@dataclass(frozen=True)
class Rollout:
    """One completed rollout of our batch: its prompt (data_id), its id, its reward and its LLM calls (prompt and
    response token ids)."""

    step: int
    data_id: str
    rollout_id: str
    reward: float
    calls: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]


def _calls(rng: np.random.Generator, count: int) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """``count`` LLM calls of one rollout: growing prompts (the conversation so far), short responses."""
    calls = []
    prompt = [int(token) for token in rng.integers(10, 5000, int(rng.integers(4, 10)))]
    for _ in range(count):
        response = [int(token) for token in rng.integers(10, 5000, int(rng.integers(2, 12)))]
        calls.append((tuple(prompt[-MAX_PROMPT_LENGTH:]), tuple(response)))
        prompt = prompt + response + [int(token) for token in rng.integers(10, 5000, 3)]
    return tuple(calls)


MARGIN = 0.15
"""Each row's advantage either stays exactly or moves by at least this much when each trajectory counts once (in
float64), more than twice the error of upstream's bfloat16 arithmetic on these rows (checked in ``main``): the rows
that move are the same whichever precision one computes them in."""


def _grpo(reward: np.ndarray) -> np.ndarray:
    """verl's GRPO on one group in float64: (r - mean) / (unbiased std + 1e-6), a one-member group r / (1 + 1e-6)."""
    if len(reward) == 1:
        return reward / (1.0 + 1e-6)
    return (reward - reward.mean()) / (reward.std(ddof=1) + 1e-6)


def _moves(rewards: np.ndarray, turns: np.ndarray) -> np.ndarray:
    """Per trajectory of one prompt: |every sample counted - each trajectory counted once| of its advantage."""
    samples = _grpo(np.repeat(rewards, turns))
    return np.abs(samples[np.cumsum(turns) - turns] - _grpo(rewards))


def _prompt(rng: np.random.Generator, place: int) -> tuple[np.ndarray, np.ndarray]:
    """(rewards, calls) per rollout of the prompt at ``place`` (see ``batch``)."""
    while True:
        count = int(rng.integers(2, 5))
        if place == 1:
            turns = np.ones(count, dtype=np.int64)
        elif place == 2:
            turns = np.full(count, 2, dtype=np.int64)
        else:
            turns = rng.integers(1, 5, count)
        if place == 0:
            rewards = np.ones(count)
        elif place % 2 == 0:
            rewards = rng.integers(0, 2, count).astype(np.float64)
        else:
            rewards = np.round(rng.integers(1, 20, count) * 0.05, 2)
        moves = _moves(rewards, turns)
        varied = place == 0 or len(set(rewards.tolist())) > 1
        mixed = place < 3 or len(set(turns.tolist())) > 1
        if varied and mixed and bool(np.all((moves == 0) | (moves >= MARGIN))):
            return rewards, turns


def float64_advantages(columns: dict[str, list[Any]], *, once: bool) -> np.ndarray:
    """The table's GRPO advantages in float64: every row a member of its prompt's statistics, or (``once``) each
    trajectory once, with its first row's reward."""
    step, prompt = np.asarray(columns["step"]), np.asarray(columns["prompt_id"])
    trajectory, reward = np.asarray(columns["trajectory_id"]), np.asarray(columns["reward"], dtype=np.float64)
    out = np.zeros(len(reward))
    for key in sorted(set(zip(step.tolist(), prompt.tolist(), strict=True))):
        at = np.flatnonzero((step == key[0]) & (prompt == key[1]))
        if not once:
            out[at] = _grpo(reward[at])
            continue
        _, first, member = np.unique(trajectory[at], return_index=True, return_inverse=True)
        out[at] = _grpo(reward[at][first])[member.reshape(-1)]
    return out


def batch(seed: int = 462) -> list[list[Rollout]]:
    """Per step, the completed rollouts in completion order.

    Prompt places per step: 0 all rewards 1; 1 every rollout one call; 2 every rollout two calls; 3, 4, 5 calls
    1..4 at random, not all equal; even places 0/1 rewards, odd places continuous (0.05 to 0.95, two decimals);
    rewards not all equal but at place 0; every row moves by 0 or at least ``MARGIN`` under counting once."""
    rng = np.random.default_rng(seed)
    steps: list[list[Rollout]] = []
    for step in STEPS:
        rollouts: list[Rollout] = []
        for place, data_id in enumerate(seeded_uuids(rng, PROMPTS_PER_STEP)):
            rewards, turns = _prompt(rng, place)
            for rollout_id, reward, calls in zip(seeded_uuids(rng, len(turns)), rewards, turns, strict=True):
                rollouts.append(Rollout(step, data_id, rollout_id, float(reward), _calls(rng, int(calls))))
        order = rng.permutation(len(rollouts))
        steps.append([rollouts[int(at)] for at in order])
    return steps


class _Daemon:
    """The attributes of ``AgentModeDaemon`` that ``get_train_data_batch`` reads (transition level, no mrope)."""

    def __init__(self, daemon_class: Any, types: Any, rollouts: list[Rollout]) -> None:
        self.is_train = True
        self.pad_token_id = 0
        self.reward_fillna_value = 0.0
        self.trace_aggregator = {"level": "transition"}
        self._use_mrope = False
        self.tokenizer = None
        self._completed_rollouts_v0 = {
            rollout.rollout_id: types.RolloutLegacy(
                rollout_id=rollout.rollout_id,
                final_reward=rollout.reward,
                triplets=[
                    types.Triplet(prompt={"token_ids": list(prompt)}, response={"token_ids": list(response)})
                    for prompt, response in rollout.calls
                ],
            )
            for rollout in rollouts
        }
        self._total_tasks_queued = len(rollouts)
        self._task_id_to_original_sample = {rollout.rollout_id: {"data_id": rollout.data_id} for rollout in rollouts}
        self._fillna = daemon_class._fillna_reward

    def _fillna_reward(self, rollout: Any) -> Any:
        return self._fillna(self, rollout)


def run_step(checkout: Path, verl: Path, rollouts: list[Rollout], *, after: bool, cross_all: bool = False) -> Any:
    """(rows, advantage) of one training step: the DataProto ``get_train_data_batch`` built and each row's
    advantage, by the checkout's ``_train_step`` arithmetic (``after``: the PR's function, with
    ``compute_mean_std_cross_all_data=cross_all``)."""
    import importlib

    import torch

    omegaconf = importlib.import_module("omegaconf")  # verl's config library, not the project's
    import_from(verl, "verl.protocol")
    trainer = import_from(checkout, "agentlightning.verl.trainer", fresh=AGL_PACKAGES)
    daemon = import_from(checkout, "agentlightning.verl.daemon")
    types = import_from(checkout, "agentlightning.types")
    assert Path(trainer.__file__).resolve().is_relative_to(checkout.resolve()), trainer.__file__
    stand_in = _Daemon(daemon.AgentModeDaemon, types, rollouts)
    data, _ = daemon.AgentModeDaemon.get_train_data_batch(
        stand_in, MAX_PROMPT_LENGTH, MAX_RESPONSE_LENGTH, torch.device("cpu"), rollouts[0].step
    )
    # _train_step, in its order
    data.non_tensor_batch["uid"] = data.non_tensor_batch["data_id_list"]
    if "response_mask" not in data.batch:
        data.batch["response_mask"] = trainer.compute_response_mask(data)
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    if after:
        advantages, _ = trainer.compute_grpo_outcome_advantage(
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            traj_index=data.non_tensor_batch["rollout_id_list"],
            norm_adv_by_std_in_grpo=True,
            compute_mean_std_cross_all_data=cross_all,
        )
    else:
        config = omegaconf.OmegaConf.create({"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True, "gamma": 1.0})
        data = trainer.compute_advantage(
            data,
            adv_estimator=trainer.AdvantageEstimator.GRPO,
            gamma=1.0,
            lam=1.0,
            num_repeat=4,
            norm_adv_by_std_in_grpo=True,
            config=config,
        )
        advantages = data.batch["advantages"]
    return data, first_token_values(advantages, data.batch["response_mask"])


def run(checkout: Path, verl: Path, steps: list[list[Rollout]], *, after: bool, cross_all: bool = False) -> Any:
    """The table columns over every step: step, prompt_id, trajectory_id, reward (the rollout's), advantage."""
    by_id = {rollout.rollout_id: rollout for rollouts in steps for rollout in rollouts}
    columns: dict[str, list[Any]] = {"step": [], "prompt_id": [], "trajectory_id": [], "reward": [], "advantage": []}
    for rollouts in steps:
        data, advantage = run_step(checkout, verl, rollouts, after=after, cross_all=cross_all)
        for data_id, rollout_id, value in zip(
            data.non_tensor_batch["data_id_list"], data.non_tensor_batch["rollout_id_list"], advantage, strict=True
        ):
            rollout = by_id[str(rollout_id)]
            assert rollout.data_id == str(data_id)
            columns["step"].append(rollout.step)
            columns["prompt_id"].append(rollout.data_id)
            columns["trajectory_id"].append(rollout.rollout_id)
            columns["reward"].append(rollout.reward)
            columns["advantage"].append(float(value))
    return columns


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--before", type=Path, required=True, help=f"microsoft/agent-lightning at {BEFORE_COMMIT}")
    parser.add_argument("--after", type=Path, required=True, help=f"microsoft/agent-lightning at {AFTER_COMMIT}")
    parser.add_argument("--verl", type=Path, required=True, help=f"verl-project/verl at {VERL_COMMIT} (v0.7.0)")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args(argv)
    steps = batch()
    before = run(args.before, args.verl, steps, after=False)
    after = run(args.after, args.verl, steps, after=True)
    default = run(args.after, args.verl, steps, after=True, cross_all=True)
    for key in ("step", "prompt_id", "trajectory_id", "reward"):
        assert before[key] == after[key] == default[key], key
    # The PR's default (compute_mean_std_cross_all_data=True) is the arithmetic before it.
    assert before["advantage"] == default["advantage"], "the PR's default differs from the arithmetic before it"
    for columns, once in ((before, False), (after, True)):
        error = np.abs(np.asarray(columns["advantage"]) - float64_advantages(columns, once=once)).max()
        assert error < MARGIN / 2, f"bfloat16 error {error} against MARGIN {MARGIN}"
        print(f"{'after' if once else 'before'}: max |bfloat16 - float64| {error:.4f}")
    for name, columns in ((BEFORE, before), (AFTER, after)):
        path = write_table(columns, args.out / name)
        print(f"{path}: {len(columns['step'])} rows")


if __name__ == "__main__":
    main()
