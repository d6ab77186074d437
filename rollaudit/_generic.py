"""Generic rollout tables to the canonical table: Parquet, Arrow IPC/Feather, JSON Lines, CSV.

For agent-lightning exports, NeMo-RL's ``train_data_step{N}.jsonl``, AReaL's
per-task jsonl, ROLL, or any table with one row per training sample. The
user names the columns (``reward_col``, ``prompt_col``, ``trajectory_col``,
``step_col``, ``advantage_col``, ``mask_col``) or the common names are found:

=============  ====================================================================================
role           names looked for, in this order
=============  ====================================================================================
reward         ``reward``, ``score``, ``rewards``
prompt key     ``group_index``, ``uid``, ``data_id``, ``prompt_id``, ``task_id``, ``prompt``, ``input``
trajectory     ``rollout_id``, ``traj_uid``, ``trajectory_id``, ``trajectory``
advantage      ``advantage``, ``advantages``, ``recorded_advantage``
step           ``step``, ``global_step``
token mask     ``token_loss_mask``, ``loss_mask``, ``token_mask``, ``response_mask``, ``loss_masks``, ``mask``
=============  ====================================================================================

Reduction rules (one value per sample):

- A per-token **advantage** list becomes the value of its first masked-in
  token (mask value != 0) when a mask column exists, else its first element
  (``token_reduce`` picks ``last`` or ``mean`` instead). A row whose
  masked-in values differ is not an outcome scheme (KL in the reward, GAE):
  one warning per file says how many rows do. No masked-in token: null.
- A per-token **reward** list becomes its sum (over the masked-in tokens
  when a mask column exists): the sequence reward of a token-level reward.
- ``response_length``: the column of that name, else the count of masked-in
  tokens when a mask column exists, else unknown.
- A missing reward (null, blank CSV cell) is kept as NaN and reported once
  per file, like slime's None rewards.
- ``status`` (strings) is the canonical status. Other scalar columns pass
  through (a name taken by a canonical column gets a ``source_`` prefix);
  list, struct and binary columns (tokens, log-probs, chat messages) are
  dropped.
- The step is the step column; without one, the ``step<N>`` of the file
  name (NeMo-RL's ``train_data_step{N}.jsonl``), else 0. Files of one step
  form one batch, in the order given.

This module also holds what the verl and TRL readers share: content
sniffing, the JSON Lines reader with one-line errors, and column conversions.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._errors import InputError, RollauditWarning
from ._table import CANONICAL_COLUMNS, POSITION, PROMPT, STEP, concat_tables, make_table

if TYPE_CHECKING:
    from ._load import LoadOptions

REWARD_NAMES = ("reward", "score", "rewards")
PROMPT_NAMES = ("group_index", "uid", "data_id", "prompt_id", "task_id", "prompt", "input")
TRAJECTORY_NAMES = ("rollout_id", "traj_uid", "trajectory_id", "trajectory")
ADVANTAGE_NAMES = ("advantage", "advantages", "recorded_advantage")
STEP_NAMES = ("step", "global_step")
MASK_NAMES = ("token_loss_mask", "loss_mask", "token_mask", "response_mask", "loss_masks", "mask")
TOKEN_REDUCE_RULES = ("first", "last", "mean")
TABLE_SUFFIXES = (".parquet", ".pq", ".arrow", ".feather", ".ipc", ".jsonl", ".ndjson", ".json", ".csv", ".tsv")
"""Only for picking a directory's tables; a file's format is always told by its content."""

# Per-token values stored as float32 copies of one float64 scalar agree to about 1e-7.
TOKEN_TOLERANCE = 1e-5
_HEAD_BYTES = 1 << 16
# pyarrow parses JSON in blocks that must hold whole lines; verl lines carry whole decoded trajectories.
_JSON_BLOCK_BYTES = 1 << 24
_MAX_BLOCK_BYTES = (1 << 31) - 1
_FIRST_LINE_LIMIT = 1 << 22  # a verl line holds a whole decoded prompt and response: allow 4 MiB
_MESSAGE_CHARS = 160
_COLUMNS_SHOWN = 20
_INT64_MAX = (1 << 63) - 1
# A real table spends at least a byte a row (rewards, positions, keys); a hostile one can spend a bit per billion.
_ROWS_PER_BYTE = 16
_FREE_ROWS = 1 << 20
_STEP_IN_NAME = re.compile(r"step[_-]?(\d+)", re.IGNORECASE)
_ARROW_FILE_MAGIC = b"ARROW1"
_FEATHER_V1_MAGIC = b"FEA1"
_PARQUET_MAGIC = b"PAR1"
_IPC_CONTINUATION = b"\xff\xff\xff\xff"
_BOM = b"\xef\xbb\xbf"


# ---------------------------------------------------------------------------------------------------------------------
# Sniffing: what a file holds, from its first bytes.


def _head(path: Path, size: int = _HEAD_BYTES) -> bytes | None:
    try:
        with open(path, "rb") as stream:
            return stream.read(size)
    except OSError:
        return None


def sniff(path: Path) -> str | None:
    """``parquet``, ``arrow`` (IPC file / Feather), ``arrow-stream``, ``jsonl``, ``csv``, ``empty``, or None."""
    head = _head(path)
    if head is None:
        return None
    if head.startswith(_PARQUET_MAGIC):
        return "parquet"
    if head.startswith(_ARROW_FILE_MAGIC) or head.startswith(_FEATHER_V1_MAGIC):
        return "arrow"
    if head.startswith(_IPC_CONTINUATION) and len(head) >= 8:
        return "arrow-stream"
    text = head.removeprefix(_BOM)
    if not text.strip():
        return "empty"
    if b"\x00" in text:
        return None
    if text.lstrip().startswith(b"{"):
        line = _first_line(path)
        if line is None:
            return "jsonl"  # a first line longer than the sniff limit: the reader will judge it
        try:
            return "jsonl" if type(json.loads(line)) is dict else None
        except ValueError:
            return None
    if text.lstrip()[:1] in (b"[", b"{"):
        return None  # JSON that is not one object a line (a JSON array): no table rollaudit reads
    return "csv" if _csv_delimiter(text) is not None else None


def _first_line(path: Path) -> bytes | None:
    """The first non-blank line, or None when it is longer than the sniff limit."""
    try:
        with open(path, "rb") as stream:
            for _ in range(64):
                line = stream.readline(_FIRST_LINE_LIMIT)
                if not line:
                    return b""
                if line.strip():
                    if len(line) >= _FIRST_LINE_LIMIT and not line.endswith(b"\n"):
                        return None
                    return line.removeprefix(_BOM)
    except OSError:
        return b""
    return b""


def first_json_object(path: Path) -> dict | None:
    """The first line of a JSON Lines file as a dict, or None when it is not one."""
    line = _first_line(path)
    if not line:
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if type(value) is dict else None


def _csv_delimiter(head: bytes) -> str | None:
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


def detect(path: Path) -> bool:
    """Any table rollaudit reads, by content (an empty file too, so that the error says it is empty)."""
    return sniff(path) is not None


def expand_directory(directory: Path) -> list[Path] | None:
    """A directory's tables (by suffix: README files and the like are not dumps), or None when it has none."""
    files = [
        path
        for path in directory.iterdir()
        if path.is_file() and not path.name.startswith(".") and path.suffix.lower() in TABLE_SUFFIXES
    ]
    return files or None


