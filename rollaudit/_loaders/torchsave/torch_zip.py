"""``torch.save`` zip files opened for safe reading: the archive, its members, and what ``torch.load`` would give.

A ``torch.save`` file is a zip holding ``<archive>/data.pkl`` (a pickle) and
one member ``<archive>/data/<key>`` per tensor storage. :class:`TorchArchive`
reads the pickle with :mod:`.unpickle`'s restricted unpickler and the
storages' bytes from the zip. Sizes are bounded before anything is
allocated: a member must lie inside the file, a stored member must store what
it declares, ``data.pkl`` has a size limit, and all the storages read
together cannot exceed the file. The central directory's entries are counted
before :mod:`zipfile` parses it (which costs ~400 bytes an entry). Every
failure is an
:class:`~rollaudit.InputError` (one line); nothing else escapes.
"""

from __future__ import annotations

import collections
import os
import struct
import warnings
import zipfile
from typing import Any, cast

from ..._errors import InputError, RollauditWarning
from .pickle_scan import call_with_stack, skim
from .unpickle import RestrictedUnpickler, Storage, WholeBuffer, describe_unknown, printable

MAX_PICKLE_BYTES = 4 << 30
"""Largest ``data.pkl`` read (4 GiB): slime dumps of thousands of agentic samples are hundreds of MB."""
MAX_ZIP_ENTRIES = 1 << 18
"""Most entries a ``torch.save`` zip may list (262,144): one per tensor storage, and four more."""

_STORAGE_CACHE_BYTES = 64 << 20
_REREAD_RATIO = 4
# Deflate cannot compress better than about 1032:1; a member declaring more is lying about its size.
_MAX_DEFLATE_RATIO = 1100
_INFLATE_CHUNK = 1 << 20
# torch stores its storages uncompressed; a zip that deflates them may, but all of them together inflate to at most
# this many times the file (numbers compress a few times over, not a thousand).
_INFLATED_STORAGE_RATIO = 16
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_DIRECTORY_ENTRY_BYTES = 46
# torch names an entry <archive>/data/<key>, with no comment and at most a zip64 extra field: 4 KiB is generous.
_MAX_DIRECTORY_BYTES_PER_ENTRY = _DIRECTORY_ENTRY_BYTES + 4096
_LOCAL_HEADER_SIGNATURE = b"PK\x03\x04"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_UTF8_NAME_FLAG = 0x800
_ENCRYPTED_FLAG = 0x1
_PICKLE_PROTOCOL_OPCODE = b"\x80"


