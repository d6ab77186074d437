"""A canonical table as tensors on one device: integer codes for steps, prompts and trajectories, float64 rewards.

``encode`` turns a table into an :class:`Encoded` once; every scheme and
metric reads its tensors, each made on first use. Key columns become compact
integer codes (a small key range used as it is, a wide one densified), so
that every later grouping is a scatter over dense codes.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from functools import cached_property
from typing import TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ..._errors import SchemeError
from ..._table import POSITION, PROMPT, RESPONSE_LENGTH, REWARD, STEP, TRAJECTORY, contiguous_runs, dictionary_codes
from .chunks import few_chunks
from .sizing import counted_in_bins, pieces

F64 = torch.float64
T = TypeVar("T")


def any_nan(values: torch.Tensor) -> bool:
    """Whether ``values`` hold a NaN; a finite sum proves none without a mask pass."""
    return not bool(torch.isfinite(values.sum())) and bool(torch.isnan(values).any())


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


def compact_codes(keys: torch.Tensor, owned: bool = False) -> tuple[torch.Tensor, int]:
    """Codes in ``[0, K)`` for int64 keys, equal keys equal codes, and K; codes may leave gaps.

    A small key range is used as it is (shifted to 0, in place when the caller ``owned`` ``keys``): no hashing,
    no gather, and an empty code costs one unused bin. A wide range is densified.
    """
    if keys.numel() == 0:
        return keys.clone(), 0
    low, high = (int(bound) for bound in torch.aminmax(keys))
    span = high - low + 1
    if counted_in_bins(span, keys.numel()):
        if low == 0:
            return keys, span
        return (keys.sub_(low) if owned else keys - low), span
    return densify(keys)


def densify(keys: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense codes 0..K-1 for int64 keys (ascending key order), and K.

    Small key ranges use a lookup table (two vector passes); wide ones a sort (see ``sorted_codes``).
    """
    count = keys.numel()
    if count == 0:
        return keys.clone(), 0
    low, high = (int(bound) for bound in torch.aminmax(keys))
    if low == high:
        return torch.zeros_like(keys), 1
    span = high - low + 1
    if counted_in_bins(span, count):
        present = torch.zeros(span, dtype=torch.int64, device=keys.device)
        shifted = keys - low
        present[shifted] = 1
        code_of = present.cumsum_(0).sub_(1)
        return code_of[shifted], int(code_of[-1]) + 1
    if keys.device.type == "cpu":
        codes, found = sorted_codes(keys.numpy())
        return torch.from_numpy(codes), found
    uniques, codes = torch.unique(keys, return_inverse=True)
    return codes, uniques.numel()


# From this many keys torch's sort beats numpy's (a million rows: 0.9 s against 1.7 s); below, its start-up costs
# more than the sort (0.05 s against 0.01 s at 100k rows).
_TORCH_SORT_ROWS = 1 << 20


