"""JSON Lines decoded into the fields read only (msgspec) read every file as the whole parse of every line does
(orjson, Python's json where orjson refuses a line), value for value and refusal for refusal: the corpus, the
samples, and what msgspec reads otherwise (a line break inside a value, a number past the largest double or an
integer past 64 bits in a field not read, keys written with escapes, a field read twice)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from rollaudit._loaders.arrow import json_lines

from .test_json_lines_fast_path import FILES, LINE, SCHEMA, THIRD_LINES, _flat_schema, _outcome


@pytest.fixture(autouse=True)
def _every_size(monkeypatch):
    """Files of any size on the fields-only path (in use it takes the larger ones)."""
    monkeypatch.setattr(json_lines, "_FIELDS_ONLY_BYTES", 0)


def _both(path: Path, schema: pa.Schema) -> tuple[tuple, tuple]:
    def whole(path: Path, schema: pa.Schema) -> pa.Table:
        return json_lines._read_parsed_lines(json_lines._read_bytes(path), schema, path)

    return _outcome(json_lines.read_json_lines, path, schema), _outcome(whole, path, schema)


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_every_corpus_and_sample_file_reads_as_the_whole_parse(path: Path):
    schema = _flat_schema(path)
    if schema is None:
        pytest.skip("no flat field on the first line")
    fast, reference = _both(path, schema)
    assert fast == reference


def test_the_common_file_takes_the_fields_only_path(tmp_path: Path):
    path = tmp_path / "lines.jsonl"
    path.write_text("".join(json.dumps(dict(LINE, step=step)) + "\n" for step in range(5)))
    table = json_lines._read_fields_only(path.read_bytes(), SCHEMA, path)
    assert table is not None and table.column("step").to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0]


OTHER_LINES = {
    **THIRD_LINES,
    "a number past the largest double not read": '{"uid": "u", "score": 1, "other": 1e400}',
    "a negative one not read": '{"uid": "u", "score": 1, "other": [-1.5E+0400]}',
    "a long exponent that stays finite": '{"uid": "u", "score": 1, "other": 1e-400}',
    "a long mantissa past the largest double": '{"uid": "u", "score": 1, "other": ' + "9" * 320 + ".5}",
    "a long integer not read": '{"uid": "u", "score": 1, "other": ' + "9" * 320 + "}",
    "an integer past 64 bits not read": '{"uid": "u", "score": 1, "other": 1180591620717411303424}',
    "an exponent in a text": '{"uid": "u", "score": 1, "other": "x: 1e400"}',
    "a line break inside a value": '{"uid": "u",\n "score": 1}',
    "a line break inside a value, CRLF": '{"uid": "u",\r\n "score": 1}',
    "a blank line": "",
    "spaces after the object": '{"uid": "u", "score": 1}   ',
    "two objects on a line": '{"uid": "u", "score": 1}{"uid": "v", "score": 2}',
    "a key written with escapes": '{"uid": "u", "sc\\u006fre": 3}',
    "a key read twice, escaped once": '{"uid": "u", "score": 1, "sc\\u006fre": 3}',
    "a key read twice": '{"uid": "u", "score": 1, "score": 2}',
    "a key read twice, the first null": '{"uid": "u", "score": null, "score": 2}',
    "a key twice in an object not read": '{"uid": "u", "score": 1, "x": {"score": 1, "score": 2}}',
    "a key read as a text": '{"uid": "\\"score\\"", "score": 1}',
    "a key read missing, its name in a text": '{"uid": "score"}',
    "an encoded surrogate not read": '{"uid": "u", "score": 1, "other": "\xed\xa0\x80"}',
    "nested 600 deep not read": '{"uid": "u", "score": 1, "x": ' + "[" * 600 + "]" * 600 + "}",
    "600 brackets in a text": '{"uid": "' + "[" * 600 + '", "score": 1}',
    "a string of digits": '{"uid": "' + "7" * 400 + '", "score": 1}',
}


@pytest.mark.parametrize("case", sorted(OTHER_LINES))
def test_lines_msgspec_reads_otherwise_keep_their_answers(tmp_path: Path, case: str):
    first = json.dumps(LINE)
    path = tmp_path / "lines.jsonl"
    path.write_bytes(f"{first}\n{first}\n{OTHER_LINES[case]}\n{first}\n".encode("utf-8", "surrogateescape"))
    fast, reference = _both(path, SCHEMA)
    assert fast == reference, (fast, reference)


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbf" + b'{"uid": "u", "score": 1}\n{"uid": "v", "score": 2}\n',
        b'{"uid": "u", "score": 1}\r\n{"uid": "v", "score": 2}\r\n',
        b'{"uid": "u", "score": 1}\n{"uid": "v", "score": 2}',
        b'\n{"uid": "u", "score": 1}\n',
        b'{"uid": "u", "score": 1}\n\n',
        b'{"uid": "u", "score": 1}\n{"uid": "v", "other": "\xc3(", "score": 2}\n',
        b'{"uid": "u", "score": 1}\n{"uid": "v", "\xff": 1, "score": 2}\n',
        b"",
        b"\n",
    ],
    ids=[
        "BOM",
        "CRLF",
        "no last newline",
        "a blank first line",
        "a blank last line",
        "invalid UTF-8 not read",
        "invalid UTF-8 in a key",
        "empty",
        "a newline",
    ],
)
def test_bytes_around_the_lines(tmp_path: Path, data: bytes):
    path = tmp_path / "lines.jsonl"
    path.write_bytes(data)
    fast, reference = _both(path, SCHEMA)
    assert fast == reference, (fast, reference)


@pytest.mark.parametrize("name", ["é", 'a"b', "a\\b", "tab\there", "class", "a-b c"])
def test_fields_of_any_name(tmp_path: Path, name: str):
    path = tmp_path / "lines.jsonl"
    path.write_text(json.dumps({name: 1, "score": 2}) + "\n" + json.dumps({name: 3, "score": 4}, ensure_ascii=False))
    schema = pa.schema([(name, pa.float64()), ("score", pa.float64())])
    fast, reference = _both(path, schema)
    assert fast == reference and fast[0] == "read", (fast, reference)


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
    "an integer past what Python reads": '{"reward_info": {}, "other": ' + "9" * 5000 + "}",
    "a lone surrogate read": '{"env_info": {"tag": "\\ud800"}}',
    "a lone surrogate not read": '{"env_info": {}, "other": "\\udc00"}',
    "a key read twice": '{"env_info": {"tag": 1}, "env_info": {"tag": 2}}',
    "a key twice inside": '{"env_info": {"tag": 1, "tag": 2}}',
    "a key written with escapes": '{"env\\u005finfo": {"t\\u0061g": "x"}}',
    "keys of other characters": '{"env_info": {"é": 1, "a\\"b": 2}}',
    "deep": '{"env_info": 1, "other": ' + "[" * 995 + "]" * 995 + "}",
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
        except (ValueError, RecursionError) as error:
            return "refused", type(error).__name__
        if isinstance(value, dict):
            value = {name: value[name] for name in NAMES if name in value}
        return "read", json.dumps(value)  # NaN and infinities compare as their literals

    assert outcome(lambda text: json_lines.object_fields(text, NAMES)) == outcome(json.loads)
