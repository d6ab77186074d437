"""JSON Lines are read by the reading rule, checked against a plain-Python oracle: the objects of the file
(separated by whitespace) as Python's json reads them, the fields read typed value by value (a number is an int or
a float and no bool, an integer taken as its nearest double; an int64 an int within 64 bits; a string UTF-8 text),
the first value that does not fit refused naming its line. The corpus, the samples, and what strict parsers refuse:
NaN, infinities, integers past 64 bits, keys written twice, bytes that are not UTF-8, lone surrogates, deep
nesting. Fields not read need only be well-formed."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from rollaudit import InputError
from rollaudit._loaders.arrow import json_lines

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
FILES = sorted(
    [*CORPUS.rglob("*.jsonl"), *(ROOT / "sample_dumps").rglob("*.jsonl")] if CORPUS.is_dir() else [],
    key=str,
) or sorted((ROOT / "sample_dumps").rglob("*.jsonl"), key=str)
_TYPES = {float: pa.float64(), int: pa.int64(), str: pa.string(), bool: pa.bool_()}
_WHITESPACE = re.compile(r"[ \t\r\n]*")


def _fits(value: Any, kind: pa.DataType) -> bool:
    if value is None:
        return True
    if pa.types.is_list(kind):
        return type(value) is list and all(_fits(item, kind.value_type) for item in value)
    if pa.types.is_struct(kind):
        fields = [kind.field(index) for index in range(kind.num_fields)]
        return type(value) is dict and all(_fits(value.get(field.name), field.type) for field in fields)
    if kind == pa.string():
        return type(value) is str and not re.search("[\ud800-\udfff]", value)
    if kind == pa.bool_():
        return type(value) is bool
    if kind == pa.int64():
        return type(value) is int and -(1 << 63) <= value < 1 << 63
    return type(value) is float or (type(value) is int and abs(value) <= 1.7976931348623157e308)


def oracle(data: bytes, schema: pa.Schema) -> tuple[str, Any]:
    """The reading rule in plain Python: ("read", values by field) or ("refused", the line named)."""
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "surrogateescape")
    decoder, position, objects = json.JSONDecoder(), 0, []
    while True:
        position = _WHITESPACE.match(text, position).end()
        if position >= len(text):
            break
        line = text.count("\n", 0, position) + 1
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:  # named on the line of the last character before the error
            return "refused", text.count("\n", 0, max(len(text[: error.pos].rstrip()), position)) + 1
        except (ValueError, RecursionError):
            return "refused", line
        if type(value) is not dict:
            return "refused", line
        objects.append((line, value))
    columns = {}
    for field in schema:
        for line, value in objects:
            if not _fits(value.get(field.name), field.type):
                return "refused", line
        values = [value.get(field.name) for _, value in objects]
        if field.type == pa.float64():  # a number field holds the nearest double of an integer
            values = [float(value) if type(value) is int else value for value in values]
        columns[field.name] = _plain(pa.array(values, field.type))
    return "read", columns


def _plain(column: Any) -> list:
    return [_nan_named(value) for value in column.to_pylist()]


def _nan_named(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list):
        return [_nan_named(item) for item in value]
    if isinstance(value, dict):
        return {key: _nan_named(item) for key, item in value.items()}
    return value


def read(path: Path, schema: pa.Schema, **options: Any) -> tuple[str, Any]:
    try:
        table = json_lines.read_json_lines(path, schema, **options)
    except InputError as error:
        found = re.search(r"line (\d+)", str(error))
        return "refused", int(found.group(1)) if found else str(error)
    return "read", {name: _plain(column) for name, column in zip(table.column_names, table.columns, strict=True)}


def _flat_schema(path: Path) -> pa.Schema | None:
    """The first line's flat fields, typed by their first value (as the loaders type them)."""
    first = json.loads(path.read_bytes().split(b"\n", 1)[0].removeprefix(b"\xef\xbb\xbf"))
    fields = [pa.field(name, _TYPES[type(value)]) for name, value in first.items() if type(value) in _TYPES]
    for name, value in first.items():  # lists of strings or ints (ROLL's one line of trajectories and steps)
        kinds = {type(item) for item in value} if isinstance(value, list) else set()
        if value and len(kinds) == 1 and kinds <= {str, int}:
            fields.append(pa.field(name, pa.list_(_TYPES[kinds.pop()])))
    return pa.schema(fields) if fields else None


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_every_corpus_and_sample_file_reads_by_the_rule(path: Path):
    schema = _flat_schema(path)
    if schema is None:
        pytest.skip("no flat field on the first line")
    assert read(path, schema) == oracle(path.read_bytes(), schema)
    # pyarrow's reader, where a format reads token lists, gives the same table
    assert read(path, schema, token_lists=True) == oracle(path.read_bytes(), schema)


