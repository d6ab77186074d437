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

import warnings
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ._errors import SchemeError
from ._schemes import Scheme
from ._table import POSITION, PROMPT, RESPONSE_LENGTH, REWARD, STEP, TRAJECTORY

F64 = torch.float64

# Rows per piece of a two-step vector operation (square then sum, gather then multiply): the
# intermediate lives in a small buffer that stays in cache, never in a fresh buffer per row.
PIECE = 1 << 18


def pieces(rows: int, dtype: torch.dtype, device: torch.device) -> Iterator[tuple[slice, torch.Tensor]]:
    """Slices of at most ``PIECE`` rows on the CPU (one slice on a GPU, where each piece costs a
    launch), each with a buffer of its length: one buffer, reused from piece to piece."""
    step = max(min(PIECE, rows) if device.type == "cpu" else rows, 1)
    buffer = torch.empty(step, dtype=dtype, device=device)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        yield slice(start, stop), buffer[: stop - start]


def choose_device(device: str | torch.device = "auto") -> torch.device:
    """``auto`` is CUDA when available, else the CPU; chosen once per call."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise SchemeError(f"unknown device {device!r}; expected auto, cpu or cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SchemeError(f"device {device!r} asked for, but torch sees no CUDA device")
    return torch.device(device)


def compact_codes(keys: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Codes in ``[0, K)`` for int64 keys, equal keys equal codes, and K; codes may leave gaps.

    A small key range is used as it is (shifted to 0): no hashing, no gather,
    and an empty code costs one unused bin. A wide range is densified.
    """
    if keys.numel() == 0:
        return keys.clone(), 0
    low, high = (int(bound) for bound in torch.aminmax(keys))
    span = high - low + 1
    if span <= 4 * keys.numel() + 1024:
        return (keys if low == 0 else keys - low), span
    return densify(keys)


