"""Renderers of a gate result: terminal table, JSON, JUnit XML, GitHub annotations and step summary.

Every function but :func:`emit_github` is pure (a result in, text out); the
CLI decides where the text goes. Messages can carry text from a dump (prompt
keys are strings a hostile file chooses), so every format escapes by its own
rules: XML by ElementTree plus removal of characters XML 1.0 cannot hold,
workflow commands by GitHub's percent-encoding, Markdown by
:func:`~rollaudit._render.markdown.markdown_cell`. Every output but JSON
shows a rule's name and message cut to :data:`QUOTED_WIDTH` characters
(:func:`quoted`): a message can quote a prompt key, and a key can be a whole
prompt.
"""

from __future__ import annotations

import json
import os
import re
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from .._errors import visible
from .._gate.evaluate import RuleResult
from .._gate.rules import format_value
from .markdown import markdown_cell

if TYPE_CHECKING:
    from rich.table import Table

    from .._gate.evaluate import GateResult

JUNIT_SUITE = "rollaudit gate"
MAX_ANNOTATIONS = 10
"""GitHub shows at most 10 error annotations per step; the rest would vanish silently."""

QUOTED_WIDTH = 500
"""Characters of a rule's name, limit or message shown by the table, the annotations, the step summary and JUnit
(the JSON document keeps them whole): a megabyte of prompt key must not make a megabyte of log or summary
(GitHub drops a step summary over 1 MiB)."""

# Characters XML 1.0 forbids even escaped (C0 controls but tab, newline, carriage return; surrogates; U+FFFE/F).
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _metric_of(result: RuleResult) -> str | None:
    """The metric a bound or baseline rule is about (for showing a rate as a percentage)."""
    return result.name.rsplit(":", 1)[1] if result.kind in ("bound", "baseline") and ":" in result.name else None


def quoted(text: str) -> str:
    """A rule's name, limit or message as an output for people quotes it: at most :data:`QUOTED_WIDTH` characters
    (each format then escapes it by its own rules)."""
    return text if len(text) <= QUOTED_WIDTH else text[: QUOTED_WIDTH - 1] + "…"


def measured_text(result: RuleResult) -> str:
    """The measured value as a person reads it."""
    return format_value(result.measured, _metric_of(result))


def _rule_count(result: GateResult) -> str:
    """``1 rule``, ``3 rules``, or ``1 of 2 rules`` (failed of all) when some failed."""
    count = len(result.results)
    noun = "rule" if count == 1 else "rules"
    return f"{len(result.failures)} of {count} {noun}" if result.failures else f"{count} {noun}"


def terminal(result: GateResult) -> Table:
    """A rich table: one row per rule with its measured value, limit, PASS/FAIL and the explanation."""
    from rich.table import Table
    from rich.text import Text

    title = f"rollaudit gate: {'PASSED' if result.passed else 'FAILED'} ({_rule_count(result)})"
    table = Table(title=title, title_justify="left", caption=f"reference: {result.reference}; {result.samples} samples")
    table.add_column("rule", overflow="fold")
    table.add_column("measured", justify="right")
    table.add_column("limit", justify="right")
    table.add_column("result", justify="center")
    table.add_column("detail", overflow="fold")
    for rule in result.results:
        if not rule.evaluated:
            verdict = Text("N/A", style="bold yellow")
        else:
            verdict = Text("PASS", style="bold green") if rule.passed else Text("FAIL", style="bold red")
        # Text(), not markup: a message may hold '[...]' from a dump, which rich would read as markup.
        cells = (quoted(rule.name), measured_text(rule), quoted(rule.limit_text))
        table.add_row(*(Text(visible(cell)) for cell in cells), verdict, Text(visible(quoted(rule.message))))
    return table


def to_json(result: GateResult) -> str:
    """The versioned JSON document (``GateResult.to_dict``); undefined values are null, never NaN."""
    return json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n"


def _xml_text(text: str) -> str:
    return _XML_INVALID.sub("\ufffd", text)


def _failure_line(rule: RuleResult) -> str:
    return f"measured {measured_text(rule)}, limit {quoted(rule.limit_text)}: {quoted(rule.message)}"


