"""JSON-ready values: what every JSON document rollaudit writes goes through; and the bounded reading of the small
files that are no dump (a gate config, a baseline), which a pull request can point anywhere."""

from __future__ import annotations

import math
import os
import stat
import sys
from collections.abc import Mapping
from typing import Any

from ._errors import UsageError

MAX_SMALL_FILE_BYTES = 16 << 20
"""Largest config or baseline read (they are kilobytes: one number per metric and scheme, one step number per
step)."""


def json_value(value: Any) -> Any:
    """A JSON-ready copy: numpy scalars to Python, NaN, inf and pandas' NA to None (undefined).

    >>> json_value({"mean": float("nan"), "sizes": (1, 2)})
    {'mean': None, 'sizes': [1, 2]}
    """
    if isinstance(value, dict):
        return json_object(value)
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    pandas = sys.modules.get("pandas")  # pandas' NA can only come from pandas, already imported then
    if pandas is not None and value is pandas.NA:
        return None
    return value


def json_object(document: Mapping[Any, Any]) -> dict[str, Any]:
    """``json_value`` of a document, typed as the JSON object it is: string keys, JSON-ready values."""
    return {str(key): json_value(item) for key, item in document.items()}


def json_column(values: Any) -> list[Any]:
    """A numpy column as JSON-ready values: floats with NaN and infinities as None (undefined), integers and
    booleans as they are, anything else through ``json_value`` (whole columns at a time, not value by value)."""
    import numpy as np

    if values.dtype.kind == "f":
        boxed = values.astype(object)
        boxed[~np.isfinite(values)] = None
        return list(boxed.tolist())
    if values.dtype.kind in "iub":
        return list(values.tolist())
    return [json_value(value) for value in values.tolist()]


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def read_small_file(path: str | os.PathLike[str], limit: int = MAX_SMALL_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (symlinks followed). A device, a FIFO, a socket or
    a larger file is a one-line UsageError before a byte is read, and nothing here can block: the file is opened
    non-blocking and checked on the descriptor read from, so a swap after the first look changes nothing. A
    missing file or a directory raises FileNotFoundError or IsADirectoryError, for the caller to word."""
    where = os.fspath(path)
    expected = f"a regular file under {limit >> 20} MiB"
    mode = os.stat(path).st_mode  # a device is not even opened: opening some has effects (a tape rewinds)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "Is a directory", where)
    if not stat.S_ISREG(mode):
        raise UsageError(f"is {_kind(mode)}", file=where, expected=expected)
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise UsageError(f"is {_kind(status.st_mode)}", file=where, expected=expected)
        if status.st_size > limit:
            raise UsageError(f"is {status.st_size} bytes", file=where, expected=expected)
        chunks, total = [], 0
        while chunk := os.read(descriptor, min(1 << 20, limit + 1 - total)):  # a file growing as it is read
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise UsageError(f"grew past {limit} bytes as it was read", file=where, expected=expected)
        return b"".join(chunks)
    finally:
        os.close(descriptor)
