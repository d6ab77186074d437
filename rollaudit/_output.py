"""Outputs: a report is written whole or not at all, and only where the user pointed.

What an output path points to decides how it is written (:func:`prepare_output`):

* a regular file, or nothing yet: atomically. A temporary file beside the target is created at once, before
  any work (so a read-only directory or filesystem is one line and exit 2 up front, root included: writability
  is decided by trying, never by ``os.access``), the content lands in it, and it is renamed over the target
  only once complete. A symlink is followed: its target is replaced, and the link stays a link.
* a character device, a FIFO, ``/dev/stdout`` and the like, or ``-`` (stdout): written straight into it. They
  are never replaced by a regular file.
* anything else (a directory, a socket, a block device): refused.

Temporary files are named ``.NAME.PID.XXXXXXXX.tmp``. They are removed when the write fails, when the process exits
(Ctrl-C, and SIGTERM or SIGHUP once the command line's handlers turn them into exits), and, should a process be
killed outright, by the next run that writes beside them: :func:`sweep_stale` removes the ones whose process is
gone.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ._errors import UsageError

Content = str | bytes | Callable[[Path], None]
"""Text, bytes, or a writer that writes the output to the path it is given."""

STDOUT = "-"
# Paths that name a stream of this process or a device even when they are symlinks (/dev/stdout, /dev/fd/1).
_STREAM_PREFIXES = ("/dev/", "/proc/")
_LIVE: set[Path] = set()
_LIVE_LOCK = threading.Lock()


def _forget(path: Path) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(path)


def discard_temporaries() -> None:
    """Remove every temporary file this process reserved and has not renamed yet (at exit, on a signal)."""
    with _LIVE_LOCK:
        paths = list(_LIVE)
        _LIVE.clear()
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


atexit.register(discard_temporaries)


_PID_MAX = 1 << 22
"""Linux's largest possible PID (``PID_MAX_LIMIT``): a larger number in a name is no PID rollaudit wrote."""
# What ``tempfile.mkstemp`` puts between the prefix and the suffix: 8 of these characters.
_MKSTEMP_LETTERS = "a-z0-9_"
_EUID = os.geteuid() if hasattr(os, "geteuid") else 0  # Windows has no owners to compare: st_uid is always 0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process: alive; a number no PID can be: not ours to judge
        return True
    return True


def sweep_stale(target: Path) -> list[Path]:
    """Remove the ``.NAME.PID.XXXXXXXX.tmp`` files beside ``target`` left by processes that no longer exist.

    Only what :func:`_reserve` could have written is touched: a regular file of this user, named with a PID that
    can be one and mkstemp's 8 random characters. Any other name, however similar, is someone else's file."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.([1-9]\d{{0,6}})\.[{_MKSTEMP_LETTERS}]{{8}}\.tmp$")
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent if str(target.parent) else "."))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if not match:
            continue
        pid = int(match.group(1))
        if pid > _PID_MAX or pid == os.getpid() or pid_alive(pid):
            continue
        with contextlib.suppress(OSError):
            status = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(status.st_mode) and status.st_uid == _EUID:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _is_stream(path: Path, mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or str(path).startswith(_STREAM_PREFIXES)


@dataclass
class Output:
    """An output path, checked and (for a file) reserved: :meth:`write` puts the content there."""

    path: Path
    """The path as the user named it."""
    target: Path | None = None
    """The file replaced (a symlink's target), or the stream written; None for stdout."""
    stream: bool = False
    _reserved: Path | None = field(default=None, repr=False)

    def write(self, content: Content) -> Path:
        """Write ``content`` whole: atomically to a file, straight into a stream."""
        if self.stream:
            self._write_stream(content)
        else:
            self._write_file(content)
        return self.path

    def discard(self) -> None:
        """Give up the reservation (no output after all)."""
        if self._reserved is not None:
            _forget(self._reserved)
            with contextlib.suppress(OSError):
                os.unlink(self._reserved)
            self._reserved = None

    def _write_file(self, content: Content) -> None:
        assert self.target is not None
        temporary = self._reserved or _reserve(self.target, self.path)
        self._reserved = None
        try:
            _write_to(temporary, content)
            os.replace(temporary, self.target)
        except BaseException as error:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            if isinstance(error, OSError):
                # A full disk or a directory removed mid-run: one line, and nothing left behind.
                raise UsageError(f"cannot write: {error.strerror or error}", file=str(self.path)) from None
            raise
        finally:
            _forget(temporary)
        # mkstemp makes the file 0600; a report gets the usual permissions.
        with contextlib.suppress(OSError):
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self.target, 0o666 & ~umask)

    def _write_stream(self, content: Content) -> None:
        try:
            if callable(content):
                # Writers want a path: write to a private temporary file, then copy it into the stream.
                with tempfile.TemporaryDirectory(prefix="rollaudit-") as scratch:
                    scratch_file = Path(scratch) / self.path.name
                    content(scratch_file)
                    with open(scratch_file, "rb") as source:
                        self._copy_into_stream(source)
                return
            data = content.encode("utf-8") if isinstance(content, str) else content
            self._copy_into_stream(io.BytesIO(data))
        except OSError as error:
            raise UsageError(f"cannot write: {error.strerror or error}", file=str(self.path)) from None

    def _copy_into_stream(self, source: BinaryIO) -> None:
        if self.target is None:
            sys.stdout.flush()
            shutil.copyfileobj(source, sys.stdout.buffer)
            sys.stdout.buffer.flush()
            return
        with open(self.target, "wb", buffering=0) as stream:
            shutil.copyfileobj(source, stream)


