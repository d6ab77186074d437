"""Tables of named numpy columns: what a report holds and its renderers read, without pandas (a fifth of a second
of import). ``Report.summary`` and the other DataFrames are made from them on first access (``frames.py``)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np


class Masked(NamedTuple):
    """Integers of which some are missing (pandas' ``Int64``): the values, and True where one is missing."""

    values: np.ndarray
    missing: np.ndarray

    def take(self, rows: np.ndarray) -> Masked:
        return Masked(self.values[rows], self.missing[rows])

    def floats(self) -> np.ndarray:
        """The values as float64, NaN where missing."""
        return np.where(self.missing, np.nan, self.values.astype(np.float64))

    def objects(self) -> list[Any]:
        pairs = zip(self.values.tolist(), self.missing.tolist(), strict=True)
        return [None if missing else value for value, missing in pairs]


Column = np.ndarray | Masked


def as_column(values: Any) -> Column:
    """``values`` as a column, typed as pandas would type it: a list of ints and Nones is float64 with NaN (pandas
    makes such a column float), any other list an object array."""
    if isinstance(values, (np.ndarray, Masked)):
        return values
    items = list(values)
    present = [item for item in items if item is not None]
    if present and all(isinstance(item, int) and not isinstance(item, bool) for item in present):
        return np.array([math.nan if item is None else float(item) for item in items], dtype=np.float64)
    column = np.empty(len(items), dtype=object)
    column[:] = items
    return column


def _scalar(column: Column, row: int) -> Any:
    if isinstance(column, Masked):
        return None if column.missing[row] else column.values[row]
    return column[row]


def _kind(column: Column) -> str:
    """numpy's kind of a column's values; ``O`` for integers with missing values (as pandas' ``Int64``)."""
    return "O" if isinstance(column, Masked) else column.dtype.kind


class Columns:
    """Named columns of one length, in order; ``index``: the names of those that label the rows (pandas' index).
    ``raw``: the values each column was made from, for the DataFrame that ``frames.py`` makes of them."""

    def __init__(self, columns: Mapping[str, Any], index: Sequence[str] = (), raw: Mapping[str, Any] | None = None):
        self.raw = dict(columns) if raw is None else dict(raw)
        self.data: dict[str, Column] = {name: as_column(values) for name, values in columns.items()}
        self.index = tuple(index)
        self._length = len(next(iter(self.data.values()))) if self.data else 0

    def __len__(self) -> int:
        return self._length

    @property
    def names(self) -> list[str]:
        """The columns that are not the index, in order."""
        return [name for name in self.data if name not in self.index]

    @property
    def empty(self) -> bool:
        """As pandas' ``DataFrame.empty``: no rows, or no column."""
        return self._length == 0 or not self.names

    def column(self, name: str) -> np.ndarray:
        """A column of plain values (no missing integer)."""
        column = self.data[name]
        if isinstance(column, Masked):
            raise TypeError(f"column {name!r} has missing values")
        return column

    def floats(self, name: str) -> np.ndarray:
        """A numeric column as float64, NaN where a value is missing."""
        column = self.data[name]
        return column.floats() if isinstance(column, Masked) else column.astype(np.float64)

    @property
    def labels(self) -> list[Any]:
        """Each row's label (the one index column's values)."""
        (name,) = self.index
        column = self.data[name]
        return column.objects() if isinstance(column, Masked) else column.tolist()

    def position(self, label: Any) -> int:
        """The row labelled ``label`` (KeyError for none)."""
        labels = self.labels
        if label not in labels:
            raise KeyError(label)
        return labels.index(label)

    def value(self, label: Any, name: str) -> Any:
        """One value, typed as its column (pandas' ``frame.loc[label, name]``)."""
        return _scalar(self.data[name], self.position(label))

    def by_label(self) -> dict[Any, dict[str, Any]]:
        """``{label: {name: value}}``, each value typed as its column (pandas' ``to_dict(orient="index")``)."""
        if not self._length:
            return {}
        names = self.names
        return {label: {name: _scalar(self.data[name], at) for name in names} for at, label in enumerate(self.labels)}

    def row(self, label: Any) -> dict[str, Any]:
        """A row by its label, typed as pandas' ``frame.loc[label]`` types it (see ``row_at``)."""
        return self.row_at(self.position(label))

    def row_at(self, row: int) -> dict[str, Any]:
        """The non-index values of a row: numbers all float64 where some column is float and none is of objects
        or missing values (as pandas makes a row of such columns one float Series), else each as its column."""
        names = self.names
        kinds = {_kind(self.data[name]) for name in names}
        if kinds and kinds <= {"i", "u", "f"} and "f" in kinds:
            return {name: np.float64(_scalar(self.data[name], row)) for name in names}
        return {name: _scalar(self.data[name], row) for name in names}

    def rows(self) -> Iterator[tuple[Any, dict[str, Any]]]:
        """(label, row) of every row in order (pandas' ``iterrows``); the label is the row's place without index."""
        labels = self.labels if len(self.index) == 1 else range(self._length)
        for at, label in enumerate(labels):
            yield label, self.row_at(at)

    def without(self, name: str) -> Columns:
        """The table without the column ``name`` (the same table where it has none)."""
        if name not in self.data:
            return self
        raw = {key: values for key, values in self.raw.items() if key != name}
        return Columns({key: values for key, values in self.data.items() if key != name}, self.index, raw)

    def take(self, rows: np.ndarray) -> Columns:
        """The rows at ``rows``, in that order."""
        taken = {
            name: column.take(rows) if isinstance(column, Masked) else column[rows]
            for name, column in self.data.items()
        }
        return Columns(taken, self.index)

    def head(self, count: int) -> Columns:
        return self.take(np.arange(min(max(count, 0), self._length)))

    def records(self, with_index: bool = False) -> list[dict[str, Any]]:
        """The rows as JSON-ready dicts, converted column by column (``json_column``: a million rows in a second)."""
        from .._json import json_column

        names = list(self.data) if with_index else self.names
        columns = []
        for name in names:
            values = self.data[name]
            columns.append(values.objects() if isinstance(values, Masked) else json_column(values))
        if not names:
            return [{} for _ in range(self._length)]
        return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def descending(*keys: np.ndarray) -> np.ndarray:
    """The row order of float64 ``keys`` (the first sorts first), each largest first, NaN last, ties in row order:
    pandas' stable ``sort_values(ascending=False)``."""
    return np.lexsort(tuple(np.where(np.isnan(key), np.inf, -key) for key in reversed(keys)))


def row_max(columns: Sequence[np.ndarray], length: int) -> np.ndarray:
    """Each row's largest value over float64 ``columns``, NaN ignored (NaN where all are): pandas' ``max(axis=1)``."""
    if not columns:
        return np.full(length, np.nan)
    return np.fmax.reduce(np.vstack(columns), axis=0)
