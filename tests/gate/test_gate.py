"""The gate's library half: rules, parsers, config, baselines, evaluation and the CI renderers."""

from __future__ import annotations

import io
import json
import math
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pyarrow as pa
import pytest

import rollaudit
from rollaudit import GateFailed, SchemeError, UsageError
from rollaudit._audit.trained_with.fit import fit_presets, uniform_prompt_size
from rollaudit._errors import exit_code
from rollaudit._gate.baseline import read_baseline, write_baseline
from rollaudit._gate.config import GateConfig, gate_config, load_gate_config, require_rules, schemes_needed
from rollaudit._gate.evaluate import GateResult, RuleResult, check_requirements, evaluate, run_gate
from rollaudit._gate.rules import BoundRule, parse_baseline_tolerance, parse_bound, parse_recorded, parse_requirement
from rollaudit._render.gate import (
    emit_github,
    escape_data,
    escape_property,
    github_annotations,
    junit_xml,
    step_summary_markdown,
    terminal,
    to_json,
)

SAMPLE_DUMPS = Path(__file__).resolve().parents[2] / "sample_dumps"


def two_prompts() -> pa.Table:
    """Prompt 0 solved once of twice, prompt 1 never: ``batch`` flips the two zeros of prompt 1 negative."""
    return rollaudit.make_table(
        reward=[0.0, 1.0, 0.0, 0.0], prompt=[0, 0, 1, 1], trajectory=[0, 1, 2, 3], response_length=[10, 20, 30, 40]
    )


def gate(table, device: str = "cpu", **options) -> GateResult:
    return run_gate(table, gate_config(**options), device=device)


def only(result: GateResult) -> RuleResult:
    assert len(result.results) == 1, result.results
    return result.results[0]


# ---------------------------------------------------------------------------------------------------------------------
# Parsers.


def test_parse_bound_reads_scheme_metric_limit_including_scheme_options_and_percent():
    assert parse_bound("batch:sign_flip_rate=0.01", "max") == BoundRule("batch", "sign_flip_rate", "max", 0.01)
    assert parse_bound(" slime-legacy(n=8):nonzero_inflation = 1.05 ", "min") == BoundRule(
        "slime-legacy(n=8)", "nonzero_inflation", "min", 1.05
    )
    assert parse_bound("trajectory:token_flip_rate=2.5%", "max").limit == pytest.approx(0.025)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("batch:sign_flip_rate", "expected SCHEME:METRIC=LIMIT"),
        ("sign_flip_rate=0.01", "expected SCHEME:METRIC=LIMIT"),
        ("batch:flips=0.01", "unknown metric 'flips'; known: sign_flip_rate, strict_flip_rate, nonzero"),
        ("bacth:sign_flip_rate=0.01", "unknown scheme 'bacth' (did you mean 'batch'?); known: batch, prompt"),
        ("batch:sign_flip_rate=lots", "'lots' is not a number"),
        ("batch:sign_flip_rate=nan", "is not a finite number"),
        ("batch:nonzero=5%", "a percentage is only allowed on a rate"),
        ("positional:sign_flip_rate=0.1", "positional needs n"),
    ],
)
def test_parse_bound_errors_are_one_line_usage_errors(text, expected):
    with pytest.raises(UsageError) as caught:
        parse_bound(text, "max")
    line = caught.value.line()
    assert expected in line
    assert "\n" not in line
    assert line.startswith(f"--max {text!r}")
    assert exit_code(caught.value) == 2


def test_parse_requirement_accepts_the_four_names_and_underscores():
    assert [parse_requirement(name).requirement for name in ("prompt-key", "trajectory_key", "finite-rewards")] == [
        "prompt-key",
        "trajectory-key",
        "finite-rewards",
    ]
    with pytest.raises(UsageError, match=r"unknown requirement.*; known: prompt-key, trajectory-key, finite-rewards"):
        parse_requirement("singletons")


