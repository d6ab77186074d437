"""Audit metrics of a scheme S against a reference R (``shared/spec/schemes.md``), per step, per run and per prompt.

Every metric is made of the counts and sums of one pass over the scheme's
advantages (:mod:`.tally`): per step, per run (their sums) and per prompt
group. Samples where S or R is undefined (NaN) are left out of the
comparison and counted in ``undefined``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pyarrow as pa
import torch

from .._table import PROMPT
from .columns import Masked
from .engine.encode import F64, Encoded
from .engine.groups import Grouping, grouping_of
from .engine.sizing import counted_in_bins, pieces
from .engine.tally import Sums, Tally, named_counts
from .metric_names import METRICS
from .schemes import Scheme


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator of a non-negative denominator, NaN (undefined) where it is 0."""
    return torch.div(numerator, denominator).masked_fill_(denominator <= 0, math.nan)


@dataclass(frozen=True)
class Groups:
    """Prompt groups of a table and the trajectories inside them, for histograms and per-prompt rows.

    ``grouping`` holds the compact codes the ``prompt`` scheme groups by (gaps allowed); ``present`` the codes
    that have rows (None where every code has), in (step, key) order, and the other per-group fields are for those,
    in that order.
    """

    grouping: Grouping  # per row: its (step, prompt) group code; the code count, gaps included
    present: torch.Tensor | None  # the codes with rows, ascending; None where every code has rows
    row: torch.Tensor  # per present group: one of its rows (every row of a group has its step and prompt key)
    step: torch.Tensor  # per present group: its step code
    samples: torch.Tensor  # per present group: sample count
    largest: int  # the most samples of a group
    trajectories: torch.Tensor | None = None  # per present group: distinct trajectories (a keyless sample is one)
    trajectory_size_counts: torch.Tensor | None = None  # per sample count: trajectories of that size (0 unused)

    @property
    def group(self) -> torch.Tensor:
        """Each row's group code."""
        return self.grouping.codes

    @property
    def count(self) -> int:
        """How many group codes there are, gaps included."""
        return self.grouping.count


def group_rows(enc: Encoded, n: int | None = None) -> Groups:
    """The (step, prompt) groups the ``prompt`` scheme uses (slices of n for keyless steps), its own codes never
    coded again, without their trajectories (see :func:`with_trajectories`): what this reads, the schemes'
    threads only read too, so it can be made while they run."""
    grouping = grouping_of(enc, Scheme(groups="prompt", n=n, name="per-prompt"))
    group, count = grouping.codes, grouping.count
    # The sizes the kernel counted for the prompt scheme (shared segments): no second count over the rows.
    samples = grouping.segments.sizes.to(torch.int64)
    present = None if bool((samples > 0).all()) else torch.nonzero(samples).flatten()
    if present is not None and count > 2 * present.numel() + 1024:
        # Sparse codes (keys with wide gaps): made dense, so that per-group counts stay as small as the groups.
        code_of = torch.full((count,), -1, dtype=torch.int64, device=enc.device)
        code_of[present] = torch.arange(present.numel(), device=enc.device)
        group, count = code_of.index_select(0, group), present.numel()
        grouping = Grouping(enc, group, count)
        samples, present = samples.index_select(0, present), None
    # Any row of a group will do: each row writes its number to its group's slot (a plain scatter, half the
    # cost of finding the first).
    row = torch.empty(count, dtype=torch.int64, device=enc.device)
    for rows, numbers in pieces(enc.rows, torch.int64, enc.device):
        row.scatter_(0, group[rows], torch.arange(rows.start, rows.stop, out=numbers))
    row = row if present is None else row.index_select(0, present)
    return Groups(
        grouping=grouping,
        present=present,
        row=row,
        step=enc.step_of(row),
        samples=samples if present is None else samples.index_select(0, present),
        largest=int(samples.max()) if count else 0,
    )


def with_trajectories(enc: Encoded, groups: Groups) -> Groups:
    """``groups`` with their trajectories counted: the trajectory units of their codes (a trajectory scheme's
    own, where one made them)."""
    units = groups.grouping.units
    if units is None:  # every sample a trajectory of its own
        trajectories = groups.samples
        size_counts = torch.tensor([0, enc.rows], dtype=torch.int64, device=enc.device)
    else:
        # Unit codes may leave gaps: an empty unit sits in group ``count`` and has no rows (size 0).
        trajectories = _of_present(groups, units.segments.sizes[: groups.count].to(torch.int64))
        size_counts = torch.bincount(units.sizes)
    return replace(groups, trajectories=trajectories, trajectory_size_counts=size_counts)


