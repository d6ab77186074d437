"""Where the per-file work of a load runs, and the cache that skips it.

A load is per-file work followed by a cheap join in this process. Each dump
file is one work item: its format's ``reduce`` turns it into a small table
(the audit columns; tokens and log-probs are dropped with the file), and the
format's ``combine`` joins the reduced tables of all files into one table per
step (slime pairs train dumps with their rollout dumps there). Only reduced
tables reach this process, so memory stays flat however many files a run has.

Engines run the ``reduce`` calls:

- ``local``, ``jobs=1``: in this process, one file after the other.
- ``local``, ``jobs>1``: a :class:`concurrent.futures.ProcessPoolExecutor`
  on a ``forkserver`` context (``spawn`` where there is none): never ``fork``
  a process that may hold torch's or pyarrow's threads. Like any
  multiprocessing code, a script that loads with ``jobs>1`` needs the usual
  ``if __name__ == "__main__":`` guard.
- ``ray``: the same function as Ray tasks on a running cluster (or a local
  Ray started for the purpose); files must be readable where the tasks run.

The cache keeps each file's reduced table as Parquet, keyed by the file's
absolute path, size and modification time, the load options, the format
requested and the code that reduces (rollaudit's version and the source of
its loader modules): a second load of the same run reads no dump file, a
changed file is read again. Entries are written atomically; an unreadable
entry is a miss and is rewritten. Warnings a file raised are stored with its
entry and raised again on every load, so a cached load says what a fresh one
says.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import InputError, RollauditError, RollauditWarning, UsageError

if TYPE_CHECKING:
    import pyarrow as pa

    from ._load import LoadOptions

ENGINES = ("local", "ray")
CACHE_SCHEMA_VERSION = 1
# Below this many bytes to read, worker processes cost more than they save. A worker's first
# result comes 0.5-2 s after the pool starts (its interpreter, then rollaudit, pyarrow and the
# pandas that pyarrow imports on its first array: ~0.8 s of CPU), while one process reduces
# slime dumps at ~70 MB/s (tests/benchmarks/bench_run.py, 2 cores): two workers only pay off
# from ~70-140 MB on.
SMALL_RUN_BYTES = 64 << 20
MAX_DEFAULT_JOBS = 8
RAY_EXTRA_MISSING = "--engine ray needs the ray extra: pip install 'rollaudit[ray]'"
# The modules whose code decides what a reduced table holds: a change to any of them is a new cache key.
_REDUCING_MODULES = ("_load", "_engine", "_slime", "_unpickle", "_verl", "_trl", "_generic", "_table", "_errors")
_CACHE_METADATA_KEY = b"rollaudit.cache"

OnFile = Callable[[str, int], Any]
Detect = Callable[[Path], str]


# ---------------------------------------------------------------------------------------------------------------------
# Options.


@dataclass(frozen=True)
class RunOptions:
    """How a load runs its per-file work: checked once, before any file is read."""

    jobs: int | None = None
    cache_dir: Path | None = None
    engine: str = "local"
    ray_address: str | None = None


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/rollaudit``, else ``~/.cache/rollaudit``."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base and os.path.isabs(base) else Path.home() / ".cache") / "rollaudit"


def run_options(*, jobs: Any = None, cache: Any = None, engine: Any = "local", ray_address: Any = None) -> RunOptions:
    """``load()``'s run keywords, checked (UsageError naming the keyword otherwise).

    ``cache``: None or False = no cache, True = :func:`default_cache_dir`, a
    path = that directory (created when missing).
    """
    if jobs is not None and (type(jobs) is not int or jobs < 1):
        raise UsageError(f"jobs is {jobs!r}", expected="a positive int, or None for a number that suits the machine")
    if engine not in ENGINES:
        raise UsageError(f"engine is {engine!r}", expected=f"one of {', '.join(ENGINES)}")
    if ray_address is not None:
        if not isinstance(ray_address, str) or not ray_address:
            raise UsageError(f"ray_address is {ray_address!r}", expected="a Ray cluster address, e.g. ray://head:10001")
        if engine != "ray":
            raise UsageError("ray_address given without engine='ray'", expected="engine='ray' (--engine ray)")
    cache_dir: Path | None = None
    if cache is True:
        cache_dir = default_cache_dir()
        try:
            _check_cache_dir(cache_dir)
        except UsageError as error:
            # The default cache is a convenience: without it the audit still runs, only slower.
            warnings.warn(f"no cache: {error.line()}", RollauditWarning, stacklevel=3)
            cache_dir = None
    elif isinstance(cache, (str, os.PathLike)) and str(cache):
        cache_dir = Path(cache).expanduser()
        _check_cache_dir(cache_dir)  # a directory the user named: an error when it cannot be used
    elif cache is not None and cache is not False:
        raise UsageError(f"cache is {cache!r}", expected="a directory, True for the default one, False/None for none")
    return RunOptions(jobs=jobs, cache_dir=cache_dir, engine=engine, ray_address=ray_address)


def _check_cache_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the cache directory ({error.strerror})", file=str(directory)) from None
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError("the cache directory is not writable", file=str(directory), expected="a writable directory")


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_jobs(items: int, total_bytes: int) -> int:
    """One process for one file or a small run (workers would cost more than they save), else one per CPU, up to 8."""
    if items <= 1 or total_bytes < SMALL_RUN_BYTES:
        return 1
    return max(1, min(available_cpus(), items, MAX_DEFAULT_JOBS))


# ---------------------------------------------------------------------------------------------------------------------
# One work item, wherever it runs.


@dataclass(frozen=True)
class WorkItem:
    """One dump file: the path as given (named in messages), and where and what to read."""

    path: Path
    absolute: Path
    size: int
    mtime_ns: int
    requested_format: str | None = None  # load()'s format: None to detect by content (part of the cache key)
    format: str | None = None  # the format that reads it: requested, or detected after a cache miss

    @classmethod
    def of(cls, path: Path, format: str | None) -> WorkItem:
        try:
            stat = path.stat()
        except OSError as error:  # gone since the directory was listed
            raise InputError(f"cannot read: {error.strerror}", file=str(path)) from None
        absolute = path.absolute()
        return cls(path, absolute, stat.st_size, stat.st_mtime_ns, requested_format=format, format=format)


@dataclass
class Outcome:
    """What a worker sends back: the reduced table and the warnings it raised, or the input error it met.

    RollauditErrors travel as their fields: the default pickling of an
    exception keeps only its one line, not ``file``, ``field``, ``row``.
    """

    table: pa.Table | None
    warned: list[tuple[type[Warning], str]] = field(default_factory=list)
    error: tuple[str, dict[str, Any]] | None = None


def reduce_outcome(format_name: str, path: Path, options: LoadOptions) -> Outcome:
    """Reduce one file with its format's reducer; module-level so that worker processes and Ray tasks can run it."""
    from ._load import FORMATS

    with warnings.catch_warnings(record=True) as caught:
        # Record everything, whatever this process's filters: the caller's filters apply when they are raised again.
        warnings.simplefilter("always")
        try:
            table = FORMATS[format_name].reduce(path, options)
        except RollauditError as error:
            fields = {name: getattr(error, name) for name in ("message", "file", "field", "row", "expected")}
            return Outcome(table=None, warned=_warned(caught), error=(type(error).__name__, fields))
    return Outcome(table=table, warned=_warned(caught))


