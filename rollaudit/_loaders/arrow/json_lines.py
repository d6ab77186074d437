"""JSON Lines files as tables: orjson parses the lines where the fields read are flat, pyarrow types them.

Where every field a format reads is a number, a string, a boolean or a short list of strings or ints (verl's
score, step and uid; tinker-cookbook's summaries; ROLL's trajectories), each line is parsed by orjson (four times
Python's json on these files) and the columns are built from its values; a column holding a value of another type
(a string where a number was expected, an integer past 64 bits) is written again, those fields only, for
pyarrow's JSON reader, which types it by its own rules and names the line of its error. Where a field read is an
object, a list of lists or a value per token (token ids, chat messages, traces), pyarrow's reader reads the file
itself: it types those faster than they can be built from Python's values.

A line orjson refuses is read by Python's json, as a file written by Python's json may hold what strict parsers
refuse: ``NaN``, ``Infinity`` and ``-Infinity`` (a NaN reward is common) are read as such, and are written again
for pyarrow as Python's json writes them; integers past 64 bits keep every digit (an int64 field refuses them in
one line naming it and its line, a number field takes the nearest double, as it always did); a lone surrogate
escape (``"\\ud800"``) or a number past the largest double is refused naming the line, as pyarrow refused them;
bytes that are not UTF-8 are refused where a field read holds them. A field read twice on one line is refused
naming the line, as pyarrow's reader refuses it (orjson would keep the last value).
"""

from __future__ import annotations

import io
import itertools
import json
import re
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from ..._errors import InputError
from . import tables

_BLANK = b" \t\r"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_WHITESPACE = re.compile(r"[ \t\r\n]*+")
_KIND_OF_TYPE = {"double": "number", "int64": "number", "string": "string", "bool": "boolean"}


def read_json_lines(path: Path, schema: pa.Schema | None = None, *, token_lists: bool = False) -> pa.Table:
    """A JSON Lines file as a table; ``schema`` fixes those fields' types and drops every other field (without a
    schema, pyarrow's reader infers every field's type from the whole file). ``token_lists``: the fields read
    hold a value per token, most of each line, which pyarrow's reader types faster than orjson's values can be."""
    if schema is None or token_lists or not all(field.type in _DIRECT_TYPES for field in schema):
        return _read_file_by_pyarrow(path, schema)
    data = _read_bytes(path)
    records = parse_records(data, path)
    _refuse_repeated_fields(data, records, schema, path)
    if records.longest > 2 * tables.MAX_JSON_DEPTH + 1:
        # orjson's own limit is 1,024 levels and Python's json's about 1,000: neither refuses what lies between them
        # and the bound, so the parsed values are measured (their containers only: brackets in strings, which make
        # a scan of the bytes run its exact pass, are not looked at). A parsed line of n bytes nests at most n / 2.
        _check_depth(records, path)
    return typed_table(records, schema, path)


def _refuse_repeated_fields(data: bytes, records: Records, schema: pa.Schema, path: Path) -> None:
    """InputError naming the first line that holds a field of ``schema`` twice. Where a field's name appears in
    the bytes no more often than there are records holding it, no line can hold it twice (one count at C speed);
    else the lines where it appears more than once are parsed again, keeping every key, to tell a repeated field
    from its name inside a text."""
    for name in schema.names:
        key = json.dumps(name).encode()
        appears = data.count(key)
        if appears <= len(records.values) - sum(name not in value for value in records.values):
            continue
        lines = data.removeprefix(tables.BOM).split(b"\n")
        for number, line in enumerate(lines, 1):
            if line.count(key) > 1 and _holds_twice(line, name):
                raise InputError(
                    f"line {number} holds the field {name!r} twice",
                    file=str(path),
                    field=name,
                    expected="one value per field on a line",
                )


def _holds_twice(line: bytes, name: str) -> bool:
    """Whether an object on ``line`` (top level) holds the key ``name`` twice."""
    counts: list[int] = []  # per object decoded, inner ones first: the top level's is the last of each value

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        counts.append(sum(key == name for key, _ in items))
        return dict(items)

    decoder = json.JSONDecoder(object_pairs_hook=pairs)
    text = line.decode("utf-8", "replace")
    at = _WHITESPACE.match(text, 0).end()  # type: ignore[union-attr]
    while at < len(text):
        try:
            _, at = decoder.raw_decode(text, at)
        except ValueError:
            return False  # not this check's to say: the parse of the line says what is wrong with it
        if counts and counts[-1] > 1:
            return True
        counts.clear()
        at = _WHITESPACE.match(text, at).end()  # type: ignore[union-attr]
    return False


