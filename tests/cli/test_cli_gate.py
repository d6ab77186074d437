"""``rollaudit gate`` through the CLI: exit codes, every rule kind, baselines, config, JUnit, GitHub Actions output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rollaudit
from rollaudit._cli import app
from rollaudit._gate.rules import METRIC_NAMES
from tests.cli.test_cli import assert_one_line_error, independent_batch_vs_prompt

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
FANOUT = SAMPLES / "fanout" / "rollout_data"
FANOUT_FILE = FANOUT / "3.pt"
UNIFORM = SAMPLES / "uniform.pt"
TRL = SAMPLES / "trl"
NEMO = SAMPLES / "nemo" / "train_data_step3.jsonl"
VERL = SAMPLES / "verl" / "rollout_data"
DUMP_DETAILS = SAMPLES / "dump_details"
SIGN_FLIPS_1_PERCENT = "batch:sign_flip_rate=0.01"
FANOUT_FLIP_RATE = 21 / 88  # 21 of the fan-out dump's 88 samples change sign under batch (the 3 silent prompts)

# The gate reads GitHub's variables from the environment: unset them unless a test sets them, so that the suite
# behaves the same when it runs under GitHub Actions itself.
NOT_ON_GITHUB = {"GITHUB_ACTIONS": None, "GITHUB_STEP_SUMMARY": None}


@pytest.fixture(autouse=True)
def outside_the_repository(tmp_path, monkeypatch):
    """Run every test in an empty directory: no pyproject.toml with a gate table is found unless a test writes one."""
    monkeypatch.chdir(tmp_path)


def gate(*args: object, env: dict[str, str | None] | None = None, columns: int = 200):
    """``rollaudit gate ARGS`` in-process; an unexpected exception propagates (it is a bug)."""
    runner = CliRunner(env={"COLUMNS": str(columns), **NOT_ON_GITHUB, **(env or {})})
    return runner.invoke(app, ["gate", *(str(arg) for arg in args)], catch_exceptions=False)


def gate_json(*args: object, code: int, env: dict[str, str | None] | None = None) -> dict:
    result = gate(*args, "--json", env=env)
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    return json.loads(result.stdout)  # stdout holds the document and nothing else


def rule(document: dict, name: str) -> dict:
    matches = [entry for entry in document["rules"] if entry["name"] == name]
    assert len(matches) == 1, [entry["name"] for entry in document["rules"]]
    return matches[0]


# ---------------------------------------------------------------------------------------------------------------------
# Exit codes 0 and 1: the acceptance check on the bundled dumps.


def test_sign_flip_bound_fails_on_fanout_with_exit_1_and_names_the_measured_rate():
    result = gate(FANOUT, "--max", SIGN_FLIPS_1_PERCENT)
    assert result.exit_code == 1, result.stderr
    out = result.stdout
    assert "rollaudit gate: FAILED (1 of 1 rule)" in out
    row = next(line for line in out.splitlines() if "max batch:sign_flip_rate" in line)
    assert "0.2386 (23.86%)" in row and "<= 0.01 (1%)" in row and "FAIL" in row
    assert (
        "batch:sign_flip_rate vs prompt (what batch would do to this data) = 0.2386 (23.86%), "
        "above the maximum 0.01 (1%)" in out
    )
    assert "reference: prompt; 88 samples" in out
    assert result.stderr == "error: gate failed: 1 of 1 rule (max batch:sign_flip_rate)\n"
    # The measured value is the independent recomputation's.
    document = gate_json(FANOUT, "--max", SIGN_FLIPS_1_PERCENT, code=1)
    measured = rule(document, "max batch:sign_flip_rate")["measured"]
    assert measured == pytest.approx(FANOUT_FLIP_RATE, abs=1e-12)
    assert measured == pytest.approx(independent_batch_vs_prompt(FANOUT_FILE)["sign_flip_rate"], abs=1e-12)


def test_the_same_gate_passes_on_the_uniform_dump_with_exit_0():
    result = gate(UNIFORM, "--max", SIGN_FLIPS_1_PERCENT)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    assert "rollaudit gate: PASSED (1 rule)" in result.stdout
    row = next(line for line in result.stdout.splitlines() if "max batch:sign_flip_rate" in line)
    assert "0 (0%)" in row and "PASS" in row
    document = gate_json(UNIFORM, "--max", "batch:sign_flip_rate=1%", code=0)
    assert document["passed"] is True and document["counts"] == {"rules": 1, "failed": 0, "not_evaluated": 0}
    assert rule(document, "max batch:sign_flip_rate")["measured"] == 0


def test_table_is_120_columns_in_a_ci_log_and_follows_columns_when_set():
    # No terminal and no COLUMNS (a CI log): 120 columns, so the rule and its measured value stay on one line.
    result = gate(FANOUT, "--max", SIGN_FLIPS_1_PERCENT, env={"COLUMNS": None})
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) == 120
    assert any("max batch:sign_flip_rate │ 0.2386 (23.86%) │" in line for line in lines)
    narrow = gate(FANOUT, "--max", SIGN_FLIPS_1_PERCENT, columns=90)
    assert max(len(line) for line in narrow.stdout.splitlines()) == 90


def test_a_run_that_only_writes_a_baseline_prints_no_table(tmp_path):
    result = gate(FANOUT, "--write-baseline", tmp_path / "baseline.json")
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == f"wrote baseline {tmp_path / 'baseline.json'}\n"


def test_json_document_is_versioned_and_alone_on_stdout():
    document = gate_json(FANOUT, "--max", SIGN_FLIPS_1_PERCENT, "--max", "trajectory:nonzero_inflation=1.05", code=1)
    assert document["schema_version"] == 1
    assert document["passed"] is False and document["reference"] == "prompt" and document["samples"] == 88
    assert document["counts"] == {"rules": 2, "failed": 1, "not_evaluated": 0}
    trajectory = rule(document, "max trajectory:nonzero_inflation")
    assert trajectory["passed"] is True and trajectory["kind"] == "bound" and trajectory["limit"] == 1.05
    assert trajectory["measured"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------------------------------
# Exit code 2: usage and input errors, one line each, nothing on stdout.


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([FANOUT], "no gate rules given (no [tool.rollaudit.gate] found)"),
        (["no/such/dump.pt", "--max", SIGN_FLIPS_1_PERCENT], "no/such/dump.pt: no such file or directory"),
        ([FANOUT, "--format", "csv", "--max", SIGN_FLIPS_1_PERCENT], "unknown format 'csv'"),
        ([FANOUT, "--max", "wrong:sign_flip_rate=0.01"], "unknown scheme 'wrong'"),
        ([FANOUT, "--max", "batch:flips=0.01"], "unknown metric 'flips'"),
        ([FANOUT, "--max", "batch:sign_flip_rate"], "expected SCHEME:METRIC=LIMIT"),
        ([FANOUT, "--min", "batch:nonzero=lots"], "'lots' is not a number"),
        ([FANOUT, "--max", "batch:nonzero=5%"], "a percentage is only allowed on a rate"),
        ([FANOUT, "--max", SIGN_FLIPS_1_PERCENT, "--reference", "wrong"], "unknown scheme 'wrong'"),
        ([FANOUT, "--max", SIGN_FLIPS_1_PERCENT, "--schemes", "batch,nope"], "unknown scheme 'nope'"),
        ([FANOUT, "--require", "sorted-prompts"], "unknown requirement"),
        ([FANOUT, "--expect-recorded", "nope"], "unknown scheme 'nope'"),
        ([FANOUT, "--recorded-tolerance", "0.1"], "--recorded-tolerance needs --expect-recorded"),
        ([FANOUT, "--expect-recorded", "prompt", "--recorded-tolerance", "-1"], "must be a number >= 0"),
        ([FANOUT, "--expect-recorded", "prompt", "--recorded-tolerance", "x"], "--recorded-tolerance"),
        ([FANOUT, "--baseline", "missing.json"], "missing.json: baseline file does not exist"),
        ([FANOUT, "--baseline-tolerance", "nonzero", "--max", SIGN_FLIPS_1_PERCENT], "expected METRIC:TOLERANCE"),
        ([FANOUT, "--gate-config", "missing.toml"], "missing.toml: config file does not exist"),
        ([FANOUT, "--max", SIGN_FLIPS_1_PERCENT, "--device", "gpu"], "--device"),
        ([FANOUT, "--max", SIGN_FLIPS_1_PERCENT, "--bogus"], "No such option: --bogus"),
        (["--max", SIGN_FLIPS_1_PERCENT], "Missing argument 'DUMP'"),
    ],
)
def test_usage_and_input_errors_exit_2_with_one_line(args, fragment):
    assert fragment in assert_one_line_error(gate(*args))


def test_unreadable_config_exits_2_naming_the_file_and_key(tmp_path):
    (tmp_path / "broken.toml").write_text("max = [\n")
    assert "broken.toml: not valid TOML" in assert_one_line_error(gate(FANOUT, "--gate-config", "broken.toml"))
    (tmp_path / "pyproject.toml").write_text('[tool.rollaudit.gate]\nmaximum = ["batch:sign_flip_rate=0.01"]\n')
    line = assert_one_line_error(gate(FANOUT))
    assert "pyproject.toml: field 'maximum': unknown key (did you mean 'max'?); known: max, min" in line
    (tmp_path / "pyproject.toml").write_text('[tool.rollaudit.gate]\nmax = ["batch:sign_flip_rate=lots"]\n')
    assert "field 'max'" in assert_one_line_error(gate(FANOUT))


def test_output_paths_are_checked_before_anything_is_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(rollaudit, "load", lambda *args, **kwargs: pytest.fail("loaded before checking outputs"))
    missing = tmp_path / "missing" / "gate.xml"
    line = assert_one_line_error(gate(FANOUT, "--max", SIGN_FLIPS_1_PERCENT, "--junit", missing))
    assert "directory does not exist" in line
    assert "is a directory" in assert_one_line_error(gate(FANOUT, "--write-baseline", tmp_path))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------------
# Each rule kind.


def test_min_bound_passes_and_fails():
    # trajectory points the same way as prompt (cosine 0.9924); batch does not (0.7363).
    document = gate_json(
        FANOUT, "--min", "trajectory:advantage_cosine=0.99", "--min", "batch:advantage_cosine=0.99", code=1
    )
    trajectory = rule(document, "min trajectory:advantage_cosine")
    batch = rule(document, "min batch:advantage_cosine")
    assert trajectory["passed"] is True and trajectory["measured"] == pytest.approx(0.9924, abs=1e-4)
    assert batch["passed"] is False and batch["measured"] == pytest.approx(0.7363, abs=1e-4)
    assert "below the minimum 0.99" in batch["message"]
    assert gate(FANOUT, "--min", "trajectory:advantage_cosine=0.99").exit_code == 0


def test_bound_on_a_scheme_with_options_and_another_reference():
    # slime's legacy normalization is per prompt on the uniform dump (8 x 8) and batch-wide on the fan-out one.
    legacy = "slime-legacy(n=8):sign_flip_rate=0.01"
    assert gate(UNIFORM, "--max", legacy).exit_code == 0
    document = gate_json(FANOUT, "--max", legacy, code=1)
    assert rule(document, "max slime-legacy(n=8):sign_flip_rate")["measured"] == pytest.approx(FANOUT_FLIP_RATE)
    # Against trajectory instead of prompt: the reference is named in the result and in the message.
    document = gate_json(FANOUT, "--max", SIGN_FLIPS_1_PERCENT, "--reference", "trajectory", code=1)
    assert document["reference"] == "trajectory"
    assert "vs trajectory" in rule(document, "max batch:sign_flip_rate")["message"]


def test_expect_recorded_passes_on_the_trainers_scheme_and_names_the_best_fit_otherwise():
    assert gate(TRL, "--expect-recorded", "trl-group(n=4)").exit_code == 0
    assert gate(NEMO, "--expect-recorded", "nemo-loo").exit_code == 0
    document = gate_json(DUMP_DETAILS, "--expect-recorded", "slime-legacy(n=4)", code=0)
    assert rule(document, "expect-recorded slime-legacy(n=4)")["kind"] == "recorded"

    document = gate_json(TRL, "--expect-recorded", "prompt", code=1)
    recorded = rule(document, "expect-recorded prompt")
    assert recorded["passed"] is False
    assert "recorded advantages do not match prompt" in recorded["message"]
    assert "they match trl-group(n=4)" in recorded["message"]


def test_recorded_tolerance_is_relative_to_each_rows_group_not_the_largest_advantage():
    with pytest.warns(rollaudit.RollauditWarning, match="NaN"):  # row 18: every reward function returned None
        recorded = rollaudit.load(TRL).column("recorded_advantage").to_pylist()
    assert max(abs(value) for value in recorded if value == value) > 1  # a scaled tolerance would differ
    document = gate_json(TRL, "--expect-recorded", "trl-group(n=4)", "--recorded-tolerance", "0.01", code=0)
    found = rule(document, "expect-recorded trl-group(n=4)")
    assert found["limit"] == pytest.approx(0.01)
    assert "max(1, |A| of the row's group)" in found["limit_text"]


def test_expect_recorded_on_a_dump_without_recorded_advantages_fails_and_says_so():
    document = gate_json(FANOUT, "--expect-recorded", "prompt", code=1)
    assert "holds no recorded advantages" in rule(document, "expect-recorded prompt")["message"]


@pytest.mark.parametrize(
    ("dump", "requirement", "message"),
    [
        (TRL, "finite-rewards", "1 of 24 rewards are NaN or inf (first: row 19"),
        (NEMO, "no-singletons", "1 of 4 prompt groups have one sample"),
        (VERL, "trajectory-key", "40 of 40 samples have no trajectory key (first: row 1"),
    ],
)
def test_each_requirement_fails_where_the_data_breaks_it_and_holds_elsewhere(dump, requirement, message):
    failed = rule(gate_json(dump, "--require", requirement, code=1), f"require {requirement}")
    assert failed["kind"] == "require" and message in failed["message"]
    assert gate(FANOUT, "--require", requirement).exit_code == 0


def test_requirements_still_report_when_missing_prompt_keys_stop_the_audit(tmp_path):
    table = tmp_path / "rollouts.csv"
    table.write_text("step,uid,score\n0,a,1\n0,a,0\n0,,1\n0,b,0\n")
    document = gate_json(table, "--require", "prompt-key", "--max", SIGN_FLIPS_1_PERCENT, code=1)
    assert "1 of 4 samples have no prompt key (first: row 3" in rule(document, "require prompt-key")["message"]
    assert "not measured" in rule(document, "max batch:sign_flip_rate")["message"]
    # Nothing to store as a baseline: said on stderr, no file written.
    result = gate(table, "--require", "prompt-key", "--write-baseline", tmp_path / "baseline.json")
    assert result.exit_code == 1
    assert "baseline.json not written: the audit could not run" in result.stderr
    assert not (tmp_path / "baseline.json").exists()


def test_several_rule_kinds_in_one_run():
    document = gate_json(
        TRL,
        "--max",
        "trl-group(n=4):sign_flip_rate=0",
        "--expect-recorded",
        "trl-group(n=4)",
        "--require",
        "prompt-key",
        "--require",
        "finite-rewards",
        code=1,
    )
    kinds = [(entry["kind"], entry["passed"]) for entry in document["rules"]]
    assert kinds == [("bound", True), ("recorded", True), ("require", True), ("require", False)]


# ---------------------------------------------------------------------------------------------------------------------
# Baselines.


def test_baseline_write_then_compare_passes_on_the_same_dumps(tmp_path):
    baseline = tmp_path / "ci" / "baseline.json"
    baseline.parent.mkdir()
    written = gate(FANOUT, "--write-baseline", baseline)  # no rules: writing a baseline alone is a valid run
    assert written.exit_code == 0, written.stderr
    assert f"wrote baseline {baseline}" in written.stderr
    document = json.loads(baseline.read_text())
    assert document["kind"] == "rollaudit-baseline" and document["reference"] == "prompt"
    assert list(document["summary"]) == ["batch", "prompt", "trajectory"]
    assert document["summary"]["batch"]["sign_flip_rate"] == pytest.approx(FANOUT_FLIP_RATE)

    compared = gate_json(FANOUT, "--baseline", baseline, code=0)
    names = {entry["name"] for entry in compared["rules"]}
    assert {f"baseline {scheme}:{metric}" for scheme in document["summary"] for metric in METRIC_NAMES} == names
    assert all(entry["kind"] == "baseline" for entry in compared["rules"])


def test_baseline_fails_when_a_metric_moved_past_its_tolerance(tmp_path):
    baseline = tmp_path / "baseline.json"
    assert gate(FANOUT, "--write-baseline", baseline, "-q").stderr == ""
    args = ["--baseline", baseline, "--baseline-tolerance", "sign_flip_rate:0.5%", "--baseline-tolerance", "nonzero:5%"]
    # The uniform dump: batch's flips fell from 23.86% to 0, far past 0.5 points.
    document = gate_json(UNIFORM, *args, code=1)
    flips = rule(document, "baseline batch:sign_flip_rate")
    assert flips["passed"] is False and flips["measured"] == 0 and flips["limit"] == pytest.approx(0.005)
    assert "batch:sign_flip_rate fell from 0.2386 (23.86%) to 0 (0%)" in flips["message"]
    # Only the named metrics are checked once some are named.
    assert {entry["name"].rsplit(":", 1)[1] for entry in document["rules"]} == {"sign_flip_rate", "nonzero"}
    # The same dump passes with the same tolerances.
    assert gate(FANOUT, *args).exit_code == 0


def test_baseline_tolerance_relative_and_absolute(tmp_path):
    baseline = tmp_path / "baseline.json"
    assert gate(FANOUT, "--write-baseline", baseline).exit_code == 0
    stored = json.loads(baseline.read_text())
    stored["summary"]["batch"]["nonzero"] = 84  # now 88: a move of 4, 4.76% of 84
    baseline.write_text(json.dumps(stored))
    assert gate(FANOUT, "--baseline", baseline, "--baseline-tolerance", "nonzero:5%").exit_code == 0
    assert gate(FANOUT, "--baseline", baseline, "--baseline-tolerance", "nonzero:4").exit_code == 0
    document = gate_json(FANOUT, "--baseline", baseline, "--baseline-tolerance", "nonzero:4%", code=1)
    assert "batch:nonzero rose from 84 to 88" in rule(document, "baseline batch:nonzero")["message"]
    assert gate(FANOUT, "--baseline", baseline, "--baseline-tolerance", "nonzero:3").exit_code == 1
    assert gate(FANOUT, "--baseline", baseline).exit_code == 1  # no tolerance: nothing may move


def test_baseline_and_write_baseline_on_the_same_file_compare_first(tmp_path):
    baseline = tmp_path / "baseline.json"
    assert gate(FANOUT, "--write-baseline", baseline).exit_code == 0
    result = gate(UNIFORM, "--baseline", baseline, "--write-baseline", baseline)
    assert result.exit_code == 1  # compared against the fan-out baseline...
    assert json.loads(baseline.read_text())["samples"] == 64  # ...then overwritten with this run
    assert gate(UNIFORM, "--baseline", baseline).exit_code == 0


def test_baseline_reference_is_the_default_reference(tmp_path):
    baseline = tmp_path / "baseline.json"
    assert gate(FANOUT, "--write-baseline", baseline, "--reference", "trajectory").exit_code == 0
    assert gate_json(FANOUT, "--baseline", baseline, code=0)["reference"] == "trajectory"
    line = assert_one_line_error(gate(FANOUT, "--baseline", baseline, "--reference", "prompt"))
    assert "baseline was measured against reference 'trajectory'" in line


# ---------------------------------------------------------------------------------------------------------------------
# Configuration from pyproject.toml and --gate-config.


def test_rules_from_pyproject_in_the_working_directory(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'trainer'\n\n"
        "[tool.rollaudit.gate]\n"
        'max = ["batch:sign_flip_rate=0.01", "trajectory:nonzero_inflation=1.05"]\n'
        'require = ["prompt-key", "finite-rewards"]\n'
    )
    failed = gate_json(FANOUT, code=1)
    assert [entry["name"] for entry in failed["rules"]] == [
        "max batch:sign_flip_rate",
        "max trajectory:nonzero_inflation",
        "require prompt-key",
        "require finite-rewards",
    ]
    assert [entry["passed"] for entry in failed["rules"]] == [False, True, True, True]
    assert gate(UNIFORM).exit_code == 0
    # A --max on the same scheme and metric replaces the file's rule; others add to it.
    loosened = gate_json(FANOUT, "--max", "batch:sign_flip_rate=25%", "--require", "no-singletons", code=0)
    assert rule(loosened, "max batch:sign_flip_rate")["limit"] == 0.25
    assert len(loosened["rules"]) == 5


def test_pyproject_is_found_from_a_subdirectory_and_its_baseline_is_relative_to_it(tmp_path, monkeypatch):
    (tmp_path / "ci").mkdir()
    assert gate(FANOUT, "--write-baseline", tmp_path / "ci" / "baseline.json").exit_code == 0
    (tmp_path / "pyproject.toml").write_text(
        '[tool.rollaudit.gate]\nbaseline = "ci/baseline.json"\nbaseline-tolerance = { sign_flip_rate = "0.5%" }\n'
    )
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path / "runs")
    assert gate(FANOUT).exit_code == 0
    document = gate_json(UNIFORM, code=1)
    assert rule(document, "baseline batch:sign_flip_rate")["passed"] is False


def test_config_option_reads_a_dedicated_file(tmp_path):
    (tmp_path / "gate.toml").write_text('max = { "batch:sign_flip_rate" = 0.01 }\nexpect_recorded = "prompt"\n')
    document = gate_json(FANOUT, "--gate-config", tmp_path / "gate.toml", code=1)
    assert [entry["name"] for entry in document["rules"]] == ["max batch:sign_flip_rate", "expect-recorded prompt"]
    # A pyproject.toml named by --gate-config must hold the table.
    (tmp_path / "other.toml").write_text("[tool.other]\nx = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pyproject.toml").write_text("[tool.other]\nx = 1\n")
    line = assert_one_line_error(gate(FANOUT, "--gate-config", tmp_path / "sub" / "pyproject.toml"))
    assert "has no [tool.rollaudit.gate] table" in line


# ---------------------------------------------------------------------------------------------------------------------
# JUnit XML.


def test_junit_file_parses_with_one_test_case_per_rule_and_the_right_counts(tmp_path):
    junit = tmp_path / "reports" / "gate.xml"
    junit.parent.mkdir()
    args = [FANOUT, "--max", SIGN_FLIPS_1_PERCENT, "--max", "batch:nonzero_inflation=1.05", "--require", "prompt-key"]
    result = gate(*args, "--junit", junit)
    assert result.exit_code == 1
    assert f"wrote {junit}" in result.stderr
    root = ElementTree.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "3" and root.get("failures") == "2"
    [suite] = root.findall("testsuite")
    assert suite.get("name") == "rollaudit gate"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "3",
        "2",
        "0",
        "0",
    )
    cases = suite.findall("testcase")
    assert [case.get("name") for case in cases] == [
        "max batch:sign_flip_rate",
        "max batch:nonzero_inflation",
        "require prompt-key",
    ]
    failures = [case.find("failure") for case in cases]
    assert failures[2] is None
    assert failures[0].get("message").startswith("measured 0.2386 (23.86%), limit <= 0.01 (1%)")
    assert failures[1].get("message").startswith("measured 1.313, limit <= 1.05")
    # Passing runs write the file too, with no failure.
    assert gate(UNIFORM, "--max", SIGN_FLIPS_1_PERCENT, "--junit", junit, "-q").stderr == ""
    root = ElementTree.parse(junit).getroot()
    assert root.get("tests") == "1" and root.get("failures") == "0" and root.find(".//failure") is None


# ---------------------------------------------------------------------------------------------------------------------
# GitHub Actions: annotations and the step summary.


def annotations(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("::")]


def test_github_annotations_and_step_summary(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    result = gate(FANOUT, "--max", SIGN_FLIPS_1_PERCENT, "--max", "trajectory:nonzero_inflation=1.05", env=env)
    assert result.exit_code == 1
    assert annotations(result.stdout) == [
        "::error title=rollaudit gate%3A max batch%3Asign_flip_rate::measured 0.2386 (23.86%25), limit <= 0.01 "
        "(1%25): batch:sign_flip_rate vs prompt (what batch would do to this data) = 0.2386 (23.86%25), "
        "above the maximum 0.01 (1%25)"
    ]
    text = summary.read_text()
    assert text.startswith("# earlier step\n## ❌ rollaudit gate failed (1 of 2 rules)\n")  # appended, not replaced
    assert "Reference: prompt; 88 samples." in text
    assert "| max batch:sign_flip_rate | 0.2386 (23.86%) | &lt;= 0.01 (1%) | ❌ **FAIL** |" in text
    assert "| max trajectory:nonzero_inflation | 1 | &lt;= 1.05 | ✅ pass |" in text
    assert "### Failures" in text
    assert (
        "- **max batch:sign_flip_rate**: batch:sign_flip_rate vs prompt (what batch would do to this data) = "
        "0.2386 (23.86%), above the" in text
    )

    passed = gate(UNIFORM, "--max", SIGN_FLIPS_1_PERCENT, env=env)
    assert passed.exit_code == 0 and annotations(passed.stdout) == []
    assert summary.read_text().endswith(
        "## ✅ rollaudit gate passed (1 rule)\n\nReference: prompt; 64 samples.\n\n"
        "| rule | measured | limit | result |\n| --- | ---: | ---: | :---: |\n"
        "| max batch:sign_flip_rate | 0 (0%) | &lt;= 0.01 (1%) | ✅ pass |\n"
    )


def test_github_annotations_escape_percent_colon_comma_and_newlines(tmp_path):
    # A rule on a scheme with a comma in its options, and a baseline whose path holds %, a comma and a newline
    # (the rule's message names the path).
    folder = tmp_path / "a%b,c\nd:e"
    folder.mkdir()
    baseline = folder / "baseline.json"
    assert gate(FANOUT, "--write-baseline", baseline, "-s", "batch").exit_code == 0
    stored = json.loads(baseline.read_text())
    del stored["summary"]["batch"]["nonzero"]
    baseline.write_text(json.dumps(stored))
    summary = tmp_path / "summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    args = [FANOUT, "--max", "prompt(scale=none, singleton=raw):max_abs_diff=0", "--baseline", baseline]
    args += ["--baseline-tolerance", "nonzero:0"]
    result = gate(*args, "--json", env=env)
    assert result.exit_code == 1
    json.loads(result.stdout)  # with --json the annotations go to stderr: stdout stays one document
    lines = annotations(result.stderr)
    assert len(lines) == 2, result.stderr
    bound, missing = lines
    assert bound.startswith(
        "::error title=rollaudit gate%3A max prompt(scale=none%2C singleton=raw)%3Amax_abs_diff::measured "
    )
    assert missing.startswith("::error title=rollaudit gate%3A baseline batch%3Anonzero::")
    message = missing.split("::", 2)[2]
    assert "a%25b,c%0Ad:e" in message and "\n" not in message
    # The summary keeps each row on one line.
    rows = [line for line in summary.read_text().splitlines() if line.startswith("| baseline batch:nonzero")]
    assert len(rows) == 1


def test_at_most_ten_annotations_then_a_notice():
    metrics = [metric for metric in METRIC_NAMES if metric != "compared"][:12]
    args = [arg for metric in metrics for arg in ("--min", f"batch:{metric}=1e9")]
    result = gate(FANOUT, *args, env={"GITHUB_ACTIONS": "true"})
    assert result.exit_code == 1
    lines = annotations(result.stdout)
    assert len(lines) == 11
    assert all(line.startswith("::error title=") for line in lines[:10])
    assert lines[10] == "::notice::2 more gate rules failed; see the job summary or the JUnit report"


def test_no_github_output_outside_github_actions(tmp_path):
    summary = tmp_path / "summary.md"
    result = gate(FANOUT, "--max", SIGN_FLIPS_1_PERCENT, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 1
    assert annotations(result.stdout + result.stderr) == []
    assert not summary.exists()


# ---------------------------------------------------------------------------------------------------------------------
# Loader options reach the gate.


def test_loader_options_pass_through_to_the_gate(spy_on_load):
    seen = spy_on_load()
    args = [TRL, "--expect-recorded", "trl-group(n=4)", "--num-generations", "4", "--reward-weights", "1,1"]
    result = gate(*args, "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    assert seen["num_generations"] == 4 and seen["reward_weights"] == [1.0, 1.0]
    assert "reward_col" not in seen and "token_reduce" not in seen


# ---------------------------------------------------------------------------------------------------------------------
# The installed entry point, in real subprocesses.


def _entry_point() -> str:
    path = shutil.which("rollaudit")
    if path is None:
        pytest.skip("the rollaudit console script is not installed")
    return path


def test_entry_point_exit_codes(tmp_path):
    executable = _entry_point()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("GITHUB_")}
    environment["COLUMNS"] = "160"

    def run_gate(*args: object) -> subprocess.CompletedProcess[str]:
        command = [executable, "gate", *(str(arg) for arg in args)]
        return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=environment, timeout=120)

    failed = run_gate(FANOUT, "--max", SIGN_FLIPS_1_PERCENT)
    assert failed.returncode == 1, failed.stderr
    assert "0.2386 (23.86%)" in failed.stdout
    assert failed.stderr == "error: gate failed: 1 of 1 rule (max batch:sign_flip_rate)\n"
    passed = run_gate(UNIFORM, "--max", SIGN_FLIPS_1_PERCENT, "--json")
    assert passed.returncode == 0, passed.stderr
    assert json.loads(passed.stdout)["passed"] is True
    usage = run_gate(FANOUT, "--max", "batch:sign_flip_rate=lots")
    assert usage.returncode == 2 and usage.stdout == ""
    assert usage.stderr.startswith("error: --max 'batch:sign_flip_rate=lots': 'lots' is not a number")
    assert run_gate("missing.pt", "--max", SIGN_FLIPS_1_PERCENT).returncode == 2


def test_gate_help_imports_neither_torch_nor_matplotlib_nor_pandas():
    code = (
        "import sys\n"
        "from rollaudit._cli import main\n"
        "try:\n"
        "    main(['gate', '--help'])\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "print('HEAVY', sorted(name for name in ('torch', 'matplotlib', 'pandas') if name in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout
    for option in ("--max", "--min", "--expect-recorded", "--require", "--baseline-tolerance", "--junit"):
        assert option in result.stdout