def _warned(caught: list[warnings.WarningMessage]) -> list[tuple[type[Warning], str]]:
    return [(message.category, str(message.message)) for message in caught]


def _as_given(text: str | None, item: WorkItem) -> str | None:
    """Messages name the file as the user gave it (workers read it by its absolute path)."""
    if text is None or item.absolute == item.path:
        return text
    return text.replace(str(item.absolute), str(item.path))


def _raise_error(error: tuple[str, dict[str, Any]], item: WorkItem) -> None:
    from . import _errors

    kind = getattr(_errors, error[0], None)
    if not (isinstance(kind, type) and issubclass(kind, RollauditError)):
        kind = _errors.InputError
    fields = dict(error[1])
    for name in ("message", "file", "expected"):
        fields[name] = _as_given(fields[name], item)
    message = fields.pop("message")
    raise kind(message, **fields)


def _raise_warnings(warned: list[tuple[type[Warning], str]], item: WorkItem) -> None:
    for category, message in warned:
        # stacklevel 4: the caller of load() (here <- run_items <- load <- caller).
        warnings.warn(_as_given(message, item), category, stacklevel=4)


# ---------------------------------------------------------------------------------------------------------------------
# The cache.


@lru_cache(maxsize=1)
def _code_fingerprint() -> str:
    """rollaudit's version and the source of the modules that reduce: an edited loader never reads a stale entry."""
    import hashlib

    from . import __version__

    digest = hashlib.sha256(f"{__version__}|{CACHE_SCHEMA_VERSION}".encode())
    here = Path(__file__).parent
    for name in _REDUCING_MODULES:
        try:
            digest.update((here / f"{name}.py").read_bytes())
        except OSError:
            digest.update(name.encode())  # an installation without sources: the version decides
    return digest.hexdigest()


