"""Write the committed samples of torchtitan's RL rollout dump (``rollout_samples.jsonl``).

    python sample_dumps/generate_torchtitan.py            # rewrite the samples next to this script
    python sample_dumps/generate_torchtitan.py --check    # exit 1 if a committed sample differs from a fresh one

The writer is torchtitan's (b5bcd76, ``torchtitan/experiments/rl``) reproduced over plain dicts, statement for
statement: ``AdvantageEstimator.__call__`` (``rollout/advantage.py``), ``KeepExtremeRewardsFilter.__call__`` and
``RolloutSampleRecorder.record`` / ``_encode_rollout`` / ``_encode_turn`` (``rollout_recorder.py``); the tests run
the same runs through torchtitan's own modules where its source is given (``TORCHTITAN_SOURCE``) and compare the
bytes. The older layout (before 2026-06-25: ``step``, string ``group_id``, ``sample_id``, one ``policy_version``
per turn) is ``record_older``. What drives the writer stands in for torchtitan's async controller: groups sampled
under a policy version that advances every ``prompts_per_step`` groups, finished out of order, a greedy
validation pass before and after training, and a resumed run appending to the same file with ``group_id``
restarting at 0 and the versions going on from the checkpoint.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import samples_cli

HERE = Path(__file__).resolve().parent
FILE_NAME = "rollout_samples.jsonl"
# The rubric's weighted rewards (AnswerCorrect 1/0 at 0.8, AnswerFormat 1/0.5/0 at 0.2), as the corpus README has.
REWARDS = (0.0, 0.1, 0.2, 0.9, 1.0)
WORDS = ("delta", "alpha", "echo", "bravo", "kilo", "lima", "oscar", "papa", "tango", "zulu")
CITIES = ("Lyon", "Porto", "Graz", "Turku", "Split", "Ghent")


# ---------------------------------------------------------------------------------------------------------------------
# torchtitan's writer, reproduced.


def advantages(rewards: list[float], should_std_normalize: bool = False) -> list[float]:
    """``AdvantageEstimator.__call__``: the reward minus the group mean, over (pstdev + 1e-6) with the option."""
    group_mean = sum(rewards) / len(rewards)
    denom = (statistics.pstdev(rewards) + 1e-6) if should_std_normalize else 1.0
    return [(reward - group_mean) / denom for reward in rewards]


def keep_extremes(groups: list[dict[str, Any]], k: int = 1) -> list[dict[str, Any]]:
    """``KeepExtremeRewardsFilter.__call__``: the k lowest- and k highest-reward rollouts of each group."""
    picked: list[dict[str, Any]] = []
    for group in groups:
        ranked = sorted(
            (rollout for rollout in group["rollouts"] if rollout["reward"] is not None),
            key=lambda rollout: rollout["reward"],
        )
        picked.extend(ranked if len(ranked) <= 2 * k else ranked[:k] + ranked[-k:])
    return picked


@dataclass
class Recorder:
    """``RolloutSampleRecorder`` (its default ``filename``) writing under ``dump_dir``."""

    dump_dir: Path
    k: int = 1
    log_tensors: bool = False
    log_logprobs: bool = False

    @property
    def path(self) -> Path:
        return Path(self.dump_dir) / FILE_NAME

    def record(self, *, is_validation: bool, rollout_groups: list[dict[str, Any]]) -> None:
        lines = []
        for rollout in keep_extremes(rollout_groups, self.k):
            record = {"is_validation": is_validation, **self._encode_rollout(rollout)}
            lines.append(json.dumps(record) + "\n")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as file:
            file.write("".join(lines))

    def _encode_rollout(self, rollout: dict[str, Any]) -> dict[str, Any]:
        return {
            "group_id": rollout["group_id"],
            "rollout_id": rollout["rollout_id"],
            "status": rollout["status"],
            "reward": rollout["reward"],
            "reward_breakdown": rollout["reward_breakdown"],
            "advantage": rollout["advantage"],
            "turns": [self._encode_turn(turn) for turn in rollout["turns"]],
        }

    def _encode_turn(self, turn: dict[str, Any]) -> dict[str, Any]:
        encoded = {
            "turn_id": turn["turn_id"],
            "min_policy_version": turn["min_policy_version"],
            "max_policy_version": turn["max_policy_version"],
            "prompt_messages": turn["prompt_messages"],
            "completion_message": turn["completion_message"],
            "env_messages": turn["env_messages"],
            "env_rewards": turn["env_rewards"],
        }
        if self.log_tensors:
            encoded["prompt_token_ids"] = turn["prompt_token_ids"]
            encoded["completion_token_ids"] = turn["completion_token_ids"]
        if self.log_logprobs:
            encoded["completion_logprobs"] = turn["completion_logprobs"]
        return encoded


def record_older(
    path: Path, *, step: int, is_validation: bool, rollout_groups: list[dict[str, Any]], k: int = 1
) -> None:
    """The recorder before 2026-06-25 (61c010fc): ``step`` first, string ids, ``sample_id``, one
    ``policy_version`` per turn (the group dicts carry the string ``group_id``; ``sample_id`` is derived)."""
    lines = []
    for rollout in keep_extremes(rollout_groups, k):
        record = {
            "step": step,
            "is_validation": is_validation,
            "group_id": rollout["group_id"],
            "sample_id": f"{rollout['group_id']}/sample={rollout['rollout_id']}",
            "status": rollout["status"],
            "reward": rollout["reward"],
            "reward_breakdown": rollout["reward_breakdown"],
            "advantage": rollout["advantage"],
            "turns": [
                {
                    "policy_version": turn["min_policy_version"],
                    "prompt_messages": turn["prompt_messages"],
                    "completion_message": turn["completion_message"],
                    "env_messages": turn["env_messages"],
                    "env_rewards": turn["env_rewards"],
                }
                for turn in rollout["turns"]
            ],
        }
        lines.append(json.dumps(record) + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as file:
        file.write("".join(lines))


# ---------------------------------------------------------------------------------------------------------------------
# Runs: the groups a controller hands the recorder, in the order it records them.


@dataclass
class Event:
    """One ``record`` call: a validation pass (all its singletons) or one training group."""

    is_validation: bool
    groups: list[dict[str, Any]]


@dataclass
class RunConfig:
    """What shapes a run: groups and their size, the estimator option, the pace of policy versions."""

    seed: int = 0
    groups: int = 12
    group_size: int = 8
    prompts_per_step: int = 4
    active_groups: int = 8
    validation: int = 3
    should_std_normalize: bool = False
    start_version: int = 0
    constant_groups: tuple[int, ...] = ()
    untrainable_groups: tuple[int, ...] = ()
    lost_groups: tuple[int, ...] = field(default=())
    """Group ids that fail (their record is never written: an exception in the rollout worker)."""


def _turn(
    rng: random.Random, group_id: int, rollout_id: int, turn_id: int, version: int, history: list, city: bool
) -> dict[str, Any]:
    words = rng.sample(WORDS, 3)
    if city:
        prompt = [*history, {"role": "user", "content": f"In which country is {rng.choice(CITIES)}?"}]
        reply = {"role": "assistant", "content": f"<think>search {rng.choice(WORDS)}</think>"}
    else:
        prompt = [*history, {"role": "user", "content": "Sort these words: " + " ".join(words)}]
        reply = {"role": "assistant", "content": " ".join(sorted(words))}
    completion = [rng.randrange(5, 5000) for _ in range(rng.randrange(1, 6))]
    # The generator may pull new weights while it decodes: the turn then spans two versions.
    newest = version + (1 if rng.random() < 0.1 else 0)
    return {
        "turn_id": turn_id,
        "min_policy_version": version,
        "max_policy_version": newest,
        "prompt_messages": prompt,
        "completion_message": reply,
        "env_messages": [{"role": "tool", "content": "ok"}] if city else [],
        "env_rewards": {},
        "prompt_token_ids": [rng.randrange(5, 5000) for _ in range(4)],
        "completion_token_ids": completion,
        "completion_logprobs": [round(-rng.random(), 6) for _ in completion],
        "_history": [*prompt, reply],
    }


def _rollout(rng: random.Random, config: RunConfig, group_id: int, rollout_id: int, version: int, *, reward: float,
             no_turns: bool) -> dict[str, Any]:  # fmt: skip
    turns: list[dict[str, Any]] = []
    if no_turns:
        status = rng.choice(("truncated_prompt_too_long", "error"))
    else:
        city = rng.random() < 0.3
        history: list = []
        for turn_id in range(rng.randrange(1, 4) if city else 1):
            turn = _turn(rng, group_id, rollout_id, turn_id, version, history, city)
            history = turn.pop("_history")
            turns.append(turn)
        status = "completed" if reward >= 0.9 else rng.choice(("completed", "truncated_length", "error_parse"))
    correct = 1.0 if reward >= 0.9 else 0.0
    form = {0.0: 0.0, 0.1: 0.5, 0.2: 1.0, 0.9: 0.5, 1.0: 1.0}[reward]
    return {
        "group_id": group_id,
        "rollout_id": rollout_id,
        "status": status,
        "reward": reward,
        "reward_breakdown": {"AnswerCorrect": correct, "AnswerFormat": form},
        "advantage": None,
        "turns": turns,
    }


def _group(rng: random.Random, config: RunConfig, group_id: int, version: int, size: int) -> dict[str, Any]:
    constant = group_id in config.constant_groups
    value = rng.choice(REWARDS)
    rewards = [value] * size if constant else [rng.choice(REWARDS) for _ in range(size)]
    untrainable = group_id in config.untrainable_groups and not constant
    lacking = rng.randrange(size) if untrainable else -1
    if lacking >= 0:
        rewards[lacking] = 0.0  # no turn, no answer: the rubric (error_reward=0.0) scores it 0
    rollouts = [
        _rollout(rng, config, group_id, index, version, reward=reward, no_turns=index == lacking)
        for index, reward in enumerate(rewards)
    ]
    for rollout, advantage in zip(rollouts, advantages(rewards, config.should_std_normalize), strict=True):
        rollout["advantage"] = advantage
    return {"group_id": group_id, "rollouts": rollouts}


def run_events(config: RunConfig, end_version: int | None = None) -> list[Event]:
    """One process's record calls: a validation pass, the training groups as they finish, a validation pass."""
    rng = random.Random(config.seed)
    events = []
    if config.validation:
        passes = [_group(rng, config, -(index + 1), config.start_version, 1) for index in range(config.validation)]
        events.append(Event(True, passes))
    sampled = []
    for group_id in range(config.groups):
        version = config.start_version + group_id // config.prompts_per_step
        # A group finishes some time after it starts; at most active_groups run at once.
        finish = group_id + rng.random() * min(config.active_groups, 3)
        sampled.append((finish, group_id, version))
    for _, group_id, version in sorted(sampled):
        group = _group(rng, config, group_id, version, config.group_size)
        if group_id not in config.lost_groups:
            events.append(Event(False, [group]))
    if config.validation:
        final = config.start_version + config.groups // config.prompts_per_step if end_version is None else end_version
        passes = [_group(rng, config, -(index + 1), final, 1) for index in range(config.validation)]
        events.append(Event(True, passes))
    return events