def sorted_codes(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense int64 codes of int64 ``values`` in ascending order of value (0 for the smallest), and how many distinct
    values there are."""
    if len(values) >= _TORCH_SORT_ROWS:
        uniques, codes = torch.unique(torch.from_numpy(np.ascontiguousarray(values)), return_inverse=True)
        return codes.numpy(), uniques.numel()
    uniques, inverse = np.unique(values, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64, copy=False), len(uniques)


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
    """A column's values as one numpy array: one chunk's own buffer where it can be, else one copy of the chunks
    (numpy's memory, given back as soon as it is freed, where Arrow's pool would keep it)."""
    if column.num_chunks == 1:
        return column.chunk(0).to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    if column.num_chunks == 0:
        return np.zeros(0, dtype=dtype)
    return np.concatenate([chunk.to_numpy(zero_copy_only=False) for chunk in column.chunks]).astype(dtype, copy=False)


def int64_values(column: pa.ChunkedArray) -> np.ndarray:
    """An integer column without nulls as int64 numpy values (a view of a single int64 chunk's buffer)."""
    return _numpy(column, np.int64)


_KEY_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_boolean)


def _arrow_codes(column: pa.ChunkedArray, name: str) -> tuple[torch.Tensor, int]:
    """Compact int64 codes for a key column, -1 where null, and the code count (see ``compact_codes``). The column
    is read chunk by chunk: no combined copy of it is made (nor kept by Arrow's pool)."""
    if column.null_count == len(column):
        return torch.full((len(column),), -1, dtype=torch.int64), 0
    decoded = pa.types.is_dictionary(column.type)
    if decoded:
        column = column.cast(column.type.value_type)  # the values the dictionary's codes stand for
    kind = column.type
    if pa.types.is_integer(kind):
        filled = pc.fill_null(column, int(pc.min(column).as_py())) if column.null_count else column
        codes, count = compact_codes(_tensor(_numpy(filled, np.int64)))
    elif decoded or any(check(kind) for check in _KEY_TYPES):
        values, count = dictionary_codes(column, "mask")
        codes = _tensor(values)
    else:
        raise SchemeError(f"column {name!r} has type {kind}, which is no key", expected="int or string keys")
    if column.null_count:
        codes = codes.clone()
        codes[_tensor(_numpy(column.is_null(), np.bool_))] = -1
    return codes, count


class Encoded:
    """A table as tensors on one device, each made on first use: the input of every scheme and metric."""

    def __init__(self, table: pa.Table, device: torch.device) -> None:
        self.table = table
        self.device = device
        self.rows = table.num_rows
        self.reward_column = REWARD
        self._keys: dict[str, tuple[torch.Tensor, int]] = {}
        self._present: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self._views: dict[str, Encoded] = {}
        self._derived: dict[type, object] = {}
        # Made on first use; a reward view makes its own rewards and shares everything else.
        self._reward: torch.Tensor | None = None
        self._finite: torch.Tensor | None = None
        self._all_finite: bool | None = None
        self._step_codes: torch.Tensor | None = None
        self._batch_rank: torch.Tensor | None = None

    def with_reward(self, column: str) -> Encoded:
        """The same table with another numeric column as its rewards (codes, steps, orders and what was derived from
        them shared)."""
        if column == self.reward_column:
            return self
        if column not in self._views:
            if column not in self.table.column_names:
                raise SchemeError(f"the table has no reward column {column!r}", expected="a numeric column")
            kind = self.table.schema.field(column).type
            if not (pa.types.is_floating(kind) or pa.types.is_integer(kind)):
                raise SchemeError(f"column {column!r} has type {kind}, which is no reward", expected="numbers")
            view = copy.copy(self)
            view.reward_column = column
            view._reward = view._finite = view._all_finite = None
            self._views[column] = view
        return self._views[column]

    def derived(self, kind: type[T]) -> T:
        """The one ``kind()`` of this table, made on first use: what later code derives from these tensors and keeps
        while they live (the group cache of :mod:`.groups`), shared with the reward views."""
        held = self._derived.get(kind)
        if held is None:
            held = self._derived[kind] = kind()
        return cast(T, held)

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    @property
    def reward(self) -> torch.Tensor:
        if self._reward is None:
            column = self.table.column(self.reward_column)
            if column.null_count:  # a null reward is unknown: NaN, left out and counted like one
                column = pc.fill_null(column.cast(pa.float64()), np.nan)
            self._reward = self._to_device(_tensor(_numpy(column, np.float64)))
        return self._reward

    @property
    def finite(self) -> torch.Tensor:
        if self._finite is None:
            self._finite = torch.isfinite(self.reward)
        return self._finite

    @property
    def all_finite(self) -> bool:
        if self._all_finite is None:
            # A finite float64 sum proves every term finite (NaN and inf propagate) without a mask pass.
            self._all_finite = bool(torch.isfinite(self.reward.sum())) or bool(self.finite.all())
        return self._all_finite

    @cached_property
    def _steps(self) -> tuple[torch.Tensor | None, np.ndarray, torch.Tensor | None]:
        """(dense step code of each row, None for one step or for steps in runs (made from the runs where asked
        for), the step values ascending, each step's row count when every step is one run in ascending order (a
        loaded table is) or None)."""
        column = self.table.column(STEP)
        if len(column) == 0:
            return None, np.zeros(0, dtype=np.int64), None
        first = column[0].as_py()
        # A first step unlike the last is a table of several steps: no pass to look for a single value.
        if first == column[-1].as_py() and pc.max(column).as_py() == first == pc.min(column).as_py():
            return None, np.array([first], dtype=np.int64), torch.tensor([self.rows], device=self.device)
        runs = contiguous_runs(column)  # piece by piece, across chunks: no combined copy of the column
        if runs is not None and bool((runs[1][1:] > runs[1][:-1]).all()):
            # Sorted steps are runs: their codes are counted off the run lengths, with no hash or sort.
            bounds, run_steps = runs
            return None, run_steps, self._to_device(torch.from_numpy(np.diff(bounds)))
        values = _numpy(column, np.int64)
        codes, _ = densify(_tensor(values))
        return self._to_device(codes), np.unique(values), None

    @property
    def step_values(self) -> np.ndarray:
        """The step value of each step code, ascending."""
        return self._steps[1]

    @property
    def steps(self) -> int:
        return len(self.step_values)

    @property
    def single_step(self) -> bool:
        return self.steps <= 1

    @property
    def step_runs(self) -> torch.Tensor | None:
        """Each step's row count when the rows are sorted by step (every step one run), else None."""
        return self._steps[2]

    @property
    def step(self) -> torch.Tensor:
        """Dense step code of each row (for steps in runs, made here: most passes go run by run and never ask)."""
        if self._step_codes is None:
            codes, _, runs = self._steps
            if self.single_step:  # one step: a stride-0 view of a single 0, no buffer per row
                codes = torch.zeros(1, dtype=torch.int64, device=self.device).expand(self.rows)
            elif codes is None:
                assert runs is not None
                steps = torch.arange(self.steps, device=self.device)
                codes = torch.repeat_interleave(steps, runs, output_size=self.rows)
            self._step_codes = codes
        return self._step_codes

    def step_of(self, rows: torch.Tensor) -> torch.Tensor:
        """The step codes of some rows (found among the step runs where there are runs: no code per row)."""
        if self.single_step:
            return torch.zeros_like(rows)
        if self.step_runs is not None and self._step_codes is None:
            return torch.searchsorted(torch.cumsum(self.step_runs, 0), rows, right=True)
        return self.step.index_select(0, rows)

    def key_codes(self, column: str) -> tuple[torch.Tensor, int]:
        """Compact codes of a key column (-1 where a row has no key) and how many codes there are."""
        if column not in self._keys:
            if column not in self.table.column_names:
                raise SchemeError(f"the table has no column {column!r} to group by", expected="a key column")
            codes, count = _arrow_codes(self.table.column(column), column)
            self._keys[column] = self._to_device(codes), count
        return self._keys[column]

    @property
    def prompt(self) -> torch.Tensor:
        """Compact prompt code of each row, -1 where the row has no prompt key."""
        return self.key_codes(PROMPT)[0]

    @property
    def trajectory(self) -> torch.Tensor:
        """Compact trajectory code of each row, -1 where the row has no trajectory key."""
        return self.key_codes(TRAJECTORY)[0]

    @property
    def trajectory_count(self) -> int:
        """How many trajectory codes there are (0: no row has a trajectory key, and no code is made)."""
        if self.table.column(TRAJECTORY).null_count == self.rows:
            return 0
        return self.key_codes(TRAJECTORY)[1]

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
        if self.step_runs is not None:
            return self.step_runs
        if self.single_step:
            return torch.tensor([self.rows], device=self.device)
        return torch.bincount(self.step, minlength=self.steps)

    @cached_property
    def _positions_are_ranks(self) -> bool:
        """Whether the positions count 0..rows-1 in row order (one step): they are the batch ranks themselves."""
        position = self.position
        one_run = self.single_step and self.rows and int(position[0]) == 0 and int(position[-1]) == self.rows - 1
        return bool(one_run and bool((position[1:] > position[:-1]).all()))

    @cached_property
    def _row_order(self) -> torch.Tensor | None:
        """The rows in batch order, (step, position, row), or None when they already are in it."""
        if self.rows < 2 or self._positions_are_ranks:
            return None
        position = self.position
        ascending = position[1:] >= position[:-1]
        if self.step_runs is not None and not self.single_step:
            # Steps in runs: in batch order when positions ascend within each run (a new run may start anywhere).
            ascending[torch.cumsum(self.step_runs, 0)[:-1] - 1] = True
        elif not self.single_step:
            step = self.step
            ascending = (step[1:] > step[:-1]) | ((step[1:] == step[:-1]) & ascending)
        if bool(ascending.all()):
            return None
        # Lexicographic sort by (step, position, row) as stable sorts, least significant key first.
        order = torch.sort(position, stable=True).indices
        if not self.single_step:
            order = order[torch.sort(self.step[order], stable=True).indices]
        return order

    @property
    def batch_rank(self) -> torch.Tensor:
        """Each row's place in the batch order of the whole table (steps ascending)."""
        if self._batch_rank is None:
            if self._positions_are_ranks:  # no arange to build
                self._batch_rank = self.position
            else:
                rows = torch.arange(self.rows, device=self.device)
                order = self._row_order
                if order is None:
                    self._batch_rank = rows
                else:
                    self._batch_rank = torch.empty_like(order)
                    self._batch_rank[order] = rows
        return self._batch_rank

    def batch_rank_pieces(self) -> Iterator[tuple[slice, torch.Tensor]]:
        """``batch_rank`` a piece of rows at a time: where the rows are in batch order and the ranks were not
        built, each piece counts its own into one small buffer (no rank tensor of the table's length)."""
        if self._batch_rank is not None or self._row_order is not None or self._positions_are_ranks:
            ranks = self.batch_rank
            yield from ((rows, ranks[rows]) for rows, _ in pieces(self.rows, torch.int64, self.device))
            return
        for rows, buffer in pieces(self.rows, torch.int64, self.device):
            yield rows, torch.arange(rows.start, rows.stop, out=buffer)

    def row_at(self, batch_rank: torch.Tensor) -> torch.Tensor:
        """The rows sitting at the given batch ranks."""
        order = self._row_order
        return batch_rank if order is None else order.index_select(0, batch_rank)

    @cached_property
    def rank(self) -> torch.Tensor:
        """Each row's place in its own step's batch order: 0..size-1."""
        if self.single_step:
            return self.batch_rank
        step_start = torch.cumsum(self.step_sizes, 0) - self.step_sizes
        return self.batch_rank - step_start.index_select(0, self.step)

    def key_present(self, column: str = PROMPT) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per step: how many rows have a key in ``column``, and the first place (batch order) without one
        (None when every row has one)."""
        if column not in self._present:
            codes, _ = self.key_codes(column)
            if self.table.column(column).null_count == 0:
                self._present[column] = self.step_sizes, None
            else:
                missing = codes < 0
                keyed = torch.bincount(self.step[~missing], minlength=self.steps)
                missing_rank = torch.where(missing, self.rank, torch.iinfo(torch.int64).max)
                first_missing = torch.full((self.steps,), torch.iinfo(torch.int64).max, device=self.device)
                first_missing.scatter_reduce_(0, self.step, missing_rank, "amin")
                self._present[column] = keyed, first_missing
        return self._present[column]


def encode(table: pa.Table, device: str | torch.device = "auto") -> Encoded:
    """The tensors of a canonical table (``rollaudit.validate_table`` shape) on one device."""
    # The step column is read piece by piece, so a table of tiny chunks (one per step) is combined first.
    return Encoded(few_chunks(table, [STEP]), choose_device(device))
