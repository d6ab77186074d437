"""The presets as data: the schemes of the question, and each framework's estimator (``shared/spec/schemes.md``).

Each entry is a :class:`~..schemes.Scheme` with its :class:`~..schemes.PresetNotes`; the order is the order of
``rollaudit schemes`` and of the fit's ties (the first named wins an exact tie).
"""

from __future__ import annotations

from typing import Any

from ..schemes import PresetNotes, Scheme

_TORCHTITAN = "torchtitan b5bcd76 (pytorch/torchtitan, torchtitan/experiments/rl)"
_PRIME_RL = "prime-rl 559b447 (PrimeIntellect-ai/prime-rl, verifiers a60a606)"
_RLLM_UNDEFINED = "rllm drops such groups from training (min_trajs_per_group = 2)"
# Both NeMo-RL estimators pass through calculate_baseline_and_std_per_prompt, whose trivial-set check the PR adds.
_NEMO_FIX = "the defect NeMo-RL PR #4158 fixes"
# NeMo-RL groups by its padded prompt-token rows, which the nemo_rl loader rebuilds as this column (a prompt its data
# processor truncated is keyed by its whole row there, so alone); a table without it states its prompt key itself.
_NEMO_KEY = "nemo_prompt_ids"
# slime PR #2083 (open) adds advantage_estimator=reinforce, normalized exactly as grpo: the same presets.
_SLIME_REINFORCE = "; advantage_estimator=grpo, or reinforce (slime PR #2083, open: normalized exactly as grpo)"


def preset(name: str, notes: PresetNotes, **fields: Any) -> Scheme:
    return Scheme(name=name, notes=notes, **fields)


