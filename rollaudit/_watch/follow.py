"""Sleeping until something under a run directory changes: inotify on Linux, a timer elsewhere.

The watcher never trusts notifications alone: a wake-up only says "look again", and the caller rescans the
directory (cheaply: names and sizes). inotify watches every directory of the run (bounded in depth and count, no
directory reached twice through links) and new ones as they appear; where inotify is missing, full (too many
watches) or overflows, the wait is a plain timer. A slow rescan runs anyway (every 10 s), for filesystems whose
writers are on other machines (NFS, Lustre), where no notification arrives.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import sys
import time
from pathlib import Path

MAX_DEPTH = 8
"""Directory levels watched below the run directory (as the dump discovery searches)."""
MAX_WATCHES = 4096
"""Directories watched at most; beyond them the wait falls back to the timer."""

_IN_MODIFY = 0x002
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_Q_OVERFLOW = 0x4000
_IN_ISDIR = 0x40000000
_MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_EVENT = struct.Struct("iIII")


def _libc_inotify() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


class Wakeups:
    """Waits for a change under ``root``. ``wait(timeout)`` returns after a change (True) or the timeout (False);
    ``timer`` is the longest wait without notifications."""

    def __init__(self, root: Path, timer: float = 1.0) -> None:
        self.root = root
        self.timer = timer
        self._fd: int | None = None
        self._libc = _libc_inotify()
        self._watched: set[tuple[int, int]] = set()
        if self._libc is not None:
            fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd >= 0:
                self._fd = fd
                self._watch_tree()

    @property
    def notifies(self) -> bool:
        """Whether changes wake the wait (inotify), rather than only the timer."""
        return self._fd is not None

    def _watch(self, directory: Path, key: tuple[int, int]) -> None:
        assert self._libc is not None and self._fd is not None
        if key in self._watched:
            return
        if (
            len(self._watched) >= MAX_WATCHES
            or self._libc.inotify_add_watch(self._fd, os.fsencode(directory), _MASK) < 0
        ):
            self._give_up()  # out of watches (ENOSPC) or refused: the timer alone, never a half-watched run
            return
        self._watched.add(key)

    def _watch_tree(self) -> None:
        """Watch every directory of the run not yet watched: a walk that enters no directory twice (links)."""
        seen: set[tuple[int, int]] = set()
        pending = [(self.root, 0)]
        while pending and self._fd is not None:
            directory, depth = pending.pop()
            try:
                status = os.stat(directory)
            except OSError:
                continue
            if (status.st_dev, status.st_ino) in seen:
                continue
            seen.add((status.st_dev, status.st_ino))
            self._watch(directory, (status.st_dev, status.st_ino))
            if depth == MAX_DEPTH:
                continue
            try:
                children = [entry.path for entry in os.scandir(directory) if entry.is_dir(follow_symlinks=True)]
            except OSError:
                continue
            pending.extend((Path(child), depth + 1) for child in children)

    def _give_up(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None

    def _drain(self) -> None:
        """Read every pending event; watch the directories that appeared (made, or renamed into place)."""
        assert self._fd is not None
        new_directories = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                self._give_up()
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                _, mask, _, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size + length
                new_directories |= bool(mask & _IN_ISDIR and mask & (_IN_CREATE | _IN_MOVED_TO))
                new_directories |= bool(mask & _IN_Q_OVERFLOW)
        if new_directories:
            # Watched directories are skipped by inode; a directory renamed into place brings its whole tree.
            self._watch_tree()

    def wait(self, timeout: float | None) -> bool:
        """Sleep until a change (True) or ``timeout`` seconds (False; None: the timer, or forever with
        notifications and a slow rescan)."""
        if self._fd is None:
            time.sleep(self.timer if timeout is None else max(0.0, min(timeout, self.timer)))
            return False
        try:
            ready, _, _ = select.select([self._fd], [], [], timeout)
        except (OSError, ValueError):
            self._give_up()
            return False
        if ready:
            self._drain()
            return True
        return False

    def close(self) -> None:
        self._give_up()
