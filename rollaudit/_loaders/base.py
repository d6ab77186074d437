"""The one interface every dump format implements (a loader is a plug-in: this, plus a line in the registry).

A format is four functions and a name:

``detect(path) -> bool``
    whether a file is one of its dumps, by content (and, where a framework's
    layout says so, by name); never raises.
``expand_directory(directory) -> list[Path] | None``
    which files of a directory are its dumps (any order), or None when the
    directory holds none of them. A run directory above a framework's step
    directories is expanded here too.
``read(path, options) -> pyarrow.Table``
    one file to a small table of what the audit needs (its own layout,
    Parquet-safe: the cache stores it, worker processes send it back).
    Module-level, so that worker processes and Ray tasks can run it.
``combine(paths, tables, options) -> list[pyarrow.Table]``
    the read tables of a run's files (file order) to canonical tables, one
    per step (slime pairs train dumps with rollout dumps here, AReaL joins
    the task files of a version). Runs in the loading process.

The engine (worker processes, Ray, the cache) and ``rollaudit.load`` work
with any format through this interface alone.

For ``rollaudit watch``, a format whose steps are several files says how a file's step is named (``step_of``) and
whether a step's files keep landing with no sign of the last (``step_grows``); a file is whole by its own bytes
(see :mod:`rollaudit._watch.files`).

Besides, a format declares the reading options it takes (``options``: names
of :class:`~.options.LoadOptions` fields) and what it reads instead of the
others (``reads``); :meth:`Format.check_options` refuses an option it would
ignore, so that a misplaced ``--prompt-col`` is never silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import InputError, UsageError

if TYPE_CHECKING:
    import pyarrow as pa

    from .config import Setting
    from .options import LoadOptions


@dataclass(frozen=True)
class Format:
    """One dump format rollaudit reads: its name, a one-line description, the four functions above, and what it
    reads (``rollaudit formats`` prints these fields)."""

    name: str
    description: str
    detect: Callable[[Path], bool]
    read: Callable[[Path, LoadOptions], pa.Table]
    combine: Callable[[list[Path], list[pa.Table], LoadOptions], list[pa.Table]]
    expand_directory: Callable[[Path], list[Path] | None]
    options: frozenset[str] = field(default_factory=frozenset)
    """The reading options (LoadOptions fields) this format takes; ``format`` and the run options always pass."""
    reads: str = ""
    """What the format reads without options, in its framework's words (named when an option is refused)."""
    prompt: str = ""
    """The field that keys a sample's prompt group: the true prompt the dump carries (the reference's groups)."""
    framework_groups: str = ""
    """Where the framework grouped by something else than the true prompt (a place in the batch, a trajectory):
    that key, and which presets reproduce it; empty where the framework grouped by ``prompt`` itself."""
    trajectory: str | None = None
    """The field that keys a sample's trajectory, or None when the dumps have none."""
    reward: str = ""
    """The field the rewards come from."""
    advantage: str | None = None
    """The field of the advantages the run recorded, or None when the dumps record none."""
    trained_with: tuple[tuple[str | None, str], ...] = ()
    """``(preset, why)`` per layout: the preset the loader stamps as the run's default (``trained_with``), None
    when it cannot tell which, and why; empty when the format names none."""
    read_files: Callable[[list[Path], LoadOptions], list[pa.Table]] | None = None
    """``read`` of several files at once, each table as ``read`` makes it, where a format's per-file work is mostly
    fixed cost (verl's 460 KB step files): a worker reads its task's files of the format with one call. None: file
    by file."""
    cannot_audit: tuple[str, ...] = ()
    """What its dumps cannot show, in the words the report uses (e.g. no trajectory key)."""
    step_of: Callable[[Path], str] | None = None
    """``rollaudit watch``: the step a file belongs to, from its path, where a step is several files read
    together (slime's rollout dump and the train dumps that land after it); None: each file is read on its own."""
    step_grows: bool = False
    """``rollaudit watch``: whether a step's files keep landing one by one with no sign of the last (AReaL's task
    files in a version directory, rllm's episodes in a step folder); such a step is complete once a later step
    has started, or the run has gone idle. Otherwise each whole file is audited as it lands, and a later file of
    the same step gives that step a new record."""
    settings: tuple[Setting, ...] = ()
    """The settings of the run's config that decide its arithmetic (:mod:`.config`), which ``combine`` reads from
    ``options.run_config``; empty where the format reads no config (``--config`` is then refused)."""
    config_files: Callable[[list[Path]], list[Path]] | None = None
    """Where the framework saves its run's config, given the run's dump files: the candidates, first found wins."""
    config_where: str = ""
    """Where the framework saves its run's config, in words (``rollaudit formats`` prints it)."""
    steps_appended: bool = False
    """``rollaudit watch``: whether one file gains a step at a time (open-instruct appends every step to one
    file): its newest step is audited once a later one is appended, or the run has gone idle; at each look, only
    the lines appended since the last are parsed."""

    def check_options(self, options: LoadOptions) -> None:
        """A UsageError naming the first reading option set in ``options`` that this format does not take."""
        from .options import set_reading_options

        for name in set_reading_options(options):
            if name in self.options:
                continue
            flags = sorted("--" + option.replace("_", "-") for option in self.options)
            takes = (
                f"one of the options {self.name} reads: {', '.join(flags)}"
                if self.options
                else f"no reading option: {self.name} dumps name their own keys"
            )
            raise UsageError(
                f"--{name.replace('_', '-')} is not read by {self.name} dumps: they read "
                f"{self.reads or self.description}",
                expected=takes,
            )

    def read_all(self, paths: list[Path], options: LoadOptions) -> list[pa.Table]:
        """Read ``paths`` one after the other in this process and combine them: one canonical table per step."""
        return self.combine(paths, [self.read(path, options) for path in paths], options)


class SeveralRuns(InputError):
    """A directory that holds several runs, never merged: ``runs`` maps each run's name to its files. A format's
    ``expand_directory`` raises it where one folder holds several runs side by side (open-instruct's
    ``{run_name}_rollouts_*.jsonl``); the directory search raises it where it finds several run directories."""

    def __init__(self, message: str, *, runs: dict[str, list[Path]], **where: Any) -> None:
        self.runs = runs
        super().__init__(message, **where)


def folder_step(path: Path) -> str:
    """A file's step is its folder (a ``step_of`` for runs that write a directory per step)."""
    return str(path.parent)
