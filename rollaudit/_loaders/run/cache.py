"""The cache of read tables: a second load of the same run reads no dump file.

Each file's read table is kept as Parquet under ``directory/v<schema>/<2 hex>/<sha256>.parquet``, keyed by the
file's absolute path, size and modification time, the reading options, the format requested and the code that
reads (rollaudit's version and the source of every module of the loading stage, whatever modules it holds): a
changed file is read again, an edited loader never serves a stale entry. Entries are written atomically; an
unreadable entry is a miss and is rewritten. Warnings a file raised are stored with its entry and raised again on
every load, so a cached load says what a fresh one says.

An entry is as untrusted as a dump (a cache may be shared, or restored by CI): it is read through the same
memory-capped reader as Parquet dumps, and any entry that is not what this user's rollaudit wrote is a miss. The
cache follows no link it did not create (entries are opened without following links, written through a temporary
of its own and renamed only over a regular file or nothing), and a cache directory other users can write is
refused, with one warning, unless it is sticky (as ``/tmp``): then only the user's own entries count.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._errors import RollauditError, RollauditWarning, UsageError, warn

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


def default_cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME/rollaudit``, else ``~/.cache/rollaudit``; None without a home directory (HOME unset and no
    passwd entry, as in a container run with an arbitrary user id; or a HOME that is no absolute path, which would
    put the cache wherever the command runs)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if base and os.path.isabs(base):
        return Path(base) / "rollaudit"
    # HOME, else the passwd entry ("~" itself when there is none); an empty HOME, which Python reads as "/", is none.
    home = os.environ.get("HOME")
    if home is None:
        home = os.path.expanduser("~")
    return Path(home) / ".cache" / "rollaudit" if os.path.isabs(home) else None


def cache_directory(cache: str | os.PathLike[str] | bool | None) -> Path | None:
    """The directory of ``LoadOptions.cache``, created when missing: None/False none, True the default (without it
    the load goes on, with one warning), a path that directory (an error when it cannot be used). A directory other
    users can write is no cache either way (one warning)."""
    if cache is None or cache is False:
        return None
    if cache is True:
        directory = default_cache_dir()
        try:
            if directory is None:
                raise UsageError(
                    "no home directory to keep it in", expected="XDG_CACHE_HOME or HOME set, or --cache DIR"
                )
            _check_cache_dir(directory)
        except UsageError as error:
            # The default cache is a convenience: without it the audit still runs, only slower.
            warn(f"no cache: {error.line()}", RollauditWarning)
            return None
    else:
        directory = Path(cache)
        _check_cache_dir(directory)
    if _open_to_others(directory.stat().st_mode):
        refusal = UsageError(
            "writable by other users, who could plant entries and links in it",
            file=str(directory),
            expected="a directory only you can write (chmod go-w), or a sticky one (chmod +t)",
        )
        warn(f"no cache: {refusal.line()}", RollauditWarning)
        return None
    return directory


def _check_cache_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the cache directory ({error.strerror})", file=str(directory)) from None
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError("the cache directory is not writable", file=str(directory), expected="a writable directory")


def _open_to_others(mode: int) -> bool:
    """Writable by its group or by anyone, and not sticky: others can replace or link what is in it."""
    return bool(mode & (stat.S_IWGRP | stat.S_IWOTH)) and not mode & stat.S_ISVTX


def _own(status: os.stat_result) -> bool:
    return not hasattr(os, "geteuid") or status.st_uid == os.geteuid()


def _trusted_directory(path: Path, *, create: bool) -> bool:
    """Whether ``path`` (made now when ``create``, only this user can write it) is a directory, not a link to one,
    of this user's own that only this user can write, or sticky."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    try:
        status = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(status.st_mode) and _own(status) and not _open_to_others(status.st_mode)


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


def _shape(table: pa.Table) -> str:
    """What a read table says beyond its values: its columns' names and types, and its format's own metadata
    (slime's step and kind, verl's shared inputs). Stored with an entry, it makes an entry changed since it was
    written a miss rather than a table its format cannot combine."""
    import pyarrow as pa

    # The capped reader decodes dictionary columns: the value type is what an entry holds, either way.
    columns = [
        [field.name, str(field.type.value_type if pa.types.is_dictionary(field.type) else field.type)]
        for field in table.schema
    ]
    metadata = sorted(
        [key.hex(), value.hex()] for key, value in (table.schema.metadata or {}).items() if key != _CACHE_METADATA_KEY
    )
    return hashlib.sha256(json.dumps([columns, metadata]).encode()).hexdigest()


