"""Which rows share a baseline: group codes of a scheme, trajectory units inside groups, and segment sums.

:func:`group_codes` gives each row the code of its group under a scheme's
``groups`` (the whole step, its prompt, a positional slice, slime's legacy
rule); :func:`trajectory_units` the (group, trajectory) unit of each row for
schemes whose members are trajectories; :class:`Segments` sums values per
group and spreads per-group values back to rows. Codes are cached on the
:class:`~.encode.Encoded` table, so schemes with the same groups share them.
"""

from __future__ import annotations

from functools import cached_property

import torch

from .._errors import SchemeError
from .._table import PROMPT
from .encode import F64, Encoded, compact_codes, fresh, gather, pieces
from .schemes import Scheme


def _pair_codes(major: torch.Tensor, minor: torch.Tensor, single_major: bool = False) -> tuple[torch.Tensor, int]:
    """Compact codes of (major, minor) pairs of non-negative codes, major-first order; ``single_major``: major
    is constant."""
    if minor.numel() == 0:
        return minor.clone(), 0
    if single_major:
        return compact_codes(minor)
    # One fused pass, into a tensor of this call's own (shifted in place).
    pairs = torch.add(minor, major, alpha=int(minor.max()) + 1, out=fresh(minor.numel(), torch.int64, minor.device))
    return compact_codes(pairs, owned=True)


def _step_pairs(enc: Encoded, minor: torch.Tensor) -> tuple[torch.Tensor, int]:
    return _pair_codes(enc.step if not enc.single_step else minor, minor, single_major=enc.single_step)


