"""The orjson path of JSON Lines reads every file as pyarrow's reader does, value for value: the corpus, the
samples, and the literals Python's json writes that strict parsers refuse (NaN, infinities, integers past 64 bits,
lone surrogates), a BOM, CRLF, bytes that are not UTF-8, numbers past the largest double."""

from __future__ import annotations

import json
import math
from pathlib import Path

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


def _flat_schema(path: Path) -> pa.Schema | None:
    """The first line's flat fields, typed by their first value (as the loaders type them)."""
    first = json.loads(path.read_bytes().split(b"\n", 1)[0].removeprefix(b"\xef\xbb\xbf"))
    fields = [pa.field(name, _TYPES[type(value)]) for name, value in first.items() if type(value) in _TYPES]
    for name, value in first.items():  # lists of strings or ints (ROLL's one line of trajectories and steps)
        kinds = {type(item) for item in value} if isinstance(value, list) else set()
        if value and len(kinds) == 1 and kinds <= {str, int}:
            fields.append(pa.field(name, pa.list_(_TYPES[kinds.pop()])))
    return pa.schema(fields) if fields else None


def _values(table: pa.Table) -> dict[str, list]:
    return {
        name: ["NaN" if isinstance(value, float) and math.isnan(value) else value for value in column.to_pylist()]
        for name, column in zip(table.column_names, table.columns, strict=True)
    }


def _outcome(read, path: Path, schema: pa.Schema) -> tuple[str, object]:
    try:
        table = read(path, schema)
    except InputError as error:
        return "refused", str(error).split(": ", 1)[0]
    return "read", (table.schema, _values(table))


def _both(path: Path, schema: pa.Schema) -> tuple[tuple, tuple]:
    fast = _outcome(json_lines.read_json_lines, path, schema)
    return fast, _outcome(json_lines._read_file_by_pyarrow, path, schema)


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_every_corpus_and_sample_file_reads_as_pyarrow_reads_it(path: Path):
    schema = _flat_schema(path)
    if schema is None:
        pytest.skip("no flat field on the first line")
    fast, reference = _both(path, schema)
    assert fast == reference


LINE = {"input": "q", "output": "a", "score": 0.5, "step": 3, "uid": "u_0_0"}
SCHEMA = pa.schema([("uid", pa.string()), ("score", pa.float64()), ("step", pa.float64()), ("n", pa.int64())])
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
    "a number past the largest double": '{"uid": "u", "score": 1e400}',
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
    "a field read nested 300 deep, NaN": '{"uid": ' + "[" * 300 + "]" * 300 + ', "score": NaN}',
}


@pytest.mark.parametrize("case", sorted(THIRD_LINES))
def test_literals_strict_parsers_refuse_keep_their_answers(tmp_path: Path, case: str):
    first = json.dumps(LINE)
    path = tmp_path / "lines.jsonl"
    path.write_text(f"{first}\n{first}\n{THIRD_LINES[case]}\n{first}\n")
    fast, reference = _both(path, SCHEMA)
    assert fast == reference, (fast, reference)


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbf" + b'{"uid": "u", "score": 1}\n{"uid": "v", "score": 2}\n',
        b'{"uid": "u", "score": 1}\r\n{"uid": "v", "score": 2}\r\n',
        b'\n\n{"uid": "u", "score": 1}\n\n  \n{"uid": "v", "score": 2}',
        b'{"uid": "u", "score": 1}\n{"uid": "\xff", "score": 2}\n',
        b'{"uid": "u", "score": 1}\n{"uid": "v", "other": "\xc3(", "score": 2}\n',
    ],
    ids=["BOM", "CRLF", "blank lines, no last newline", "invalid UTF-8 read", "invalid UTF-8 not read"],
)
def test_bytes_around_the_lines(tmp_path: Path, data: bytes):
    path = tmp_path / "lines.jsonl"
    path.write_bytes(data)
    fast, reference = _both(path, SCHEMA)
    assert fast == reference, (fast, reference)


def test_errors_name_the_line(tmp_path: Path):
    path = tmp_path / "lines.jsonl"
    path.write_text('{"uid": "u", "score": 1}\n\n{"uid": "u", "score": 1, "n": 1180591620717411303424}\n')
    with pytest.raises(InputError, match=r"field 'n': line 3 has 'n' = 1180591620717411303424, an integer past"):
        json_lines.read_json_lines(path, SCHEMA)
    path.write_text('{"uid": "u", "score": 1}\n{"uid": "a\\ud800", "score": NaN}\n')
    with pytest.raises(InputError, match="line 2 is not valid JSON: a string holds a lone surrogate"):
        json_lines.read_json_lines(path, SCHEMA)


def test_nested_depth_between_the_parsers_limit_and_the_bound_is_refused(tmp_path: Path):
    """orjson reads 1,024 levels, Python's json about 1,000: the 512-level bound is the depth scan's."""
    path = tmp_path / "deep.jsonl"
    path.write_text('{"score": 1}\n{"score": 1, "x": ' + "[" * 600 + "]" * 600 + "}\n")
    with pytest.raises(InputError, match="line 2 nests JSON more than 512 levels deep"):
        json_lines.read_json_lines(path, SCHEMA)


def test_a_field_read_twice_on_a_line_is_refused_naming_the_line(tmp_path: Path):
    """orjson keeps a key's last value; pyarrow's reader refused such a line (a read field named twice), and so does
    the fast path: the name counted in the bytes, the lines where it appears twice parsed again with every key."""
    path = tmp_path / "lines.jsonl"
    path.write_text('{"uid": "u", "score": 1}\n{"uid": "v", "score": 1, "score": 2}\n')
    with pytest.raises(InputError, match=r"field 'score': line 2 holds the field 'score' twice"):
        json_lines.read_json_lines(path, SCHEMA)
    # The name inside a text, or twice in a nested object not read, is no repeated field.
    path.write_text('{"uid": "\\"score\\"", "score": 1, "x": {"score": 1, "score": 2}}\n{"uid": "score", "score": 2}\n')
    assert json_lines.read_json_lines(path, SCHEMA).column("score").to_pylist() == [1.0, 2.0]
