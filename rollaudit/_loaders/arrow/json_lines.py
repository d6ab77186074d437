"""JSON Lines files as tables, reading only the fields a format reads.

msgspec decodes each object into the fields read and skips every other value without building it: a response of
thousands of words costs its scan, never a Python string or an Arrow column. A file whose fields read nest (token
ids, segments, traces) is read by pyarrow's reader instead, which types those faster than Python values can be
built; what that reader refuses is read as the other files are.

Where msgspec refuses an object, Python's json reads it, so the fields read mean what Python's json makes of them:

- ``NaN``, ``Infinity`` and ``-Infinity`` are read as such (a NaN reward is common), ``1e400`` as infinity;
- an integer past 64 bits is read exactly: a number field holds its nearest double (as Python's ``float`` makes it),
  an int64 field refuses it in one line naming the field and the line;
- a key written twice keeps its last value;
- text in a field read that is not UTF-8 (bytes, or a lone surrogate escape) is refused naming its field and line.

Fields not read need only be well-formed to msgspec. Objects are separated by whitespace, as JSON Lines writes one a
line. Nesting is bounded by both parsers' recursion limit (about 1,000 levels): deeper is refused naming the line,
never a crash.
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
from collections.abc import Iterator
from operator import attrgetter
from pathlib import Path
from typing import Any, Union

import pyarrow as pa

from ..._errors import InputError
from . import appended, tables

_WHITESPACE = re.compile(r"[ \t\r\n]*+")
_FLAT: dict[pa.DataType, tuple[type, ...]] = {
    pa.float64(): (int, float),  # (a bool is no number, as it is none to pyarrow's reader)
    pa.int64(): (int,),
    pa.string(): (str,),
    pa.bool_(): (bool,),
}
_NONE = type(None)
_LARGEST_DOUBLE = 1.7976931348623157e308
_THREADED_BYTES = 16 << 20


def read_json_lines(path: Path, schema: pa.Schema | None = None, *, token_lists: bool = False) -> pa.Table:
    """A JSON Lines file as a table; ``schema`` fixes those fields' types and drops every other field (without a
    schema, pyarrow's reader infers every field's type from the whole file). ``token_lists``: the fields read hold a
    value per token, most of each line, which pyarrow's reader types fastest. Inside
    :func:`.appended.reading_appended`, a file read before parses only the lines appended since."""
    by_pyarrow = (
        schema is None or token_lists or not all(field.type in _FLAT or _flat_list(field.type) for field in schema)
    )
    kept = appended.current()
    if kept is not None and schema is not None:
        return kept.read(
            path,
            (schema, by_pyarrow),
            lambda data: _lines_or_none(data, schema, by_pyarrow, path),
            lambda: table_of(_read_bytes(path), schema, by_pyarrow, path),
        )
    return table_of(_read_bytes(path), schema, by_pyarrow, path)


def _flat_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) and kind.value_type in _FLAT


def _lines_or_none(data: bytes, schema: pa.Schema, by_pyarrow: bool, path: Path) -> pa.Table | None:
    """The table of ``data`` (whole lines of ``path``), or None where it does not read (the whole file's read then
    says why)."""
    try:
        return table_of(data, schema, by_pyarrow, path)
    except InputError:
        return None


def table_of(data: bytes, schema: pa.Schema | None, by_pyarrow: bool, path: Path) -> pa.Table:
    """The table of the JSON Lines bytes ``data`` of ``path``: by pyarrow's reader first where ``by_pyarrow``, else
    (or where it refuses) by decoding ``schema``'s fields."""
    body = data.removeprefix(tables.BOM)
    if by_pyarrow:
        table = _by_pyarrow(body, schema)
        if table is not None:
            return tables.check_values(table, path, locate=lambda: _misfit_line(body, schema, path))
    names = tuple(schema.names) if schema is not None else None
    with _collections_paused():
        rows = decode(body, names, path, tuple(schema.types) if schema is not None else None)
        if schema is None:
            return _inferred_table(rows, body, path)
        return _typed_table(rows, schema, body, path)


