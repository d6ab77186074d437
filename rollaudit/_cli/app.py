"""The ``rollaudit`` command group, and the one place where errors become exit codes.

Commands (:mod:`.commands`) parse options, call the library (load -> audit
-> Report) and hand the result to a renderer; no numbers are made there.
The library is imported inside the command bodies so that ``rollaudit
--help`` loads neither torch, pandas nor matplotlib.

Errors are mapped to exit codes in :meth:`RollauditGroup.main`: a
:class:`~rollaudit.RollauditError` prints ``error: <one line>`` and exits
with its ``exit_code`` (2 for bad input or usage, 1 for a failed gate); a
click usage error (bad or missing option) prints one line and exits 2.
Anything else escaping a command is a bug and surfaces with its traceback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperGroup

try:  # typer >= 0.2x carries its own copy of click; older ones use click itself.
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

from .._errors import RollauditError, RollauditWarning, log_safe, visible
from .._memory import prefer_small_pages, prefer_system_allocator


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _show_warning(
    message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """A RollauditWarning is one line on stderr; other warnings keep Python's format. Either may name a file or
    quote a dump: shown escaped, as every line rollaudit prints."""
    if issubclass(category, RollauditWarning):
        typer.echo(log_safe(f"warning: {visible(_one_line(message))}"), err=True)
    else:
        text = warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n")
        typer.echo(log_safe("\n".join(visible(part) for part in text.split("\n"))), err=True)


# click >= 8.2 raises this for a bare ``rollaudit``; older versions print the help themselves (never raised).
_NO_ARGS_IS_HELP: type[click_exceptions.ClickException] = getattr(click_exceptions, "NoArgsIsHelpError", None) or type(
    "_NeverRaised", (click_exceptions.ClickException,), {}
)


INTERRUPTED = 130
"""The exit code of a run stopped by Ctrl-C (128 + SIGINT, as shells report it)."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP: stop the command the way Ctrl-C does (outputs not half-written, temporaries removed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _signals_stop_the_command() -> Iterator[None]:
    """While a command runs, SIGTERM and SIGHUP raise :class:`Terminated` (only in the main thread, where Python
    runs signal handlers; a library caller's own handlers are put back afterwards)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous[signum] = signal.signal(signum, terminate)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP held back until the block ends, then delivered, so that what the block writes is
    written whole (a watched step reaches every sink or none). A second signal in the block is delivered at once:
    a write that hangs can still be stopped. In the main thread only, where Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous: dict[int, Any] = {}

    def hold(signum: int, frame: Any) -> None:
        if caught and callable(previous[signum]):
            caught.clear()  # delivered now, and not again as the block ends
            previous[signum](signum, frame)
            return
        caught.append(signum)

    for held in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[held] = signal.signal(held, hold)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        if caught:
            signal.raise_signal(caught[0])


def _interrupted() -> int:
    """Ctrl-C: one line, and the shell's code for SIGINT (nothing was written half-way: outputs are atomic)."""
    typer.echo("error: interrupted", err=True)
    return INTERRUPTED


def _error(line: str, code: int) -> int:
    """``error: <line>`` on stderr; a usage or input error also annotates a GitHub Actions run."""
    line = visible(line)  # a click message can quote an argument (a file name) as it was typed
    typer.echo(log_safe(f"error: {line}"), err=True)
    if code == 2:
        from .._render.gate import emit_github_error

        emit_github_error(line)
    return code


