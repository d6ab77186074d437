"""The canonical table written to a file (``rollaudit convert``), the format chosen by the file's extension."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import UsageError

if TYPE_CHECKING:
    import pyarrow as pa


def _write_parquet(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, path)


def _write_feather(table: pa.Table, path: Path) -> None:
    import pyarrow.feather as feather

    feather.write_feather(table, path)


def _write_arrow(table: pa.Table, path: Path) -> None:
    # Uncompressed IPC: readable by every Arrow implementation, not only those built with lz4.
    import pyarrow.feather as feather

    feather.write_feather(table, path, compression="uncompressed")


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet read a CSV cell as a formula (OWASP's CSV injection list)."""
_FORMULA_START = "^[=+\\-@\t\r]"


def _neutralised_text(values: pa.Array) -> pa.Array:
    """Text cells that a spreadsheet would run as a formula, with a leading ``'`` (OWASP's advice: the cell is
    then shown as the text it is); other cells, and every non-text column, as they are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(values.type):  # keys: each distinct text once
        return pa.DictionaryArray.from_arrays(values.indices, _neutralised_text(values.dictionary))
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return values
    quoted = pc.binary_join_element_wise(pa.scalar("'", values.type), values, pa.scalar("", values.type))
    return pc.if_else(pc.match_substring_regex(values, _FORMULA_START), quoted, values)


def _csv_safe(table: pa.Table) -> pa.Table:
    """The table with no header and no text cell that a spreadsheet would run (numbers stay numbers)."""
    import pyarrow as pa

    names = ["'" + name if name.startswith(FORMULA_STARTS) else name for name in table.column_names]
    columns = [
        pa.chunked_array([_neutralised_text(chunk) for chunk in column.chunks], column.type) for column in table.columns
    ]
    return pa.table(columns, names=names)


def _write_csv(table: pa.Table, path: Path) -> None:
    import pyarrow.csv as csv

    csv.write_csv(_csv_safe(table), path)


def _json_ready(value: Any) -> Any:
    """NaN and inf become null: JSON has no such numbers."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_ready(item) for item in value]
    return value


def _write_jsonl(table: pa.Table, path: Path) -> None:
    with path.open("w", encoding="utf-8") as stream:
        for batch in table.to_batches(max_chunksize=65_536):
            for row in batch.to_pylist():
                stream.write(json.dumps(_json_ready(row), allow_nan=False, default=str) + "\n")


TABLE_WRITERS: dict[str, Callable[[Any, Path], None]] = {
    ".parquet": _write_parquet,
    ".pq": _write_parquet,
    ".feather": _write_feather,
    ".arrow": _write_arrow,
    ".ipc": _write_arrow,
    ".csv": _write_csv,
    ".jsonl": _write_jsonl,
    ".ndjson": _write_jsonl,
}
"""Output extension -> writer of a pyarrow table to a (temporary) path."""


def write_table_file(table: pa.Table, path: Path, extension: str) -> None:
    """Write ``table`` to ``path`` in the format of ``extension``; a column the format cannot hold is one line."""
    import pyarrow as pa

    try:
        TABLE_WRITERS[extension](table, path)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
        # e.g. a pass-through column of empty structs for Parquet, or nested values for CSV
        others = ", ".join(name for name in (".parquet", ".arrow", ".jsonl") if name != extension)
        raise UsageError(
            f"cannot write this table as {extension}: {' '.join(str(error).split())}",
            expected=f"another output format ({others})",
        ) from None