LINE = {"input": "q", "output": "a", "score": 0.5, "step": 3, "uid": "u_0_0"}
SCHEMA = pa.schema([("uid", pa.string()), ("score", pa.float64()), ("step", pa.float64()), ("n", pa.int64())])
NESTED = pa.schema([("uid", pa.string()), ("score", pa.float64()), ("tokens", pa.list_(pa.list_(pa.int64())))])
# The third line, as Python's json (or a hand) writes it.
THIRD_LINES = {
    "NaN": '{"uid": "u", "score": NaN, "step": 3}',
    "Infinity": '{"uid": "u", "score": Infinity, "step": 3}',
    "-Infinity": '{"uid": "u", "score": -Infinity, "step": 3}',
    "NaN in a field not read": '{"uid": "u", "score": 1, "other": NaN}',
    "a reward past 64 bits": '{"uid": "u", "score": 1180591620717411303424}',
    "a reward in uint64": '{"uid": "u", "score": 18446744073709551615}',
    "a step past 64 bits": '{"uid": "u", "score": 1, "step": 1180591620717411303424}',
    "an int field past 64 bits": '{"uid": "u", "score": 1, "n": 1180591620717411303424}',
    "an int field in uint64": '{"uid": "u", "score": 1, "n": 18446744073709551615}',
    "an int field past 64 bits with NaN": '{"uid": "u", "score": NaN, "n": 1180591620717411303424}',
    "a key past 64 bits": '{"uid": 1180591620717411303424, "score": 1}',
    "a lone surrogate read": '{"uid": "a\\ud800b", "score": 1}',
    "a lone surrogate not read": '{"uid": "u", "score": 1, "other": "\\udc00"}',
    "a surrogate pair": '{"uid": "\\ud83d\\ude00", "score": 1}',
    "a number past the largest double read": '{"uid": "u", "score": 1e400}',
    "a number past the largest double not read": '{"uid": "u", "score": 1, "other": 1e400}',
    "a negative one not read": '{"uid": "u", "score": 1, "other": [-1.5E+0400]}',
    "a long mantissa past the largest double": '{"uid": "u", "score": 1, "other": ' + "9" * 320 + ".5}",
    "an integer past 64 bits not read": '{"uid": "u", "score": 1, "other": 1180591620717411303424}',
    "a float in an int field": '{"uid": "u", "score": 1, "n": 1.5}',
    "a whole float in an int field": '{"uid": "u", "score": 1, "n": 2.0}',
    "a boolean number": '{"uid": "u", "score": true}',
    "a string number": '{"uid": "u", "score": "0.5"}',
    "null everywhere": '{"uid": null, "score": null, "step": null, "n": null}',
    "an escaped control character": '{"uid": "a\\u0000b", "score": 1}',
    "a raw control character": '{"uid": "a\x01b", "score": 1}',
    "an array": "[1, 2]",
    "null": "null",
    "truncated": '{"uid": "u", "sco',
    "two objects": '{"uid": "u"} {"score": 1}',
    "blanks": "  \t\r",
    "a field read nested 300 deep": '{"uid": ' + "[" * 300 + "]" * 300 + ', "score": 1}',
    "a field not read nested 600 deep": '{"uid": "u", "score": 1, "x": ' + "[" * 600 + "]" * 600 + "}",
    "600 brackets in a text": '{"uid": "' + "[" * 600 + '", "score": 1}',
    "a line break inside a value": '{"uid": "u",\n "score": 1}',
    "a line break inside a value, CRLF": '{"uid": "u",\r\n "score": 1}',
    "spaces after the object": '{"uid": "u", "score": 1}   ',
    "two objects on a line": '{"uid": "u", "score": 1}{"uid": "v", "score": 2}',
    "a key written with escapes": '{"uid": "u", "sc\\u006fre": 3}',
    "a key read twice, escaped once": '{"uid": "u", "score": 1, "sc\\u006fre": 3}',
    "a key read twice": '{"uid": "u", "score": 1, "score": 2}',
    "a key read twice, the last null": '{"uid": "u", "score": 2, "score": null}',
    "a key read twice, the last NaN": '{"uid": "u", "score": 2, "score": NaN}',
    "a key twice in an object not read": '{"uid": "u", "score": 1, "x": {"score": 1, "score": 2}}',
    "a key read as a text": '{"uid": "\\"score\\"", "score": 1}',
    "an encoded surrogate not read": '{"uid": "u", "score": 1, "other": "\xed\xa0\x80"}',
    "a string of digits": '{"uid": "' + "7" * 400 + '", "score": 1}',
}


