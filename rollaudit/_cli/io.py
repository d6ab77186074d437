"""What the commands read and write around the library: loading with a progress bar, and writing outputs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from .._errors import UsageError

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

    from .._loaders.options import LoadOptions

# Loads of at least this many files, or this many bytes, get a progress bar (on a terminal).
PROGRESS_MIN_FILES = 2
PROGRESS_MIN_BYTES = 64 * 1024 * 1024
CI_LOG_WIDTH = 120
"""Columns of a table when stdout is no terminal and COLUMNS is unset (a CI log); rich would use 80."""


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
        task = bar.add_task(files[0].name, total=total, completed_files=0, total_files=len(files))
        done = {"files": 0}

        def on_file(path: str, n_bytes: int) -> None:
            done["files"] += 1
            bar.update(task, advance=n_bytes, description=Path(path).name, completed_files=done["files"])

        yield on_file


def load_inputs(inputs: list[str], load: LoadOptions, *, quiet: bool) -> Loaded:
    """Expand the inputs, load them with ``load`` (a progress bar when big) and say what was loaded."""
    import rollaudit

    files = rollaudit.expand_paths(inputs)
    sizes = [path.stat().st_size for path in files]
    started = time.perf_counter()
    with progress(files, sizes, quiet) as on_file:
        table = rollaudit.load(files, load, on_file=on_file)
    seconds = time.perf_counter() - started
    return Loaded(
        table=table,
        summary={
            "format": "+".join(rollaudit.loaded_formats(table)),
            "files": [str(path) for path in files],
            "bytes": sum(sizes),
            "seconds": round(seconds, 4),
        },
    )


def check_plot_directory(directory: Path) -> Path:
    """A directory to write PNGs into: an existing writable one, or one that can be made. Checked up front."""
    from .._output import check_writable

    if directory.exists() and not directory.is_dir():
        raise UsageError("is not a directory", file=str(directory), expected="a directory for the PNGs")
    if directory.is_dir():
        check_writable(directory / "group_sizes.png")
    else:
        check_writable(directory)
    return directory


def echo_status(message: str, quiet: bool) -> None:
    if not quiet:
        typer.echo(message, err=True)


def write_text(text: str, output: Path | None, quiet: bool) -> None:
    """Text to stdout, or atomically to ``output``."""
    if output is None:
        typer.echo(text, nl=False)
        return
    from .._output import write_atomic

    write_atomic(output, text)
    echo_status(f"wrote {output}", quiet)


def terminal_text(renderable: Any, width: int = 100) -> str:
    """A rich renderable as plain text (for ``-o`` without --json/--markdown)."""
    from rich.console import Console

    buffer = StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False, force_terminal=False).print(renderable)
    return buffer.getvalue()


def log_console() -> Console:
    """The console of a report on stdout: the terminal's width, or 120 columns in a log."""
    import os

    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(highlight=False, width=CI_LOG_WIDTH)
    return console