def write_run(dump_dir: Path, events: list[Event], *, k: int = 1, log_tensors: bool = False) -> Path:
    """Record ``events`` with the reproduced recorder (appending, as torchtitan does)."""
    recorder = Recorder(dump_dir, k=k, log_tensors=log_tensors)
    for event in events:
        recorder.record(is_validation=event.is_validation, rollout_groups=event.groups)
    return recorder.path


def full_groups(events: list[Event]) -> list[dict[str, Any]]:
    """Every training group of ``events`` with all its siblings (what the recorder was given), in record order."""
    return [group for event in events if not event.is_validation for group in event.groups]


# ---------------------------------------------------------------------------------------------------------------------
# The committed samples.

DEFAULT_RUN = (
    RunConfig(seed=11, groups=10, group_size=6, constant_groups=(2, 7), untrainable_groups=(0, 5), lost_groups=(8,)),
    RunConfig(seed=12, groups=6, group_size=6, start_version=2, constant_groups=(4,)),
)
"""A default run (k=1, Dr.GRPO) stopped after version 2 and resumed from it: two segments in one file."""
WHOLE_RUN = RunConfig(seed=21, groups=8, group_size=4, constant_groups=(3,), untrainable_groups=(6,))
"""Groups of 4 recorded with k=2: every group whole, so the presets can be checked against the recorded values."""


def write_default(root: Path) -> Path:
    first, resumed = DEFAULT_RUN
    dump = root / "torchtitan" / "outputs" / "rl"
    write_run(dump, run_events(first, end_version=2))
    return write_run(dump, run_events(resumed))


def write_whole(root: Path) -> Path:
    dump = root / "torchtitan_whole" / "outputs" / "rl"
    return write_run(dump, run_events(WHOLE_RUN), k=2, log_tensors=True)


def write_all(root: Path) -> list[Path]:
    """Write every sample under ``root``; the paths relative to it."""
    for sample in ("torchtitan", "torchtitan_whole"):
        for path in (root / sample).rglob(FILE_NAME):
            path.unlink()  # the recorder appends: start from nothing
    return [path.relative_to(root) for path in (write_default(root), write_whole(root))]


def main(argv: list[str] | None = None) -> int:
    return samples_cli.run(argv, __doc__ or "", HERE, write_all)


if __name__ == "__main__":
    sys.exit(main())