def junit_xml(result: GateResult) -> str:
    """JUnit XML: one ``<testcase>`` per rule in one ``<testsuite name="rollaudit gate">``; a failed rule has a
    ``<failure>`` whose message holds the measured value and the limit."""
    failures = len(result.failures)
    suites = ElementTree.Element("testsuites", tests=str(len(result.results)), failures=str(failures), errors="0")
    suite = ElementTree.SubElement(
        suites,
        "testsuite",
        name=JUNIT_SUITE,
        tests=str(len(result.results)),
        failures=str(failures),
        errors="0",
        skipped=str(len(result.not_evaluated)),
    )
    properties = ElementTree.SubElement(suite, "properties")
    ElementTree.SubElement(properties, "property", name="reference", value=_xml_text(result.reference))
    ElementTree.SubElement(properties, "property", name="samples", value=str(result.samples))
    for rule in result.results:
        case = ElementTree.SubElement(
            suite, "testcase", classname=f"rollaudit.gate.{rule.kind or 'rule'}", name=_xml_text(quoted(rule.name))
        )
        if not rule.evaluated:
            ElementTree.SubElement(case, "skipped", message=_xml_text(quoted(rule.message)))
        elif rule.passed:
            ElementTree.SubElement(case, "system-out").text = _xml_text(quoted(rule.message))
        else:
            failure = ElementTree.SubElement(case, "failure", message=_xml_text(_failure_line(rule)), type="GateFailed")
            failure.text = _xml_text(_failure_line(rule))
    ElementTree.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(suites, encoding="unicode") + "\n"


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does (``%``, ``\\r``, ``\\n``)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``title=...``): the message escapes plus ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(result: GateResult, max_annotations: int = MAX_ANNOTATIONS) -> list[str]:
    """``::error title=...::message`` lines for the failed rules, at most ``max_annotations``, then one
    ``::notice::`` saying how many more failed."""
    failures = result.failures
    lines = [
        f"::error title={escape_property(f'rollaudit gate: {quoted(rule.name)}')}::{escape_data(_failure_line(rule))}"
        for rule in failures[:max_annotations]
    ]
    hidden = len(failures) - len(lines)
    if hidden > 0:
        more = f"{hidden} more gate rule{'s' if hidden != 1 else ''} failed; see the job summary or the JUnit report"
        lines.append(f"::notice::{escape_data(more)}")
    return lines


def step_summary_markdown(result: GateResult) -> str:
    """Markdown for ``$GITHUB_STEP_SUMMARY``: a verdict heading, one table row per rule, failures listed."""
    heading = f"## {'✅' if result.passed else '❌'} rollaudit gate {'passed' if result.passed else 'failed'}"
    heading += f" ({_rule_count(result)})"
    lines = [
        heading,
        "",
        f"Reference: {markdown_cell(result.reference)}; {result.samples} samples.",
        "",
        "| rule | measured | limit | result |",
        "| --- | ---: | ---: | :---: |",
    ]
    for rule in result.results:
        verdict = "➖ not evaluated" if not rule.evaluated else "✅ pass" if rule.passed else "❌ **FAIL**"
        cells = (markdown_cell(quoted(text)) for text in (rule.name, measured_text(rule), rule.limit_text))
        lines.append("| " + " | ".join(cells) + f" | {verdict} |")
    if result.failures:
        lines += ["", "### Failures", ""]
        lines += [
            f"- **{markdown_cell(quoted(rule.name))}**: {markdown_cell(quoted(rule.message))}"
            for rule in result.failures
        ]
    if result.not_evaluated:
        lines += ["", "### Not evaluated", ""]
        lines += [
            f"- **{markdown_cell(quoted(rule.name))}**: {markdown_cell(quoted(rule.message))}"
            for rule in result.not_evaluated
        ]
    return "\n".join(lines) + "\n"


def emit_github(result: GateResult, environ: Mapping[str, str] | None = None, stream: TextIO | None = None) -> bool:
    """Under GitHub Actions (``GITHUB_ACTIONS=true``): print the annotations to ``stream`` (stdout) and append
    the Markdown summary to ``$GITHUB_STEP_SUMMARY`` when set. Returns whether it ran.

    Appending, not replacing: other steps of the job write to the same file.
    """
    environ = os.environ if environ is None else environ
    if environ.get("GITHUB_ACTIONS") != "true":
        return False
    stream = sys.stdout if stream is None else stream
    for line in github_annotations(result):
        print(line, file=stream)
    summary_path = environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            with open(summary_path, "a", encoding="utf-8") as summary:
                summary.write(step_summary_markdown(result))
        except OSError as error:
            # The verdict matters more than the summary: say so, keep the exit code the rules decided.
            print(f"::warning::{escape_data(f'cannot append the step summary: {error}')}", file=stream)
    return True


def emit_github_error(line: str, environ: Mapping[str, str] | None = None, stream: TextIO | None = None) -> bool:
    """Under GitHub Actions: a usage or input error (exit 2) as an ``::error`` annotation on ``stream`` (stderr,
    which the runner reads too: stdout stays empty on an error) and one line of the step summary."""
    environ = os.environ if environ is None else environ
    if environ.get("GITHUB_ACTIONS") != "true":
        return False
    stream = sys.stderr if stream is None else stream
    print(f"::error title=rollaudit::{escape_data(line)}", file=stream)
    summary_path = environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            with open(summary_path, "a", encoding="utf-8") as summary:
                summary.write(f"❌ **rollaudit could not run**: {markdown_cell(line)}\n")
        except OSError:
            pass  # the annotation and the exit code already say it
    return True


__all__ = [
    "emit_github",
    "emit_github_error",
    "escape_data",
    "escape_property",
    "github_annotations",
    "junit_xml",
    "step_summary_markdown",
    "terminal",
    "to_json",
]