def test_baseline_tolerance_percent_is_points_on_a_rate_and_relative_on_counts():
    rate = parse_baseline_tolerance("sign_flip_rate:0.5%")
    assert (rate.value, rate.relative) == (pytest.approx(0.005), False)
    assert rate.allowed(0.9) == pytest.approx(0.005)
    count = parse_baseline_tolerance("nonzero:5%")
    assert (count.value, count.relative) == (pytest.approx(0.05), True)
    assert count.allowed(200) == pytest.approx(10.0)
    absolute = parse_baseline_tolerance("nonzero:3")
    assert (absolute.value, absolute.relative, absolute.allowed(200)) == (3.0, False, 3.0)
    assert parse_baseline_tolerance("*:1%").metric == "*"
    for bad, expected in [
        ("sign_flip_rate", "expected METRIC:TOLERANCE"),
        ("flips:1%", "unknown metric 'flips'"),
        ("nonzero:-1", "must be >= 0"),
    ]:
        with pytest.raises(UsageError, match=expected):
            parse_baseline_tolerance(bad)


def test_parse_recorded_validates_scheme_and_tolerance():
    assert parse_recorded("trl-group(n=4)").tolerance == 1e-4
    assert parse_recorded("dr-grpo", "1e-3").tolerance == 1e-3
    with pytest.raises(UsageError, match="unknown scheme 'trl'"):
        parse_recorded("trl")
    with pytest.raises(UsageError, match="must be a number >= 0"):
        parse_recorded("prompt", -1.0)


# ---------------------------------------------------------------------------------------------------------------------
# Bound rules.


def test_max_bound_fails_with_measured_rate_and_passes_when_loose():
    failed = only(gate(two_prompts(), max_rules=["batch:sign_flip_rate=0.01"]))
    assert not failed.passed
    assert failed.name == "max batch:sign_flip_rate"
    assert failed.measured == pytest.approx(0.5)
    assert failed.limit == 0.01
    assert (
        "batch:sign_flip_rate vs prompt (what batch would do to this data) = 0.5 (50%), above the maximum 0.01 (1%)"
        in failed.message
    )
    held = gate(two_prompts(), max_rules=["batch:sign_flip_rate=50%"])
    assert held.passed and only(held).measured == pytest.approx(0.5)  # the limit is inclusive


def test_min_bound_and_the_reference_option():
    result = gate(two_prompts(), min_rules=["batch:advantage_cosine=0.99", "trajectory:advantage_cosine=0.99"])
    by_name = {rule.name: rule for rule in result.results}
    assert not by_name["min batch:advantage_cosine"].passed
    assert "below the minimum 0.99" in by_name["min batch:advantage_cosine"].message
    assert by_name["min trajectory:advantage_cosine"].passed
    against_batch = only(gate(two_prompts(), reference="batch", max_rules=["prompt:spurious_nonzero=0"]))
    assert against_batch.passed  # against batch, prompt invents nothing: it removes signal
    assert "vs batch" in against_batch.message


def test_undefined_metric_fails_and_says_why():
    table = rollaudit.make_table(reward=[0.0, 1.0, 0.0, 0.0], prompt=[0, 0, 1, 1])  # no response lengths
    result = only(gate(table, max_rules=["batch:token_flip_rate=0.5"]))
    assert not result.passed and result.measured is None
    assert "undefined (the dump has no response lengths)" in result.message


def test_failing_bound_names_the_worst_step_of_a_multi_step_run():
    table = rollaudit.make_table(
        reward=[0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0], prompt=[0, 0, 1, 1, 0, 0, 1, 1], step=[1, 1, 1, 1, 2, 2, 2, 2]
    )
    result = only(gate(table, max_rules=["batch:sign_flip_rate=0.1"]))
    assert not result.passed
    assert "worst at step 2: 0.5 (50%)" in result.message


# ---------------------------------------------------------------------------------------------------------------------
# Recorded advantages.


