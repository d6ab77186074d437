"""Reading tables from files: content sniffing and pyarrow's readers, every failure one line naming the file.

Parquet, Arrow IPC/Feather (file and stream), JSON Lines and CSV, told apart
by their first bytes (never by their names). pyarrow does the reading (C++,
multithreaded); this module bounds what a file may declare (rows per byte),
checks what pyarrow passes on unchecked (UTF-8, offsets, column names) and
turns its errors into one :class:`~rollaudit.InputError` line that names the
file and, for JSON Lines, the line.
"""

from __future__ import annotations

import csv
import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..._errors import InputError
from ..._table import PIECE_ROWS

HEAD_BYTES = 1 << 16
# pyarrow parses JSON in blocks that must hold whole lines; verl lines carry whole decoded trajectories.
_JSON_BLOCK_BYTES = 1 << 24
_MAX_BLOCK_BYTES = (1 << 31) - 1
_MESSAGE_CHARS = 160
# A real table spends at least a byte a row (rewards, positions, keys); a hostile one can spend a bit per billion.
_ROWS_PER_BYTE = 16
_FREE_ROWS = 1 << 20
_ARROW_FILE_MAGIC = b"ARROW1"
_FEATHER_V1_MAGIC = b"FEA1"
_PARQUET_MAGIC = b"PAR1"
_IPC_CONTINUATION = b"\xff\xff\xff\xff"
BOM = b"\xef\xbb\xbf"


# ---------------------------------------------------------------------------------------------------------------------
# Sniffing: what a file holds, from its first bytes.


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes | None:
    try:
        with open(path, "rb") as stream:
            return stream.read(size)
    except OSError:
        return None


def sniff(path: Path) -> str | None:
    """``parquet``, ``arrow`` (IPC file / Feather), ``arrow-stream``, ``jsonl``, ``csv``, ``empty``, or None."""
    head = read_head(path)
    if head is None:
        return None
    if head.startswith(_PARQUET_MAGIC):
        return "parquet"
    if head.startswith(_ARROW_FILE_MAGIC) or head.startswith(_FEATHER_V1_MAGIC):
        return "arrow"
    if head.startswith(_IPC_CONTINUATION) and len(head) >= 8:
        return "arrow-stream"
    text = head.removeprefix(BOM)
    if not text.strip():
        return "empty"
    if b"\x00" in text:
        return None
    if text.lstrip().startswith(b"{"):
        first = _first_object(path)
        # A first line too long or too deep to parse here is JSON Lines for the reader to judge (naming the line).
        return "jsonl" if first is _UNJUDGED or type(first) is dict else None
    if text.lstrip()[:1] in (b"[", b"{"):
        return None  # JSON that is not one object a line (a JSON array): no table rollaudit reads
    if csv_delimiter(text) is not None:
        return "csv"
    # A one-column CSV (``reward`` and its values) has no delimiter to tell it by: its name says it.
    return "csv" if path.suffix.lower() in (".csv", ".tsv") and _one_column_header(text) else None


_COLUMN_NAME = re.compile(r"^[A-Za-z_][\w.\-]*$")


def _one_column_header(head: bytes) -> bool:
    """Whether the first line is one column name (a word; no delimiter)."""
    line = head.split(b"\n", 1)[0].strip()
    try:
        return bool(_COLUMN_NAME.match(line.decode("utf-8")))
    except UnicodeDecodeError:
        return False


MAX_JSON_LINE_BYTES = _MAX_BLOCK_BYTES
"""Longest JSON line read: the first line is read whole to tell a file's format and fields, whatever its size (a
verl line carries a whole decoded trajectory), up to the bound of what any reader can hold as one value."""
_UNJUDGED = object()  # a first line longer than MAX_JSON_LINE_BYTES, or nested too deep for Python's parser
_CACHED_LINE_BYTES = 1 << 20


