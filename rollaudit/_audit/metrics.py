"""Audit metrics of a scheme S against a reference R (``shared/spec/schemes.md``).

Every metric is a segment reduction, so one pass gives it per step and for
the whole run alike. Samples where S or R is undefined (NaN) are left out of
the comparison and counted in ``undefined``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .encode import F64, Encoded, densify
from .groups import group_codes, trajectory_units
from .metric_names import METRICS
from .schemes import Scheme


def sign(values: torch.Tensor, tol: float) -> torch.Tensor:
    """-1, 0 or +1 with a zero band: ``|x| <= tol`` is 0 (NaN is 0)."""
    return (values > tol).to(torch.int8) - (values < -tol).to(torch.int8)


def _sum(values: torch.Tensor, segments: torch.Tensor, count: int) -> torch.Tensor:
    return torch.zeros(count, dtype=F64, device=values.device).scatter_add_(0, segments, values.to(F64))


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, NaN (undefined) where the denominator is 0."""
    return torch.where(
        denominator > 0, numerator / denominator.clamp(min=1e-300), torch.full_like(numerator, torch.nan)
    )


@dataclass(frozen=True)
class Segments:
    """Rows coded 0..count-1 (steps): ``lengths`` when each code is one contiguous run in order (a loaded table
    is sorted by step), so that a segment sum is a reduction over slices rather than a scatter."""

    codes: torch.Tensor
    count: int
    lengths: torch.Tensor | None

    @classmethod
    def of(cls, codes: torch.Tensor, count: int) -> Segments:
        ordered = codes.numel() == 0 or bool((codes[1:] >= codes[:-1]).all())
        return cls(codes, count, torch.bincount(codes, minlength=count) if ordered else None)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        if self.lengths is None:
            return _sum(values, self.codes, self.count)
        return torch.segment_reduce(values.to(F64), "sum", lengths=self.lengths)


# Sign pair codes: 3 * (sign of the scheme + 1) + (sign of the reference + 1), 9 for a sample left out (undefined).
_CODES = 10
_PAIRS = [(scheme, reference) for scheme in (-1, 0, 1) for reference in (-1, 0, 1)]


def _codes_where(condition: Callable[[int, int], bool]) -> list[int]:
    return [code for code, (scheme, reference) in enumerate(_PAIRS) if condition(scheme, reference)]


_FLIPPED = _codes_where(lambda scheme, reference: scheme != reference)
_STRICT = _codes_where(lambda scheme, reference: scheme * reference == -1)
_NONZERO = _codes_where(lambda scheme, reference: scheme != 0)
_NONZERO_REFERENCE = _codes_where(lambda scheme, reference: reference != 0)
_SPURIOUS = _codes_where(lambda scheme, reference: scheme != 0 and reference == 0)
_LOST = _codes_where(lambda scheme, reference: reference != 0 and scheme == 0)


@dataclass(frozen=True)
class Sums:
    """What every metric is made of, per segment: sample counts by sign pair, and sums of floats."""

    counts: torch.Tensor  # (segments, 10) samples per sign pair code
    floats: dict[str, torch.Tensor]  # per segment: abs_diff, cross, scheme_square, reference_square, tokens...
    max_abs: torch.Tensor
    token_lengths: bool  # whether any response length is known

    def plus(self, other: Sums) -> Sums:
        """The sums of two pieces of rows."""
        return Sums(
            self.counts + other.counts,
            {name: values + other.floats[name] for name, values in self.floats.items()},
            torch.maximum(self.max_abs, other.max_abs),
            self.token_lengths,
        )

    def whole(self) -> Sums:
        """The same sums for all segments as one (the whole run)."""
        return Sums(
            self.counts.sum(0, keepdim=True),
            {name: values.sum(0, keepdim=True) for name, values in self.floats.items()},
            self.max_abs.amax(0, keepdim=True) if self.max_abs.numel() else torch.zeros(1, dtype=F64),
            self.token_lengths,
        )


# Rows per piece of the metric pass on the CPU: its temporaries (8 MB each) come back from the allocator piece after
# piece, where whole-table ones (40 MB at 5M rows, past glibc's mmap threshold) would be fresh pages every time.
_METRIC_PIECE = 1 << 20


def segment_sums(
    scheme: torch.Tensor,
    reference: torch.Tensor,
    segments: Segments,
    response_length: torch.Tensor | None,
    tol: float,
    reference_sign: torch.Tensor,
) -> Sums:
    """The sums of ``scheme`` against ``reference`` (whose signs are ``reference_sign``) per segment: one count of
    sign pairs, a few float sums; a piece of rows at a time, added up."""
    rows = scheme.numel()
    known = None if response_length is None else ~torch.isnan(response_length)
    token_lengths = known is not None and bool(known.any())
    step = max(min(_METRIC_PIECE, rows) if scheme.device.type == "cpu" else rows, 1)
    total: Sums | None = None
    for start in range(0, max(rows, 1), step):
        part = slice(start, min(start + step, rows))
        lengths = None
        if segments.lengths is not None:
            lengths = torch.bincount(segments.codes[part], minlength=segments.count)
        piece = _piece_sums(
            scheme[part],
            reference[part],
            Segments(segments.codes[part], segments.count, lengths),
            None if not token_lengths else response_length[part],
            tol,
            reference_sign[part],
        )
        total = piece if total is None else total.plus(piece)
    assert total is not None
    return total


