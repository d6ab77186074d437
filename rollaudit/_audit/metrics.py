"""Audit metrics of a scheme S against a reference R (``shared/spec/schemes.md``), per step, per run and per prompt.

Every metric is made of the counts and sums of one pass over the scheme's
advantages (:mod:`.tally`): per step, per run (their sums) and per prompt
group. Samples where S or R is undefined (NaN) are left out of the
comparison and counted in ``undefined``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .encode import F64, Encoded, gather
from .groups import first_ranks, group_codes, trajectory_units
from .metric_names import METRICS
from .schemes import Scheme
from .tally import FLIPPED, LOST, NONZERO, NONZERO_REFERENCE, SPURIOUS, STRICT, UNDEFINED, Sums, Tally


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, NaN (undefined) where the denominator is 0."""
    return torch.where(
        denominator > 0, numerator / denominator.clamp(min=1e-300), torch.full_like(numerator, torch.nan)
    )


@dataclass(frozen=True)
class Groups:
    """Prompt groups of a table and the trajectories inside them, for histograms and per-prompt rows.

    ``group`` holds the compact codes the ``prompt`` scheme groups by (gaps allowed); ``present`` the codes
    that have rows, in (step, key) order, and the other per-group fields are for those, in that order.
    """

    group: torch.Tensor  # per row: (step, prompt) group code
    count: int  # group codes, gaps included
    present: torch.Tensor  # the codes with rows, ascending
    first_row: torch.Tensor  # per present group: a row of it
    step: torch.Tensor  # per present group: its step code
    samples: torch.Tensor  # per present group: sample count
    trajectories: torch.Tensor  # per present group: distinct trajectories (a keyless sample is its own)
    trajectory_sizes: torch.Tensor  # per trajectory: sample count


def prompt_groups(enc: Encoded, n: int | None = None) -> Groups:
    """The (step, prompt) groups the ``prompt`` scheme uses (slices of n for keyless steps), with their
    trajectories: the scheme's own codes and units, never coded again."""
    group, count = group_codes(enc, Scheme(groups="prompt", n=n, name="per-prompt"))
    samples = torch.bincount(group, minlength=count)
    present = torch.nonzero(samples).flatten()
    if count > 2 * present.numel() + 1024:
        # Sparse codes (keys with wide gaps): made dense, so that per-group counts stay as small as the groups.
        code_of = torch.full((count,), -1, dtype=torch.int64, device=enc.device)
        code_of[present] = torch.arange(present.numel(), device=enc.device)
        group, count = gather(code_of, group), present.numel()
        samples, present = samples.index_select(0, present), torch.arange(count, device=enc.device)
    first_row = enc.row_at(first_ranks(enc, group, count).index_select(0, present))
    units = trajectory_units(enc, group, count)
    if units is None:
        trajectories, trajectory_sizes = samples, torch.ones(enc.rows, dtype=torch.int64, device=enc.device)
    else:
        # Unit codes may leave gaps: an empty unit sits in group ``count`` and has no rows.
        trajectories = torch.bincount(units.group, minlength=count + 1)[:count]
        unit_sizes = torch.bincount(units.of_row, minlength=units.count)
        trajectory_sizes = unit_sizes[unit_sizes > 0]
    return Groups(
        group=group,
        count=count,
        present=present,
        first_row=first_row,
        step=enc.step.index_select(0, first_row),
        samples=samples.index_select(0, present),
        trajectories=trajectories.index_select(0, present),
        trajectory_sizes=trajectory_sizes,
    )


