"""The codes about values: advantages that are not finite, one-sample groups given their reward, near-constant
groups blown up, a column shifted against its rows, untrained rows in the baseline, trajectories counted once per
sample, and agents of different reward scales under one baseline."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..._errors import SchemeError
from ..._table import AGENT, NOT_TRAINED, PROMPT, STEP, group_codes
from .laws import FINITE, laws_kept, per_code
from .structure import ALMOST_ALL, Hit

if TYPE_CHECKING:
    import pyarrow as pa

    from ..schemes import Scheme
    from .context import Rows

SHIFTS = (1, -1, 2, -2, 3, -3)
"""The shifts of the recorded column tried against its rows."""
NEAR_CONSTANT_ULPS = 8
"""Rewards within this many float32 units in the last place of each other are one value to a float32 trainer."""
BLOWUP = 10.0
"""A near-constant group's |A| counts as blown up beyond this many times the std-scaled bound (n-1)/sqrt(n) and the
group's reward range."""
SCALE_RATIO = 3.0
"""Agents whose reward spreads differ by this factor or more do not share one baseline's scale."""


def _per_group(rows: Rows, values: torch.Tensor, how: str) -> torch.Tensor:
    """``values`` reduced per true group, over the rows that have one."""
    keyed = rows.group >= 0
    return per_code(values[keyed].to(torch.float64), rows.group[keyed], max(rows.groups, 1), how)


def nonfinite(rows: Rows, scheme: Scheme | None) -> list[Hit]:
    """Advantages that are NaN or infinite where the reward is finite, unless the run's scheme leaves such rows
    undefined by design (a group it drops from training)."""
    if scheme is not None and FINITE not in laws_kept(scheme).laws:
        return []
    flagged = torch.isfinite(rows.reward) & ~torch.isfinite(rows.advantage)
    if not bool(flagged.any()):
        return []
    keyed = flagged & (rows.group >= 0)
    alone = torch.zeros_like(flagged)
    alone[keyed] = rows.group_sizes.index_select(0, rows.group[keyed]) == 1
    where = f"{int(alone.sum()):,} of them in one-sample groups" if bool(alone.any()) else "none in one-sample groups"
    return [
        Hit(
            "nan-advantages",
            flagged,
            f"{int(flagged.sum()):,} advantages not finite on finite rewards ({where})",
            {"in_one_sample_groups": int(alone.sum())},
        )
    ]


def singleton_raw(rows: Rows) -> list[Hit]:
    """One-sample (or one-trajectory) groups whose advantage is their reward, r or r / (1 + eps), not 0."""
    r, a = rows.reward, rows.advantage
    own_reward = (r != 0) & (a != 0) & ((a - r).abs() <= 1e-4 * r.abs().clamp_min(1.0))
    if not bool(own_reward.any()):
        return []  # no advantage is its reward
    own_reward &= rows.group >= 0
    raw = torch.zeros(rows.rows, dtype=torch.bool)
    raw[own_reward] = rows.group_sizes.index_select(0, rows.group[own_reward]) == 1
    if rows.enc.trajectory_count:
        trajectory = rows.trajectory.to(torch.float64)
        one = _per_group(rows, trajectory, "amin") == _per_group(rows, trajectory, "amax")
        raw[own_reward] |= one.index_select(0, rows.group[own_reward]) & (rows.trajectory[own_reward] >= 0)
    if not bool(raw.any()):
        return []
    return [
        Hit(
            "singleton-raw-reward",
            raw,
            f"{rows.groups_of(raw):,} one-member groups (one sample, or one trajectory) got their reward as "
            f"advantage ({int(raw.sum()):,} rows)",
            {},
        )
    ]