def recorded_table(scheme: str, rewards=(1.0, 3.0, 5.0, 6.0, 2.0, 2.0), noise: float = 0.0, null_rows=()):
    plain = rollaudit.make_table(reward=list(rewards), prompt=[0, 0, 0, 1, 1, 1])
    recorded = [value + noise for value in rollaudit.recompute(plain, [scheme]).column(0).to_pylist()]
    for row in null_rows:
        recorded[row] = None
    return rollaudit.make_table(reward=list(rewards), prompt=[0, 0, 0, 1, 1, 1], recorded_advantage=recorded)


def test_expect_recorded_passes_on_the_scheme_the_trainer_used():
    result = only(gate(recorded_table("dr-grpo"), expect_recorded="dr-grpo"))
    assert result.passed and result.measured == 0.0
    assert "match dr-grpo" in result.message


def test_expect_recorded_fails_and_names_the_preset_that_matches():
    result = only(gate(recorded_table("dr-grpo"), expect_recorded="prompt"))
    assert not result.passed
    assert result.measured > 0.1
    assert "do not match prompt" in result.message
    assert "they match dr-grpo" in result.message


def test_expect_recorded_skips_null_rows_and_scales_the_tolerance():
    skipped = only(gate(recorded_table("prompt", null_rows=[0, 4]), expect_recorded="prompt"))
    assert skipped.passed and "4 of 6 samples with a recorded advantage" in skipped.message
    # float32-sized rounding on advantages in the hundreds: 5e-3 absolute, within 1e-4 of the scale.
    big = recorded_table("dr-grpo", rewards=(100.0, 300.0, 500.0, 600.0, 200.0, 200.0), noise=5e-3)
    assert only(gate(big, expect_recorded="dr-grpo")).passed
    assert not only(gate(big, expect_recorded="dr-grpo", recorded_tolerance=1e-6)).passed


def test_expect_recorded_without_recorded_advantages_fails_saying_so():
    result = only(gate(two_prompts(), expect_recorded="prompt"))
    assert not result.passed and result.measured is None
    assert "the dump holds no recorded advantages" in result.message


def test_expect_recorded_on_a_scheme_that_cannot_run_fails_instead_of_erroring():
    result = only(gate(recorded_table("prompt"), expect_recorded="trl-group(n=4)"))
    assert not result.passed
    assert "cannot run on this dump" in result.message and "they match prompt" in result.message


def test_fit_presets_ranks_the_exact_match_first_and_infers_n_from_uniform_groups():
    table = recorded_table("verl-rloo")
    assert uniform_prompt_size(table) == 3
    fits = fit_presets(table)
    assert fits[0].scheme == "verl-rloo"
    assert (fits[0].max_error, fits[0].share_within_tolerance) == (0.0, 1.0)
    assert "trl-group(n=3)" in [fit.scheme for fit in fits]
    assert fit_presets(two_prompts()) == []


# ---------------------------------------------------------------------------------------------------------------------
# Requirements.


def test_requirements_pass_on_clean_data():
    table = rollaudit.make_table(reward=[0.0, 1.0, 1.0, 1.0], prompt=[0, 0, 1, 1], trajectory=[0, 1, 2, 3])
    config = gate_config(require=["prompt-key", "trajectory-key", "finite-rewards", "no-singletons"])
    result = run_gate(table, config, device="cpu")
    assert result.passed, result.results
    assert [rule.measured for rule in result.results] == [0.0, 0.0, 0.0, 0.0]


def test_requirements_fail_with_counts_and_the_first_offender():
    table = rollaudit.make_table(
        reward=[0.0, 1.0, float("nan"), 1.0, 0.5], prompt=[0, 0, 1, 1, 2], trajectory=[0, 1, None, 3, None]
    )
    config = gate_config(require=["trajectory-key", "finite-rewards", "no-singletons"])
    trajectory, finite, singletons = run_gate(table, config, device="cpu").results
    assert not trajectory.passed and trajectory.measured == 2
    assert "2 of 5 samples have no trajectory key (first: row 3 (step 0, position 2))" in trajectory.message
    assert not finite.passed and "1 of 5 rewards are NaN or inf (first: row 3" in finite.message
    assert not singletons.passed and "1 of 3 prompt groups have one sample (first: prompt 2 at step 0)" in (
        singletons.message
    )