def _first_line(path: Path) -> bytes | None:
    """The first non-blank line (of at most 64 lines), ``b""`` without one, None when it is longer than
    ``MAX_JSON_LINE_BYTES``."""
    try:
        with open(path, "rb") as stream:
            for _ in range(64):
                line = stream.readline(MAX_JSON_LINE_BYTES + 1)
                if not line:
                    return b""
                if line.strip():
                    return None if len(line) > MAX_JSON_LINE_BYTES else line.removeprefix(BOM)
    except OSError:
        return b""
    return b""


def first_json_object(path: Path) -> dict | None:
    """The first line of a JSON Lines file as a dict, or None when it is not one. Parsed once per file version:
    several formats' detectors ask for it (a copy each, so that none changes another's)."""
    value = _first_object(path)
    if type(value) is not dict:
        return None
    try:
        return _json_copy(value)
    except RecursionError:  # parsed, but too deep to copy: no dump's first record
        return None


def _json_copy(value: Any) -> Any:
    """A copy of a parsed JSON value, its objects and arrays new (its texts and numbers cannot change): a tenth of
    ``copy.deepcopy``'s time, which each file's detection pays once per format asking."""
    if type(value) is dict:
        return {key: _json_copy(item) for key, item in value.items()}
    if type(value) is list:
        return [_json_copy(item) for item in value]
    return value


_last_long_line: tuple[tuple[str, int, int, int], Any] | None = None