class _NamedArgument(TyperArgument):
    """An argument shown by its metavar alone: ``DUMP...``, not typer's ``{DUMP}...`` and ``DUMP <list[str]>``."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None if self.metavar else super().display_type_rich(ctx)

    def display_type(self, ctx: Any) -> str:
        return "" if self.metavar else super().display_type(ctx)

    def _usage_display_name(self) -> str:
        name = self.metavar or self.name or ""
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")


class RollauditGroup(TyperGroup):
    """The command group; its ``main`` is the one place where exceptions become exit codes."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        for parameter in getattr(command, "params", []):
            if type(parameter) is TyperArgument:
                parameter.__class__ = _NamedArgument
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command with its whole first sentence (click cuts it to the width with "...")."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        from .._output import discard_temporaries
        from .io import start_command_clock

        start_command_clock()
        with warnings.catch_warnings(), _signals_stop_the_command():
            # "always": the same warning in a second run of the same process (tests, notebooks) still shows.
            warnings.simplefilter("always", RollauditWarning)
            warnings.showwarning = _show_warning
            code = self._exit_code(
                lambda: super(RollauditGroup, self).main(
                    args=args,
                    prog_name=prog_name or "rollaudit",
                    complete_var=complete_var,
                    standalone_mode=False,
                    **extra,
                )
            )
        discard_temporaries()  # an output reserved by a command that then failed
        if standalone_mode:
            sys.exit(code)
        return code

    @staticmethod
    def _exit_code(run: Callable[[], Any]) -> int:
        try:
            result = run()
        except RollauditError as error:
            return _error(error.line(), error.exit_code)
        except Terminated as error:
            typer.echo(f"error: {signal.Signals(error.signum).name.removeprefix('SIG').lower()}: stopped", err=True)
            return 128 + error.signum
        except KeyboardInterrupt:
            return _interrupted()
        except _NO_ARGS_IS_HELP as error:
            # ``rollaudit`` alone asks for help: not a mistake. The message is the help text (rich help,
            # were it switched on, would have printed itself already and left the message empty).
            if error.format_message().strip():
                typer.echo(error.format_message())
            return 0
        except BrokenPipeError:
            # stdout closed early (``rollaudit compare ... | head``): stop quietly, and keep Python's
            # final flush from failing on the same pipe.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        except click_exceptions.UsageError as error:
            hint = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
            # typer words a bad choice through pydantic ("Value error, 'gpu' is not one of ..."): drop the prefix.
            message = _one_line(error.format_message()).replace("Value error, ", "")
            return _error(f"{message}{hint}", error.exit_code)
        except click_exceptions.ClickException as error:
            return _error(_one_line(error.format_message()), error.exit_code)
        except typer.Abort as error:
            if isinstance(error.__cause__, KeyboardInterrupt):  # click's own Ctrl-C handling
                return _interrupted()
            typer.echo("error: aborted", err=True)
            return 1
        if result == INTERRUPTED:  # typer turns Ctrl-C in a command into a quiet exit 130
            return _interrupted()
        return result if isinstance(result, int) else 0


app = typer.Typer(
    name="rollaudit",
    cls=RollauditGroup,
    help="Audit the advantages of RL-for-LLM rollout dumps: batch-wide vs per-prompt vs trajectory-level GRPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        from .._version import __version__

        typer.echo(f"rollaudit {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Show the version and exit."),
    ] = False,
) -> None:
    """Audit the advantages of RL-for-LLM rollout dumps: batch-wide vs per-prompt vs trajectory-level GRPO."""


def _degrade_unencodable_output() -> None:
    """A stdout that cannot encode every character (``PYTHONIOENCODING=cp1252``, a Windows console, a latin-1
    pipe) shows ``?`` for what it cannot write instead of ending the command in a UnicodeEncodeError. stderr does
    so already (Python writes it with ``backslashreplace``)."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None and getattr(sys.stdout, "errors", None) == "strict":
        reconfigure(errors="replace")


def main(argv: list[str] | None = None) -> None:
    """The console script ``rollaudit``."""
    from .._pandas_import import pandas_refused

    prefer_small_pages()
    prefer_system_allocator()
    _degrade_unencodable_output()
    with pandas_refused():
        typer.main.get_command(app).main(args=argv, prog_name="rollaudit")


def console() -> None:
    """``rollaudit`` and ``python -m rollaudit``: :func:`main`, after which the process ends as soon as its output
    is flushed and its exit handlers have run, without Python's teardown of every module: torch's alone takes
    0.3-0.4 s, a fifth of an audit's command. Where a thread of Python's still runs (a dashboard's uploader), the
    process exits as Python exits, waiting for it."""
    try:
        main()
    except SystemExit as done:
        code = done.code
        if not (code is None or isinstance(code, int)) or threading.active_count() > 1:
            raise
    else:
        code = 0
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can reach it
            stream.flush()
    os._exit(code or 0)
