"""``rollaudit compare`` (JSON, terminal text, Markdown) and ``rollaudit gate`` of every corpus run say what the
recorded outputs say, byte for byte but for the timings (``tests/corpus_reports.py``, recorded with the code before a
change that keeps every number)."""

from __future__ import annotations

import json

import pytest

from tests.corpus_reports import CORPUS, recorded, report, runs

from .conftest import corpus

RECORDED = recorded()
RUNS = runs() if CORPUS.is_dir() else {}


def _first_difference(expected: object, actual: object, at: str = "") -> str:
    """Where two JSON documents first differ, as a path of keys."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in dict.fromkeys([*expected, *actual]):
            if expected.get(key) != actual.get(key):
                return _first_difference(expected.get(key), actual.get(key), f"{at}.{key}")
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
            if left != right:
                return _first_difference(left, right, f"{at}[{index}]")
    return f"{at}: {expected!r:.200} != {actual!r:.200}"


def test_every_run_of_the_corpus_is_recorded():
    corpus(".")
    assert sorted(RUNS) == sorted(RECORDED), "the corpus changed: record its reports again (tests/corpus_reports.py)"


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_compare_json_reports_what_it_reported(name):
    corpus(".")
    path, options = RUNS.get(name, (CORPUS / name, []))
    expected, actual = RECORDED[name], report(path, options)
    assert actual["exit"] == expected["exit"], (actual, expected)
    if "error" in expected:
        assert actual["error"] == expected["error"]
        return
    if actual["report"] != expected["report"]:
        where = _first_difference(json.loads(expected["report"]), json.loads(actual["report"]))
        pytest.fail(f"{name}: the report changed at {where}")
    for output in ("terminal", "markdown", "gate", "gate_text"):
        if actual[output] != expected[output]:
            pytest.fail(f"{name}: the {output} output changed at {_first_line_difference(expected, actual, output)}")


def _first_line_difference(expected: dict, actual: dict, output: str) -> str:
    def lines(outcome: object) -> list[str]:
        text = outcome if isinstance(outcome, str) else json.dumps(outcome, indent=1, sort_keys=True)
        return text.splitlines()

    before, after = lines(expected[output]), lines(actual[output])
    for number, (left, right) in enumerate(zip(before, after, strict=False), start=1):
        if left != right:
            return f"line {number}: {left!r} != {right!r}"
    return f"line {min(len(before), len(after)) + 1}: {len(before)} lines != {len(after)}"
