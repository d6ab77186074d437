"""What to change in a framework so that it trains with the reference's behaviour: data, one entry per preset.

Each entry was read from the framework's own code or its pull requests (``source``). An entry names the setting or
the upstream change that moves a run from ``preset`` to ``reference``; ``text`` is one sentence a user can act on.
Where the framework has no such setting, the entry says so: that is advice too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Advice:
    """One thing to change: under ``preset`` (a preset's name, no parameters), for ``reference`` (``*``: any);
    ``formats``: only on dumps of these formats (a generic scheme such as ``batch`` means something in one
    framework: slime's legacy path fell back to it), empty for any."""

    preset: str
    reference: str
    text: str
    source: str
    formats: tuple[str, ...] = ()

    def line(self) -> str:
        return f"{self.text} (source: {self.source})"


_SLIME = "THUDM/slime"
_VERL = "verl-project/verl"
_AGL = "microsoft/agent-lightning"
_NEMO = "NVIDIA-NeMo/RL"
_AREAL = "areal-project/AReaL"
_RLLM = "rllm-org/rllm"
_ROLL = "alibaba/ROLL"
_ROLL_NORM = (
    "reward_normalization: {grouping: traj_group_id, norm_mean_type: group, norm_std_type: group} normalises per "
    "trajectory group with every step row counted"
)
_ROLL_SOURCE = f"{_ROLL} roll/pipeline/agentic/agentic_config.py, roll/pipeline/agentic/utils.py (agentic_reward_norm)"
_AREAL_GROUP = (
    "actor.reward_norm: {mean_level: group, std_level: group, group_size: <n_samples>} normalises per task with "
    "every row counted"
)

_SLIME_PROMPT = (
    "slime: apply PR #2204 (open), which normalises per group_index with every sample counted; without "
    "patching, --custom-reward-post-process-path slime.rollout._fanout_test_helpers.grpo_normalize_by_group_index "
    "does the same (a private test helper: a one-sample prompt gets NaN, not 0)"
)
_SLIME_PROMPT_SOURCE = f"{_SLIME} PR #2204; slime/rollout/_fanout_test_helpers.py"

_OPEN_INSTRUCT_MASK = (
    "open-instruct: set mask_truncated_completions=False (the default): with it on, truncated rows are removed "
    "after the groups of n were formed, and the advantages are normalised over consecutive slices of n of the rows "
    "left, which straddle prompts; no upstream setting keeps the prompts' groups while removing the rows"
)
_OPEN_INSTRUCT_SOURCE = (
    "allenai/open-instruct open_instruct/data_loader.py maybe_mask_truncated_completions and the advantages in "
    "DataPreparationActor._data_preparation_loop (e6c3044)"
)

ADVICE: tuple[Advice, ...] = (
    Advice("slime-legacy", "prompt", _SLIME_PROMPT, _SLIME_PROMPT_SOURCE),
    # Recorded advantages of one mean and std over the batch, in a slime dump: the legacy path's fallback.
    Advice("batch", "prompt", _SLIME_PROMPT, _SLIME_PROMPT_SOURCE, formats=("slime",)),
    Advice(
        "slime-legacy",
        "trajectory",
        "slime: apply PR #2062 (open), whose normalize_rewards_by_rollout counts each rollout once; otherwise a "
        "--custom-reward-post-process-path function of your own",
        f"{_SLIME} PR #2062; slime/utils/ppo_utils.py",
    ),
    Advice(
        "slime-2204",
        "trajectory",
        "slime: no setting counts a trajectory once with PR #2204; apply PR #2062 or a "
        "--custom-reward-post-process-path function",
        f"{_SLIME} PR #2062",
    ),
    Advice(
        "slime-2062",
        "prompt",
        "slime: no setting counts every sample with PR #2062; PR #2204 does",
        f"{_SLIME} PR #2204",
    ),
    Advice(
        "verl-grpo-v1",
        "prompt",
        "verl V1: algorithm.adv_estimator=grpo_vectorized counts every row (it always divides by the std: "
        "norm_adv_by_std_in_grpo is not passed to it); or trainer.use_v1=false with adv_estimator=grpo",
        f"{_VERL} verl/trainer/ppo/core_algos.py, verl/trainer/ppo/v1/utils.py",
    ),
    Advice(
        "verl-grpo",
        "trajectory",
        "verl: the v0 trainer has no session deduplication; the V1 trainer (trainer.use_v1=true, the default since "
        "PR #6823) with adv_estimator=grpo keeps each session's last output",
        f"{_VERL} PR #6823; verl/trainer/ppo/v1/utils.py",
    ),
    *(
        Advice(
            preset,
            "prompt",
            "verl: algorithm.adv_estimator=grpo (v0 trainer) or grpo_vectorized (V1) for the per-prompt GRPO baseline",
            f"{_VERL} verl/trainer/ppo/core_algos.py",
        )
        for preset in ("verl-rloo", "verl-rloo-vectorized", "verl-rpp-baseline")
    ),
    Advice(
        "trl-batch",
        "prompt",
        'TRL: scale_rewards="group" (the default; True before v0.22.0) divides by each group\'s own std',
        "huggingface/trl trl/trainer/grpo_config.py; PR #3935",
    ),
    Advice(
        "agl-rollout",
        "prompt",
        "agent-lightning v1.0: algorithm.enable_rollout_level_advantage=false runs verl's GRPO on every row, grouped "
        "by data_id",
        f"{_AGL} agentlightning/verl/config.yaml, agentlightning/verl/trainer.py (PR #539)",
    ),
    Advice(
        "agl-dedup",
        "prompt",
        "agent-lightning with PR #462 (never merged): compute_mean_std_cross_all_data=True counts every row",
        f"{_AGL} PR #462",
    ),
    Advice(
        "nemo-loo",
        "prompt",
        "NeMo-RL: grpo.use_leave_one_out_baseline=false gives the plain group mean with every row counted "
        "(nemo-grpo); the float32 residues in constant-reward groups are gone in versions with PR #4158",
        f"{_NEMO} nemo_rl/algorithms/advantage_estimator.py, nemo_rl/algorithms/utils.py; PR #4158",
    ),
    Advice(
        "areal-stride",
        "prompt",
        "AReaL: use a version with PR #1454, which takes group sizes from the batch metadata (traj_group_sizes) "
        "instead of a stride of group_size rows",
        f"{_AREAL} PR #1454; issues #1419, #1673",
    ),
    *(
        Advice(preset, "prompt", f"AReaL: {_AREAL_GROUP}", f"{_AREAL} areal/api/cli_args.py (NormConfig)")
        for preset in ("areal-batch", "areal-loo")
    ),
    Advice(
        "areal-group",
        "trajectory",
        "AReaL: before PR #1563 no trainer setting counts an attempt once (export_style: concat gives one row per "
        "attempt for linear histories); with PR #1563 (merged) each logical rollout counts once",
        f"{_AREAL} PRs #1563, #1619; areal/api/cli_args.py",
    ),
    Advice(
        "rllm-grpo",
        "prompt",
        "rllm: no setting counts every row; it always takes one reward per trajectory (hooks: a registered "
        "advantage estimator, or algorithm.use_precomputed_advantage=true)",
        f"{_RLLM} rllm/trainer/algorithms/transform.py, rllm/trainer/algorithms/rl_algo.py",
    ),
    Advice(
        "rllm-rloo",
        "prompt",
        "rllm: algorithm.adv_estimator=grpo",
        f"{_RLLM} rllm/trainer/algorithms/advantage.py",
    ),
    Advice(
        "rllm-verl-legacy",
        "*",
        "rllm: no setting in the legacy verl trainer (every trajectory is its own group, issue #605); the unified "
        "trainer groups by task_id and trajectory name (or apply PR #924, open)",
        f"{_RLLM} rllm/trainer/verl/agent_workflow_trainer.py, rllm/trainer/unified_trainer.py; issue #605",
    ),
    *(
        Advice(preset, "prompt", f"ROLL: {_ROLL_NORM}", _ROLL_SOURCE)
        for preset in ("roll-grpo-tags", "roll-grpo-batch")
    ),
    Advice(
        "roll-grpo",
        "trajectory",
        "ROLL: no setting for the step-wise env managers; env_manager_cls TrajEnvManager gives one row per trajectory",
        f"{_ROLL} roll/pipeline/agentic/agentic_config.py",
    ),
    # open-instruct's slices of n differ from the prompts only where mask_truncated_completions removed rows.
    *(
        Advice(preset, "*", _OPEN_INSTRUCT_MASK, _OPEN_INSTRUCT_SOURCE, formats=("open_instruct",))
        for preset in ("oi-centered", "oi-standard")
    ),
)
"""Read from each framework's code and pull requests; see the module docstring."""


def _base(scheme: str) -> str:
    return scheme.split("(", 1)[0].strip()


def advice_for(trained: str | None, reference: str, recorded: bool = False, formats: Sequence[str] = ()) -> list[str]:
    """The lines of advice for a run trained with ``trained`` that differs from ``reference`` on its dump, a dump
    of ``formats`` (as ``rollaudit.load`` read it; empty for a table made another way).

    ``recorded``: the run's advantages are the dump's own; where they match no preset (``trained`` None) no
    setting can be named, and the line says so.
    """
    if trained is None:
        if recorded:
            return [
                "the recorded advantages match no preset rollaudit knows, so no setting can be named; the fit of "
                "each preset shows the closest"
            ]
        return []
    preset, target = _base(trained), _base(reference)
    found = [
        entry.line()
        for entry in ADVICE
        if entry.preset == preset
        and entry.reference in (target, "*")
        and (not entry.formats or set(entry.formats) & set(formats))
    ]
    if found:
        return found
    return [f"rollaudit knows no setting that turns {preset} into {target}: check the framework's advantage options"]


__all__ = ["ADVICE", "Advice", "advice_for"]