def metrics_of(sums: Sums) -> dict[str, np.ndarray]:
    """Every metric, one value per segment (NaN = undefined), from the sums."""
    counts = named_counts(sums.counts)
    compared, nonzero, nonzero_reference = counts["compared"], counts["nonzero"], counts["nonzero_reference"]
    floats = sums.floats
    result = {
        "compared": compared,
        "undefined": sums.samples - compared,
        "sign_flip_rate": _ratio(counts["flipped"], compared),
        "strict_flip_rate": _ratio(counts["strict"], compared),
        "nonzero": nonzero,
        "nonzero_reference": nonzero_reference,
        "spurious_nonzero": counts["spurious"],
        "lost_signal": counts["lost"],
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


def histogram(counts: torch.Tensor) -> dict[int, int]:
    """{size: how many} in ascending size, from how many there are of each size (size 0 left out)."""
    counts = counts.cpu()
    values = torch.nonzero(counts[1:]).flatten() + 1
    return {int(value): int(count) for value, count in zip(values.tolist(), counts[values].tolist(), strict=True)}


def _trajectories(groups: Groups) -> torch.Tensor:
    assert groups.trajectories is not None, "with_trajectories first"
    return groups.trajectories


def histograms(groups: Groups) -> dict[str, dict[int, int]]:
    """The spec's three group-size histograms."""
    assert groups.trajectories is not None and groups.trajectory_size_counts is not None, "with_trajectories first"
    return {
        "samples_per_prompt": histogram(torch.bincount(groups.samples)),
        "trajectories_per_prompt": histogram(torch.bincount(groups.trajectories)),
        "samples_per_trajectory": histogram(groups.trajectory_size_counts),
    }


def group_columns(enc: Encoded, groups: Groups) -> dict[str, np.ndarray | list]:
    """The per-prompt columns of the groups themselves, one row per (step, prompt): step, prompt key, samples,
    trajectories, reward mean (over the finite rewards)."""
    segments = groups.grouping.segments
    if enc.all_finite:
        reward_sum, reward_count = segments.kept_sum(enc.reward), groups.samples.to(F64)
    else:
        reward_sum = segments.sum(torch.where(enc.finite, enc.reward, 0.0))
        reward_count = _of_present(groups, segments.sum(enc.finite))
    keys = enc.table.column(PROMPT).take(pa.array(groups.row.cpu().numpy()))
    # Keys as numpy where none is null (no Python object per prompt), a copy of Arrow's read-only view (the frame
    # stays writable); a keyless group's key is None.
    return {
        "step": enc.step_values[groups.step.cpu().numpy()],
        "prompt": np.array(keys.to_numpy()) if keys.null_count == 0 else keys.to_pylist(),
        "samples": groups.samples.cpu().numpy(),
        "trajectories": _trajectories(groups).cpu().numpy(),
        "mean_reward": _ratio(_of_present(groups, reward_sum), reward_count).cpu().numpy(),
    }


def _of_present(groups: Groups, per_code: torch.Tensor) -> torch.Tensor:
    """Values per group code, of the codes with rows only (the per-prompt rows)."""
    return per_code if groups.present is None else per_code.index_select(-1, groups.present)


def scheme_columns(groups: Groups, tallies: dict[str, Tally], reference: str) -> dict[str, np.ndarray | Masked]:
    """The per-prompt columns of the schemes, one row per (step, prompt): whether the reference gives it no
    signal, and per scheme its mean advantage, sign flips and spurious advantages against the reference
    (nullable integers), from each scheme's tally."""
    count = groups.count
    of_present = partial(_of_present, groups)
    # Counts only divided by or compared (the samples each scheme compared, the reference's non-zero ones) go
    # through two buffers of one group count, scheme after scheme: fresh memory costs more than the arithmetic.
    shifted = torch.empty(count, dtype=torch.int64, device=groups.group.device)
    compared_buffer = torch.empty(count, dtype=F64, device=groups.group.device)
    columns = {"no_signal": of_present(tallies[reference].group_count("nonzero_reference", shifted)) == 0}
    counts: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    order = list(columns)
    for name, scheme in tallies.items():
        compared = of_present(compared_buffer.copy_(scheme.group_count("compared", shifted)))
        columns[f"mean_advantage:{name}"] = _ratio(of_present(scheme.group_advantage), compared)
        order.append(f"mean_advantage:{name}")
        if name == reference:
            continue
        # A prompt with no sample defined on both sides (no recorded value there) has no count: NA, not 0.
        nothing = compared == 0
        counts[f"flips:{name}"] = of_present(scheme.group_count("flipped")), nothing
        counts[f"spurious:{name}"] = of_present(scheme.group_count("spurious")), nothing
        order += [f"flips:{name}", f"spurious:{name}"]
    result: dict[str, np.ndarray | Masked] = {name: values.cpu().numpy() for name, values in columns.items()}
    for name, (values, missing) in counts.items():
        result[name] = Masked(values.cpu().numpy(), missing.cpu().numpy())
    return {name: result[name] for name in order}


def step_group_sizes(enc: Encoded, groups: Groups) -> dict[str, np.ndarray]:
    """Per step that has prompt groups (``"step"``: its value): how many prompts, samples and trajectories, the
    smallest, median and largest group, and the std of the group sizes (ddof 0)."""
    step, sizes = groups.step, groups.samples
    if sizes.numel() == 0:
        return {}
    # How many groups of each (step, size), in (step, size) order: each step's sizes become a run of distinct
    # sizes, smallest first, so order statistics are found by counting, and sums over a step's groups are sums
    # over its few distinct sizes, each times its count (exact counts; a std from a handful of terms, not 50k).
    span = groups.largest + 1
    pairs, pair_count = _distinct_counts(step * span + sizes, enc.steps * span)
    pair_step, pair_size = pairs.div(span, rounding_mode="floor"), (pairs % span).to(F64)
    prompts = torch.bincount(pair_step, weights=pair_count.to(F64), minlength=enc.steps).to(torch.int64)
    # Where each step's groups end in (step, size) order, and which distinct size holds a group's place there.
    ends = torch.cumsum(prompts, 0)
    starts = (ends - prompts).clamp_(max=sizes.numel() - 1)  # a step without groups reads any; dropped below
    pair_ends = torch.cumsum(pair_count, 0)

    def at(places: torch.Tensor) -> torch.Tensor:
        return pairs.index_select(0, torch.searchsorted(pair_ends, places, right=True)) % span

    def per_step(values: torch.Tensor) -> torch.Tensor:
        return torch.bincount(pair_step, weights=values * pair_count, minlength=enc.steps)

    count = prompts.clamp(min=1)
    samples = per_step(pair_size)
    deviation = pair_size - (samples / count).index_select(0, pair_step)
    columns = {
        "step": torch.from_numpy(enc.step_values).to(sizes.device),
        "prompts": prompts,
        "samples": samples.to(torch.int64),
        "trajectories": torch.bincount(step, _trajectories(groups).to(F64), minlength=enc.steps).to(torch.int64),
        "smallest_group": at(starts),
        "median_group": (at(starts + (count - 1) // 2) + at(starts + count // 2)).to(F64) / 2,
        "largest_group": at((ends - 1).clamp_(min=0)),
        "group_size_std": (per_step(deviation.square_()) / count).sqrt_(),
    }
    has = prompts > 0
    return {name: values[has].cpu().numpy() for name, values in columns.items()}


def _distinct_counts(keys: torch.Tensor, span: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct values of non-negative int64 ``keys`` below ``span``, ascending, and how many of each: counted
    into ``span`` bins where they are few enough (one pass, no sort), else sorted."""
    if counted_in_bins(span, keys.numel()):
        counts = torch.bincount(keys, minlength=span)
        distinct = torch.nonzero(counts).flatten()
        return distinct, counts.index_select(0, distinct)
    return torch.unique_consecutive(torch.sort(keys).values, return_counts=True)


__all__ = [
    "METRICS", "Groups", "group_columns", "group_rows", "histograms", "metrics_of",
    "scheme_columns", "step_group_sizes", "with_trajectories",
]  # fmt: skip