def _peer_spread(rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row: how far apart the finite rewards of the other rows of its group are (the leave-one-out peers),
    their largest magnitude, and the range of the whole group's finite rewards; rows of no group get inf."""
    keyed = (rows.group >= 0) & torch.isfinite(rows.reward)
    group = torch.where(keyed, rows.group, 0)
    r = rows.reward

    def reduce(values: torch.Tensor, how: str, where: torch.Tensor) -> torch.Tensor:
        return per_code(values[where], group[where], max(rows.groups, 1), how).index_select(0, group)

    top, bottom = reduce(r, "amax", keyed), reduce(r, "amin", keyed)
    ones = torch.ones_like(r)
    tops = reduce(ones, "sum", keyed & (r == top))
    bottoms = reduce(ones, "sum", keyed & (r == bottom))
    second_top = reduce(r, "amax", keyed & (r < top))
    second_bottom = reduce(r, "amin", keyed & (r > bottom))
    # A row that alone holds its group's highest (lowest) reward leaves the next one as its peers' highest.
    peer_top = torch.where((r == top) & (tops == 1), second_top, top)
    peer_bottom = torch.where((r == bottom) & (bottoms == 1), second_bottom, bottom)
    spread = torch.where(keyed, peer_top - peer_bottom, math.inf)
    return spread, torch.maximum(peer_top.abs(), peer_bottom.abs()), torch.where(keyed, top - bottom, math.inf)


def near_constant(rows: Rows, explained: torch.Tensor) -> list[Hit]:
    """Rows whose peers in the group (the others: their leave-one-out statistics) hold one reward to a float32
    trainer, with |A| far beyond what any std-scaled group of their size can have: a std of rounding noise. Rows
    ``explained`` by another code (a tail divided by eps) are not this one's."""
    if not bool((rows.advantage.abs() > BLOWUP).any()) or not rows.groups:
        return []  # no |A| beyond the least limit: nothing blew up
    spread, magnitude, reward_range = _peer_spread(rows)
    constant = spread <= NEAR_CONSTANT_ULPS * 2.0**-23 * magnitude
    keyed = rows.group >= 0
    n = torch.ones(rows.rows, dtype=torch.float64)
    n[keyed] = rows.group_sizes.index_select(0, rows.group[keyed]).to(torch.float64)
    # Beyond both what a std-scaled group of n can give and the group's reward range (what r - mean and
    # leave-one-out without std can give): no estimator's arithmetic, only a std of rounding noise, gets there.
    limit = BLOWUP * torch.maximum(torch.clamp((n - 1) / n.sqrt(), min=1.0), reward_range)
    flagged = keyed & (n >= 2) & constant & (rows.advantage.abs() > limit) & ~explained
    if not bool(flagged.any()):
        return []
    largest = float(rows.advantage[flagged].abs().max())
    return [
        Hit(
            "near-constant-blowup",
            flagged,
            f"{int(flagged.sum()):,} rows whose group peers hold one reward (to float32) got |A| up to "
            f"{largest:.4g}: a std of rounding noise ({rows.groups_of(flagged):,} groups)",
            {"largest": largest},
        )
    ]


def misaligned(rows: Rows, candidates: list[Scheme]) -> list[Hit]:
    """A recorded column that reproduces a scheme once shifted by k rows, and not as it stands."""
    a = rows.advantage
    for scheme in candidates:
        values = rows.values_of(scheme)
        if values is None or not bool((values.nan_to_num(0.0) != 0).any()):
            continue
        if rows.share(rows.matches(values)) >= 0.9:
            return []  # it stands where it is: no shift
        for k in SHIFTS:
            if abs(k) >= rows.rows:
                continue
            shifted, expected = (a[k:], values[:-k]) if k > 0 else (a[:k], values[-k:])
            if rows.share(rows.matches(expected, shifted)) >= ALMOST_ALL:
                flagged = torch.ones(rows.rows, dtype=torch.bool)
                where = "earlier" if k > 0 else "later"  # row i + k holds row i's advantage
                unit = "row" if abs(k) == 1 else "rows"
                return [
                    Hit(
                        "rows-misaligned",
                        flagged,
                        f"each advantage belongs to the row {abs(k)} {where}: shifted by {k} {unit} the column "
                        f"reproduces {scheme} exactly",
                        {"shift": k, "scheme": str(scheme)},
                    )
                ]
    return []


def _untrained_groups(full: pa.Table) -> np.ndarray:
    """Per row of ``full``: whether its (step, prompt) group holds a row the framework never trained."""
    import pyarrow.compute as pc

    codes = group_codes(full, [STEP, PROMPT])
    untrained = pc.is_valid(full.column(NOT_TRAINED)).to_numpy(zero_copy_only=False)
    keyed = pc.is_valid(full.column(PROMPT)).to_numpy(zero_copy_only=False)
    holding = np.zeros(int(codes.max()) + 1 if len(codes) else 0, dtype=bool)
    holding[codes[untrained & keyed]] = True
    return holding[codes] & keyed


def masked_in_baseline(rows: Rows, candidates: list[Scheme]) -> list[Hit]:
    """Trained rows whose advantages reproduce a scheme computed over every row, the untrained ones too, and not
    over the trained rows."""
    import pyarrow.compute as pc

    from ..engine.encode import encode
    from ..kernel import advantages

    full = rows.full
    if full is None:
        return []
    trained = pc.is_null(full.column(NOT_TRAINED)).to_numpy(zero_copy_only=False)
    if trained.all():
        return []
    holding = torch.from_numpy(_untrained_groups(full)[trained])
    if not bool(holding.any()):
        return []
    everything = encode(full.drop_columns([NOT_TRAINED]), rows.enc.device)
    for scheme in candidates:
        on_trained = rows.values_of(scheme)
        try:
            with_untrained = advantages(everything, scheme).to(torch.float64).cpu()[torch.from_numpy(trained)]
        except SchemeError:  # a scheme that cannot run on every row is no candidate
            continue
        if rows.share(rows.matches(with_untrained)) < ALMOST_ALL:
            continue
        if on_trained is not None and rows.share(rows.matches(on_trained)) >= ALMOST_ALL:
            return []  # the untrained rows change nothing the dump can tell
        moved = holding & ~rows.matches(on_trained) if on_trained is not None else holding
        flagged = moved if bool(moved.any()) else holding
        untrained = int((~trained).sum())
        return [
            Hit(
                "masked-rows-in-baseline",
                flagged,
                f"{untrained:,} rows never trained are counted in their groups' {scheme} statistics: "
                f"{int(flagged.sum()):,} trained rows' advantages move ({rows.groups_of(flagged):,} groups)",
                {"scheme": str(scheme), "untrained_rows": untrained},
            )
        ]
    return []


def turn_level(rows: Rows, scheme: Scheme) -> list[Hit]:
    """A run counting every sample of a prompt's multi-sample trajectories: how many rows counting each trajectory
    once would change. Said of the run's own convention, never as the reference's verdict on it."""
    if scheme.members != "samples" or scheme.groups != "prompt" or scheme.group_by != PROMPT:
        return []
    if rows.enc.trajectory_count == 0:
        return []
    try:
        once = replace(scheme, members="trajectories", representative="first", siblings="equal", name="")
    except SchemeError:
        return []  # its estimator has no form that counts each trajectory once (sub-group baselines)
    deduplicated = rows.values_of(once)
    own = rows.values_of(scheme)
    if deduplicated is None or own is None:
        return []  # siblings that differ in reward: no one reward per trajectory to count once
    moved = ~rows.matches(deduplicated, own)
    if not bool(moved.any()):
        return []
    signs = moved & (torch.sign(deduplicated) != torch.sign(own))
    return [
        Hit(
            "turn-level-bias",
            moved,
            f"trajectories of several samples count once per sample in their prompts' statistics: counting each "
            f"once changes {int(moved.sum()):,} rows' advantages ({int(signs.sum()):,} signs) in "
            f"{rows.groups_of(moved):,} prompts",
            {"rows_moved": int(moved.sum()), "signs_changed": int(signs.sum())},
        )
    ]


def mixed_scales(rows: Rows, scheme: Scheme) -> list[Hit]:
    """A baseline over agents whose rewards have different spreads (where the run's scheme keeps no per-agent
    baseline)."""
    if scheme.subgroups == "agent" or AGENT not in rows.table.column_names:
        return []
    agents = rows.table.column(AGENT)
    if agents.null_count == len(agents):
        return []
    codes = torch.from_numpy(group_codes(rows.table.select([AGENT]), [AGENT]))
    finite = torch.isfinite(rows.reward)
    spreads = {}
    for code in torch.unique(codes).tolist():
        mine = (codes == code) & finite
        if int(mine.sum()) >= 2:
            spreads[code] = float(rows.reward[mine].std())
    positive = [value for value in spreads.values() if value > 0]
    if len(positive) < 2 or max(positive) < SCALE_RATIO * min(positive):
        return []
    keyed = rows.group >= 0
    mixed = torch.zeros(rows.rows, dtype=torch.bool)
    pairs = torch.unique(rows.group[keyed] * (int(codes.max()) + 1) + codes[keyed])
    per_group = torch.bincount(torch.div(pairs, int(codes.max()) + 1, rounding_mode="floor"), minlength=rows.groups)
    mixed[keyed] = per_group.index_select(0, rows.group[keyed]) >= 2
    if not bool(mixed.any()):
        return []
    ratio = max(positive) / min(positive)
    return [
        Hit(
            "mixed-reward-scales",
            mixed,
            f"{rows.groups_of(mixed):,} groups share one baseline across agents whose reward spreads differ "
            f"{ratio:.3g}x ({int(mixed.sum()):,} rows)",
            {"ratio": ratio},
        )
    ]
