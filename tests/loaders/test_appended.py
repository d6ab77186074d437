"""A JSON Lines file read again as a run appends to it: only the new lines are parsed, the table is the whole
file's read, value for value, and a rewrite, truncation or replacement of what was read is read whole again."""

from __future__ import annotations

import glob
import itertools
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import rollaudit
from rollaudit._loaders.arrow import appended, json_lines
from rollaudit._loaders.run.load import detect_format
from tests.corpus_reports import CORPUS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([("step", pa.int64()), ("reward", pa.float64()), ("tokens", pa.list_(pa.int64()))])
FLAT = pa.schema([("step", pa.int64()), ("reward", pa.float64()), ("uid", pa.string())])


def _load(path: Path, format_name: str) -> pa.Table | str:
    try:
        return rollaudit.load(path, format=format_name, cache=False)
    except rollaudit.RollauditError as error:
        return error.line()


def _same(first: pa.Table | str, second: pa.Table | str) -> bool:
    if isinstance(first, str) or isinstance(second, str):
        return first == second
    return (
        first.schema == second.schema
        and first.schema.metadata == second.schema.metadata
        and _rows(first) == _rows(second)
    )


def _rows(table: pa.Table) -> str:
    """The table's values as text (NaN equal to NaN)."""
    return repr(table.to_pydict())


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the byte runs parsed through the kept reads, in order."""
    sizes: list[int] = []
    parse = json_lines._lines_or_none

    def counting(data: bytes, *args: object) -> pa.Table | None:
        sizes.append(len(data))
        return parse(data, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(json_lines, "_lines_or_none", counting)
    return sizes


def _read(files: appended.AppendedFiles, path: Path, schema: pa.Schema = SCHEMA) -> pa.Table:
    with appended.reading_appended(files):
        return json_lines.read_json_lines(path, schema, token_lists=schema is SCHEMA)


def _line(step: int, reward: float | str = 1.0) -> bytes:
    value = reward if isinstance(reward, str) else json.dumps(reward)
    return f'{{"step": {step}, "reward": {value}, "tokens": [{step}, 7], "uid": "u{step}"}}\n'.encode()


def test_every_json_lines_dump_reads_the_same_appended_in_three_pieces(tmp_path: Path) -> None:
    """Each JSON Lines file of the corpus and the samples, written in three appends and read after each: the last
    read equals the whole file's read (rows, types, metadata, or the same error)."""
    trees = [(ROOT / "sample_dumps", tmp_path / "samples")]
    if CORPUS.is_dir():
        trees.append((CORPUS, tmp_path / "corpus"))
    for source, copy in trees:
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    checked = 0
    for name in sorted(glob.glob(str(tmp_path / "**" / "*.jsonl"), recursive=True)):
        path = Path(name)
        try:
            format_name = detect_format(path)
        except rollaudit.RollauditError:
            continue
        whole = _load(path, format_name)
        data = path.read_bytes()
        lines = data.splitlines(keepends=True)
        cuts = [0, len(lines) // 3, 2 * len(lines) // 3, len(lines)]
        files = appended.AppendedFiles()
        path.write_bytes(b"")
        for start, end in itertools.pairwise(cuts):
            with open(path, "ab") as handle:
                handle.write(b"".join(lines[start:end]))
            with appended.reading_appended(files):
                last = _load(path, format_name)
        assert path.read_bytes() == data
        assert _same(whole, last), path
        checked += 1
    assert checked >= (100 if CORPUS.is_dir() else 20)


def test_only_the_appended_lines_are_parsed(tmp_path: Path, parsed: list[int]) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(_line(step) for step in range(3)))
    files = appended.AppendedFiles()
    first = _read(files, path)
    added = b"".join(_line(step, float("nan")) for step in range(3, 5)) + _line(5, "Infinity")
    with open(path, "ab") as handle:
        handle.write(added)
    table = _read(files, path)
    assert parsed == [path.stat().st_size - len(added), len(added)]
    assert _same(table, json_lines.read_json_lines(path, SCHEMA, token_lists=True))
    assert table.slice(0, 3).equals(first)
    assert _read(files, path) is table and parsed[2:] == []  # nothing new: nothing parsed


def test_flat_fields_are_read_by_their_own_path_when_appended(tmp_path: Path, parsed: list[int]) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(_line(step) for step in range(4)))
    files = appended.AppendedFiles()
    _read(files, path, FLAT)
    with open(path, "ab") as handle:
        handle.write(_line(4, "NaN") + b'{"step": 18446744073709551617, "reward": 1}\n')
    plain = _plain_or_error(path, FLAT)
    assert _plain_or_error_kept(files, path, FLAT) == plain
    assert isinstance(plain, str) and "line 6" in plain  # an int64 past 64 bits, named on the whole file's line


