"""``rollaudit.load``: dump files, lists, directories or globs to one canonical table.

Formats live in :data:`FORMATS`, a registry ``name -> Format``. A format says
how to recognise one of its files (``detect``), how to reduce one file to a
small table (``reduce``: a module-level function, so that worker processes
and Ray tasks can run it, and whose result the cache keeps), how to join the
reduced tables of its files into canonical tables, one per step
(``combine``, in this process), and optionally which files of a directory
are its dumps (``expand_directory``). Adding a format is one entry there;
it gets parallel reading, the cache and the Ray engine from
:mod:`rollaudit._engine`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from . import _engine, _generic, _slime, _trl, _verl
from ._errors import InputError, UsageError
from ._table import POSITION, STEP, concat_tables

ProgressCallback = Callable[[str, int], Any]


@dataclass(frozen=True)
class LoadOptions:
    """What a reader needs besides the paths."""

    reward_key: str | None = None
    n_samples_per_prompt: int | None = None
    on_file: ProgressCallback | None = None
    # Tables (verl, TRL, generic): which column plays which role; None = the format's own or common names.
    reward_col: str | None = None
    prompt_col: str | None = None
    trajectory_col: str | None = None
    step_col: str | None = None
    advantage_col: str | None = None
    mask_col: str | None = None
    token_reduce: str = "first"
    # TRL: the reward-function columns, their weights (a list in column order, or name -> weight), group size.
    reward_columns: tuple[str, ...] | None = None
    reward_weights: tuple[float, ...] | Mapping[str, float] | None = None
    num_generations: int | None = None


@dataclass(frozen=True)
class Format:
    """One dump format rollaudit reads.

    ``reduce(path, options)``: one file to a table of its audit columns
    (format-specific layout; Parquet-safe, as the cache stores it).
    ``combine(paths, reduced, options)``: the reduced tables of several
    files, in file order, to canonical tables, one per step.
    """

    name: str
    description: str
    detect: Callable[[Path], bool]
    reduce: Callable[[Path, LoadOptions], pa.Table]
    combine: Callable[[list[Path], list[pa.Table], LoadOptions], list[pa.Table]]
    expand_directory: Callable[[Path], list[Path] | None] | None = None

    def read(self, paths: list[Path], options: LoadOptions) -> list[pa.Table]:
        """Reduce ``paths`` one after the other in this process and combine them: one canonical table per step."""
        return self.combine(paths, [self.reduce(path, options) for path in paths], options)


FORMATS: dict[str, Format] = {
    "slime": Format(
        name="slime",
        description="torch.save .pt zips of rollout and train dumps",
        detect=_slime.detect,
        reduce=_slime.reduce_file,
        combine=_slime.combine,
        expand_directory=_slime.expand_directory,
    ),
    "verl": Format(
        name="verl",
        description="rollout_data_dir {step}.jsonl lines with input, output, score, step",
        detect=_verl.detect,
        reduce=_verl.reduce_file,
        combine=_verl.combine,
        expand_directory=_verl.expand_directory,
    ),
    "trl": Format(
        name="trl",
        description="GRPOTrainer completions/completions_*.parquet with prompt, completion, reward columns, advantage",
        detect=_trl.detect,
        reduce=_trl.reduce_file,
        combine=_trl.combine,
        expand_directory=_trl.expand_directory,
    ),
    # Last: it accepts any table, and an empty file so that the error says so.
    "generic": Format(
        name="generic",
        description="Parquet, Arrow IPC/Feather, JSON Lines or CSV tables with a reward column",
        detect=_generic.detect,
        reduce=_generic.reduce_file,
        combine=_generic.combine,
        expand_directory=_generic.expand_directory,
    ),
}
"""The registry: format name -> Format. Detection tries the entries in this order."""

_GLOB_CHARACTERS = re.compile(r"[*?[]")


def _formats_read() -> str:
    """``slime (torch.save .pt zips of rollout and train dumps)``, one entry per registered format."""
    return ", ".join(f"{entry.name} ({entry.description})" for entry in FORMATS.values())


def _natural_key(path: Path) -> tuple:
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", str(path)))


def _directory_files(directory: Path) -> list[Path]:
    for entry in FORMATS.values():
        if entry.expand_directory is not None:
            files = entry.expand_directory(directory)
            if files:
                return sorted(files, key=_natural_key)
    files = sorted(
        (path for path in directory.iterdir() if path.is_file() and not path.name.startswith(".")),
        key=_natural_key,
    )
    if not files:
        raise InputError(
            "the directory holds no dump files",
            file=str(directory),
            expected=f"dumps in a format rollaudit reads: {_formats_read()}",
        )
    return files


def expand_paths(path_or_paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Files to read: a file, a directory's dumps, a glob's matches (sorted), or a list of those, in order."""
    items = [path_or_paths] if isinstance(path_or_paths, (str, os.PathLike)) else list(path_or_paths)
    if not items:
        raise InputError("no paths given", expected="a dump file, a list of files, a directory or a glob")
    files: list[Path] = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise UsageError(f"{type(item).__name__} given where a path was expected", expected="str or os.PathLike")
        path = Path(item)
        if path.is_dir():
            files.extend(_directory_files(path))
        elif path.is_file():
            files.append(path)
        elif isinstance(item, str) and _GLOB_CHARACTERS.search(item):
            files.extend(_glob_files(item))
        else:
            raise InputError("no such file or directory", file=str(item))
    unique: dict[Path, Path] = {}
    for path in files:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def _glob_files(pattern: str) -> list[Path]:
    import glob

    matches = sorted((Path(match) for match in glob.glob(pattern, recursive=True)), key=_natural_key)
    files: list[Path] = []
    for match in matches:
        files.extend(_directory_files(match) if match.is_dir() else [match])
    if not files:
        raise InputError("no file matches the pattern", file=pattern, expected="a glob that matches dump files")
    return files


