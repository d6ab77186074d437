"""The cache of read tables: a second load of the same run reads no dump file.

Each file's read table is kept as Parquet under ``directory/v<schema>/<2 hex>/<sha256>.parquet``, keyed by the
file's absolute path, size and modification time, the reading options, the format requested and the code that
reads (rollaudit's version and the source of every module of the loading stage, whatever modules it holds): a
changed file is read again, an edited loader never serves a stale entry. Entries are written atomically; an
unreadable entry is a miss and is rewritten. Warnings a file raised are stored with its entry and raised again on
every load, so a cached load says what a fresh one says.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._errors import RollauditError, RollauditWarning, UsageError

if TYPE_CHECKING:
    import pyarrow as pa

    from ..options import LoadOptions
    from .item import WorkItem

CACHE_SCHEMA_VERSION = 1
_CACHE_METADATA_KEY = b"rollaudit.cache"
_LOADERS = Path(__file__).resolve().parents[1]
_PACKAGE = _LOADERS.parent
# Besides the loading stage itself: the modules it builds its tables with.
_SHARED_MODULES = ("_table.py", "_errors.py")


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/rollaudit``, else ``~/.cache/rollaudit``."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base and os.path.isabs(base) else Path.home() / ".cache") / "rollaudit"


def cache_directory(cache: str | os.PathLike[str] | bool | None) -> Path | None:
    """The directory of ``LoadOptions.cache``, created when missing: None/False none, True the default (without it
    the load goes on, with one warning), a path that directory (an error when it cannot be used)."""
    if cache is None or cache is False:
        return None
    if cache is True:
        directory = default_cache_dir()
        try:
            _check_cache_dir(directory)
        except UsageError as error:
            # The default cache is a convenience: without it the audit still runs, only slower.
            warnings.warn(f"no cache: {error.line()}", RollauditWarning, stacklevel=4)
            return None
        return directory
    directory = Path(cache)
    _check_cache_dir(directory)
    return directory


def _check_cache_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the cache directory ({error.strerror})", file=str(directory)) from None
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError("the cache directory is not writable", file=str(directory), expected="a writable directory")


def fingerprint_sources() -> list[Path]:
    """The source files the cache key covers: every module of the loading stage (whatever modules it holds: a new
    format needs no list to join) and the shared modules it builds tables with."""
    return sorted(_LOADERS.rglob("*.py")) + [_PACKAGE / name for name in _SHARED_MODULES]


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """rollaudit's version and the source of every module that decides what a read table holds."""
    from ..._version import __version__

    digest = hashlib.sha256(f"{__version__}|{CACHE_SCHEMA_VERSION}".encode())
    for path in fingerprint_sources():
        digest.update(str(path.relative_to(_PACKAGE)).encode())
        with contextlib.suppress(OSError):  # an installation without sources: the version decides
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _options_fingerprint(options: LoadOptions) -> str:
    values = options.reading()
    values.pop("format", None)  # the requested format is part of each entry's source
    if isinstance(values.get("reward_weights"), dict):
        values["reward_weights"] = sorted(values["reward_weights"].items())
    return json.dumps(values, sort_keys=True, default=repr)


# The warning categories an entry may name: looked up in this table, never imported (an entry is data, and a
# module named by a damaged or planted entry would run its import-time code). Anything else comes back as a
# RollauditWarning.
_CATEGORIES: dict[str, type[Warning]] = {
    f"{category.__module__}:{category.__qualname__}": category
    for category in (RollauditWarning, UserWarning, RuntimeWarning, DeprecationWarning, FutureWarning, Warning)
}


def _category_name(category: type[Warning]) -> str:
    name = f"{category.__module__}:{category.__qualname__}"
    return name if name in _CATEGORIES else _category_name(RollauditWarning)


