"""The laws every centred GRPO-family estimator keeps within one true group (a step's samples of one prompt), and
which laws each scheme keeps: data read from its fields, so a law a scheme breaks by design is never a finding
under it.

- ``law-finite``: a row whose reward is finite has a finite advantage.
- ``law-equal-rewards``: equal rewards get equal advantages.
- ``law-order``: a higher reward never gets a lower advantage.
- ``law-bound``: ``|A| <= (n-1)/sqrt(n)`` for ``(r - mean) / unbiased std`` (``sqrt(n-1)`` for the population
  std; the reward range for ``r - mean`` and for leave-one-out without std).
- ``law-centred``: the advantages of a group whose members are its rows sum to 0.

Each comparison allows the rounding of the arithmetic that made the advantages: ``TOLERANCE_UNITS`` units in the
last place of its dtype, and at least ``ZERO`` (the audit's own line between a zero advantage and a signed one: a
group of equal rewards whose mean is rounded leaves residues of that order once divided by a small eps), both
relative to the group's largest ``|A|``, at least 1; the centring allows it per member.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

if TYPE_CHECKING:
    from ..schemes import Scheme

FINITE, EQUAL, ORDER, BOUND, CENTRED = "law-finite", "law-equal-rewards", "law-order", "law-bound", "law-centred"
LAWS = (FINITE, EQUAL, ORDER, BOUND, CENTRED)
Bound = Literal["unbiased", "population", "range"]
TOLERANCE_UNITS = 16
ZERO = 1e-6
_EPSILON = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-7}


@dataclass(frozen=True)
class LawsKept:
    """The laws an estimator keeps, and which bound (None: no bound law)."""

    laws: frozenset[str]
    bound: Bound | None = None


UNKNOWN_ESTIMATOR = LawsKept(frozenset({FINITE, EQUAL, ORDER}))
"""What any estimator that centres a true group, or a step holding it, keeps: advantages no preset reproduces are
checked against these."""


def laws_kept(scheme: Scheme) -> LawsKept:
    """The laws ``scheme`` keeps on every table, from its fields.

    Finite unless it leaves groups undefined (one-member groups NaN, constant groups dropped). The order laws where
    every sample is a member and equal rewards meet the same statistics: groups of the true prompt, or one group
    (or one std, one whitening) per step, without per-sample baselines (a running baseline, sub-groups, a length
    penalty). The bound and the centring where, besides, the group is the prompt's and the baseline its mean (or
    leave-one-out without std).
    """
    laws = set()
    if scheme.singleton != "nan" and scheme.drop == "none":
        laws.add(FINITE)
    samples = scheme.members == "samples" and scheme.baseline != "decayed"
    plain = samples and scheme.subgroups == "none" and scheme.length_penalty == "none" and scheme.reward == "reward"
    by_prompt = scheme.groups == "prompt" and scheme.group_by == "prompt"
    # Float32 moments divided where std > 0 leave equal rewards residues of a std (NeMo-RL before PR #4158): by design.
    residues = scheme.std_from == "moments" and scheme.std_guard == "positive" and scheme.dtype != "float64"
    if plain and (by_prompt or scheme.groups == "batch") and not residues:
        laws.update((EQUAL, ORDER))
    if not (plain and by_prompt and scheme.std_over == "group" and scheme.whiten == "none"):
        return LawsKept(frozenset(laws))
    bound: Bound | None = None
    if scheme.scale == "none":
        bound = "range"
    elif scheme.scale == "std" and scheme.baseline == "mean":
        bound = "unbiased" if scheme.std == "unbiased" else "population"
    if bound is not None:
        laws.add(BOUND)
    if scheme.baseline == "mean" or scheme.scale == "none":
        laws.add(CENTRED)
    return LawsKept(frozenset(laws), bound)


def recorded_dtype(values: torch.Tensor) -> str:
    """The narrowest dtype that holds every finite value exactly: the arithmetic a dump's values were rounded to."""
    finite = values[torch.isfinite(values)]
    if bool((finite.to(torch.bfloat16).to(finite.dtype) == finite).all()):
        return "bfloat16"
    if bool((finite.to(torch.float32).to(finite.dtype) == finite).all()):
        return "float32"
    return "float64"


def relative_tolerance(dtype: str) -> float:
    """How far apart two advantages of one law may be, relative to the group's largest ``|A|`` (at least 1)."""
    return max(TOLERANCE_UNITS * _EPSILON[dtype], ZERO)


def laws_of_parts(schemes: list[Scheme | None]) -> LawsKept:
    """The laws a run that changed scheme keeps on all its rows: those every part's scheme keeps (an unknown
    part's, those of any estimator); the bound only where every part has the same."""
    kept = [UNKNOWN_ESTIMATOR if scheme is None else laws_kept(scheme) for scheme in schemes]
    if not kept:
        return UNKNOWN_ESTIMATOR
    laws = frozenset.intersection(*(entry.laws for entry in kept))
    bounds = {entry.bound for entry in kept}
    bound = bounds.pop() if len(bounds) == 1 else None
    return LawsKept(laws if bound is not None else laws - {BOUND}, bound)