def detect_format(path: Path) -> str:
    """The name of the format of ``path``, by content (InputError when no format recognises it)."""
    for name, entry in FORMATS.items():
        if entry.detect(path):
            return name
    raise InputError("unknown dump format", file=str(path), expected=f"a format rollaudit reads: {_formats_read()}")


def _check_options(format: str | None, reward_key: Any, n_samples_per_prompt: Any) -> None:
    if format is not None and format not in FORMATS:
        raise InputError(
            f"unknown format {format!r}", expected=f"one of the formats rollaudit reads: {_formats_read()}"
        )
    if reward_key is not None and not isinstance(reward_key, str):
        raise UsageError(f"reward_key is a {type(reward_key).__name__}", expected="a string (slime's --reward-key)")
    if n_samples_per_prompt is not None and (type(n_samples_per_prompt) is not int or n_samples_per_prompt < 1):
        raise UsageError(f"n_samples_per_prompt is {n_samples_per_prompt!r}", expected="a positive int")


_COLUMN_OPTIONS = ("reward_col", "prompt_col", "trajectory_col", "step_col", "advantage_col", "mask_col")


def _check_table_options(options: dict[str, Any]) -> dict[str, Any]:
    """The table options, checked and normalized (UsageError naming the option otherwise)."""
    for name in _COLUMN_OPTIONS:
        value = options[name]
        if value is not None and (not isinstance(value, str) or not value):
            raise UsageError(f"{name} is {value!r}", expected="a column name")
    if options["token_reduce"] not in _generic.TOKEN_REDUCE_RULES:
        raise UsageError(
            f"token_reduce is {options['token_reduce']!r}", expected=f"one of {', '.join(_generic.TOKEN_REDUCE_RULES)}"
        )
    columns = options["reward_columns"]
    if columns is not None:
        columns = (columns,) if isinstance(columns, str) else columns
        if not isinstance(columns, Sequence) or not columns or not all(isinstance(c, str) and c for c in columns):
            raise UsageError(f"reward_columns is {columns!r}", expected="a list of column names")
        options["reward_columns"] = tuple(columns)
    weights = options["reward_weights"]
    if weights is not None:
        if isinstance(weights, Mapping):
            names, values = list(weights), list(weights.values())
        elif isinstance(weights, Iterable) and not isinstance(weights, (str, bytes)):
            names, values = [], list(weights)
        else:
            names, values = [], [weights]
        if not values or not all(isinstance(name, str) for name in names) or not all(map(_is_real, values)):
            raise UsageError(
                f"reward_weights is {weights!r}", expected="finite numbers: a list in column order, or name -> weight"
            )
        floats = [float(value) for value in values]
        options["reward_weights"] = dict(zip(names, floats, strict=True)) if names else tuple(floats)
    generations = options["num_generations"]
    if generations is not None and (type(generations) is not int or generations < 1):
        raise UsageError(f"num_generations is {generations!r}", expected="a positive int")
    return options