def _first_object(path: Path) -> Any:
    """The value of the first line (None when it is not JSON, ``_UNJUDGED`` when it is too long or too deep to
    parse here), cached per file version: small lines in a cache of many, one long line at a time (a verl line of
    a whole trajectory can be tens of megabytes)."""
    global _last_long_line
    try:
        stat = path.stat()
    except OSError:
        return None
    version = (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if stat.st_size <= _CACHED_LINE_BYTES:
        return _first_small_object(*version)
    if _last_long_line is not None and _last_long_line[0] == version:
        return _last_long_line[1]
    value = _first_value(path)
    _last_long_line = (version, value)
    return value


@functools.lru_cache(maxsize=64)
def _first_small_object(path: str, size: int, mtime_ns: int, inode: int) -> Any:
    return _first_value(Path(path))


def _first_value(path: Path) -> Any:
    line = _first_line(path)
    if line is None:
        return _UNJUDGED
    if not line:
        return None
    try:
        return json.loads(line)
    except RecursionError:
        return _UNJUDGED
    except ValueError:
        return None


def json_line_object(line: bytes | str) -> dict | None:
    """The JSON object one line holds, or None (not JSON, or JSON but no object)."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if type(value) is dict else None


def csv_delimiter(head: bytes) -> str | None:
    """``,`` or a tab when the first line is a header of two or more fields, else None."""
    end = head.find(b"\n")
    line = head if end < 0 else head[:end]
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        if end >= 0:
            return None
        text = line.decode("utf-8", errors="ignore")  # a header cut in the middle of a character
    delimiter = "\t" if text.count("\t") > text.count(",") else ","
    try:
        fields = next(csv.reader([text.rstrip("\r")], delimiter=delimiter), [])
    except csv.Error:  # a carriage return inside the line, a NUL: not a CSV header
        return None
    return delimiter if len(fields) >= 2 and all(field.strip() for field in fields) else None


# ---------------------------------------------------------------------------------------------------------------------
# Reading: pyarrow's readers (C++, multithreaded), their errors as one line naming the file and the line.


def short(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


def check_not_empty(path: Path) -> None:
    """InputError for an empty (or whitespace-only) file."""
    head = read_head(path, 4096)
    if head is None:
        raise InputError("cannot open the file", file=str(path))
    if not head.removeprefix(BOM).strip() and (len(head) < 4096 or not _has_content(path)):
        raise InputError("empty file", file=str(path), expected="rollouts, one row per sample")


def _has_content(path: Path) -> bool:
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            if chunk.strip():
                return True
    return False


# A line whose first character (after blanks) does not open an object. JSON text holds no raw newline, so lines are
# exactly the values; the pattern starts with a literal newline, which the regex engine finds at memchr speed.
_NOT_AN_OBJECT = re.compile(rb"\n[ \t\r]*+[^{ \t\r\n]")
_LINE_START_NOT_AN_OBJECT = re.compile(rb"[ \t\r]*+[^{ \t\r\n]")
_BLANK_TO_END = re.compile(rb"[ \t\r]*+\Z")


def first_non_object_line(chunks: Iterator[bytes]) -> int | None:
    """The first line (from 1) whose first character that is not blank is not ``{``, in the text of ``chunks``."""
    newlines, at_line_start = 0, True  # at_line_start: only blanks since the last newline (or the file's start)
    for number, chunk in enumerate(chunks):
        start = len(BOM) if number == 0 and chunk.startswith(BOM) else 0
        if at_line_start and _LINE_START_NOT_AN_OBJECT.match(chunk, start):
            return newlines + 1
        match = _NOT_AN_OBJECT.search(chunk, start)
        if match is not None:
            return newlines + chunk.count(b"\n", 0, match.end() - 1) + 1
        newlines += chunk.count(b"\n")
        last = chunk.rfind(b"\n")
        at_line_start = _BLANK_TO_END.match(chunk, last + 1 if last >= 0 else start) is not None and (
            last >= 0 or at_line_start
        )
    return None


MAX_JSON_DEPTH = 512
"""Nesting deeper than this is refused before any parser sees it: pyarrow's JSON reader crashes the process (a
segmentation fault) past about 100,000 levels, and Python's json raises RecursionError past about 1,000. Real dumps
nest a few levels (chat messages: five or six)."""
_DEPTH_CHUNK = 1 << 22


class _DepthScan:
    """The nesting depth of JSON text, chunk by chunk at numpy speed: brackets outside strings, strings told by
    their unescaped quotes, every line (one JSON value of JSON Lines) counted from zero."""

    def __init__(self) -> None:
        self.backslashes = 0  # the run of backslashes that ended the previous chunk
        self.in_string = 0  # whether the previous chunk ended inside a string
        self.depth = 0  # the depth at the previous chunk's end, within its last line

    def first_past(self, chunk: Any, limit: int) -> int | None:
        """The first position in ``chunk`` nested deeper than ``limit`` (within its line), or None."""
        import numpy as np

        size = len(chunk)
        index = np.arange(size, dtype=np.int64)
        backslash = chunk == 92
        last_other = np.maximum.accumulate(np.where(backslash, -1 - self.backslashes, index))
        before = np.empty(size, dtype=np.int64)
        before[0], before[1:] = -1 - self.backslashes, last_other[:-1]
        real_quote = (chunk == 34) & ((index - 1 - before) % 2 == 0)
        newline = chunk == 10
        quotes = np.cumsum(real_quote, dtype=np.int64) + self.in_string
        line_quotes = np.maximum.accumulate(np.where(newline, quotes, 0))
        inside = ((quotes - line_quotes) & 1).astype(bool)
        step = ((chunk == 91) | (chunk == 123)).astype(np.int64) - ((chunk == 93) | (chunk == 125))
        depth = np.cumsum(np.where(inside, 0, step), dtype=np.int64) + self.depth
        line_of = np.cumsum(newline, dtype=np.int64)
        bases = np.concatenate(([0], depth[newline]))
        too_deep = (depth - bases[line_of]) > limit
        relative_end = int(depth[-1] - bases[line_of[-1]])
        trailing = size - 1 - int(last_other[-1]) if backslash[-1] else 0
        self.backslashes = trailing + (self.backslashes if trailing == size else 0)
        self.in_string = int(inside[-1]) if not newline[-1] else 0
        self.depth = relative_end
        return int(too_deep.argmax()) if too_deep.any() else None


def too_deep_line(view: Any, limit: int = MAX_JSON_DEPTH) -> int | None:
    """The first line of the bytes ``view`` nesting deeper than ``limit``, or None."""
    return _too_deep_in([view[start : start + _DEPTH_CHUNK] for start in range(0, len(view), _DEPTH_CHUNK)], limit)


def _too_deep_in(chunks: Iterable[Any], limit: int) -> int | None:
    """The first line nesting deeper than ``limit`` of the bytes ``chunks`` holds (uint8 arrays; it is passed over
    more than once), or None."""
    import numpy as np

    if _nesting_bound(chunks, limit) <= limit:
        return None  # no line is long enough, or opens brackets enough, to nest that deep
    scan = _DepthScan()
    newlines = 0
    for chunk in chunks:
        position = scan.first_past(chunk, limit)
        if position is not None:
            return newlines + int(np.count_nonzero(chunk[:position] == 10)) + 1
        newlines += int(np.count_nonzero(chunk == 10))
    return None


def _nesting_bound(chunks: Iterable[Any], limit: int) -> int:
    """A bound of any one line's nesting depth, at memory speed: the longest line's length where that is within
    ``limit`` (one pass), else the most ``[`` and ``{`` bytes one line holds (strings included). The exact depth
    scan runs only where this bound passes the limit."""
    import numpy as np

    longest = _most_per_line(chunks, lambda chunk, ends: np.diff(ends, prepend=-1, append=len(chunk)) - 1)
    if longest <= limit:
        return longest
    return _most_per_line(
        chunks,
        lambda chunk, ends: np.bincount(
            np.searchsorted(ends, np.flatnonzero((chunk == 91) | (chunk == 123))), minlength=len(ends) + 1
        ),
    )


def _most_per_line(chunks: Iterable[Any], count: Callable[[Any, Any], Any]) -> int:
    """The largest per-line total of ``count(chunk, its newline positions)`` (one count per line piece of the
    chunk, the last for the line that runs on into the next chunk), a chunk at a time."""
    import numpy as np

    most = carried = 0
    for chunk in chunks:
        per_line = count(chunk, np.flatnonzero(chunk == 10))
        per_line[0] += carried
        most, carried = max(most, int(per_line.max())), int(per_line[-1])
    return most


def check_values(table: pa.Table, path: Path, *, locate: Callable[[], str | None] | None = None) -> pa.Table:
    """``table``, once every value is checked well-formed: pyarrow's JSON, Parquet and IPC readers pass on invalid
    UTF-8 (and an IPC file's offsets) as they are, and such a value would fail later, far from the file."""
    check_names(table.schema, path)
    for name, column in zip(table.column_names, table.columns, strict=True):
        try:
            column.validate(full=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            located = locate() if locate is not None else None  # the line of a JSON Lines file
            raise InputError(
                located or f"holds damaged values: {short(error)}",
                file=str(path),
                field=None if located else name,
                expected="UTF-8 text and well-formed values",
            ) from None
    return table


def check_names(schema: pa.Schema, path: Path) -> pa.Schema:
    """``schema``, once its column names (nested field names too) are checked to be UTF-8 (pyarrow decodes a name
    only when it is asked for, and a damaged one would raise UnicodeDecodeError there) and distinct."""
    pending = list(schema)
    try:
        while pending:
            field = pending.pop()
            _ = field.name
            kind = field.type
            if pa.types.is_dictionary(kind):
                pending.append(pa.field("values", kind.value_type))
            pending.extend(kind.field(index) for index in range(kind.num_fields))
    except UnicodeDecodeError:
        raise InputError("a column name is not UTF-8 text", file=str(path), expected="UTF-8 column names") from None
    seen: set[str] = set()
    for name in schema.names:
        if name in seen:
            raise InputError(f"two columns are named {name[:60]!r}", file=str(path), expected="one column per name")
        seen.add(name)
    return schema


def read_csv(path: Path, delimiter: str) -> pa.Table:
    """A CSV (or tab-separated) file as a table."""
    import pyarrow.csv as pa_csv

    try:
        table = pa_csv.read_csv(
            path,
            parse_options=pa_csv.ParseOptions(delimiter=delimiter),
            # A blank cell is a missing value in every column: a missing key or status, not an empty string.
            convert_options=pa_csv.ConvertOptions(strings_can_be_null=True),
        )
    except pa.ArrowException as error:
        located = _locate_csv_problem(path, delimiter)
        raise InputError(
            located or short(error).replace("CSV parse error: ", ""),
            file=str(path),
            expected="CSV with the header's number of fields on every line",
        ) from None
    except OSError as error:
        raise InputError(f"cannot read the file: {short(error)}", file=str(path)) from None
    return check_values(_exact_csv_integers(table, path, delimiter), path)


_INTEGER_TEXT = r"^\s*[-+]?\d+\s*$"


def _exact_csv_integers(table: pa.Table, path: Path, delimiter: str) -> pa.Table:
    """``table``, with each column that pyarrow inferred as doubles because it holds integers past 64 bits read
    again as their text: an id that large is a key compared exactly, never its nearest double (numeric uses read
    the text as a number again)."""
    import pyarrow.compute as pc
    import pyarrow.csv as pa_csv

    past = [
        name
        for name, column in zip(table.column_names, table.columns, strict=True)
        if pa.types.is_floating(column.type) and pc.any(pc.greater_equal(pc.abs(column), 2.0**63)).as_py()
    ]
    if not past:
        return table
    texts = pa_csv.read_csv(
        path,
        parse_options=pa_csv.ParseOptions(delimiter=delimiter),
        convert_options=pa_csv.ConvertOptions(
            strings_can_be_null=True, include_columns=past, column_types={name: pa.string() for name in past}
        ),
    )
    for name in past:
        text = texts.column(name)
        if pc.all(pc.match_substring_regex(text, _INTEGER_TEXT)).as_py():
            table = table.set_column(table.column_names.index(name), name, pc.utf8_trim_whitespace(text))
    return table


def _locate_csv_problem(path: Path, delimiter: str) -> str | None:
    with open(path, newline="", encoding="utf-8", errors="replace") as stream:
        reader = csv.reader(stream, delimiter=delimiter)
        try:
            header = next(reader, None)
            if header is None:
                return None
            for row in reader:
                if row and len(row) != len(header):
                    return f"line {reader.line_num} has {len(row)} fields where the header has {len(header)}"
        except csv.Error as error:
            return f"line {reader.line_num} is not CSV: {error}"
    return None


def footer_schema(path: Path, kind: str) -> pa.Schema:
    """The schema of a Parquet or Arrow file, read from its footer (no data; not for Feather v1, which has none)."""
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_schema(path)
        if kind == "arrow-stream":
            with pa.ipc.open_stream(path) as reader:
                return reader.schema
        with pa.ipc.open_file(path) as reader:
            return reader.schema
    except (pa.ArrowException, OSError) as error:
        raise InputError(f"cannot read as {_KIND_NAMES[kind]}: {short(error)}", file=str(path)) from None
    except UnicodeDecodeError:  # pyarrow decodes column paths as it opens a Parquet file
        raise InputError("a column name is not UTF-8 text", file=str(path), expected="UTF-8 column names") from None


def is_feather_v1(path: Path) -> bool:
    head = read_head(path, 4)
    return head is not None and head.startswith(_FEATHER_V1_MAGIC)


_KIND_NAMES = {"parquet": "Parquet", "arrow": "Arrow IPC/Feather", "arrow-stream": "an Arrow IPC stream"}


def read_in_this_process(path: Path, kind: str, columns: list[str] | None) -> pa.Table:
    """The named columns (all with None) of a Parquet or Arrow file, dictionaries decoded: what may expand.

    Memory errors pass through: the capped reader (:mod:`.capped`) names the bound they hit.
    """
    pieces = list(read_pieces(path, kind, columns))
    return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)


def read_pieces(path: Path, kind: str, columns: list[str] | None) -> Iterator[pa.Table]:
    """:func:`read_in_this_process` a piece at a time: a Parquet file ``PIECE_ROWS`` rows at a time (a reader that
    hands each piece on before the next holds one piece, not the table, and its memory is reused rather than
    freshly paged in), other kinds whole; at least one piece, whose schema every other piece has.
    """
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetFile(path) as parquet:  # a file, never a dataset: no partitions read from its path
                check_rows(parquet.metadata.num_rows, path)
                rows = 0
                for batch in parquet.iter_batches(batch_size=PIECE_ROWS, columns=columns):
                    rows += batch.num_rows
                    check_rows(rows, path)
                    yield decode_dictionaries(pa.Table.from_batches([batch]))
                if rows == 0:
                    empty = parquet.schema_arrow.empty_table()
                    yield decode_dictionaries(empty if columns is None else empty.select(columns))
            return
        if kind == "arrow-stream":
            with pa.ipc.open_stream(path) as reader:
                table = reader.read_all()
            table = table if columns is None else table.select(columns)
        else:
            import pyarrow.feather as feather

            table = feather.read_table(path, columns=columns)
        check_rows(table.num_rows, path)
        yield decode_dictionaries(table)
    except (MemoryError, pa.ArrowCapacityError):  # ArrowMemoryError is a MemoryError: data that does not fit
        raise
    except (pa.ArrowException, OSError) as error:
        raise InputError(f"cannot read as {_KIND_NAMES[kind]}: {short(error)}", file=str(path)) from None
    except UnicodeDecodeError:  # pyarrow decodes column paths as it opens a Parquet file
        raise InputError("a column name is not UTF-8 text", file=str(path), expected="UTF-8 column names") from None


def decode_dictionaries(table: pa.Table) -> pa.Table:
    """Dictionary columns as plain ones, here where the memory bound holds: one long value a million times over
    is a few bytes of dictionary page and gigabytes decoded."""
    for index, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(index, field.name, table.column(index).cast(field.type.value_type))
    return table


def check_rows(rows: int, path: Path) -> None:
    """Refuse more rows than the file can hold: Parquet's run-length encoding, and Arrow's null and run-end encoded
    columns, let a few bytes declare billions of rows, which every canonical column would then allocate."""
    limit = _ROWS_PER_BYTE * _file_size(path) + _FREE_ROWS
    if rows > limit:
        raise InputError(
            f"declares {rows} rows in {_file_size(path)} bytes",
            file=str(path),
            expected=f"at most {_ROWS_PER_BYTE} rows per byte of file (beyond the first {_FREE_ROWS})",
        )


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


MAX_JSON_DOCUMENT_BYTES = 1 << 30
"""Largest JSON document read whole (an rllm episode file is kilobytes to megabytes)."""


def read_json_document(path: Path) -> Any:
    """A file holding one JSON document (not JSON Lines), parsed by Python's json; every failure one line."""
    try:
        size = path.stat().st_size
        if size > MAX_JSON_DOCUMENT_BYTES:
            raise InputError(f"a JSON document of {size} bytes", file=str(path), expected="a file under 1 GiB")
        data = path.read_bytes()
    except OSError as error:
        raise InputError(f"cannot read the file: {short(error)}", file=str(path)) from None
    try:
        return json.loads(data)
    except RecursionError:
        raise InputError("JSON nested too deeply", file=str(path), expected="a JSON document rollaudit reads") from None
    except json.JSONDecodeError as error:
        raise InputError(
            f"not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})", file=str(path)
        ) from None
    except ValueError:
        raise InputError("not valid JSON: not UTF-8 text", file=str(path)) from None