def densify(keys: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense codes 0..K-1 for int64 keys (ascending key order), and K.

    Small key ranges use a lookup table (two vector passes); wide ones a hash
    factorisation on the CPU or a sort on CUDA.
    """
    count = keys.numel()
    if count == 0:
        return keys.clone(), 0
    low, high = (int(bound) for bound in torch.aminmax(keys))
    if low == high:
        return torch.zeros_like(keys), 1
    span = high - low + 1
    if span <= 4 * count + 1024:
        present = torch.zeros(span, dtype=torch.int64, device=keys.device)
        shifted = keys - low
        present[shifted] = 1
        code_of = present.cumsum_(0).sub_(1)
        return code_of[shifted], int(code_of[-1]) + 1
    if keys.device.type == "cpu":
        import pandas as pd

        codes, uniques = pd.factorize(keys.numpy(), sort=True)
        return torch.from_numpy(codes.astype(np.int64, copy=False)), len(uniques)
    uniques, codes = torch.unique(keys, return_inverse=True)
    return codes, uniques.numel()


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing a numpy array's memory. Arrow hands out read-only buffers: the
    kernel never writes into its inputs, so they are shared rather than copied."""
    array = np.ascontiguousarray(array)
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def _numpy(column: pa.ChunkedArray, dtype: type) -> np.ndarray:
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return array.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _arrow_codes(column: pa.ChunkedArray) -> tuple[torch.Tensor, int]:
    """Compact int64 codes for a key column, -1 where null, and the code count (see ``compact_codes``)."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if array.null_count == len(array):
        return torch.full((len(array),), -1, dtype=torch.int64), 0
    if pa.types.is_integer(array.type):
        filled = array.fill_null(int(pc.min(array).as_py())) if array.null_count else array
        values = _tensor(filled.to_numpy().astype(np.int64, copy=False))
        codes, count = compact_codes(values)
    else:
        encoded = pc.dictionary_encode(array, null_encoding="mask")
        codes = _tensor(encoded.indices.fill_null(0).to_numpy().astype(np.int64))
        count = len(encoded.dictionary)
    if array.null_count:
        codes = codes.clone()
        codes[_tensor(array.is_null().to_numpy(zero_copy_only=False))] = -1
    return codes, count


class Encoded:
    """A table as tensors on one device, each made on first use: the input of every scheme and metric."""

    def __init__(self, table: pa.Table, device: torch.device) -> None:
        self.table = table
        self.device = device
        self.rows = table.num_rows
        self._groups: dict = {}

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    @cached_property
    def reward(self) -> torch.Tensor:
        return self._to_device(_tensor(_numpy(self.table.column(REWARD), np.float64)))

    @cached_property
    def finite(self) -> torch.Tensor:
        return torch.isfinite(self.reward)

    @cached_property
    def all_finite(self) -> bool:
        # A finite float64 sum proves every term finite (NaN and inf propagate) without a mask pass.
        return bool(torch.isfinite(self.reward.sum())) or bool(self.finite.all())

    @cached_property
    def _steps(self) -> tuple[torch.Tensor | None, np.ndarray]:
        column = self.table.column(STEP)
        bounds = pc.min_max(column)
        if bounds["min"].as_py() == bounds["max"].as_py():
            return None, np.array([bounds["min"].as_py()] if len(column) else [], dtype=np.int64)
        values = _numpy(column, np.int64)
        codes, _ = densify(_tensor(values))
        return self._to_device(codes), np.unique(values)

    @property
    def step_values(self) -> np.ndarray:
        """The step value of each step code, ascending."""
        return self._steps[1]

    @property
    def steps(self) -> int:
        return len(self.step_values)

    @property
    def single_step(self) -> bool:
        return self._steps[0] is None

    @cached_property
    def step(self) -> torch.Tensor:
        """Dense step code of each row."""
        codes = self._steps[0]
        if codes is None:  # one step: a stride-0 view of a single 0, no buffer per row
            return torch.zeros(1, dtype=torch.int64, device=self.device).expand(self.rows)
        return codes

    @cached_property
    def _prompt_codes(self) -> tuple[torch.Tensor, int]:
        codes, count = _arrow_codes(self.table.column(PROMPT))
        return self._to_device(codes), count

    @property
    def prompt(self) -> torch.Tensor:
        """Compact prompt code of each row, -1 where the row has no prompt key."""
        return self._prompt_codes[0]

    @property
    def prompt_count(self) -> int:
        """How many prompt codes there are (0: no row has a prompt key)."""
        return self._prompt_codes[1]

    @cached_property
    def _trajectory_codes(self) -> tuple[torch.Tensor, int]:
        codes, count = _arrow_codes(self.table.column(TRAJECTORY))
        return self._to_device(codes), count

    @property
    def trajectory(self) -> torch.Tensor:
        """Compact trajectory code of each row, -1 where the row has no trajectory key."""
        return self._trajectory_codes[0]

    @property
    def trajectory_count(self) -> int:
        """How many trajectory codes there are (0: no row has a trajectory key)."""
        return self._trajectory_codes[1]

    @property
    def every_trajectory_keyed(self) -> bool:
        return self.table.column(TRAJECTORY).null_count == 0

    @cached_property
    def position(self) -> torch.Tensor:
        return self._to_device(_tensor(_numpy(self.table.column(POSITION), np.int64)))

    @cached_property
    def response_length(self) -> torch.Tensor | None:
        """float64 lengths, NaN where unknown (the metrics weigh those by 1); None when no row has one."""
        lengths = self.table.column(RESPONSE_LENGTH)
        if lengths.null_count == len(lengths):
            return None
        return self._to_device(_tensor(lengths.to_numpy(zero_copy_only=False).astype(np.float64)))

    @cached_property
    def step_sizes(self) -> torch.Tensor:
        if self.single_step:
            return torch.tensor([self.rows], device=self.device)
        return torch.bincount(self.step, minlength=self.steps)

    @cached_property
    def _batch_order(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(global rank of each row in (step, position, row) order, rows in that order or None if
        the table is already in batch order)."""
        position = self.position
        one_run = self.single_step and self.rows and int(position[0]) == 0 and int(position[-1]) == self.rows - 1
        if one_run and bool((position[1:] > position[:-1]).all()):
            # Strictly ascending from 0 to rows - 1: the positions are the ranks (no arange to build).
            return position, None
        rows = torch.arange(self.rows, device=self.device)
        ascending = position[1:] >= position[:-1]
        if not self.single_step:
            step = self.step
            ascending = (step[1:] > step[:-1]) | ((step[1:] == step[:-1]) & ascending)
        if self.rows < 2 or bool(ascending.all()):
            return rows, None
        # Lexicographic sort by (step, position, row) as stable sorts, least significant key first.
        order = torch.sort(position, stable=True).indices
        if not self.single_step:
            order = order[torch.sort(self.step[order], stable=True).indices]
        rank = torch.empty_like(order)
        rank[order] = rows
        return rank, order

    @property
    def batch_rank(self) -> torch.Tensor:
        """Each row's place in the batch order of the whole table (steps ascending)."""
        return self._batch_order[0]

    def row_at(self, batch_rank: torch.Tensor) -> torch.Tensor:
        """The rows sitting at the given batch ranks."""
        order = self._batch_order[1]
        return batch_rank if order is None else order.index_select(0, batch_rank)

    @cached_property
    def rank(self) -> torch.Tensor:
        """Each row's place in its own step's batch order: 0..size-1."""
        if self.single_step:
            return self.batch_rank
        step_start = torch.cumsum(self.step_sizes, 0) - self.step_sizes
        return self.batch_rank - step_start.index_select(0, self.step)

    @cached_property
    def prompt_present(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per step: how many rows have a prompt key, and the first place (batch order) without one."""
        if self.table.column(PROMPT).null_count == 0:
            return self.step_sizes, None
        missing = self.prompt < 0
        keyed = torch.bincount(self.step[~missing], minlength=self.steps)
        missing_rank = torch.where(missing, self.rank, torch.iinfo(torch.int64).max)
        first_missing = torch.full((self.steps,), torch.iinfo(torch.int64).max, device=self.device)
        first_missing.scatter_reduce_(0, self.step, missing_rank, "amin")
        return keyed, first_missing


def encode(table: pa.Table, device: str | torch.device = "auto") -> Encoded:
    """The tensors of a canonical table (``rollaudit.validate_table`` shape) on one device."""
    return Encoded(table, choose_device(device))


def _pair_codes(major: torch.Tensor, minor: torch.Tensor, single_major: bool = False) -> tuple[torch.Tensor, int]:
    """Compact codes of (major, minor) pairs of non-negative codes; ``single_major``: major is constant."""
    if minor.numel() == 0:
        return minor.clone(), 0
    if single_major:
        return compact_codes(minor)
    return compact_codes(major * (int(minor.max()) + 1) + minor)


def _step_pairs(enc: Encoded, minor: torch.Tensor) -> tuple[torch.Tensor, int]:
    return _pair_codes(enc.step if not enc.single_step else minor, minor, single_major=enc.single_step)


def _slice_groups(enc: Encoded, n: int, label: str) -> tuple[torch.Tensor, int]:
    bad = (enc.step_sizes % n) != 0
    if bool(bad.any()):
        step = int(torch.nonzero(bad)[0])
        raise SchemeError(
            f"{label}: step {enc.step_values[step]} has {int(enc.step_sizes[step])} samples, "
            f"not a multiple of n={n}: consecutive slices of n do not fit"
        )
    return _step_pairs(enc, enc.rank // n)


def _prompt_groups(enc: Encoded, n: int | None, label: str) -> tuple[torch.Tensor, int]:
    """One group per (step, prompt); a step with no prompt keys at all falls back to slices of n."""
    keyed, first_missing = enc.prompt_present
    if first_missing is None:
        # One step: the prompt codes are the group codes already.
        return (enc.prompt, enc.prompt_count) if enc.single_step else _step_pairs(enc, enc.prompt)
    partial = (keyed > 0) & (keyed < enc.step_sizes)
    if bool(partial.any()):
        step = int(torch.nonzero(partial)[0])
        raise SchemeError(
            f"{label}: the sample at position {int(first_missing[step])} of step {enc.step_values[step]} "
            "has no prompt key while others do; a baseline cannot be guessed"
        )
    unkeyed = keyed == 0
    sizes = enc.step_sizes
    if n is None or bool(((sizes % n != 0) & unkeyed).any()):
        raise SchemeError(
            f"{label}: prompt keys are required when groups are not uniformly sized"
            + ("" if n is None else f" (a step without keys has a sample count that n={n} does not divide)")
        )
    # Rows of keyless steps get slice ids placed after every prompt code.
    slice_key = max(int(enc.prompt.max()), 0) + 1 + enc.rank // n
    return _step_pairs(enc, torch.where(unkeyed[enc.step], slice_key, enc.prompt))


def _legacy_groups(enc: Encoded, scheme: Scheme, label: str) -> tuple[torch.Tensor, int]:
    """slime before PR #2204: slices of n when the step has n * B samples, else the whole step."""
    n = scheme.require_n()
    if scheme.batch_size is not None:
        prompts_per_step = torch.full((enc.steps,), scheme.batch_size, device=enc.device)
    else:
        keyed, _ = enc.prompt_present
        if bool((keyed < enc.step_sizes).any()):
            raise SchemeError(
                f"{label}: without prompt keys, give batch_size (rollout_batch_size), "
                "e.g. slime-legacy(n=8, batch_size=32)"
            )
        pairs, count = _step_pairs(enc, enc.prompt)
        present = torch.bincount(pairs, minlength=count) > 0
        pair_step = torch.zeros(count, dtype=torch.int64, device=enc.device).scatter_(0, pairs, enc.step)
        prompts_per_step = torch.bincount(pair_step[present], minlength=enc.steps)
    uniform = enc.step_sizes == n * prompts_per_step
    return _step_pairs(enc, torch.where(uniform[enc.step], 1 + enc.rank // n, torch.zeros_like(enc.rank)))


def group_codes(enc: Encoded, scheme: Scheme) -> tuple[torch.Tensor, int]:
    """Compact group code per row (gaps allowed) and the code count, for a scheme's ``groups``."""
    label = scheme.name or "scheme"
    cache_key = (scheme.groups, scheme.n, scheme.batch_size)
    if cache_key not in enc._groups:
        if scheme.groups == "batch":
            result = enc.step, enc.steps
        elif scheme.groups == "prompt":
            result = _prompt_groups(enc, scheme.n, label)
        elif scheme.groups == "positional":
            result = _slice_groups(enc, scheme.require_n(), label)
        else:
            result = _legacy_groups(enc, scheme, label)
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
        self.group = torch.full((count,), group_count, device=enc.device).scatter_(0, of_row, groups)

    @cached_property
    def first_row(self) -> torch.Tensor:
        """Each unit's first row in batch order (any row for an empty code: never read)."""
        first = _first_ranks(self.enc, self.of_row, self.count)
        return self.enc.row_at(first.clamp_(max=self.enc.rows - 1))


_NO_RANK = torch.iinfo(torch.int64).max


def _first_ranks(enc: Encoded, of_row: torch.Tensor, count: int, ranks: torch.Tensor | None = None) -> torch.Tensor:
    """The smallest of ``ranks`` (default: batch ranks) among each unit's rows; ``_NO_RANK`` where none."""
    first = torch.full((count,), _NO_RANK, device=enc.device)
    return first.scatter_reduce_(0, of_row, enc.batch_rank if ranks is None else ranks, "amin")


def _all_equal_gathered(source: torch.Tensor, index: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether ``source[index] == expected`` everywhere, gathered piece by piece (no buffer per row)."""
    for rows, buffer in pieces(index.numel(), source.dtype, source.device):
        gathered = torch.index_select(source, 0, index[rows], out=buffer)
        if not torch.equal(gathered, expected[rows]):
            return False
    return True


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
            # Trajectory keys nested in groups (the usual case) are unit codes already: no pairing.
            # Nested if every row's group is the group its trajectory's unit took.
            nested = Units(enc, trajectory, key_count, groups, group_count)
            if _all_equal_gathered(nested.group, trajectory, groups):
                units = nested
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
        return per_segment.index_select(0, self.codes)


def _segments(enc: Encoded, codes: torch.Tensor, count: int) -> Segments:
    """Row segments of a grouping, cached with it so that schemes sharing groups share their sizes."""
    key = ("segments", codes.data_ptr(), count)
    if key not in enc._groups:
        enc._groups[key] = Segments(None if count == 1 and enc.single_step else codes, count, codes.numel(), enc.device)
    return enc._groups[key]


def _step_segments(enc: Encoded) -> Segments:
    return Segments(None if enc.single_step else enc.step, enc.steps, enc.rows, enc.device)


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
        first = _first_ranks(enc, units.of_row, count, torch.where(finite, enc.batch_rank, _NO_RANK))
        invalid = first == _NO_RANK
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
        groups = _segments(enc, group_of_row, group_count)
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
                steps = _step_segments(enc)
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