@pytest.mark.parametrize("case", sorted(THIRD_LINES))
@pytest.mark.parametrize("schema", [SCHEMA, NESTED], ids=["flat", "nested"])
def test_lines_strict_parsers_refuse_read_by_the_rule(tmp_path: Path, case: str, schema: pa.Schema):
    first = json.dumps(LINE)
    path = tmp_path / "lines.jsonl"
    path.write_bytes(f"{first}\n{first}\n{THIRD_LINES[case]}\n{first}\n".encode("utf-8", "surrogateescape"))
    assert read(path, schema) == oracle(path.read_bytes(), schema)


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbf" + b'{"uid": "u", "score": 1}\n{"uid": "v", "score": 2}\n',
        b'{"uid": "u", "score": 1}\r\n{"uid": "v", "score": 2}\r\n',
        b'\n\n{"uid": "u", "score": 1}\n\n  \n{"uid": "v", "score": 2}',
        b'{"uid": "u", "score": 1}\n{"uid": "\xff", "score": 2}\n',
        b'{"uid": "u", "score": 1}\n{"uid": "v", "other": "\xc3(", "score": 2}\n',
        b'{"uid": "u", "score": 1}\n{"uid": "v", "\xff": 1, "score": 2}\n',
        b"",
        b"\n",
    ],
    ids=[
        "BOM",
        "CRLF",
        "blank lines, no last newline",
        "invalid UTF-8 read",
        "invalid UTF-8 not read",
        "invalid UTF-8 in a key",
        "empty",
        "a newline",
    ],
)
def test_bytes_around_the_lines(tmp_path: Path, data: bytes):
    path = tmp_path / "lines.jsonl"
    path.write_bytes(data)
    assert read(path, SCHEMA) == oracle(data, SCHEMA)


@pytest.mark.parametrize("name", ["é", 'a"b', "a\\b", "tab\there", "class", "a-b c", "f0"])
def test_fields_of_any_name(tmp_path: Path, name: str):
    path = tmp_path / "lines.jsonl"
    path.write_text(json.dumps({name: 1, "score": 2}) + "\n" + json.dumps({name: 3, "score": 4}, ensure_ascii=False))
    schema = pa.schema([(name, pa.float64()), ("score", pa.float64())])
    assert read(path, schema) == oracle(path.read_bytes(), schema) == ("read", {name: [1.0, 3.0], "score": [2.0, 4.0]})


def test_what_the_rule_reads(tmp_path: Path):
    """The relaxed rule, said outright: NaN and infinities read, a key's last value kept, what is not read skipped."""
    path = tmp_path / "lines.jsonl"
    path.write_text(
        '{"uid": "a", "score": NaN, "other": 1e400}\n'
        '{"uid": "b", "score": 1, "score": 2, "deep": ' + "[" * 600 + "]" * 600 + "}\n"
        '{"uid": "c", "score": -Infinity, "n": 3}\n'
    )
    table = json_lines.read_json_lines(path, SCHEMA)
    assert _plain(table.column("score")) == ["NaN", 2.0, -math.inf]
    assert table.column("n").to_pylist() == [None, None, 3]


