"""The cache of read tables: a second load of the same run reads no dump file.

Windows. A load's files, in the load's order, fall in windows of ``WINDOW_FILES`` consecutive files at fixed
positions (files 0-255, 256-511, ...), and a window is kept as one entry: its files' read tables concatenated into
one Parquet table, with a record of each file (where it was when read, the format that read it, its rows, its
table's own schema metadata, the warnings it raised). A warm load of a 400-file run reads two entries, not 400
(each entry read costs a round trip to the capped reader's child and a Parquet footer, whatever its size); a file's
table comes back as a zero-copy slice of its window's, its own metadata put back (formats keep their own there,
and it differs from file to file: verl's padding rows, slime's step and kind), so that each format's ``combine``
sees what a fresh read gives. Its warnings are raised again on every load, so a cached load says what a fresh one
says.

Where. An entry lives at ``directory/v<schema>/<2 hex>/<sha256>.parquet``, the hash of the code that reads
(rollaudit's version and the source of every module of the loading stage, whatever modules it holds: an edited
loader never serves a stale entry), the reading options, the format requested, and the window's position and first
file: not its files' states. A window's entry therefore stays where it is while its files change, and is replaced,
never joined by another: when a run grows by new step files (``rollaudit watch``), the windows before the last are
served as they are, and the last one is written again, new files and all (only they are read). A file added or
removed in the middle of the order moves the bounds of the windows after it: each is then looked up at its new first
file, read again and written, and the entries at the old places are left behind; a run growing at its end moves none.

Freshness is by stat, as git's index does it, never by hashing a dump's bytes: a file's record is served only to a
file with its absolute path, size, mtime_ns, ctime_ns and inode (a rewrite that puts the mtime back still moves the
ctime; a file replaced by another has another inode). A file of the window that the entry does not hold so (changed,
added) is read again; the window's other files are still served from the entry, as a file's read table depends on
that file alone, and the window is written again once all its files are in (as is one that lost a file). A window
one of whose files failed to read is not written, and a file that changed while it was read is left out of it.

Tables of different schemas. A window's table is kept in parts: a new part begins where the columns (names, types,
field metadata) change from one file to the next (slime's rollout and train dumps), and where a part would pass
``PART_ROWS`` rows or ``PART_BYTES`` bytes of table, so that the reader's bounds never refuse a window whose files
each passed them. Part 0 is the entry, its record naming every file's part and rows; parts 1, 2, ... lie beside it
as ``<sha256>-<n>.parquet``, each naming the write it came from (a part of another write is a miss). One schema per
part, rather than a table widened to every file's columns and cut back to each file's, keeps what comes back exactly
what was read, column types included; most runs' windows are one part, as their files' columns are the same.

An entry is as untrusted as a dump (a cache may be shared, or restored by CI): it is read through the same
memory-capped reader as Parquet dumps, and any entry that is not what this user's rollaudit wrote (unreadable,
another user's, a record of another shape or that does not describe its table) is a miss, and the window is
rewritten. The cache follows no link it did not create (entries are opened without following links, written through
a temporary of their own and renamed only over a regular file or nothing), and a cache directory other users can
write is refused, with one warning, unless it is sticky (as ``/tmp``): then only the user's own entries count. A
write that fails (a full disk) warns once, and the load goes on without writing more.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._errors import RollauditError, RollauditWarning, UsageError, warn

if TYPE_CHECKING:
    import pyarrow as pa

    from ..options import LoadOptions
    from .item import WorkItem

CACHE_SCHEMA_VERSION = 2
WINDOW_FILES = 256
"""Files per window: a warm load reads one entry per this many files; a run that grows rewrites at most this many
files' tables (its last window's), without reading them again."""
PART_ROWS = 1 << 20
"""Rows at most in one part of a window (one file's table may hold more: it is a part of its own). The capped
reader refuses a Parquet file with more than 16 rows a byte beyond its first 2**20."""
PART_BYTES = 256 << 20
"""Bytes of table at most in one part (or one file's): a quarter of what the capped reader lets any file decode to."""
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
    values.pop("format", None)  # the requested format is part of each window's key and file's source
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


def _columns(schema: pa.Schema) -> list[list[str]]:
    """A schema's columns' names and types."""
    import pyarrow as pa

    # The capped reader decodes dictionary columns: the value type is what an entry holds, either way.
    return [
        [field.name, str(field.type.value_type if pa.types.is_dictionary(field.type) else field.type)]
        for field in schema
    ]


def _metadata_pairs(schema: pa.Schema) -> list[list[str]]:
    """A table's own schema metadata (the cache's key left out), as hex pairs in order."""
    items = (schema.metadata or {}).items()
    return sorted([key.hex(), value.hex()] for key, value in items if key != _CACHE_METADATA_KEY)


def _shape(tables: Sequence[pa.Table], metadata: list[list[list[str]]]) -> str:
    """What a window's tables say beyond their values: each part's columns' names and types, and the schema metadata
    of its files (formats keep their own there: slime's step and kind, verl's padding rows), as the record lists
    them. Stored in the record, it makes an entry changed since it was written a miss rather than a table its
    format cannot combine."""
    return hashlib.sha256(json.dumps([[_columns(table.schema) for table in tables], metadata]).encode()).hexdigest()


# A window's record (in part 0) lists its files column by column, each file's metadata and warnings as an index into
# the lists of the distinct ones (most files of a run share theirs): a record of a file each, 110 KB for 256 verl
# files, was parsed in each of the three reads of the footer (the footer itself, its bound in the capped reader's
# child, the read) and cost as much as reading the 100,000 rows.
_FILE_COLUMNS = ("path", "size", "mtime_ns", "inode", "ctime_ns", "format", "part", "rows", "metadata", "warned")
_PART_FIELDS = {"key", "write", "part", "nulls"}
_INDEX_FIELDS = _PART_FIELDS | {"parts", "requested", "files", "metadata", "warned", "shape"}

Source = tuple[str, int, int, int, int]
"""A file's absolute path, size, mtime_ns, inode and ctime_ns: what its record must name to be served to it."""


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _checked_warnings(warned: Any) -> list[tuple[type[Warning], str]] | None:
    if not isinstance(warned, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and pair[0] in _CATEGORIES and isinstance(pair[1], str)
        for pair in warned
    ):
        return None
    return [(_CATEGORIES[name], message) for name, message in warned]


def _checked_metadata(pairs: Any) -> dict[bytes, bytes] | None:
    if not isinstance(pairs, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(text, str) for text in pair) for pair in pairs
    ):
        return None
    try:
        metadata = {bytes.fromhex(key): bytes.fromhex(value) for key, value in pairs}
    except ValueError:
        return None
    return None if _CACHE_METADATA_KEY in metadata or len(metadata) != len(pairs) else metadata


def _entries(index: dict[str, Any], tables: list[pa.Table]) -> list[tuple[Source, CacheEntry]] | None:
    """The entries a window's record names, each a slice of its part's table with its own metadata; None (a miss)
    unless the record has the shape :func:`_write_window` writes and describes the parts' tables, every row."""
    from ..registry import FORMATS

    files, distinct_metadata, distinct_warned = index["files"], index["metadata"], index["warned"]
    if not (isinstance(files, dict) and set(files) == set(_FILE_COLUMNS)):
        return None
    columns = [files[name] for name in _FILE_COLUMNS]
    if not all(isinstance(column, list) and len(column) == len(columns[0]) for column in columns):
        return None
    if not (isinstance(distinct_metadata, list) and isinstance(distinct_warned, list)):
        return None
    metadata = [_checked_metadata(pairs) for pairs in distinct_metadata]
    warned = [_checked_warnings(messages) for messages in distinct_warned]
    if any(value is None for value in metadata) or any(value is None for value in warned):
        return None
    if index["shape"] != _shape(tables, distinct_metadata):
        return None
    offsets = [0] * len(tables)
    entries: list[tuple[Source, CacheEntry]] = []
    for path, size, mtime_ns, inode, ctime_ns, format_name, part, rows, own, raised in zip(*columns, strict=True):
        if not (isinstance(path, str) and isinstance(format_name, str) and format_name in FORMATS):
            return None
        if not all(_is_count(value) for value in (size, mtime_ns, inode, ctime_ns, part, rows, own, raised)):
            return None
        if part >= len(tables) or own >= len(metadata) or raised >= len(warned):
            return None
        if offsets[part] + rows > tables[part].num_rows:
            return None
        table = tables[part].slice(offsets[part], rows).replace_schema_metadata(metadata[own])
        offsets[part] += rows
        entry = CacheEntry(format=format_name, table=table, warned=list(warned[raised] or []))
        entries.append(((path, size, mtime_ns, inode, ctime_ns), entry))
    if offsets != [table.num_rows for table in tables]:
        return None
    return entries


@dataclass
class CacheEntry:
    format: str
    table: pa.Table
    warned: list[tuple[type[Warning], str]]


class Cache:
    """Read tables, a window of files to an entry, under ``directory/v<schema>/<2 hex>/<sha256>.parquet``.

    One load's: :meth:`get` looks its files up, :meth:`read` takes each file read instead, and writes a window once
    all its files are in."""

    def __init__(self, directory: Path, options: LoadOptions) -> None:
        self.directory = directory / f"v{CACHE_SCHEMA_VERSION}"
        self._options = _options_fingerprint(options)
        self._unwritable = False  # once an entry could not be written (a full disk), the load stops trying
        self._items: list[WorkItem] = []
        self._found: list[CacheEntry | None] = []
        self._fresh: set[int] = set()  # the files read by this load, not found in the cache
        self._waiting: dict[int, set[int]] = {}  # window start -> its files not read yet

    @staticmethod
    def _source(item: WorkItem) -> Source:
        """Where ``item`` is, as a record names it (the format requested is the window's, named once)."""
        # Size, modification time, inode and change time: a same-size rewrite with its mtime put back still moves
        # the ctime, and a file replaced by another has another inode.
        return (str(item.absolute), item.size, item.mtime_ns, item.inode, item.ctime_ns)

    def location(self, items: Sequence[WorkItem], start: int) -> tuple[Path, str]:
        """Where the entry of the window of ``items`` at ``start`` lives, and its key: the hash of what decides
        its files' read tables, but their states (each file's record names those)."""
        first = items[start]
        key = [code_fingerprint(), self._options, first.requested_format, start, str(first.absolute)]
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
        return self.directory / digest[:2] / f"{digest}.parquet", digest

    def may_hold(self, items: Sequence[WorkItem]) -> bool:
        """Whether an entry of the first window of ``items`` seems to be there (``get`` checks it)."""
        return bool(items) and self.location(items, 0)[0].is_file()

    def get(self, items: Sequence[WorkItem]) -> list[CacheEntry | None]:
        """The entry of each of ``items``: None where there is none, or its window's cannot be read (a miss; its
        window is written again once :meth:`read` has had all the files it misses)."""
        self._items = list(items)
        self._found = [None] * len(items)
        self._fresh = set()
        self._waiting = {}
        for start in range(0, len(items), WINDOW_FILES):
            window = range(start, min(start + WINDOW_FILES, len(items)))
            stored = self._stored(*self.location(items, start), items[start].requested_format)
            sources = [self._source(items[index]) for index in window]
            if stored is not None:
                by_source = dict(stored)
                for index, source in zip(window, sources, strict=True):
                    self._found[index] = by_source.get(source)
            missing = {index for index in window if self._found[index] is None}
            if missing:
                self._waiting[start] = missing
            elif stored is None or [source for source, _ in stored] != sources:
                self._write(start)  # every file served, but the entry holds others too: kept to the window's own
        return list(self._found)

    def read(self, index: int, entry: CacheEntry) -> None:
        """The table the load read of its file at ``index``; its window is written once all its files are in."""
        self._found[index] = entry
        self._fresh.add(index)
        start = index - index % WINDOW_FILES
        waiting = self._waiting.get(start)
        if waiting is None:
            return
        waiting.discard(index)
        if not waiting:
            del self._waiting[start]
            self._write(start)

    def _stored(self, location: Path, key: str, requested: str | None) -> list[tuple[Source, CacheEntry]] | None:
        """The entries of a window's entry, in its order, by source; None when there is none or it cannot be read."""
        if not (_trusted_directory(self.directory, create=False) and _trusted_directory(location.parent, create=False)):
            return None
        try:
            first = _read_part(location)
            if first is None:
                return None
            table, index = first
            if not (isinstance(index, dict) and set(index) == _INDEX_FIELDS and index["key"] == key):
                return None
            if index["requested"] != requested:
                return None
            parts = index["parts"]
            if index["part"] != 0 or not (_is_count(parts) and 1 <= parts <= WINDOW_FILES):
                return None
            tables = [table]
            for number in range(1, parts):
                read = _read_part(_part_location(location, number))
                if read is None:
                    return None
                table, record = read
                if not (isinstance(record, dict) and set(record) == _PART_FIELDS):
                    return None
                if (record["key"], record["write"], record["part"]) != (key, index["write"], number):
                    return None  # a part of another write, or of another window
                tables.append(table)
            return _entries(index, tables)
        except Exception:  # any damage to an entry is a miss, never an error
            return None

    def _write(self, start: int) -> None:
        """Store the window at ``start``: the files it has entries of, less those that changed while they were
        read. An entry that cannot be written is not (the load itself goes on)."""
        import pyarrow as pa

        if self._unwritable:
            return
        window = range(start, min(start + WINDOW_FILES, len(self._items)))
        files: list[tuple[Source, CacheEntry]] = []
        for index in window:
            item, entry = self._items[index], self._found[index]
            if entry is not None and (index not in self._fresh or _unchanged(item)):
                files.append((self._source(item), entry))
        location, key = self.location(self._items, start)
        try:
            for directory in (self.directory, location.parent):
                if not _trusted_directory(directory, create=True):
                    raise UsageError(
                        "is a link, another user's, or writable by other users",
                        file=str(directory),
                        expected="a directory of yours only you can write",
                    )
            while files:
                try:
                    _write_window(location, key, self._items[start].requested_format, files)
                    return
                except _Unwritable as refused:  # a column type Parquet cannot hold: those files are not cached
                    files = [file for number, file in enumerate(files) if number not in refused.files]
        except (OSError, RollauditError, pa.ArrowException) as error:
            self._unwritable = True  # one warning, not one per window: the next entry would fail the same way
            reason = error.line() if isinstance(error, RollauditError) else error
            warn(
                f"cache entries not written from here on ({reason}); the load goes on without them",
                RollauditWarning,
            )


def _unchanged(item: WorkItem) -> bool:
    """Whether ``item``'s file is as it was when it was listed (then read)."""
    try:
        status = item.path.stat()
    except OSError:
        return False
    current = (status.st_size, status.st_mtime_ns, status.st_ino, status.st_ctime_ns)
    return current == (item.size, item.mtime_ns, item.inode, item.ctime_ns)


_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _part_location(location: Path, number: int) -> Path:
    return location if number == 0 else location.with_name(f"{location.stem}-{number}.parquet")


def _read_part(location: Path) -> tuple[pa.Table, Any] | None:
    """The table of one part of an entry and its stored record; None where it is not this user's regular file."""
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
        return _read_entry(location, descriptor)
    finally:
        os.close(descriptor)


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


def _parts(tables: list[pa.Table]) -> list[list[int]]:
    """The tables of a window (by position) in parts: runs of the same columns (names, types, field metadata) of
    at most ``PART_ROWS`` rows and ``PART_BYTES`` bytes, or one table that holds more."""
    parts: list[list[int]] = []
    columns: pa.Schema | None = None
    rows = size = 0
    for number, table in enumerate(tables):
        plain = table.schema.remove_metadata()
        full = rows + table.num_rows > PART_ROWS or size + table.nbytes > PART_BYTES
        if columns is None or full or not plain.equals(columns, check_metadata=True):
            parts.append([])
            columns, rows, size = plain, 0, 0
        parts[-1].append(number)
        rows += table.num_rows
        size += table.nbytes
    return parts


class _Unwritable(Exception):
    """A part holds a column type Parquet cannot hold: the window is written without its files."""

    def __init__(self, files: list[int]) -> None:
        super().__init__(files)
        self.files = set(files)


def _write_window(location: Path, key: str, requested: str | None, files: list[tuple[Source, CacheEntry]]) -> None:
    """Write a window's entry: each part into a new temporary file of its own beside where it goes, then all renamed,
    part 0 (which names the others) last; each only over a regular file or nothing (a link, a FIFO or a device
    planted there is neither followed nor replaced: then nothing is written). Parts an earlier write left beyond the
    new last one are removed."""
    import pyarrow as pa

    parts = _parts([entry.table for _, entry in files])
    places = [_part_location(location, number) for number in range(len(parts))]
    if not all(_replaceable(place) for place in places):
        return
    write = os.urandom(8).hex()  # names this write in each of its parts
    part_of = {number: part for part, members in enumerate(parts) for number in members}
    column: dict[str, list[Any]] = {name: [] for name in _FILE_COLUMNS}
    distinct: dict[str, list[Any]] = {"metadata": [], "warned": []}
    for number, (source, entry) in enumerate(files):
        for name, value in zip(_FILE_COLUMNS, source, strict=False):
            column[name].append(value)
        column["format"].append(entry.format)
        column["part"].append(part_of[number])
        column["rows"].append(entry.table.num_rows)
        own = _metadata_pairs(entry.table.schema)
        raised = [[_category_name(category), message] for category, message in entry.warned]
        for name, value in (("metadata", own), ("warned", raised)):
            if value not in distinct[name]:
                distinct[name].append(value)
            column[name].append(distinct[name].index(value))
    tables = [
        pa.concat_tables([files[number][1].table.replace_schema_metadata(None) for number in members])
        for members in parts
    ]
    index = {"parts": len(parts), "requested": requested, "files": column, **distinct}
    index["shape"] = _shape(tables, distinct["metadata"])
    written: list[tuple[str, Path]] = []
    try:
        for part, table in enumerate(tables):
            record: dict[str, Any] = {"key": key, "write": write, "part": part}
            record["nulls"] = [name for name in table.column_names if _shared_nulls(table.column(name))]
            if part == 0:
                record |= index
            table = table.replace_schema_metadata({_CACHE_METADATA_KEY: json.dumps(record).encode()})
            try:
                written.append((_write_temporary(places[part], table), places[part]))
            except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
                raise _Unwritable(parts[part]) from None
        for name, place in reversed(written):  # part 0 last: until it is renamed, the old entry is what is read
            os.replace(name, place)
        written.clear()
    finally:
        for name, _ in written:
            with contextlib.suppress(OSError):
                os.unlink(name)
    _remove_parts_beyond(location, len(parts))


def _replaceable(location: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(location).st_mode)
    except FileNotFoundError:
        return True


def _remove_parts_beyond(location: Path, parts: int) -> None:
    """Remove this user's regular files at the part names from ``parts`` on, up to the first name that is free."""
    for number in range(parts, WINDOW_FILES + 1):
        place = _part_location(location, number)
        try:
            status = os.lstat(place)
        except FileNotFoundError:
            return
        except OSError:
            return
        if stat.S_ISREG(status.st_mode) and _own(status):
            with contextlib.suppress(OSError):
                os.unlink(place)


def _write_temporary(location: Path, table: pa.Table) -> str:
    """``table`` written whole into a new temporary file of its own beside ``location``; its name."""
    import pyarrow.parquet as pq

    from ..._output import sweep_stale

    sweep_stale(location)  # what a killed process left beside it
    descriptor, name = tempfile.mkstemp(prefix=f".{location.name}.{os.getpid()}.", suffix=".tmp", dir=location.parent)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            pq.write_table(table, stream)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return name