@contextlib.contextmanager
def _collections_paused() -> Iterator[None]:
    """No garbage collection while a file's values are built: they hold no cycle, and collections triggered by
    millions of new lists or dicts (a field read that holds token ids) would scan the growing heap again and again,
    a cost that grows with the square of the values."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_bytes(path: Path) -> bytes:
    try:
        with open(path, "rb") as stream:  # read, never mapped: a file truncated while it is read just ends sooner
            return stream.read()
    except OSError as error:
        raise InputError(f"cannot read the file: {tables.short(error)}", file=str(path)) from None


# ---------------------------------------------------------------------------------------------------------------------
# Decoding: msgspec, and Python's json for what it refuses.


class _Rows:
    """A row type of the fields ``names`` (a msgspec Struct, untracked by the garbage collector: a file's
    hundreds of thousands of rows would otherwise trigger collections that cost more than the decode) and the
    decoder of JSON objects into it, or None where msgspec cannot match a name (a quote, a backslash or a control
    character in it: such files are read by Python's json). Where ``kinds`` gives a field's column type, the
    decoder takes only values of its JSON type (a string where a number is read sends the block to Python's json,
    which names the line, rather than building whatever the field holds)."""

    def __init__(self, names: tuple[str, ...], kinds: tuple[pa.DataType, ...] | None) -> None:
        import msgspec

        fields = [(f"f{index}", Any, None) for index in range(len(names))]
        self.make = msgspec.defstruct("Row", fields, gc=False)
        self.names = names
        self.decoder: Any
        typed = (
            fields
            if kinds is None
            else [(name, _decoded(kind), None) for (name, _, _), kind in zip(fields, kinds, strict=True)]
        )
        try:
            renamed = dict(zip(self.make.__struct_fields__, names, strict=True))
            self.decoder = msgspec.json.Decoder(msgspec.defstruct("Row", typed, gc=False, rename=renamed))
        except ValueError:
            self.decoder = None


def _field_values(rows: list[Any], index: int) -> list[Any]:
    """The values of the ``index``-th field read of every row (any row type of :class:`_Rows`)."""
    return list(map(attrgetter(f"f{index}"), rows))


def _decoded(kind: pa.DataType) -> Any:
    """The Python type msgspec decodes a value of a column of ``kind`` as: those of ``_FLAT`` (or a list of them),
    or null; Any for a type it nests."""
    if kind in _FLAT:
        return Union[_FLAT[kind] + (None,)]  # noqa: UP007 - a union made of a tuple of types
    if _flat_list(kind):
        return list.__class_getitem__(Union[_FLAT[kind.value_type]]) | None  # noqa: UP007
    return Any


_ROW_TYPES: dict[tuple[tuple[str, ...], tuple[pa.DataType, ...] | None], _Rows] = {}


def _rows_of(names: tuple[str, ...], kinds: tuple[pa.DataType, ...] | None = None) -> _Rows:
    found = _ROW_TYPES.get((names, kinds))
    if found is None:
        found = _ROW_TYPES[names, kinds] = _Rows(names, kinds)
    return found


def decode(
    body: bytes, names: tuple[str, ...] | None, path: Path, kinds: tuple[pa.DataType, ...] | None = None
) -> list[Any]:
    """The objects of the JSON Lines bytes ``body``: rows of the fields ``names`` (their values as Python's json
    reads them, None where absent), or whole dicts where ``names`` is None. msgspec decodes the whole; where it
    refuses something, it decodes blocks of lines of about ``_BLOCK_BYTES``, and Python's json reads each block it
    refuses (a value that spans lines is read where msgspec reads the whole file)."""
    import msgspec

    rows_of = _rows_of(names, kinds) if names is not None else None
    decoder = msgspec.json.Decoder(dict) if rows_of is None else rows_of.decoder
    refused = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
    if decoder is not None:
        try:
            return list(decoder.decode_lines(body))
        except refused:
            pass
    view = memoryview(body)
    rows: list[Any] = []
    start, line = 0, 1  # line: the line ``start`` is on
    while start < len(body):
        end = body.find(b"\n", start + _BLOCK_BYTES)
        end = len(body) if end < 0 else end + 1
        block = None
        if decoder is not None:  # (None: a name msgspec cannot match, and Python's json reads every block)
            with contextlib.suppress(*refused):
                block = decoder.decode_lines(view[start:end])
        rows += block if block is not None else _python_rows(body, start, end, line, rows_of, path)
        line += body.count(b"\n", start, end)
        start = end
    return rows


_BLOCK_BYTES = 1 << 16


def _python_rows(body: bytes, start: int, end: int, first: int, rows_of: _Rows | None, path: Path) -> list[Any]:
    """The objects of ``body[start:end]`` (``start`` on line ``first``) read by Python's json, one after the other,
    as rows of ``rows_of``'s fields (whole dicts where None). Bytes that are not UTF-8 are kept as surrogate escapes:
    a field read that holds them is refused where it is typed; a field not read may hold anything."""
    text = body[start:end].decode("utf-8", "surrogateescape")
    decoder = json.JSONDecoder()
    line = first
    rows: list[Any] = []
    position = counted = 0
    while True:
        position = _WHITESPACE.match(text, position).end()  # type: ignore[union-attr]
        if position >= len(text):
            return rows
        line += text.count("\n", counted, position)
        counted = position
        try:
            value, position = decoder.raw_decode(text, position)
        except RecursionError:
            raise _bad_line(f"line {line} nests JSON too deeply to read", path) from None
        except json.JSONDecodeError as error:
            # A value cut short is named on its own line, not on the blank the parser reached after it.
            at = max(len(text[: error.pos].rstrip(" \t\r\n")), position)
            column = at - text.rfind("\n", 0, at)
            message = f"line {first + text.count(chr(10), 0, at)} is not valid JSON: {error.msg} (column {column})"
            raise _bad_line(message, path) from None
        except ValueError as error:  # an integer of more digits than Python reads
            raise _bad_line(f"line {line} is not valid JSON: {error}", path) from None
        if type(value) is not dict:
            raise _bad_line(f"line {line} is {_a(_json_kind(value))}, not a JSON object", path)
        rows.append(value if rows_of is None else rows_of.make(*(value.get(name) for name in rows_of.names)))


def _bad_line(message: str, path: Path) -> InputError:
    return InputError(message, file=str(path), expected="JSON Lines: one JSON object per line")


def object_fields(text: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The fields ``names`` of the JSON object ``text`` as Python's json reads them (None where absent), every other
    field skipped unbuilt; ValueError where ``text`` is not one JSON object."""
    try:
        (row,) = decode(text.encode("utf-8"), names, Path("<text>"))
    except (InputError, UnicodeEncodeError, AttributeError, ValueError):
        raise ValueError("not one JSON object") from None
    return {name: getattr(row, f"f{index}") for index, name in enumerate(names)}


# ---------------------------------------------------------------------------------------------------------------------
# Typing: the rows' values as columns, each value of the JSON type its column's type takes.


def _typed_table(rows: list[Any], schema: pa.Schema, body: bytes, path: Path) -> pa.Table:
    if not rows:
        return schema.empty_table()
    columns = [_column(_field_values(rows, index), field, body, path) for index, field in enumerate(schema)]
    return pa.table(columns, schema=schema)


def _column(items: list[Any], field: pa.Field, body: bytes, path: Path) -> pa.Array:
    """``field``'s column of ``items``; one InputError naming the line of the first value it cannot hold."""
    kind = field.type
    allowed = _FLAT.get(kind)
    if allowed is not None:
        fits = set(map(type, items)) <= {*allowed, _NONE}
    elif _flat_list(kind):
        inner = _FLAT[kind.value_type]
        fits = set(map(type, items)) <= {list, _NONE} and all(
            set(map(type, item)) <= set(inner) for item in items if item
        )
    else:
        fits = all(_misfit(item, kind) is None for item in items)
    if fits:
        try:
            return pa.array(items, kind)
        except (OverflowError, UnicodeEncodeError, pa.ArrowException):
            pass  # an integer past 64 bits, or text that is not UTF-8
        if kind == pa.float64():  # pyarrow takes no integer past 64 bits as a double: Python's float does
            with contextlib.suppress(OverflowError):
                return pa.array([float(item) if type(item) is int else item for item in items], kind)
    for row, item in enumerate(items):
        problem = _misfit(item, kind, field.name)
        if problem is not None:
            raise InputError(
                f"line {_line_of_row(body, row)} has {problem}",
                file=str(path),
                field=field.name,
                expected="one type per field on every line, UTF-8 text, integers within 64 bits",
            )
    raise InputError(f"cannot be typed as {kind}", file=str(path), field=field.name)  # not reached: a misfit is found


def _misfit(value: Any, kind: pa.DataType, name: str = "") -> str | None:
    """What about ``value`` a column of ``kind`` cannot hold (``name``: how to call it), or None."""
    if value is None:
        return None
    label = repr(name) if name else "a value"
    if pa.types.is_list(kind):
        if type(value) is not list:
            return f"{label} as {_a(_json_kind(value))} where an array was expected"
        return next(filter(None, (_misfit(item, kind.value_type, name) for item in value)), None)
    if pa.types.is_struct(kind):
        if type(value) is not dict:
            return f"{label} as {_a(_json_kind(value))} where an object was expected"
        fields = (kind.field(index) for index in range(kind.num_fields))
        return next(filter(None, (_misfit(value.get(f.name), f.type, f"{name}.{f.name}") for f in fields)), None)
    allowed = _FLAT.get(kind, ())
    if type(value) not in allowed:
        if kind == pa.int64() and type(value) is float:
            return f"{label} = {value!r} where a whole number was expected"
        return f"{label} as {_a(_json_kind(value))} where {_a(_KIND_OF_TYPE.get(kind, str(kind)))} was expected"
    if type(value) is int and kind == pa.int64() and not -(1 << 63) <= value < 1 << 63:
        return f"{label} = {str(value)[:40]}, an integer past 64 bits"
    if type(value) is int and kind == pa.float64() and abs(value) > _LARGEST_DOUBLE:
        return f"{label} = {str(value)[:40]}, an integer past the largest double"
    if type(value) is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{label} holding text that is not UTF-8"
    return None


_KIND_OF_TYPE = {pa.float64(): "number", pa.int64(): "number", pa.string(): "string", pa.bool_(): "boolean"}
_INFERRED = {"number": pa.float64(), "string": pa.string()}


def _line_of_row(body: bytes, row: int) -> int:
    """The line (from 1) the ``row``-th object of ``body`` starts on (read again by Python's json: only on the path
    of an error)."""
    text = body.decode("utf-8", "surrogateescape")
    decoder = json.JSONDecoder()
    position = 0
    for _ in range(row):
        position = _WHITESPACE.match(text, position).end()  # type: ignore[union-attr]
        _, position = decoder.raw_decode(text, position)
    position = _WHITESPACE.match(text, position).end()  # type: ignore[union-attr]
    return text.count("\n", 0, position) + 1


def _inferred_table(rows: list[dict[str, Any]], body: bytes, path: Path) -> pa.Table:
    """Every field of ``rows`` (whole objects), typed from its values as pyarrow types Python values; a field whose
    values are of two JSON types is refused naming the first line of the second."""
    names = list(dict.fromkeys(name for row in rows for name in row))  # every line's fields, in order of appearance
    try:
        return pa.table({name: pa.array([row.get(name) for row in rows]) for name in names})
    except (OverflowError, UnicodeEncodeError, pa.ArrowException):
        pass
    first: dict[str, str] = {}
    for row, value in enumerate(rows):
        for name, item in value.items():
            if item is None:
                continue
            kind = _json_kind(item)
            seen = first.setdefault(name, kind)
            if kind != seen:
                problem: str | None = f"{name!r} as {_a(kind)} where {_a(seen)} was expected"
            else:  # an integer is typed int64 (it must fit 64 bits), a text a string (it must be UTF-8)
                target = pa.int64() if type(item) is int else _INFERRED.get(kind)
                problem = _misfit(item, target, name) if target is not None else None
            if problem is not None:
                raise InputError(
                    f"line {_line_of_row(body, row)} has {problem}",
                    file=str(path),
                    field=name,
                    expected="one type per field on every line",
                )
    raise InputError("cannot be typed as a table", file=str(path), expected="one type per field on every line")


# ---------------------------------------------------------------------------------------------------------------------
# pyarrow's reader, where the fields read nest.


def _by_pyarrow(body: bytes, schema: pa.Schema | None) -> pa.Table | None:
    """The table pyarrow's reader makes of ``body``, or None where it refuses it or must not see it: a line nested
    deeper than it survives, or a line that is no object (a block starting with ``null`` crashes it)."""
    import numpy as np
    import pyarrow.json as pa_json

    if tables.too_deep_line(np.frombuffer(body, dtype=np.uint8)) is not None:
        return None
    if tables.first_non_object_line(iter([body])) is not None:
        return None
    parse = (
        pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        if schema is not None
        else pa_json.ParseOptions()
    )
    block = tables._JSON_BLOCK_BYTES
    while True:
        try:
            # Its threads pay only on large files (their start costs a small file twice its read).
            read = pa_json.ReadOptions(block_size=block, use_threads=len(body) > _THREADED_BYTES)
            return pa_json.read_json(pa.BufferReader(body), read_options=read, parse_options=parse)
        except pa.ArrowException as error:
            # A line longer than a block (a long agentic trajectory): read again with blocks that hold it.
            if "straddl" in str(error) and block < min(len(body) + 1, tables.MAX_JSON_LINE_BYTES):
                block = min(block * 8, len(body) + 1, tables.MAX_JSON_LINE_BYTES)
                continue
            return None


def _misfit_line(body: bytes, schema: pa.Schema | None, path: Path) -> str | None:
    """Where a table pyarrow's reader made holds damaged text: the line of the first value not UTF-8."""
    try:
        if schema is None:
            _inferred_table(decode(body, None, path), body, path)
        else:
            table_of(body, schema, False, path)
    except InputError as error:
        return error.message
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Words.


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
