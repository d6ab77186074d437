"""JSON Lines files as tables: orjson parses the lines where the fields read are flat, pyarrow types them.

Where every field a format reads is a number, a string, a boolean or a short list of strings or ints (verl's
score, step and uid; tinker-cookbook's summaries; ROLL's trajectories), each line is parsed by orjson (four times
Python's json on these files) and the columns are built from its values (in a file of 128 KB or more, msgspec
decodes those fields only, skipping the rest, wherever its answer is the whole parse's); a column holding a value
of another type (a string where a number was expected, an integer past 64 bits) is written again, those fields
only, for pyarrow's JSON reader, which types it by its own rules and names the line of its error. Where a field
read is an object, a list of lists or a value per token (token ids, chat messages, traces), pyarrow's reader reads
the file itself: it types those faster than they can be built from Python's values.

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
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict

import orjson
import pyarrow as pa

from ..._errors import InputError
from . import appended, tables

_BLANK = b" \t\r"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_WHITESPACE = re.compile(r"[ \t\r\n]*+")
_KIND_OF_TYPE = {"double": "number", "int64": "number", "string": "string", "bool": "boolean"}


def read_json_lines(path: Path, schema: pa.Schema | None = None, *, token_lists: bool = False) -> pa.Table:
    """A JSON Lines file as a table; ``schema`` fixes those fields' types and drops every other field (without a
    schema, pyarrow's reader infers every field's type from the whole file). ``token_lists``: the fields read
    hold a value per token, most of each line, which pyarrow's reader types faster than orjson's values can be.
    Inside :func:`.appended.reading_appended`, a file read before parses only the lines appended since."""
    by_pyarrow = schema is None or token_lists or not all(field.type in _DIRECT_TYPES for field in schema)
    kept = appended.current()
    if kept is not None and schema is not None:
        return kept.read(
            path,
            (schema, by_pyarrow),
            lambda data: _lines_or_none(data, schema, by_pyarrow, path),
            lambda: _read_whole_file(path, schema, by_pyarrow),
        )
    return _read_whole_file(path, schema, by_pyarrow)


def _read_whole_file(path: Path, schema: pa.Schema | None, by_pyarrow: bool) -> pa.Table:
    if by_pyarrow:
        return _read_file_by_pyarrow(path, schema)
    assert schema is not None
    data = _read_bytes(path)
    table = _read_fields_only(data, schema, path)
    return table if table is not None else _read_parsed_lines(data, schema, path)


def _lines_or_none(data: bytes, schema: pa.Schema, by_pyarrow: bool, path: Path) -> pa.Table | None:
    """The table of ``data`` (whole lines of ``path``) as the file's read makes it, or None where any line fails
    to read (the file's read then says which)."""
    try:
        if by_pyarrow:
            return _read_bytes_by_pyarrow(data, schema, path)
        table = _read_fields_only(data, schema, path)
        return table if table is not None else _read_parsed_lines(data, schema, path)
    except InputError:
        return None


def _read_parsed_lines(data: bytes, schema: pa.Schema, path: Path) -> pa.Table:
    """``schema``'s fields of every line parsed whole by orjson (Python's json where orjson refuses a line)."""
    records = parse_records(data, path)
    if records.longest > 2 * tables.MAX_JSON_DEPTH + 1:
        # orjson's own limit is 1,024 levels and Python's json's about 1,000: neither refuses what lies between them
        # and the bound, so the parsed values are measured (their containers only: brackets in strings, which make
        # a scan of the bytes run its exact pass, are not looked at), on the lines that hold more opening brackets
        # than the bound (no other line can nest that deep).
        _check_depth(records, path)
    table = typed_table(records, schema, path)
    _refuse_repeated_fields(data, records, table, path)
    return table


def _read_fields_only(data: bytes, schema: pa.Schema, path: Path) -> pa.Table | None:
    """The table of the common file, each line decoded by msgspec into ``schema``'s fields only (every other value
    is checked and skipped, no Python object built for it): about three times orjson's rate on files whose lines
    are mostly text. None, and the file is parsed whole, wherever the answer could differ from a whole parse: a
    line msgspec refuses (NaN, lone surrogates, bytes that are not UTF-8 in a field read, a value that is not an
    object), a line break inside a value or beside a blank line (msgspec reads line breaks as spaces), a line that
    may nest past the bound, a field named on a line more than once per line, an integer past 64 bits in a field
    read (orjson reads some as doubles), or a column that pyarrow's reader must type."""
    import msgspec
    import numpy as np

    if len(data) < _FIELDS_ONLY_BYTES or not _plain_names(schema.names):
        return None
    body = data.removeprefix(tables.BOM)
    view = np.frombuffer(body, dtype=np.uint8)
    breaks = np.flatnonzero(view == 10)
    if not _one_object_per_line(view, breaks) or _may_nest_too_deep(view, breaks) or _may_pass_largest_double(view):
        return None  # (checked before msgspec decodes: what it would refuse is invalid JSON, which these pass on)
    try:
        values = _fields_decoder(tuple(schema.names)).decode_lines(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if not values:
        return None
    columns = []
    for field in schema:
        column = _direct_column(values, field)
        if column is None:
            return None
        columns.append(column)
    quotes = np.flatnonzero(view == 34)
    following = view[np.minimum(quotes + 1, len(view) - 1)]
    for name, column in zip(schema.names, columns, strict=True):
        appears = _occurrences(view, quotes, following, json.dumps(name).encode())
        if _may_hold_twice(appears, name, values, column):
            return None  # the whole parse tells which line, if any, holds it twice
    table = pa.table(columns, schema=schema)
    return tables.check_values(table, path, locate=lambda: _locate_json_problem(path, None, None))


def object_fields(text: str, names: tuple[str, ...]) -> Any:
    """The JSON text ``text`` as Python's json reads it, where it is an object only its fields ``names`` (the others
    checked and skipped by msgspec, no Python object built for them). Python's json reads it wherever msgspec's
    answer could differ: a text msgspec refuses (NaN, lone surrogates, not an object, nesting past its limit), one
    that may nest deep (Python's json's limit is near msgspec's but not the same) or may hold an integer longer than
    Python reads (4,300 digits by default)."""
    import msgspec

    digits = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if (digits == 0 or len(text) <= digits) and text.count("[") + text.count("{") < 256 and _plain_names(names):
        try:
            return _fields_decoder(names).decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            pass
    return json.loads(text)


def _plain_names(names: Iterable[str]) -> bool:
    """Whether msgspec matches every key of ``names`` (printable ASCII, no quote or backslash): it matches no
    other."""
    return all(name.isascii() and name.isprintable() and '"' not in name and "\\" not in name for name in names)


def _fields_decoder(names: tuple[str, ...]) -> Any:
    """A msgspec decoder of JSON objects into dicts of ``names`` only (a value of any JSON type, each absent where
    the object lacks it), one per ``names``."""
    decoder = _FIELDS_DECODERS.get(names)
    if decoder is None:
        import msgspec

        fields = TypedDict("fields", {name: Any for name in names}, total=False)  # type: ignore[misc]
        decoder = _FIELDS_DECODERS[names] = msgspec.json.Decoder(fields)
    return decoder


_FIELDS_DECODERS: dict[tuple[str, ...], Any] = {}
_FIELDS_ONLY_BYTES = 1 << 17
"""Below this size a file is parsed whole: the byte checks' fixed costs outweigh what skipping saves (a 38 KB
tinker-cookbook file: 0.85 ms on that path, 0.71 ms parsed whole; a 400 KB verl file: 2.3 ms, 2.9 ms)."""


def _one_object_per_line(view: Any, breaks: Any) -> bool:
    """Whether every line break of the bytes ``view`` (valid JSON; ``breaks``: the breaks' positions) ends an
    object's line and starts the next's, or ends the bytes: ``}`` (or ``}\\r``) before it, ``{`` after it. msgspec
    reads a line break as a space: a line of several objects reads as their rows, as a whole parse reads it, but one
    value over several lines must not (a blank line, or spaces ending a line, rare, also send the file there)."""
    import numpy as np

    if not len(breaks):
        return True
    if breaks[0] < 2:
        return False
    before = view[breaks - 1]
    carriage = before == 13
    if carriage.any():
        before = np.where(carriage, view[breaks - 2], before)
    inner = breaks[breaks < len(view) - 1]
    return bool((before == 125).all() and (view[inner + 1] == 123).all())


def _may_nest_too_deep(view: Any, breaks: Any, limit: int = tables.MAX_JSON_DEPTH) -> bool:
    """Whether a line of the bytes ``view`` may nest deeper than ``limit``: it is longer than that and holds more
    ``[`` and ``{`` bytes (strings included), the bound the byte scan of a file starts with."""
    import numpy as np

    ends = np.append(breaks, len(view))
    if int(np.diff(ends, prepend=-1).max()) - 1 <= limit:
        return False
    brackets = np.flatnonzero((view == 91) | (view == 123))
    return len(brackets) > limit and int(np.bincount(np.searchsorted(ends, brackets)).max()) > limit


def _may_pass_largest_double(view: Any) -> bool:
    """Whether the bytes ``view`` may hold a number literal past the largest double, which a whole parse refuses
    and msgspec skips where no field read holds it: a run of 150 digits or more, or a literal's exponent of three
    digits or more (``1e400``). Either is rare: the lines are then parsed whole."""
    import numpy as np

    digits = np.flatnonzero((view - 48) < 10)
    if len(digits) >= 150 and (digits[149:] - digits[:-149] == 149).any():
        return True
    marks = digits[digits < len(view) - 5]  # room for e, a sign, three digits and a closing byte
    marks = marks[(view[marks + 1] | 32) == 101]  # a digit, then e or E
    if not len(marks):
        return False
    exponent = marks + 2 + (view[marks + 2] == 43)
    three = (view[exponent] - 48 < 10) & (view[exponent + 1] - 48 < 10) & (view[exponent + 2] - 48 < 10)
    return any(_starts_a_number(view, int(mark)) for mark in marks[three])


def _starts_a_number(view: Any, mark: int) -> bool:
    """Whether the digits before ``view[mark]`` (the last before an exponent) start after JSON's punctuation or
    a space, as a number literal's do (in a text they mostly follow letters)."""
    at = mark
    while at > 0 and view[at - 1] in _NUMBER_BYTES:
        at -= 1
    return at == 0 or view[at - 1] in _BEFORE_A_NUMBER


_NUMBER_BYTES = frozenset(b"0123456789.-")
_BEFORE_A_NUMBER = frozenset(b":,[ \t\r\n")


def _occurrences(view: Any, quotes: Any, following: Any, key: bytes) -> int:
    """How often ``key`` (a quoted name) appears in the bytes ``view``, from the positions of its quotes and the
    bytes following them; never fewer than ``bytes.count`` finds (overlaps, and a byte past the end read as the
    last, count)."""
    import numpy as np

    candidates = quotes[following == key[1]]
    places = np.minimum(candidates[:, None] + np.arange(2, len(key)), len(view) - 1)
    return int((view[places] == np.frombuffer(key, dtype=np.uint8)[2:]).all(axis=1).sum())


def _refuse_repeated_fields(data: bytes, records: Records, table: pa.Table, path: Path) -> None:
    """InputError naming the first line that holds a field of ``table`` twice: where a field may be held twice
    (``_may_hold_twice``, its name counted at C speed), the lines where it appears more than once are parsed again,
    keeping every key, to tell a repeated field from its name inside a text."""
    for name in table.column_names:
        key = json.dumps(name).encode()
        if not _may_hold_twice(data.count(key), name, records.values, table.column(name)):
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


def _may_hold_twice(appears: int, name: str, values: list[dict[str, Any]], column: Any) -> bool:
    """Whether some line may hold the field ``name`` twice, its quoted name appearing ``appears`` times in the bytes
    of the lines parsed as ``values`` (``column``: the field's). Where it appears no more often than there are
    records and every record holds it (no null), or no more often than the records that hold it, no line can."""
    if appears <= len(values) and (appears == 0 or column.null_count == 0):
        return False
    return appears > len(values) - sum(name not in value for value in values)


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
    lines = records.data.split(b"\n")
    shallow: dict[int, bool] = {}  # per line: several values can share one, and it is counted once
    for value, number in zip(records.values, records.lines, strict=True):
        if number not in shallow:
            line = lines[number - 1]
            shallow[number] = len(line) <= 2 * limit + 1 or line.count(b"{") + line.count(b"[") <= limit
        if shallow[number]:
            continue  # a line nests no deeper than it has opening brackets
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
        self,
        values: list[dict[str, Any]],
        lines: list[int],
        python: set[int],
        longest: int,
        suspects: set[int],
        data: bytes,
    ) -> None:
        self.values = values
        self.lines = lines
        self.data = data  # the file's bytes after any BOM
        self.python = python  # indices into values
        self.longest = longest
        self.suspects = suspects  # of those, the ones whose strings may hold lone surrogates


def parse_records(data: bytes, path: Path) -> Records:
    """Every non-blank line of ``data`` (a JSON Lines file's bytes) parsed as one JSON object; anything else is one
    InputError naming the line."""
    data = data.removeprefix(tables.BOM)
    lines = data.split(b"\n")
    longest = max(map(len, lines))
    if not lines[-1]:
        lines.pop()  # the file's last newline
    loads = orjson.loads
    try:  # the common case at C speed: every line an object orjson reads, none blank
        values = [loads(line) for line in lines]
        if set(map(type, values)) <= {dict}:
            return Records(values, list(range(1, len(values) + 1)), set(), longest, set(), data)
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
    return Records(values, numbers, python, longest, suspects, data)


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
    tables.check_json_depth(path)
    _check_objects(path)
    try:
        table = _pyarrow_json(lambda: path, lambda: path.stat().st_size, schema)
    except pa.ArrowException as error:
        raise json_error(path, error, schema) from None
    except OSError as error:
        raise InputError(f"cannot read the file: {tables.short(error)}", file=str(path)) from None
    return tables.check_values(table, path, locate=lambda: _locate_json_problem(path, None, None))


def _read_bytes_by_pyarrow(data: bytes, schema: pa.Schema, path: Path) -> pa.Table | None:
    """:func:`_read_file_by_pyarrow` of lines of ``path`` held in ``data``; None where they fail its checks."""
    import numpy as np

    if tables.too_deep_line(np.frombuffer(data, dtype=np.uint8)) is not None:
        return None
    if tables.first_non_object_line(iter([data])) is not None:
        return None
    try:
        table = _pyarrow_json(lambda: pa.BufferReader(data), lambda: len(data), schema)
    except pa.ArrowException:
        return None
    return tables.check_values(table, path)


def _pyarrow_json(source: Any, size: Any, schema: pa.Schema | None) -> pa.Table:
    """pyarrow's reader over ``source()`` (``size()`` bytes), in blocks that grow to hold its longest line."""
    import pyarrow.json as pa_json

    parse_options = (
        pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        if schema is not None
        else pa_json.ParseOptions()
    )
    block_size = tables._JSON_BLOCK_BYTES
    while True:
        try:
            read_options = pa_json.ReadOptions(block_size=block_size)
            return pa_json.read_json(source(), read_options=read_options, parse_options=parse_options)
        except pa.ArrowException as error:
            # A line longer than a block (a long agentic trajectory): read again with blocks that hold it.
            if "straddl" in str(error) and block_size < size():
                block_size = min(block_size * 8, size() + 1, tables.MAX_JSON_LINE_BYTES)
                if block_size > tables._JSON_BLOCK_BYTES:
                    continue
            raise


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
