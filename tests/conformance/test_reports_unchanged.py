"""``rollaudit compare`` (JSON, terminal text, Markdown) and ``rollaudit gate`` of every corpus run say what the
recorded outputs say, but for the timings (``tests/corpus_reports.py``, recorded with the code before a change that
keeps every number), on any CPU: floats within ``RELATIVE`` (1e-9, at least ``ABSOLUTE`` 1e-12), a fit's errors and a
float32 or bfloat16 scheme's values within ``ROUNDING_SLACK`` (2) roundings of their dtype, printed numbers within one
unit of their last digit, every count, key, label and other word exactly (``outcome_difference``)."""

from __future__ import annotations

import pytest

from tests.corpus_reports import CORPUS, outcome_difference, recorded, report, runs

from .conftest import corpus

RECORDED = recorded()
RUNS = runs() if CORPUS.is_dir() else {}


def test_every_run_of_the_corpus_is_recorded():
    corpus(".")
    assert sorted(RUNS) == sorted(RECORDED), "the corpus changed: record its reports again (tests/corpus_reports.py)"


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_compare_json_reports_what_it_reported(name):
    corpus(".")
    path, options = RUNS.get(name, (CORPUS / name, []))
    difference = outcome_difference(RECORDED[name], report(path, options))
    if difference:
        pytest.fail(f"{name}: {difference}")
