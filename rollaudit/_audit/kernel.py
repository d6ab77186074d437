"""The recompute kernel: every scheme, all groups of all steps at once, on torch.

``encode`` turns a canonical table into integer codes and a float64 reward
tensor once; ``advantages`` applies one :class:`~rollaudit.Scheme` with
segment reductions (scatter sums over dense group codes), so the cost is a
handful of vector passes whatever the number of groups. Sums are float64
whatever the input dtype: float32 scatter sums lose digits on large groups.
A scheme whose framework computed in float32 or bfloat16 (``dtype``) rounds
the values it rounded, where it rounded them.

On the CPU, fresh memory is a cost of its own (first touches of new pages
can cost as much as the arithmetic on them), so two-step passes run piece by
piece through a small buffer, and ``advantages_of`` runs several schemes in
threads, since torch's scatter and gather kernels use one core each.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import torch

from .._errors import NotAuditable, SchemeError
from .._table import PROMPT, STEP, TRAJECTORY
from .engine.encode import F64, Encoded
from .engine.groups import (
    NO_RANK,
    Segments,
    Units,
    by_steps,
    first_ranks,
    grouping_of,
    last_ranks,
    member_groups,
    step_segments,
    ungrouped_rows,
)
from .engine.threads import SideBySide
from .estimators import advantages as estimator_advantages
from .moments import moment_advantages
from .schemes import Scheme, uses_estimator

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# verl's masked_whiten: the small constants of its masked mean and its variance.
_WHITEN_EPS = 1e-8


def _rounded(values: torch.Tensor, scheme: Scheme) -> torch.Tensor:
    """``values`` rounded (to nearest, ties to even) to the scheme's dtype, back in float64; as they are in float64."""
    if scheme.dtype == "float64":
        return values
    return values.to(DTYPES[scheme.dtype]).to(F64)


def _representatives(enc: Encoded, scheme: Scheme, units: Units) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(value, valid) per unit: the representative reward over the unit's finite samples; valid is
    None when every unit has one (every reward finite), else False for a unit without a finite sample."""
    count = units.count
    # No named representative: every trajectory's finite rows agree (``check_representative``), so any is the first.
    choice = scheme.representative or "first"
    if enc.all_finite:
        if choice in ("first", "last"):
            return enc.reward.index_select(0, units.first_row if choice == "first" else units.last_row), None
        if choice == "mean":
            return torch.bincount(units.of_row, weights=enc.reward, minlength=count).div_(
                torch.bincount(units.of_row, minlength=count).clamp_(min=1)
            ), None
        value = torch.full((count,), -torch.inf, dtype=F64, device=enc.device)
        return value.scatter_reduce_(0, units.of_row, enc.reward, "amax"), None
    finite = enc.finite
    if choice in ("first", "last"):
        # First (last) finite member in batch order: the smallest (largest) batch rank among its finite rows.
        if choice == "first":
            rank = first_ranks(enc, units.of_row, count, torch.where(finite, enc.batch_rank, NO_RANK))
            invalid = rank == NO_RANK
        else:
            rank = last_ranks(enc, units.of_row, count, torch.where(finite, enc.batch_rank, -1))
            invalid = rank < 0
        value = enc.reward.index_select(0, enc.row_at(rank.masked_fill_(invalid, 0)))
        return value.masked_fill_(invalid, 0.0), ~invalid
    finite_count = torch.bincount(units.of_row[finite], minlength=count)
    valid = finite_count > 0
    if choice == "mean":
        safe_reward = torch.where(finite, enc.reward, 0.0)
        value = torch.bincount(units.of_row, weights=safe_reward, minlength=count) / finite_count.clamp(min=1)
    else:
        value = torch.full((count,), -torch.inf, dtype=F64, device=enc.device)
        value.scatter_reduce_(0, units.of_row, torch.where(finite, enc.reward, -torch.inf), "amax")
    return torch.where(valid, value, 0.0), valid


def check_siblings(enc: Encoded, scheme: Scheme, units: Units) -> None:
    """``siblings="equal"``: every sample of a trajectory carries its trajectory's reward (NaN equals nothing,
    as in slime PR #2062 and agent-lightning); the first trajectory that does not is an error naming it."""
    first = units.first_row.index_select(0, units.of_row)
    rows = torch.arange(enc.rows, device=enc.device)
    differ = (rows != first) & (enc.reward != enc.reward.index_select(0, first))
    if not bool(differ.any()):
        return
    row = int(torch.nonzero(differ)[0])
    head = int(first[row])
    table = enc.table
    trajectory = table.column(TRAJECTORY)[row].as_py()
    prompt = table.column(scheme.group_by if scheme.group_by != TRAJECTORY else PROMPT)[row].as_py()
    step = table.column(STEP)[row].as_py()
    rewards = ", ".join(f"{float(enc.reward[index]):g}" for index in (head, row))
    raise SchemeError(
        f"{scheme.name or 'scheme'}: trajectory {trajectory!r} (prompt {prompt!r}, step {step}) has samples with "
        f"different rewards: rows {head + 1} and {row + 1} have {rewards}",
        expected="one reward shared by every sample of a trajectory",
    )


