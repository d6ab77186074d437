"""The comparison of recorded corpus outputs (``tests/corpus_reports.py``): what another CPU's summation order moves
passes, a real change of a number, a count, a word or the layout still fails. No corpus needed."""

from __future__ import annotations

import copy
import json

import pytest

from tests.corpus_reports import floats_agree, json_difference, numbers_agree, outcome_difference, text_difference


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        (0.9996159968483764, 0.9996159968483767),  # art's cosine on two CPUs
        (1.7435595774162693, 1.7435595774162695),
        (1e-17, -2e-17),  # cancelled to near 0: within ABSOLUTE
        (0.0, 0.0),
    ],
)
def test_floats_one_cpu_apart_agree(expected, actual):
    assert floats_agree(expected, actual)


@pytest.mark.parametrize(("expected", "actual"), [(0.9996, 0.9997), (0.5, 0.5 * (1 + 1e-8)), (1e-11, 0.0), (1.0, -1.0)])
def test_a_changed_float_does_not(expected, actual):
    assert not floats_agree(expected, actual)


def test_nan_and_infinity_only_match_themselves():
    nan, inf = float("nan"), float("inf")
    assert floats_agree(nan, nan) and floats_agree(inf, inf)
    assert not floats_agree(nan, 0.0) and not floats_agree(inf, 1e300) and not floats_agree(-inf, inf)


@pytest.mark.parametrize(
    ("expected", "actual", "agree"),
    [
        ("0.7607", "0.7608", True),  # a value at the rounding boundary, moved by 1e-12
        ("0.7607", "0.7609", False),
        ("0.76", "0.7601", True),  # %g dropped the trailing zeros of 0.7600
        ("1", "0.9999", True),
        ("1", "0.9998", False),
        ("26", "27", False),  # counts: exactly
        ("1,234", "1,235", False),
        ("53.8", "53.9", True),
        ("53.8", "54.0", False),
        ("1.2e-07", "0", False),
        ("1.2e-07", "1.3e-07", True),
        ("1.2e-07", "1.4e-07", False),
        ("+0.90", "+0.91", True),
        ("-0.22", "0.22", False),
    ],
)
def test_printed_numbers_agree_within_one_unit_of_their_last_digit(expected, actual, agree):
    assert numbers_agree(expected, actual) is agree


def test_text_compares_words_exactly_and_numbers_at_their_printed_precision():
    line = "batch            53.8%     0.0%   26    2.17×         14   0.7607   1.29   0.578"
    assert text_difference(line, line.replace("0.7607", "0.7608")) is None
    assert text_difference(line, line.replace("0.7607", "0.7617")) is not None
    assert text_difference(line, line.replace("26", "27")) is not None
    assert text_difference(line, line.replace("batch", "batck")) is not None
    assert text_difference("same signs; identical advantages", "same signs; advantages differ") is not None
    # Identifiers keep their digits: a preset's PR number is an exact integer, a prompt's hash is a word.
    assert text_difference("match nemo-loo-4158", "match nemo-loo-4159") is not None
    assert text_difference("p:c90305 (6 tokens)", "p:c90306 (6 tokens)") is not None


def test_layout_is_exact_unless_a_printed_number_moved_it():
    table = "scheme     max err\n──────────────────\nnemo-loo   0.00032\n"
    assert text_difference(table, table.replace("nemo-loo   ", "nemo-loo    ")) is not None
    wider = "scheme      max err\n───────────────────\nnemo-loo   0.000321\n"  # a boundary moved: columns too
    assert text_difference(table, wider) is None
    wrapped = "they differ in sign from prompt on 4.2% of samples"
    assert text_difference(wrapped, wrapped.replace("of samples", "of\nsamples").replace("4.2", "4.3")) is None
    assert text_difference(wrapped, wrapped.replace("of samples", "of\nsamples")) is not None