def _options_fingerprint(options: LoadOptions) -> str:
    values = {item.name: getattr(options, item.name) for item in dataclasses.fields(options) if item.name != "on_file"}
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
    """Reduced tables as Parquet files under ``directory/v<schema>/<2 hex>/<sha256>.parquet``."""

    def __init__(self, directory: Path, options: LoadOptions) -> None:
        self.directory = directory / f"v{CACHE_SCHEMA_VERSION}"
        self._options = _options_fingerprint(options)

    def _source(self, item: WorkItem) -> dict[str, Any]:
        source = {"path": str(item.absolute), "size": item.size, "mtime_ns": item.mtime_ns}
        return source | {"format": item.requested_format}

    def path(self, item: WorkItem) -> Path:
        """Where the entry of ``item`` lives: the hash of everything that decides its reduced table."""
        import hashlib

        key = json.dumps([_code_fingerprint(), self._options, self._source(item)], sort_keys=True)
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
        """Store a reduced table; a file that changed while it was read, or an entry that cannot be written, is
        not cached (the load itself goes on)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ._output import write_atomic

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


# ---------------------------------------------------------------------------------------------------------------------
# Running the items.


@dataclass
class Reduced:
    """One file's reduced table and the format that reduced it."""

    format: str
    path: Path
    table: pa.Table