def test_missing_prompt_keys_fail_the_requirement_instead_of_a_usage_error():
    table = rollaudit.make_table(reward=[0.0, 1.0, 1.0, 0.0], prompt=[0, 0, None, 1])
    result = run_gate(table, gate_config(require=["prompt-key"], max_rules=["batch:sign_flip_rate=0.5"]), "cpu")
    bound, prompt_key = result.results
    assert not prompt_key.passed and "1 of 4 samples have no prompt key" in prompt_key.message
    assert not bound.passed and bound.message.startswith("not measured: the audit could not run")
    assert result.exit_code == 1
    with pytest.raises(SchemeError, match="has no prompt key"):  # without the requirement: exit 2 as before
        run_gate(table, gate_config(max_rules=["batch:sign_flip_rate=0.5"]), "cpu")


def test_check_requirements_needs_no_audit():
    table = rollaudit.make_table(reward=[0.0, float("inf")], prompt=[0, 0])
    (finite,) = check_requirements(table, gate_config(require=["finite-rewards"]))
    assert not finite.passed and "reward inf" in finite.message


# ---------------------------------------------------------------------------------------------------------------------
# Baselines.


def fresh_baseline(tmp_path: Path, table, schemes=("batch", "trajectory")) -> Path:
    report = rollaudit.audit(table, list(schemes), reference="prompt", device="cpu")
    return write_baseline(tmp_path / "baseline.json", report)


def test_baseline_write_then_compare_passes_on_the_same_dump(tmp_path):
    path = fresh_baseline(tmp_path, two_prompts())
    document = json.loads(path.read_text())
    assert document["schema_version"] == 1 and document["reference"] == "prompt"
    assert set(document["summary"]) == {"batch", "trajectory", "prompt"}
    assert document["summary"]["batch"]["sign_flip_rate"] == 0.5
    result = gate(two_prompts(), baseline=path)
    assert result.passed
    assert {rule.name for rule in result.results} >= {"baseline batch:sign_flip_rate", "baseline prompt:nonzero"}
    assert schemes_needed(gate_config(baseline=path)) == ["batch", "trajectory", "prompt"]


def test_baseline_fails_when_a_metric_moved(tmp_path):
    path = fresh_baseline(tmp_path, two_prompts())
    moved = rollaudit.make_table(reward=[0.0, 1.0, 0.0, 1.0], prompt=[0, 0, 1, 1], response_length=[10, 20, 30, 40])
    result = gate(moved, baseline=path, baseline_tolerance=["sign_flip_rate:0.5%"])
    # The new dump has no trajectory key: the baseline's trajectory row cannot be measured, and says so.
    assert [rule.name for rule in result.results] == [
        "baseline batch:sign_flip_rate",
        "baseline trajectory",
        "baseline prompt:sign_flip_rate",
    ]
    failed = result.results[0]
    assert not failed.passed and failed.measured == 0.0
    assert "batch:sign_flip_rate fell from 0.5 (50%) to 0 (0%) (moved 0.5, allowed 0.005)" in failed.message
    assert not result.results[1].evaluated and "not auditable" in result.results[1].message
    assert result.results[2].passed


def test_baseline_tolerances_follow_the_documented_syntax(tmp_path):
    path = fresh_baseline(tmp_path, two_prompts())
    document = json.loads(path.read_text())
    batch = document["summary"]["batch"]

    def compare(sign_flip_rate: float, nonzero: float) -> dict[str, bool]:
        batch.update(sign_flip_rate=sign_flip_rate, nonzero=nonzero)
        path.write_text(json.dumps(document))
        result = gate(two_prompts(), baseline=path, baseline_tolerance=["sign_flip_rate:0.5%", "nonzero:5%"])
        return {rule.name: rule.passed for rule in result.results if rule.name.startswith("baseline batch:")}

    # measured: sign_flip_rate 0.5 (0.5% = 0.005 absolute), nonzero 4 (5% of the baseline value, relative).
    assert compare(0.5 - 0.004, 4 / 1.04) == {"baseline batch:sign_flip_rate": True, "baseline batch:nonzero": True}
    assert compare(0.5 + 0.006, 4 / 1.06) == {"baseline batch:sign_flip_rate": False, "baseline batch:nonzero": False}