def _plain_or_error(path: Path, schema: pa.Schema) -> pa.Table | str:
    try:
        return json_lines.read_json_lines(path, schema)
    except rollaudit.RollauditError as error:
        return error.line()


def _plain_or_error_kept(files: appended.AppendedFiles, path: Path, schema: pa.Schema) -> pa.Table | str:
    try:
        return _read(files, path, schema)
    except rollaudit.RollauditError as error:
        return error.line()


def test_a_bad_appended_line_is_named_as_the_whole_files_read_names_it(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(_line(step) for step in range(5)))
    files = appended.AppendedFiles()
    _read(files, path)
    with open(path, "ab") as handle:
        handle.write(_line(5) + b'{"step": 6, "reward": "high", "tokens": []}\n')
    error = _plain_or_error_kept(files, path, SCHEMA)
    assert isinstance(error, str) and "line 7" in error
    assert error == _plain_or_error(path, SCHEMA)


@pytest.mark.parametrize("change", ["truncated and rewritten longer", "renamed over", "first block", "last bytes"])
def test_what_was_read_is_read_whole_again_once_it_changed(tmp_path: Path, change: str, parsed: list[int]) -> None:
    """A file that no longer starts with what was read is read whole: its table is the new file's read."""
    path = tmp_path / "run.jsonl"
    lines = [_line(step, float(step % 3)) for step in range(3000)]  # about 170 KB: several fingerprinted blocks
    path.write_bytes(b"".join(lines))
    files = appended.AppendedFiles()
    _read(files, path)
    if change == "truncated and rewritten longer":
        path.write_bytes(b"".join(_line(step, 2.0) for step in range(3100)))
    elif change == "renamed over":
        other = tmp_path / "other.jsonl"
        other.write_bytes(b"".join(lines).replace(b'"reward": 1.0', b'"reward": 5.0') + _line(3000))
        os.replace(other, path)
    else:
        _edit_reward(path, 20 if change == "first block" else path.stat().st_size - 60)
    table = _read(files, path)
    assert table.equals(json_lines.read_json_lines(path, SCHEMA, token_lists=True))
    assert parsed[-1] == path.stat().st_size  # read whole again


def _edit_reward(path: Path, near: int) -> None:
    """Change one digit of the first reward after byte ``near``, in place (the same length), and append a line."""
    data = bytearray(path.read_bytes())
    place = data.index(b'"reward": ', near) + len(b'"reward": ')
    data[place] = ord("9") if data[place] != ord("9") else ord("8")
    path.write_bytes(bytes(data) + _line(len(data)))


def test_an_edit_in_the_middle_is_found_within_its_turn(tmp_path: Path, parsed: list[int]) -> None:
    """Blocks past the first are checked two at a time in turn: an in-place edit of any of them is read whole again
    within (blocks / 2) reads."""
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(_line(step, 1.0) for step in range(12000)))  # about 700 KB: 10 whole blocks
    files = appended.AppendedFiles()
    _read(files, path)
    blocks = path.stat().st_size // appended.BLOCK_BYTES
    _edit_reward(path, 7 * appended.BLOCK_BYTES + 10)
    for _ in range(blocks // 2 + 1):
        table = _read(files, path)
    assert table.equals(json_lines.read_json_lines(path, SCHEMA, token_lists=True))


def test_a_line_still_being_written_is_not_kept(tmp_path: Path, parsed: list[int]) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(_line(0) + _line(1))
    files = appended.AppendedFiles()
    _read(files, path)
    with open(path, "ab") as handle:
        handle.write(_line(2) + _line(3)[:10])
    assert _plain_or_error_kept(files, path, SCHEMA) == _plain_or_error(path, SCHEMA)  # the whole file's answer
    with open(path, "ab") as handle:
        handle.write(_line(3)[10:])
    assert _read(files, path).equals(json_lines.read_json_lines(path, SCHEMA, token_lists=True))
    assert parsed[-1] == path.stat().st_size  # nothing of the partial read was kept


def test_files_not_read_are_let_go_of(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(_line(0))
    second.write_bytes(_line(1))
    files = appended.AppendedFiles()
    with appended.reading_appended(files):
        json_lines.read_json_lines(first, SCHEMA, token_lists=True)
        json_lines.read_json_lines(second, SCHEMA, token_lists=True)
    _read(files, second)
    assert [Path(name).name for name, _ in files._reads] == ["b.jsonl"]
    assert appended.current() is None
