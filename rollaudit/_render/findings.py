"""What every renderer says of a report's findings, as plain strings: one line a finding (severity, code, summary,
reference), its first example, what to change, and which rows the findings name. The terminal, Markdown and HTML
renderers lay these out, each in its own way; a report without findings says nothing here, and reads as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._audit.findings.codes import SEVERITY_ORDER
from .._errors import visible
from .text import advice_lines, key_text

if TYPE_CHECKING:
    from .._audit.findings.finding import Example, Finding
    from .._audit.report import Report

NOT_CHECKED = "findings_not_checked"
"""The key of ``Report.info`` that says why the findings could not be checked."""
_EXAMPLE_ROWS = 6  # rows an example's line names; past these it counts them


def ordered(report: Report) -> list[Finding]:
    """The report's findings, most severe first (the detector's order kept within a severity)."""
    return sorted(report.findings, key=lambda finding: SEVERITY_ORDER[finding.severity])


# What a finding rests on where it is not the dump's own advantages: the scheme the user named, or assumed.
_EVIDENCE = {
    "given": "under the scheme given",
    "framework default": "assumed: under the framework's default scheme",
    "config": "under the scheme the run's config names",
}


def finding_line(finding: Finding) -> str:
    """``error batch-as-group: 3 of 4 steps centred as one group (slime #2204)``: the reference where it exists,
    and what the finding rests on where that is not the recorded advantages (``assumed: under the framework's
    default scheme``)."""
    notes = [note for note in (finding.reference, _EVIDENCE.get(finding.evidence)) if note]
    return visible(f"{finding.severity} {finding.code}: {finding.summary}" + "".join(f" ({note})" for note in notes))


def rows_label(rows: Sequence[int]) -> str:
    """``row 4``, ``rows 4, 5, 6``, ``rows 4, 5, 6, 7, 8, 9, … (12 rows)``: counted from 1, as every row rollaudit
    prints (the JSON keeps the 0-based row numbers)."""
    shown = ", ".join(str(row + 1) for row in rows[:_EXAMPLE_ROWS])
    more = f", … ({len(rows):,} rows)" if len(rows) > _EXAMPLE_ROWS else ""
    return ("row " if len(rows) == 1 else "rows ") + shown + more


def example_text(example: Example) -> str:
    """``step 0, prompt 7, rows 4, 5, 6``."""
    rows = f", {rows_label(example.rows)}" if example.rows else ""
    return visible(f"step {example.step}, prompt {key_text(example.prompt)}{rows}")


def example_line(finding: Finding) -> str | None:
    """``e.g. step 0, prompt 7, rows 4, 5, 6``: the finding's first example, None where it has none."""
    return f"e.g. {example_text(finding.examples[0])}" if finding.examples else None


def not_checked(report: Report) -> str | None:
    """Why the findings could not be checked, where they could not."""
    reason = report.info.get(NOT_CHECKED)
    return visible(str(reason)) if reason else None


def findings_heading(report: Report) -> str | None:
    """``Findings:`` over the findings' lines; ``Findings: not checked: <reason>`` where nothing was found because
    nothing could be checked; None where there is nothing to say."""
    if report.findings:
        return "Findings:"
    reason = not_checked(report)
    return f"Findings: not checked: {reason}" if reason else None


def change_items(report: Report) -> list[tuple[str | None, str]]:
    """``(code, what to change)``: each finding's, most severe first, then the report's advice (code None). A
    change is said once, by the first finding that names it (a finding's change is often the advice itself)."""
    items: list[tuple[str | None, str]] = []
    said: set[str] = set()
    for finding in ordered(report):
        change = visible(finding.what_to_change)
        if change not in said:
            said.add(change)
            items.append((finding.code, change))
    return items + [(None, line) for line in advice_lines(report) if line not in said]


def change_lines(report: Report) -> list[str]:
    """Every line of "What to change": each finding's led by its code, then the advice no finding says."""
    return [change if code is None else f"{code}: {change}" for code, change in change_items(report)]


def named_rows(report: Report) -> dict[int, list[Finding]]:
    """Row number (0-based, of the audited table) -> the findings whose examples name it, most severe first."""
    named: dict[int, list[Finding]] = {}
    for finding in ordered(report):
        for example in finding.examples:
            for row in example.rows:
                if finding not in named.setdefault(int(row), []):
                    named[int(row)].append(finding)
    return named
