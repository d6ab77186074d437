"""The recompute kernel: every scheme, all groups of all steps at once, on torch.

``encode`` turns a canonical table into integer codes and a float64 reward
tensor once; ``advantages`` applies one :class:`~rollaudit.Scheme` with
segment reductions (scatter sums over dense group codes), so the cost is a
handful of vector passes whatever the number of groups. Sums are float64
whatever the input dtype: float32 scatter sums lose digits on large groups.

On the CPU, fresh memory is a cost of its own (first touches of new pages
can cost as much as the arithmetic on them), so two-step passes run piece by
piece through a small buffer, and ``advantages_of`` runs several schemes in
threads, since torch's scatter and gather kernels use one core each.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import torch

from .._errors import SchemeError
from .encode import F64, Encoded
from .groups import NO_RANK, Segments, Units, first_ranks, group_codes, segments_of, step_segments, trajectory_units
from .schemes import Scheme


def _representatives(enc: Encoded, scheme: Scheme, units: Units) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(value, valid) per unit: the representative reward over the unit's finite samples; valid is
    None when every unit has one (every reward finite), else False for a unit without a finite sample."""
    count = units.count
    if enc.all_finite:
        if scheme.representative == "first":
            return enc.reward.index_select(0, units.first_row), None
        if scheme.representative == "mean":
            return torch.bincount(units.of_row, weights=enc.reward, minlength=count).div_(
                torch.bincount(units.of_row, minlength=count).clamp_(min=1)
            ), None
        value = torch.full((count,), -torch.inf, dtype=F64, device=enc.device)
        return value.scatter_reduce_(0, units.of_row, enc.reward, "amax"), None
    finite = enc.finite
    if scheme.representative == "first":
        # First finite member in batch order: the smallest batch rank among the unit's finite rows.
        first = first_ranks(enc, units.of_row, count, torch.where(finite, enc.batch_rank, NO_RANK))
        invalid = first == NO_RANK
        value = enc.reward.index_select(0, enc.row_at(first.masked_fill_(invalid, 0)))
        return value.masked_fill_(invalid, 0.0), ~invalid
    finite_count = torch.bincount(units.of_row[finite], minlength=count)
    valid = finite_count > 0
    if scheme.representative == "mean":
        safe_reward = torch.where(finite, enc.reward, 0.0)
        value = torch.bincount(units.of_row, weights=safe_reward, minlength=count) / finite_count.clamp(min=1)
    else:
        value = torch.full((count,), -torch.inf, dtype=F64, device=enc.device)
        value.scatter_reduce_(0, units.of_row, torch.where(finite, enc.reward, -torch.inf), "amax")
    return torch.where(valid, value, 0.0), valid


def _singleton_values(scheme: Scheme, value: torch.Tensor) -> torch.Tensor:
    """Advantage of a group's only member: 0, NaN, or the raw reward under mean 0 and std 1."""
    if scheme.singleton == "zero":
        return torch.zeros_like(value)
    if scheme.singleton == "nan":
        return torch.full_like(value, torch.nan)
    if scheme.scale == "std" and scheme.std_guard == "eps":
        return value / (1 + scheme.eps)
    return value


def _std_factor(scheme: Scheme, spread: torch.Tensor, count: torch.Tensor, overwrite: bool = False) -> torch.Tensor:
    """1 / std (guarded) from sums of squared deviations and member counts (``overwrite``: reuse ``spread``).

    An undefined std (fewer members than the estimator needs) counts as 0;
    the caller patches one-member groups.
    """
    divisor = (count - 1).clamp_(min=1) if scheme.std == "unbiased" else count.clamp(min=1)
    std = (spread.div_(divisor) if overwrite else spread / divisor).sqrt_()
    if scheme.std_guard == "positive":
        return torch.where(std > 0, std.reciprocal(), 1.0)
    factor = std.add_(scheme.eps).reciprocal_()
    # eps = 0 and std = 0: every deviation is 0, and so is the advantage (never 0 / 0).
    return factor.masked_fill_(torch.isinf(factor), 0.0) if scheme.eps == 0 else factor


