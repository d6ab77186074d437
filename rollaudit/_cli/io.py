"""What the commands read and write around the library: loading with a progress bar, and writing outputs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from .._errors import RollauditError, UsageError, log_safe, visible

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

    from .._loaders.options import LoadOptions
    from .._output import Output

_Outcome = TypeVar("_Outcome")

# Loads of at least this many files, or this many bytes, get a progress bar (on a terminal).
PROGRESS_MIN_FILES = 2
PROGRESS_MIN_BYTES = 64 * 1024 * 1024
CI_LOG_WIDTH = 120
"""Columns of a table when stdout is no terminal and COLUMNS is unset (a CI log); rich would use 80."""
MIN_REPORT_WIDTH = 60
"""Fewer columns than this (``COLUMNS=1``) would fold every cell into a column of single characters."""


_COMMAND_STARTED: list[float] = []


def start_command_clock() -> None:
    """Mark the start of a command (the command group's ``main``): the report header's "in all" time."""
    _COMMAND_STARTED[:] = [time.perf_counter()]


def command_seconds() -> float | None:
    """Seconds since :func:`start_command_clock`, or None outside a command."""
    return round(time.perf_counter() - _COMMAND_STARTED[0], 4) if _COMMAND_STARTED else None


@dataclass
class Loaded:
    """A loaded table and what the load was: the ``load`` object of ``--json`` and the report header."""

    table: pa.Table
    summary: dict[str, Any] = field(default_factory=dict)


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


@contextmanager
def progress(files: list[Path], sizes: list[int], quiet: bool, console: Console | None = None) -> Iterator[Any]:
    """An ``on_file`` callback for ``rollaudit.load``, drawing a progress bar on stderr for big loads."""
    console = console or _stderr_console()
    total = sum(sizes)
    big = len(files) >= PROGRESS_MIN_FILES or total >= PROGRESS_MIN_BYTES
    if quiet or not big or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("loading"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[completed_files]}/{task.fields[total_files]} files", markup=False),
        TimeElapsedColumn(),
        TextColumn("{task.description}", markup=False),
        console=console,
        transient=True,
    ) as bar:
        # A file name is text the run directory chooses: shown escaped, never acted on by the terminal.
        task = bar.add_task(visible(files[0].name), total=total, completed_files=0, total_files=len(files))
        done = {"files": 0}

        def on_file(path: str, n_bytes: int) -> None:
            done["files"] += 1
            bar.update(task, advance=n_bytes, description=visible(Path(path).name), completed_files=done["files"])

        yield on_file


AUDIT_STATUS_MIN_SAMPLES = 1_000_000
"""An audit of at least this many samples shows a spinner on stderr (on a terminal): the run is working."""


@contextmanager
def audit_status(samples: int, schemes: int, quiet: bool, console: Console | None = None) -> Iterator[None]:
    """A transient ``auditing ...`` spinner on stderr while a long audit runs (never in a pipe or a log)."""
    console = console or _stderr_console()
    if quiet or samples < AUDIT_STATUS_MIN_SAMPLES or not console.is_terminal:
        yield
        return
    with console.status(f"auditing {samples:,} samples under {schemes} schemes", spinner="dots"):
        yield


def input_runs(inputs: list[str], load: LoadOptions) -> list[tuple[str | None, list[Path]]]:
    """The runs a command reads, each with its files: ``[(None, files)]`` where the inputs are one run (or
    ``--run`` names one), else ``(name, files)`` for each run of the one directory given, in the order found."""
    import rollaudit

    from .._loaders.base import SeveralRuns

    try:
        return [(None, rollaudit.expand_paths(inputs, load.run))]
    except SeveralRuns as several:
        if len(inputs) != 1:  # one of several inputs: which of its runs joins the others is the user's to say
            raise
        return list(several.runs.items())


def refuse_several_runs(inputs: list[str], names: list[str | None], **options: object) -> None:
    """A UsageError where several runs are read and an option set in ``options`` (by its flag) writes one thing
    for one run (an HTML page, a baseline)."""
    if len(names) < 2:
        return
    for flag, value in options.items():
        if value not in (None, False):
            listed = ", ".join(str(name) for name in names[:6]) + (" ..." if len(names) > 6 else "")
            raise UsageError(
                f"{flag} writes one run's output, and {inputs[0]} holds {len(names)} runs ({listed})",
                expected="one run: name it with --run",
            )


def run_heading(name: str | None, names: list[str | None]) -> str:
    """``Run trial0 (1 of 2 runs)``: what heads each run's report where a directory holds several."""
    return f"Run {name} ({names.index(name) + 1} of {len(names)} runs)"


def each_run(
    runs: list[tuple[str | None, list[Path]]], read: Callable[[str | None, list[Path]], _Outcome]
) -> tuple[list[tuple[str | None, _Outcome]], list[tuple[str, str]]]:
    """``read(name, files)`` of each run: what it gave, by run, and the error line of each named run it could
    not read (said on stderr at once; the other runs are still read). The error of the one unnamed run (the
    inputs are one run) is raised, as a command's error is."""
    outcomes: list[tuple[str | None, _Outcome]] = []
    errors: list[tuple[str, str]] = []
    for name, files in runs:
        try:
            outcomes.append((name, read(name, files)))
        except RollauditError as error:
            if name is None:
                raise
            line = f"run {name}: {error.line()}"
            echo_line(f"error: {line}", err=True)
            errors.append((name, line))
    return outcomes, errors


def load_inputs(
    files: list[Path], load: LoadOptions, *, quiet: bool, audits: bool = False, run: str | None = None
) -> Loaded:
    """Load the files of one run (:func:`input_runs`) with ``load`` (a progress bar when big) and say what was
    loaded; ``audits``: the command audits the table next, and imports the audit's engine (torch) while worker
    processes read; ``run``: the run's name, where the inputs hold several (said in what was loaded)."""
    import rollaudit

    from .._loaders.run.engine import meanwhile

    sizes = [path.stat().st_size for path in files]
    started = time.perf_counter()
    with progress(files, sizes, quiet) as on_file, meanwhile(_import_audit_engine) if audits else nullcontext():
        table = rollaudit.load(files, load, on_file=on_file)
    seconds = time.perf_counter() - started
    summary: dict[str, Any] = {
        "format": "+".join(rollaudit.loaded_formats(table)),
        "files": [str(path) for path in files],
        "bytes": sum(sizes),
        "seconds": round(seconds, 4),
    }
    if run is not None:
        summary["run"] = run
    return Loaded(table=table, summary=summary)


def _import_audit_engine() -> None:
    with suppress(ImportError):  # the audit names what is missing
        import rollaudit._audit.api  # noqa: F401  (torch, and every module of the audit)


def check_plot_directory(directory: Path) -> Path:
    """A directory for the figures: an existing writable one, or one whose missing levels (``a/b/c``) can be
    made under its nearest existing ancestor. Checked up front, by trying; made when the figures are written."""
    from .._output import check_writable

    if directory.exists() and not directory.is_dir():
        raise UsageError("is not a directory", file=str(directory), expected="a directory for the figures")
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError("is not a directory", file=str(existing), expected="a directory for the figures")
    check_writable(existing / "group_sizes.png")
    return directory


def echo_line(line: str, *, err: bool = False) -> None:
    """One line of a command's own (a watched step, ``wrote report.md``) on stdout or stderr: the file names and
    dump text in it shown escaped, nothing in it a terminal or a CI runner would act on."""
    typer.echo(log_safe(visible(line)), err=err)


def echo_status(message: str, quiet: bool) -> None:
    """A status line on stderr unless ``quiet``."""
    if not quiet:
        echo_line(message, err=True)


def write_text(text: str, output: Output | None, quiet: bool) -> None:
    """Text to stdout, or whole to ``output`` (prepared before the work began)."""
    if output is None:
        typer.echo(text, nl=False)
        return
    output.write(text)
    if not output.stream or output.target is not None:
        echo_status(f"wrote {output.path}", quiet)


def log_width() -> int:
    """Columns of a report that goes to a file or a pipe: ``COLUMNS`` when set, else 120 (rich would use 80)."""
    import os

    columns = os.environ.get("COLUMNS", "")
    return max(int(columns), MIN_REPORT_WIDTH) if columns.isdigit() and int(columns) > 0 else CI_LOG_WIDTH


def terminal_text(renderable: Any, width: int | None = None) -> str:
    """A rich renderable as plain text, ``width`` columns (default :func:`log_width`), no trailing spaces, no line
    a CI runner would run (:func:`~rollaudit._errors.log_safe`: a folded prompt key can start a line)."""
    from rich.console import Console

    buffer = StringIO()
    Console(file=buffer, width=width or log_width(), color_system=None, highlight=False, force_terminal=False).print(
        renderable
    )
    return log_safe("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))


def print_report(renderable: Any) -> None:
    """A rich renderable on stdout: styled to the terminal's width, or as plain text in a pipe or a log.

    A terminal may be a CI log too (``FORCE_COLOR`` makes rich style its output): the styled text goes through
    :func:`~rollaudit._errors.log_safe` as the plain text does."""
    from rich.console import Console

    console = Console(highlight=False)
    if console.is_terminal:
        console.width = max(console.width, MIN_REPORT_WIDTH)
        with console.capture() as captured:
            console.print(renderable)
        console.file.write(log_safe(captured.get()))
        console.file.flush()
    else:
        typer.echo(terminal_text(renderable), nl=False)