def _write_to(temporary: Path, content: Content) -> None:
    if callable(content):
        content(temporary)
    elif isinstance(content, bytes):
        temporary.write_bytes(content)
    else:
        temporary.write_text(content, encoding="utf-8")


def _reserve(target: Path, named: Path) -> Path:
    """Create the temporary file beside ``target`` now: the proof that the directory takes a new file."""
    directory = target.parent if str(target.parent) else Path(".")
    sweep_stale(target)
    try:
        descriptor, name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    except OSError as error:
        reason = error.strerror or str(error)
        raise UsageError(f"directory is not writable ({reason})", file=str(named)) from None
    os.close(descriptor)
    path = Path(name)
    with _LIVE_LOCK:
        _LIVE.add(path)
    return path


def prepare_output(path: str | os.PathLike[str]) -> Output:
    """Decide how ``path`` is written and prove it can be, before any work is done; one line (UsageError) when it
    cannot: a missing directory, a read-only one, a directory where a file should go, a socket."""
    if str(path) == STDOUT:
        return Output(Path(STDOUT), None, stream=True)
    named = Path(path)
    try:
        mode = os.stat(named).st_mode  # follows symlinks: what the path really points to
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise UsageError(f"cannot use as an output: {error.strerror or error}", file=str(named)) from None
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError("is a directory", file=str(named), expected="a file path")
    if mode is not None and _is_stream(named, mode):
        return Output(named, named, stream=True)
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError("is not a regular file, a device or a FIFO", file=str(named), expected="a file path")
    # A regular file, or nothing yet: replace the file the path resolves to (a symlink stays a link).
    target = Path(os.path.realpath(named)) if named.is_symlink() else named
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError("directory does not exist", file=str(named), expected="an existing directory")
    return Output(named, target, _reserved=_reserve(target, named))


def check_writable(path: str | os.PathLike[str]) -> Path:
    """That ``path`` can be written (see :func:`prepare_output`), reserving nothing; the path."""
    output = prepare_output(path)
    output.discard()
    return output.path


def write_atomic(path: str | os.PathLike[str], content: Content) -> Path:
    """Write text, bytes, or whatever ``content(temporary_path)`` writes, whole, to ``path``: atomically to a
    file (through a symlink to its target), straight into a device or FIFO."""
    return prepare_output(path).write(content)
