"""``rollaudit.load``: dump files, lists, directories or globs to one canonical table.

Paths are expanded (:func:`expand_paths`: a directory is searched down to the
one run it holds, :mod:`.discover`), each file's format is detected by content
(:func:`detect_format`, the registry's order) and read by the engine (this
process, worker processes or Ray; the cache first), and each format combines
its files' tables into canonical tables, one per step. Dumps of two formats
never make one table.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import inspect
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import pyarrow as pa

from ..._errors import InputError, UsageError, did_you_mean
from ..._memory import with_small_pages
from ..._table import (
    AUDITED_COLUMNS,
    FORMATS_METADATA,
    PIECE_ROWS,
    POSITION,
    STEP,
    concat_tables,
    merge_facts,
    merge_found,
    numpy_view,
    with_facts,
    with_found,
)
from ..base import Format, SeveralRuns
from ..config import find_config, read_config
from ..options import Engine, LoadOptions, TokenReduce
from ..registry import FORMATS
from .discover import DUMP_HINT, MAX_DEPTH, directory_files, natural_key
from .engine import run_items

ProgressCallback = Callable[[str, int], Any]

_GLOB_CHARACTERS = re.compile(r"[*?[]")


def expand_paths(path_or_paths: str | os.PathLike | Iterable[str | os.PathLike], run: str | None = None) -> list[Path]:
    """Files to read: a file, a directory's dumps, a glob's matches (sorted), or a list of those, in order. A
    directory that holds several runs gives the one named ``run`` (:func:`find_runs` names them); without ``run``
    it raises :class:`~rollaudit.SeveralRuns`."""
    items = [path_or_paths] if isinstance(path_or_paths, (str, os.PathLike)) else list(path_or_paths)
    if not items:
        raise InputError("no paths given", expected="a dump file, a list of files, a directory or a glob")
    files: list[Path] = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise UsageError(f"{type(item).__name__} given where a path was expected", expected="str or os.PathLike")
        path = Path(item)
        if path.is_dir():
            files.extend(directory_files(path, detect_format, run))
        elif path.is_file():
            files.append(path)
        elif isinstance(item, str) and _GLOB_CHARACTERS.search(item):
            files.extend(_glob_files(item))
        else:
            raise InputError("no such file or directory", file=str(item))
    unique: dict[Path, Path] = {}
    folders: dict[Path, Path] = {}  # each folder resolved once, not once per file of a run's thousands
    for path in files:
        if path.is_symlink():
            resolved = path.resolve()
        else:
            folder = folders.get(path.parent)
            if folder is None:
                folder = folders[path.parent] = path.parent.resolve()
            resolved = folder / path.name
        unique.setdefault(resolved, path)
    return list(unique.values())


def find_runs(path: str | os.PathLike) -> dict[str, list[Path]]:
    """The runs at ``path``, by name, each with its dump files in order: a directory holding several runs (two
    verl rollout directories, AReaL trials, open-instruct's runs side by side) gives each, named by its place
    below their common folder (``trial0``; open-instruct's ``run_name``); a file, or a directory of one run,
    gives that run, named ``.``. ``load(path, run=name)`` reads one.

    >>> import rollaudit
    >>> list(rollaudit.find_runs("sample_dumps/fanout"))
    ['.']
    """
    try:
        return {".": expand_paths(Path(path))}
    except SeveralRuns as several:
        return several.runs


def _glob_files(pattern: str) -> list[Path]:
    matches = sorted((Path(match) for match in bounded_glob(pattern)), key=natural_key)
    files: list[Path] = []
    for match in matches:
        files.extend(directory_files(match, detect_format) if match.is_dir() else [match])
    if not files:
        raise InputError("no file matches the pattern", file=pattern, expected="a glob that matches dump files")
    return files


def bounded_glob(pattern: str) -> list[str]:
    """``glob.glob(pattern, recursive=True)``'s matches, bounded as the directory search is: ``**`` enters each
    directory once (by device and inode: links that loop, or several links to one folder, are followed once) and
    at most ``MAX_DEPTH`` levels down. Hidden names match only a part that starts with a dot, as in glob."""
    parts = pattern.split(os.sep)
    # Matches are spelt as the pattern spells them (``./run/a.jsonl``), as glob's are: the pattern is split, not
    # parsed into a Path.
    prefixes = [os.sep if parts[0] == "" and len(parts) > 1 else ""]
    parts = parts[1:] if prefixes[0] else parts
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            prefixes = _below(prefixes, with_files=last)
        elif _GLOB_CHARACTERS.search(part):
            prefixes = [
                os.path.join(prefix, name)
                for prefix in prefixes
                for name, is_directory in _entries(prefix)
                if (last or is_directory) and fnmatch.fnmatchcase(name, part) and _shown(name, part)
            ]
        else:
            prefixes = [os.path.join(prefix, part) for prefix in prefixes]
            prefixes = [path for path in prefixes if os.path.lexists(path) if last or os.path.isdir(path)]
    return [prefix for prefix in prefixes if prefix]


def _shown(name: str, part: str) -> bool:
    return not name.startswith(".") or part.startswith(".")


def _entries(folder: str) -> list[tuple[str, bool]]:
    """A folder's names, sorted (which of two links to one directory is followed does not change from run to
    run), each with whether it is a directory (through a link); none when it cannot be read."""
    try:
        with os.scandir(folder or ".") as scan:
            return sorted((entry.name, _is_directory(entry)) for entry in scan)
    except OSError:
        return []


def _is_directory(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _below(folders: list[str], *, with_files: bool) -> list[str]:
    """What ``**`` matches under each folder: the folder itself and every directory below it that is not hidden
    (and their files, when ``**`` ends the pattern), each directory once, at most ``MAX_DEPTH`` levels down."""
    seen: set[tuple[int, int]] = set()
    found: list[str] = []

    def visit(folder: str, depth: int) -> None:
        try:
            status = os.stat(folder or ".")
        except OSError:
            return
        if (status.st_dev, status.st_ino) in seen:
            return
        seen.add((status.st_dev, status.st_ino))
        found.append(folder)
        for name, is_directory in _entries(folder):
            if name.startswith("."):
                continue
            path = os.path.join(folder, name)
            if is_directory and depth < MAX_DEPTH:
                visit(path, depth + 1)
            elif with_files and not is_directory:
                found.append(path)

    for folder in folders:
        visit(folder, 0)
    return found


def detect_format(path: Path) -> str:
    """The name of the format of ``path``, by content (InputError when no format recognises it)."""
    for name, entry in FORMATS.items():
        if entry.detect(path):
            return name
    raise InputError("not a dump rollaudit reads", file=str(path), expected=DUMP_HINT)


_Parameters = ParamSpec("_Parameters")
_Result = TypeVar("_Result")


def _known_keywords(function: Callable[_Parameters, _Result]) -> Callable[_Parameters, _Result]:
    """``function`` refusing a keyword it does not take with a UsageError that names it and the nearest one it
    takes (a typo, ``prompt_coll``, is a usage error like any other, not Python's TypeError)."""
    names = [name for name in inspect.signature(function).parameters if name != "path_or_paths"]

    @functools.wraps(function)
    def checked(*args: _Parameters.args, **keywords: _Parameters.kwargs) -> _Result:
        for name in keywords:
            if name not in names and name != "path_or_paths":
                nearest = did_you_mean(name, names)
                raise UsageError(
                    f"{function.__name__}() takes no keyword {name!r}{nearest}",
                    expected=None if nearest else f"one of {', '.join(names)}",
                )
        return function(*args, **keywords)

    return checked


@_known_keywords
@with_small_pages
def load(
    path_or_paths: str | os.PathLike | Iterable[str | os.PathLike],
    options: LoadOptions | None = None,
    *,
    on_file: ProgressCallback | None = None,
    format: str | None = None,
    reward_key: str | None = None,
    n_samples_per_prompt: int | None = None,
    reward_col: str | None = None,
    prompt_col: str | None = None,
    trajectory_col: str | None = None,
    step_col: str | None = None,
    advantage_col: str | None = None,
    mask_col: str | None = None,
    token_reduce: TokenReduce = "first",
    reward_columns: Sequence[str] | None = None,
    reward_weights: Sequence[float] | Mapping[str, float] | None = None,
    num_generations: int | None = None,
    jobs: int | None = None,
    cache: str | os.PathLike | bool | None = None,
    engine: Engine = "local",
    ray_address: str | None = None,
    run: str | None = None,
    config: str | os.PathLike | None = None,
) -> pa.Table:
    """Read rollout dumps into one canonical table (see :mod:`rollaudit._table`), sorted by step.

    ``path_or_paths``: a dump file, a directory (searched down to the one run
    it holds, or the one named ``run`` where it holds several: see
    :func:`find_runs`; a slime ``--dump-details`` directory pairs its rollout
    and train dumps by step), a glob, or a list of those, all of one format.
    ``options``: a :class:`~rollaudit.LoadOptions`; without it, the
    keywords below build one (they are its fields). ``on_file(path, n_bytes)``
    is called in this process as each file is done (read, or found in the cache).

    ``format`` is detected from each file's content when not given.
    ``reward_key`` picks the trained-on reward from dict rewards (slime's
    ``--reward-key``); ``n_samples_per_prompt`` gives prompt keys as
    consecutive slices when a dump has none.

    Tables (verl, TRL, generic): ``reward_col``, ``prompt_col``,
    ``trajectory_col``, ``step_col``, ``advantage_col`` and ``mask_col``
    name the columns that hold each role (otherwise each format's own names,
    or the common ones, are used); ``token_reduce`` (``first``, ``last``,
    ``mean``) turns per-token advantage lists into one value per sample.
    TRL: ``reward_columns`` names the reward-function columns (default:
    the numeric ones), ``reward_weights`` weighs them (a list in their
    order, or a dict by name), ``num_generations`` fixes the group size
    (default: the first run of equal prompt texts).

    ``config``: the run's config file (ms-swift's ``args.json``, a TOML or YAML config), for the formats whose
    arithmetic depends on settings their dumps do not hold (``rollaudit formats`` says which, and where each
    framework saves it: a config found there is read without being named).

    Each file is one step, its own batch (generic tables: the files of one
    step form one batch, in order).

    Whole runs: files are read one at a time to their audit columns
    (tokens are dropped before the next file is read), so memory grows with
    the samples, not with the files' bytes. ``jobs`` worker processes read files in
    parallel (default: 1 for one file or under 64 MB to read, else one per
    CPU up to 8; a script that loads with ``jobs>1`` needs multiprocessing's
    ``if __name__ == "__main__":`` guard).
    ``cache``: a directory keeping each file's read table, keyed by its
    path, size and modification time and the options (``True``: the default
    directory, ``$XDG_CACHE_HOME/rollaudit`` or ``~/.cache/rollaudit``;
    ``None``/``False``, the default: no cache), so that a second load of
    the same run reads no dump file. ``engine="ray"`` runs the per-file work
    as Ray tasks (``pip install 'rollaudit[ray]'``) on the cluster at
    ``ray_address`` (default: the running cluster, else a local Ray), the
    files being readable where the tasks run. A keyword ``load`` does not
    take raises :class:`~rollaudit.UsageError` naming it and the nearest one
    it does. Bad input raises
    :class:`~rollaudit.InputError` with one line naming the file, field and
    sample; unknown classes in a dump become inert placeholders (one
    :class:`~rollaudit.RollauditWarning` per file) and nothing the file
    names is ever run.

    >>> import rollaudit
    >>> table = rollaudit.load("sample_dumps/fanout/rollout_data/3.pt")
    >>> table.num_rows, rollaudit.loaded_formats(table)
    (88, ['slime'])
    """
    if options is None:
        options = LoadOptions(
            format=format,
            reward_key=reward_key,
            n_samples_per_prompt=n_samples_per_prompt,
            reward_col=reward_col,
            prompt_col=prompt_col,
            trajectory_col=trajectory_col,
            step_col=step_col,
            advantage_col=advantage_col,
            mask_col=mask_col,
            token_reduce=token_reduce,
            reward_columns=reward_columns,
            reward_weights=reward_weights,
            num_generations=num_generations,
            jobs=jobs,
            cache=cache,
            engine=engine,
            ray_address=ray_address,
            run=run,
            config=config,
        )
    elif not isinstance(options, LoadOptions):
        raise UsageError(f"options is a {type(options).__name__}", expected="a rollaudit.LoadOptions")
    if options.format is not None and options.format not in FORMATS:
        raise InputError(
            f"unknown format {options.format!r}{did_you_mean(options.format, FORMATS)}",
            expected=f"one of the formats rollaudit reads: {', '.join(FORMATS)}",
        )
    # Read and joined in a function of its own, so that the files' tables are freed before their columns are joined.
    return _in_one_chunk(_read_run(expand_paths(path_or_paths, options.run), options, on_file))


def _read_run(files: list[Path], options: LoadOptions, on_file: ProgressCallback | None) -> pa.Table:
    """The canonical table of ``files``, in step order, as the formats combine it (a chunk per file or piece)."""
    grouped: dict[str, tuple[list[Path], list[pa.Table]]] = {}
    cached: set[str] = set()
    for read in run_items(files, options, on_file, _detect_one_format()):
        paths, parts = grouped.setdefault(read.format, ([], []))
        paths.append(read.path)
        parts.append(read.table)
        if read.cached:
            cached.add(read.format)
    if len(grouped) > 1:  # files found in the cache were not detected: their formats are known only now
        raise _several_formats({name: paths for name, (paths, _) in grouped.items()})
    tables: list[pa.Table] = []
    for name, (paths, parts) in grouped.items():
        FORMATS[name].check_options(options)
        options = with_run_config(FORMATS[name], paths, options)
        try:
            tables.extend(FORMATS[name].combine(paths, parts, options))
        except Exception:
            if name not in cached:
                raise
            # An entry its format cannot combine (its metadata forged along with the cache's own record) is a miss
            # like any other damaged entry: the files are read again, and what fails then fails as read.
            tables.extend(FORMATS[name].combine(paths, _read_again(paths, options, name), options))
    found, notes = merge_found(tables)
    facts = merge_facts(tables)
    table = _in_step_order(tables)
    # Which formats were read, and what they found, travel with the table: a caller need not open a file again.
    table = table.replace_schema_metadata({FORMATS_METADATA: "+".join(sorted(grouped))})
    if facts:
        table = with_facts(table, **facts)
    return with_found(table, found, notes) if found or notes else table


def _in_one_chunk(table: pa.Table) -> pa.Table:
    """The table with the numeric columns an audit reads each in one chunk: the audit then reads them where they
    are, with no copy of its own beside the caller's table (text keys it codes chunk by chunk, and they stay as
    the files' chunks). Each copy made here replaces the files' chunks, which are freed, and the memory they held
    is given back before the next column is copied (Arrow's pool keeps what it frees)."""
    pool = pa.default_memory_pool()
    pool.release_unused()  # what the reads freed
    for name in AUDITED_COLUMNS:
        if name not in table.column_names:
            continue
        index = table.column_names.index(name)
        column = table.column(index)
        if column.num_chunks < 2 or column.null_count == len(column):  # no value to read: no buffer to join
            continue
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            continue
        try:
            joined = column.combine_chunks()
        except (pa.ArrowCapacityError, pa.ArrowInvalid):  # text past 2 GiB: its offsets need chunks
            continue
        table = table.set_column(index, table.schema.field(index), [joined])
        del column, joined
        pool.release_unused()
    return table


def _read_again(paths: list[Path], options: LoadOptions, format_name: str) -> list[pa.Table]:
    """The read tables of ``paths``, from the files, never the cache (their warnings were raised once already)."""
    again = dataclasses.replace(options, cache=False, format=format_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [read.table for read in run_items(paths, again, None, _detect_one_format())]


def _detect_one_format() -> Callable[[Path], str]:
    """``detect_format`` that refuses files of a second format as soon as one is detected, before any is read:
    dumps of two frameworks make no one report."""
    seen: dict[str, list[Path]] = {}

    def detect(path: Path) -> str:
        name = detect_format(path)
        seen.setdefault(name, []).append(path)
        if len(seen) > 1:
            raise _several_formats(seen)
        return name

    return detect


def _several_formats(paths_by_format: Mapping[str, list[Path]]) -> InputError:
    named = []
    for name, paths in paths_by_format.items():
        more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
        named.append(f"{name} ({paths[0]}{more})")
    return InputError(
        f"dumps of {len(named)} formats given together, which make no one report: {', '.join(named)}",
        expected="one framework's dumps at a time",
    )


def _in_step_order(tables: list[pa.Table]) -> pa.Table:
    """The tables as one, sorted by step, then position. Formats combine one table per step: taken in the order of
    their first steps, they are usually in order already, and are then concatenated as they are (no copy); any
    other tables are sorted as given."""
    firsts = [(table.column(STEP)[0].as_py() if table.num_rows else -1) for table in tables]
    joined = concat_tables([tables[index] for index in sorted(range(len(tables)), key=firsts.__getitem__)])
    if _ordered(joined):
        return joined
    return _sorted(concat_tables(tables))


def _sorted(table: pa.Table) -> pa.Table:
    """The table sorted by step, then position; as it is (no copy) when it already is."""
    return table if _ordered(table) else table.sort_by([(STEP, "ascending"), (POSITION, "ascending")])


def _ordered(table: pa.Table) -> bool:
    """Whether (step, position) strictly ascend from row to row: then no two rows tie, and the table is its own
    sort whatever order its parts came in."""
    import numpy as np

    previous = None
    # Piece by piece, however many chunks (a step each) a piece spans: no row-sized temporary is made.
    keys = table.select([STEP, POSITION])
    for start in range(0, table.num_rows, PIECE_ROWS):
        piece = keys.slice(start, PIECE_ROWS)
        steps, positions = (numpy_view(column.combine_chunks()) for column in piece.columns)
        if len(steps) == 0:
            continue
        later, same = steps[1:] > steps[:-1], steps[1:] == steps[:-1]
        ordered = bool(np.all(later | (same & (positions[1:] > positions[:-1]))))
        if not ordered or (previous is not None and (int(steps[0]), int(positions[0])) <= previous):
            return False
        previous = int(steps[-1]), int(positions[-1])
    return True


def with_run_config(loader: Format, paths: list[Path], options: LoadOptions) -> LoadOptions:
    """``options`` with the run's config read for ``loader``'s ``combine``: the file ``options.config`` names, else
    the one its framework saves beside ``paths``, else none. ``--config`` for a format that reads none is refused."""
    if not loader.settings:
        if options.config is not None:
            readers = ", ".join(name for name, other in FORMATS.items() if other.settings)
            raise UsageError(
                f"--config is not read for {loader.name} dumps: rollaudit reads no setting of theirs from a config",
                expected=f"a config for the dumps of {readers}",
            )
        return options
    if options.config is not None:
        path: Path | None = Path(options.config)
    else:
        path = find_config(loader.config_files(paths)) if loader.config_files is not None and paths else None
    if path is None:
        return options
    return dataclasses.replace(options, run_config=read_config(path, loader.settings))
