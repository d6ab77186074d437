"""``--tensorboard DIR``: the audit's scalars in a TensorBoard event file, written with TensorBoard's own record
writer and protocol buffers (the optional extra ``rollaudit[tensorboard]``).

TensorBoard's ``EventFileWriter`` opens its file by name for writing: a link planted at that (predictable) name in
a shared log directory would be followed and its target overwritten. So the file is created here, exclusively and
without following a link (``O_CREAT | O_EXCL | O_NOFOLLOW``, relative to the directory opened without following
one either), under a new name if one is taken, and TensorBoard's ``RecordWriter`` writes the events into it. DIR
itself must be a directory, not a link to one; its missing levels are made. Scalars are float32 tensors with the
scalars plugin's metadata (on a tag's first value in the file, as TensorBoard's writers do: its data server shows
no other dtype, so a value is the JSON's rounded to float32; counts below 2**24 are exact), the run's scheme a
string tensor for the text plugin (Markdown, escaped to show as itself); each step is one event, flushed at once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from ..._errors import UsageError
from ..markdown import markdown_text
from .dashboard import StepScalars

INSTALL = "pip install 'rollaudit[tensorboard]'"
FILE_PREFIX = "events.out.tfevents"
FILE_SUFFIX = ".rollaudit"
MAX_NAME_TRIES = 1000


def _refuse(message: str, directory: Path, expected: str = "a directory for TensorBoard's event files") -> UsageError:
    return UsageError(message, file=str(directory), expected=expected)


def check_directory(directory: Path, what: str = "a directory for TensorBoard's event files") -> Path:
    """That ``directory`` can take the event file, proved before any work: an existing directory that is no link
    (a link's target was not named) and takes a new file, or missing levels under one. One line (UsageError) when
    not. Nothing is left behind."""
    try:
        status = os.lstat(directory)
    except FileNotFoundError:
        status = None
    except OSError as error:  # under a file (ENOTDIR), a name too long, a loop of links
        raise _refuse(f"cannot be used: {error.strerror or error}", directory, what) from None
    if status is not None:
        if stat.S_ISLNK(status.st_mode):
            raise _refuse("is a symbolic link", directory, f"{what}, not a link to one")
        if not stat.S_ISDIR(status.st_mode):
            raise _refuse("is not a directory", directory, what)
        existing = directory
    else:
        existing = directory.parent
        while True:
            try:
                parent_mode = os.stat(existing).st_mode
            except FileNotFoundError:
                if existing == existing.parent:
                    break
                existing = existing.parent
                continue
            except OSError as error:
                raise _refuse(f"cannot be made: {error.strerror or error}", directory, what) from None
            if not stat.S_ISDIR(parent_mode):
                raise _refuse(f"cannot be made: {existing} is not a directory", directory, what)
            break
    _probe(existing, directory, what)
    return directory


def _probe(existing: Path, named: Path, what: str) -> None:
    """Create and remove a file in ``existing``: writability decided by trying, as every output is."""
    try:
        descriptor, name = tempfile.mkstemp(prefix=".rollaudit-probe.", dir=existing)
    except OSError as error:
        raise _refuse(f"is not writable ({error.strerror or error})", named, what) from None
    os.close(descriptor)
    with contextlib.suppress(OSError):
        os.unlink(name)


def open_directory(directory: Path, what: str = "a directory for TensorBoard's event files") -> int:
    """A descriptor of ``directory``, its missing levels made first; opened without following a link at its name
    (a link planted since the check is refused, not followed)."""
    missing = []
    level = directory
    while not os.path.lexists(level) and level != level.parent:
        missing.append(level)
        level = level.parent
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            pass  # made meanwhile: opened below without following a link
        except OSError as error:
            raise _refuse(f"cannot be made: {error.strerror or error}", directory, what) from None
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(directory, flags)
    except OSError as error:
        reason = "is a symbolic link" if error.errno == errno.ELOOP else (error.strerror or str(error))
        raise _refuse(f"cannot be opened: {reason}", directory, what) from None


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", socket.gethostname())[:64] or "host"


def create_event_file(directory: Path) -> tuple[Path, int]:
    """A new event file in ``directory``, named as TensorBoard names its own (``events.out.tfevents.<time>.<host>.
    <pid>.<n>``, ending ``.rollaudit``), created exclusively: an existing name, link or not, is never opened; the
    next ``n`` is tried instead."""
    directory_fd = open_directory(directory)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        stamp, host, pid = int(time.time()), _host(), os.getpid()
        for number in range(MAX_NAME_TRIES):
            name = f"{FILE_PREFIX}.{stamp:010d}.{host}.{pid}.{number}{FILE_SUFFIX}"
            try:
                return directory / name, os.open(name, flags, 0o644, dir_fd=directory_fd)
            except FileExistsError:
                continue
            except OSError as error:
                raise _refuse(f"cannot create an event file: {error.strerror or error}", directory) from None
        raise _refuse(f"cannot create an event file: {MAX_NAME_TRIES} names taken", directory)
    finally:
        os.close(directory_fd)


def _modules() -> Any:
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.plugins.scalar import metadata as scalar_metadata
        from tensorboard.plugins.text import metadata as text_metadata
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError as error:
        raise UsageError(f"--tensorboard needs the tensorboard package ({error})", expected=INSTALL) from None
    return event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2, scalar_metadata, text_metadata, RecordWriter


class EventFile:
    """One event file of the audit's scalars in ``directory``: created at the first step, one event per step."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path: Path | None = None
        self._writer: Any = None
        self._described: set[str] = set()
        self._modules = _modules()

    def _open(self) -> Any:
        event_pb2, *_, record_writer = self._modules
        self.path, descriptor = create_event_file(self.directory)
        self._writer = record_writer(os.fdopen(descriptor, "wb"))
        header = event_pb2.Event(
            wall_time=time.time(),
            file_version="brain.Event:2",
            source_metadata=event_pb2.SourceMetadata(writer="rollaudit"),
        )
        self._writer.write(header.SerializeToString())
        return self._writer

    def write(self, step: StepScalars) -> None:
        event_pb2, summary_pb2, tensor_pb2, shape_pb2, types_pb2, scalar_metadata, text_metadata, _ = self._modules
        writer = self._writer or self._open()
        scalar_shape = shape_pb2.TensorShapeProto()
        values = []
        for tag, number in step.scalars.items():
            value = summary_pb2.Summary.Value(
                tag=tag,
                tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=scalar_shape, float_val=[number]),
            )
            if tag not in self._described:
                value.metadata.CopyFrom(scalar_metadata.create_summary_metadata(display_name="", description=""))
                self._described.add(tag)
            values.append(value)
        for tag, text in step.texts.items():
            value = summary_pb2.Summary.Value(
                tag=tag,
                tensor=tensor_pb2.TensorProto(
                    dtype=types_pb2.DT_STRING, tensor_shape=scalar_shape, string_val=[markdown_text(text).encode()]
                ),
            )
            value.metadata.CopyFrom(text_metadata.create_summary_metadata(display_name="", description=""))
            values.append(value)
        event = event_pb2.Event(wall_time=time.time(), step=step.step, summary=summary_pb2.Summary(value=values))
        try:
            writer.write(event.SerializeToString())
            writer.flush()
        except OSError as error:
            raise UsageError(f"cannot write: {error.strerror or error}", file=str(self.path)) from None

    def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(OSError):
                self._writer.close()
            self._writer = None