def test_errors_name_the_field_and_the_line(tmp_path: Path):
    path = tmp_path / "lines.jsonl"
    path.write_text('{"uid": "u", "score": 1}\n\n{"uid": "u", "score": 1, "n": 1180591620717411303424}\n')
    with pytest.raises(InputError, match=r"field 'n': line 3 has 'n' = 1180591620717411303424, an integer past 64"):
        json_lines.read_json_lines(path, SCHEMA)
    path.write_text('{"uid": "u", "score": 1}\n{"uid": "a\\ud800", "score": NaN}\n')
    with pytest.raises(InputError, match="field 'uid': line 2 has 'uid' holding text that is not UTF-8"):
        json_lines.read_json_lines(path, SCHEMA)
    path.write_text('{"uid": "u", "score": 1}\n{"uid": "u", "score": "1"}\n')
    with pytest.raises(InputError, match="field 'score': line 2 has 'score' as a string where a number was expected"):
        json_lines.read_json_lines(path, SCHEMA)
    path.write_text('{"uid": "u", "score": 1}\n{"uid": "u", "score": 1, "x": [}\n')
    with pytest.raises(InputError, match="line 2 is not valid JSON"):
        json_lines.read_json_lines(path, SCHEMA)


def test_nesting_past_the_parsers_limit_is_refused_naming_the_line(tmp_path: Path):
    """No crash and no hang on any depth: both parsers stop at the interpreter's recursion limit."""
    path = tmp_path / "deep.jsonl"
    path.write_text('{"score": 1}\n{"score": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(InputError, match="line 2 nests JSON too deeply to read"):
        json_lines.read_json_lines(path, SCHEMA)
    with pytest.raises(InputError, match="line 2 nests JSON too deeply to read"):
        json_lines.read_json_lines(path, NESTED, token_lists=True)


NAMES = ("env_info", "reward_info")
TEXTS = {
    "plain": '{"env_info": {"tag": "a", "seed": 1}, "reward_info": {"step_rewards": [1, 2.5]}, "messages": "long"}',
    "spaces around": '  {"env_info": {}}\n',
    "one field": '{"reward_info": {"step_rewards": [0]}}',
    "none": '{"other": 1}',
    "NaN read": '{"reward_info": {"step_rewards": [NaN]}}',
    "NaN not read": '{"reward_info": {}, "other": Infinity}',
    "a number past the largest double read": '{"reward_info": {"episode_reward": 1e400}}',
    "a number past the largest double not read": '{"reward_info": {}, "other": -1e400}',
    "an integer past 64 bits read": '{"reward_info": {"step_rewards": [1180591620717411303424]}}',
    "a lone surrogate read": '{"env_info": {"tag": "\\ud800"}}',
    "a lone surrogate not read": '{"env_info": {}, "other": "\\udc00"}',
    "a key read twice": '{"env_info": {"tag": 1}, "env_info": {"tag": 2}}',
    "a key twice inside": '{"env_info": {"tag": 1, "tag": 2}}',
    "a key written with escapes": '{"env\\u005finfo": {"t\\u0061g": "x"}}',
    "keys of other characters": '{"env_info": {"é": 1, "a\\"b": 2}}',
    "a list": "[1, 2]",
    "null": "null",
    "truncated": '{"env_info": {',
    "a BOM": '\ufeff{"env_info": {}}',
    "trailing data": '{"env_info": {}} {}',
}


@pytest.mark.parametrize("case", sorted(TEXTS))
def test_object_fields_read_as_pythons_json_reads_them(case: str):
    def outcome(read):
        try:
            value = read(TEXTS[case])
        except (ValueError, RecursionError):
            return "refused"
        if not isinstance(value, dict):
            return "refused"
        return json.dumps({name: value.get(name) for name in NAMES})  # NaN and infinities compare as their literals

    assert outcome(lambda text: json_lines.object_fields(text, NAMES)) == outcome(json.loads)