def _short(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    text = printable(text, 160)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class TorchArchive:
    """One ``torch.save`` zip file, opened for safe reading. Use as a context manager.

    >>> with TorchArchive("sample_dumps/uniform.pt") as archive:   # doctest: +SKIP
    ...     value = archive.unpickle()
    """

    def __init__(self, path: str | os.PathLike, *, max_pickle_bytes: int = MAX_PICKLE_BYTES) -> None:
        self.path = os.fspath(path)
        self.unknown_globals: list[str] = []
        self.unknown_overflow = 0
        self._max_pickle_bytes = max_pickle_bytes
        self._storage_cache: collections.OrderedDict[str, bytearray] = collections.OrderedDict()
        self._storage_cache_bytes = 0
        self._storages_read: set[str] = set()
        self._storage_bytes_reread = 0
        self._storage_bytes_read = 0
        self._storage_bytes_inflated = 0
        self._file: Any = None
        self._zip: zipfile.ZipFile | None = None
        try:
            self._file = open(self.path, "rb", buffering=0)  # noqa: SIM115 - closed by close()
            self.size = os.fstat(self._file.fileno()).st_size
            self._open_zip()
        except InputError:
            self.close()
            raise
        except OSError as error:
            self.close()
            raise InputError(f"cannot read: {_short(error)}", file=self.path) from None

    def _error(self, message: str, **where: Any) -> InputError:
        return InputError(message, file=self.path, **where)

    @property
    def _opened_zip(self) -> zipfile.ZipFile:
        """The zip, or an error once the archive is closed."""
        if self._zip is None:
            raise self._error("the archive is closed")
        return self._zip

    def _open_zip(self) -> None:
        head = self._file.read(4)
        self._file.seek(0)
        if not head.startswith(_ZIP_MAGIC):
            if head.startswith(_PICKLE_PROTOCOL_OPCODE):
                raise self._error(
                    "a legacy (pre-1.6, non-zip) torch file", expected="torch.save's zip format; re-save it with torch"
                )
            raise self._error("not a zip file", expected="a torch.save file (a zip holding data.pkl)")
        try:
            self._zip = open_zip(self._file)
            members = self._zip.infolist()
        except TooManyEntries as error:
            raise self._error(
                str(error), expected=f"at most {MAX_ZIP_ENTRIES} entries: one per tensor storage"
            ) from None
        except Exception as error:  # zipfile raises many types on damaged input
            raise self._error(
                f"truncated or damaged zip ({_short(error)})", expected="a complete torch.save file"
            ) from None
        pickles = [info for info in members if info.filename.endswith("/data.pkl") and info.filename.count("/") == 1]
        if not pickles:
            raise self._error("zip without a data.pkl member", expected="a torch.save file (<archive>/data.pkl)")
        if len(pickles) > 1:
            raise self._error("zip with several data.pkl members", expected="one torch.save archive")
        self.pickle_member = pickles[0]
        if self.pickle_member.compress_type != zipfile.ZIP_STORED:
            # torch.save never compresses data.pkl; a deflated one would be inflated whole before any check.
            raise self._error("data.pkl is compressed", expected="a torch.save file (data.pkl stored, as torch writes)")
        self.prefix = self.pickle_member.filename[: -len("/data.pkl")]
        if self.pickle_member.file_size > self._max_pickle_bytes:
            raise self._error(
                f"data.pkl declares {self.pickle_member.file_size} bytes",
                expected=f"at most {self._max_pickle_bytes} bytes",
            )
        self.big_endian = self._read_byteorder()

    def _read_byteorder(self) -> bool:
        try:
            member = self._opened_zip.getinfo(f"{self.prefix}/byteorder")
        except KeyError:
            return False  # files from before torch wrote a byteorder record are little-endian
        if member.file_size > 16:
            raise self._error("byteorder record is too long", expected="'little' or 'big'")
        order = bytes(self._read_member(member, count_as_storage=False)).strip()
        if order not in (b"little", b"big"):
            raise self._error(f"byteorder record says {printable(repr(order))}", expected="'little' or 'big'")
        return order == b"big"

    def _check_member(self, member: zipfile.ZipInfo) -> None:
        name = printable(member.filename)
        if member.flag_bits & _ENCRYPTED_FLAG:
            raise self._error(f"zip member {name} is encrypted")
        if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise self._error(
                f"zip member {name} uses compression method {member.compress_type}", expected="stored (as torch writes)"
            )
        if member.header_offset + _LOCAL_HEADER.size + member.compress_size > self.size:
            raise self._error(f"zip member {name} runs past the end of the file", expected="a complete file")
        if member.compress_type == zipfile.ZIP_STORED and member.file_size != member.compress_size:
            raise self._error(
                f"stored zip member {name} declares {member.file_size} bytes but stores {member.compress_size}"
            )
        if member.file_size > _MAX_DEFLATE_RATIO * max(member.compress_size, 1):
            raise self._error(f"zip member {name} declares an impossible size of {member.file_size} bytes")

    def _data_start(self, member: zipfile.ZipInfo) -> int:
        """Where a stored member's bytes begin: after its local header, whose name must match the directory."""
        self._file.seek(member.header_offset)
        header = self._file.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size:
            raise self._error(f"zip member {printable(member.filename)} has a truncated header")
        fields = _LOCAL_HEADER.unpack(header)
        signature, flags, name_length, extra_length = fields[0], fields[3], fields[10], fields[11]
        if signature != _LOCAL_HEADER_SIGNATURE:
            raise self._error(f"zip member {printable(member.filename)} has no local header")
        name = self._file.read(name_length).decode("utf-8" if flags & _UTF8_NAME_FLAG else "cp437", "replace")
        if name != member.orig_filename:
            raise self._error(f"zip member {printable(member.filename)} has a different name in its local header")
        start = member.header_offset + _LOCAL_HEADER.size + name_length + extra_length
        if start + member.compress_size > self.size:
            raise self._error(f"zip member {printable(member.filename)} runs past the end of the file")
        return start

    def _read_member(self, member: zipfile.ZipInfo, *, count_as_storage: bool) -> bytearray:
        self._check_member(member)
        if count_as_storage:
            # Legitimate storages are disjoint members: together they fit in the file. Overlapping
            # members named by many keys would otherwise read the same bytes again and again.
            self._storage_bytes_read += member.compress_size
            self._storage_bytes_inflated += member.file_size
            if self._storage_bytes_read > self.size:
                raise self._error("tensor storages add up to more bytes than the file holds")
            if self._storage_bytes_inflated > _INFLATED_STORAGE_RATIO * self.size + (64 << 20):
                raise self._error("compressed tensor storages inflate to far more than the file holds")
        try:
            if member.compress_type == zipfile.ZIP_STORED:
                buffer = bytearray(member.file_size)
                self._file.seek(self._data_start(member))
                view = memoryview(buffer)
                filled = 0
                while filled < member.file_size:
                    count = self._file.readinto(view[filled:])
                    if not count:
                        raise self._error(f"zip member {printable(member.filename)} is truncated")
                    filled += count
                return buffer
            # Inflate into one buffer of the declared size, a chunk at a time: no more memory than declared (and the
            # declared size is at most _MAX_DEFLATE_RATIO times the compressed one), never a second copy.
            buffer = bytearray(member.file_size)
            view = memoryview(buffer)
            filled = 0
            # Opened for reading, a member is a ZipExtFile, whose readinto fills the buffer in place.
            with cast(zipfile.ZipExtFile, self._opened_zip.open(member)) as opened:
                while filled < member.file_size:
                    count = opened.readinto(view[filled : filled + _INFLATE_CHUNK])
                    if not count:
                        break
                    filled += count
            if filled != member.file_size:
                raise self._error(f"zip member {printable(member.filename)} does not inflate to its declared size")
            return buffer
        except InputError:
            raise
        except Exception as error:
            raise self._error(f"cannot read zip member {printable(member.filename)} ({_short(error)})") from None

    def storage_member(self, key: str) -> zipfile.ZipInfo:
        """The zip member of storage ``key`` (``<archive>/data/<key>``), checked."""
        try:
            member = self._opened_zip.getinfo(f"{self.prefix}/data/{key}")
        except KeyError:
            raise self._error(f"the pickle names storage {key} but the zip has no member data/{key}") from None
        self._check_member(member)
        return member

    def storage_bytes(self, storage: Storage) -> bytearray:
        """The bytes of a storage, little-endian. The most recently read storages stay cached up to
        ``_STORAGE_CACHE_BYTES`` (a train dump's per-sample tensors are read once each and dropped, so memory stays
        flat; a storage that many views share stays); reading one again counts against a budget of the file's
        size a few times over."""
        if self._zip is None:
            raise self._error("the archive is closed; read tensors inside its 'with' block")
        cached = self._storage_cache.get(storage.key)
        if cached is not None:
            self._storage_cache.move_to_end(storage.key)
            return cached
        reread = storage.key in self._storages_read
        if reread:  # its bytes already count as distinct storage bytes; reading them again has its own budget
            self._storage_bytes_reread += storage.member.compress_size
            if self._storage_bytes_reread > _REREAD_RATIO * self.size + (64 << 20):
                raise self._error("tensor storages are read again and again (views of many storages interleaved?)")
        self._storages_read.add(storage.key)
        buffer = self._read_member(storage.member, count_as_storage=not reread)
        if len(buffer) != storage.member.file_size:
            raise self._error(f"storage {storage.key} does not hold the size its zip entry declares")
        if self.big_endian and storage.kind.itemsize > 1:
            buffer = _swap_bytes(buffer, storage.kind.itemsize)
        self._storage_cache[storage.key] = buffer
        self._storage_cache_bytes += len(buffer)
        while self._storage_cache_bytes > _STORAGE_CACHE_BYTES and len(self._storage_cache) > 1:
            _, dropped = self._storage_cache.popitem(last=False)
            self._storage_cache_bytes -= len(dropped)
        return buffer

    def unpickle(
        self,
        *,
        lazy_tensors: bool = False,
        warn: bool = True,
        skip: frozenset[str] = frozenset(),
        records: frozenset[str] = frozenset(),
    ) -> Any:
        """The object ``torch.save`` wrote, rebuilt without running anything the file names.

        Unknown globals become placeholders, listed in ``unknown_globals`` and, with
        ``warn``, in one :class:`~rollaudit.RollauditWarning` line for the file.
        Lists of plain numbers under the dict keys ``skip`` are never built: each
        is :data:`~rollaudit._loaders.torchsave.unpickle.SKIPPED`. Objects of the classes named in ``records``
        keep their pickled fields (:class:`~rollaudit._loaders.torchsave.unpickle.Record`).
        """
        if self._zip is None:
            raise self._error("the archive is closed")
        whole = self._pickle_bytes()
        try:
            data, tuples = skim(whole, skip)
        except Exception as error:
            raise self._error(
                f"cannot unpickle data.pkl ({_short(error)})", expected="a pickle written by torch.save"
            ) from None
        del whole  # the kept bytes are copied out: the rest is not held while the unpickler builds
        stream = WholeBuffer(data)
        unpickler = RestrictedUnpickler(stream, self, lazy_tensors, records)
        try:
            value = call_with_stack(unpickler.load, tuples)
        except InputError:
            raise
        except Exception as error:  # the C unpickler raises many types on damaged or hostile input
            raise self._error(
                f"cannot unpickle data.pkl ({_short(error)})", expected="a pickle written by torch.save"
            ) from None
        finally:
            stream.close()
            unpickler.release()
        self.unknown_globals = unpickler.unknown_globals
        self.unknown_overflow = unpickler.unknown_overflow
        if warn and (self.unknown_globals or self.unknown_overflow):
            message = describe_unknown(self.unknown_globals, self.unknown_overflow)
            warnings.warn(f"{self.path}: {message}", RollauditWarning, stacklevel=2)
        return value

    def _pickle_bytes(self) -> bytearray:
        """data.pkl's bytes (stored: torch never compresses it), read rather than mapped: a mapped file truncated
        while it is read (a trainer saving the same path again) kills the process with SIGBUS, where a read
        ends in one line."""
        return self._read_member(self.pickle_member, count_as_storage=False)

    def close(self) -> None:
        self._storage_cache.clear()
        if self._zip is not None:
            self._zip.close()
            self._zip = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> TorchArchive:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _swap_bytes(buffer: bytearray, itemsize: int) -> bytearray:
    """Big-endian storage bytes to little-endian (the byte order every supported host uses)."""
    import numpy as np

    values = np.frombuffer(buffer, dtype=np.uint8).reshape(-1, itemsize)[:, ::-1]
    return bytearray(values.tobytes())


class TooManyEntries(ValueError):
    """A zip whose central directory lists more than :data:`MAX_ZIP_ENTRIES` entries."""


def open_zip(file: Any) -> zipfile.ZipFile:
    """``zipfile.ZipFile(file)`` (a binary file open for reading), once its central directory is counted:
    :class:`TooManyEntries` where it lists more entries than a ``torch.save`` file could."""
    problem = _directory_problem(file)
    if problem is not None:
        raise TooManyEntries(problem)
    return zipfile.ZipFile(file)


def _directory_problem(file: Any) -> str | None:
    """Why the zip ``file`` lists more entries than a ``torch.save`` file could, or None: the count its end record
    declares (zip64's where it has one), then the entries in the bytes :mod:`zipfile` parses as its directory,
    whatever the count says. A zip too damaged to tell is left to :mod:`zipfile` to report."""
    # zipfile's own reading of the end records, so that what is counted is what it then parses.
    end = zipfile._EndRecData(file)  # type: ignore[attr-defined]
    if not end:
        return None
    declared, directory_size = end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]  # type: ignore[attr-defined]
    if declared > MAX_ZIP_ENTRIES:
        return f"zip central directory declares {declared} entries"
    if directory_size > max(declared, 1) * _MAX_DIRECTORY_BYTES_PER_ENTRY:
        return f"zip central directory of {directory_size} bytes holds more than the {declared} entries it declares"
    directory_start = end[zipfile._ECD_LOCATION] - directory_size  # type: ignore[attr-defined]
    if end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64:  # type: ignore[attr-defined]
        directory_start -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator  # type: ignore[attr-defined]
    file.seek(max(directory_start, 0))
    directory = file.read(directory_size)
    position = entries = 0
    while position + _DIRECTORY_ENTRY_BYTES <= len(directory):
        entries += 1
        if entries > declared:
            return f"zip central directory holds more than the {declared} entries it declares"
        name, extra, comment = struct.unpack_from("<3H", directory, position + 28)
        position += _DIRECTORY_ENTRY_BYTES + name + extra + comment
    return None


def is_torch_zip(path: str | os.PathLike) -> bool:
    """True for a zip holding one ``<archive>/data.pkl``: the ``torch.save`` layout (reads only the directory)."""
    try:
        with open(path, "rb") as file:
            if not file.read(4).startswith(_ZIP_MAGIC):
                return False
            with open_zip(file) as archive:
                return any(name.endswith("/data.pkl") and name.count("/") == 1 for name in archive.namelist())
    except Exception:  # a damaged zip is simply not detected here; the reader reports it
        return False