def _report(max_error: float, mean_error: float = 0.0) -> dict:
    fits = [
        {"scheme": "nemo-loo", "max_error": max_error, "mean_error": mean_error, "share_within_tolerance": 1.0,
         "undefined": 0, "allowed_error": 3.2e-4},
        {"scheme": "miles-grpo", "max_error": 1.2, "mean_error": 0.2437525696, "share_within_tolerance": 0.25,
         "undefined": 0, "allowed_error": 3.2e-4},
        {"scheme": "nemo-grpo", "max_error": 1.2, "mean_error": 0.2437525699, "share_within_tolerance": 0.25,
         "undefined": 0, "allowed_error": 3.2e-4},
        {"scheme": "prompt", "max_error": 1.2, "mean_error": 0.25, "share_within_tolerance": 0.25,
         "undefined": 0, "allowed_error": 3.2e-4},
    ]  # fmt: skip
    recorded = {"best_match": "nemo-loo", "tolerance": 1e-4, "allowed_error": 3.2e-4, "rows": 192, "fits": fits}
    return {"summary": {"miles-grpo": {"advantage_cosine": 0.75, "nonzero": 26}}, "recorded": recorded}


def test_a_fit_error_within_its_dtype_rounding_agrees():
    # nemo-loo is float32: bit for bit on one CPU, 1 unit in the last place (at |A| ~ 2) on another.
    assert json_difference(_report(0.0), _report(2.384185791015625e-07, 1.4e-08)) is None
    assert json_difference(_report(0.0), _report(1e-5)) is not None  # far beyond float32's rounding


def test_a_float64_fit_error_gets_no_dtype_rounding():
    before, after = _report(0.0), _report(0.0)
    before["recorded"]["fits"][3]["max_error"], after["recorded"]["fits"][3]["max_error"] = 1.2, 1.2 + 1e-7
    assert json_difference(before, after) is not None


def test_fits_tied_within_their_rounding_may_swap_others_may_not():
    before, after = _report(0.0), _report(0.0)
    fits = after["recorded"]["fits"]
    fits[1], fits[2] = fits[2], fits[1]  # two float32 copies of GRPO, 3e-10 apart
    assert json_difference(before, after) is None
    fits[2], fits[3] = fits[3], fits[2]  # prompt is 0.006 behind: a real change of the ranking
    assert "ranked" in (json_difference(before, after) or "")


def test_counts_keys_and_values_of_float32_rows():
    before = _report(0.0)
    after = copy.deepcopy(before)
    after["summary"]["miles-grpo"]["advantage_cosine"] = 0.75 + 1e-7  # float32's rounding at |A| ~ 1
    assert json_difference(before, after) is None
    after["summary"]["miles-grpo"]["advantage_cosine"] = 0.75 + 1e-5
    assert json_difference(before, after) is not None
    after = copy.deepcopy(before)
    after["summary"]["miles-grpo"]["nonzero"] = 27
    assert json_difference(before, after) is not None
    after = copy.deepcopy(before)
    after["summary"]["miles-grpo"]["extra"] = 1
    assert json_difference(before, after) is not None
    after = copy.deepcopy(before)
    after["summary"]["miles-grpo"]["nonzero"] = 26.0
    assert json_difference(before, after) is not None  # a count became a float


def _outcome(report: dict, terminal: str) -> dict:
    gate = {"exit": 1, "output": json.dumps({"rules": [{"measured": 0.3072916666666667}]}), "errors": []}
    text = {"exit": 1, "output": "FAIL max batch:sign_flip_rate = 0.3073 (30.73%)", "errors": []}
    return {"exit": 0, "report": json.dumps(report), "terminal": terminal, "markdown": terminal, "gate": gate,
            "gate_text": text}  # fmt: skip


def test_outcomes_compare_every_output():
    terminal = "recorded advantages match nemo-loo (max err 0); they differ in sign from prompt on 4.2% of samples"
    before = _outcome(_report(0.0), terminal)
    assert outcome_difference(before, _outcome(_report(1.1920928955078125e-07), terminal)) is None
    changed = _outcome(_report(0.0), terminal.replace("max err 0", "max err 1.2e-07"))
    assert "terminal" in (outcome_difference(before, changed) or "")
    moved = copy.deepcopy(before)
    moved["gate_text"]["output"] = moved["gate_text"]["output"].replace("0.3073", "0.3074")
    assert outcome_difference(before, moved) is None
    moved["gate"]["exit"] = 0
    assert "gate" in (outcome_difference(before, moved) or "")
    assert outcome_difference(before, {"exit": 2, "error": "error: x"}) == "exit 0 != 2"
