"""Gate rules on findings, as a linter's: ``fail-on`` and ``ignore`` parsed from options and config, evaluated against
reports that hold findings made by hand, rendered in every output, and the findings' JSON Schemas."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import jsonschema
import pyarrow as pa
import pytest

import rollaudit
from rollaudit import UsageError
from rollaudit._audit.findings.codes import BY_CODE, CODES, SEVERITY_ORDER
from rollaudit._audit.findings.finding import Example, Finding
from rollaudit._errors import exit_code
from rollaudit._gate.config import GateConfig, gate_config, load_gate_config, require_rules
from rollaudit._gate.evaluate import GateResult, evaluate, run_gate
from rollaudit._gate.rules import FindingRule, parse_finding_items, selected_codes
from rollaudit._render.gate import junit_xml, step_summary_markdown, to_json
from rollaudit._render.registry import json_schema

UNIFORM = Path(__file__).resolve().parents[2] / "sample_dumps" / "uniform.pt"
ALL_CODES = tuple(entry.code for entry in CODES)
ERRORS = tuple(entry.code for entry in CODES if entry.severity == "error")
WARNINGS = tuple(entry.code for entry in CODES if entry.severity == "warning")


def two_prompts() -> pa.Table:
    return rollaudit.make_table(
        reward=[0.0, 1.0, 0.0, 0.0, 1.0, 1.0], prompt=[0, 0, 1, 1, 2, 2], step=[0, 0, 0, 0, 1, 1]
    )


def shifted() -> Finding:
    return Finding(
        code="rows-misaligned",
        summary="the recorded advantages are shifted by 1 row against their rows",
        rows=6,
        groups=3,
        steps=(0, 1),
        examples=(Example(step=0, prompt=1, rows=(2, 3)),),
        detail={"k": 1},
    )


def reversed_order() -> Finding:
    return Finding(code="law-order", summary="1 pair ordered against its rewards", rows=2, groups=1, steps=(0,))


def gated(findings: list[Finding], info: dict | None = None, **options) -> GateResult:
    """The gate ``options`` make, evaluated on an audit of :func:`two_prompts` that holds ``findings``."""
    table = two_prompts()
    config = gate_config(**options)
    report = rollaudit.audit(table, ["batch", "prompt", "trajectory"], device="cpu")
    report.findings = list(findings)
    report.info.pop("findings_not_checked", None)  # made by hand: the findings given are what was found
    report.info.update(info or {})
    return evaluate(report, table, config)


def by_name(result: GateResult) -> dict:
    return {rule.name: rule for rule in result.results}


# ---------------------------------------------------------------------------------------------------------------------
# Parsing: codes, severities, all; ignore takes codes out.


def test_items_are_codes_severities_or_all_in_any_case_with_underscores():
    assert parse_finding_items("rows-misaligned") == ("rows-misaligned",)
    assert parse_finding_items(" Rows_Misaligned , warning,ALL ") == ("rows-misaligned", "warning", "all")
    assert parse_finding_items("error,error") == ("error",)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "rows-misalign",
            "--fail-on 'rows-misalign': unknown finding code 'rows-misalign' (did you mean 'rows-misaligned'?)",
        ),
        ("error,law-ordr", "unknown finding code 'law-ordr' (did you mean 'law-order'?)"),
        ("zzz", "unknown finding code 'zzz' (expected a code `rollaudit findings` lists, error, warning, note or all)"),
        ("error,", "an empty item"),
    ],
)
def test_an_unknown_item_is_one_usage_line_naming_it_and_the_nearest_code(text, expected):
    with pytest.raises(UsageError) as caught:
        parse_finding_items(text)
    line = caught.value.line()
    assert expected in line and "\n" not in line
    assert exit_code(caught.value) == 2


def test_selection_is_in_registry_order_and_ignore_takes_codes_out():
    assert selected_codes(("all",), ()) == ALL_CODES
    assert selected_codes(("law-order", "rows-misaligned"), ()) == ("rows-misaligned", "law-order")
    assert selected_codes(("error",), ()) == ERRORS
    assert selected_codes(("warning",), ()) == WARNINGS
    assert selected_codes(("note",), ()) == tuple(entry.code for entry in CODES if entry.severity == "note")
    assert selected_codes(("all",), ("warning",)) == ERRORS
    assert selected_codes(("error",), ("rows-misaligned", "law-order")) == tuple(
        code for code in ERRORS if code != "rows-misaligned"
    )
    assert selected_codes((), ("error",)) == ()


def test_gate_config_adds_options_over_the_config_and_a_fail_on_alone_is_a_rule():
    config = gate_config(fail_on="rows-misaligned,law-order")
    assert config.fail_on == ("rows-misaligned", "law-order")
    assert config.finding_rules == (FindingRule("rows-misaligned"), FindingRule("law-order"))
    assert config.finding_rules[0].name == "fail-on rows-misaligned"
    assert config.has_rules
    require_rules(config)  # no "no gate rules given"
    merged = gate_config(config, fail_on=["error"], ignore=["law-order", "nan-advantages"])
    assert merged.fail_on == ("rows-misaligned", "law-order", "error")
    assert [rule.code for rule in merged.finding_rules] == [code for code in ERRORS if code != "nan-advantages"]
    assert not gate_config(ignore="error").has_rules  # ignore alone selects nothing to fail on
    assert GateConfig().finding_rules == ()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"fail_on": ["error"], "ignore": ["error"]}, "fail-on error selects no code that ignore error leaves"),
        ({"fail_on": ["rows-misaligned"], "ignore": ["all"]}, "selects no code that ignore all leaves"),
        ({"fail_on": ["rows-misalign"]}, "--fail-on 'rows-misalign': unknown finding code"),
        ({"fail_on": ["error"], "ignore": ["law-ordr"]}, "--ignore 'law-ordr': unknown finding code 'law-ordr' (did "),
    ],
)
def test_rules_that_select_nothing_or_name_an_unknown_code_are_usage_errors(options, expected):
    with pytest.raises(UsageError) as caught:
        gate_config(**options)
    assert expected in caught.value.line()


def test_fail_on_and_ignore_from_the_config_table(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.rollaudit.gate]\nfail-on = ["error", "Law_Order"]\nignore = "nan-advantages, singleton-raw-reward"\n'
    )
    config = load_gate_config(start_dir=tmp_path)
    assert config.fail_on == ("error", "law-order") and config.ignore == ("nan-advantages", "singleton-raw-reward")
    assert [rule.code for rule in config.finding_rules] == [
        *(code for code in ERRORS if code not in config.ignore),
        "law-order",
    ]
    require_rules(config)
    # The options add to the file's, as --require does.
    assert gate_config(config, fail_on=["warning"], ignore=["law-bound"]).ignore == (
        "nan-advantages",
        "singleton-raw-reward",
        "law-bound",
    )
    dedicated = tmp_path / "gate.toml"
    dedicated.write_text('fail_on = "all"\n')
    assert load_gate_config(dedicated).finding_rules == tuple(FindingRule(code) for code in ALL_CODES)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "fail-on = ['rows-misalign']",
            "field 'fail_on': 'rows-misalign': unknown finding code 'rows-misalign' (did you mean 'rows-misaligned'?)",
        ),
        ("ignore = ['law-ordr']\nfail-on = 'all'", "field 'ignore': 'law-ordr': unknown finding code"),
        ("fail-on = [1]", "field 'fail_on': must be a string or a list of strings"),
        ("fail-on = 'error'\nignore = 'all'", "field 'fail_on': fail-on error selects no code that ignore all leaves"),
        ("fail-one = 'error'", "field 'fail-one': unknown key (did you mean 'fail_on'?)"),
    ],
)
def test_a_malformed_config_names_the_file_and_the_key(tmp_path, content, expected):
    path = tmp_path / "pyproject.toml"
    path.write_text(f"[tool.rollaudit.gate]\n{content}\n")
    with pytest.raises(UsageError) as caught:
        load_gate_config(path)
    line = caught.value.line()
    assert expected in line and str(path) in line and "\n" not in line


# ---------------------------------------------------------------------------------------------------------------------
# Evaluation against reports holding findings made by hand.


def test_a_selected_finding_fails_the_gate_with_its_summary_rows_and_fix():
    result = gated([shifted()], fail_on=["rows-misaligned"])
    assert not result.passed and result.exit_code == 1
    (rule,) = result.results
    assert (rule.name, rule.kind, rule.passed, rule.evaluated) == ("fail-on rows-misaligned", "finding", False, True)
    assert rule.measured == 6 and rule.limit == 0 and rule.limit_text == "0 rows"
    assert rule.message == (
        "the recorded advantages are shifted by 1 row against their rows: 6 rows in 3 groups at steps 0, 1; "
        "first: step 0, prompt 1, rows 3, 4; fix: join advantages to rows by key, not by position"
    )
    assert rule.finding == shifted()
    assert result.summary_line() == "gate failed: 1 of 1 rule (fail-on rows-misaligned)"
    document = rule.to_dict()
    assert document["finding"] == shifted().to_dict()


def test_ignore_passes_a_finding_fail_on_selects():
    result = gated([shifted()], fail_on=["error"], ignore=["rows-misaligned"])
    assert result.passed
    assert "fail-on rows-misaligned" not in by_name(result)
    assert all(rule.passed and rule.kind == "finding" for rule in result.results)
    assert len(result.results) == len(ERRORS) - 1
    assert by_name(result)["fail-on batch-as-group"].message == f"not found: {BY_CODE['batch-as-group'].shows}"
    assert "finding" not in result.results[0].to_dict()  # a rule that passed carries no finding


def test_a_severity_selects_every_code_of_it():
    findings = [shifted(), reversed_order()]
    errors = gated(findings, fail_on=["error"])
    assert [rule.name for rule in errors.failures] == ["fail-on rows-misaligned"]  # law-order is a warning
    warnings = gated(findings, fail_on=["warning"])
    assert [rule.name for rule in warnings.failures] == ["fail-on law-order"]
    every = gated(findings, fail_on=["all"])
    assert [rule.name for rule in every.results] == [f"fail-on {code}" for code in ALL_CODES]
    assert [rule.name for rule in every.failures] == ["fail-on rows-misaligned", "fail-on law-order"]
    assert gated(findings, fail_on=["all"], ignore=["rows-misaligned", "warning"]).passed


def test_findings_are_held_beside_the_other_rules_in_rule_order():
    result = gated(
        [reversed_order()], fail_on=["law-order"], max_rules=["batch:sign_flip_rate=1"], require=["prompt-key"]
    )
    assert [rule.name for rule in result.results] == [
        "max batch:sign_flip_rate",
        "require prompt-key",
        "fail-on law-order",
    ]
    assert [rule.passed for rule in result.results] == [True, True, False]


def test_several_findings_of_one_code_count_their_rows_and_name_the_first():
    second = Finding(code="law-order", summary="another pair", rows=3, groups=1, steps=(1,))
    (rule,) = gated([reversed_order(), second], fail_on=["law-order"]).results
    assert rule.measured == 5
    assert rule.message.startswith("1 pair ordered against its rewards: 2 rows in 1 group at step 0; fix: ")
    assert rule.message.endswith(" (and 1 more law-order finding)")


def test_findings_not_checked_are_not_evaluated():
    result = gated([], {"findings_not_checked": "nothing says which advantages"}, fail_on=["law-order", "error"])
    assert result.passed and len(result.not_evaluated) == len(result.results) == len(ERRORS) + 1
    rule = by_name(result)["fail-on law-order"]
    assert rule.message == "not evaluated: the findings could not be checked: nothing says which advantages"
    assert result.summary_line().startswith(f"gate passed: 0 rules held; {len(ERRORS) + 1} not evaluated (fail-on ")


def test_a_real_audit_without_the_run_s_advantages_does_not_pass_finding_rules_silently():
    result = run_gate(two_prompts(), gate_config(fail_on=["rows-misaligned"]), device="cpu")
    (rule,) = result.results
    assert rule.evaluated is False and "nothing says what the run trained with" in rule.message


def test_finding_rules_fail_when_the_audit_cannot_run():
    table = rollaudit.make_table(reward=[0.0, 1.0, 1.0], prompt=[0, None, 0])
    result = run_gate(table, gate_config(fail_on=["rows-misaligned"], require=["prompt-key"]), device="cpu")
    rules = by_name(result)
    assert not rules["require prompt-key"].passed
    assert not rules["fail-on rows-misaligned"].passed
    assert rules["fail-on rows-misaligned"].message.startswith("not measured: the audit could not run")


def test_every_output_shows_the_failed_finding():
    result = gated([shifted()], fail_on=["rows-misaligned", "law-order"])
    document = json.loads(to_json(result))
    jsonschema.Draft202012Validator(json.loads(json_schema("gate"))).validate(document)
    failed = next(rule for rule in document["rules"] if not rule["passed"])
    assert failed["finding"]["code"] == "rows-misaligned" and failed["finding"]["examples"][0]["rows"] == [2, 3]
    suite = ElementTree.fromstring(junit_xml(result)).find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("failures") == "1"
    case = next(case for case in suite.iter("testcase") if case.find("failure") is not None)
    assert case.get("name") == "fail-on rows-misaligned" and case.get("classname") == "rollaudit.gate.finding"
    failure = case.find("failure")
    assert failure is not None and "measured 6, limit 0 rows: the recorded advantages are shifted" in (
        failure.get("message") or ""
    )
    markdown = step_summary_markdown(result)
    assert "| fail-on rows-misaligned | 6 | 0 rows | ❌ **FAIL** |" in markdown
    assert "| fail-on law-order | 0 | 0 rows | ✅ pass |" in markdown
    assert "first: step 0, prompt 1, rows 3, 4" in markdown


# ---------------------------------------------------------------------------------------------------------------------
# The JSON Schemas of a finding.


def finding_schema(command: str) -> dict:
    return json.loads(json_schema(command))["$defs"]["finding"]


def test_the_schemas_name_exactly_the_registry_s_codes_and_severities():
    compare = finding_schema("compare")
    assert compare["properties"]["code"]["enum"] == list(ALL_CODES)
    assert compare["properties"]["severity"]["enum"] == list(SEVERITY_ORDER)
    assert finding_schema("gate") == compare  # one definition, written twice: each schema stands alone
    assert set(compare["required"]) == set(shifted().to_dict()) == set(compare["properties"])


def test_a_compare_document_with_findings_matches_its_schema():
    from typer.testing import CliRunner

    from rollaudit._cli import app

    result = CliRunner().invoke(app, ["compare", str(UNIFORM), "--json", "--no-cache"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["findings"] == []
    validator = jsonschema.Draft202012Validator(json.loads(json_schema("compare")))
    document["findings"] = [shifted().to_dict(), reversed_order().to_dict()]
    validator.validate(document)
    assert document["findings"][1]["reference"] is None  # a law has no field reference
    document["findings"][0]["code"] = "rows-misalign"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(document)
    del document["findings"]
    with pytest.raises(jsonschema.ValidationError, match="findings"):
        validator.validate(document)