def metrics_of(sums: Sums) -> dict[str, np.ndarray]:
    """Every metric, one value per segment (NaN = undefined), from the sums."""
    counts = sums.counts.to(F64)

    def codes(chosen: list[int]) -> torch.Tensor:
        return counts[:, chosen].sum(1)

    compared = counts[:, :UNDEFINED].sum(1)
    floats = sums.floats
    nonzero, nonzero_reference = codes(NONZERO), codes(NONZERO_REFERENCE)
    result = {
        "compared": compared,
        "undefined": counts[:, UNDEFINED],
        "sign_flip_rate": _ratio(codes(FLIPPED), compared),
        "strict_flip_rate": _ratio(codes(STRICT), compared),
        "nonzero": nonzero,
        "nonzero_reference": nonzero_reference,
        "spurious_nonzero": codes(SPURIOUS),
        "lost_signal": codes(LOST),
        "max_abs_diff": torch.where(compared > 0, sums.max_abs, torch.full_like(sums.max_abs, torch.nan)),
        "mean_abs_diff": _ratio(floats["abs_diff"], compared),
        "nonzero_inflation": _ratio(nonzero, nonzero_reference),
    }
    if sums.token_lengths:
        result["token_flip_rate"] = _ratio(floats["token_flips"], floats["token_compared"])
    else:
        result["token_flip_rate"] = torch.full_like(compared, torch.nan)
    norm = (floats["scheme_square"] * floats["reference_square"]).sqrt()
    result["advantage_cosine"] = _ratio(floats["cross"], norm).clamp(-1.0, 1.0)
    return {name: result[name].cpu().numpy() for name in METRICS}


def histogram(sizes: torch.Tensor) -> dict[int, int]:
    """{size: how many} in ascending size."""
    if sizes.numel() == 0:
        return {}
    counts = torch.bincount(sizes.cpu())
    values = torch.nonzero(counts).flatten()
    return {int(value): int(count) for value, count in zip(values.tolist(), counts[values].tolist(), strict=True)}


def histograms(groups: Groups) -> dict[str, dict[int, int]]:
    """The spec's three group-size histograms."""
    return {
        "samples_per_prompt": histogram(groups.samples),
        "trajectories_per_prompt": histogram(groups.trajectories),
        "samples_per_trajectory": histogram(groups.trajectory_sizes),
    }


def per_prompt(enc: Encoded, groups: Groups, tallies: dict[str, Tally], reference: str) -> dict[str, np.ndarray]:
    """One row per (step, prompt): size, trajectories, reward mean, and per scheme its mean advantage,
    sign flips and spurious advantages against the reference, from each scheme's tally."""
    present, count = groups.present, groups.count
    every = present.numel() == count

    def of_present(per_code: torch.Tensor) -> torch.Tensor:
        return per_code if every else per_code.index_select(-1, present)

    if enc.all_finite:
        reward_sum, finite_count = torch.bincount(groups.group, weights=enc.reward, minlength=count), None
    else:
        safe = torch.where(enc.finite, enc.reward, 0.0)
        reward_sum = torch.bincount(groups.group, weights=safe, minlength=count)
        finite_count = of_present(torch.bincount(groups.group[enc.finite], minlength=count))
    columns: dict[str, torch.Tensor] = {
        "samples": groups.samples,
        "trajectories": groups.trajectories,
        "mean_reward": _ratio(
            of_present(reward_sum), (groups.samples if finite_count is None else finite_count).to(F64)
        ),
    }
    *_, nonzero_reference = of_present(tallies[reference].group_categories)
    columns["no_signal"] = nonzero_reference == 0
    for name, scheme in tallies.items():
        compared, flipped, spurious, _ = of_present(scheme.group_categories)
        columns[f"mean_advantage:{name}"] = _ratio(of_present(scheme.group_advantage), compared)
        if name == reference:
            continue
        # A prompt with no sample defined on both sides (no recorded value there) has no count: NaN, not 0.
        nothing = compared == 0
        columns[f"flips:{name}"] = flipped.masked_fill(nothing, math.nan)
        columns[f"spurious:{name}"] = spurious.masked_fill(nothing, math.nan)
    return {name: values.cpu().numpy() for name, values in columns.items()}


def step_of_groups(enc: Encoded, groups: Groups) -> np.ndarray:
    """The step value of each present group."""
    return enc.step_values[groups.step.cpu().numpy()]


__all__ = ["METRICS", "Groups", "histograms", "metrics_of", "per_prompt", "prompt_groups", "step_of_groups"]