def _check_depth(records: Records, path: Path, limit: int = tables.MAX_JSON_DEPTH) -> None:
    """InputError naming the first line whose value nests deeper than ``limit`` (the bound of the byte scan)."""
    for value, number in zip(records.values, records.lines, strict=True):
        pending: list[tuple[Any, int]] = [(value, 1)]
        while pending:
            item, depth = pending.pop()
            if depth > limit:
                raise _too_deep(number, path, limit)
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _too_deep(number: int, path: Path, limit: int = tables.MAX_JSON_DEPTH) -> InputError:
    return InputError(
        f"line {number} nests JSON more than {limit} levels deep",
        file=str(path),
        expected="rollout records (a few levels deep)",
    )


def _read_bytes(path: Path) -> bytes:
    try:
        with open(path, "rb") as stream:  # read, never mapped: a file truncated while it is read just ends sooner
            return stream.read()
    except OSError as error:
        raise InputError(f"cannot read the file: {tables.short(error)}", file=str(path)) from None


class Records:
    """The objects of a JSON Lines file, the line (from 1) each came from, which of them Python's json read (their
    values may hold NaN, infinities and integers past 64 bits), and the longest line's length in bytes."""

    def __init__(
        self, values: list[dict[str, Any]], lines: list[int], python: set[int], longest: int, suspects: set[int]
    ) -> None:
        self.values = values
        self.lines = lines
        self.python = python  # indices into values
        self.longest = longest
        self.suspects = suspects  # of those, the ones whose strings may hold lone surrogates


def parse_records(data: bytes, path: Path) -> Records:
    """Every non-blank line of ``data`` (a JSON Lines file's bytes) parsed as one JSON object; anything else is one
    InputError naming the line."""
    lines = data.removeprefix(tables.BOM).split(b"\n")
    longest = max(map(len, lines))
    if not lines[-1]:
        lines.pop()  # the file's last newline
    loads = orjson.loads
    try:  # the common case at C speed: every line an object orjson reads, none blank
        values = [loads(line) for line in lines]
        if set(map(type, values)) <= {dict}:
            return Records(values, list(range(1, len(values) + 1)), set(), longest, set())
    except orjson.JSONDecodeError:
        pass
    values, numbers, python, suspects = [], [], set(), set()
    for number, line in enumerate(lines, 1):
        try:
            value = loads(line)
        except orjson.JSONDecodeError:
            if not line.strip(_BLANK):
                continue
            # Several objects on one line are rows of their own, as pyarrow's reader reads them.
            parsed, suspect = _python_values(line, number, path)
            for value in parsed:
                python.add(len(values))
                if suspect:
                    suspects.add(len(values))
                values.append(_an_object(value, number, path))
                numbers.append(number)
            continue
        values.append(_an_object(value, number, path))
        numbers.append(number)
    return Records(values, numbers, python, longest, suspects)


def _an_object(value: Any, number: int, path: Path) -> dict[str, Any]:
    if type(value) is not dict:
        raise InputError(
            f"line {number} is {_a(_json_kind(value))}, not a JSON object",
            file=str(path),
            expected="JSON Lines: one JSON object per line",
        )
    return value


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("a number past the largest double")
    return value


def _python_values(line: bytes, number: int, path: Path) -> tuple[list[Any], bool]:
    """A line orjson refused, read by Python's json as pyarrow read it: NaN and infinities named as such, several
    values on the line each a row; a number literal past the largest double or a lone surrogate escape refused
    naming the line. Bytes that are not UTF-8 are kept as surrogate escapes: a field read that holds them is
    refused where it is typed (pyarrow never decodes a field it does not read)."""
    try:
        text, damaged = line.decode("utf-8"), False
    except UnicodeDecodeError:
        text, damaged = line.decode("utf-8", "surrogateescape"), True
    decoder = json.JSONDecoder(parse_float=_finite)
    values, position = [], 0
    try:
        while True:
            position = _WHITESPACE.match(text, position).end()  # type: ignore[union-attr]
            if position >= len(text):
                break
            value, position = decoder.raw_decode(text, position)
            values.append(value)
    except RecursionError:  # past about 1,000 levels, beyond the bound
        raise _too_deep(number, path) from None
    except json.JSONDecodeError as error:
        message = f"line {number} is not valid JSON: {error.msg.removesuffix(' at')} (column {error.colno})"
        raise _bad_line(message, path) from None
    except ValueError as error:
        raise _bad_line(f"line {number} is not valid JSON: {error}", path) from None
    escaped = _SURROGATE_ESCAPE.search(line) is not None
    if escaped and _holds_lone_surrogate(values, escapes_only=True):
        raise _bad_line(f"line {number} is not valid JSON: a string holds a lone surrogate (\\ud800-\\udfff)", path)
    return values, damaged or escaped


