"""Which rows share a baseline: group codes of a scheme, trajectory units inside groups, and segment sums.

:func:`grouping_of` gives the :class:`Grouping` of a scheme's ``groups`` (the
whole step, its prompt, a positional slice, slime's legacy rule): each row's
group code, the groups as :class:`Segments` (sums per group, per-group values
spread back to rows) and, for schemes whose members are trajectories, the
(group, trajectory) :class:`Units`. Groupings are made once per table and rule
(:class:`GroupCache`), so schemes with the same groups share them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import torch

from ..._errors import SchemeError
from ..._table import PROMPT
from ..schemes import Scheme, key_column
from .encode import F64, Encoded, compact_codes, int64_values, sorted_codes
from .sizing import counted_in_bins, piece_size, pieces


def _pair_codes(major: torch.Tensor, minor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Compact codes of (major, minor) pairs of non-negative codes, major-first order."""
    if minor.numel() == 0:
        return minor.clone(), 0
    # One fused pass, into a tensor of this call's own (shifted in place).
    pairs = torch.add(minor, major, alpha=int(minor.max()) + 1)
    return compact_codes(pairs, owned=True)


def _step_pairs(enc: Encoded, minor: torch.Tensor, span: int | None = None) -> tuple[torch.Tensor, int]:
    """Compact codes of (step, minor) pairs of non-negative minor codes; ``span``: the minor codes lie in
    ``[0, span)`` (one pass fewer)."""
    if enc.single_step:
        return compact_codes(minor)
    if minor.numel() == 0:
        return minor.clone(), 0
    highest = _highest_in_step_order(enc, minor)
    if highest is not None:
        return minor, highest + 1
    span = int(minor.max()) + 1 if span is None else span
    count = enc.steps * span
    wide = not counted_in_bins(count, minor.numel())
    runs = _runs_to_code_by(enc) if wide and minor.device.type == "cpu" else None
    if runs is not None:
        # The dense codes a sort of the pairs gives, a step at a time: no pair per row, no sort of the whole table.
        return _codes_by_step(runs, minor.numpy())
    steps = step_segments(enc)
    pairs = torch.empty(minor.numel(), dtype=torch.int64, device=minor.device)
    if steps.runs is not None:
        # Steps as runs: each run's codes shifted by its step's offset, without reading a step code per row.
        steps.apply(minor, torch.arange(enc.steps, device=minor.device).mul_(span), torch.add, pairs)
    else:
        torch.add(minor, enc.step, alpha=span, out=pairs)
    return compact_codes(pairs, owned=True) if wide else (pairs, count)


def _highest_in_step_order(enc: Encoded, minor: torch.Tensor) -> int | None:
    """The highest code of ``minor`` where the steps are runs and each step's codes lie above every code of the steps
    before, else None. Each code then belongs to one step, and the codes are the (step, minor) pairs' codes already,
    in their order: no code per row is made. Keys unique to their step, coded in order of first appearance (a run's
    uids) or ascending across the run, are so."""
    runs = step_segments(enc).runs
    if runs is None:
        return None
    highest, start = -1, 0
    for end in np.cumsum(runs).tolist():
        if end > start:
            low, high = (int(bound) for bound in torch.aminmax(minor[start:end]))
            if low <= highest:
                return None
            highest, start = high, end
    return highest


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


STEP_BY_STEP_ROWS = 512
"""Rows per step, on average, from which wide integer keys are coded step by step (see ``_wide_keys_by_step``):
a step costs a call (tens of microseconds), a row a tenth of a microsecond less than in a hash of the whole table."""


def _runs_to_code_by(enc: Encoded) -> torch.Tensor | None:
    """Each step's rows where the rows lie in one run per step and the steps hold enough rows each to code keys a
    step at a time; else None."""
    if enc.single_step or enc.rows < STEP_BY_STEP_ROWS * enc.steps:
        return None
    return enc.step_runs


def _codes_by_step(runs: torch.Tensor, values: np.ndarray) -> tuple[torch.Tensor, int]:
    """Dense codes of the (step, value) pairs of rows in one run per step (``runs``: each step's rows), in
    (step, value) order: each step's values densified on their own, ascending, after the codes of the steps before."""
    codes = np.empty(len(values), dtype=np.int64)
    count = start = 0
    for end in np.cumsum(runs.cpu().numpy()).tolist():
        step_codes, found = sorted_codes(values[start:end])
        np.add(step_codes, count, out=codes[start:end])
        count, start = count + found, end
    return torch.from_numpy(codes), count


