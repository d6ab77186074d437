"""``rollaudit.load``: dump files, lists, directories or globs to one canonical table.

Formats live in :data:`FORMATS`, a registry ``name -> Format``. A format says
how to recognise one of its files (``detect``), how to read a list of its
files into canonical tables (``read``, one table per step, each file reduced
as soon as it is read), and optionally which files of a directory are its
dumps (``expand_directory``). Adding a format is one entry there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from . import _slime
from ._errors import InputError, UsageError
from ._table import POSITION, STEP, concat_tables

ProgressCallback = Callable[[str, int], Any]


@dataclass(frozen=True)
class LoadOptions:
    """What a reader needs besides the paths."""

    reward_key: str | None = None
    n_samples_per_prompt: int | None = None
    on_file: ProgressCallback | None = None


@dataclass(frozen=True)
class Format:
    """One dump format rollaudit reads."""

    name: str
    description: str
    detect: Callable[[Path], bool]
    read: Callable[[list[Path], LoadOptions], list[pa.Table]]
    expand_directory: Callable[[Path], list[Path] | None] | None = None


FORMATS: dict[str, Format] = {
    "slime": Format(
        name="slime",
        description="torch.save .pt zips of rollout and train dumps",
        detect=_slime.detect,
        read=_slime.read,
        expand_directory=_slime.expand_directory,
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


def load(
    path_or_paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    format: str | None = None,
    reward_key: str | None = None,
    n_samples_per_prompt: int | None = None,
    on_file: ProgressCallback | None = None,
) -> pa.Table:
    """Read rollout dumps into one canonical table (see :mod:`rollaudit._table`), sorted by step.

    ``path_or_paths``: a dump file, a directory (a slime ``--dump-details``
    directory pairs its rollout and train dumps by step), a glob, or a list
    of those. ``format`` is detected from each file's content when not given.
    ``reward_key`` picks the trained-on reward from dict rewards (slime's
    ``--reward-key``); ``n_samples_per_prompt`` gives prompt keys as
    consecutive slices when a dump has none. ``on_file(path, n_bytes)`` is
    called after each file is read.

    Each file is one step, its own batch. Bad input raises
    :class:`~rollaudit.InputError` with one line naming the file, field and
    sample; unknown classes in a dump become inert placeholders (one
    :class:`~rollaudit.RollauditWarning` per file) and nothing the file
    names is ever run.
    """
    _check_options(format, reward_key, n_samples_per_prompt)
    files = expand_paths(path_or_paths)
    grouped: dict[str, list[Path]] = {}
    for path in files:
        grouped.setdefault(format or detect_format(path), []).append(path)
    options = LoadOptions(reward_key=reward_key, n_samples_per_prompt=n_samples_per_prompt, on_file=on_file)
    tables: list[pa.Table] = []
    for name, paths in grouped.items():
        tables.extend(FORMATS[name].read(paths, options))
    table = concat_tables(tables)
    return table.sort_by([(STEP, "ascending"), (POSITION, "ascending")])
