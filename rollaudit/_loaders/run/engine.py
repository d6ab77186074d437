"""Where the per-file work of a load runs: in this process, in worker processes, or as Ray tasks.

A load is per-file work followed by a cheap join in this process. Each dump
file is one work item: its format's ``read`` turns it into a small table
(the audit columns; tokens and log-probs are dropped with the file), and the
format's ``combine`` joins the read tables of all files into one table per
step (slime pairs train dumps with their rollout dumps there). Only read
tables reach this process, so its memory grows with the samples (their audit
columns), not with the files' bytes.

Engines run the ``read`` calls:

- ``local``, ``jobs=1``: in this process, one file after the other.
- ``local``, ``jobs>1``: a :class:`concurrent.futures.ProcessPoolExecutor`,
  each task a run of consecutive files (:func:`tasks_of`), on a
  ``forkserver`` context (``spawn`` where there is none): never ``fork``
  a process that may hold torch's or pyarrow's threads. Like any
  multiprocessing code, a script that loads with ``jobs>1`` needs the usual
  ``if __name__ == "__main__":`` guard.
- ``ray``: the same function as Ray tasks on a running cluster (or a local
  Ray started for the purpose); files must be readable where the tasks run.

Files the cache (:mod:`.cache`) holds are not read at all. Within :func:`meanwhile`, this process does other
work of its own (a command imports torch) while worker processes read, or while the child that checks cache
entries starts.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from ... import _errors
from ..._errors import InputError, RollauditError, RollauditWarning, UsageError, warn
from ..registry import FORMATS
from .cache import Cache, CacheEntry, cache_directory
from .item import WorkItem

if TYPE_CHECKING:
    import pyarrow as pa

    from ..options import LoadOptions

# Below this many bytes to read, worker processes cost more than they save. A worker's first
# result comes 0.3-2 s after the pool starts (its interpreter, then rollaudit and pyarrow:
# ~0.3 s of CPU; pandas is not imported there), while one process reduces
# slime dumps at ~70 MB/s (tests/benchmarks/bench_run.py, 2 cores): two workers only pay off
# from ~70-140 MB on.
SMALL_RUN_BYTES = 64 << 20
RAY_EXTRA_MISSING = "--engine ray needs the ray extra: pip install 'rollaudit[ray]'"

OnFile = Callable[[str, int], Any]
Detect = Callable[[Path], str]
_MEANWHILE: ContextVar[Callable[[], object] | None] = ContextVar("meanwhile", default=None)


@contextmanager
def meanwhile(task: Callable[[], object]) -> Iterator[None]:
    """Loads within run ``task`` in this process, once, where it would otherwise idle: while worker processes read
    their files (after the files are handed out), or while the child that checks cache entries starts (0.1 s).
    ``compare`` imports torch there (1.2-1.4 s, about a third of a 400-step verl run's command). A load read in
    this process, without the cache, does not run it."""
    token = _MEANWHILE.set(task)
    try:
        yield
    finally:
        _MEANWHILE.reset(token)


# ---------------------------------------------------------------------------------------------------------------------
# How many workers.


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_jobs(items: int, total_bytes: int) -> int:
    """One process for one file or a small run (workers would cost more than they save), else one per CPU: a
    worker's memory no longer grows with a dump's tokens (about 0.2-0.5 MB per MB of slime dump read)."""
    if items <= 1 or total_bytes < SMALL_RUN_BYTES:
        return 1
    return max(1, min(available_cpus(), items))


@dataclass
class Outcome:
    """What a worker sends back: the read table and the warnings it raised, or the input error it met.

    RollauditErrors travel as their fields: the default pickling of an
    exception keeps only its one line, not ``file``, ``field``, ``row``.
    The table travels as an Arrow IPC stream: a tenth of its pickling's
    cost each way (0.03 ms against 0.25 ms for a verl step file's table).
    """

    table: pa.Table | None
    warned: list[tuple[type[Warning], str]] = field(default_factory=list)
    error: tuple[str, dict[str, Any]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        import pyarrow as pa

        state = dict(self.__dict__)
        if self.table is not None:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self.table.schema) as writer:
                writer.write_table(self.table)
            state["table"] = sink.getvalue()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        import pyarrow as pa

        if state.get("table") is not None:
            state["table"] = pa.ipc.open_stream(state["table"]).read_all()
        self.__dict__.update(state)


def read_guarded(format_name: str, path: Path, options: LoadOptions) -> pa.Table:
    """A format's ``read``: the one error boundary of every loader. What reading a hostile file can raise beyond
    the loaders' own checks (too deep, too big, a pyarrow or numpy refusal) becomes one InputError naming the file;
    anything else escaping is a bug."""
    import pyarrow as pa

    try:
        return FORMATS[format_name].read(path, options)
    except RecursionError:
        raise InputError("nests too deeply to read", file=str(path), expected=f"a {format_name} dump") from None
    except MemoryError:
        raise InputError(
            "needs more memory than it can hold", file=str(path), expected=f"a {format_name} dump"
        ) from None
    except (pa.ArrowException, OverflowError) as error:
        message = " ".join(str(error).split())[:200] or type(error).__name__
        raise InputError(f"cannot be read ({message})", file=str(path), expected=f"a {format_name} dump") from None


def read_outcome(format_name: str, path: Path, options: LoadOptions) -> Outcome:
    """Read one file with its format's ``read``; module-level so that worker processes and Ray tasks can run it."""
    with warnings.catch_warnings(record=True) as caught:
        # Record everything, whatever this process's filters: the caller's filters apply when they are raised again.
        warnings.simplefilter("always")
        try:
            table = read_guarded(format_name, path, options)
        except RollauditError as error:
            fields = {name: getattr(error, name) for name in ("message", "file", "field", "row", "expected")}
            return Outcome(table=None, warned=_warned(caught), error=(type(error).__name__, fields))
    return Outcome(table=table, warned=_warned(caught))


def _warned(caught: list[warnings.WarningMessage]) -> list[tuple[type[Warning], str]]:
    return [(message.category, str(message.message)) for message in caught]


@overload
def _as_given(text: str, item: WorkItem) -> str: ...
@overload
def _as_given(text: None, item: WorkItem) -> None: ...


def _as_given(text: str | None, item: WorkItem) -> str | None:
    """Messages name the file as the user gave it (workers read it by its absolute path)."""
    if text is None or item.absolute == item.path:
        return text
    return text.replace(str(item.absolute), str(item.path))


def _raise_error(error: tuple[str, dict[str, Any]], item: WorkItem) -> None:
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
        warn(_as_given(message, item), category)


# ---------------------------------------------------------------------------------------------------------------------
# Running the items.


@dataclass
class Read:
    """One file's read table and the format that read it."""

    format: str
    path: Path
    table: pa.Table
    cached: bool = False


def run_items(paths: Sequence[Path], options: LoadOptions, on_file: OnFile | None, detect: Detect) -> list[Read]:
    """Read every file (from the cache where it can), in file order.

    ``options.format`` None: each file's format is detected by content, after
    the cache had its chance (a cache hit reads no dump file at all).
    ``on_file(path, n_bytes)`` is called here, in this process, as each file
    completes, cache hits included. Warnings the files raised are raised
    here, in file order, once the reading is done (before the first error
    when a file fails).
    """
    items = [WorkItem.of(path, options.format) for path in paths]
    directory = cache_directory(options.cache)
    cache = Cache(directory, options) if directory is not None else None
    results: list[Read | None] = [None] * len(items)
    warned: list[list[tuple[type[Warning], str]]] = [[] for _ in items]
    misses: list[int] = []
    own_work = _MEANWHILE.get()
    if cache is not None and cache.may_hold(items):
        # Cache entries are read once a child process has checked them: the child starts now, and its start-up
        # (0.1 s) passes while this process does its own work, where it has any. (The first window tells whether
        # the run was read before.)
        from ..arrow import capped

        capped.start_reader()
        if own_work is not None:
            own_work()
            own_work = None
    entries = cache.get(items) if cache is not None else [None] * len(items)
    for index, (item, entry) in enumerate(zip(items, entries, strict=True)):
        if entry is None:
            misses.append(index)
            continue
        results[index] = Read(entry.format, item.path, entry.table, cached=True)
        warned[index] = entry.warned
        if on_file is not None:
            on_file(str(item.path), item.size)
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
        results[index] = Read(item.format, item.path, outcome.table)
        if cache is not None:  # its window is written once all its files are in
            cache.read(index, CacheEntry(item.format, outcome.table, outcome.warned))
        if on_file is not None:
            on_file(str(item.path), item.size)

    work = [(index, items[index]) for index in misses]
    try:
        if options.engine == "ray":
            _run_ray(work, options, done)
        else:
            jobs = min(options.jobs or default_jobs(len(work), sum(item.size for _, item in work)), len(work))
            if jobs > 1:
                try:
                    _run_pool(work, options, jobs, done, own_work)
                except WorkersDied as died:
                    if options.jobs is not None:
                        raise UsageError(died.message, expected="--jobs 1 to read in this process") from None
                    # Workers were our choice, not the caller's: read what is left here rather than fail.
                    warn(f"{died.message}; reading the rest in this process", RollauditWarning)
                    work = [(index, item) for index, item in work if results[index] is None]
                    jobs = 1
            if jobs <= 1:
                for index, item in work:
                    done(index, read_outcome(str(item.format), item.absolute, options))
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


def _run_pool(
    work: list[tuple[int, WorkItem]], options: LoadOptions, jobs: int, done: Callable, own_work: Callable | None
) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_start_worker)
    try:
        futures = {
            pool.submit(read_outcomes, [(str(item.format), item.absolute) for _, item in task], options): task
            for task in tasks_of(work, jobs)
        }
        if own_work is not None:
            own_work()
        for future in as_completed(futures):
            for (index, _), outcome in zip(futures[future], future.result(), strict=False):
                done(index, outcome)
    except BrokenProcessPool:
        raise WorkersDied from None
    except BaseException as error:
        if not isinstance(error, Exception):  # Ctrl-C, or SIGTERM as the CLI raises it: stop now, not after the reads
            _kill_workers(pool)
        raise
    finally:
        # On an error, files not started yet are not read; those being read are waited for.
        pool.shutdown(wait=True, cancel_futures=True)


TASKS_PER_WORKER = 8
TASK_BYTES = 8 << 20


def tasks_of(work: list[tuple[int, WorkItem]], jobs: int) -> list[list[tuple[int, WorkItem]]]:
    """``work`` in runs of consecutive files, one task each: a task per file would cost a round trip to a worker
    per file (a 460 KB verl step is read in 3 ms), yet each worker needs several tasks for the last ones to end
    together. A task holds at most 1/``TASKS_PER_WORKER`` of a worker's share, and at most ``TASK_BYTES`` bytes
    beyond its first file."""
    share = max(1, len(work) // (jobs * TASKS_PER_WORKER))
    tasks: list[list[tuple[int, WorkItem]]] = []
    size = 0
    for index, item in work:
        if not tasks or len(tasks[-1]) >= share or size + item.size > TASK_BYTES:
            tasks.append([])
            size = 0
        tasks[-1].append((index, item))
        size += item.size
    return tasks


def read_outcomes(files: list[tuple[str, Path]], options: LoadOptions) -> list[Outcome]:
    """:func:`read_outcome` of each ``(format, path)`` in turn, up to the first that fails (the load stops there);
    consecutive files of a format that reads several at once (``Format.read_files``) in one call, and one by one
    where that call fails."""
    outcomes: list[Outcome] = []
    for format_name, group in itertools.groupby(files, key=lambda file: file[0]):
        paths = [path for _, path in group]
        together = _read_together(format_name, paths, options)
        if together is not None:
            outcomes += together
            continue
        for path in paths:
            outcomes.append(read_outcome(format_name, path, options))
            if outcomes[-1].error is not None:
                return outcomes
    return outcomes


def _read_together(format_name: str, paths: list[Path], options: LoadOptions) -> list[Outcome] | None:
    """The outcomes of reading ``paths`` with one ``read_files`` call, or None where the format has none, there is
    one file, or the call fails or warns (each file is then read on its own, to say what names it)."""
    read_files = FORMATS[format_name].read_files
    if read_files is None or len(paths) < 2:
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            tables = read_files(paths, options)
        except Exception:  # each file, read again on its own, says what is wrong as ``read`` says it
            return None
    if caught or len(tables) != len(paths):
        return None
    return [Outcome(table=table) for table in tables]


def _start_worker() -> None:
    """Workers leave Ctrl-C to this process, which stops them: no traceback from each. Their memory is
    rollaudit's own (see ``rollaudit._memory``), and they send tables, never DataFrames (pandas is not imported)."""
    import signal

    from ..._memory import prefer_small_pages
    from ..._pandas_import import refuse_pandas

    prefer_small_pages()
    refuse_pandas()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _kill_workers(pool: Any) -> None:
    kill = getattr(pool, "kill_workers", None)  # Python 3.14
    if kill is not None:
        kill()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.kill()


def _ray_init(address: str | None) -> None:
    import logging

    import ray

    if ray.is_initialized():
        return
    quiet_init = functools.partial(ray.init, log_to_driver=False, logging_level=logging.WARNING)
    if address is not None:
        try:
            quiet_init(address=address)
        except ConnectionError as error:
            raise UsageError(f"cannot connect to the Ray cluster at {address} ({error})") from None
        return
    try:
        quiet_init(address="auto")  # the running cluster (RAY_ADDRESS, or `ray start` on this machine)
    except ConnectionError:
        quiet_init(include_dashboard=False)  # none: a local Ray for this process


def _run_ray(work: list[tuple[int, WorkItem]], options: LoadOptions, done: Callable) -> None:
    try:
        import ray
    except ImportError:
        raise UsageError(RAY_EXTRA_MISSING) from None
    if not work:
        return
    _ray_init(options.ray_address)
    remote_read = ray.remote(read_outcome)
    options_ref = ray.put(options)
    # At most `jobs` tasks in flight when given (the cluster schedules them otherwise); results arrive as they finish.
    window = options.jobs or len(work)
    queue = list(reversed(work))
    pending: dict[Any, int] = {}
    try:
        while queue or pending:
            while queue and len(pending) < window:
                index, item = queue.pop()
                pending[remote_read.remote(str(item.format), item.absolute, options_ref)] = index
            finished, _ = ray.wait(list(pending), num_returns=1)
            for reference in finished:
                done(pending.pop(reference), ray.get(reference))
    finally:
        for reference in pending:
            ray.cancel(reference)