def _piece_sums(
    scheme: torch.Tensor,
    reference: torch.Tensor,
    segments: Segments,
    response_length: torch.Tensor | None,
    tol: float,
    reference_sign: torch.Tensor,
) -> Sums:
    defined = ~(torch.isnan(scheme) | torch.isnan(reference))
    s = torch.where(defined, scheme, 0.0)
    r = torch.where(defined, reference, 0.0)
    sign_r = torch.where(defined, reference_sign, 0).to(torch.int8)
    pair = (sign(s, tol) * 3 + sign_r + 4).to(torch.int64)
    pair = torch.where(defined, pair, _CODES - 1)
    counts = torch.bincount(segments.codes * _CODES + pair, minlength=segments.count * _CODES)
    counts = counts.view(segments.count, _CODES)
    abs_diff = (s - r).abs()
    max_abs = torch.zeros(segments.count, dtype=F64, device=s.device).scatter_reduce_(
        0, segments.codes, abs_diff, "amax"
    )
    floats = {"abs_diff": segments.sum(abs_diff)}
    if response_length is not None:
        known = ~torch.isnan(response_length)
        lengths = torch.where(known, response_length, 0.0)
        flipped = (pair != _CODES - 1) & (torch.div(pair, 3, rounding_mode="floor") != pair % 3)
        floats["token_flips"] = segments.sum(lengths * flipped)
        floats["token_compared"] = segments.sum(lengths * (defined & known))
        weight = torch.where(known, response_length, 1.0) * defined
    else:
        weight = defined.to(F64)
    weighted_s = weight * s
    floats["cross"] = segments.sum(weighted_s * r)
    floats["scheme_square"] = segments.sum(weighted_s * s)
    floats["reference_square"] = segments.sum(weight * r * r)
    return Sums(counts, floats, max_abs, response_length is not None)


def metrics_of(sums: Sums) -> dict[str, np.ndarray]:
    """Every metric, one value per segment (NaN = undefined), from the sums."""
    counts = sums.counts.to(F64)

    def codes(chosen: list[int]) -> torch.Tensor:
        return counts[:, chosen].sum(1)

    compared = counts[:, : _CODES - 1].sum(1)
    floats = sums.floats
    nonzero, nonzero_reference = codes(_NONZERO), codes(_NONZERO_REFERENCE)
    result = {
        "compared": compared,
        "undefined": counts[:, _CODES - 1],
        "sign_flip_rate": _ratio(codes(_FLIPPED), compared),
        "strict_flip_rate": _ratio(codes(_STRICT), compared),
        "nonzero": nonzero,
        "nonzero_reference": nonzero_reference,
        "spurious_nonzero": codes(_SPURIOUS),
        "lost_signal": codes(_LOST),
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

    def counts(*flags: torch.Tensor) -> torch.Tensor:
        """Per group, how many samples have each flag (an integer count of the flagged rows, not a float scatter)."""
        return torch.stack([torch.bincount(group[flag], minlength=count) for flag in flags])

    safe_reward = torch.where(enc.finite, enc.reward, torch.zeros_like(enc.reward))
    columns: dict[str, torch.Tensor] = {
        "samples": groups.samples,
        "trajectories": groups.trajectories,
        "mean_reward": _ratio(_sum(safe_reward, group, count), counts(enc.finite)[0].to(F64)),
    }
    reference_values = advantages[reference]
    reference_sign = sign(reference_values, tol)
    columns["no_signal"] = counts(reference_sign != 0)[0] == 0
    for name, values in advantages.items():
        defined = ~(torch.isnan(values) | torch.isnan(reference_values))
        safe = torch.where(defined, values, torch.zeros_like(values))
        scheme_sign = sign(safe, tol)
        flipped = (scheme_sign != reference_sign) & defined
        spurious = (scheme_sign != 0) & (reference_sign == 0) & defined
        defined_count, flip_count, spurious_count = counts(defined, flipped, spurious).to(F64)
        columns[f"mean_advantage:{name}"] = _ratio(_sum(safe, group, count), defined_count)
        if name == reference:
            continue
        # A prompt with no sample defined on both sides (no recorded value there) has no count: NaN, not 0.
        compared = defined_count > 0
        columns[f"flips:{name}"] = torch.where(compared, flip_count, torch.full_like(flip_count, math.nan))
        columns[f"spurious:{name}"] = torch.where(compared, spurious_count, torch.full_like(spurious_count, math.nan))
    return {name: values.cpu().numpy() for name, values in columns.items()}


def step_of_groups(enc: Encoded, groups: Groups) -> np.ndarray:
    """The step value of each group."""
    return enc.step_values[enc.step[groups.first_row].cpu().numpy()]


__all__ = [
    "METRICS", "Segments", "Sums", "densify", "histograms", "metrics_of", "per_prompt", "prompt_groups",
    "segment_sums", "sign",
]  # fmt: skip
