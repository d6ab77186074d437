"""A directory to the dump files of the one run it holds: a bounded walk that asks each format where its runs are.

At each directory the walk asks every format's ``expand_directory`` whether the directory is one of its runs. A
format answers with that run's files when it recognises the directory: its dump directory, or a run root it knows
(slime's ``--dump-details`` directory above ``rollout_data/`` and ``train_data/``, verl's run directory above one
``rollout_data_dir``, an AReaL trial above ``rollout/``, an rllm experiment above ``episodes/``; a format whose runs
sit in a hidden directory, as ART's ``.art``, or in numbered folders, as tinker's ``iteration_*``, reaches into them
from the directory above). The directory is then that format's and the walk goes no deeper. A format answers None
for a directory that holds none of its runs, or several (a verl directory above two rollout directories): the walk
then searches the subdirectories, so run roots nested in experiment folders (AReaL's ``experiments/logs/...``,
rllm's ``logs/...``) are found without any format naming the folders above them.

Generic tables are the fallback: they claim a directory only when no framework does, and do not stop the walk.
Files that are not dumps (READMEs, ``expected*`` reference outputs, configs, tokenizers, ``metrics.jsonl``) are
never taken; hidden directories, ``expected*`` directories and symbolic links already seen are never entered, and
the walk stops at ``MAX_DEPTH``. Two or more runs are never merged: each is named (its folder below the runs'
common folder, and its own name where a format keeps several runs in one folder, as open-instruct does), and
:func:`directory_files` reads the one picked by name, or raises :class:`~..base.SeveralRuns` naming them all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..._errors import InputError, did_you_mean
from ..base import SeveralRuns
from ..registry import FORMATS

MAX_DEPTH = 8
"""Directory levels searched below the one given."""
MAX_RUNS_NAMED = 6
"""Runs an error names before it says how many more there are (the line stays readable)."""
GENERIC = "generic"
DUMP_HINT = "a rollout dump of a framework the README lists, or a table with a reward column"
"""What a dump is, in a few words: an error never lists every format."""

_NOT_DUMP_SUFFIXES = frozenset({".md", ".rst", ".txt", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".py", ".sh"})
_NOT_DUMP_NAMES = frozenset(
    {"metrics.jsonl", "special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json", "tokenizer.model"}
)
_NUMBER = re.compile(r"\d+")


def natural_key(path: Path) -> tuple:
    """Sorts ``2.jsonl`` before ``10.jsonl``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", str(path)))


def is_side_file(path: Path) -> bool:
    """A file a run directory holds beside its dumps that is no dump: documentation, a reference output, a config,
    a tokenizer, a metrics log. By name only, so that a directory's dumps are found without opening a file."""
    name = path.name.lower()
    stem = name.split(".", 1)[0]
    return (
        name.startswith(("readme", "expected", "tokenizer", "."))
        or name in _NOT_DUMP_NAMES
        or path.suffix.lower() in _NOT_DUMP_SUFFIXES
        or stem.endswith("config")
    )


def _is_searched(directory: Path) -> bool:
    """Hidden directories (a format that keeps its runs in one reaches into it itself) and reference outputs are
    not searched."""
    name = directory.name.lower()
    return not name.startswith((".", "expected", "__pycache__"))


@dataclass(frozen=True)
class Run:
    """The dumps one format found at one directory: its run."""

    root: Path
    format: str
    files: tuple[Path, ...]
    name: str = ""
    """The run's own name where its format keeps several runs in one folder (open-instruct's run_name)."""

    def where(self, top: Path) -> str:
        """The run's name below ``top``: its folder, and its own name where it has one (``rollouts/oi_default``);
        ``.`` for the run at ``top`` itself."""
        folder = os.path.relpath(self.root, top) if self.root != top else "."
        if not self.name:
            return folder
        return self.name if folder == "." else f"{folder}/{self.name}"

    def label(self, top: Path) -> str:
        """``rollout_data_v1 (verl, steps 5-6)``: where the run is (below ``top``), its format and its steps."""
        return f"{self.where(top)} ({self.format}, {_steps_label(self)})"