def _bad_line(message: str, path: Path) -> InputError:
    return InputError(message, file=str(path), expected="JSON Lines: one JSON object per line")


def _holds_lone_surrogate(value: Any, escapes_only: bool = False) -> bool:
    """Whether a string in ``value`` holds a lone surrogate; ``escapes_only``: one a JSON escape wrote, not one
    standing for a byte that is not UTF-8 (U+DC80-U+DCFF)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            for character in item:
                if "\ud800" <= character <= "\udfff" and not (escapes_only and "\udc80" <= character <= "\udcff"):
                    return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def typed_table(records: Records, schema: pa.Schema, path: Path) -> pa.Table:
    """The fields of ``schema`` of every record, typed as pyarrow's JSON reader types them: a flat number, text or
    boolean field whose values are all of its JSON type (or null) is built from them directly; any other field, or
    one holding another type, goes through pyarrow's reader (its rules and its errors, named by their line)."""
    if not records.values:
        return schema.empty_table()
    for index in sorted(records.suspects):
        value = records.values[index]
        if _holds_lone_surrogate([value.get(name) for name in schema.names]):
            raise InputError(
                f"line {records.lines[index]} is not valid JSON: not UTF-8 text",
                file=str(path),
                expected="JSON Lines: one JSON object per line",
            )
    columns: dict[str, pa.Array] = {}
    rest = []
    for field in schema:
        column = _direct_column(records.values, field)
        if column is None:
            rest.append(field)
        else:
            columns[field.name] = column
    if rest:
        read = _read_by_pyarrow(records, pa.schema(rest), path)
        columns.update(zip(read.column_names, read.columns, strict=True))
    table = pa.table([columns[name] for name in schema.names], schema=schema)
    return tables.check_values(table, path, locate=lambda: _locate_json_problem(path, None, None))


# The Python types of the values pyarrow's reader takes for a field of each type (a null aside); an int past 64 bits
# does not fit pa.array's int64 or double conversion, which then raises, and the field goes through pyarrow's reader.
_DIRECT_TYPES: dict[pa.DataType, frozenset[type]] = {
    pa.float64(): frozenset({float, int, type(None)}),
    pa.int64(): frozenset({int, type(None)}),
    pa.string(): frozenset({str, type(None)}),
    pa.bool_(): frozenset({bool, type(None)}),
    pa.list_(pa.string()): frozenset({str}),  # the list's items; the list itself may be null
    pa.list_(pa.int64()): frozenset({int}),
}


def _direct_column(values: list[dict[str, Any]], field: pa.Field) -> pa.Array | None:
    """``field``'s column built from the parsed values, or None when pyarrow's reader must judge it."""
    allowed = _DIRECT_TYPES.get(field.type)
    if allowed is None:
        return None
    name = field.name
    items = [value.get(name) for value in values]
    if pa.types.is_list(field.type):
        if not set(map(type, items)) <= {list, type(None)}:
            return None
        if not set(map(type, itertools.chain.from_iterable(item for item in items if item))) <= allowed:
            return None
    elif not set(map(type, items)) <= allowed:  # bool is no int here, as it is no number to pyarrow's reader
        return None
    try:
        return pa.array(items, field.type)
    except (OverflowError, pa.ArrowException):
        return None


def _read_by_pyarrow(records: Records, schema: pa.Schema, path: Path) -> pa.Table:
    """``schema``'s fields of every record, written again as JSON Lines (only those fields) for pyarrow's reader."""
    import pyarrow.json as pa_json

    names = schema.names
    dumps, python = orjson.dumps, records.python
    pieces = []
    for index, value in enumerate(records.values):
        chosen = {name: value[name] for name in names if name in value}
        if index not in python:
            try:
                pieces.append(dumps(chosen))
                continue
            except orjson.JSONEncodeError:  # orjson writes 254 levels at most; the bound lets values nest 512
                pass
        # NaN and infinities as Python's json writes them, integers past 64 bits exactly, deep values whole.
        pieces.append(json.dumps(chosen, ensure_ascii=False).encode("utf-8"))
    text = b"\n".join(pieces)
    options = pa_json.ReadOptions(block_size=min(len(text) + 1, tables.MAX_JSON_LINE_BYTES), use_threads=False)
    parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        return pa_json.read_json(io.BytesIO(text), read_options=options, parse_options=parse)
    except pa.ArrowException as error:  # ArrowCapacityError too: a string column past 2 GiB
        raise json_error(path, error, schema) from None


