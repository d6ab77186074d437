"""No scan over a file's contents takes time worse than linear in the file: each regular expression and scan that
reads file bytes is run on adversarial padding at 1x, 10x and 100x; its time must grow within 15x and 150x.

Ratios in one run: this process's CPU time (what another process on a shared machine cannot add to), in interleaved
rounds, the best of each size."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from rollaudit import InputError
from rollaudit._errors import log_safe, visible
from rollaudit._loaders.arrow import json_lines, tables
from rollaudit._loaders.formats import prime_rl


def _assert_linear(make: Callable[[int], Callable[[], object]], base: int, rounds: int = 5) -> None:
    """Rounds that each time all three sizes, interleaved (a busy moment of the machine slows every size of a
    round, not one size's every try); the best time of each size."""
    runs = {scale: make(base * scale) for scale in (1, 10, 100)}
    times = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for scale, run in runs.items():
            start = time.process_time()
            run()
            times[scale] = min(times[scale], time.process_time() - start)
    ratios = (times[10] / times[1], times[100] / times[1])
    assert ratios[0] <= 15 and ratios[1] <= 150, f"times {times}, ratios {ratios}"


def _file(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / str(len(data)) / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


def _reward_names_of(tmp_path: Path, data: bytes) -> Callable[[], object]:
    path = _file(tmp_path, "traces.jsonl", data)

    def run() -> object:
        try:
            return prime_rl._reward_names(path)
        except InputError:
            return None

    return run


# prime-rl's rewards objects with blanks before a comma (valid JSON): once 30,000 spaces took 8 s, and a 127 KB
# file did not finish in 30 s.
PRIME_RL_PADDING = {
    "spaces before a comma, then a value of another shape": lambda n: (
        b'{"traces": [{"rewards": {"a": {"score": 1}' + b" " * n + b', "b": 5}}]}\n'
    ),
    "spaces before a comma in a valid object": lambda n: (
        b'{"traces": [{"rewards": {"a": {"score": 1}' + b" " * n + b', "b": null}}]}\n'
    ),
    "many entries then a nested value": lambda n: (
        b'{"traces": [{"rewards": {' + b'"a": null ,' * (n // 10) + b'"b": {"c": {}}}}]}\n'
    ),
    "a name that never closes": lambda n: b'{"traces": [{"rewards": {"' + b"\\\\a" * (n // 3) + b"\n",
    "many rewards keys": lambda n: b'{"rewards": {' * (n // 13) + b"\n",
}


@pytest.mark.parametrize("case", sorted(PRIME_RL_PADDING))
def test_prime_rl_reward_names_in_linear_time(tmp_path: Path, case: str):
    _assert_linear(lambda n: _reward_names_of(tmp_path, PRIME_RL_PADDING[case](n)), base=100_000)


# JSON Lines read by either reader, their checks included (the first line that is no object, the nesting depth).
JSON_PADDING = {
    "blank lines": lambda n: b'{"a": 1}\n' + b" \t\r\n" * (n // 4) + b"null\n",
    "blanks without a newline": lambda n: b'{"a": 1}\n' + b" \t\r" * (n // 3) + b"\n",
    "brackets in a string": lambda n: b'{"a": "' + b"[" * n + b'"}\n',
    "escaped quotes in a string": lambda n: b'{"a": "' + b'\\"[' * (n // 3) + b'"}\n',
    "shallow brackets": lambda n: b'{"a": [' + b"[0]," * (n // 4) + b"0]}\n",
    "backslashes": lambda n: b'{"a": "' + b"\\\\" * (n // 2) + b'"}\n',
}


_TEXT_SCHEMA = pa.schema([("a", pa.string())])


@pytest.mark.parametrize("case", sorted(JSON_PADDING))
def test_json_lines_reads_in_linear_time(tmp_path: Path, case: str, monkeypatch):
    # Chunks that stay in the processor's cache at every size: what grows is the number of chunks, as in a file of
    # gigabytes, not the cost of each.
    monkeypatch.setattr(tables, "_DEPTH_CHUNK", 1 << 16)

    def make(n: int) -> Callable[[], object]:
        path = _file(tmp_path, "lines.jsonl", JSON_PADDING[case](n))

        def run() -> object:
            try:
                json_lines.read_json_lines(path, _TEXT_SCHEMA)
                return json_lines.read_json_lines(path, _TEXT_SCHEMA, token_lists=True)
            except InputError:
                return None

        return run

    _assert_linear(make, base=100_000)


def test_the_depth_scan_itself_in_linear_time():
    """The exact scan (run where the bound cannot decide), on brackets that open and close in strings and out."""
    pattern = np.frombuffer(b'[{"a": "[[\\"]]"}, ', dtype=np.uint8)

    def make(n: int) -> Callable[[], object]:
        view = np.resize(pattern, n)
        return lambda: tables.too_deep_line(view, 10**9)

    _assert_linear(make, base=300_000)


def test_sniffing_reads_a_bounded_head(tmp_path: Path):
    """Telling a table's kind reads its head (and the first line of JSON Lines): a padded CSV header stays linear."""

    def make(n: int) -> Callable[[], object]:
        path = _file(tmp_path, "t.csv", b"a" + b",b" * (n // 2) + b"\n1" + b",2" * (n // 2) + b"\n")
        return lambda: tables.sniff(path)

    _assert_linear(make, base=20_000)


@pytest.mark.parametrize("text", ["\r" + " " * 50 + ":", " " * 50 + "\x1b"], ids=["carriage returns", "escapes"])
def test_error_and_report_escaping_in_linear_time(text: str):
    """Dump text reaches errors and reports: their escaping passes are linear too."""

    def make(n: int) -> Callable[[], object]:
        padded = text * (n // len(text))
        return lambda: log_safe(visible(padded))

    _assert_linear(make, base=100_000)


# Lines orjson refuses are read again by Python's json: several values on a line, NaN literals, surrogate escapes.
FALLBACK_PADDING = {
    "many objects on one line": lambda n: b'{"score": 1}\n' + b'{"score": NaN} ' * (n // 15) + b"\n",
    "many lines of NaN": lambda n: b'{"score": NaN}\n' * (n // 15),
    "surrogate pairs in a string": lambda n: b'{"score": NaN, "uid": "' + b"\\ud83d\\ude00" * (n // 12) + b'"}\n',
    "blanks between objects": lambda n: b'{"score": NaN}' + b" " * n + b'{"score": 1}\n',
}


@pytest.mark.parametrize("case", sorted(FALLBACK_PADDING))
def test_json_lines_python_fallback_in_linear_time(tmp_path: Path, case: str):
    import pyarrow as pa

    schema = pa.schema([("score", pa.float64()), ("uid", pa.string())])

    def make(n: int) -> Callable[[], object]:
        path = _file(tmp_path, "lines.jsonl", FALLBACK_PADDING[case](n))
        return lambda: json_lines.read_json_lines(path, schema)

    _assert_linear(make, base=30_000)