def _wide_keys_by_step(enc: Encoded, column: str) -> tuple[torch.Tensor, int] | None:
    """The (step, key) codes of integer keys too wide for bins, every row keyed and the steps in runs of many rows,
    each step's keys densified on their own, ascending, after the codes of the steps before: the dense
    (step, key)-ordered codes ``_step_pairs`` makes of the keys' codes, from a hash the size of one step (it stays
    in cache) rather than two over the whole table, and with no code per row of the keys alone. None where that
    does not hold."""
    runs, keys = _runs_to_code_by(enc), enc.table.column(column)
    if runs is None or keys.null_count or not pa.types.is_integer(keys.type):
        return None
    values = int64_values(keys)
    if counted_in_bins(int(values.max()) - int(values.min()) + 1, enc.rows):
        return None  # a small range: its keys are their own codes, counted in bins
    codes, count = _codes_by_step(runs, values)
    return codes.to(enc.device), count


def _key_groups(enc: Encoded, scheme: Scheme, label: str, column: str) -> tuple[torch.Tensor, int]:
    """One group per (step, key of ``column``: the scheme's ``key_column``); steps with missing keys follow
    ``missing_keys``."""
    if column not in enc.table.column_names:
        raise SchemeError(f"{label}: the table has no column {column!r} to group by", expected="a key column")
    by_step = _wide_keys_by_step(enc, column)
    if by_step is not None:
        return by_step
    codes, count = enc.key_codes(column)
    keyed, first_missing = enc.key_present(column)
    if first_missing is None:
        # One step: the key codes are the group codes already.
        return (codes, count) if enc.single_step else _step_pairs(enc, codes, count)
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
        codes, key_count = enc.key_codes(column)
        pairs, count = _step_pairs(enc, codes, key_count)
        present = torch.bincount(pairs, minlength=count) > 0
        pair_step = torch.zeros(count, dtype=torch.int64, device=enc.device).scatter_(0, pairs, enc.step)
        prompts_per_step = torch.bincount(pair_step[present], minlength=enc.steps)
    uniform = enc.step_sizes == n * prompts_per_step
    return torch.where(uniform[enc.step], 1 + enc.rank // n, torch.zeros_like(enc.rank))


GroupRule = tuple[str, str, str, str, "int | None", "int | None"]
"""What decides a scheme's groups: its ``groups``, its key column (``key_column``: ``group_by``, or its
``framework_key`` where the table has it), ``missing_keys``, ``remainder``, ``n`` and ``batch_size`` (schemes equal
in these share their groups, whatever their statistics)."""


class Grouping:
    """The rows split into groups: each row's group code (gaps allowed) and the code count, with the sums over
    them (:attr:`segments`) and their trajectory units (:attr:`units`) made once, for every scheme sharing it."""

    def __init__(self, enc: Encoded, codes: torch.Tensor, count: int) -> None:
        self.enc, self.codes, self.count = enc, codes, count

    @cached_property
    def segments(self) -> Segments:
        """The groups as segments of rows (their sizes counted once)."""
        enc = self.enc
        return Segments(None if self.count == 1 and enc.single_step else self.codes, self.count, enc.rows, enc.device)

    @cached_property
    def units(self) -> Units | None:
        """The (group, trajectory) units of the groups; None when no row has a trajectory key (then every sample
        is a trajectory of its own and the samples are the units)."""
        return _trajectory_units(self.enc, self.codes, self.count)


class GroupCache:
    """What the groupings of one encoded table share, made once (:meth:`Encoded.derived`): the steps as segments
    and the grouping of each rule."""

    def __init__(self) -> None:
        self.steps: Segments | None = None
        self.by_rule: dict[GroupRule, Grouping] = {}


def grouping_of(enc: Encoded, scheme: Scheme) -> Grouping:
    """The grouping of a scheme's ``groups`` (made once per rule and table)."""
    label = scheme.name or "scheme"
    column = key_column(scheme, enc.table.column_names)
    rule: GroupRule = (scheme.groups, column, scheme.missing_keys, scheme.remainder, scheme.n, scheme.batch_size)
    cache = enc.derived(GroupCache)
    if rule not in cache.by_rule:
        if scheme.groups == "batch":
            result = enc.step, enc.steps
        elif scheme.groups == "prompt":
            result = _key_groups(enc, scheme, label, column)
        elif scheme.groups == "positional":
            result = _slice_groups(enc, scheme, label)
        else:
            result = _step_pairs(enc, _legacy_minor(enc, scheme, label))
        cache.by_rule[rule] = Grouping(enc, *result)
    return cache.by_rule[rule]


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
        self.group = torch.full((count,), group_count, device=enc.device).scatter_(0, of_row, groups)

    @cached_property
    def segments(self) -> Segments:
        """The units as the members of their groups (made once: the kernel and the metrics share its sizes)."""
        return Segments(self.group, self.group_count + 1, self.count, self.enc.device)

    @cached_property
    def sizes(self) -> torch.Tensor:
        """Samples per unit code (0 for a code without rows)."""
        return torch.bincount(self.of_row, minlength=self.count)

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


def _reduced_ranks(
    enc: Encoded, of_row: torch.Tensor, count: int, ranks: torch.Tensor | None, how: str, none: int
) -> torch.Tensor:
    """``how`` ("amin" or "amax") of ``ranks`` (default: batch ranks, piece by piece) among each unit's rows."""
    reduced = torch.full((count,), none, device=enc.device)
    if ranks is not None:
        return reduced.scatter_reduce_(0, of_row, ranks, how)
    for rows, piece_ranks in enc.batch_rank_pieces():
        reduced.scatter_reduce_(0, of_row[rows], piece_ranks, how)
    return reduced


def first_ranks(enc: Encoded, of_row: torch.Tensor, count: int, ranks: torch.Tensor | None = None) -> torch.Tensor:
    """The smallest of ``ranks`` (default: batch ranks) among each unit's rows; ``NO_RANK`` where none."""
    return _reduced_ranks(enc, of_row, count, ranks, "amin", NO_RANK)


def last_ranks(enc: Encoded, of_row: torch.Tensor, count: int, ranks: torch.Tensor | None = None) -> torch.Tensor:
    """The largest of ``ranks`` (default: batch ranks) among each unit's rows; -1 where none."""
    return _reduced_ranks(enc, of_row, count, ranks, "amax", -1)


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


def _trajectory_units(enc: Encoded, groups: torch.Tensor, group_count: int) -> Units | None:
    """The (group, trajectory) units of a grouping (see :attr:`Grouping.units`)."""
    if not enc.trajectory_count:
        return None
    trajectory, key_count = enc.trajectory, enc.trajectory_count
    units = None
    if enc.every_trajectory_keyed:
        # Trajectory keys nested in groups (the usual case) are unit codes already: no pairing. Keys that
        # repeat from step to step (a dataset's epochs) are nested once paired with their step, which is a
        # cheap pair (steps times keys codes), where pairing with the groups would need a hash.
        # Keys few enough for every step to use them all again are tried as step pairs first.
        repeating = not enc.single_step and enc.steps * key_count <= 2 * enc.rows
        units = None if repeating else _nested_units(enc, trajectory, key_count, groups, group_count)
        if units is None and not enc.single_step:
            trajectory, key_count = _step_pairs(enc, trajectory, key_count)
            units = _nested_units(enc, trajectory, key_count, groups, group_count)
        trajectory_key = trajectory
    else:
        # A row without a trajectory key is a trajectory of its own.
        rows = torch.arange(enc.rows, device=enc.device)
        trajectory_key = torch.where(trajectory < 0, key_count + rows, trajectory)
    if units is None:
        units = Units(enc, *_pair_codes(groups, trajectory_key), groups, group_count)
    return units


# A piece over more runs than this reduces them with one segment reduction rather than one sum each.
_MOST_SPANS = 8


@dataclass(frozen=True)
class Piece:
    """Rows of one piece and, where segments are runs of rows, the segments it holds: each with its slice of the
    piece (``spans``, when it holds few), or the first one and each one's row count (``first``, ``lengths``, when
    it holds many). Without runs, neither (sums scatter by code)."""

    rows: slice
    spans: list[tuple[int, slice]] | None = None
    first: int = 0
    lengths: torch.Tensor | None = None


class Segments:
    """Sums per segment and their spread back to rows; a single segment uses plain reductions.

    ``runs``: each segment's row count when the segments are consecutive runs of rows in code order (a table's
    steps when it is sorted by step). Sums then add slices rather than scatter: scattering into a few bins is a
    chain of dependent adds (14 ms for 5M rows into 10 bins, 0.7 ms as slice sums).
    """

    def __init__(
        self,
        codes: torch.Tensor | Callable[[], torch.Tensor] | None,
        count: int,
        rows: int,
        device: torch.device,
        runs: np.ndarray | None = None,
    ) -> None:
        """``codes``: each row's segment, or a function that makes them (read only where runs do not do), or None
        for a single segment."""
        self._codes, self.count, self.rows, self.device, self.runs = codes, count, rows, device, runs
        self.single = codes is None
        self._ends = None if runs is None else np.cumsum(runs)
        self._kept: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def codes(self) -> torch.Tensor:
        """Each row's segment (made here where a function makes them); a single segment has none to read."""
        if callable(self._codes):
            self._codes = self._codes()
        assert self._codes is not None, "a single segment has no row codes: its sums are plain reductions"
        return self._codes

    def pieces(self, rows: int, size: int | None = None) -> Iterator[Piece]:
        """Slices of ``size`` rows (default :func:`~.encode.piece_size`) with the segments each holds."""
        size = piece_size(rows, self.device) if size is None else size
        ends = self._ends
        for start in range(0, rows, size):
            stop = min(start + size, rows)
            if ends is None:
                yield Piece(slice(start, stop))
                continue
            first, last = (int(at) for at in np.searchsorted(ends, [start, stop - 1], side="right"))
            bounds = np.clip(ends[first : last + 1], None, stop) - start
            starts = np.concatenate([[0], bounds[:-1]])
            if last - first < _MOST_SPANS:
                spans = [
                    (first + k, slice(int(a), int(b))) for k, (a, b) in enumerate(zip(starts, bounds, strict=True))
                ]
                yield Piece(slice(start, stop), spans)
            else:
                yield Piece(slice(start, stop), None, first, torch.from_numpy(bounds - starts).to(self.device))

    def add_sums(self, into: torch.Tensor, values: torch.Tensor, piece: Piece) -> None:
        """Add a piece's float64 values to their segments' totals."""
        if piece.spans is not None:
            for segment, span in piece.spans:
                into[segment] += values[span].sum()
        elif piece.lengths is not None:
            into[piece.first : piece.first + piece.lengths.numel()] += torch.segment_reduce(
                values, "sum", lengths=piece.lengths
            )
        else:
            into.scatter_add_(0, self.codes[piece.rows], values)

    def raise_maxima(self, into: torch.Tensor, values: torch.Tensor, piece: Piece) -> None:
        """Raise their segments' maxima to a piece's non-negative values."""
        if piece.spans is not None:
            for segment, span in piece.spans:
                into[segment] = torch.maximum(into[segment], values[span].max())
        elif piece.lengths is not None:
            held = into[piece.first : piece.first + piece.lengths.numel()]
            torch.maximum(held, torch.segment_reduce(values, "max", lengths=piece.lengths, initial=0.0), out=held)
        else:
            into.scatter_reduce_(0, self.codes[piece.rows], values, "amax")

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Float64 sum of ``values`` per segment."""
        if self.single:
            return values.sum(dtype=F64).reshape(1)
        if self.runs is None:
            return torch.zeros(self.count, dtype=F64, device=values.device).scatter_add_(0, self.codes, values.to(F64))
        total, values = torch.zeros(self.count, dtype=F64, device=values.device), values.to(F64)
        for piece in self.pieces(values.numel()):
            self.add_sums(total, values[piece.rows], piece)
        return total

    def kept_sum(self, values: torch.Tensor) -> torch.Tensor:
        """``sum(values)``, kept for the next call with the same tensor (never to be written into)."""
        kept = self._kept
        if kept is None or kept[0] is not values:
            kept = self._kept = values, self.sum(values)
        return kept[1]

    @cached_property
    def sizes(self) -> torch.Tensor:
        if self.single:
            return torch.tensor([float(self.rows)], dtype=F64, device=self.device)
        if self.runs is not None:
            return torch.from_numpy(self.runs).to(F64).to(self.device)
        return torch.bincount(self.codes, minlength=self.count).to(F64)

    @property
    def sizes_at_least_one(self) -> torch.Tensor:
        """The sizes, 1 for an empty code (made at each call: a divisor is needed once a scheme, and a tensor of one
        value per group is not kept for it)."""
        return self.sizes.clamp(min=1)

    def deviation(self, values: torch.Tensor, per_segment: torch.Tensor, in_place: bool = False) -> torch.Tensor:
        """``values`` minus each row's segment value, in one new tensor or (``in_place``) in ``values``."""
        if self.single:
            return values.sub_(per_segment) if in_place else values - per_segment
        out = values if in_place else torch.empty(values.numel(), dtype=F64, device=values.device)
        return self.apply(values, per_segment, torch.sub, out)

    def sum_of_squares(self, values: torch.Tensor) -> torch.Tensor:
        """Float64 sum of squared float64 ``values`` per segment, squared piece by piece.

        Not ``torch.dot``: BLAS may split the sum differently from call to call.
        """
        total = torch.zeros(self.count, dtype=F64, device=values.device)
        buffer = torch.empty(piece_size(values.numel(), values.device), dtype=F64, device=values.device)
        for piece in self.pieces(values.numel()):
            part = values[piece.rows]
            squares = torch.mul(part, part, out=buffer[: part.numel()])
            if self.single:
                total += squares.sum()
            else:
                self.add_sums(total, squares, piece)
        return total

    def scale_(self, values: torch.Tensor, per_segment: torch.Tensor) -> torch.Tensor:
        """Multiply ``values`` in place by each row's segment value."""
        if self.single:
            return values.mul_(per_segment)
        return self.apply(values, per_segment, torch.mul, values)

    def apply(self, values: torch.Tensor, per_segment: torch.Tensor, operation, out: torch.Tensor) -> torch.Tensor:
        """``operation(values, each row's segment value)`` into ``out`` (``values`` itself: in place), piece by
        piece: a run's rows take its value as a scalar, other rows gather theirs into a small buffer."""
        buffer = torch.empty(piece_size(values.numel(), values.device), dtype=per_segment.dtype, device=values.device)
        for piece in self.pieces(values.numel()):
            source, target = values[piece.rows], out[piece.rows]
            if piece.spans is not None:
                for segment, span in piece.spans:
                    operation(source[span], per_segment[segment], out=target[span])
            else:
                spread = torch.index_select(per_segment, 0, self.codes[piece.rows], out=buffer[: source.numel()])
                operation(source, spread, out=target)
        return out

    def spread(self, per_segment: torch.Tensor) -> torch.Tensor:
        """Each row's segment value."""
        if self.single:
            return per_segment.expand(self.rows)
        return per_segment.index_select(0, self.codes)


def step_segments(enc: Encoded) -> Segments:
    """The table's steps as segments (runs when the rows are sorted by step), made once."""
    cache = enc.derived(GroupCache)
    if cache.steps is None:
        runs = None if enc.step_runs is None else enc.step_runs.cpu().numpy()
        # Steps in runs are summed and spread run by run: their row codes are made only if a piece asks for them.
        codes = None if enc.single_step else (lambda: enc.step) if runs is not None else enc.step
        cache.steps = Segments(codes, enc.steps, enc.rows, enc.device, runs)
    return cache.steps


def by_steps(scheme: Scheme) -> bool:
    """Whether a scheme's groups are the steps (``batch``): their segments are the table's steps, summed and spread
    run by run where the steps are runs, with no group code per row."""
    return scheme.groups == "batch"


def member_groups(enc: Encoded, scheme: Scheme) -> tuple[Segments, Units | None]:
    """The segments a scheme's statistics are taken over, and the trajectory units that are its members (None
    where its members are the samples, or no row has a trajectory key)."""
    if by_steps(scheme) and scheme.members != "trajectories":
        return step_segments(enc), None
    grouping = grouping_of(enc, scheme)
    units = grouping.units if scheme.members == "trajectories" else None
    if units is not None:
        return units.segments, units
    return (step_segments(enc) if by_steps(scheme) else grouping.segments), None
