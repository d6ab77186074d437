"""Parquet and Arrow IPC reads in a child process under an address-space limit.

A few kilobytes of Parquet (dictionary pages, run-length encoded list
levels) or of compressed Arrow IPC buffers can decode to gigabytes, and
pyarrow allocates them before rollaudit sees a row. The metadata that could
bound them is the attacker's to write, so the bound is the operating
system's: the read runs in one long-lived child process whose address space
is limited (``RLIMIT_AS``) to what it had plus
``FREE_BYTES + BYTES_PER_FILE_BYTE`` times the file's size. An expansion past
that fails an allocation in the child and comes back as one line naming the
file. A Parquet file is read a million rows at a time, and each piece is
written to an Arrow IPC file in shared memory while the next is read (the
child holds one piece, and reuses its memory rather than paging in the whole
table fresh); the parent maps that file, so the table is never copied again.
The pieces count against the same bound, and where shared memory has no room
the table comes back as an IPC stream over the pipe.

The shared file's name holds both processes' IDs. The parent removes it as
soon as it has opened it, and whenever it stops the child (Ctrl-C, SIGTERM,
SIGHUP); the child removes it when the parent is gone before the answer;
where both were killed outright, the next reader started removes it.

The child uses the system allocator (``ARROW_DEFAULT_MEMORY_POOL=system``):
mimalloc reserves a GiB of address space up front and would fail under any
useful limit. Where there is no ``RLIMIT_AS`` (Windows, macOS ignores it),
the read runs in this process, bounded only by the row checks.

Most Parquet files never need the child: where the footer bounds what the
read may decode to, it runs in this process with pyarrow's threads (see
:func:`read_parquet_in_bound`), as fast as ``pyarrow.parquet.read_table``.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..._errors import InputError
from ..._memory import prefer_small_pages
from ..._output import pid_alive

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import pyarrow as pa

FREE_BYTES = 1 << 30
"""Address space every read may add, whatever the file's size: enough for any real table of a small file."""
BYTES_PER_FILE_BYTE = 64
"""Address space per byte of file beyond that: zstd text compresses ~10x, Parquet's encodings a few times more."""
_IN_WORKER = "ROLLAUDIT_CAPPED_WORKER"


def can_cap() -> bool:
    """Whether reads can run under an address-space limit here (Linux and the BSDs)."""
    try:
        import resource
    except ImportError:
        return False
    return hasattr(resource, "RLIMIT_AS") and sys.platform != "darwin" and not os.environ.get(_IN_WORKER)


def arrow_schema(path: Path, kind: str) -> pa.Schema:
    """The schema of a Parquet or Arrow file, read from its footer (no data); its names checked to be UTF-8."""
    from . import tables

    if kind == "arrow" and tables.is_feather_v1(path):
        schema = read_table(path, kind, None).schema  # legacy Feather v1 has no schema-only read
    else:
        schema = tables.footer_schema(path, kind)
    return tables.check_names(schema, path)


def read_arrow(path: Path, kind: str, columns: list[str]) -> pa.Table:
    """The named columns of a Parquet or Arrow file (the others are never read), read under the memory bound."""
    from . import tables

    return tables.check_values(read_table(path, kind, columns), path)  # its rows were checked where it was read


def read_table(path: Path, kind: str, columns: list[str] | None) -> pa.Table:
    """``tables.read_in_this_process(path, kind, columns)``, run in the capped child where there is one."""
    from . import tables

    if not can_cap():
        return tables.read_in_this_process(path, kind, columns)
    if kind == "parquet":
        table = read_parquet_in_bound(path, columns)
        if table is not None:
            return table
    return _worker().read(path, kind, columns)


def address_space_limit(size: int) -> int:
    """The bytes of address space a read of a ``size``-byte file may add."""
    return FREE_BYTES + BYTES_PER_FILE_BYTE * size


def _too_much(size: int) -> dict[str, str]:
    """The error fields of a read past ``address_space_limit(size)``."""
    return {
        "message": f"decodes to more than {address_space_limit(size) >> 20} MiB of table",
        "expected": f"at most {FREE_BYTES >> 20} MiB plus {BYTES_PER_FILE_BYTE} bytes per byte of file",
    }


# ---------------------------------------------------------------------------------------------------------------------
# This process: a Parquet file whose footer bounds what it decodes to.

