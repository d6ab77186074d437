"""One dump file of a load, wherever it is read: the path as given, where it is, and what reads it.

Its identity (absolute path, size, modification and change times, inode) is the cache's key for the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..._errors import InputError


@dataclass(frozen=True)
class WorkItem:
    """One dump file: the path as given (named in messages), and where and what to read."""

    path: Path
    absolute: Path
    size: int
    mtime_ns: int
    requested_format: str | None = None  # load()'s format: None to detect by content (part of the cache key)
    format: str | None = None  # the format that reads it: requested, or detected after a cache miss
    inode: int = 0
    ctime_ns: int = 0

    @classmethod
    def of(cls, path: Path, format: str | None) -> WorkItem:
        try:
            stat = path.stat()
        except OSError as error:  # gone since the directory was listed
            raise InputError(f"cannot read: {error.strerror}", file=str(path)) from None
        absolute = path.absolute()
        return cls(
            path,
            absolute,
            stat.st_size,
            stat.st_mtime_ns,
            requested_format=format,
            format=format,
            inode=stat.st_ino,
            ctime_ns=stat.st_ctime_ns,
        )
