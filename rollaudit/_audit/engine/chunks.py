"""Tables of tiny chunks made few: torch-free, for :mod:`..describe` as for :mod:`.encode`."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

SMALL_CHUNK_ROWS = 1 << 16
"""Fewer rows a chunk than this on average, and a column is combined before it is read (see ``few_chunks``)."""


def few_chunks(table: pa.Table, names: Iterable[str]) -> pa.Table:
    """``table`` with the columns ``names`` each in one chunk where their chunks average under
    :data:`SMALL_CHUNK_ROWS` rows, else as it is. A table joined from one piece per step can hold as many chunks as
    steps, and Arrow compute, group-bys and piece-by-piece passes cost per chunk: 250,000 chunks of two rows cost
    seconds where one chunk costs milliseconds. The copy is of the columns read, as big as the table's rows.

    >>> table = pa.table({"step": pa.chunked_array([[0], [1], [2]])})
    >>> few_chunks(table, ["step"]).column("step").num_chunks
    1
    """
    for name in names:
        column = table.column(name)
        if column.num_chunks > 1 + len(column) // SMALL_CHUNK_ROWS:
            combined = pa.chunked_array([column.combine_chunks()], column.type)
            table = table.set_column(table.column_names.index(name), table.schema.field(name), combined)
    return table