def _steps_label(run: Run) -> str:
    """The run's steps as its paths name them, nothing opened: the first number of the first numbered path part
    below the files' common folder (raised above folders whose own name holds the number, as AReaL's version
    folders, but never above the run). A name without numbers gives the count of files."""
    folders = {file.parent for file in run.files}
    base = Path(os.path.commonpath([str(folder) for folder in folders])) if folders else run.root
    while base != run.root and run.root in base.parents and _NUMBER.search(base.name):
        base = base.parent
    steps: set[int] = set()
    for file in run.files:
        try:
            parts = file.relative_to(base).parts
        except ValueError:
            parts = (file.name,)
        number = next((found for part in parts if (found := _NUMBER.search(part))), None)
        if number is not None:
            steps.add(int(number.group()))
    count = f"{len(run.files)} file{'s' if len(run.files) != 1 else ''}"
    if not steps:
        return count
    ordered = sorted(steps)
    if len(ordered) == 1:
        return f"step {ordered[0]}"
    if ordered[-1] - ordered[0] == len(ordered) - 1:
        return f"steps {ordered[0]}-{ordered[-1]}"
    if len(ordered) <= 4:
        return "steps " + ", ".join(map(str, ordered))
    return f"{len(ordered)} steps from {ordered[0]} to {ordered[-1]}"


def _claims(directory: Path) -> tuple[list[Run], bool]:
    """The runs the formats find at ``directory``, and whether a framework's format owns it (then nothing below
    it is searched). The registry's order decides, as it does for a file's format: a format whose files another
    already took (AReaL's task files look like verl's step files) adds no run, nor does one that reaches into the
    subfolders of a directory another format owns (miles' ``trajectory/{id}.jsonl`` look like a verl directory).
    Dumps of a second format lying in the directory itself are a second run."""
    runs: list[Run] = []
    taken: set[Path] = set()
    for name, entry in FORMATS.items():
        if name == GENERIC:
            continue
        try:
            named = {"": list(entry.expand_directory(directory) or ())}
        except SeveralRuns as several:  # a folder holding several runs of the format side by side
            named = several.runs
        for run_name, listed in named.items():
            files = [path for path in listed if not is_side_file(path)]
            if not files or taken.intersection(files):
                continue
            if any(found.format != name for found in runs) and any(path.parent != directory for path in files):
                continue
            runs.append(Run(directory, name, tuple(files), run_name))
            taken.update(files)
    if runs:
        return runs, True
    tables = [path for path in FORMATS[GENERIC].expand_directory(directory) or () if _is_table(path)]
    return ([Run(directory, GENERIC, tuple(tables))] if tables else []), False


def run_files(run: Run) -> list[Path]:
    """The files of a run found before, listed again at its root by its format (names only, no other format
    asked): what a follower of a growing run needs at each look. Empty when the format no longer finds it."""
    entry = FORMATS[run.format]
    try:
        listed = entry.expand_directory(run.root) or ()
    except SeveralRuns as several:
        listed = several.runs.get(run.name, ())
    keep = _is_table if run.format == GENERIC else (lambda path: not is_side_file(path))
    return sorted((path for path in listed if keep(path)), key=natural_key)


def _is_table(path: Path) -> bool:
    """A table file of a directory: not a side file, and a ``.json`` file only when it reads as a table (a
    pretty-printed config does not)."""
    if is_side_file(path):
        return False
    return path.suffix.lower() != ".json" or FORMATS[GENERIC].detect(path)


def find_runs(directory: Path) -> list[Run]:
    """Every run at or below ``directory``, in walk order (subdirectories in natural order), at most ``MAX_DEPTH``
    levels down; a directory reached twice (through a symbolic link) is searched once."""
    runs: list[Run] = []
    seen: set[tuple[int, int]] = set()

    def visit(folder: Path, depth: int) -> None:
        try:
            status = folder.stat()
        except OSError:
            return
        if (status.st_dev, status.st_ino) in seen:
            return
        seen.add((status.st_dev, status.st_ino))
        try:
            found, owned = _claims(folder)
            subfolders = [] if owned or depth >= MAX_DEPTH else _subdirectories(folder)
        except OSError:
            if depth == 0:
                raise
            return  # an unreadable folder below the one given holds nothing rollaudit can read
        runs.extend(found)
        for subfolder in subfolders:
            visit(subfolder, depth + 1)

    try:
        visit(directory, 0)
    except OSError as error:
        raise InputError(f"cannot read the directory: {error.strerror or error}", file=str(directory)) from None
    return runs


def _subdirectories(folder: Path) -> list[Path]:
    return sorted((path for path in folder.iterdir() if _is_searched(path) and path.is_dir()), key=natural_key)


