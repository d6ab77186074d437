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


def _write_csv(table: pa.Table, path: Path) -> None:
    import pyarrow.csv as csv

    csv.write_csv(table, path)


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