def finite_extremes(enc: Encoded, codes: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(smallest, largest) finite reward of each of ``count`` codes (per row: ``codes``); +inf and -inf for a code
    without a finite reward. One reward per code wherever the two are equal."""
    low = torch.full((count,), torch.inf, dtype=F64, device=enc.device)
    high = torch.full((count,), -torch.inf, dtype=F64, device=enc.device)
    if enc.all_finite:
        low.scatter_reduce_(0, codes, enc.reward, "amin")
        high.scatter_reduce_(0, codes, enc.reward, "amax")
    else:
        low.scatter_reduce_(0, codes, torch.where(enc.finite, enc.reward, torch.inf), "amin")
        high.scatter_reduce_(0, codes, torch.where(enc.finite, enc.reward, -torch.inf), "amax")
    return low, high


def check_representative(enc: Encoded, scheme: Scheme, units: Units) -> None:
    """``representative=None``: one reward per trajectory only where the trajectory's finite rows share it; where
    some do not (a reward per step), which one counts is a choice the dump cannot make: not auditable."""
    low, high = finite_extremes(enc, units.of_row, units.count)
    differ = int((high > low).sum())
    if differ:
        trajectories = int((high >= low).sum())  # those with a finite row
        label = scheme.name or "trajectory"
        base = label.split("(")[0]
        raise NotAuditable(
            f"{differ:,} of {trajectories:,} trajectories have rows with different rewards (a reward per step), "
            f"so one reward per trajectory is a choice the dump does not make; name it: "
            f"{base}(representative=first|last|mean|max)"
        )


def _singleton_values(scheme: Scheme, value: torch.Tensor) -> torch.Tensor:
    """Advantage of a group's only member: 0, NaN, or the raw reward under mean 0 and std 1."""
    if scheme.singleton == "zero":
        return torch.zeros_like(value)
    if scheme.singleton == "nan":
        return torch.full_like(value, torch.nan)
    if scheme.scale == "std":
        if scheme.dtype == "float64":
            return value / (1 + scheme.eps)
        # A framework's 0-d float32 tensors (mean 0, std 1): divided in float32, rounded when stored.
        divided = value.to(torch.float32) / torch.tensor(1 + scheme.eps, dtype=torch.float32, device=value.device)
        return _rounded(divided.to(F64), scheme)
    return value


def _std(scheme: Scheme, spread: torch.Tensor, count: torch.Tensor, overwrite: bool = False) -> torch.Tensor:
    """Standard deviations from sums of squared deviations and member counts (``overwrite``: reuse ``spread``).

    An undefined std (fewer members than the estimator needs) counts as 0; the caller patches one-member groups.
    """
    divisor = (count - 1).clamp_(min=1) if scheme.std == "unbiased" else count.clamp(min=1)
    return (spread.div_(divisor) if overwrite else spread / divisor).sqrt_()


def _std_factor(scheme: Scheme, std: torch.Tensor) -> torch.Tensor:
    """The factor a centred value is scaled by, from the std (``std_guard``; ``std`` may be overwritten):
    ``1 / (std + eps)``; where std is 0, 1 for ``positive`` (NeMo-RL leaves it unscaled); 0 where std <= eps for
    ``cutoff`` (ROLL); exact arithmetic gives a std of 0 to rewards all of one value, so ``varied`` is ``positive``."""
    if scheme.std_guard in ("positive", "varied"):
        return torch.where(std > 0, (std + scheme.eps).reciprocal(), 1.0)
    if scheme.std_guard == "cutoff":
        return torch.where(std > scheme.eps, (std + scheme.eps).reciprocal(), 0.0)
    factor = std.add_(scheme.eps).reciprocal_()  # the caller's own tensor
    # eps = 0 and std = 0: every deviation is 0, and so is the advantage (never 0 / 0).
    return factor.masked_fill_(torch.isinf(factor), 0.0) if scheme.eps == 0 else factor


def _rounded_affine(
    scheme: Scheme, groups: Segments, value: torch.Tensor, mean: torch.Tensor, spread: torch.Tensor, count: torch.Tensor
) -> torch.Tensor:
    """``(r - mean) / (std + eps)`` rounded where a framework computing in ``scheme.dtype`` rounds: the mean, the
    centred value, the std, ``std + eps`` and the quotient (the std from the exact deviations, as torch.std)."""
    centred = _rounded(value - groups.spread(_rounded(mean, scheme)), scheme)
    if scheme.scale == "none":
        return centred
    std = _rounded(_std(scheme, spread, count), scheme)
    denominator = _rounded(std + scheme.eps, scheme)
    if scheme.std_guard in ("positive", "varied"):  # the std of exact deviations: 0 where the rewards are one value
        denominator = torch.where(std > 0, denominator, 1.0)
    elif scheme.std_guard == "cutoff":
        denominator = torch.where(std > scheme.eps, denominator, torch.inf)
    return _rounded(centred / groups.spread(denominator), scheme)


def _undivided_where_peers_agree(
    scheme: Scheme,
    groups: Segments,
    value: torch.Tensor,
    valid: torch.Tensor | None,
    count: torch.Tensor,
    advantage: torch.Tensor,
) -> torch.Tensor:
    """``std_guard="varied"`` over rounded moments (NeMo-RL PR #4158): a member whose std comes from rewards all of
    one value (its leave-one-out peers, or its whole group) is centred and not divided, whatever residue the rounded
    moments left for a std. Its baseline is then that one value, so the centred value is ``r - value`` rounded once
    (upstream's float32 baseline can differ from it by a unit in the last place)."""
    codes = groups.codes if not groups.single else torch.zeros_like(value, dtype=torch.int64)
    member = torch.ones_like(value, dtype=torch.bool) if valid is None else valid
    low = torch.full((groups.count,), torch.inf, dtype=F64, device=value.device)
    high = torch.full((groups.count,), -torch.inf, dtype=F64, device=value.device)
    low.scatter_reduce_(0, codes, torch.where(member, value, torch.inf), "amin")
    high.scatter_reduce_(0, codes, torch.where(member, value, -torch.inf), "amax")
    row_low, row_high = low.index_select(0, codes), high.index_select(0, codes)
    agree = row_low == row_high
    peer = value
    if scheme.baseline == "leave-one-out":
        # The peers of a member agree when every other member sits at the group's other extreme.
        at_low = torch.zeros(groups.count, dtype=F64, device=value.device)
        at_high = torch.zeros(groups.count, dtype=F64, device=value.device)
        at_low.scatter_add_(0, codes, (member & (value == row_low)).to(F64))
        at_high.scatter_add_(0, codes, (member & (value == row_high)).to(F64))
        others = count.index_select(0, codes) - 1
        lone_low = (value == row_low) & (at_high.index_select(0, codes) == others)
        lone_high = (value == row_high) & (at_low.index_select(0, codes) == others)
        agree |= lone_low | lone_high
        peer = torch.where(agree & ~(row_low == row_high), torch.where(lone_low, row_high, row_low), value)
    centred = _rounded(value - peer, scheme)
    return torch.where(agree & member, centred, advantage)


def _whiten_tokens(enc: Encoded, scheme: Scheme, values: torch.Tensor) -> torch.Tensor:
    """A whitening over each step, every sample weighted by its response length (its tokens); a sample with no
    token gets 0. verl's ``masked_whiten`` (``tokens``): ``(a - mu) / sqrt(var + 1e-8)`` with a Bessel-corrected
    token variance, a step of fewer than two tokens NaN (no variance). Molt's ``normalize_advantages``
    (``tokens-population``): ``(a - mu) * rsqrt(max(var, 1e-8))`` with the population variance, a step without
    tokens 0."""
    if enc.response_length is None or bool(torch.isnan(enc.response_length).any()):
        raise SchemeError(
            f"{scheme.name or 'scheme'}: whitening by tokens needs the response length of every sample",
            expected="a response_length column (a dump that records token counts, or a table with one)",
        )
    steps = step_segments(enc)
    defined = torch.isfinite(values) if enc.all_finite else enc.finite & torch.isfinite(values)
    weight = torch.where(defined, enc.response_length, 0.0)
    safe = torch.where(defined, values, 0.0)
    tokens = steps.sum(weight)
    if scheme.whiten == "tokens-population":
        mean = steps.sum(weight * safe) / tokens.clamp(min=1)
        centred = safe - steps.spread(mean)
        variance = steps.sum(weight * centred * centred) / tokens.clamp(min=1)
        scale = torch.where(tokens > 0, variance.clamp(min=_WHITEN_EPS).rsqrt(), 0.0)
    else:
        mean = steps.sum(weight * safe) / (tokens + _WHITEN_EPS)
        centred = safe - steps.spread(mean)
        variance = steps.sum(weight * centred * centred) / (tokens + _WHITEN_EPS)
        # Bessel's correction needs two tokens: a step with fewer has no variance, and its advantages are undefined.
        scale = torch.where(
            tokens > 1, (variance * tokens / (tokens - 1).clamp(min=1) + _WHITEN_EPS).rsqrt(), torch.nan
        )
    whitened = centred * steps.spread(scale)
    whitened = torch.where(weight > 0, whitened, 0.0)
    return torch.where(defined, whitened, values)


def advantages(enc: Encoded, scheme: Scheme) -> torch.Tensor:
    """Advantage of every row under ``scheme``, float64, in row order.

    NaN marks an undefined advantage (a sample whose reward is not finite, or
    a one-member group under ``singleton="nan"``); nothing else is NaN.
    """
    if scheme.notes is not None and scheme.notes.not_auditable:
        raise NotAuditable(f"{scheme.name or 'scheme'}: {scheme.notes.not_auditable}")
    if uses_estimator(scheme):  # MaxRL, the length penalty, agent sub-groups, the decayed baseline
        return estimator_advantages(enc, scheme)
    enc = enc.with_reward(scheme.reward)
    groups, units = member_groups(enc, scheme)
    if units is not None and scheme.siblings == "equal":
        check_siblings(enc, scheme, units)
    if units is not None and scheme.representative is None:
        check_representative(enc, scheme, units)
    if units is None:
        # The members are the samples themselves.
        unit_of_row = None
        valid = None if enc.all_finite else enc.finite
        value = enc.reward if valid is None else torch.where(valid, enc.reward, 0.0)
    else:
        unit_of_row = units.of_row
        value, valid = _representatives(enc, scheme, units)
    value = _rounded(value, scheme)
    reduced = scheme.dtype != "float64"
    # Exact arithmetic gives the same std from moments as from deviations; rounded arithmetic does not.
    from_moments = reduced and scheme.std_from == "moments" and scheme.scale == "std"

    weight = None if valid is None else valid.to(F64)
    count = groups.sizes if weight is None else groups.sum(weight)
    singleton = count == 1
    has_singletons = bool(singleton.any())
    if value is enc.reward:  # the rewards' sums are kept: the per-prompt mean rewards are these sums too
        mean = groups.kept_sum(value) / groups.sizes_at_least_one
    else:
        mean = groups.sum(value).div_(groups.sizes_at_least_one if weight is None else count.clamp(min=1))
    affine = scheme.baseline == "mean" and (scheme.scale == "none" or scheme.std_over == "group")
    if affine and has_singletons and scheme.singleton == "raw":
        mean = torch.where(singleton, 0.0, mean)  # raw: a lone member keeps r (mean 0, std 1)
    # Two passes (mean first, then squared deviations): exact where a one-pass sum cancels. Unit values
    # are this call's own tensor; affine schemes never read them again, so they are centred in place.
    in_place = units is not None and affine and not reduced and value is not enc.reward
    deviation = groups.deviation(value, mean, in_place=in_place)
    if weight is not None:
        deviation.mul_(weight)
    group_spread = groups.sum_of_squares(deviation)

    if from_moments:
        order = enc.batch_rank if units is None else enc.batch_rank.index_select(0, units.first_row)
        guard = scheme.with_options(std_guard="positive") if scheme.std_guard == "varied" else scheme
        unit_advantage = moment_advantages(guard, groups, value, count, order, DTYPES[scheme.dtype])
        if scheme.std_guard == "varied":
            unit_advantage = _undivided_where_peers_agree(scheme, groups, value, valid, count, unit_advantage)
    elif affine and reduced:
        unit_advantage = _rounded_affine(scheme, groups, value, mean, group_spread, count)
    elif affine:
        # Affine per group: A = (r - mean_g) * factor_g. A lone member's deviation is exactly 0,
        # so singleton=zero needs no patch; nan and raw set the lone members' factor.
        factor = (
            torch.ones_like(count)
            if scheme.scale == "none"
            else _std_factor(scheme, _std(scheme, group_spread, count, overwrite=True))
        )
        if has_singletons:
            lone = float(_singleton_values(scheme.with_options(dtype="float64"), torch.ones(1, dtype=F64)))
            factor = factor.masked_fill_(singleton, lone)  # 0, NaN, or raw's 1 / (1 + eps)
        unit_advantage = groups.scale_(deviation, factor)
        has_singletons = False
    else:
        member_count = groups.spread(count)
        if scheme.baseline == "leave-one-out":
            others = member_count - 1
            centred = deviation * member_count / others.clamp(min=1)
            # Removing one member from (n, mean, M2) leaves M2 - d^2 * n / (n - 1). The
            # subtraction leaves rounding residue (~1e-16 * M2) where the others are all
            # equal; that residue is a zero std, not a tiny one to divide by.
            member_spread = groups.spread(group_spread)
            if scheme.std_of == "members":
                spread = member_spread - deviation * centred
                spread = torch.where(spread > 1e-12 * member_spread, spread, 0.0)
                spread_count = others
            else:  # the whole group's rewards (ms-swift's rloo), or its centred values: n/(n-1) times theirs
                spread, spread_count = member_spread, member_count
                if scheme.std_of == "centred":
                    spread = member_spread * (member_count / others.clamp(min=1)) ** 2
        else:
            centred, spread, spread_count = deviation, groups.spread(group_spread), member_count
        if scheme.scale == "none":
            unit_advantage = centred
        else:
            if scheme.std_over == "batch":
                if units is not None:
                    raise SchemeError(f"{scheme.name or 'scheme'}: std_over=batch works on samples, not trajectories")
                steps = step_segments(enc)
                step_count = steps.sizes if weight is None else steps.sum(weight)
                # The std of the step's rewards, or of its centred values (ms-swift's reinforce_plus_plus).
                spread_of = centred if scheme.std_of == "centred" else value
                if weight is not None:
                    spread_of = spread_of * weight
                step_deviation = spread_of - steps.spread(steps.sum(spread_of) / step_count.clamp(min=1))
                if weight is not None:
                    step_deviation = step_deviation * weight
                spread = steps.spread(steps.sum(step_deviation * step_deviation))
                spread_count = steps.spread(step_count)
            unit_advantage = centred * _std_factor(scheme, _std(scheme, spread, spread_count))
        unit_advantage = _rounded(unit_advantage, scheme)

    if has_singletons:
        unit_advantage = torch.where(groups.spread(singleton), _singleton_values(scheme, value), unit_advantage)
    # Without units, the advantage is this call's own tensor (never the input): patched in place below.
    result = unit_advantage if unit_of_row is None else unit_advantage.index_select(0, unit_of_row)
    if result is enc.reward:
        result = result.clone()
    ungrouped = ungrouped_rows(enc, scheme)
    if ungrouped is not None:
        # No group (AReaL's stride remainder): mean 0 and std 0, so the reward scaled as a std of 0 scales it.
        alone = _rounded(enc.reward, scheme) * _std_factor(scheme, torch.zeros(1, dtype=F64, device=enc.device))
        result = torch.where(ungrouped, enc.reward if scheme.scale == "none" else alone, result)
    if scheme.whiten != "none":
        result = _whiten_tokens(enc, scheme, result)
    if not enc.all_finite:
        result.masked_fill_(~enc.finite, torch.nan if scheme.nonfinite == "nan" else 0.0)
    if scheme.drop == "constant":
        result.masked_fill_(dropped_rows(enc, scheme), torch.nan)
    return result


def dropped_rows(enc: Encoded, scheme: Scheme) -> torch.Tensor:
    """The rows of the groups ``drop=constant`` leaves untrained: every finite reward of the group one value (a
    one-member group included), except that a step whose groups are all constant keeps its first group in batch
    order (tinker-cookbook's remove_constant_reward_groups keeps one so that the batch is not empty)."""
    enc = enc.with_reward(scheme.reward)
    grouping = grouping_of(enc, scheme)
    low, high = finite_extremes(enc, grouping.codes, grouping.count)
    dropped = (low == high).index_select(0, grouping.codes)
    varied = ~dropped
    ungrouped = ungrouped_rows(enc, scheme)
    if ungrouped is not None:  # rows in no group (AReaL's stride remainder) are neither dropped nor a group
        dropped &= ~ungrouped
        varied &= ~ungrouped
    varied_rows = torch.bincount(enc.step, weights=varied.to(F64), minlength=enc.steps)
    all_constant = varied_rows == 0
    if bool(all_constant.any()):
        step_start = torch.cumsum(enc.step_sizes, 0) - enc.step_sizes
        first_group = grouping.codes.index_select(0, enc.row_at(step_start.clamp(max=max(enc.rows - 1, 0))))
        kept = all_constant.index_select(0, enc.step) & (grouping.codes == first_group.index_select(0, enc.step))
        dropped &= ~kept
    return dropped


def scheme_notes(enc: Encoded, scheme: Scheme) -> list[str]:
    """What a scheme did that a reader would not guess from its numbers: rows it left without a group (AReaL's
    stride remainder) and one-member groups it leaves undefined (rllm drops them; slime's legacy path gives NaN)."""
    label = str(scheme)
    notes = []
    ungrouped = ungrouped_rows(enc, scheme)
    if ungrouped is not None:
        rows = int(ungrouped.sum())
        eps = f"{scheme.eps:g}"
        how = (
            "keep their reward"
            if scheme.scale == "none"
            else f"get r / {eps} (a reward of 1 becomes {1 / scheme.eps:g})"
        )
        notes.append(
            f"{label}: {rows} sample{'s' if rows != 1 else ''} after the last full slice of {scheme.n} have no group: "
            f"mean 0 and std 0, so they {how}, as in AReaL (issue #1673)"
        )
    if scheme.drop == "constant":
        rows = int(dropped_rows(enc, scheme).sum())
        if rows:
            notes.append(
                f"{label}: {rows} sample{'s' if rows != 1 else ''} of groups whose rewards are all equal left "
                "untrained (undefined), as remove_constant_reward_groups drops them"
            )
    if scheme.singleton == "nan":
        grouping = grouping_of(enc.with_reward(scheme.reward), scheme)
        groups, count = grouping.codes, grouping.count
        units = grouping.units if scheme.members == "trajectories" else None
        members = torch.bincount(groups if units is None else units.group, minlength=count + 1)[:count]
        lone = members == 1
        if bool(lone.any()):
            rows = int(lone.index_select(0, groups).sum())
            kind = "trajectory" if units is not None else "member"
            # The preset says why it leaves them undefined (rllm drops them, slime's legacy path gives NaN).
            why = (scheme.notes.undefined if scheme.notes is not None else None) or "singleton=nan"
            notes.append(
                f"{label}: {int(lone.sum())} group{'s' if int(lone.sum()) != 1 else ''} of one {kind} ({rows} "
                f"sample{'s' if rows != 1 else ''}) left undefined: {why}"
            )
    return notes


def start_advantages(work: SideBySide, enc: Encoded, schemes: Mapping[str, Scheme]) -> None:
    """Start ``advantages`` of every scheme on ``work``, each named by its name in ``schemes``.

    What schemes share (each reward's finiteness, the steps, group codes) is made here first, in this thread,
    so that no two threads make it twice. Schemes over whole steps need no group codes: they start first,
    while this thread codes the others' groups; then trajectory schemes, which cost the most.
    """
    step_segments(enc)
    for scheme in schemes.values():
        enc.with_reward(scheme.reward).all_finite  # noqa: B018
    steps_first = [name for name, scheme in schemes.items() if by_steps(scheme)]
    for name in steps_first:
        work.start(name, partial(advantages, enc, schemes[name]))
    for name, scheme in schemes.items():
        if name not in steps_first:
            try:
                grouping_of(enc, scheme)
            except SchemeError:
                break  # raised again by this scheme's own advantages, when its result is asked for
    rest = [name for name in schemes if name not in steps_first]
    for name in sorted(rest, key=lambda name: schemes[name].members != "trajectories"):
        work.start(name, partial(advantages, enc, schemes[name]))


def advantages_of(enc: Encoded, schemes: Mapping[str, Scheme]) -> dict[str, torch.Tensor]:
    """``advantages`` of every scheme, by name, in the order given.

    On the CPU, schemes run side by side in threads (:class:`~.threads.SideBySide`). Results are collected in
    the order given, so the first failing scheme raises its error, as it would one scheme after another.
    """
    with SideBySide(enc.device, len(schemes)) as work:
        start_advantages(work, enc, schemes)
        return work.results(schemes)