def test_baseline_undefined_on_both_sides_passes(tmp_path):
    table = rollaudit.make_table(reward=[1.0, 1.0, 0.0, 0.0], prompt=[0, 0, 1, 1])  # reference all zero
    path = fresh_baseline(tmp_path, table, schemes=("batch",))
    assert json.loads(path.read_text())["summary"]["batch"]["nonzero_inflation"] is None
    result = gate(table, baseline=path, baseline_tolerance=["nonzero_inflation:1%"])
    assert result.passed and "undefined in both" in result.results[0].message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "baseline file does not exist"),
        ("{not json", "baseline is not valid JSON"),
        ('{"schema_version": 1}', "not a rollaudit baseline"),
        ('{"kind": "rollaudit-baseline", "schema_version": 99}', "schema_version 99 is not supported"),
    ],
)
def test_read_baseline_errors_are_one_line(tmp_path, content, expected):
    path = tmp_path / "baseline.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError) as caught:
        read_baseline(path)
    assert expected in caught.value.line() and str(path) in caught.value.line()
    assert "\n" not in caught.value.line()


def test_baseline_reference_must_match_the_gate(tmp_path):
    path = fresh_baseline(tmp_path, two_prompts())
    assert gate_config(baseline=path).reference_name == "prompt"  # taken from the baseline
    with pytest.raises(UsageError, match="baseline was measured against reference 'prompt'"):
        gate_config(baseline=path, reference="batch")


# ---------------------------------------------------------------------------------------------------------------------
# Configuration.

PYPROJECT = """
[project]
name = "trainer"

[tool.rollaudit.gate]
max = ["batch:sign_flip_rate=0.01"]
min = { "trajectory:advantage_cosine" = 0.5 }
require = ["prompt-key", "finite_rewards"]
reference = "prompt"
expect-recorded = "dr-grpo"
recorded_tolerance = 1e-3
schemes = "batch, dr-grpo"
baseline = "ci/baseline.json"
baseline_tolerance = { sign_flip_rate = "0.5%", nonzero = "5%" }
"""


def test_config_from_pyproject_found_in_a_parent_directory(tmp_path):
    (tmp_path / "ci").mkdir()
    fresh_baseline(tmp_path / "ci", two_prompts())
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    deeper = tmp_path / "runs" / "rollout_data"
    deeper.mkdir(parents=True)
    (tmp_path / "runs" / "pyproject.toml").write_text("[project]\nname = 'no gate here'\n")  # skipped: no table
    config = load_gate_config(start_dir=deeper)
    assert config.source == str(tmp_path / "pyproject.toml")
    assert [rule.name for rule in config.bounds] == ["max batch:sign_flip_rate", "min trajectory:advantage_cosine"]
    assert [rule.requirement for rule in config.requirements] == ["prompt-key", "finite-rewards"]
    assert config.recorded is not None and (config.recorded.scheme, config.recorded.tolerance) == ("dr-grpo", 1e-3)
    assert config.baseline is not None and config.baseline.path == str(tmp_path / "ci" / "baseline.json")
    assert {tolerance.metric: tolerance.relative for tolerance in config.baseline_tolerances} == {
        "sign_flip_rate": False,
        "nonzero": True,
    }
    assert schemes_needed(config) == ["batch", "dr-grpo", "trajectory", "prompt"]
    # CLI values merge over it: same rule replaced, new ones added.
    merged = gate_config(config, max_rules=["batch:sign_flip_rate=0.6", "batch:nonzero=3"])
    assert [(rule.name, rule.limit) for rule in merged.bounds] == [
        ("max batch:sign_flip_rate", 0.6),
        ("min trajectory:advantage_cosine", 0.5),
        ("max batch:nonzero", 3.0),
    ]
    result = run_gate(two_prompts(), merged, device="cpu")
    assert result.results[0].passed and not result.results[2].passed