# ---------------------------------------------------------------------------------------------------------------------
# Reading: pyarrow's readers (C++, multithreaded), their errors as one line naming the file and the line.


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


def check_not_empty(path: Path) -> None:
    """InputError for an empty (or whitespace-only) file."""
    head = _head(path, 4096)
    if head is None:
        raise InputError("cannot open the file", file=str(path))
    if not head.removeprefix(_BOM).strip() and (len(head) < 4096 or not _has_content(path)):
        raise InputError("empty file", file=str(path), expected="rollouts, one row per sample")


def _has_content(path: Path) -> bool:
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            if chunk.strip():
                return True
    return False


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is bool:
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


_KIND_OF_TYPE = {"double": "number", "int64": "number", "string": "string", "bool": "boolean"}


def _locate_json_problem(path: Path, field: str | None, expected_kind: str | None) -> str | None:
    """The first line that explains a pyarrow JSON error (read again in Python: only on the error path)."""
    seen_kind = expected_kind
    with open(path, "rb") as stream:
        for number, raw in enumerate(stream, 1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as error:
                return f"line {number} is not valid JSON: {error.msg.removesuffix(' at')} (column {error.colno})"
            except ValueError:
                return f"line {number} is not valid JSON: not UTF-8 text"
            if type(value) is not dict:
                return f"line {number} is {_a(_json_kind(value))}, not a JSON object"
            if field is None or value.get(field) is None:
                continue
            kind = _json_kind(value[field])
            if seen_kind is None:
                seen_kind = kind
            elif kind != seen_kind:
                return f"line {number} has {field!r} as {_a(kind)} where {_a(seen_kind)} was expected"
    return None


# A line whose first character (after blanks) does not open an object. JSON text holds no raw newline, so lines are
# exactly the values; the pattern starts with a literal newline, which the regex engine finds at memchr speed.
_NOT_AN_OBJECT = re.compile(rb"\n[ \t\r]*+[^{ \t\r\n]")
_FIRST_NOT_AN_OBJECT = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*+[^{ \t\r\n]")


def _check_objects(path: Path) -> None:
    """InputError for a line that is not a JSON object, before pyarrow reads the file: pyarrow 26's JSON reader
    crashes the process (a segmentation fault) on a block of lines that starts with ``null``."""
    import mmap

    try:
        with open(path, "rb") as stream, mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as data:
            match = _FIRST_NOT_AN_OBJECT.match(data) or _NOT_AN_OBJECT.search(data)
            if match is None:
                return
            line = data[: match.end() - 1].count(b"\n") + 1
    except (OSError, ValueError):  # an empty file cannot be mapped; the reader reports it
        return
    located = _locate_json_problem(path, None, None)
    raise InputError(
        located or f"line {line} is not a JSON object", file=str(path), expected="JSON Lines: one JSON object per line"
    )


def read_json_lines(path: Path, schema: pa.Schema | None = None) -> pa.Table:
    """A JSON Lines file as a table; ``schema`` fixes those fields' types and drops every other field."""
    import pyarrow.json as pa_json

    _check_objects(path)
    parse_options = (
        pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        if schema is not None
        else pa_json.ParseOptions()
    )
    block_size = _JSON_BLOCK_BYTES
    while True:
        try:
            read_options = pa_json.ReadOptions(block_size=block_size)
            table = pa_json.read_json(path, read_options=read_options, parse_options=parse_options)
        except pa.ArrowException as error:  # ArrowCapacityError too: a string column past 2 GiB
            # A line longer than a block (a long agentic trajectory): read again with blocks that hold it.
            if "straddl" in str(error) and block_size < path.stat().st_size:
                block_size = min(block_size * 8, path.stat().st_size + 1, _MAX_BLOCK_BYTES)
                if block_size > _JSON_BLOCK_BYTES:
                    continue
            raise json_error(path, error, schema) from None
        except OSError as error:
            raise InputError(f"cannot read the file: {_short(error)}", file=str(path)) from None
        return check_values(table, path, json_lines=True)


def check_values(table: pa.Table, path: Path, *, json_lines: bool = False) -> pa.Table:
    """``table``, once every value is checked well-formed: pyarrow's JSON, Parquet and IPC readers pass on invalid
    UTF-8 (and an IPC file's offsets) as they are, and such a value would fail later, far from the file."""
    check_names(table.schema, path)
    for name, column in zip(table.column_names, table.columns, strict=True):
        try:
            column.validate(full=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            located = _locate_json_problem(path, None, None) if json_lines else None
            raise InputError(
                located or f"holds damaged values: {_short(error)}",
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


def json_error(path: Path, error: BaseException, schema: pa.Schema | None = None) -> InputError:
    """One line for a pyarrow JSON error; its row numbers count within a block, so the line is found again."""
    match = re.search(r"Column\(/([^/)]*)", str(error))
    field = match.group(1) if match else None
    expected_kind = None
    if field is not None and schema is not None and field in schema.names:
        expected_kind = _KIND_OF_TYPE.get(str(schema.field(field).type))
    located = _locate_json_problem(path, field, expected_kind)
    message = located or re.sub(r"\s*in row \d+\s*$", "", _short(error))
    expected = "one type per field on every line" if field else "JSON Lines: one JSON object per line"
    return InputError(message, file=str(path), field=field, expected=expected)


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
            located or _short(error).replace("CSV parse error: ", ""),
            file=str(path),
            expected="CSV with the header's number of fields on every line",
        ) from None
    except OSError as error:
        raise InputError(f"cannot read the file: {_short(error)}", file=str(path)) from None
    return check_values(table, path)


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


def arrow_schema(path: Path, kind: str) -> pa.Schema:
    """The schema of a Parquet or Arrow file, read from its footer (no data); its names checked to be UTF-8."""
    return check_names(_arrow_schema(path, kind), path)


def _arrow_schema(path: Path, kind: str) -> pa.Schema:
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_schema(path)
        if kind == "arrow-stream":
            with pa.ipc.open_stream(path) as reader:
                return reader.schema
        if _is_feather_v1(path):
            import pyarrow.feather as feather

            return feather.read_table(path).schema  # legacy Feather v1 has no schema-only read
        with pa.ipc.open_file(path) as reader:
            return reader.schema
    except (pa.ArrowException, OSError) as error:
        raise InputError(f"cannot read as {_KIND_NAMES[kind]}: {_short(error)}", file=str(path)) from None
    except UnicodeDecodeError:  # pyarrow decodes column paths as it opens a Parquet file
        raise InputError("a column name is not UTF-8 text", file=str(path), expected="UTF-8 column names") from None


def _is_feather_v1(path: Path) -> bool:
    head = _head(path, 4)
    return head is not None and head.startswith(_FEATHER_V1_MAGIC)


_KIND_NAMES = {"parquet": "Parquet", "arrow": "Arrow IPC/Feather", "arrow-stream": "an Arrow IPC stream"}


def read_arrow(path: Path, kind: str, columns: list[str]) -> pa.Table:
    """The named columns of a Parquet or Arrow file (the others are never read)."""
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetFile(path) as parquet:  # a file, never a dataset: no partitions read from its path
                check_rows(parquet.metadata.num_rows, path)
                table = parquet.read(columns=columns)
        elif kind == "arrow-stream":
            with pa.ipc.open_stream(path) as reader:
                table = reader.read_all().select(columns)
        else:
            import pyarrow.feather as feather

            table = feather.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as error:  # ArrowMemoryError, ArrowCapacityError too: data that does not fit
        raise InputError(f"cannot read as {_KIND_NAMES[kind]}: {_short(error)}", file=str(path)) from None
    except UnicodeDecodeError:  # pyarrow decodes column paths as it opens a Parquet file
        raise InputError("a column name is not UTF-8 text", file=str(path), expected="UTF-8 column names") from None
    check_rows(table.num_rows, path)
    return check_values(table, path)


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


# ---------------------------------------------------------------------------------------------------------------------
# Columns: finding them, and turning them into canonical values.


def columns_found(names: Sequence[str]) -> str:
    shown = ", ".join(repr(name) for name in list(names)[:_COLUMNS_SHOWN])
    more = len(names) - _COLUMNS_SHOWN
    return (shown + (f" and {more} more" if more > 0 else "")) if names else "none"


def pick_column(names: Sequence[str], given: str | None, common: Sequence[str], role: str, path: Path) -> str | None:
    """The user's column (which must exist) or the first common name present, or None."""
    if given is not None:
        if given not in names:
            raise InputError(
                f"no column {given!r} for the {role}; columns found: {columns_found(names)}",
                file=str(path),
                field=given,
                expected=f"the {role} column named by the option to exist",
            )
        return given
    return next((name for name in common if name in names), None)


def _plain(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        return array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    return array


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def is_number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)


def _passthrough(array: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """A passed-through column in a type every table operation supports (the canonical table is sorted, split by
    step and concatenated): string views become strings, half floats floats; a type without ``take`` is left out."""
    array = _plain(array)
    if pa.types.is_string_view(array.type):
        array = array.cast(pa.string())
    elif pa.types.is_float16(array.type):  # most compute kernels (sort, min_max, comparisons) lack half floats
        array = array.cast(pa.float32())
    try:
        array.take(pa.array([], pa.int64()))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return None
    return array


def is_scalar(kind: pa.DataType) -> bool:
    """Columns worth passing through: not token lists, chat messages or blobs."""
    return not (
        pa.types.is_nested(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or pa.types.is_binary_view(kind)
        or pa.types.is_null(kind)
    )


def _string_like(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


_NUMBER_TEXT = r"^\s*[-+]?((\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?|inf|infinity|nan)\s*$"


def float_values(array: pa.Array | pa.ChunkedArray, path: Path, field: str) -> pa.Array:
    """Numbers (ints, floats, bools, numeric strings) as float64, nulls kept; anything else names its first row."""
    array = _plain(array)
    kind = array.type
    if pa.types.is_dictionary(kind):
        array = array.dictionary_decode()
        kind = array.type
    if is_number(kind) or pa.types.is_boolean(kind) or pa.types.is_null(kind):
        # Unsafe: an int beyond 2**53 (or a wide decimal) becomes the nearest double instead of an error.
        return array.cast(pa.float64(), safe=False)
    if _string_like(kind):
        if pa.types.is_string_view(kind):
            array = array.cast(pa.string())  # the regular-expression kernel below has no string_view version
        try:
            return array.cast(pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad = pc.and_(
                pc.is_valid(array), pc.invert(pc.match_substring_regex(array, _NUMBER_TEXT, ignore_case=True))
            )
            row = int(pc.index(pc.fill_null(bad, False), True).as_py())
            value = array[row].as_py() if row >= 0 else None
            shown = repr(value[:40] + "..." if isinstance(value, str) and len(value) > 40 else value)
            raise InputError(
                f"is not a number: {shown}" if row >= 0 else "is not numeric",
                file=str(path),
                field=field,
                row=row if row >= 0 else None,
                expected="a numeric column",
            ) from None
    raise InputError(f"has type {kind}", file=str(path), field=field, expected="a numeric column")


def key_values(array: pa.Array | pa.ChunkedArray, path: Path, field: str) -> pa.Array:
    """A prompt or trajectory key: int64 or string (integral floats become ints; nested values their JSON text)."""
    array = _plain(array)
    kind = array.type
    if pa.types.is_dictionary(kind):
        array = array.dictionary_decode()
        kind = array.type
    if pa.types.is_integer(kind) or pa.types.is_null(kind):
        try:
            return array.cast(pa.int64())
        except pa.ArrowInvalid:  # uint64 keys past int64: still distinct keys, as text
            return array.cast(pa.string())
    if _string_like(kind):
        return array.cast(pa.string())
    if pa.types.is_boolean(kind):
        return array.cast(pa.int64())
    if pa.types.is_floating(kind):
        if pa.types.is_float16(kind):  # pyarrow casts half floats to ints by their bits, and has no floor for them
            array, kind = array.cast(pa.float32()), pa.float32()
        # CSV and pandas store integer ids with a missing value as floats: NaN is a missing key.
        array = pc.if_else(pc.is_nan(array), pa.scalar(None, kind), array)
        try:
            return array.cast(pa.int64())
        except pa.ArrowInvalid:
            bad = pc.fill_null(pc.not_equal(pc.floor(array), array), False)
            raise InputError(
                "has non-integer keys",
                file=str(path),
                field=field,
                row=int(pc.index(bad, True).as_py()),
                expected="int or string keys",
            ) from None
    if pa.types.is_nested(kind):
        # Chat-message prompts: their JSON text is the key (a Python pass, only for nested keys).
        texts = [None if value is None else json.dumps(value, sort_keys=True) for value in array.to_pylist()]
        return pa.array(texts, pa.string())
    try:
        return array.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise InputError(f"has type {kind}", file=str(path), field=field, expected="int or string keys") from None


def step_values(array: pa.Array | pa.ChunkedArray, path: Path, field: str) -> np.ndarray:
    """Integer steps as int64 numpy; a null or fractional step names its row."""
    array = _plain(array)
    kind = array.type
    if array.null_count:
        raise InputError(
            "is missing",
            file=str(path),
            field=field,
            row=int(pc.index(pc.is_null(array), True).as_py()),
            expected="a step on every row",
        )
    if pa.types.is_integer(kind):
        return _int64_values(array, path, field, "an integer step").to_numpy()
    values = float_values(array, path, field).to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values != np.floor(values))
    if bad.any():
        raise InputError(
            f"is {values[bad][0]!r}",
            file=str(path),
            field=field,
            row=int(np.flatnonzero(bad)[0]),
            expected="an integer step",
        )
    return values.astype(np.int64)


def _int64_values(array: pa.Array, path: Path, field: str, expected: str) -> pa.Array:
    """An integer column as int64; a uint64 value past int64 names its row."""
    try:
        return array.cast(pa.int64())
    except pa.ArrowInvalid:
        row = int(pc.index(pc.greater(array, pa.scalar(_INT64_MAX, pa.uint64())), True).as_py())
        raise InputError(f"is {array[row].as_py()}", file=str(path), field=field, row=row, expected=expected) from None


def step_in_name(path: Path) -> int | None:
    """``train_data_step12.jsonl`` -> 12."""
    match = _STEP_IN_NAME.search(path.stem)
    return name_step(match.group(1), path) if match else None


def file_name_steps(
    path: Path, pattern: re.Pattern[str], rows: int, field: str, no_step: str, expected: str
) -> pa.Array:
    """Every one of ``rows`` rows at the step in the file name (``pattern``'s first group, matched against the
    whole name); ``no_step``: the error when the name has none."""
    match = pattern.match(path.name)
    if match is None:
        raise InputError(no_step, file=str(path), field=field, expected=expected)
    return pa.array(np.full(rows, name_step(match.group(1), path), dtype=np.int64))


def name_step(digits: str, path: Path) -> int:
    """A step written in a file name, as an int64 (InputError past int64: no step is that large)."""
    if len(digits) > 19 or int(digits) > _INT64_MAX:
        raise InputError(
            f"the step in the file name has {len(digits)} digits", file=str(path), expected="a step that fits int64"
        )
    return int(digits)


def missing_to_nan(rewards: pa.Array) -> tuple[pa.Array, int]:
    """Null rewards as NaN (the audit reports them), and how many there were."""
    missing = rewards.null_count
    return (pc.fill_null(rewards, math.nan) if missing else rewards), missing


def warn_missing_rewards(path: Path, nulls: int, rewards: pa.Array) -> None:
    """One warning per file for rewards that are missing, NaN or infinite (kept; the audit reports them)."""
    values = rewards.to_numpy(zero_copy_only=False)
    bad = int((~np.isfinite(values)).sum())
    if not bad:
        return
    noun = "row has" if bad == 1 else "rows have"
    first = int(np.flatnonzero(~np.isfinite(values))[0])
    missing = f", {nulls} of them missing" if nulls else ""
    warnings.warn(
        f"{path}: {bad} {noun} a NaN, infinite or missing reward (first at row {first}{missing}); "
        "kept as NaN and reported by the audit",
        RollauditWarning,
        stacklevel=5,
    )


def passthrough_name(name: str) -> str:
    """A passed-through column keeps its name unless a canonical column has it."""
    return f"source_{name}" if name in CANONICAL_COLUMNS else name


# ---------------------------------------------------------------------------------------------------------------------
# Per-token lists: one value per sample.


@dataclass
class TokenLists:
    """Flattened per-token values of one column, restricted to masked-in tokens: row ``i`` owns ``values[starts[i]:
    starts[i] + counts[i]]``."""

    values: np.ndarray
    starts: np.ndarray
    counts: np.ndarray


def _list_lengths(array: pa.Array) -> np.ndarray:
    """Values per row of a list column (0 for a null list), matching ``pc.list_flatten``'s output."""
    return pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def _nonzero(flat: pa.Array, path: Path, field: str) -> np.ndarray:
    """Mask values that are set (nonzero, true) as a numpy bool array."""
    if not (is_number(flat.type) or pa.types.is_boolean(flat.type) or pa.types.is_null(flat.type)):
        raise InputError(f"has values of type {flat.type}", file=str(path), field=field, expected="0/1 mask values")
    if pa.types.is_boolean(flat.type):
        return pc.fill_null(flat, False).to_numpy(zero_copy_only=False)
    if pa.types.is_float16(flat.type):  # no comparison kernel for half floats
        flat = flat.cast(pa.float32())
    return pc.fill_null(pc.not_equal(flat, 0), False).to_numpy(zero_copy_only=False)


def token_lists(
    array: pa.Array | pa.ChunkedArray, mask: pa.Array | pa.ChunkedArray | None, path: Path, field: str, mask_field: str
) -> TokenLists:
    """A list column's values per row, masked-in tokens only when ``mask`` (a list column of the same lengths) is
    given."""
    array = _plain(array)
    lengths = _list_lengths(array)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    flat = float_values(pc.list_flatten(array), path, field).to_numpy(zero_copy_only=False)
    if mask is None:
        return TokenLists(values=flat, starts=offsets[:-1], counts=lengths)
    mask = _plain(mask)
    if not _is_list(mask.type):
        raise InputError(f"has type {mask.type}", file=str(path), field=mask_field, expected="a per-token list")
    mask_lengths = _list_lengths(mask)
    differ = lengths != mask_lengths
    if differ.any():
        row = int(np.flatnonzero(differ)[0])
        raise InputError(
            f"has {mask_lengths[row]} mask values for {lengths[row]} values of {field!r}",
            file=str(path),
            field=mask_field,
            row=row,
            expected="one mask value per token",
        )
    keep = _nonzero(pc.list_flatten(mask), path, mask_field)
    # Kept tokens before each row's start: row i keeps kept[offsets[i]:offsets[i + 1]], contiguous after filtering.
    kept_before = np.concatenate(([0], np.cumsum(keep))).astype(np.int64)
    starts = kept_before[offsets[:-1]]
    return TokenLists(values=flat[keep], starts=starts, counts=kept_before[offsets[1:]] - starts)


def reduce_tokens(tokens: TokenLists, rule: str) -> tuple[np.ndarray, int]:
    """One value per row (``first``, ``last`` or ``mean`` of its tokens; NaN without tokens), and the number of rows
    whose values vary beyond float32 rounding."""
    counts, starts, values = tokens.counts, tokens.starts, tokens.values
    result = np.full(len(counts), np.nan)
    present = counts > 0
    if not present.any():
        return result, 0
    if rule == "first":
        result[present] = values[starts[present]]
    elif rule == "last":
        result[present] = values[starts[present] + counts[present] - 1]
    else:
        sums = np.add.reduceat(values, starts[present])
        result[present] = sums / counts[present]
    # Rows with tokens are contiguous in ``values``: reduceat over their starts covers each row's tokens exactly.
    low = np.minimum.reduceat(values, starts[present])
    high = np.maximum.reduceat(values, starts[present])
    scale = np.maximum(1.0, np.abs(result[present]))
    with np.errstate(invalid="ignore"):
        varying = int(np.count_nonzero((high - low) > TOKEN_TOLERANCE * scale))
    return result, varying


def sum_tokens(tokens: TokenLists) -> np.ndarray:
    """The sum of each row's tokens (NaN for a row without any)."""
    result = np.full(len(tokens.counts), np.nan)
    present = tokens.counts > 0
    if present.any():
        result[present] = np.add.reduceat(tokens.values, tokens.starts[present])
    return result


def warn_varying_tokens(path: Path, field: str, varying: int, rule: str) -> None:
    if varying:
        noun = "row" if varying == 1 else "rows"
        warnings.warn(
            f"{path}: per-token {field!r} values vary within {varying} {noun}: not an outcome scheme "
            f"(KL in the reward, GAE?); recorded_advantage takes each row's {rule} masked-in value",
            RollauditWarning,
            stacklevel=5,
        )


# ---------------------------------------------------------------------------------------------------------------------
# Steps: one canonical table per step.


def split_steps(table: pa.Table) -> list[tuple[int, pa.Table]]:
    """A canonical table per distinct step, in step order (positions already count within each step)."""
    steps = table.column(STEP).to_numpy()
    if len(steps) == 0 or (steps == steps[0]).all():
        return [(int(steps[0]) if len(steps) else 0, table)]
    order = np.argsort(steps, kind="stable")
    sorted_steps = steps[order]
    bounds = np.flatnonzero(np.r_[True, sorted_steps[1:] != sorted_steps[:-1], True])
    return [
        (int(sorted_steps[start]), table.take(pa.array(order[start:end]))) for start, end in itertools.pairwise(bounds)
    ]


def one_file_per_step(paths: list[Path], reduced: list[pa.Table], dumps: str, expected: str) -> list[pa.Table]:
    """The reduced tables of per-step files, in file order, as one canonical table per step; two files
    holding the same step are an error (``dumps`` names them, e.g. "verl dumps")."""
    seen: dict[int, Path] = {}
    tables: list[tuple[int, pa.Table]] = []
    for path, file_table in zip(paths, reduced, strict=True):
        for step, table in split_steps(file_table):
            if step in seen:
                raise InputError(f"two {dumps} of step {step}: {seen[step]} and {path}", expected=expected)
            seen[step] = path
            tables.append((step, table))
    return [table for _, table in sorted(tables, key=lambda item: item[0])]


def renumber_positions(tables: list[pa.Table]) -> pa.Table:
    """Several parts of one step (files read in order) as one batch: positions 0, 1, 2, ... across the parts."""
    table = concat_tables(tables) if len(tables) > 1 else tables[0]
    if len(tables) > 1:
        table = table.set_column(
            table.column_names.index(POSITION), POSITION, pa.array(np.arange(table.num_rows, dtype=np.int64))
        )
    return table


def slice_prompts(table: pa.Table, n: int, path: Path) -> pa.Table:
    """Prompt keys as consecutive slices of ``n`` within each step (no prompt column, ``n_samples_per_prompt``)."""
    positions = table.column(POSITION).to_numpy()
    steps = table.column(STEP).to_numpy()
    for step in np.unique(steps):
        count = int((steps == step).sum())
        if count % n:
            raise InputError(
                f"no prompt column and the {count} rows of step {int(step)} are not slices of "
                f"n_samples_per_prompt={n}: prompt keys are required when groups are not uniformly sized",
                file=str(path),
                expected="a prompt column (prompt_col)",
            )
    return table.set_column(table.column_names.index(PROMPT), PROMPT, pa.array(positions // n, pa.int64()))


# ---------------------------------------------------------------------------------------------------------------------
# The generic reader.


@dataclass
class _Roles:
    reward: str
    prompt: str | None
    trajectory: str | None
    step: str | None
    advantage: str | None
    mask: str | None
    status: str | None
    response_length: str | None


def _roles(names: list[str], schema: pa.Schema | None, options: LoadOptions, path: Path) -> _Roles:
    reward = pick_column(names, options.reward_col, REWARD_NAMES, "reward", path)
    if reward is None:
        raise InputError(
            f"no reward column; columns found: {columns_found(names)}",
            file=str(path),
            expected=f"a column named {', '.join(REWARD_NAMES)}, or reward_col (--reward-col) naming one",
        )
    roles = _Roles(
        reward=reward,
        prompt=pick_column(names, options.prompt_col, PROMPT_NAMES, "prompt key", path),
        trajectory=pick_column(names, options.trajectory_col, TRAJECTORY_NAMES, "trajectory key", path),
        step=pick_column(names, options.step_col, STEP_NAMES, "step", path),
        advantage=pick_column(names, options.advantage_col, ADVANTAGE_NAMES, "advantage", path),
        mask=pick_column(names, options.mask_col, MASK_NAMES, "token mask", path),
        status="status" if "status" in names else None,
        response_length="response_length" if "response_length" in names else None,
    )
    if schema is not None:
        # Found by name only when the type fits; a column the user named must fit (checked when read).
        if roles.status is not None and not _string_like(schema.field("status").type):
            roles.status = None
        if roles.response_length is not None and not is_number(schema.field("response_length").type):
            roles.response_length = None
        if roles.mask is not None and options.mask_col is None and not _is_list(schema.field(roles.mask).type):
            roles.mask = None
    return roles


def _used(roles: _Roles) -> set[str]:
    return {name for name in vars(roles).values() if name is not None}


def _read_table(path: Path, kind: str, options: LoadOptions) -> tuple[pa.Table, _Roles]:
    if kind in ("parquet", "arrow", "arrow-stream"):
        schema = arrow_schema(path, kind)
        roles = _roles(schema.names, schema, options, path)
        used = _used(roles)
        # Token ids, log-probs and messages are never read: only the role columns and scalar extras.
        columns = [field.name for field in schema if field.name in used or is_scalar(field.type)]
        return read_arrow(path, kind, columns), roles
    if kind == "jsonl":
        table = read_json_lines(path)
    else:
        with open(path, "rb") as stream:
            delimiter = _csv_delimiter(stream.read(_HEAD_BYTES).removeprefix(_BOM)) or ","
        table = read_csv(path, delimiter)
    roles = _roles(table.column_names, table.schema, options, path)
    return table, roles


def read_file(path: Path, options: LoadOptions) -> tuple[list[tuple[int, pa.Table]], bool]:
    """One generic table: canonical tables per step, and whether the file had its own steps."""
    kind = sniff(path)
    if kind == "empty":
        raise InputError("empty file", file=str(path), expected="rollouts, one row per sample")
    if kind is None:
        raise InputError(
            "not a table rollaudit reads",
            file=str(path),
            expected="Parquet, Arrow IPC/Feather, JSON Lines (one object per line) or CSV with a header",
        )
    table, roles = _read_table(path, kind, options)
    if table.num_rows == 0:
        raise InputError("empty file: the table has no rows", file=str(path), expected="rollouts, one row per sample")
    rows = table.num_rows

    mask = table.column(roles.mask) if roles.mask is not None else None
    reward_column = table.column(roles.reward)
    if _is_list(reward_column.type):
        rewards = pa.array(sum_tokens(token_lists(reward_column, mask, path, roles.reward, roles.mask or "")))
        nulls = 0
    else:
        rewards, nulls = missing_to_nan(float_values(reward_column, path, roles.reward))
    warn_missing_rewards(path, nulls, rewards)

    columns: dict[str, Any] = {}
    if roles.advantage is not None:
        advantage = table.column(roles.advantage)
        if _is_list(advantage.type):
            tokens = token_lists(advantage, mask, path, roles.advantage, roles.mask or "")
            values, varying = reduce_tokens(tokens, options.token_reduce)
            warn_varying_tokens(path, roles.advantage, varying, options.token_reduce)
            # No token to read the advantage from: unknown, not NaN.
            columns["recorded_advantage"] = pa.array(values, pa.float64(), mask=tokens.counts == 0)
        else:
            columns["recorded_advantage"] = float_values(advantage, path, roles.advantage)
    if roles.response_length is not None:
        columns["response_length"] = whole_numbers(table.column(roles.response_length), path, roles.response_length)
    elif mask is not None:
        columns["response_length"] = pa.array(masked_in_counts(mask, path, roles.mask or ""))
    if roles.status is not None:
        columns["status"] = _plain(table.column(roles.status)).cast(pa.string())

    has_steps = roles.step is not None
    if has_steps:
        steps = pa.array(step_values(table.column(roles.step), path, roles.step))
    else:
        steps = pa.array(np.full(rows, step_in_name(path) or 0, dtype=np.int64))
        has_steps = step_in_name(path) is not None

    used = _used(roles)
    for field in table.schema:
        if field.name not in used and is_scalar(field.type):
            passed = _passthrough(table.column(field.name))
            if passed is not None:
                columns[passthrough_name(field.name)] = passed

    canonical = make_table(
        reward=rewards,
        prompt=key_values(table.column(roles.prompt), path, roles.prompt) if roles.prompt is not None else None,
        trajectory=(
            key_values(table.column(roles.trajectory), path, roles.trajectory) if roles.trajectory is not None else None
        ),
        step=steps,
        **columns,
    )
    if roles.prompt is None:
        if options.n_samples_per_prompt is not None:
            canonical = slice_prompts(canonical, options.n_samples_per_prompt, path)
        else:
            warnings.warn(
                f"{path}: no prompt column (looked for {', '.join(PROMPT_NAMES)}); prompt keys left empty: "
                "name one with prompt_col (--prompt-col), or give n_samples_per_prompt for consecutive groups",
                RollauditWarning,
                stacklevel=4,
            )
    return split_steps(canonical), has_steps


def whole_numbers(array: pa.Array | pa.ChunkedArray, path: Path, field: str) -> pa.Array:
    """Token counts as int64 (integral floats accepted, as CSV and pandas write them; nulls stay unknown)."""
    array = _plain(array)
    if pa.types.is_integer(array.type):
        return _int64_values(array, path, field, "a whole number of tokens")
    numbers = float_values(array, path, field).to_numpy(zero_copy_only=False)
    known = ~np.isnan(numbers)
    with np.errstate(invalid="ignore"):
        bad = known & (~np.isfinite(numbers) | (numbers != np.floor(numbers)))
    if bad.any():
        raise InputError(
            f"is {numbers[bad][0]!r}",
            file=str(path),
            field=field,
            row=int(np.flatnonzero(bad)[0]),
            expected="a whole number of tokens",
        )
    return pa.array(np.nan_to_num(numbers).astype(np.int64), pa.int64(), mask=~known)


def masked_in_counts(mask: pa.Array | pa.ChunkedArray, path: Path, field: str) -> np.ndarray:
    """Tokens with a nonzero mask value, per row: the response tokens a per-token mask marks for training."""
    mask = _plain(mask)
    if not _is_list(mask.type):
        raise InputError(f"has type {mask.type}", file=str(path), field=field, expected="a per-token list")
    offsets = np.concatenate(([0], np.cumsum(_list_lengths(mask)))).astype(np.int64)
    kept_before = np.concatenate(([0], np.cumsum(_nonzero(pc.list_flatten(mask), path, field)))).astype(np.int64)
    return kept_before[offsets[1:]] - kept_before[offsets[:-1]]


_HAS_STEPS = b"rollaudit.generic.has_steps"


def reduce_file(path: Path, options: LoadOptions) -> pa.Table:
    """One table file to its canonical rows (all its steps in one table), whether it had steps in its metadata."""
    tables, has_steps = read_file(path, options)
    table = concat_tables([table for _, table in tables])
    return table.replace_schema_metadata({_HAS_STEPS: b"1" if has_steps else b"0"})


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The reduced tables of generic files, in file order: one canonical table per step."""
    parts: dict[int, list[pa.Table]] = {}
    stepless: list[Path] = []
    for path, file_table in zip(paths, reduced, strict=True):
        if (file_table.schema.metadata or {}).get(_HAS_STEPS) != b"1":
            stepless.append(path)
        for step, table in split_steps(file_table.replace_schema_metadata()):
            parts.setdefault(step, []).append(table)
    if len(stepless) > 1:
        warnings.warn(
            f"{len(stepless)} files have no step column and no step<N> in their name ({stepless[0]}, ...): "
            "read as one batch of step 0; name the step column with step_col (--step-col) if they are several steps",
            RollauditWarning,
            stacklevel=3,
        )
    return [renumber_positions(parts[step]) for step in sorted(parts)]


__all__ = [
    "ADVANTAGE_NAMES",
    "MASK_NAMES",
    "PROMPT_NAMES",
    "REWARD_NAMES",
    "STEP_NAMES",
    "TOKEN_REDUCE_RULES",
    "TRAJECTORY_NAMES",
    "combine",
    "detect",
    "expand_directory",
    "reduce_file",
    "sniff",
]