def named_runs(directory: Path, runs: list[Run]) -> dict[str, Run]:
    """The runs found at or below ``directory`` by name: each one's place below their common folder (``trial0``,
    ``rollout_data_v1``, open-instruct's ``oi_default``), in walk order; ``.`` for one run at ``directory``. Where
    dumps of two formats lie in one folder, each run's name ends with its format (``slime``, ``a/verl``)."""
    common = _common_folder(directory, runs)
    places = [run.where(common) for run in runs]
    shared = {place for place in places if places.count(place) > 1}
    return {
        (place if place not in shared else run.format if place == "." else f"{place}/{run.format}"): run
        for place, run in zip(places, runs, strict=True)
    }


def directory_files(directory: Path, detect: Callable[[Path], str], run: str | None = None) -> list[Path]:
    """The dump files of the one run at or below ``directory`` (of the run named ``run``, where it holds several),
    in natural order. ``detect(path)`` names a file's format (InputError when none reads it): where no format
    recognises the layout, the directory's own files that some format reads by content are its dumps.
    :class:`~..base.SeveralRuns` when it holds several runs and none is named; InputError when it holds none, or
    none of that name."""
    runs = find_runs(directory)
    if run is not None and runs:
        return sorted(pick_run(directory, runs, run).files, key=natural_key)
    if len(runs) == 1:
        return sorted(runs[0].files, key=natural_key)
    if runs:
        raise SeveralRuns(
            _several_runs(directory, runs),
            runs={name: sorted(found.files, key=natural_key) for name, found in named_runs(directory, runs).items()},
            file=str(directory),
            expected="one run: name it with --run, or name its directory",
        )
    if run is not None:
        raise InputError(f"holds no run named {run!r}", file=str(directory), expected="a directory holding runs")
    files = sorted(_read_by_content(directory, detect), key=natural_key)
    if files:
        return files
    hidden = any(path.name.startswith(".") and path.is_dir() for path in directory.iterdir())
    raise InputError(
        "holds no dump files" + (" (hidden directories are searched only when named)" if hidden else ""),
        file=str(directory),
        expected=DUMP_HINT,
    )


def pick_run(directory: Path, runs: list[Run], name: str) -> Run:
    """The run named ``name`` (as :func:`named_runs` names it, or by its last folders: ``trial0`` for
    ``logs/trial0``); InputError naming the runs when none or several match."""
    named = named_runs(directory, runs)
    wanted = name.strip("/")
    matches = [run for key, run in named.items() if key == wanted] or [
        run for key, run in named.items() if key.endswith("/" + wanted) or (key == "." and run.root.name == wanted)
    ]
    if len(matches) == 1:
        return matches[0]
    listed = list(named)[:MAX_RUNS_NAMED]
    if len(named) > MAX_RUNS_NAMED:
        listed.append(f"and {len(named) - MAX_RUNS_NAMED} more")
    if matches:
        problem = f"holds {len(matches)} runs named {name!r}"
    else:
        problem = f"holds no run named {name!r}{did_you_mean(wanted, named)}"
    raise InputError(problem, file=str(directory), expected=f"one of its runs: {', '.join(listed)}")


def _common_folder(directory: Path, runs: list[Run]) -> Path:
    """The folder the runs' names are said from: their common folder, where none of them is that folder itself
    (``trial0`` and ``trial1`` under ``experiments/logs/...``); else ``directory``."""
    if not runs:
        return directory
    common = Path(os.path.commonpath([str(run.root) for run in runs]))
    if common != directory and all(run.root != common for run in runs):
        return common
    return directory


def _several_runs(directory: Path, runs: list[Run]) -> str:
    """``holds 2 runs (not merged) under a/b: trial0 (areal, steps 3-4), trial1 (areal, step 3)``: the folders
    above them all said once, so that the line stays short."""
    common = _common_folder(directory, runs)
    under = f" under {os.path.relpath(common, directory)}" if common != directory else ""
    labels = [run.label(common) for run in runs[:MAX_RUNS_NAMED]]
    if len(runs) > MAX_RUNS_NAMED:
        labels.append(f"and {len(runs) - MAX_RUNS_NAMED} more")
    return f"holds {len(runs)} runs (not merged){under}: {', '.join(labels)}"


def _read_by_content(directory: Path, detect: Callable[[Path], str]) -> list[Path]:
    """The directory's own files, not side files, that a format reads by content (dumps under names no layout
    gives them)."""
    files = []
    for path in directory.iterdir():
        if not path.is_file() or is_side_file(path):
            continue
        try:
            detect(path)
        except InputError:
            continue
        files.append(path)
    return files