BOUNDED_CODECS = frozenset({"UNCOMPRESSED", "SNAPPY"})
"""Codecs whose output a page's own bytes bound: a Snappy copy tag of at most 5 bytes writes at most 64 (under 22
bytes per byte); gzip, LZ4, Brotli and zstd expand a few bytes to gigabytes, and their files go to the child."""
_RUN_ROWS_PER_PIECE = 8
"""A run of row groups read at once holds at most this many ``PIECE_ROWS`` (or one row group): pyarrow decodes a
run's columns on its threads, and the actual sizes are checked against the bound after each run."""


def read_parquet_in_bound(path: Path, columns: list[str] | None) -> pa.Table | None:
    """The named columns of a Parquet file read in this process, on pyarrow's threads, where its footer bounds
    what they decode to by ``address_space_limit``; None where it does not (the capped child reads it).

    The footer is walked in the capped child (pyarrow aborts the process on some damaged column chunk metadata,
    which only the reader's own calls turn into errors). It bounds a column that is flat (no repetition levels:
    no list can declare a billion values in a few bytes of run-length encoding), of a fixed-width type or text,
    and compressed by a codec in ``BOUNDED_CODECS`` in every row group (the footer names the codec pyarrow uses; no
    page can choose another). A fixed-width column
    decodes to its rows times its width, and its rows are the row groups' ``num_rows``, which pyarrow allocates
    (the rows checked against the file's size first). Text is the column whose footer can lie: a dictionary page
    holding one long value, repeated by a few bytes of indices, decodes to gigabytes whatever
    ``total_uncompressed_size`` says. So text is read as a dictionary (its pages' bytes, at most 22 per byte of
    file, and four bytes a row) and its decoded size, the lengths of the values its indices take, is added up
    before any of it is decoded; fixed-width sizes are added as read. A run of row groups whose actual sizes pass
    the bound is a MemoryError, as in the child, so a lying footer costs at most one run of row groups read past
    the bound, never the decoded table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from . import tables

    try:
        size = path.stat().st_size
    except OSError:
        return None  # the child names the failure
    budget = address_space_limit(size)
    plan = _worker().footer_bound(path, columns)
    if plan is None or plan[1] > budget:
        return None
    texts = plan[0]
    try:
        # Not pre-buffered: a local file's column chunks are read as they are decoded, never held whole beside them.
        with pq.ParquetFile(path, read_dictionary=texts, pre_buffer=False) as parquet:
            pieces = []
            held = 0
            # pyarrow's threads cost more than they give on a small table (a cache entry of one step: 0.25 ms
            # threaded, 0.09 ms not, for 1,000 rows); they pay from about 16,000 rows.
            threads = parquet.metadata.num_rows > 16_000
            # Without text the footer's claim is what the read decodes to (rows times widths): one run, and each
            # column comes in one chunk (read where it lies, never joined into a copy).
            for run in _row_group_runs(parquet.metadata, whole=not texts):
                piece = parquet.read_row_groups(run, columns=columns, use_threads=threads)
                held += _decoded_bytes(piece)
                if held > budget:
                    raise MemoryError(f"{held} bytes of table")
                pieces.append(tables.decode_dictionaries(piece))
            if not pieces:
                empty = parquet.schema_arrow.empty_table()
                pieces.append(tables.decode_dictionaries(empty if columns is None else empty.select(columns)))
    except (MemoryError, pa.ArrowCapacityError):  # ArrowMemoryError is a MemoryError
        too_much = _too_much(size)
        raise InputError(too_much["message"], file=str(path), expected=too_much["expected"]) from None
    except (pa.ArrowException, OSError, KeyError) as error:  # KeyError: a column the footer does not name
        raise InputError(f"cannot read as Parquet: {tables.short(error)}", file=str(path)) from None
    except UnicodeDecodeError:  # pyarrow decodes column paths as it opens a Parquet file
        raise InputError("a column name is not UTF-8 text", file=str(path), expected="UTF-8 column names") from None
    return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)


def _footer_bound(parquet: Any, columns: list[str] | None, path: Path) -> tuple[list[str], int] | None:
    """The text columns to read as dictionaries, and the bytes the footer says the named columns decode to (text:
    its claimed page bytes and offsets, checked again as read); None where some column is not bounded by it."""
    import pyarrow as pa

    from . import tables

    metadata, schema = parquet.metadata, parquet.schema_arrow
    groups = [metadata.row_group(index) for index in range(metadata.num_row_groups)]
    if any(group.num_columns != metadata.num_columns for group in groups):
        return None  # pyarrow aborts the process on a column chunk a row group lacks: the child reads it
    rows = sum(group.num_rows for group in groups)
    tables.check_rows(max(rows, metadata.num_rows), path)
    leaves = {metadata.schema.column(index).path: index for index in range(metadata.num_columns)}
    texts: list[str] = []
    claimed = 0
    for name in schema.names if columns is None else columns:
        leaf = leaves.get(name)
        if leaf is None or metadata.schema.column(leaf).max_repetition_level > 0:
            return None  # nested: a list or a struct
        if any(group.column(leaf).compression not in BOUNDED_CODECS for group in groups):
            return None
        kind = schema.field(name).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        validity = rows // 8 + 64
        if pa.types.is_boolean(kind):
            claimed += rows + validity
        elif pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_temporal(kind):
            claimed += rows * max(kind.bit_width // 8, 1) + validity
        elif pa.types.is_decimal(kind):
            claimed += rows * kind.byte_width + validity
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind):
            texts.append(name)
            pages = sum(group.column(leaf).total_uncompressed_size for group in groups)
            claimed += rows * 8 + validity + max(pages, 0)
        else:
            return None
    return texts, claimed


def _row_group_runs(metadata: Any, whole: bool = False) -> Iterator[list[int]]:
    """Consecutive row groups, as few to a run as make ``_RUN_ROWS_PER_PIECE`` pieces' rows (one at least); all of
    them in one run where ``whole``."""
    from . import tables

    if whole:
        if metadata.num_row_groups:
            yield list(range(metadata.num_row_groups))
        return
    run: list[int] = []
    rows = 0
    for index in range(metadata.num_row_groups):
        count = metadata.row_group(index).num_rows
        if run and rows + count > _RUN_ROWS_PER_PIECE * tables.PIECE_ROWS:
            yield run
            run, rows = [], 0
        run.append(index)
        rows += count
    if run:
        yield run


def _decoded_bytes(piece: pa.Table) -> int:
    """The bytes ``piece`` holds once its dictionaries are decoded, counted without decoding them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = 0
    for column in piece.columns:
        if not pa.types.is_dictionary(column.type):
            total += column.nbytes
            continue
        offset_bytes = 8 if pa.types.is_large_string(column.type.value_type) else 4
        for chunk in column.chunks:
            lengths = pc.binary_length(chunk.dictionary)
            values = pc.sum(pc.take(lengths, chunk.indices)).as_py() or 0
            total += chunk.indices.nbytes + values + offset_bytes * (len(chunk) + 1)
    return total