def run_items(
    paths: Sequence[Path],
    format: str | None,
    options: LoadOptions,
    run: RunOptions,
    detect: Detect,
) -> list[Reduced]:
    """Reduce every file (from the cache where it can), in file order.

    ``format`` None: each file's format is detected by content, after the
    cache had its chance (a cache hit reads no dump file at all).
    ``options.on_file(path, n_bytes)`` is called here, in this process, as
    each file completes, cache hits included. Warnings the files raised are
    raised here, in file order, once the reading is done (before the first
    error when a file fails).
    """
    items = [WorkItem.of(path, format) for path in paths]
    cache = Cache(run.cache_dir, options) if run.cache_dir is not None else None
    results: list[Reduced | None] = [None] * len(items)
    warned: list[list[tuple[type[Warning], str]]] = [[] for _ in items]
    misses: list[int] = []
    for index, item in enumerate(items):
        entry = cache.get(item) if cache is not None else None
        if entry is None:
            misses.append(index)
            continue
        results[index] = Reduced(entry.format, item.path, entry.table)
        warned[index] = entry.warned
        if options.on_file is not None:
            options.on_file(str(item.path), item.size)
    # Detected only now, and all before the first is read: an unknown file fails the load before any work.
    for index in misses:
        if items[index].format is None:
            items[index] = dataclasses.replace(items[index], format=detect(items[index].path))

    def done(index: int, outcome: Outcome) -> None:
        item = items[index]
        warned[index] = outcome.warned
        if outcome.error is not None:
            _raise_error(outcome.error, item)
        assert outcome.table is not None and item.format is not None
        results[index] = Reduced(item.format, item.path, outcome.table)
        if cache is not None:
            cache.put(item, item.format, outcome.table, outcome.warned)
        if options.on_file is not None:
            options.on_file(str(item.path), item.size)

    work = [(index, items[index]) for index in misses]
    worker_options = dataclasses.replace(options, on_file=None)  # a callback need not pickle
    try:
        if run.engine == "ray":
            _run_ray(work, worker_options, run, done)
        else:
            jobs = min(run.jobs or default_jobs(len(work), sum(item.size for _, item in work)), len(work))
            if jobs > 1:
                try:
                    _run_pool(work, worker_options, jobs, done)
                except WorkersDied as died:
                    if run.jobs is not None:
                        raise UsageError(died.message, expected="jobs=1 (--jobs 1) to read in this process") from None
                    # Workers were our choice, not the caller's: read what is left here rather than fail.
                    warnings.warn(f"{died.message}; reading the rest in this process", RollauditWarning, stacklevel=3)
                    work = [(index, item) for index, item in work if results[index] is None]
                    jobs = 1
            if jobs <= 1:
                for index, item in work:
                    done(index, reduce_outcome(str(item.format), item.absolute, worker_options))
    finally:
        for item, messages in zip(items, warned, strict=True):
            _raise_warnings(messages, item)
    return [result for result in results if result is not None]


class WorkersDied(Exception):
    """The process pool broke: a worker was killed (out of memory), or could not start."""

    message = (
        "a worker process died: out of memory, or a script that loads with jobs>1 "
        "without the `if __name__ == '__main__':` guard that multiprocessing needs"
    )


def _run_pool(work: list[tuple[int, WorkItem]], options: LoadOptions, jobs: int, done: Callable) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(method))
    try:
        futures = {pool.submit(reduce_outcome, str(item.format), item.absolute, options): index for index, item in work}
        for future in as_completed(futures):
            done(futures[future], future.result())
    except BrokenProcessPool:
        raise WorkersDied from None
    finally:
        # On an error, files not started yet are not read; those being read are waited for.
        pool.shutdown(wait=True, cancel_futures=True)


def _ray_init(address: str | None) -> None:
    import logging

    import ray

    if ray.is_initialized():
        return
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address is not None:
        try:
            ray.init(address=address, **quiet)
        except ConnectionError as error:
            raise UsageError(f"cannot connect to the Ray cluster at {address} ({error})") from None
        return
    try:
        ray.init(address="auto", **quiet)  # the running cluster (RAY_ADDRESS, or `ray start` on this machine)
    except ConnectionError:
        ray.init(include_dashboard=False, **quiet)  # none: a local Ray for this process


def _run_ray(work: list[tuple[int, WorkItem]], options: LoadOptions, run: RunOptions, done: Callable) -> None:
    try:
        import ray
    except ImportError:
        raise UsageError(RAY_EXTRA_MISSING) from None
    if not work:
        return
    _ray_init(run.ray_address)
    remote_reduce = ray.remote(reduce_outcome)
    options_ref = ray.put(options)
    # At most `jobs` tasks in flight when given (the cluster schedules them otherwise); results arrive as they finish.
    window = run.jobs or len(work)
    queue = list(reversed(work))
    pending: dict[Any, int] = {}
    try:
        while queue or pending:
            while queue and len(pending) < window:
                index, item = queue.pop()
                pending[remote_reduce.remote(str(item.format), item.absolute, options_ref)] = index
            finished, _ = ray.wait(list(pending), num_returns=1)
            for reference in finished:
                done(pending.pop(reference), ray.get(reference))
    finally:
        for reference in pending:
            ray.cancel(reference)
