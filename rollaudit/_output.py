"""Atomic file output: a report is written whole or not at all.

Every writer (JSON, Markdown, JUnit, PNG, Parquet, baselines) goes through
``write_atomic``: the content lands in a temporary file beside the target and
is renamed over it only once complete, so an interrupted run never leaves a
half-written file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ._errors import UsageError


def check_writable(path: str | os.PathLike[str]) -> Path:
    """The output path, or a one-line error when it cannot be written (missing or read-only
    directory, or a directory where a file should go). Checked before any work is done."""
    target = Path(path)
    if target.is_dir():
        raise UsageError("is a directory", file=str(target), expected="a file path")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError("directory does not exist", file=str(target), expected="an existing directory")
    if not os.access(parent, os.W_OK):
        raise UsageError("directory is not writable", file=str(target))
    return target


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on failure it is removed."""
    target = check_writable(path)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    os.close(descriptor)
    try:
        yield Path(temporary)
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            # A full disk or a directory removed mid-run: one line, and nothing left behind.
            raise UsageError(f"cannot write: {error.strerror or error}", file=str(target)) from None
        raise
    # mkstemp makes the file 0600; a report should get the usual permissions.
    with contextlib.suppress(OSError):
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(target, 0o666 & ~umask)


def write_atomic(path: str | os.PathLike[str], content: str | bytes | Callable[[Path], None]) -> Path:
    """Write text, bytes, or whatever ``content(temporary_path)`` writes, atomically to ``path``."""
    with atomic_path(path) as temporary:
        if callable(content):
            content(temporary)
        elif isinstance(content, bytes):
            temporary.write_bytes(content)
        else:
            temporary.write_text(content, encoding="utf-8")
    return Path(path)