def test_explicit_config_file_with_top_level_keys(tmp_path):
    path = tmp_path / "gate.toml"
    path.write_text(
        'max = [{ scheme = "batch", metric = "sign_flip_rate", limit = 0.01 }]\nrequire = "no-singletons"\n'
    )
    config = load_gate_config(path)
    assert config.bounds == (BoundRule("batch", "sign_flip_rate", "max", 0.01),)
    result = run_gate(two_prompts(), config, device="cpu")
    assert [rule.passed for rule in result.results] == [False, True]


def test_no_config_and_no_rules_is_a_usage_error(tmp_path):
    config = load_gate_config(start_dir=tmp_path)
    assert config == GateConfig()
    with pytest.raises(UsageError, match="no gate rules given"):
        require_rules(config)
    require_rules(config, writing_baseline=True)  # writing a baseline alone is a valid run
    assert schemes_needed(config) == ["batch", "prompt", "trajectory"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("[tool.rollaudit.gate]\nmax = [", "not valid TOML"),
        (
            "[tool.rollaudit.gate]\nmaximum = ['batch:sign_flip_rate=0.01']",
            "field 'maximum': unknown key (did you mean 'max'?); known: max",
        ),
        ("[tool.rollaudit.gate]\nmax = ['batch:flips=0.01']", "field 'max': 'batch:flips=0.01': unknown metric"),
        ("[tool.rollaudit.gate]\nmax = 3", "field 'max': must be a list of SCHEME:METRIC=LIMIT strings"),
        ("[tool.rollaudit.gate]\nrequire = [1]", "field 'require': must be a string or a list of strings"),
        ("[tool.rollaudit.gate]\nreference = 'bacth'", "field 'reference': 'bacth': unknown scheme 'bacth'"),
        ("[tool.rollaudit.gate]\nbaseline = 'missing.json'", "missing.json: baseline file does not exist"),
        ("[tool.rollaudit.gate]\nrecorded_tolerance = 1e-3", "field 'recorded_tolerance': is set but expect_recorded"),
        ("[project]\nname = 'x'", "has no [tool.rollaudit.gate] table"),
    ],
)
def test_malformed_config_names_the_file_and_the_key(tmp_path, content, expected):
    path = tmp_path / "pyproject.toml"
    path.write_text(content)
    with pytest.raises(UsageError) as caught:
        load_gate_config(path)
    line = caught.value.line()
    assert expected in line
    assert str(tmp_path) in line and "\n" not in line
    assert exit_code(caught.value) == 2


def test_missing_config_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="config file does not exist"):
        load_gate_config(tmp_path / "nope.toml")


# ---------------------------------------------------------------------------------------------------------------------
# Results and exit codes.


def test_result_exit_codes_and_gate_failed():
    passed = gate(two_prompts(), max_rules=["trajectory:sign_flip_rate=0"])
    assert passed.passed and passed.exit_code == 0 and passed.failures == []
    passed.raise_for_failures()
    failed = gate(two_prompts(), max_rules=["trajectory:sign_flip_rate=0", "batch:sign_flip_rate=0"])
    assert failed.exit_code == 1 and [rule.name for rule in failed.failures] == ["max batch:sign_flip_rate"]
    with pytest.raises(GateFailed) as caught:
        failed.raise_for_failures()
    assert exit_code(caught.value) == 1
    assert "gate failed: 1 of 2 rules (max batch:sign_flip_rate)" in caught.value.line()