def _is_real(value: Any) -> bool:
    """A finite int or float (numpy scalars included); not a bool."""
    try:
        return not isinstance(value, (bool, str, bytes)) and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def load(
    path_or_paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    format: str | None = None,
    reward_key: str | None = None,
    n_samples_per_prompt: int | None = None,
    on_file: ProgressCallback | None = None,
    reward_col: str | None = None,
    prompt_col: str | None = None,
    trajectory_col: str | None = None,
    step_col: str | None = None,
    advantage_col: str | None = None,
    mask_col: str | None = None,
    token_reduce: str = "first",
    reward_columns: Sequence[str] | None = None,
    reward_weights: Sequence[float] | Mapping[str, float] | None = None,
    num_generations: int | None = None,
    jobs: int | None = None,
    cache: str | os.PathLike | bool | None = None,
    engine: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
) -> pa.Table:
    """Read rollout dumps into one canonical table (see :mod:`rollaudit._table`), sorted by step.

    ``path_or_paths``: a dump file, a directory (a slime ``--dump-details``
    directory pairs its rollout and train dumps by step), a glob, or a list
    of those. ``format`` is detected from each file's content when not given.
    ``reward_key`` picks the trained-on reward from dict rewards (slime's
    ``--reward-key``); ``n_samples_per_prompt`` gives prompt keys as
    consecutive slices when a dump has none. ``on_file(path, n_bytes)`` is
    called in this process as each file is done (read, or found in the cache).

    Tables (verl, TRL, generic): ``reward_col``, ``prompt_col``,
    ``trajectory_col``, ``step_col``, ``advantage_col`` and ``mask_col``
    name the columns that hold each role (otherwise each format's own names,
    or the common ones, are used); ``token_reduce`` (``first``, ``last``,
    ``mean``) turns per-token advantage lists into one value per sample.
    TRL: ``reward_columns`` names the reward-function columns (default:
    the numeric ones), ``reward_weights`` weighs them (a list in their
    order, or a dict by name), ``num_generations`` fixes the group size
    (default: the first run of equal prompt texts).

    Each file is one step, its own batch (generic tables: the files of one
    step form one batch, in order).

    Whole runs: files are reduced one at a time to their audit columns
    (tokens are dropped before the next file is read), so memory stays flat
    however many files there are. ``jobs`` worker processes read files in
    parallel (default: 1 for one file or under 64 MB to read, else one per
    CPU up to 8; a script that loads with ``jobs>1`` needs multiprocessing's
    ``if __name__ == "__main__":`` guard).
    ``cache``: a directory keeping each file's reduced table, keyed by its
    path, size and modification time and the options (``True``: the default
    directory, ``$XDG_CACHE_HOME/rollaudit`` or ``~/.cache/rollaudit``;
    ``None``/``False``, the default: no cache), so that a second load of
    the same run reads no dump file. ``engine="ray"`` runs the per-file work
    as Ray tasks (``pip install 'rollaudit[ray]'``) on the cluster at
    ``ray_address`` (default: the running cluster, else a local Ray), the
    files being readable where the tasks run. Bad input raises
    :class:`~rollaudit.InputError` with one line naming the file, field and
    sample; unknown classes in a dump become inert placeholders (one
    :class:`~rollaudit.RollauditWarning` per file) and nothing the file
    names is ever run.
    """
    _check_options(format, reward_key, n_samples_per_prompt)
    table_options = _check_table_options(
        {
            "reward_col": reward_col,
            "prompt_col": prompt_col,
            "trajectory_col": trajectory_col,
            "step_col": step_col,
            "advantage_col": advantage_col,
            "mask_col": mask_col,
            "token_reduce": token_reduce,
            "reward_columns": reward_columns,
            "reward_weights": reward_weights,
            "num_generations": num_generations,
        }
    )
    run = _engine.run_options(jobs=jobs, cache=cache, engine=engine, ray_address=ray_address)
    files = expand_paths(path_or_paths)
    options = LoadOptions(
        reward_key=reward_key, n_samples_per_prompt=n_samples_per_prompt, on_file=on_file, **table_options
    )
    grouped: dict[str, tuple[list[Path], list[pa.Table]]] = {}
    for reduced in _engine.run_items(files, format, options, run, detect_format):
        paths, parts = grouped.setdefault(reduced.format, ([], []))
        paths.append(reduced.path)
        parts.append(reduced.table)
    tables: list[pa.Table] = []
    for name, (paths, parts) in grouped.items():
        tables.extend(FORMATS[name].combine(paths, parts, options))
    table = concat_tables(tables).sort_by([(STEP, "ascending"), (POSITION, "ascending")])
    # Which formats were read travels with the table: a caller need not open a file again to say so.
    return table.replace_schema_metadata({**(table.schema.metadata or {}), FORMATS_METADATA: "+".join(sorted(grouped))})


FORMATS_METADATA = b"rollaudit.formats"


def loaded_formats(table: pa.Table) -> list[str]:
    """The formats ``load`` read to make ``table`` (empty for a table made another way)."""
    text = (table.schema.metadata or {}).get(FORMATS_METADATA, b"").decode()
    return text.split("+") if text else []