def per_code(values: torch.Tensor, codes: torch.Tensor, count: int, how: str) -> torch.Tensor:
    """``values`` reduced (``amax``, ``amin`` or ``sum``) per code of ``count`` codes; a code without rows holds the
    reduction's identity (-inf or +inf for floats, the dtype's least or greatest integer, 0)."""
    if how == "sum":
        fill: float = 0
    elif values.is_floating_point():
        fill = -math.inf if how == "amax" else math.inf
    else:
        bounds = torch.iinfo(values.dtype)
        fill = bounds.min if how == "amax" else bounds.max
    out = torch.full((count,), fill, dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, codes, values, how)


def _dense(codes: torch.Tensor) -> tuple[torch.Tensor, int]:
    uniques, inverse = torch.unique(codes, return_inverse=True)
    return inverse, uniques.numel()


def broken_laws(
    reward: torch.Tensor, advantage: torch.Tensor, group: torch.Tensor, kept: LawsKept, dtype: str = "float64"
) -> dict[str, torch.Tensor]:
    """Per law ``kept`` keeps, a bool per row: True where the row breaks it. ``group``: each row's true group code
    (>= 0), -1 for a row of no known group (only ``law-finite`` reads it). The group laws read the rows whose reward
    and advantage are finite, in groups of two or more of them."""
    reward, advantage = reward.to(torch.float64), advantage.to(torch.float64)
    rows = reward.numel()
    broken: dict[str, torch.Tensor] = {}
    finite_reward = torch.isfinite(reward)
    if FINITE in kept.laws:
        broken[FINITE] = finite_reward & ~torch.isfinite(advantage)
    group_laws = kept.laws - {FINITE}
    if not group_laws or rows == 0:
        return broken
    member = finite_reward & torch.isfinite(advantage) & (group >= 0)
    at = torch.nonzero(member).flatten()
    codes, count = _dense(group[at])
    sizes = torch.bincount(codes, minlength=count)
    keep = sizes.index_select(0, codes) >= 2  # the groups of one member leave gaps in the codes: harmless
    at, codes = at[keep], codes[keep]
    r, a = reward[at], advantage[at]
    scale = per_code(a.abs(), codes, count, "amax").clamp_min_(1.0)
    relative = relative_tolerance(dtype)
    tolerance = (relative * scale).index_select(0, codes)

    def spread(name: str, flags: torch.Tensor) -> None:
        full = torch.zeros(rows, dtype=torch.bool, device=reward.device)
        full[at] = flags
        broken[name] = full

    if EQUAL in group_laws or ORDER in group_laws:
        # Cells of one group and one reward, in (group, reward) order.
        order = torch.argsort(r, stable=True)
        order = order[torch.argsort(codes[order], stable=True)]
        sorted_codes, sorted_r = codes[order], r[order]
        new_cell = torch.ones(order.numel(), dtype=torch.bool, device=r.device)
        new_cell[1:] = (sorted_codes[1:] != sorted_codes[:-1]) | (sorted_r[1:] != sorted_r[:-1])
        cell_sorted = torch.cumsum(new_cell.to(torch.int64), 0) - 1
        cells = int(cell_sorted[-1]) + 1 if order.numel() else 0
        cell = torch.empty_like(cell_sorted)
        cell[order] = cell_sorted
        high = per_code(a, cell, cells, "amax")
        low = per_code(a, cell, cells, "amin")
        if EQUAL in group_laws:
            spread(
                EQUAL, ((high.index_select(0, cell) - a) > tolerance) | ((a - low.index_select(0, cell)) > tolerance)
            )
        if ORDER in group_laws:
            spread(ORDER, _below_lower_rewards(a, cell, high, sorted_codes[new_cell], tolerance))
    if BOUND in group_laws and kept.bound is not None:
        n = sizes.to(torch.float64)
        if kept.bound == "range":
            limit = per_code(r, codes, count, "amax") - per_code(r, codes, count, "amin")
        elif kept.bound == "unbiased":
            limit = (n - 1) / n.sqrt()
        else:
            limit = (n - 1).sqrt()
        spread(BOUND, a.abs() > limit.index_select(0, codes) * (1 + relative) + tolerance)
    if CENTRED in group_laws:
        total = torch.zeros(count, dtype=torch.float64, device=a.device).index_add_(0, codes, a)
        off = total.abs() > relative * sizes.to(torch.float64) * scale
        spread(CENTRED, off.index_select(0, codes))
    return broken


def _below_lower_rewards(
    advantage: torch.Tensor, cell: torch.Tensor, high: torch.Tensor, cell_group: torch.Tensor, tolerance: torch.Tensor
) -> torch.Tensor:
    """Rows whose advantage is below, beyond tolerance, that of a row of their group with a lower reward: the
    highest advantage of the group's lower cells, a running maximum over cells reset at each group, compared."""
    cells = high.numel()
    # A running maximum that restarts per group: the cells' advantages ranked (exactly, as integers), offset by the
    # group so that an earlier group's maximum never reaches a later group's cells.
    ranks = torch.empty(cells, dtype=torch.int64, device=high.device)
    ranks[torch.argsort(high, stable=True)] = torch.arange(cells, device=high.device)
    keyed = cell_group * cells + ranks
    running = torch.cummax(keyed, 0).values
    below = torch.full((cells,), -math.inf, dtype=torch.float64, device=high.device)
    if cells > 1:
        previous = running[:-1]
        same_group = torch.div(previous, cells, rounding_mode="floor") == cell_group[1:]
        by_rank = torch.sort(high, stable=True).values
        below[1:] = torch.where(same_group, by_rank.index_select(0, previous % cells), below[1:])
    return (below.index_select(0, cell) - advantage) > tolerance