def _slice_groups(enc: Encoded, scheme: Scheme, label: str) -> tuple[torch.Tensor, int]:
    """Consecutive slices of n in batch order; a step n does not divide is an error, unless the rows after its
    last full slice are left unnormalized (``remainder``: they form a partial slice that ``ungrouped_rows``
    marks)."""
    n = scheme.require_n()
    bad = (enc.step_sizes % n) != 0
    if scheme.remainder == "error" and bool(bad.any()):
        step = int(torch.nonzero(bad)[0])
        raise SchemeError(
            f"{label}: step {enc.step_values[step]} has {int(enc.step_sizes[step])} samples, "
            f"not a multiple of n={n}: consecutive slices of n do not fit"
        )
    return _step_pairs(enc, enc.rank // n)


def ungrouped_rows(enc: Encoded, scheme: Scheme) -> torch.Tensor | None:
    """Rows after the last full slice of n of their step under ``remainder="unnormalized"`` (AReaL: mean 0,
    std 0), or None when there are none."""
    if scheme.groups != "positional" or scheme.remainder != "unnormalized":
        return None
    n = scheme.require_n()
    full = (enc.step_sizes // n) * n
    if bool((full == enc.step_sizes).all()):
        return None
    return enc.rank >= full.index_select(0, enc.step) if not enc.single_step else enc.rank >= full[0]


def _key_groups(enc: Encoded, scheme: Scheme, label: str) -> tuple[torch.Tensor, int]:
    """One group per (step, key of the ``group_by`` column); steps with missing keys follow ``missing_keys``."""
    column = scheme.group_by
    codes, count = enc.key_codes(column)
    keyed, first_missing = enc.key_present(column)
    if first_missing is None:
        # One step: the key codes are the group codes already.
        return (codes, count) if enc.single_step else _step_pairs(enc, codes)
    if scheme.missing_keys == "legacy":
        # slime PR #2062: a step where any key is missing falls back to the legacy rule; its slices (or its
        # whole-step group) are coded after every key code.
        complete = keyed == enc.step_sizes
        fallback = _legacy_minor(enc, scheme, label, column)
        return _step_pairs(enc, torch.where(complete[enc.step], codes, max(count, 0) + fallback))
    partial = (keyed > 0) & (keyed < enc.step_sizes)
    what = "prompt key" if column == PROMPT else f"{column!r} key"
    if bool(partial.any()):
        step = int(torch.nonzero(partial)[0])
        raise SchemeError(
            f"{label}: the sample at position {int(first_missing[step])} of step {enc.step_values[step]} "
            f"has no {what} while others do; a baseline cannot be guessed"
        )
    unkeyed = keyed == 0
    n = scheme.n
    sizes = enc.step_sizes
    if n is None or bool(((sizes % n != 0) & unkeyed).any()):
        raise SchemeError(
            f"{label}: {what}s are required when groups are not uniformly sized"
            + ("" if n is None else f" (a step without keys has a sample count that n={n} does not divide)")
        )
    # Rows of keyless steps get slice ids placed after every key code.
    slice_key = max(int(codes.max()), 0) + 1 + enc.rank // n
    return _step_pairs(enc, torch.where(unkeyed[enc.step], slice_key, codes))


def _legacy_minor(enc: Encoded, scheme: Scheme, label: str, column: str = PROMPT) -> torch.Tensor:
    """slime before PR #2204, per row: ``1 + rank // n`` where the step has n * B samples (slices of n), else 0
    (the whole step). B is ``batch_size``, else the step's number of distinct keys (every key present)."""
    n = scheme.require_n()
    if scheme.batch_size is not None:
        prompts_per_step = torch.full((enc.steps,), scheme.batch_size, device=enc.device)
    else:
        keyed, _ = enc.key_present(column)
        if bool((keyed < enc.step_sizes).any()):
            name = (scheme.name or "slime-legacy").split("(")[0]
            raise SchemeError(
                f"{label}: without prompt keys, give batch_size (rollout_batch_size), e.g. {name}(n={n}, batch_size=32)"
            )
        codes, _ = enc.key_codes(column)
        pairs, count = _step_pairs(enc, codes)
        present = torch.bincount(pairs, minlength=count) > 0
        pair_step = torch.zeros(count, dtype=torch.int64, device=enc.device).scatter_(0, pairs, enc.step)
        prompts_per_step = torch.bincount(pair_step[present], minlength=enc.steps)
    uniform = enc.step_sizes == n * prompts_per_step
    return torch.where(uniform[enc.step], 1 + enc.rank // n, torch.zeros_like(enc.rank))


def group_codes(enc: Encoded, scheme: Scheme) -> tuple[torch.Tensor, int]:
    """Compact group code per row (gaps allowed) and the code count, for a scheme's ``groups``."""
    label = scheme.name or "scheme"
    cache_key = (scheme.groups, scheme.group_by, scheme.missing_keys, scheme.remainder, scheme.n, scheme.batch_size)
    if cache_key not in enc._groups:
        if scheme.groups == "batch":
            result = enc.step, enc.steps
        elif scheme.groups == "prompt":
            result = _key_groups(enc, scheme, label)
        elif scheme.groups == "positional":
            result = _slice_groups(enc, scheme, label)
        else:
            result = _step_pairs(enc, _legacy_minor(enc, scheme, label))
        enc._groups[cache_key] = result
    return enc._groups[cache_key]


class Units:
    """Members of trajectory-level statistics: one unit per distinct (group, trajectory).

    Unit codes may leave gaps (a code without rows). Such an empty unit sits
    in one extra group, code ``group_count``, so that the real groups'
    statistics never see it and need no weights; nothing reads it back.
    """

    def __init__(self, enc: Encoded, of_row: torch.Tensor, count: int, groups: torch.Tensor, group_count: int):
        self.enc, self.of_row, self.count, self.group_count = enc, of_row, count, group_count
        # Every row writes its group to its unit; an empty code keeps the extra group. Which of a unit's
        # writes lands is unspecified, so units are only used where their rows share a group (pair codes,
        # or trajectory codes checked against the groups).
        self.group = fresh(count, torch.int64, enc.device).fill_(group_count).scatter_(0, of_row, groups)

    @cached_property
    def first_row(self) -> torch.Tensor:
        """Each unit's first row in batch order (any row for an empty code: never read)."""
        first = first_ranks(self.enc, self.of_row, self.count)
        return self.enc.row_at(first.clamp_(max=self.enc.rows - 1))

    @cached_property
    def last_row(self) -> torch.Tensor:
        """Each unit's last row in batch order (any row for an empty code: never read)."""
        last = last_ranks(self.enc, self.of_row, self.count)
        return self.enc.row_at(last.clamp_(min=0))


NO_RANK = torch.iinfo(torch.int64).max


def first_ranks(enc: Encoded, of_row: torch.Tensor, count: int, ranks: torch.Tensor | None = None) -> torch.Tensor:
    """The smallest of ``ranks`` (default: batch ranks) among each unit's rows; ``NO_RANK`` where none."""
    first = fresh(count, torch.int64, enc.device).fill_(NO_RANK)
    return first.scatter_reduce_(0, of_row, enc.batch_rank if ranks is None else ranks, "amin")


def last_ranks(enc: Encoded, of_row: torch.Tensor, count: int, ranks: torch.Tensor | None = None) -> torch.Tensor:
    """The largest of ``ranks`` (default: batch ranks) among each unit's rows; -1 where none."""
    last = fresh(count, torch.int64, enc.device).fill_(-1)
    return last.scatter_reduce_(0, of_row, enc.batch_rank if ranks is None else ranks, "amax")


def _all_equal_gathered(source: torch.Tensor, index: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether ``source[index] == expected`` everywhere, gathered piece by piece (no buffer per row)."""
    for rows, buffer in pieces(index.numel(), source.dtype, source.device):
        gathered = torch.index_select(source, 0, index[rows], out=buffer)
        if not torch.equal(gathered, expected[rows]):
            return False
    return True


def _nested_units(
    enc: Encoded, trajectory: torch.Tensor, count: int, groups: torch.Tensor, group_count: int
) -> Units | None:
    """Trajectory codes as units when each trajectory's rows all sit in one group, else None."""
    nested = Units(enc, trajectory, count, groups, group_count)
    return nested if _all_equal_gathered(nested.group, trajectory, groups) else None


def trajectory_units(enc: Encoded, groups: torch.Tensor, group_count: int) -> Units | None:
    """The (group, trajectory) units of a grouping; None when no row has a trajectory key (then
    every sample is a trajectory of its own and the samples are the units)."""
    # Cached with the groups tensor itself: while it is held, no other tensor can take its id.
    key = ("units", id(groups), group_count)
    if key in enc._groups and enc._groups[key][0] is groups:
        return enc._groups[key][1]
    units = None
    if enc.trajectory_count:
        trajectory, key_count = enc.trajectory, enc.trajectory_count
        if enc.every_trajectory_keyed:
            # Trajectory keys nested in groups (the usual case) are unit codes already: no pairing. Keys that
            # repeat from step to step (a dataset's epochs) are nested once paired with their step, which is a
            # cheap pair (steps times keys codes), where pairing with the groups would need a hash.
            # Keys few enough for every step to use them all again are tried as step pairs first.
            repeating = not enc.single_step and enc.steps * key_count <= 2 * enc.rows
            units = None if repeating else _nested_units(enc, trajectory, key_count, groups, group_count)
            if units is None and not enc.single_step:
                trajectory, key_count = _step_pairs(enc, trajectory)
                units = _nested_units(enc, trajectory, key_count, groups, group_count)
            trajectory_key = trajectory
        else:
            # A row without a trajectory key is a trajectory of its own.
            rows = torch.arange(enc.rows, device=enc.device)
            trajectory_key = torch.where(trajectory < 0, key_count + rows, trajectory)
        if units is None:
            units = Units(enc, *_pair_codes(groups, trajectory_key), groups, group_count)
    enc._groups[key] = (groups, units)
    return units


class Segments:
    """Sums per segment and their spread back to rows; a single segment uses plain reductions."""

    def __init__(self, codes: torch.Tensor | None, count: int, rows: int, device: torch.device) -> None:
        self.codes, self.count, self.rows, self.device = codes, count, rows, device

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Float64 sum of ``values`` per segment."""
        if self.codes is None:
            return values.sum(dtype=F64).reshape(1)
        return torch.zeros(self.count, dtype=F64, device=values.device).scatter_add_(0, self.codes, values.to(F64))

    @cached_property
    def sizes(self) -> torch.Tensor:
        if self.codes is None:
            return torch.tensor([float(self.rows)], dtype=F64, device=self.device)
        return torch.bincount(self.codes, minlength=self.count).to(F64)

    @cached_property
    def sizes_at_least_one(self) -> torch.Tensor:
        return self.sizes.clamp(min=1)

    def deviation(self, values: torch.Tensor, per_segment: torch.Tensor, in_place: bool = False) -> torch.Tensor:
        """``values`` minus each row's segment value, in one new tensor or (``in_place``) in ``values``."""
        if self.codes is None:
            return values.sub_(per_segment) if in_place else values - per_segment
        if not in_place:
            return self.spread(per_segment).neg_().add_(values)
        return self._piecewise(values, per_segment, torch.Tensor.sub_)

    def sum_of_squares(self, values: torch.Tensor) -> torch.Tensor:
        """Float64 sum of squared float64 ``values`` per segment, squared piece by piece.

        Not ``torch.dot``: BLAS may split the sum differently from call to call.
        """
        total = torch.zeros(self.count, dtype=F64, device=values.device)
        for rows, buffer in pieces(values.numel(), F64, values.device):
            piece = values[rows]
            squares = torch.mul(piece, piece, out=buffer)
            if self.codes is None:
                total += squares.sum()
            else:
                total.scatter_add_(0, self.codes[rows], squares)
        return total

    def scale_(self, values: torch.Tensor, per_segment: torch.Tensor) -> torch.Tensor:
        """Multiply ``values`` in place by each row's segment value."""
        if self.codes is None:
            return values.mul_(per_segment)
        return self._piecewise(values, per_segment, torch.Tensor.mul_)

    def _piecewise(self, values: torch.Tensor, per_segment: torch.Tensor, operation) -> torch.Tensor:
        """``operation(values, each row's segment value)`` in place, gathering piece by piece."""
        for rows, buffer in pieces(values.numel(), per_segment.dtype, values.device):
            operation(values[rows], torch.index_select(per_segment, 0, self.codes[rows], out=buffer))
        return values

    def spread(self, per_segment: torch.Tensor) -> torch.Tensor:
        """Each row's segment value."""
        if self.codes is None:
            return per_segment.expand(self.rows)
        return gather(per_segment, self.codes)


def segments_of(enc: Encoded, codes: torch.Tensor, count: int) -> Segments:
    """Row segments of a grouping, cached with it so that schemes sharing groups share their sizes."""
    key = ("segments", codes.data_ptr(), count)
    if key not in enc._groups:
        enc._groups[key] = Segments(None if count == 1 and enc.single_step else codes, count, codes.numel(), enc.device)
    return enc._groups[key]


def step_segments(enc: Encoded) -> Segments:
    return Segments(None if enc.single_step else enc.step, enc.steps, enc.rows, enc.device)