def _checked_entry(
    stored: Any, source: dict[str, Any], table: pa.Table
) -> tuple[str, list[tuple[type[Warning], str]]] | None:
    """An entry's format and warnings when its stored record has the shape :meth:`Cache.put` writes, names
    ``source`` and describes ``table``; None (a miss) for anything else."""
    from ..registry import FORMATS

    if not isinstance(stored, dict) or set(stored) != {"source", "format", "warned", "shape", "nulls"}:
        return None
    if stored["source"] != source or stored["format"] not in FORMATS or not isinstance(stored["warned"], list):
        return None
    if stored["shape"] != _shape(table):
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

    def may_hold(self, item: WorkItem) -> bool:
        """Whether an entry of ``item`` seems to be there (``get`` checks it)."""
        return self.path(item).is_file()

    def get(self, item: WorkItem) -> CacheEntry | None:
        """The entry of ``item``, or None when there is none or it cannot be read (a miss; rewritten later)."""
        location = self.path(item)
        if not (_trusted_directory(self.directory, create=False) and _trusted_directory(location.parent, create=False)):
            return None
        if not _NO_FOLLOW and location.is_symlink():
            return None
        try:
            # Never through a link, and without waiting on a FIFO: what is opened is checked, then read.
            descriptor = os.open(location, os.O_RDONLY | _NO_FOLLOW | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return None
        try:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode) or not _own(status):
                return None  # a device, a FIFO, or another user's entry in a shared sticky directory
            table, stored = _read_entry(location, descriptor)
            metadata = dict(table.schema.metadata or {})
            metadata.pop(_CACHE_METADATA_KEY)
            checked = _checked_entry(stored, self._source(item), table)
            if checked is None:
                return None
            return CacheEntry(format=checked[0], table=table.replace_schema_metadata(metadata), warned=checked[1])
        except Exception:  # any damage to an entry is a miss, never an error
            return None
        finally:
            os.close(descriptor)

    def put(self, item: WorkItem, format_name: str, table: pa.Table, warned: list[tuple[type[Warning], str]]) -> None:
        """Store a read table; a file that changed while it was read, or an entry that cannot be written, is not
        cached (the load itself goes on)."""
        import pyarrow as pa

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
            "shape": _shape(table),
            "nulls": [name for name in table.column_names if _shared_nulls(table.column(name))],
        }
        metadata = dict(table.schema.metadata or {})
        metadata[_CACHE_METADATA_KEY] = json.dumps(stored).encode()
        location = self.path(item)
        try:
            for directory in (self.directory, location.parent):
                if not _trusted_directory(directory, create=True):
                    raise UsageError(
                        "is a link, another user's, or writable by other users",
                        file=str(directory),
                        expected="a directory of yours only you can write",
                    )
            _write_entry(location, table.replace_schema_metadata(metadata))
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return  # a column type Parquet cannot hold: this file is simply not cached; the disk is fine
        except (OSError, RollauditError, pa.ArrowException) as error:
            self._unwritable = True  # one warning, not one per file: the next entry would fail the same way
            reason = error.line() if isinstance(error, RollauditError) else error
            warn(
                f"cache entries not written from here on ({reason}); the load goes on without them",
                RollauditWarning,
            )


_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _shared_nulls(column: pa.ChunkedArray) -> bool:
    """Whether ``column`` is all null and of a type :func:`nulls` makes without writing its buffers."""
    import pyarrow as pa

    shared = (pa.int64(), pa.float64(), pa.string())
    return len(column) > 0 and column.null_count == len(column) and column.type in shared


def _read_entry(location: Path, descriptor: int) -> tuple[pa.Table, Any]:
    """The table of the entry open as ``descriptor`` and its stored record, read by the memory-capped reader that
    reads Parquet dumps (a few kilobytes of Parquet can decode to gigabytes). Read through the descriptor where the
    system names it as a path: the file checked is the file read, whatever has become of ``location`` since.

    The columns the record names as all null are not read but made as :func:`nulls` makes them, one block of
    zeros the system never maps, as the loaders do: read, each would hold its rows' bytes (a 12M-row table's four
    unknown columns, 350 MB). A record naming a column that held values would show nulls where a forger could as
    well have written them."""
    import pyarrow as pa

    from ..._table import nulls
    from ..arrow import capped

    opened = Path(f"/proc/{os.getpid()}/fd/{descriptor}")
    source = opened if opened.exists() else location
    schema = capped.arrow_schema(source, "parquet")
    stored = json.loads((schema.metadata or {})[_CACHE_METADATA_KEY])
    absent = set(stored.get("nulls", []) if isinstance(stored, dict) else [])
    present = [name for name in schema.names if name not in absent]
    if not present or len(present) + len(absent) != len(schema.names):
        present = schema.names  # nothing to count the rows by, or names that are not the schema's: read it all
    table = capped.read_arrow(source, "parquet", present)
    if len(present) == len(schema.names):
        return table, stored
    columns = [
        table.column(field.name) if field.name in table.column_names else nulls(table.num_rows, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema), stored


def _write_entry(location: Path, table: pa.Table) -> None:
    """Write ``table`` whole to ``location``: into a new temporary file of its own beside it, renamed only over a
    regular file or nothing (a link, a FIFO or a device planted there is neither followed nor replaced)."""
    import pyarrow.parquet as pq

    from ..._output import sweep_stale

    try:
        if not stat.S_ISREG(os.lstat(location).st_mode):
            return
    except FileNotFoundError:
        pass
    sweep_stale(location)  # what a killed process left beside it
    descriptor, name = tempfile.mkstemp(prefix=f".{location.name}.{os.getpid()}.", suffix=".tmp", dir=location.parent)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            pq.write_table(table, stream)
        os.replace(name, location)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
