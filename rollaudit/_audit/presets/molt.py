"""Molt's group estimators (``molt/trainer/algorithm/advantage.py``, 2d62608), float32.

Before a group estimator, Molt merges a rollout's samples (the segments of a multi-turn rollout, one
``rollout_id``) into one reward, the first seen, and clamps it to ``--reward.clip_range`` (the molt loader's
``clipped_reward``); the rollout's advantage goes to all of its samples. The default estimator, ``reinforce``, is
token-level with a per-token KL the dump does not hold: only its form without KL (``--algo.kl.init_coef 0``) is a
preset.
"""

from __future__ import annotations

from ..schemes import PresetNotes, Scheme
from .frameworks import preset

_SOURCE = "Molt molt/trainer/algorithm/advantage.py (2d62608)"
_MERGED = "one member per rollout_id (its first sample's reward), rewards clipped to --reward.clip_range"
_ROLLOUTS = {"members": "trajectories", "representative": "first", "reward": "clipped_reward", "dtype": "float32"}

ENTRIES: tuple[Scheme, ...] = (
    preset(
        "molt-grpo",
        PresetNotes(
            f"Molt grpo: {_MERGED}; r minus the group mean, divided by (unbiased std + 1e-9); a one-rollout group "
            "gives 0",
            f"{_SOURCE} grpo",
        ),
        groups="prompt",
        eps=1e-9,
        **_ROLLOUTS,
    ),
    preset(
        "molt-dr-grpo",
        PresetNotes(f"Molt dr_grpo: {_MERGED}; r minus the group mean, no std", f"{_SOURCE} dr_grpo"),
        groups="prompt",
        scale="none",
        **_ROLLOUTS,
    ),
    preset(
        "molt-rloo",
        PresetNotes(
            f"Molt rloo: {_MERGED}; r minus the mean of the group's other rollouts, no std; a one-rollout group "
            "keeps its raw reward",
            f"{_SOURCE} rloo",
        ),
        groups="prompt",
        baseline="leave-one-out",
        scale="none",
        singleton="raw",
        **_ROLLOUTS,
    ),
    preset(
        "molt-reinforce-baseline",
        PresetNotes(
            f"Molt reinforce_baseline: {_MERGED}; r minus the group mean, then whitened over the step's action "
            "tokens (token-weighted mean, population variance clamped at 1e-8); needs response lengths",
            f"{_SOURCE} reinforce_baseline, normalize_advantages",
        ),
        groups="prompt",
        scale="none",
        whiten="tokens-population",
        **_ROLLOUTS,
    ),
    preset(
        "molt-reinforce-nokl",
        PresetNotes(
            "Molt reinforce (REINFORCE++) with --algo.kl.init_coef 0: every sample its own reward (clipped, no "
            "merge), whitened over the step's action tokens as molt-reinforce-baseline; with the default KL "
            "coefficient the per-token KL, not in the dump, enters first",
            f"{_SOURCE} reinforce, normalize_advantages",
        ),
        groups="batch",
        scale="none",
        whiten="tokens-population",
        reward="clipped_reward",
        dtype="float32",
    ),
)