# ---------------------------------------------------------------------------------------------------------------------
# This process: one child per process, started on the first read and reused.


class _Worker:
    def __init__(self) -> None:
        environment = {**os.environ, _IN_WORKER: "1", "ARROW_DEFAULT_MEMORY_POOL": "system"}
        self._process = subprocess.Popen(
            [sys.executable, "-c", "from rollaudit._loaders.arrow.capped import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=environment,
            start_new_session=True,  # Ctrl-C reaches this process only; it stops the child itself
        )
        self._lock = threading.Lock()
        self.owner = os.getpid()  # a forked child must not share this process's pipes
        _sweep_shared_files(lambda owner, reader: not pid_alive(owner) and not pid_alive(reader))

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def _ask(self, request: dict[str, Any], answered: Callable[[IO[bytes], bytes], Any]) -> Any:
        """Send ``request``; ``answered(stdout, first line)`` reads the rest of the answer, under the lock. A pipe
        that fails is an empty answer; Ctrl-C or a signal mid-request stops the child (its answer would be out of
        step with the next request)."""
        with self._lock:
            stdin, stdout = self._process.stdin, self._process.stdout
            assert stdin is not None and stdout is not None
            try:
                stdin.write(json.dumps(request).encode() + b"\n")
                stdin.flush()
                return answered(stdout, stdout.readline())
            except OSError:
                return answered(stdout, b"")
            except BaseException:
                self.stop()
                raise

    def read(self, path: Path, kind: str, columns: list[str] | None) -> pa.Table:
        import pyarrow as pa

        def table_or_answer(stdout: IO[bytes], answer: bytes) -> pa.Table | bytes:
            try:
                if answer == b"ok\n":
                    with pa.ipc.open_stream(stdout) as reader:
                        return reader.read_all()
                if answer.startswith(b"file "):
                    return _mapped_table(answer[5:-1].decode())
            except (OSError, pa.ArrowException):
                return b""
            return answer

        request = {"path": os.fspath(Path(path).absolute()), "kind": kind, "columns": columns}
        answer = self._ask(request, table_or_answer)
        if isinstance(answer, pa.Table):
            return answer
        if not answer:
            self.stop()
            raise InputError("stopped the table reader (it crashed or was killed)", file=str(path))
        fields = json.loads(answer)
        message = fields.pop("message")
        fields["file"] = str(path)
        raise InputError(message, **fields)

    def footer_bound(self, path: Path, columns: list[str] | None) -> tuple[list[str], int] | None:
        """:func:`_footer_bound` of a Parquet file, walked in the child; None where it is not bounded, or the
        child fails on it (its read then names the failure)."""
        request = {"path": os.fspath(Path(path).absolute()), "kind": "parquet", "columns": columns, "bound": True}
        answer = self._ask(request, lambda _, line: line)
        if not answer:
            self.stop()
            return None
        bound = json.loads(answer).get("bound")
        return (list(bound[0]), int(bound[1])) if bound else None

    def stop(self) -> None:
        if self.alive:
            self._process.kill()
        self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                pipe.close()
        # A table the child was writing, or had named but this process had not yet opened, is nobody's now.
        _sweep_shared_files(lambda owner, reader: (owner, reader) == (self.owner, self._process.pid))


_current: _Worker | None = None


def start_reader() -> None:
    """Start this process's child now, where reads use one: it starts Python and imports pyarrow (0.1 s) while
    this process does other work, rather than on the first read."""
    if can_cap():
        _worker()


def _worker() -> _Worker:
    global _current
    if _current is None or _current.owner != os.getpid() or not _current.alive:
        _current = _Worker()
    return _current


@atexit.register
def _stop_worker() -> None:
    if _current is not None and _current.owner == os.getpid():
        _current.stop()


# ---------------------------------------------------------------------------------------------------------------------
# The child: one request per line on stdin, "ok" and an IPC stream or one JSON error line on stdout.


def _address_space() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def serve(requests: IO[bytes] | None = None, answers: IO[bytes] | None = None) -> None:
    """The child's loop; it ends when this process's parent closes the pipe."""
    import resource
    import signal

    import pyarrow as pa
    import pyarrow.parquet as pq

    from . import tables

    prefer_small_pages()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests = requests or sys.stdin.buffer
    answers = answers or sys.stdout.buffer
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    # pyarrow's memory pool starts before the limit is measured (not by building a table: that imports pandas,
    # a fifth of a second of this process's start).
    pa.allocate_buffer(1)
    for line in requests:
        request = json.loads(line)
        path = Path(request["path"])
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        limit = _address_space() + address_space_limit(size)
        capped = limit if soft == resource.RLIM_INFINITY else min(limit, soft)
        resource.setrlimit(resource.RLIMIT_AS, (capped, hard))
        if request.get("bound"):
            try:
                with pq.ParquetFile(path) as footer:
                    bound = _footer_bound(footer, request["columns"], path)
            except (InputError, MemoryError, pa.ArrowException, OSError, ValueError, KeyError, UnicodeDecodeError):
                bound = None  # the read names the failure
            finally:
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
            try:
                answers.write(json.dumps({"bound": bound}).encode() + b"\n")
                answers.flush()
            except OSError:
                return
            continue
        table = shared = None
        failure: dict[str, Any] | None
        try:
            shared = _shared_file(tables.read_pieces(path, request["kind"], request["columns"]), size)
            if shared is None:  # no room in shared memory: read again, for the pipe
                table = tables.read_in_this_process(path, request["kind"], request["columns"])
        except InputError as error:
            failure = {name: getattr(error, name) for name in ("message", "field", "row", "expected")}
        except (MemoryError, pa.ArrowCapacityError):
            failure = dict(_too_much(size))
        except Exception as error:  # a bug: named, so that it is reported, rather than a silent crash
            failure = {"message": f"cannot be read ({type(error).__name__}: {tables.short(error)})"}
        else:
            failure = None
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        try:
            if failure is not None:
                answers.write(json.dumps(failure).encode() + b"\n")
            elif shared is not None:
                answers.write(b"file " + shared.encode() + b"\n")
            else:
                assert table is not None  # no shared file: the table was read again, for the pipe
                answers.write(b"ok\n")
                with pa.ipc.new_stream(answers, table.schema) as writer:
                    writer.write_table(table)
            del table
            answers.flush()
        except OSError:  # the parent is gone (killed): nobody will map the table
            if shared is not None:
                with contextlib.suppress(OSError):
                    os.unlink(shared)
            return


_SHARED_MEMORY = Path("/dev/shm")
_SHARED_PREFIX = "rollaudit-table-"
# rollaudit-table-<parent's PID>-<child's PID>-<random>.arrow; a PID has at most 7 digits on Linux (4194304).
_SHARED_NAME = re.compile(rf"^{_SHARED_PREFIX}(\d{{1,7}})-(\d{{1,7}})-[a-z0-9_]+\.arrow$")


def _sweep_shared_files(abandoned: Callable[[int, int], bool]) -> None:
    """Remove this user's shared table files whose (parent, child) PIDs are ``abandoned``; other files are left."""
    try:
        entries = list(os.scandir(_SHARED_MEMORY))
    except OSError:
        return
    for entry in entries:
        match = _SHARED_NAME.match(entry.name)
        if match is None:
            continue
        with contextlib.suppress(OSError):
            mine = entry.stat(follow_symlinks=False).st_uid == os.getuid() and entry.is_file(follow_symlinks=False)
            if mine and abandoned(int(match.group(1)), int(match.group(2))):
                os.unlink(entry.path)


def _shared_file(pieces: Iterator[pa.Table], size: int) -> str | None:
    """The pieces of a table as an Arrow IPC file in shared memory, which this process's parent maps without a
    copy, each written while the next is read; None where there is no room (Docker gives /dev/shm 64 MB). Pieces
    over ``address_space_limit(size)`` bytes in all are a MemoryError, as one table of that size would be."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    if not _SHARED_MEMORY.is_dir():
        return None
    first = next(pieces)
    prefix = f"{_SHARED_PREFIX}{os.getppid()}-{os.getpid()}-"
    descriptor, name = tempfile.mkstemp(prefix=prefix, suffix=".arrow", dir=_SHARED_MEMORY)
    written = 0
    try:
        with (
            os.fdopen(descriptor, "wb") as stream,
            pa.ipc.new_file(stream, first.schema) as writer,
            ThreadPoolExecutor(1) as writes,
        ):
            pending = None
            for piece in itertools.chain([first], pieces):  # the next piece is read while this one is written
                written += piece.nbytes
                if written > address_space_limit(size):
                    raise MemoryError(f"{written} bytes of table")
                if pending is not None:
                    pending.result()
                pending = writes.submit(writer.write_table, piece)
            assert pending is not None  # the first piece, at least, was submitted
            pending.result()
    except BaseException as error:
        os.unlink(name)
        too_much = isinstance(error, (MemoryError, pa.ArrowCapacityError))  # ArrowMemoryError is both kinds
        if isinstance(error, (OSError, pa.ArrowException)) and not too_much:
            return None  # no room: the caller reads again, for the pipe
        raise
    return name


def _mapped_table(name: str) -> pa.Table:
    """The table the child left in shared memory: mapped, then the name removed (the mapping keeps the pages)."""
    import mmap

    import pyarrow as pa

    try:
        descriptor = os.open(name, os.O_RDONLY)
    finally:
        os.unlink(name)  # the open descriptor, then the mapping, keep the pages
    try:
        # Its pages mapped in at once (every one is read next): a fault per page costs more.
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        mapped = mmap.mmap(descriptor, 0, flags=flags, prot=mmap.PROT_READ)
    finally:
        os.close(descriptor)
    # The table's buffers hold the mapping: it is unmapped when the last of them goes.
    return pa.ipc.open_file(pa.BufferReader(pa.py_buffer(mapped))).read_all()