def test_the_failed_line_counts_rules_in_good_grammar():
    one = gate(two_prompts(), max_rules=["batch:sign_flip_rate=0"])
    assert one.summary_line() == "gate failed: 1 of 1 rule (max batch:sign_flip_rate)"
    rules = ["batch:sign_flip_rate=0", "batch:spurious_nonzero=0", "prompt:sign_flip_rate=0"]
    two = gate(two_prompts(), max_rules=rules)
    assert two.summary_line() == "gate failed: 2 of 3 rules (max batch:sign_flip_rate, max batch:spurious_nonzero)"


def test_result_document_is_versioned_json():
    result = gate(two_prompts(), max_rules=["batch:sign_flip_rate=0.01"], expect_recorded="prompt")
    document = json.loads(to_json(result))
    assert document["schema_version"] == 1 and document["passed"] is False
    assert document["counts"] == {"rules": 2, "failed": 2, "not_evaluated": 0}
    assert document["rules"][0]["measured"] == 0.5 and document["rules"][1]["measured"] is None


def test_evaluate_rejects_a_report_missing_the_schemes():
    table = two_prompts()
    report = rollaudit.audit(table, ["trajectory"], device="cpu")
    with pytest.raises(UsageError, match="the report has no scheme 'batch'"):
        evaluate(report, table, gate_config(max_rules=["batch:sign_flip_rate=0.01"]))


# ---------------------------------------------------------------------------------------------------------------------
# Renderers.


def hostile_result(failures: int = 1) -> GateResult:
    rules = [RuleResult("max batch:sign_flip_rate", True, 0.0, 0.01, "fine", "bound", "<= 0.01")]
    rules += [
        RuleResult(f"rule {index}: 50%, odd\nname", False, 0.5, 0.01, "100% <b>|bad|</b>\r\n::set-env x\x01", "bound")
        for index in range(failures)
    ]
    return GateResult(tuple(rules), reference="prompt", samples=4)


def test_junit_xml_parses_with_the_right_counts():
    result = gate(two_prompts(), max_rules=["batch:sign_flip_rate=0.01", "trajectory:sign_flip_rate=0"])
    root = ElementTree.fromstring(junit_xml(result).encode())
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "rollaudit gate"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    cases = suite.findall("testcase")
    assert [case.get("name") for case in cases] == ["max batch:sign_flip_rate", "max trajectory:sign_flip_rate"]
    failure = cases[0].find("failure")
    assert failure is not None and cases[1].find("failure") is None
    assert "measured 0.5 (50%), limit <= 0.01 (1%)" in failure.get("message")


def test_junit_xml_survives_hostile_text():
    root = ElementTree.fromstring(junit_xml(hostile_result(3)).encode())
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("4", "3")
    assert "100% <b>|bad|</b>" in suite.findall("testcase")[1].find("failure").get("message")


def test_annotation_escaping_of_percent_colon_comma_and_newlines():
    assert escape_data("50%\r\nnext") == "50%25%0D%0Anext"
    assert escape_property("a: b, 5%\n") == "a%3A b%2C 5%25%0A"
    (line,) = github_annotations(hostile_result(1))
    title, message = line.removeprefix("::error title=").split("::", 1)
    assert title == "rollaudit gate%3A rule 0%3A 50%25%2C odd%0Aname"
    assert message == "measured 0.5, limit : 100%25 <b>|bad|</b>%0D%0A::set-env x\x01"
    assert "\n" not in line and "\r" not in line


def test_at_most_ten_annotations_then_a_notice():
    lines = github_annotations(hostile_result(13))
    assert len(lines) == 11
    assert all(line.startswith("::error title=") for line in lines[:10])
    assert lines[10] == "::notice::3 more gate rules failed; see the job summary or the JUnit report"
    assert github_annotations(hostile_result(0)) == []


