"""The project's error types: every bad input ends in one of these.

The CLI maps them to exit codes in one place (``exit_code``); anything else
escaping a command is a bug. A reader's message names an option as the command
line types it (``--reward-col``), once: ``rollaudit.load`` takes the keyword of
the same name (``reward_col``). Only the options' own checks, made where each
interface builds them, use each interface's spelling.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import FrameType

# Characters a terminal, a browser or a diff viewer would act on rather than show: C0 and C1 controls (ANSI and
# OSC escapes start with one), the bidirectional overrides that reorder what is displayed, and lone surrogates
# (no encoding can write them: an output would fail on them).
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# A CI runner (GitHub Actions) runs a line of its log as a workflow command when the line's first non-blank
# characters are ``::``, or when ``##[`` appears anywhere in it (the older form).
_LEADING_COMMAND = re.compile(r"(?:^|(?<=\r))([^\S\r\n]*):(?=:)", re.MULTILINE)
_OLD_COMMAND = "##["


def visible(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\u202e``), never acted on."""
    return _INVISIBLE.sub(lambda match: ascii(match.group())[1:-1], text)


def log_safe(text: str) -> str:
    """``text`` (lines of a report, a warning, an error) with nothing a CI runner would run as a workflow command:
    a line's leading ``::`` is shown as ``\\x3a:`` and ``##[`` as ``#\\x23[``. rollaudit's own annotations are
    printed without it; every other line on stdout or stderr goes through it."""
    return _LEADING_COMMAND.sub(r"\1\\x3a", text).replace(_OLD_COMMAND, "#\\x23[")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'prompt'?)`` for a near miss among ``choices``, else ``""``: a typo named, not a list."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class RollauditError(Exception):
    """Bad input or usage: one line that names the file, the field or row, and what was expected."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        field: str | None = None,
        row: int | None = None,
        expected: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.field = field
        self.row = row if row is None or row >= 0 else None  # -1 is "not found": no row a person could look up
        self.expected = expected
        super().__init__(self.line())

    def line(self) -> str:
        """The one line shown to a user."""
        where = []
        if self.file is not None:
            where.append(str(self.file))
        if self.field is not None:
            where.append(f"field {self.field!r}")
        if self.row is not None:
            # ``row`` is 0-based in code; a person counts from 1: "row 5" is the 5th data row (a file's lines,
            # header included, are said as "line N").
            where.append(f"row {self.row + 1}")
        text = self.message
        if self.expected is not None:
            text += f" (expected {self.expected})"
        line = f"{': '.join(where)}: {text}" if where else text
        # One line, always, and nothing a terminal acts on: a newline or an escape from a hostile file must not
        # forge output.
        return visible(" ".join(line.split()))


class InputError(RollauditError):
    """A dump or table that cannot be read as rollouts."""


class ChoiceNeeded(InputError):
    """A dump that reads only once the user makes a choice it leaves open (which key of a reward dict is the
    reward, which column holds it): the line names the option that makes it. ``rollaudit compare`` stops on it;
    ``rollaudit inspect`` reads the dump again with the choice left open (:func:`choices_left_open`) and says what
    there is to choose from."""


class SchemeError(RollauditError):
    """An unknown or malformed scheme string, or a scheme that cannot apply to a batch."""


class NotAuditable(SchemeError):
    """A scheme this dump cannot support (a key or field it lacks, or a choice it leaves open): the audit lists
    it, with this line as the reason, and goes on with the rest."""


class UsageError(RollauditError):
    """Options that do not fit together, or an output that cannot be written."""


class GateFailed(RollauditError):
    """A gate rule did not hold."""

    exit_code = 1


# ---------------------------------------------------------------------------------------------------------------------
# Choices left open: what ``inspect`` reads where ``compare`` raises ChoiceNeeded.

_AMONG_SHOWN = 10
_AMONG_KEPT = 1000  # distinct choices kept (a hostile dump's dicts may each have keys of their own)


@dataclass
class OpenChoice:
    """A choice a dump leaves to the user, as ``inspect`` says it: ``found`` (what the dump holds, a ``{}`` where the
    choices go: ``"a dict with keys {}"``), ``among`` (the choices met, as shown, in the order met) and ``option``
    (the option that makes the choice, as typed: ``"--reward-key KEY"``), for the description's entry ``about``."""

    about: str
    found: str
    option: str
    among: dict[str, None] = field(default_factory=dict)

    def line(self) -> str:
        """``a dict with keys 'score', 'acc'; compare needs --reward-key KEY``."""
        shown = list(self.among)[:_AMONG_SHOWN]
        more = len(self.among) - len(shown)
        over = "over " if len(self.among) >= _AMONG_KEPT else ""
        listed = ", ".join(shown) + (f" and {over}{more} more" if more > 0 else "") if shown else "none"
        return f"{self.found.format(listed)}; compare needs {self.option}"


_LEFT_OPEN: ContextVar[list[OpenChoice] | None] = ContextVar("rollaudit_choices_left_open", default=None)


@contextmanager
def choices_left_open() -> Iterator[list[OpenChoice]]:
    """Within it, a loader that meets a choice the dump leaves open records it (:func:`leave_open`) and reads on
    without it (a NaN reward) instead of raising :class:`ChoiceNeeded`; the list yielded holds the choices met,
    once each. Only reads in this thread see it: load with one job, no cache (a cache entry would keep the NaN)."""
    met: list[OpenChoice] = []
    token = _LEFT_OPEN.set(met)
    try:
        yield met
    finally:
        _LEFT_OPEN.reset(token)


def leave_open(about: str, found: str, option: str, among: Iterable[str] = ()) -> bool:
    """Whether the load runs within :func:`choices_left_open`: then the choice is recorded (its ``among`` joined
    to those met before for the same ``about`` and ``option``) and the loader reads on without it; otherwise the
    loader raises :class:`ChoiceNeeded`."""
    met = _LEFT_OPEN.get()
    if met is None:
        return False
    choice = next((seen for seen in met if (seen.about, seen.option) == (about, option)), None)
    if choice is None:
        choice = OpenChoice(about, found, option)
        met.append(choice)
    for name in among:
        if len(choice.among) >= _AMONG_KEPT:
            break
        choice.among.setdefault(name)
    return True


def exit_code(error: BaseException) -> int:
    """Exit code for an error: 1 a gate failed, 2 usage or input error."""
    return getattr(error, "exit_code", 2) if isinstance(error, RollauditError) else 2


class RollauditWarning(UserWarning):
    """Something the audit worked around and the user should know (one line)."""


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type[Warning] = RollauditWarning) -> None:
    """``warnings.warn`` attributed to the first frame outside rollaudit: the caller's own line, whatever
    rollaudit's calls and wrappers lie between."""
    frame: FrameType | None = sys._getframe(1)
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
