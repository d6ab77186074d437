"""Reproductions of the advantage defects the field reported, one per finding code of
``rollaudit/_audit/findings/codes.py``: for each, a *defective* table (the advantages the buggy framework
recorded) and a *control* (the same rows with the advantages a correct framework records), in the generic table
layout rollaudit reads, with the code the defective table must get and the rows (0-based, in the written table)
that show it.

Written from the upstream reports (the issue or pull request each function names), not from rollaudit's
detector. Every table has 3 steps of about 10 prompt groups, rows in batch order with each prompt's samples
together, and the columns

``step`` (int64), ``prompt_id`` (int64, the *true* prompt key), ``trajectory_id`` (int64, where trajectories
matter), ``agent`` (string, where agents matter), ``status`` (string, where some rows were never trained),
``reward`` (float64) and ``advantage`` (float64, what the framework recorded).

The controls are the advantages of a named rollaudit preset (``Reproduction.control_scheme``); where the buggy
framework's arithmetic is a preset too, ``Reproduction.defective_scheme`` names it (recomputed over
``Reproduction.defective_keys``, the key that framework grouped by). ``tests/findings/test_reproductions.py``
checks both against ``rollaudit.recompute``.

"Rows that show it" is, for every case here, both the defect's structure (the tail, the straddling slices, the
split prompt...) and the rows whose recorded advantage differs from the control's: the data are built so that
the two are the same set (continuous rewards where 0/1 rewards could tie), which the self-checks verify.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

STEPS = (0, 1, 2)
PROMPTS_PER_STEP = 10
GRPO_EPS = 1e-6
"""Standard GRPO (verl, slime, NeMo-RL): (r - mean) / (unbiased std + 1e-6)."""
AREAL_EPS = 1e-5
"""AReaL's reward_norm eps: a tail row's r / eps turns a reward of 1 into 1e5."""
STRIDE = 4
"""The group size n of the positional cases (AReaL's group_size, open-instruct's num_samples_per_prompt_rollout)."""
TRAINED, REJECTED = "completed", "rejected"


@dataclass(frozen=True)
class Reproduction:
    """One defect, reproduced.

    case
        the test id: the code, and the variant after a ``/`` where a code has several.
    code
        the finding code the defective table must get.
    defective, control
        the two tables, the same rows and columns but ``advantage``.
    rows
        the rows of ``defective`` (0-based, sorted) that show the defect; the control shows nothing.
    control_scheme
        the rollaudit preset whose advantages the control holds on its trained rows.
    defective_scheme
        the rollaudit preset that gives the defective advantages when grouped by ``defective_keys`` (None: no
        preset does, e.g. a shift of rows).
    defective_keys
        the key the defective framework grouped by, where it is not ``prompt_id`` (None: ``prompt_id``).
    shift
        rows-misaligned only: the recorded column is the control's rolled by this many rows.
    note
        how the two tables were made, in one line.
    """

    case: str
    code: str
    defective: pa.Table
    control: pa.Table
    rows: tuple[int, ...]
    control_scheme: str
    defective_scheme: str | None
    defective_keys: np.ndarray | None = None
    shift: int = 0
    note: str = ""

    @property
    def trained(self) -> np.ndarray:
        """Which rows were trained (all but ``status == 'rejected'``)."""
        if "status" not in self.defective.column_names:
            return np.ones(self.defective.num_rows, dtype=bool)
        return np.asarray(self.defective.column("status").to_pylist()) != REJECTED


# ---------------------------------------------------------------------------------------------------------------------
# Advantage arithmetic, as the frameworks do it.


def group_codes(*keys: np.ndarray) -> np.ndarray:
    """One int code per distinct combination of the key columns (step, prompt, ...)."""
    stacked = np.stack([np.asarray(key, dtype=np.int64) for key in keys], axis=1)
    _, codes = np.unique(stacked, axis=0, return_inverse=True)
    return np.asarray(codes, dtype=np.int64).reshape(-1)


def grpo(
    reward: np.ndarray,
    groups: np.ndarray,
    *,
    eps: float = GRPO_EPS,
    scale: bool = True,
    singleton: str = "zero",
) -> np.ndarray:
    """Per group: (r - mean) / (unbiased std + eps), or r - mean (``scale=False``: Dr.GRPO), in float64. A
    one-member group gives 0 (``zero``), NaN (``nan``: torch's unbiased std of one element) or r / (1 + eps)
    (``raw``: verl's mean 0 and std 1)."""
    out = np.zeros(len(reward))
    for code in np.unique(groups):
        at = np.flatnonzero(groups == code)
        rewards = reward[at]
        if at.size == 1:
            out[at] = {"zero": 0.0, "nan": np.nan, "raw": rewards[0] / (1.0 + eps)}[singleton]
            continue
        centred = rewards - rewards.mean()
        out[at] = centred / (rewards.std(ddof=1) + eps) if scale else centred
    return out


def trajectory_grpo(reward: np.ndarray, groups: np.ndarray, trajectory: np.ndarray) -> np.ndarray:
    """Per prompt group, GRPO over the trajectories (each counted once, with its reward), each sample given its
    trajectory's advantage (agent-lightning PR #462: ``compute_mean_std_cross_all_data=False``)."""
    out = np.zeros(len(reward))
    for code in np.unique(groups):
        at = np.flatnonzero(groups == code)
        trajectories, first, member = np.unique(trajectory[at], return_index=True, return_inverse=True)
        per_trajectory = grpo(reward[at][first], np.zeros(len(trajectories), dtype=np.int64))
        out[at] = per_trajectory[np.asarray(member).reshape(-1)]
    return out


def nemo_leave_one_out(reward: np.ndarray, groups: np.ndarray, *, guard_equal_peers: bool) -> np.ndarray:
    """NeMo-RL ``calculate_baseline_and_std_per_prompt(leave_one_out_baseline=True)`` and GRPO's
    ``normalize_rewards``, in torch float32 as NeMo-RL computes them: each member's baseline and mean square from a
    (1 - eye) mask matrix times the rewards (``torch.matmul``) over n - 1, std = sqrt((E[r^2] - E[r]^2) * nv/(nv - 1))
    (nan -> 0), advantage (r - baseline) / (std + 1e-6) where std > 0, else r - baseline; a one-member group
    gives 0 (its baseline is its reward).

    ``guard_equal_peers``: NeMo-RL after PR #4158: a member whose leave-one-out peers all share one reward is
    centred and not divided, whatever rounding residue the moments leave for its std."""
    rewards = torch.tensor(reward, dtype=torch.float32)
    out = torch.zeros_like(rewards)
    for code in np.unique(groups):
        at = torch.from_numpy(np.flatnonzero(groups == code))
        members = rewards[at]
        size = members.numel()
        if size <= 1:
            continue
        mask = 1 - torch.eye(size, dtype=torch.float32)
        num_valid = torch.tensor(float(size), dtype=torch.float32) - 1
        baseline = torch.matmul(mask, members) / num_valid
        mean_square = torch.matmul(mask, torch.pow(members, 2)) / num_valid
        std = ((mean_square - baseline.square()) * (num_valid / (num_valid - 1))).sqrt().nan_to_num(0)
        divide = std > 0
        if guard_equal_peers:
            peers_vary = torch.tensor(
                [bool(torch.unique(torch.cat([members[:i], members[i + 1 :]])).numel() > 1) for i in range(size)]
            )
            divide = divide & peers_vary
        centred = members - baseline
        out[at] = torch.where(divide, centred / (std + GRPO_EPS), centred)
    return out.to(torch.float64).numpy()


# ---------------------------------------------------------------------------------------------------------------------
# Layouts and tables.


def _layout(sizes_per_step: Sequence[Iterable[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(step, prompt_id) per row: each step's prompts in batch order, prompt j of step s keyed 100 s + j, its
    samples together."""
    steps: list[int] = []
    prompts: list[int] = []
    for step, sizes in zip(STEPS, sizes_per_step, strict=True):
        for place, size in enumerate(sizes):
            steps += [step] * int(size)
            prompts += [100 * step + place] * int(size)
    return np.asarray(steps, dtype=np.int64), np.asarray(prompts, dtype=np.int64)


def _uneven(rng: np.random.Generator, low: int = 2, high: int = 8) -> list[np.ndarray]:
    """Each step's prompt sizes, uniform in [low, high]."""
    return [rng.integers(low, high + 1, PROMPTS_PER_STEP) for _ in STEPS]


def _binary(rng: np.random.Generator, rows: int) -> np.ndarray:
    return rng.integers(0, 2, rows).astype(np.float64)


def _continuous(rng: np.random.Generator, rows: int, high: float = 1.0) -> np.ndarray:
    return np.round(rng.uniform(0.0, high, rows), 3)


def _table(
    step: np.ndarray,
    prompt: np.ndarray,
    reward: np.ndarray,
    advantage: np.ndarray,
    *,
    trajectory: np.ndarray | None = None,
    agent: Sequence[str] | None = None,
    status: Sequence[str] | None = None,
) -> pa.Table:
    columns: dict[str, pa.Array] = {
        "step": pa.array(step, pa.int64()),
        "prompt_id": pa.array(prompt, pa.int64()),
    }
    if trajectory is not None:
        columns["trajectory_id"] = pa.array(trajectory, pa.int64())
    if agent is not None:
        columns["agent"] = pa.array(list(agent), pa.string())
    if status is not None:
        columns["status"] = pa.array(list(status), pa.string())
    columns["reward"] = pa.array(reward, pa.float64())
    columns["advantage"] = pa.array(advantage, pa.float64())
    return pa.table(columns)


def _pair(
    step: np.ndarray,
    prompt: np.ndarray,
    reward: np.ndarray,
    defective: np.ndarray,
    control: np.ndarray,
    *,
    trajectory: np.ndarray | None = None,
    agent: Sequence[str] | None = None,
    status: Sequence[str] | None = None,
) -> tuple[pa.Table, pa.Table]:
    """(defective, control): the same rows, two advantage columns."""
    broken = _table(step, prompt, reward, defective, trajectory=trajectory, agent=agent, status=status)
    correct = _table(step, prompt, reward, control, trajectory=trajectory, agent=agent, status=status)
    return broken, correct


def _rows(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(row) for row in np.flatnonzero(mask))


def write_parquet(table: pa.Table, path: Path) -> Path:
    """``table`` as a Parquet file at ``path``."""
    pq.write_table(table, path)
    return path


# ---------------------------------------------------------------------------------------------------------------------
# The defect classes.


def batch_as_group() -> Reproduction:
    """slime #2204: whenever a step's sample count was not n x batch_size, slime's reward post-processing centred
    and scaled the whole step as one group (one mean, one unbiased std + 1e-6)."""
    rng = np.random.default_rng(2204)
    step, prompt = _layout(_uneven(rng))
    reward = _binary(rng, len(step))
    defective = grpo(reward, step)
    control = grpo(reward, group_codes(step, prompt))
    tables = _pair(step, prompt, reward, defective, control)
    return Reproduction(
        "batch-as-group",
        "batch-as-group",
        *tables,
        rows=_rows(np.ones(len(step), dtype=bool)),
        control_scheme="prompt",
        defective_scheme="batch",
        note="0/1 rewards; defective: GRPO with each step one group; control: GRPO per prompt",
    )


TAIL_ROWS = (2, 3, 1)
"""Rows past the last full slice of ``STRIDE`` in each step: the step sizes are 38, 43 and 33."""


def tail_rows_unnormalised() -> Reproduction:
    """AReaL #1419 / #1673: without batch metadata, reward_norm slices the batch into consecutive groups of n
    ignoring prompts; the rows after the last full slice keep mean 0 and std 0, so they get r / eps (eps 1e-5).
    The prompts here are exactly the slices (n = 4 each) but for a partial last prompt, the tail, so the tail is
    the only defect."""
    rng = np.random.default_rng(1673)
    full = (9, 10, 8)
    sizes = [[STRIDE] * count + [tail] for count, tail in zip(full, TAIL_ROWS, strict=True)]
    step, prompt = _layout(sizes)
    reward = _binary(rng, len(step))
    tail = np.zeros(len(step), dtype=bool)
    for at_step, count in zip(STEPS, full, strict=True):
        rows = np.flatnonzero(step == at_step)
        tail[rows[count * STRIDE :]] = True
    reward[tail] = rng.choice([0.5, 1.0], int(tail.sum()))  # a tail reward of 0 would stay 0: none shows nothing
    slices = np.zeros(len(step), dtype=np.int64)
    for at_step in STEPS:
        rows = np.flatnonzero(step == at_step)
        slices[rows] = np.arange(len(rows)) // STRIDE
    defective = grpo(reward, group_codes(step, slices), eps=AREAL_EPS)
    defective[tail] = reward[tail] / AREAL_EPS
    control = grpo(reward, group_codes(step, prompt), eps=AREAL_EPS)
    tables = _pair(step, prompt, reward, defective, control)
    return Reproduction(
        "tail-rows-unnormalised",
        "tail-rows-unnormalised",
        *tables,
        rows=_rows(tail),
        control_scheme="areal-group",
        defective_scheme=f"areal-stride(n={STRIDE})",
        note="prompts of 4 plus a partial tail prompt of 2, 3, 1 rows (rewards 0.5 or 1); defective: slices of 4, "
        "(r - mean) / (std + 1e-5), the tail r / 1e-5; control: AReaL group norm per prompt (eps 1e-5)",
    )


NEAR_CONSTANT = ((1.0, 0.3), (0.0, 0.6), (0.0, 0.3))
"""Per step, a group of 8: one reward y and seven rewards x that float32 cannot hold exactly. The y row's
leave-one-out peers are all x, so its true std is 0; float32 moments leave a residue of ~1e-4 (NeMo-RL PR #4158:
[0, 0.95 x 7] gives -2075; PR #4161: 7428 observed, as [1, 0.3 x 7] gives here)."""


def near_constant_blowup() -> Reproduction:
    """NeMo-RL #4158: leave-one-out baseline with normalize_rewards; the std from float32 moments (mean of squares
    minus squared mean) is rounding noise for a member whose peers share one reward, passes the std > 0 guard and
    divides: advantages in the thousands. Other groups 0/1 rewards, which cancel exactly."""
    rng = np.random.default_rng(4158)
    sizes = _uneven(rng)
    where = [int(rng.integers(0, PROMPTS_PER_STEP)) for _ in STEPS]
    for at_step, place in enumerate(where):
        sizes[at_step][place] = 8
    step, prompt = _layout(sizes)
    reward = _binary(rng, len(step))
    odd = np.zeros(len(step), dtype=bool)
    for at_step, (place, (y, x)) in enumerate(zip(where, NEAR_CONSTANT, strict=True)):
        rows = np.flatnonzero(prompt == 100 * at_step + place)
        reward[rows] = x
        lone = rows[int(rng.integers(0, len(rows)))]
        reward[lone] = y
        odd[lone] = True
    groups = group_codes(step, prompt)
    defective = nemo_leave_one_out(reward, groups, guard_equal_peers=False)
    control = nemo_leave_one_out(reward, groups, guard_equal_peers=True)
    tables = _pair(step, prompt, reward, defective, control)
    return Reproduction(
        "near-constant-blowup",
        "near-constant-blowup",
        *tables,
        rows=_rows(odd),
        control_scheme="nemo-loo-4158",
        defective_scheme="nemo-loo",
        note="0/1 rewards, and per step a group of 8 [y, x x 7] with x 0.3 or 0.6; defective: NeMo-RL leave-one-out "
        "in float32 (torch), divided where std > 0; control: the same, not divided where the peers share one reward",
    )


def masked_rows_in_baseline() -> Reproduction:
    """NeMo-RL #3467 (and #4160), verl #6452: rows the framework never trains (rejected by rollout correction,
    masked by the environment) keep their reward and prompt key, and still move their siblings' group mean and
    std. The rejected rows' recorded advantage is 0 in both tables (their loss is masked)."""
    rng = np.random.default_rng(3467)
    step, prompt = _layout(_uneven(rng, 3, 8))
    reward = _binary(rng, len(step))
    status = np.full(len(step), TRAINED, dtype=object)
    affected = np.zeros(len(step), dtype=bool)
    for at_step in STEPS:
        candidates = [key for key in np.unique(prompt[step == at_step]) if (prompt == key).sum() >= 4]
        for key in rng.choice(candidates, 3, replace=False):
            rows = np.flatnonzero(prompt == key)
            rejected = rng.choice(rows, 2 if len(rows) >= 6 else 1, replace=False)
            kept = np.setdiff1d(rows, rejected)
            # A failure placeholder 0; where every kept sibling failed, an accidental 1 (NeMo-RL #3201).
            reward[rejected] = 1.0 if not reward[kept].any() else 0.0
            status[rejected] = REJECTED
            affected[kept] = True
    trained = status == TRAINED
    defective = grpo(reward, group_codes(step, prompt))
    defective[~trained] = 0.0
    control = np.zeros(len(step))
    control[trained] = grpo(reward[trained], group_codes(step[trained], prompt[trained]))
    tables = _pair(step, prompt, reward, defective, control, status=list(status))
    return Reproduction(
        "masked-rows-in-baseline",
        "masked-rows-in-baseline",
        *tables,
        rows=_rows(affected),
        control_scheme="prompt",
        defective_scheme="prompt",
        note="0/1 rewards, 3 groups a step with 1-2 rows status 'rejected' (advantage 0); defective: GRPO over every "
        "row of the prompt; control: GRPO over the trained rows",
    )


REMOVED = (4, 4, 8)
"""Truncated rows dropped per step: the survivors stay a multiple of 4, so ``reshape(-1, n)`` does not crash
(open-instruct #1794: a batch that stays divisible silently misaligns)."""


def straddling_slices() -> Reproduction:
    """open-instruct #1794: mask_truncated_completions drops single completions, then the advantages are computed
    with ``scores.reshape(-1, n)`` over the survivors: consecutive slices of n that straddle prompts, centred
    r - mean (advantage_normalization_type=centered, the default). Continuous rewards."""
    rng = np.random.default_rng(1794)
    steps: list[int] = []
    prompts: list[int] = []
    for at_step, removed in zip(STEPS, REMOVED, strict=True):
        losers = set(rng.choice(PROMPTS_PER_STEP, removed, replace=False).tolist())
        for place in range(PROMPTS_PER_STEP):
            kept = STRIDE - (1 if place in losers else 0)
            steps += [at_step] * kept
            prompts += [100 * at_step + place] * kept
    step, prompt = np.asarray(steps, dtype=np.int64), np.asarray(prompts, dtype=np.int64)
    reward = _continuous(rng, len(step))
    slices = np.zeros(len(step), dtype=np.int64)
    for at_step in STEPS:
        rows = np.flatnonzero(step == at_step)
        assert len(rows) % STRIDE == 0
        slices[rows] = np.arange(len(rows)) // STRIDE
    slice_groups = group_codes(step, slices)
    mixed = np.zeros(len(step), dtype=bool)
    for code in np.unique(slice_groups):
        rows = np.flatnonzero(slice_groups == code)
        mixed[rows] = len(np.unique(prompt[rows])) > 1
    defective = grpo(reward, slice_groups, scale=False)
    control = grpo(reward, group_codes(step, prompt), scale=False)
    tables = _pair(step, prompt, reward, defective, control)
    return Reproduction(
        "straddling-slices",
        "straddling-slices",
        *tables,
        rows=_rows(mixed),
        control_scheme="dr-grpo",
        defective_scheme="dr-grpo",
        defective_keys=slices,
        note="10 prompts of 4 a step, 4, 4 and 8 truncated rows removed (one per prompt), continuous rewards; "
        "defective: r - mean over consecutive slices of 4 of the survivors; control: r - mean per prompt",
    )


def key_splits_prompts(kind: str) -> Reproduction:
    """NeMo-RL #3882 / #4013: the framework groups by a key of the prompt's tokens, not of the prompt. ``split``:
    one prompt's samples carry two keys (its truncated tokenisation differs), so it is normalised as two groups;
    ``merge``: two prompts share one key and are normalised as one group. One such prompt (pair) a step;
    continuous rewards."""
    rng = np.random.default_rng(3882 if kind == "split" else 4013)
    sizes = _uneven(rng)
    if kind == "split":
        chosen = [[int(rng.integers(0, PROMPTS_PER_STEP))] for _ in STEPS]
        for at_step, (place,) in enumerate(chosen):
            sizes[at_step][place] = int(rng.integers(6, 9))
    else:
        chosen = [sorted(rng.choice(PROMPTS_PER_STEP, 2, replace=False).tolist()) for _ in STEPS]
    step, prompt = _layout(sizes)
    reward = _continuous(rng, len(step))
    key = prompt.copy()
    affected = np.zeros(len(step), dtype=bool)
    for at_step, places in enumerate(chosen):
        keys = [100 * at_step + place for place in places]
        rows = np.flatnonzero(np.isin(prompt, keys))
        affected[rows] = True
        if kind == "split":
            other = rng.choice(rows, int(rng.integers(2, len(rows) - 1)), replace=False)
            key[other] = keys[0] + 50  # a key no prompt has
        else:
            key[rows] = keys[0]
    defective = grpo(reward, group_codes(step, key))
    control = grpo(reward, group_codes(step, prompt))
    tables = _pair(step, prompt, reward, defective, control)
    how = (
        "one prompt of 6-8 a step split in two sub-groups of at least 2 by a second key"
        if kind == "split"
        else "two prompts a step under one key"
    )
    return Reproduction(
        f"key-splits-prompts/{kind}",
        "key-splits-prompts",
        *tables,
        rows=_rows(affected),
        control_scheme="prompt",
        defective_scheme="prompt",
        defective_keys=key,
        note=f"continuous rewards, {how}; defective: GRPO per framework key; control: GRPO per true prompt",
    )


def turn_level_bias() -> Reproduction:
    """agent-lightning #462, miles #2378: an agent's trajectory becomes one sample per turn, each carrying the
    trajectory's reward; GRPO over every sample counts a trajectory of k turns k times in its prompt's mean and
    std. The control counts each trajectory once (``trajectory``) and is never to be told to change.

    Per step: 6 prompts of 2-4 trajectories of unequal lengths (1-4 turns) with mixed 0/1 rewards, drawn until
    counting each trajectory once moves every row's advantage by at least 20%; 2 prompts of one-turn
    trajectories and 2 of one reward (where counting once changes nothing)."""
    rng = np.random.default_rng(462)
    steps: list[int] = []
    prompts: list[int] = []
    trajectories: list[int] = []
    rewards: list[float] = []
    affected: list[bool] = []
    next_trajectory = 1000
    for at_step in STEPS:
        kinds = ["multi"] * 6 + ["single"] * 2 + ["constant"] * 2
        rng.shuffle(kinds)
        for place, kind in enumerate(kinds):
            while True:
                count = int(rng.integers(2, 5))
                lengths = rng.integers(1, 5, count) if kind != "single" else np.ones(count, dtype=np.int64)
                per = _binary(rng, count) if kind != "constant" else np.full(count, float(rng.integers(0, 2)))
                if kind == "multi" and (len(set(lengths.tolist())) < 2 or len(set(per.tolist())) < 2):
                    continue
                if kind == "single" and len(set(per.tolist())) < 2:
                    continue
                row_reward = np.repeat(per, lengths)
                row_trajectory = np.repeat(np.arange(count), lengths)
                if kind == "multi":
                    every = grpo(row_reward, np.zeros(len(row_reward), dtype=np.int64))
                    once = trajectory_grpo(row_reward, np.zeros(len(row_reward), dtype=np.int64), row_trajectory)
                    if np.min(np.abs(every - once) / np.maximum(np.abs(once), np.abs(every))) < 0.2:
                        continue
                break
            size = len(row_reward)
            steps += [at_step] * size
            prompts += [100 * at_step + place] * size
            trajectories += (row_trajectory + next_trajectory).tolist()
            next_trajectory += count
            rewards += row_reward.tolist()
            affected += [kind == "multi"] * size
    step, prompt = np.asarray(steps, dtype=np.int64), np.asarray(prompts, dtype=np.int64)
    trajectory, reward = np.asarray(trajectories, dtype=np.int64), np.asarray(rewards)
    groups = group_codes(step, prompt)
    defective = grpo(reward, groups)
    control = trajectory_grpo(reward, groups, trajectory)
    tables = _pair(step, prompt, reward, defective, control, trajectory=trajectory)
    return Reproduction(
        "turn-level-bias",
        "turn-level-bias",
        *tables,
        rows=_rows(np.asarray(affected)),
        control_scheme="trajectory",
        defective_scheme="prompt",
        note="prompts of 2-4 trajectories of 1-4 samples sharing the trajectory's 0/1 reward; defective: GRPO over "
        "every sample; control: GRPO over the trajectories, each sample its trajectory's advantage",
    )


def per_trajectory_key(singleton: str) -> Reproduction:
    """rllm #605 / #776: the group key is the trajectory's, so every group holds one trajectory: a singleton whose
    advantage is 0 (``zero``) or, under verl's GRPO on the legacy path, its reward r / (1 + 1e-6) (``raw``). Each
    prompt holds 2-8 one-sample trajectories with mixed 0/1 rewards, so every row's correct advantage is not 0."""
    rng = np.random.default_rng(605 if singleton == "zero" else 776)
    step, prompt = _layout(_uneven(rng))
    reward = _binary(rng, len(step))
    for key in np.unique(prompt):
        rows = np.flatnonzero(prompt == key)
        reward[rows[:2]] = (0.0, 1.0)
        reward[rows] = rng.permutation(reward[rows])
    trajectory = np.arange(len(step), dtype=np.int64) + 1000
    defective = grpo(reward, trajectory, singleton=singleton)
    control = grpo(reward, group_codes(step, prompt))
    tables = _pair(step, prompt, reward, defective, control, trajectory=trajectory)
    return Reproduction(
        f"per-trajectory-key/{singleton}",
        "per-trajectory-key",
        *tables,
        rows=_rows(np.ones(len(step), dtype=bool)),
        control_scheme="prompt",
        defective_scheme="prompt" if singleton == "zero" else "verl-grpo",
        defective_keys=trajectory,
        note=f"one-sample trajectories, every prompt mixed 0/1; defective: every trajectory its own group "
        f"({'0' if singleton == 'zero' else 'r / (1 + 1e-6)'}); control: GRPO per prompt",
    )


def _with_singletons(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uneven prompt sizes with two one-sample prompts a step; (step, prompt, is the row a singleton)."""
    sizes = _uneven(rng)
    for at_step in range(len(STEPS)):
        sizes[at_step][rng.choice(PROMPTS_PER_STEP, 2, replace=False)] = 1
    step, prompt = _layout(sizes)
    counts = {int(key): int((prompt == key).sum()) for key in np.unique(prompt)}
    lone = np.asarray([counts[int(key)] == 1 for key in prompt])
    return step, prompt, lone


def nan_advantages() -> Reproduction:
    """TRL #5773: a group with one usable reward gets torch's unbiased std of one element, NaN, and its advantage
    0 / NaN = NaN; the control gives a one-sample group 0."""
    rng = np.random.default_rng(5773)
    step, prompt, lone = _with_singletons(rng)
    reward = _binary(rng, len(step))
    groups = group_codes(step, prompt)
    defective = grpo(reward, groups, singleton="nan")
    control = grpo(reward, groups)
    tables = _pair(step, prompt, reward, defective, control)
    return Reproduction(
        "nan-advantages",
        "nan-advantages",
        *tables,
        rows=_rows(lone),
        control_scheme="prompt",
        defective_scheme="custom(singleton=nan)",
        note="0/1 rewards, two one-sample prompts a step; defective: GRPO, a one-sample group NaN; control: 0 there",
    )


def singleton_raw_reward() -> Reproduction:
    """verl #7150: compute_grpo_outcome_advantage gives a one-sample group mean 0 and std 1, so its advantage is
    its reward r / (1 + 1e-6); the control gives it 0. The singletons' rewards are 1 (a 0 would give 0 either way)."""
    rng = np.random.default_rng(7150)
    step, prompt, lone = _with_singletons(rng)
    reward = _binary(rng, len(step))
    reward[lone] = 1.0
    groups = group_codes(step, prompt)
    defective = grpo(reward, groups, singleton="raw")
    control = grpo(reward, groups)
    tables = _pair(step, prompt, reward, defective, control)
    return Reproduction(
        "singleton-raw-reward",
        "singleton-raw-reward",
        *tables,
        rows=_rows(lone),
        control_scheme="prompt",
        defective_scheme="verl-grpo",
        note="0/1 rewards, two one-sample prompts a step with reward 1; defective: verl GRPO (r / (1 + 1e-6)); "
        "control: 0 there",
    )


def mixed_reward_scales() -> Reproduction:
    """prime-rl #3108: two agents play each prompt, a solver rewarded in [0, 1] and a judge in [0, 10]; one
    baseline r - mean per prompt over both (prime-rl ``grpo``) lets the judge's scale decide every solver's sign.
    The control keeps one baseline per (prompt, agent) (prime-rl ``hierarchical_grpo``). Each group: 2-4 of each
    agent, the judge's rewards spanning at least 4 (one in [0, 3], one in [7, 10])."""
    rng = np.random.default_rng(3108)
    steps: list[int] = []
    prompts: list[int] = []
    agents: list[str] = []
    rewards: list[float] = []
    for at_step in STEPS:
        for place in range(PROMPTS_PER_STEP):
            solvers, judges = (int(count) for count in rng.integers(2, 5, 2))
            spread = [rng.uniform(0, 3), rng.uniform(7, 10)]
            judge = np.round(np.concatenate([spread, rng.uniform(0, 10, judges - 2)]), 2)
            solver = np.round(rng.uniform(0, 1, solvers), 3)
            names = np.asarray(["solver"] * solvers + ["judge"] * judges)
            values = np.concatenate([solver, judge])
            order = rng.permutation(solvers + judges)
            steps += [at_step] * len(order)
            prompts += [100 * at_step + place] * len(order)
            agents += names[order].tolist()
            rewards += values[order].tolist()
    step, prompt, reward = np.asarray(steps, dtype=np.int64), np.asarray(prompts, dtype=np.int64), np.asarray(rewards)
    agent_code = np.asarray([0 if name == "solver" else 1 for name in agents])
    defective = grpo(reward, group_codes(step, prompt), scale=False)
    control = grpo(reward, group_codes(step, prompt, agent_code), scale=False)
    tables = _pair(step, prompt, reward, defective, control, agent=agents)
    return Reproduction(
        "mixed-reward-scales",
        "mixed-reward-scales",
        *tables,
        rows=_rows(np.ones(len(step), dtype=bool)),
        control_scheme="prime-hierarchical",
        defective_scheme="dr-grpo",
        note="agents 'solver' (rewards in [0, 1]) and 'judge' ([0, 10]) in every prompt; defective: r - mean per "
        "prompt; control: r - mean per (prompt, agent)",
    )


def rows_misaligned(shift: int) -> Reproduction:
    """An off-by-``shift`` join: the correct advantages (GRPO per prompt) written ``shift`` rows down,
    ``np.roll`` over the whole table, so the first ``shift`` rows get the last ``shift`` rows' advantages (and
    each step's first rows the previous step's last). Continuous rewards and prompts of 3-8 (two prompts of 2
    would give the same +-0.707 side by side), so every row's recorded advantage is wrong."""
    rng = np.random.default_rng(100 + shift)
    step, prompt = _layout(_uneven(rng, 3, 8))
    reward = _continuous(rng, len(step))
    control = grpo(reward, group_codes(step, prompt))
    defective = np.roll(control, shift)
    tables = _pair(step, prompt, reward, defective, control)
    return Reproduction(
        f"rows-misaligned/shift-{shift}",
        "rows-misaligned",
        *tables,
        rows=_rows(np.ones(len(step), dtype=bool)),
        control_scheme="prompt",
        defective_scheme=None,
        shift=shift,
        note=f"continuous rewards; control: GRPO per prompt; defective: np.roll(control, {shift}) (row 0 gets the "
        "last row's)",
    )


CASES: dict[str, Callable[[], Reproduction]] = {
    "batch-as-group": batch_as_group,
    "tail-rows-unnormalised": tail_rows_unnormalised,
    "near-constant-blowup": near_constant_blowup,
    "masked-rows-in-baseline": masked_rows_in_baseline,
    "straddling-slices": straddling_slices,
    "key-splits-prompts/split": partial(key_splits_prompts, "split"),
    "key-splits-prompts/merge": partial(key_splits_prompts, "merge"),
    "turn-level-bias": turn_level_bias,
    "per-trajectory-key/zero": partial(per_trajectory_key, "zero"),
    "per-trajectory-key/raw": partial(per_trajectory_key, "raw"),
    "nan-advantages": nan_advantages,
    "singleton-raw-reward": singleton_raw_reward,
    "mixed-reward-scales": mixed_reward_scales,
    "rows-misaligned/shift-1": partial(rows_misaligned, 1),
    "rows-misaligned/shift-2": partial(rows_misaligned, 2),
}
"""Every reproduction by its case id (the code, and its variant after a ``/``)."""
