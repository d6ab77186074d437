"""Audit metrics of a scheme S against a reference R (``shared/spec/schemes.md``).

Every metric is a segment reduction, so one pass gives it per step and for
the whole run alike. Samples where S or R is undefined (NaN) are left out of
the comparison and counted in ``undefined``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .encode import F64, Encoded, densify
from .groups import group_codes, trajectory_units
from .metric_names import METRICS
from .schemes import Scheme


def sign(values: torch.Tensor, tol: float) -> torch.Tensor:
    """-1, 0 or +1 with a zero band: ``|x| <= tol`` is 0."""
    return torch.where(values.abs() <= tol, torch.zeros_like(values), torch.sign(values)).to(torch.int8)


def _sum(values: torch.Tensor, segments: torch.Tensor, count: int) -> torch.Tensor:
    return torch.zeros(count, dtype=F64, device=values.device).scatter_add_(0, segments, values.to(F64))


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, NaN (undefined) where the denominator is 0."""
    return torch.where(
        denominator > 0, numerator / denominator.clamp(min=1e-300), torch.full_like(numerator, torch.nan)
    )


def compare(
    scheme: torch.Tensor,
    reference: torch.Tensor,
    segments: torch.Tensor,
    segment_count: int,
    response_length: torch.Tensor | None,
    tol: float = 1e-6,
) -> dict[str, np.ndarray]:
    """Every metric of ``scheme`` against ``reference``, one value per segment (NaN = undefined)."""
    defined = ~(torch.isnan(scheme) | torch.isnan(reference))
    weight = defined.to(F64)
    s = torch.where(defined, scheme, torch.zeros_like(scheme))
    r = torch.where(defined, reference, torch.zeros_like(reference))
    sign_s, sign_r = sign(s, tol), sign(r, tol)
    flipped = (sign_s != sign_r) & defined
    strict = (sign_s * sign_r == -1) & defined
    nonzero_s = (sign_s != 0) & defined
    nonzero_r = (sign_r != 0) & defined

    def total(values: torch.Tensor) -> torch.Tensor:
        return _sum(values, segments, segment_count)

    compared = total(weight)
    abs_diff = (s - r).abs()
    max_abs = torch.zeros(segment_count, dtype=F64, device=s.device).scatter_reduce_(0, segments, abs_diff, "amax")
    result = {
        "compared": compared,
        "undefined": total((~defined).to(F64)),
        "sign_flip_rate": _ratio(total(flipped), compared),
        "strict_flip_rate": _ratio(total(strict), compared),
        "nonzero": total(nonzero_s),
        "nonzero_reference": total(nonzero_r),
        "spurious_nonzero": total(nonzero_s & (sign_r == 0)),
        "lost_signal": total(nonzero_r & (sign_s == 0)),
        "max_abs_diff": torch.where(compared > 0, max_abs, torch.full_like(max_abs, torch.nan)),
        "mean_abs_diff": _ratio(total(abs_diff), compared),
    }
    result["nonzero_inflation"] = _ratio(result["nonzero"], result["nonzero_reference"])

    known = None if response_length is None else ~torch.isnan(response_length)
    if known is None or not bool(known.any()):
        result["token_flip_rate"] = torch.full((segment_count,), torch.nan, dtype=F64, device=s.device)
        length_weight = weight
    else:
        lengths = torch.where(known, response_length, torch.zeros_like(response_length))
        result["token_flip_rate"] = _ratio(total(lengths * flipped), total(lengths * (defined & known)))
        length_weight = torch.where(known, response_length, torch.ones_like(response_length)) * weight
    cross = total(length_weight * s * r)
    norm = (total(length_weight * s * s) * total(length_weight * r * r)).sqrt()
    result["advantage_cosine"] = _ratio(cross, norm).clamp(-1.0, 1.0)
    return {name: result[name].cpu().numpy() for name in METRICS}


@dataclass(frozen=True)
class Groups:
    """Prompt groups of a table and the trajectories inside them, for histograms and per-prompt rows."""

    group: torch.Tensor  # per row: (step, prompt) group code
    count: int
    first_row: torch.Tensor  # per group: its first row
    samples: torch.Tensor  # per group: sample count
    trajectories: torch.Tensor  # per group: distinct trajectories (a keyless sample is its own)
    trajectory_sizes: torch.Tensor  # per trajectory: sample count