ENTRIES: tuple[Scheme, ...] = (
    # The three schemes of the question, and slicing without keys.
    preset(
        "batch",
        PresetNotes(
            "the whole step is one group: one mean and unbiased std over every sample (what slime's reward "
            "post-processing did whenever the sample count was not n_samples_per_prompt x rollout_batch_size)",
            "slime reward post-processing, legacy path (before PR #2204)",
        ),
        groups="batch",
    ),
    preset(
        "prompt",
        PresetNotes(
            "GRPO as intended: one group per prompt key, every sample of the prompt a member; the prompt's own "
            "mean is its difficulty baseline; a one-member group gives 0",
            "slime PR #2204 (group_index grouping)",
        ),
        groups="prompt",
    ),
    preset(
        "trajectory",
        PresetNotes(
            "one group per prompt key; a trajectory that became k samples counts once (one representative "
            "reward) in its prompt's mean and std, and its advantage goes to all k samples; holds where every "
            "trajectory's rows share one reward (name a representative otherwise: first, last, max, mean)",
            "agent-lightning PR #462 (compute_mean_std_cross_all_data=False)",
        ),
        groups="prompt",
        members="trajectories",
        representative=None,
    ),
    preset(
        "positional",
        PresetNotes(
            "consecutive slices of n samples in batch order form the groups, whatever the prompt keys; needs n",
            "the slicing rule of slime, TRL and AReaL when a dump carries no prompt keys",
        ),
        groups="positional",
    ),
    # Framework presets: exact reproductions of what a run did (shared/spec/schemes.md).
    preset(
        "slime-legacy",
        PresetNotes(
            "if the step has exactly n x batch_size samples, consecutive slices of n, else the whole step; "
            "unbiased std, eps 1e-6; a one-sample group gives NaN; needs n (n_samples_per_prompt)",
            "slime main, reward post-processing before PRs #2204 and #2062",
            undefined="slime's legacy normalization gives them NaN",
        ),
        groups="legacy",
        singleton="nan",
    ),
    preset(
        "slime-2204",
        PresetNotes(
            "prompt, singleton 0; all keys missing: consecutive slices of n; some keys missing: an error naming "
            "the first position without one",
            "slime PR #2204" + _SLIME_REINFORCE,
        ),
        groups="prompt",
        singleton="zero",
    ),
    preset(
        "slime-2062",
        PresetNotes(
            "groups by prompt; a trajectory's samples (rollout_id, else index) count once and must share one "
            "reward; centre on the mean over trajectories, divide by (unbiased std + 1e-6) only when the prompt "
            "has more than one trajectory and std > 0; missing keys: slices of n when N = n x B, else the step",
            "slime PR #2062" + _SLIME_REINFORCE,
        ),
        groups="prompt",
        missing_keys="legacy",
        members="trajectories",
        siblings="equal",
    ),
    preset(
        "verl-grpo",
        PresetNotes(
            "prompt, every row a member, unbiased std, eps 1e-6; a singleton keeps mean 0 and std 1 "
            "(r / (1 + eps)); on V1 dumps the non-deduplicating grpo_vectorized",
            "verl core_algos.py compute_grpo_outcome_advantage (algorithm.adv_estimator=grpo)",
        ),
        groups="prompt",
        singleton="raw",
    ),
    preset(
        "verl-grpo-v1",
        PresetNotes(
            "verl V1 grpo: trajectory with representative last (the session's final output), singleton raw, "
            "unbiased std, eps 1e-6",
            "verl V1 trainer (trainer.use_v1=true, default since PR #6823), adv_estimator=grpo",
        ),
        groups="prompt",
        members="trajectories",
        representative="last",
        singleton="raw",
    ),
    preset(
        "verl-rloo",
        PresetNotes(
            "r minus the mean of the prompt's other members (= (r - mean) x n/(n-1)), no std; a singleton keeps "
            "its raw reward",
            "verl core_algos.py compute_rloo_outcome_advantage (adv_estimator=rloo)",
        ),
        groups="prompt",
        baseline="leave-one-out",
        scale="none",
        singleton="raw",
    ),
    preset(
        "verl-rloo-vectorized",
        PresetNotes(
            "as verl-rloo, but a singleton gets 0 (verl PR #7794, open, keeps its raw reward: singleton=raw)",
            "verl core_algos.py rloo_vectorized",
        ),
        groups="prompt",
        baseline="leave-one-out",
        scale="none",
        singleton="zero",
    ),
    preset(
        "verl-rpp-baseline",
        PresetNotes(
            "REINFORCE++ with baseline: r minus the prompt's mean (a singleton keeps r), then one whitening "
            "over the step weighted by response lengths (1e-8 terms, Bessel factor); needs response lengths",
            "verl core_algos.py reinforce_plus_plus_baseline (masked_whiten)",
        ),
        groups="prompt",
        scale="none",
        singleton="raw",
        whiten="tokens",
    ),
    preset(
        "dr-grpo",
        PresetNotes("prompt without std scaling: r minus the prompt's mean", "Dr.GRPO (scale=none)"),
        groups="prompt",
        scale="none",
    ),
    preset(
        "trl-group",
        PresetNotes(
            "consecutive slices of num_generations rows; divide by (unbiased std + 1e-4); NaN rewards are left "
            "out of the mean and std and get advantage 0",
            "TRL GRPOTrainer (scale_rewards=group)",
        ),
        groups="positional",
        eps=1e-4,
        nonfinite="zero",
    ),
    preset(
        "trl-batch",
        PresetNotes(
            "centre per slice as trl-group, divide by (unbiased std of the whole step's rewards + 1e-4)",
            "TRL GRPOTrainer (scale_rewards=batch)",
        ),
        groups="positional",
        std_over="batch",
        eps=1e-4,
        nonfinite="zero",
    ),
    # NeMo-RL trains in float32 and takes the std from moments: dtype=float64 is its exact arithmetic.
    preset(
        "nemo-loo",
        PresetNotes(
            "leave-one-out: the baseline and std of member i leave i out, std with the n_valid/(n_valid-1) "
            "correction; a group of at most one member gives 0; divide only where std > 0; float32 moments; "
            "grouped by NeMo-RL's padded prompt-token rows where its dump gives them (a prompt its data processor "
            "truncated: each row alone), else by the prompt",
            "NeMo-RL calculate_baseline_and_std_per_prompt (use_leave_one_out_baseline=true), before PR #4158",
            rounding_fix=_NEMO_FIX,
        ),
        groups="prompt",
        framework_key=_NEMO_KEY,
        baseline="leave-one-out",
        std_guard="positive",
        std_from="moments",
        dtype="float32",
    ),
    preset(
        "nemo-grpo",
        PresetNotes(
            "NeMo-RL GRPO with the plain group mean (the row included); groups, std, eps and the std > 0 rule "
            "as nemo-loo; float32 moments",
            "NeMo-RL calculate_baseline_and_std_per_prompt (use_leave_one_out_baseline=false), before PR #4158",
            rounding_fix=_NEMO_FIX,
        ),
        groups="prompt",
        framework_key=_NEMO_KEY,
        std_guard="positive",
        std_from="moments",
        dtype="float32",
    ),
    # NeMo-RL PR #4158 (merged 2026-09): a member whose std comes from rewards all of one value is not divided.
    preset(
        "nemo-loo-4158",
        PresetNotes(
            "nemo-loo after PR #4158: a row whose leave-one-out peers all share one reward is centred and not "
            "divided by std, so the float32 residues of nemo-loo vanish; float32 moments otherwise",
            "NeMo-RL calculate_baseline_and_std_per_prompt (use_leave_one_out_baseline=true), PR #4158",
        ),
        groups="prompt",
        framework_key=_NEMO_KEY,
        baseline="leave-one-out",
        std_guard="varied",
        std_from="moments",
        dtype="float32",
    ),
    preset(
        "nemo-grpo-4158",
        PresetNotes(
            "nemo-grpo after PR #4158: a group whose rewards are all one value is centred and not divided by "
            "std; float32 moments otherwise",
            "NeMo-RL calculate_baseline_and_std_per_prompt (use_leave_one_out_baseline=false), PR #4158",
        ),
        groups="prompt",
        framework_key=_NEMO_KEY,
        std_guard="varied",
        std_from="moments",
        dtype="float32",
    ),
    preset(
        "agl-dedup",
        PresetNotes(
            "trajectory with representative first, singleton raw (verl GRPO over one member per trajectory)",
            "agent-lightning PR #462",
        ),
        groups="prompt",
        members="trajectories",
        representative="first",
        singleton="raw",
    ),
    preset(
        "agl-rollout",
        PresetNotes(
            "agent-lightning v1.0 rollout-level advantage: trajectory (representative first, grouped by "
            "data_id), siblings must share one reward, verl GRPO singleton raw, in bfloat16 as upstream computes",
            "agent-lightning v1.0 (rollout-level advantage)",
        ),
        groups="prompt",
        members="trajectories",
        representative="first",
        siblings="equal",
        singleton="raw",
        dtype="bfloat16",
    ),
    preset(
        "areal-group",
        PresetNotes(
            "AReaL group norm: prompt = task, every row (LLM call) a member, unbiased std, eps 1e-5; a one-row "
            "group gives 0 (std=population: the default before v0.3.4)",
            "AReaL actor.reward_norm (mean_level=group, std_level=group)",
        ),
        groups="prompt",
        eps=1e-5,
    ),
    preset(
        "areal-stride",
        PresetNotes(
            "AReaL without batch metadata: consecutive slices of n rows, ignoring prompts; rows after the last "
            "full slice get mean 0 and std 0, so r / eps (a reward of 1 becomes 100000); needs n",
            "AReaL reward_norm group_size slicing (issue #1673)",
        ),
        groups="positional",
        remainder="unnormalized",
        eps=1e-5,
    ),
    preset(
        "areal-batch",
        PresetNotes("one mean and unbiased std over the step, eps 1e-5", "AReaL actor.reward_norm (mean_level=batch)"),
        groups="batch",
        eps=1e-5,
    ),
    preset(
        "areal-loo",
        PresetNotes(
            "r minus the mean of the task's other rows; no std; a one-row task gives 0",
            "AReaL actor.reward_norm (mean_leave1out=true)",
        ),
        groups="prompt",
        baseline="leave-one-out",
        scale="none",
    ),
    preset(
        "areal-group-1563",
        PresetNotes(
            "AReaL group norm after PRs #1563 / #1619: one reference reward per logical rollout (attempt) in "
            "the task's mean and std, divisor 1 where that std <= 2 eps, tasks with fewer than "
            "min_usable_group_size (default 2) attempts dropped (undefined)",
            "AReaL actor.reward_norm with logical group membership (PRs #1563, #1619)",
            undefined="AReaL drops groups under min_usable_group_size (default 2)",
            not_auditable="it needs each row's attempt (logical rollout) id, which AReaL's dumps do not record "
            "(sample_idx numbers rows)",
        ),
        groups="prompt",
        members="trajectories",
        representative="first",
        singleton="nan",
        eps=1e-5,
    ),
    preset(
        "rllm-grpo",
        PresetNotes(
            "group = task_id:trajectory name, one member per trajectory, population std, eps 1e-6; groups of "
            "fewer than 2 trajectories are dropped from training (undefined)",
            "rllm algorithm.adv_estimator=grpo (min_trajs_per_group=2)",
            undefined=_RLLM_UNDEFINED,
        ),
        groups="prompt",
        members="trajectories",
        std="population",
        singleton="nan",
    ),
    preset(
        "rllm-rloo",
        PresetNotes(
            "n/(n-1) x (r - mean) over the group's trajectories, no std; groups of fewer than 2 trajectories are "
            "dropped from training (undefined)",
            "rllm algorithm.adv_estimator=rloo (min_trajs_per_group=2)",
            undefined=_RLLM_UNDEFINED,
        ),
        groups="prompt",
        members="trajectories",
        baseline="leave-one-out",
        scale="none",
        singleton="nan",
    ),
    preset(
        "rllm-verl-legacy",
        PresetNotes(
            "rllm's legacy verl path: every trajectory its own group (verl GRPO singleton) on the logged reward: "
            "a one-row trajectory gets r / (1 + 1e-6), a longer one 0",
            "rllm's legacy verl trainer path (uid per trajectory)",
        ),
        groups="prompt",
        group_by="trajectory",
        singleton="raw",
        reward="legacy_reward",
    ),
    preset(
        "roll-grpo",
        PresetNotes(
            "ROLL agentic: group = traj_group_id, every step row a member (a 5-step trajectory counts 5 times), "
            "mean and unbiased std, eps 1e-6; a one-row group, or std <= 1e-6, gives 0",
            "ROLL agentic reward_normalization (grouping=traj_group_id, method=mean_std)",
        ),
        groups="prompt",
        std_guard="cutoff",
    ),
    preset(
        "roll-grpo-tags",
        PresetNotes(
            "as roll-grpo, grouped by the environment tag", "ROLL agentic reward_normalization (grouping=tags)"
        ),
        groups="prompt",
        group_by="tag",
        std_guard="cutoff",
    ),
    preset(
        "roll-grpo-batch",
        PresetNotes("as roll-grpo, the whole step one group", "ROLL agentic reward_normalization (grouping=batch)"),
        groups="batch",
        std_guard="cutoff",
    ),
    # tinker-cookbook.
    preset(
        "tinker-center",
        PresetNotes(
            "tinker-cookbook: the total reward minus its group's mean over the group's trajectories, no std and "
            "no eps, in float32; a one-trajectory group gives 0",
            "tinker-cookbook rl/data_processing.py compute_advantages (9dfcc3a)",
        ),
        groups="prompt",
        scale="none",
        dtype="float32",
    ),
    # OpenPipe ART.
    preset(
        "art-grpo",
        PresetNotes(
            "ART: r minus the group's mean over its trajectories, divided by the population std + 1e-6 "
            "(scale=none: scale_rewards=False); a one-trajectory group gives 0; float64",
            "ART src/art/preprocessing/tokenize.py tokenize_trajectory_groups (458eb16)",
        ),
        groups="prompt",
        std="population",
    ),
    # open-instruct.
    preset(
        "oi-centered",
        PresetNotes(
            "open-instruct advantage_normalization_type=centered (the default): r minus the mean of its "
            "prompt_idx group (consecutive slices of n rows of the step's surviving batch, which straddle "
            "prompts under mask_truncated_completions), no std, float64; a one-row group gives 0",
            "open-instruct data_loader.py DataPreparationActor._data_preparation_loop, advantages "
            "(e6c3044, lines 1472-1484)",
        ),
        groups="prompt",
        group_by="prompt_idx",
        scale="none",
    ),
    preset(
        "oi-standard",
        PresetNotes(
            "open-instruct advantage_normalization_type=standard: as oi-centered, divided by the group's "
            "population std + 1e-8, float64",
            "open-instruct data_loader.py DataPreparationActor._data_preparation_loop, advantages "
            "(e6c3044, lines 1472-1484)",
        ),
        groups="prompt",
        group_by="prompt_idx",
        std="population",
        eps=1e-8,
    ),
    # miles.
    preset(
        "miles-grpo",
        PresetNotes(
            "miles: slime-2062 in float32 (per prompt, a rollout's samples (rollout_id, else index) count once "
            "and must share one reward; r minus the mean over rollouts, divided by (unbiased std + 1e-6) only "
            "when the prompt has more than one rollout and std > 0; one rollout gives 0; scale=none: "
            "grpo_std_normalization off)",
            "miles miles/ray/rollout/train_data_conversion.py _normalize_rewards_by_rollout (31f1ca9)",
        ),
        groups="prompt",
        missing_keys="legacy",
        members="trajectories",
        siblings="equal",
        dtype="float32",
    ),
    # prime-rl.
    preset(
        "prime-grpo",
        PresetNotes(
            "prime-rl grpo (the default): group = group.id over the run, members = traces that are trainable, ok "
            "and have sampled tokens; r (sum of score x weight) minus the group mean, no std, no eps, float32; "
            "a one-member or constant group gives 0",
            _PRIME_RL + " src/prime_rl/orchestrator/algo/grpo.py GRPOAlgorithm.score_group",
        ),
        groups="prompt",
        scale="none",
        dtype="float32",
    ),
    preset(
        "prime-grpo-lenpen",
        PresetNotes(
            "prime-rl grpo with the linear length penalty (weights 0.25 output tokens, 0.1 input tokens, 0.1 "
            "turns; each over the group's largest, at least 1): s = r - mean(r) x frac, A = s - mean(s), float32; "
            "needs the token counts of each trace",
            _PRIME_RL + " src/prime_rl/orchestrator/algo/grpo.py (length_penalty=LinearLengthPenaltyConfig())",
        ),
        groups="prompt",
        scale="none",
        length_penalty="linear",
        dtype="float32",
    ),
    preset(
        "prime-maxrl",
        PresetNotes(
            "prime-rl max_rl: m = the group mean; A = (r - m) / m, every member 0 when m <= 0; float32",
            _PRIME_RL + " src/prime_rl/orchestrator/algo (MaxRLAlgoConfig)",
        ),
        groups="prompt",
        scale="mean",
        dtype="float32",
    ),
    preset(
        "prime-hierarchical",
        PresetNotes(
            "prime-rl hierarchical_grpo: inside the group, sub-groups keyed (agent, episode) for the agents "
            "episode_agents names (|-separated, e.g. episode_agents=solver), (agent) otherwise; r minus the "
            "sub-group mean, float64; a one-member sub-group gives 0",
            _PRIME_RL + " src/prime_rl/orchestrator/algo/hierarchical_grpo.py HierarchicalGRPOAlgorithm",
        ),
        groups="prompt",
        scale="none",
        subgroups="agent",
    ),
    preset(
        "prime-rae",
        PresetNotes(
            "prime-rl rae: one baseline per (env, agent), 0 at the run's start; members in scoring order "
            "across steps: A = r - b, then b = decay x b + (1 - decay) x r (decay 0.95), float64; not auditable "
            "unless the dumps start at the run's first step with no gap",
            _PRIME_RL + " src/prime_rl/orchestrator/algo (RAEAlgoConfig)",
        ),
        groups="prompt",
        scale="none",
        baseline="decayed",
        decay=0.95,
    ),
    # torchtitan RL (experiments/rl): both options of its AdvantageEstimator, over every sibling of a group.
    preset(
        "torchtitan-drgrpo",
        PresetNotes(
            "torchtitan AdvantageEstimator (default should_std_normalize=False, Dr.GRPO): r minus the mean over "
            "every sibling of the prompt group (errored, truncated and zero-turn ones included), float64, no std, "
            "no eps; a one-member group gives 0 (scale=std: should_std_normalize=True, divided by the population "
            "std + 1e-6, as torchtitan-grpo); exact on whole groups only: the default recorder dumps 2 siblings",
            _TORCHTITAN + " rollout/advantage.py AdvantageEstimator.__call__",
        ),
        groups="prompt",
        scale="none",
        std="population",
    ),
    preset(
        "torchtitan-grpo",
        PresetNotes(
            "torchtitan AdvantageEstimator with should_std_normalize=True: r minus the mean over every sibling "
            "of the prompt group, divided by (population std + 1e-6), float64; a one-member group gives 0 "
            "(= torchtitan-drgrpo(scale=std))",
            _TORCHTITAN + " rollout/advantage.py AdvantageEstimator.__call__",
        ),
        groups="prompt",
        std="population",
    ),
)

LAST: tuple[Scheme, ...] = (
    # Last of the framework presets: its bfloat16 arithmetic fits any float64 per-prompt GRPO within bfloat16
    # rounding, so that on a tie the exact presets are named first.
    preset(
        "agl-sample",
        PresetNotes(
            "agent-lightning before its rollout-level advantage (PR #462 never merged): every row (LLM call) a "
            "member of its data_id's verl GRPO, so a trajectory of k calls counts k times; verl singleton raw; "
            "rewards stored as bfloat16 scores, so the advantages are bfloat16",
            "agent-lightning agentlightning/verl/daemon.py get_train_data_batch (uid = data_id), verl "
            "compute_grpo_outcome_advantage",
        ),
        groups="prompt",
        singleton="raw",
        dtype="bfloat16",
    ),
    # A blank description for fully custom strings: custom(groups=prompt, scale=none, ...).
    preset(
        "custom",
        PresetNotes(
            "the defaults (prompt) as a base for any combination of keys: custom(groups=..., scale=..., ...)",
            "rollaudit",
        ),
    ),
)