def _check_objects(path: Path) -> None:
    """InputError for a line that is not a JSON object, before pyarrow reads the file: pyarrow 26's JSON reader
    crashes the process (a segmentation fault) on a block of lines that starts with ``null``."""
    try:
        line = tables.first_non_object_line(tables.file_chunks(path))
    except OSError:  # the reader reports it
        return
    if line is None:
        return
    located = _locate_json_problem(path, None, None)
    raise InputError(
        located or f"line {line} is not a JSON object", file=str(path), expected="JSON Lines: one JSON object per line"
    )


def _read_file_by_pyarrow(path: Path, schema: pa.Schema | None) -> pa.Table:
    """A JSON Lines file read by pyarrow's reader alone: where a field is a list or an object (token ids, chat
    messages, traces), which it types faster than orjson's values can be, or where it infers every field's type
    from the whole file (a generic table)."""
    import pyarrow.json as pa_json

    tables.check_json_depth(path)
    _check_objects(path)
    parse_options = (
        pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        if schema is not None
        else pa_json.ParseOptions()
    )
    block_size = tables._JSON_BLOCK_BYTES
    while True:
        try:
            read_options = pa_json.ReadOptions(block_size=block_size)
            table = pa_json.read_json(path, read_options=read_options, parse_options=parse_options)
        except pa.ArrowException as error:
            # A line longer than a block (a long agentic trajectory): read again with blocks that hold it.
            if "straddl" in str(error) and block_size < path.stat().st_size:
                block_size = min(block_size * 8, path.stat().st_size + 1, tables.MAX_JSON_LINE_BYTES)
                if block_size > tables._JSON_BLOCK_BYTES:
                    continue
            raise json_error(path, error, schema) from None
        except OSError as error:
            raise InputError(f"cannot read the file: {tables.short(error)}", file=str(path)) from None
        return tables.check_values(table, path, locate=lambda: _locate_json_problem(path, None, None))


# ---------------------------------------------------------------------------------------------------------------------
# Errors: one line naming the line of the file.


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


def _locate_json_problem(path: Path, field: str | None, expected_kind: str | None, whole: bool = False) -> str | None:
    """The first line that explains a pyarrow JSON error (read again in Python: only on the error path);
    ``whole``: the field is an int64, which an integer past 64 bits does not fit."""
    seen_kind = expected_kind
    with open(path, "rb") as stream:
        for number, raw in enumerate(stream, 1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw.removeprefix(tables.BOM) if number == 1 else raw)
            except RecursionError:
                return f"line {number} nests JSON too deeply to read"
            except json.JSONDecodeError as error:
                return f"line {number} is not valid JSON: {error.msg.removesuffix(' at')} (column {error.colno})"
            except ValueError:
                return f"line {number} is not valid JSON: not UTF-8 text"
            if type(value) is not dict:
                return f"line {number} is {_a(_json_kind(value))}, not a JSON object"
            if field is None or value.get(field) is None:
                continue
            item = value[field]
            kind = _json_kind(item)
            if seen_kind is None:
                seen_kind = kind
            elif kind != seen_kind:
                return f"line {number} has {field!r} as {_a(kind)} where {_a(seen_kind)} was expected"
            if whole and type(item) is int and not -(1 << 63) <= item < 1 << 63:
                return f"line {number} has {field!r} = {item}, an integer past 64 bits"
            if whole and type(item) is float:
                return f"line {number} has {field!r} = {item!r} where a whole number was expected"
    return None


def json_error(path: Path, error: BaseException, schema: pa.Schema | None = None) -> InputError:
    """One line for a pyarrow JSON error; its row numbers count within a block, so the line is found again."""
    match = re.search(r"Column\(/([^/)]*)", str(error))
    field = match.group(1) if match else None
    if field is None and schema is not None:
        # "Failed to convert JSON to int64, couldn't parse:..." names no column: the first int64 field that explains
        # it is found by reading the file again.
        for candidate in schema:
            if candidate.type != pa.int64():
                continue
            located = _locate_json_problem(path, candidate.name, "number", True)
            if located is not None and repr(candidate.name) in located:
                field = candidate.name
                break
    expected_kind = None
    if field is not None and schema is not None and field in schema.names:
        expected_kind = _KIND_OF_TYPE.get(str(schema.field(field).type))
    whole = (
        field is not None and schema is not None and field in schema.names and schema.field(field).type == pa.int64()
    )
    located = _locate_json_problem(path, field, expected_kind, whole)
    message = located or re.sub(r"\s*in row \d+\s*$", "", tables.short(error))
    expected = "one type per field on every line" if field else "JSON Lines: one JSON object per line"
    return InputError(message, file=str(path), field=field, expected=expected)
