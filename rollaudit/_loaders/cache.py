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
import importlib
import json
import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import RollauditError, RollauditWarning, UsageError

if TYPE_CHECKING:
    import pyarrow as pa

    from .engine import WorkItem
    from .options import LoadOptions

CACHE_SCHEMA_VERSION = 1
_CACHE_METADATA_KEY = b"rollaudit.cache"
_PACKAGE = Path(__file__).resolve().parent.parent
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
    stage = Path(__file__).resolve().parent
    return sorted(stage.rglob("*.py")) + [_PACKAGE / name for name in _SHARED_MODULES]


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """rollaudit's version and the source of every module that decides what a read table holds."""
    from .._version import __version__

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


def _category_name(category: type[Warning]) -> str:
    return f"{category.__module__}:{category.__qualname__}"


def _category(name: str) -> type[Warning]:
    module, _, qualname = name.partition(":")
    try:
        value: Any = importlib.import_module(module)
        for part in qualname.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError, ValueError):
        return RollauditWarning
    return value if isinstance(value, type) and issubclass(value, Warning) else RollauditWarning


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

    def _source(self, item: WorkItem) -> dict[str, Any]:
        source = {"path": str(item.absolute), "size": item.size, "mtime_ns": item.mtime_ns}
        return source | {"format": item.requested_format}

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
            stored = json.loads(metadata.pop(_CACHE_METADATA_KEY))
            if stored["source"] != self._source(item):
                return None
            warned = [(_category(name), str(message)) for name, message in stored["warned"]]
            return CacheEntry(format=stored["format"], table=table.replace_schema_metadata(metadata), warned=warned)
        except Exception:  # any damage to an entry is a miss, never an error
            return None

    def put(self, item: WorkItem, format_name: str, table: pa.Table, warned: list[tuple[type[Warning], str]]) -> None:
        """Store a read table; a file that changed while it was read, or an entry that cannot be written, is not
        cached (the load itself goes on)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from .._output import write_atomic

        try:
            stat = item.path.stat()
        except OSError:
            return
        if (stat.st_size, stat.st_mtime_ns) != (item.size, item.mtime_ns):
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
        except (OSError, RollauditError, pa.ArrowException) as error:
            warnings.warn(f"{location}: cache entry not written ({error})", RollauditWarning, stacklevel=4)