def advantages(enc: Encoded, scheme: Scheme) -> torch.Tensor:
    """Advantage of every row under ``scheme``, float64, in row order.

    NaN marks an undefined advantage (a sample whose reward is not finite, or
    a one-member group under ``singleton="nan"``); nothing else is NaN.
    """
    group_of_row, group_count = group_codes(enc, scheme)
    units = trajectory_units(enc, group_of_row, group_count) if scheme.members == "trajectories" else None
    if units is None:
        # The members are the samples themselves.
        unit_of_row = None
        valid = None if enc.all_finite else enc.finite
        value = enc.reward if valid is None else torch.where(valid, enc.reward, 0.0)
        groups = segments_of(enc, group_of_row, group_count)
    else:
        unit_of_row = units.of_row
        value, valid = _representatives(enc, scheme, units)
        groups = Segments(units.group, group_count + 1, units.count, enc.device)

    weight = None if valid is None else valid.to(F64)
    count = groups.sizes if weight is None else groups.sum(weight)
    singleton = count == 1
    has_singletons = bool(singleton.any())
    mean = groups.sum(value).div_(groups.sizes_at_least_one if weight is None else count.clamp(min=1))
    affine = scheme.baseline == "mean" and (scheme.scale == "none" or scheme.std_over == "group")
    if affine and has_singletons and scheme.singleton == "raw":
        mean = torch.where(singleton, 0.0, mean)  # raw: a lone member keeps r (mean 0, std 1)
    # Two passes (mean first, then squared deviations): exact where a one-pass sum cancels. Unit values
    # are this call's own tensor; affine schemes never read them again, so they are centred in place.
    deviation = groups.deviation(value, mean, in_place=units is not None and affine)
    if weight is not None:
        deviation.mul_(weight)
    group_spread = groups.sum_of_squares(deviation)

    if affine:
        # Affine per group: A = (r - mean_g) * factor_g. A lone member's deviation is exactly 0,
        # so singleton=zero needs no patch; nan and raw set the lone members' factor.
        factor = (
            torch.ones_like(count)
            if scheme.scale == "none"
            else _std_factor(scheme, group_spread, count, overwrite=True)
        )
        if has_singletons:
            lone = float(_singleton_values(scheme, torch.ones(1, dtype=F64)))  # 0, NaN, or raw's 1 / (1 + eps)
            factor = factor.masked_fill_(singleton, lone)
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
            spread = member_spread - deviation * centred
            spread = torch.where(spread > 1e-12 * member_spread, spread, 0.0)
            spread_count = others
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
                step_deviation = value - steps.spread(steps.sum(value) / step_count.clamp(min=1))
                if weight is not None:
                    step_deviation = step_deviation * weight
                spread = steps.spread(steps.sum(step_deviation * step_deviation))
                spread_count = steps.spread(step_count)
            unit_advantage = centred * _std_factor(scheme, spread, spread_count)

    if has_singletons:
        unit_advantage = torch.where(groups.spread(singleton), _singleton_values(scheme, value), unit_advantage)
    # Without units, the advantage is this call's own tensor (never the input): patched in place below.
    result = unit_advantage if unit_of_row is None else unit_advantage.index_select(0, unit_of_row)
    if not enc.all_finite:
        result.masked_fill_(~enc.finite, torch.nan if scheme.nonfinite == "nan" else 0.0)
    return result


def advantages_of(enc: Encoded, schemes: Mapping[str, Scheme]) -> dict[str, torch.Tensor]:
    """``advantages`` of every scheme, by name, in the order given.

    On the CPU, schemes run side by side in threads: torch's scatter and
    gather kernels use one core each, so a second scheme fills an idle core.
    Results are collected in the order given, so the first failing scheme
    raises its error, as it would one scheme after another.
    """
    workers = min(len(schemes), torch.get_num_threads())
    if enc.device.type != "cpu" or workers < 2:
        return {name: advantages(enc, scheme) for name, scheme in schemes.items()}
    # Shared inputs first, in this thread: schemes with the same groups share their codes.
    enc.all_finite  # noqa: B018
    for scheme in schemes.values():
        try:
            group_codes(enc, scheme)
        except SchemeError:
            break  # raised again by this scheme's own advantages, in its turn below

    # Trajectory schemes cost the most: start them first.
    longest_first = sorted(schemes, key=lambda name: schemes[name].members != "trajectories")
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollaudit") as pool:
        futures = {name: pool.submit(advantages, enc, schemes[name]) for name in longest_first}
        return {name: futures[name].result() for name in schemes}
