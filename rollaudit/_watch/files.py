"""Whether a dump file a trainer is writing is whole yet, from its own bytes and from its size holding still.

A file is complete when its kind's end marker is there; where the marker can also end a file still being
written (a newline, a closing brace) or there is none, it must also have held still for a settling interval:

- a zip (a ``torch.save`` file, a zipped export): its end-of-central-directory record ends the file, and the central
  directory it points to lies inside the file (the record is written last);
- Parquet: ``PAR1`` at both ends (the footer is written last); Arrow IPC / Feather: ``ARROW1`` at both ends;
- JSON Lines and CSV: the last byte is a newline (a line still being written is never read);
- a JSON document: its last non-blank byte closes it (``}`` or ``]``);
- anything else (a legacy pickle ``.pt``): its size and modification time holding still is all there is.

A zip, Parquet or Arrow file with its end marker is complete at once (the marker is written last: no half file has
it); text and unmarked files wait for the settling interval. An empty file is never complete: a writer has just
created it. Only the tail of a file is read (at most the zip record's 64 KiB comment), never the whole file.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

_ZIP_HEAD = b"PK\x03\x04"
_ZIP_END = b"PK\x05\x06"
_ZIP_END_SIZE = 22
_ZIP64_LOCATOR = b"PK\x06\x07"
_MAX_ZIP_COMMENT = 0xFFFF
_PARQUET = b"PAR1"
_ARROW = b"ARROW1"
_LINE_SUFFIXES = (".jsonl", ".ndjson", ".csv", ".tsv")
_DOCUMENT_SUFFIXES = (".json",)


@dataclass(frozen=True)
class Signature:
    """What says a file changed: its size and modification time (nanoseconds), and its inode (a file renamed
    over another)."""

    size: int
    mtime_ns: int
    inode: int


def signature(path: Path) -> Signature | None:
    """The file's signature, or None when it is gone or is not a regular file (links are followed as the loaders
    follow them)."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(status.st_mode):
        return None
    return Signature(status.st_size, status.st_mtime_ns, status.st_ino)


def _tail(handle: BinaryIO, size: int, count: int) -> bytes:
    handle.seek(size - count)
    return handle.read(count)


def _zip_is_whole(handle: BinaryIO, size: int) -> bool:
    tail = _tail(handle, size, min(size, _ZIP_END_SIZE + _MAX_ZIP_COMMENT))
    start = tail.rfind(_ZIP_END)
    while start != -1:
        record = tail[start : start + _ZIP_END_SIZE]
        if len(record) == _ZIP_END_SIZE:
            directory_size, directory_offset, comment = struct.unpack("<IIH", record[12:22])
            ends_file = start + _ZIP_END_SIZE + comment == len(tail)
            zip64 = directory_offset == 0xFFFFFFFF or tail[max(0, start - 20) : start - 16] == _ZIP64_LOCATOR
            if ends_file and (zip64 or directory_offset + directory_size <= size - (len(tail) - start)):
                return True
        start = tail.rfind(_ZIP_END, 0, start)
    return False


WHOLE = "whole"
"""The file's end marker is written last: the file is complete."""
WHOLE_IF_STILL = "whole if still"
"""Complete once it has held still for the settling interval (a text file ending its last line, a file of a kind
with no marker)."""
PARTIAL = "partial"
"""Not complete: its end is missing (or it is empty, or unreadable)."""


def completeness(path: Path, size: int) -> str:
    """:data:`WHOLE`, :data:`WHOLE_IF_STILL` or :data:`PARTIAL`, by the file's own bytes (the module's rules)."""
    if size <= 0:
        return PARTIAL
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if head.startswith(_ZIP_HEAD):
                whole = _zip_is_whole(handle, size)
            elif head.startswith(_PARQUET):
                whole = size >= 8 and _tail(handle, size, 4) == _PARQUET
            elif head.startswith(_ARROW):
                whole = size >= 12 and _tail(handle, size, 6) == _ARROW
            else:
                suffixes = "".join(path.suffixes[-2:]).lower()
                if suffixes.endswith(_LINE_SUFFIXES):
                    ended = _tail(handle, size, 1) == b"\n"
                elif suffixes.endswith(_DOCUMENT_SUFFIXES):
                    ended = _tail(handle, size, min(size, 64)).rstrip().endswith((b"}", b"]"))
                else:
                    ended = True  # no marker to wait for: holding still decides
                return WHOLE_IF_STILL if ended else PARTIAL
    except OSError:
        return PARTIAL
    return WHOLE if whole else PARTIAL