def prompt_groups(enc: Encoded, n: int | None = None) -> Groups:
    """The (step, prompt) groups the ``prompt`` scheme uses (slices of n for keyless steps), densely coded."""
    compact, _ = group_codes(enc, Scheme(groups="prompt", n=n, name="per-prompt"))
    group, count = densify(compact)
    rows = torch.arange(enc.rows, device=enc.device)
    first_row = torch.full((count,), enc.rows, dtype=torch.int64, device=enc.device).scatter_reduce_(
        0, group, rows, "amin"
    )
    samples = torch.bincount(group, minlength=count)
    units = trajectory_units(enc, group, count)
    if units is None:
        return Groups(
            group, count, first_row, samples, samples, torch.ones(enc.rows, dtype=torch.int64, device=enc.device)
        )
    unit_codes, unit_count = densify(units.of_row)
    unit_group = torch.zeros(unit_count, dtype=torch.int64, device=enc.device).scatter_(0, unit_codes, group)
    return Groups(
        group=group,
        count=count,
        first_row=first_row,
        samples=samples,
        trajectories=torch.bincount(unit_group, minlength=count),
        trajectory_sizes=torch.bincount(unit_codes, minlength=unit_count),
    )


def histogram(sizes: torch.Tensor) -> dict[int, int]:
    """{size: how many} in ascending size."""
    if sizes.numel() == 0:
        return {}
    values, counts = torch.unique(sizes.cpu(), return_counts=True)
    return {int(value): int(count) for value, count in zip(values.tolist(), counts.tolist(), strict=True)}


def histograms(groups: Groups) -> dict[str, dict[int, int]]:
    """The spec's three group-size histograms."""
    return {
        "samples_per_prompt": histogram(groups.samples),
        "trajectories_per_prompt": histogram(groups.trajectories),
        "samples_per_trajectory": histogram(groups.trajectory_sizes),
    }


def per_prompt(
    enc: Encoded,
    groups: Groups,
    advantages: dict[str, torch.Tensor],
    reference: str,
    tol: float = 1e-6,
) -> dict[str, np.ndarray]:
    """One row per (step, prompt): size, trajectories, reward mean, and per scheme its mean advantage,
    sign flips and spurious advantages against the reference."""
    group, count = groups.group, groups.count
    finite = enc.finite.to(F64)
    safe_reward = torch.where(enc.finite, enc.reward, torch.zeros_like(enc.reward))
    columns: dict[str, torch.Tensor] = {
        "samples": groups.samples,
        "trajectories": groups.trajectories,
        "mean_reward": _ratio(_sum(safe_reward, group, count), _sum(finite, group, count)),
    }
    reference_values = advantages[reference]
    reference_sign = sign(torch.nan_to_num(reference_values), tol)
    reference_nonzero = _sum(reference_sign != 0, group, count)
    columns["no_signal"] = reference_nonzero == 0
    for name, values in advantages.items():
        defined = ~(torch.isnan(values) | torch.isnan(reference_values))
        safe = torch.where(defined, values, torch.zeros_like(values))
        scheme_sign = sign(safe, tol)
        columns[f"mean_advantage:{name}"] = _ratio(_sum(safe, group, count), _sum(defined, group, count))
        if name == reference:
            continue
        # A prompt with no sample defined on both sides (no recorded value there) has no count: NaN, not 0.
        compared = _sum(defined, group, count) > 0
        for column, changed in (
            (f"flips:{name}", scheme_sign != reference_sign),
            (f"spurious:{name}", (scheme_sign != 0) & (reference_sign == 0)),
        ):
            counts = _sum(changed & defined, group, count).to(F64)
            columns[column] = torch.where(compared, counts, torch.full_like(counts, math.nan))
    return {name: values.cpu().numpy() for name, values in columns.items()}


def step_of_groups(enc: Encoded, groups: Groups) -> np.ndarray:
    """The step value of each group."""
    return enc.step_values[enc.step[groups.first_row].cpu().numpy()]


__all__ = ["METRICS", "compare", "densify", "histograms", "per_prompt", "prompt_groups", "sign"]