def test_step_summary_is_appended_under_github_actions(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    result = gate(two_prompts(), max_rules=["batch:sign_flip_rate=0.01", "trajectory:sign_flip_rate=0"])
    stream = io.StringIO()
    environ = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    assert emit_github(result, environ, stream)
    assert stream.getvalue().startswith("::error title=rollaudit gate%3A max batch%3Asign_flip_rate::")
    text = summary.read_text()
    assert text.startswith("# earlier step\n## ❌ rollaudit gate failed (1 of 2 rules)\n")
    assert "| rule | measured | limit | result |" in text
    assert "| max batch:sign_flip_rate | 0.5 (50%) | &lt;= 0.01 (1%) | ❌ **FAIL** |" in text
    assert "| max trajectory:sign_flip_rate | 0 (0%) | &lt;= 0 (0%) | ✅ pass |" in text
    assert (
        "- **max batch:sign_flip_rate**: batch:sign_flip_rate vs prompt (what batch would do to this data) = 0.5 (50%)"
        in text
    )
    outside = io.StringIO()
    assert not emit_github(result, {"GITHUB_STEP_SUMMARY": str(summary)}, outside)
    assert outside.getvalue() == "" and summary.read_text() == text


def test_step_summary_escapes_table_cells():
    text = step_summary_markdown(hostile_result(1))
    row = next(line for line in text.splitlines() if line.startswith("| rule 0"))
    assert row.startswith("| rule 0: 50%, odd name |")  # one line, whatever the name held
    assert "100% &lt;b&gt;\\|bad\\|&lt;/b&gt;" in text


def test_terminal_table_shows_every_rule():
    result = gate(two_prompts(), max_rules=["batch:sign_flip_rate=0.01", "trajectory:sign_flip_rate=0"])
    text = plain_text(result)
    assert "rollaudit gate: FAILED (1 of 2 rules)" in text
    assert "max batch:sign_flip_rate" in text and "0.5 (50%)" in text and "FAIL" in text and "PASS" in text


# ---------------------------------------------------------------------------------------------------------------------
# Acceptance on the bundled dumps.


def sample_dump(relative: str) -> Path:
    path = SAMPLE_DUMPS / relative
    if not path.exists():
        pytest.skip(f"{relative} not bundled yet")
    return path


def test_fanout_dump_fails_a_one_percent_batch_flip_bound_naming_the_rate():
    table = rollaudit.load(sample_dump("fanout/rollout_data"))
    result = gate(table, max_rules=["batch:sign_flip_rate=0.01"])
    rule = only(result)
    assert result.exit_code == 1 and not rule.passed
    assert math.isclose(rule.measured, 21 / 88)
    assert (
        "batch:sign_flip_rate vs prompt (what batch would do to this data) = 0.2386 (23.86%), "
        "above the maximum 0.01 (1%)" in rule.message
    )


def test_the_legacy_behaviour_gate_passes_on_the_uniform_dump_and_fails_on_fanout():
    # slime's legacy normalization is per-prompt when every prompt has n samples, batch-wide otherwise.
    config = gate_config(max_rules=["slime-legacy(n=8):sign_flip_rate=0.01"])
    uniform = run_gate(rollaudit.load(sample_dump("uniform.pt")), config, device="cpu")
    assert uniform.passed and only(uniform).measured == 0.0
    fanout = run_gate(rollaudit.load(sample_dump("fanout/rollout_data")), config, device="cpu")
    assert not fanout.passed and "23.86%" in only(fanout).message


@pytest.mark.filterwarnings("ignore::rollaudit.RollauditWarning")  # the sample's unscorable row, on purpose
def test_baseline_of_a_dump_with_recorded_advantages_reads_back(tmp_path):
    table = rollaudit.load(sample_dump("trl/completions/completions_00010.parquet"))
    config = gate_config(GateConfig(), max_rules=["batch:sign_flip_rate=1"])
    result = run_gate(table, config, device="cpu")
    path = write_baseline(tmp_path / "baseline.json", result.report)
    baseline = read_baseline(path)
    assert "recorded" not in baseline.summary and "batch" in baseline.summary


def plain_text(result):
    """The gate's terminal table as plain text (no colour, fixed width), as a log shows it."""
    import io

    from rich.console import Console

    console = Console(width=120, color_system=None, force_terminal=False, record=True, file=io.StringIO())
    console.print(terminal(result))
    return console.export_text()