def _checked_entry(stored: Any, source: dict[str, Any]) -> tuple[str, list[tuple[type[Warning], str]]] | None:
    """An entry's format and warnings when its stored record has the shape :meth:`Cache.put` writes and names
    ``source``; None (a miss) for anything else."""
    from ..registry import FORMATS

    if not isinstance(stored, dict) or set(stored) != {"source", "format", "warned"}:
        return None
    if stored["source"] != source or stored["format"] not in FORMATS or not isinstance(stored["warned"], list):
        return None
    warned = stored["warned"]
    if not all(
        isinstance(pair, list) and len(pair) == 2 and pair[0] in _CATEGORIES and isinstance(pair[1], str)
        for pair in warned
    ):
        return None
    return stored["format"], [(_CATEGORIES[name], message) for name, message in warned]


@dataclass
class CacheEntry:
    format: str
    table: pa.Table
    warned: list[tuple[type[Warning], str]]


class Cache:
    """Read tables as Parquet files under ``directory/v<schema>/<2 hex>/<sha256>.parquet``."""

    def __init__(self, directory: Path, options: LoadOptions) -> None:
        self.directory = directory / f"v{CACHE_SCHEMA_VERSION}"
        self._options = _options_fingerprint(options)
        self._unwritable = False  # once an entry could not be written (a full disk), the load stops trying

    def _source(self, item: WorkItem) -> dict[str, Any]:
        # Size, modification time, inode and change time: a same-size rewrite with its mtime put back still moves
        # the ctime, and a file replaced by another has another inode.
        source = {"path": str(item.absolute), "size": item.size, "mtime_ns": item.mtime_ns}
        return source | {"inode": item.inode, "ctime_ns": item.ctime_ns, "format": item.requested_format}

    def path(self, item: WorkItem) -> Path:
        """Where the entry of ``item`` lives: the hash of everything that decides its read table."""
        key = json.dumps([code_fingerprint(), self._options, self._source(item)], sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self.directory / digest[:2] / f"{digest}.parquet"

    def get(self, item: WorkItem) -> CacheEntry | None:
        """The entry of ``item``, or None when there is none or it cannot be read (a miss; rewritten later)."""
        import pyarrow.parquet as pq

        location = self.path(item)
        if not location.is_file():
            return None
        try:
            with pq.ParquetFile(location) as parquet:  # one file, never a dataset (no partitions from its path)
                table = parquet.read()
            metadata = dict(table.schema.metadata or {})
            checked = _checked_entry(json.loads(metadata.pop(_CACHE_METADATA_KEY)), self._source(item))
            if checked is None:
                return None
            return CacheEntry(format=checked[0], table=table.replace_schema_metadata(metadata), warned=checked[1])
        except Exception:  # any damage to an entry is a miss, never an error
            return None

    def put(self, item: WorkItem, format_name: str, table: pa.Table, warned: list[tuple[type[Warning], str]]) -> None:
        """Store a read table; a file that changed while it was read, or an entry that cannot be written, is not
        cached (the load itself goes on)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ..._output import write_atomic

        if self._unwritable:
            return
        try:
            stat = item.path.stat()
        except OSError:
            return
        if (stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns) != (
            item.size,
            item.mtime_ns,
            item.inode,
            item.ctime_ns,
        ):
            return
        stored = {
            "source": self._source(item),
            "format": format_name,
            "warned": [[_category_name(category), message] for category, message in warned],
        }
        metadata = dict(table.schema.metadata or {})
        metadata[_CACHE_METADATA_KEY] = json.dumps(stored).encode()
        location = self.path(item)
        try:
            location.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(location, lambda temporary: pq.write_table(table.replace_schema_metadata(metadata), temporary))
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return  # a column type Parquet cannot hold: this file is simply not cached; the disk is fine
        except (OSError, RollauditError, pa.ArrowException) as error:
            self._unwritable = True  # one warning, not one per file: the next entry would fail the same way
            reason = error.line() if isinstance(error, RollauditError) else error
            warnings.warn(
                f"cache entries not written from here on ({reason}); the load goes on without them",
                RollauditWarning,
                stacklevel=4,
            )
