"""JSON Lines files a run appends to, read again without parsing again what was read before.

``rollaudit watch`` reads again, at every step, a file that gains a step at a time (open-instruct's shards,
torchtitan's ``rollout_samples.jsonl``). Within :func:`reading_appended`, the JSON Lines reader keeps each file's
parsed rows and, at the next read, parses only the lines appended since. What was read is trusted only while it is
still there: the same file (device and inode), no shorter, the same bytes from the last whole block of what was
read to its end, and the same fingerprint for its first block and for the next two blocks in turn (each block of
what was read is checked once every ``blocks / 2`` reads, at a cost that does not grow with the file). A file
failing any of these is read whole again (a rewrite, a truncation, a file renamed over it); a rewrite in place of
the same length that changes only blocks not yet checked is found at a later read. Bytes that do not end
a line, and lines that fail to read, are read with the whole file by the reader's own path, so that a partial line
is never kept and an error names its line as a whole read names it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

BLOCK_BYTES = 1 << 16
"""The unit of the fingerprints kept of what was read (the bytes of its last, partial block are kept as they are)."""
_BLOCKS_IN_TURN = 2


def _fingerprint(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass
class _Read:
    """What a file held at its last read: its identity, its size, its rows, and what proves its bytes unchanged."""

    device: int
    inode: int
    size: int
    table: pa.Table
    blocks: list[bytes] = field(default_factory=list)  # the fingerprint of each whole block
    tail: bytes = b""  # the bytes after the last whole block
    turn: int = 0  # the next block checked in turn

    def extend(self, added: bytes) -> None:
        data = self.tail + added
        whole = len(data) - len(data) % BLOCK_BYTES
        self.blocks.extend(_fingerprint(data[start : start + BLOCK_BYTES]) for start in range(0, whole, BLOCK_BYTES))
        self.tail = data[whole:]
        self.size += len(added)

    def still_there(self, stream: BinaryIO, status: os.stat_result) -> bool:
        """Whether the file still starts with what was read (the module's checks)."""
        if (status.st_dev, status.st_ino) != (self.device, self.inode) or status.st_size < self.size:
            return False
        stream.seek(self.size - len(self.tail))
        if stream.read(len(self.tail)) != self.tail:
            return False
        count = len(self.blocks)
        in_turn = {(self.turn + step) % count for step in range(_BLOCKS_IN_TURN)} if count else set()
        self.turn = (self.turn + _BLOCKS_IN_TURN) % count if count else 0
        for index in sorted({0, *in_turn} if count else set()):
            stream.seek(index * BLOCK_BYTES)
            if _fingerprint(stream.read(BLOCK_BYTES)) != self.blocks[index]:
                return False
        return True


class AppendedFiles:
    """The parsed rows of the files read within :func:`reading_appended`, kept for their next read."""

    def __init__(self) -> None:
        self._reads: dict[tuple[str, Hashable], _Read] = {}
        self._used: set[tuple[str, Hashable]] = set()

    def read(
        self,
        path: Path,
        key: Hashable,
        parse: Callable[[bytes], pa.Table | None],
        read_whole: Callable[[], pa.Table],
    ) -> pa.Table:
        """``path``'s table: the rows kept from its last read (under the same ``key``: what the reader was asked
        for) and ``parse`` of the bytes appended since, or ``parse`` of the whole file. ``parse`` gives None where
        the bytes do not read cleanly; then ``read_whole()`` reads the file, and nothing is kept."""
        name = (os.path.realpath(path), key)
        self._used.add(name)
        known = self._reads.pop(name, None)
        try:
            with open(path, "rb") as stream:  # read, never mapped: a file truncated while it is read just ends sooner
                status = os.fstat(stream.fileno())
                if known is not None and known.still_there(stream, status):
                    stream.seek(known.size)
                    added = stream.read()
                    part = parse(added) if added.endswith(b"\n") else None
                    if part is not None and not part.schema.equals(known.table.schema):
                        part = None
                    if not added or part is not None:
                        if part is not None:
                            known.table = pa.concat_tables([known.table, part])
                            known.extend(added)
                        self._reads[name] = known
                        return known.table
                stream.seek(0)
                data = stream.read()
        except OSError:
            return read_whole()  # it says what is wrong
        table = parse(data) if data.endswith(b"\n") else None
        if table is None:
            return read_whole()
        read = _Read(status.st_dev, status.st_ino, 0, table)
        read.extend(data)
        self._reads[name] = read
        return table

    def forget_unused(self) -> None:
        """Let go of the files not read since the last call: only the files a read still needs are kept."""
        for name in set(self._reads) - self._used:
            del self._reads[name]
        self._used.clear()


_CURRENT: ContextVar[AppendedFiles | None] = ContextVar("rollaudit_appended_files", default=None)


def current() -> AppendedFiles | None:
    """The files whose rows are kept for their next read, inside :func:`reading_appended`; None elsewhere."""
    return _CURRENT.get()


@contextmanager
def reading_appended(files: AppendedFiles) -> Iterator[None]:
    """Read JSON Lines files in this process through ``files``: each parses only the lines appended since its
    last read within ``files``. Files not read inside are let go of at the end."""
    token = _CURRENT.set(files)
    try:
        yield
    finally:
        _CURRENT.reset(token)
        files.forget_unused()
