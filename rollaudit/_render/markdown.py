"""The Markdown renderer: ``rollaudit compare --markdown``, which reads well pasted into a pull request.

Text from a dump (a prompt key, a field name, a file name) goes through
:func:`markdown_text`, the one escaper of the project's Markdown (table cells
through :func:`markdown_cell`, which adds ``|``; the gate's step summary uses
both): it shows as the literal text it is. GitHub renders HTML, images, links,
``@user`` mentions and ``#1`` references in Markdown, and a prompt key is text
a dump chooses.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import log_safe, visible
from .findings import change_items, example_text, findings_heading, not_checked, ordered
from .text import (
    HISTOGRAM_TITLES,
    METRIC_COLUMNS,
    count,
    counts_line,
    files_label,
    found_lines,
    has_undefined,
    histogram_rows,
    load_line,
    not_auditable_groups,
    notes,
    one_line_header,
    part_lines,
    prompt_sections,
    recorded_fit_rows,
    recorded_sentence,
    rounding_line,
    sign_terms_line,
    trained_why,
    undefined,
    verdict_title,
    verdicts,
)
from .trend import has_trend, trend_lines, trend_section

if TYPE_CHECKING:
    from .._audit.report import Report


class Markdown(str):
    """Markdown the renderer wrote (``**bold**``, a code span): a table cell keeps its characters."""


class Code(Markdown):
    """An inline code span: GitHub renders nothing inside one (no HTML, link or mention)."""


# Characters that start Markdown syntax anywhere in a line: escapes, code, emphasis, strikethrough, links and
# images, table cells, math. An underscore inside a word (``sign_flip_rate``) starts nothing and stays as it is.
_INLINE_SYNTAX = re.compile(r"[\\`*~\[\]|$]|(?<![^\W_])_+|_+(?![^\W_])")
# Syntax at the start of a block (a list item's text): a heading, a list, a rule.
_BLOCK_START = re.compile(r"^(?:#|[-+](?=\s|[-+]|$)|(\d{1,9})(?=[.)](?:\s|$)))")
# What GitHub links after parsing, escaped or not: ``@user`` (a mention that notifies), ``#12`` (a reference),
# ``https://`` and ``www.`` (autolinks). An empty HTML comment inside each breaks the word and shows nothing.
_LINKED_WORDS = re.compile(r"(?<=@)|(?<=#)(?=\d)|(?<=:)(?=//)|(?<=\bwww)(?=\.)", re.IGNORECASE)
_BREAK = "<!-- -->"


def markdown_text(text: Any) -> str:
    """Text for Markdown that renders as exactly itself: one line, control characters shown as escapes, HTML made
    inert, Markdown syntax escaped, mentions, references and autolinks broken by an (invisible) empty comment."""
    folded = visible(" ".join(str(text).split()))
    escaped = _INLINE_SYNTAX.sub(lambda match: "".join("\\" + char for char in match.group()), folded)
    escaped = _BLOCK_START.sub(lambda match: match.group() + "\\" if match.group(1) else "\\" + match.group(), escaped)
    return _LINKED_WORDS.sub(_BREAK, html.escape(escaped, quote=False))


def markdown_cell(text: Any) -> str:
    """A table cell: :func:`markdown_text` and ``|`` escaped (:class:`Markdown` keeps its characters)."""
    if isinstance(text, Markdown):
        return visible(" ".join(text.split())).replace("|", "\\|")
    return markdown_text(text)


def code(text: Any) -> Code:
    """Inline code that survives backticks in the text: its fence is longer than any run of them inside."""
    text = " ".join(str(text).split())
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    if not longest:
        return Code(f"`{text}`")
    fence = "`" * (longest + 1)
    return Code(f"{fence} {text} {fence}")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    align = align or ["left"] + ["right"] * (len(header) - 1)
    rule = ["---:" if side == "right" else "---" for side in align]
    lines = ["| " + " | ".join(markdown_cell(cell) for cell in header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def findings_section(report: Report) -> list[str]:
    """``### Findings``: a row a finding (severity, code, summary, rows, reference), most severe first, then each
    finding's first example; one line where the findings could not be checked; nothing where there is nothing to
    say. Its lines end with a blank one."""
    heading = findings_heading(report)
    if heading is None:
        return []
    if not report.findings:
        return [markdown_text(heading), ""]
    findings = ordered(report)
    rows = [
        [finding.severity, code(finding.code), finding.summary, f"{finding.rows:,}", finding.reference]
        for finding in findings
    ]
    align = ["left", "left", "left", "right", "left"]
    lines = ["### Findings", "", markdown_table(["severity", "code", "summary", "rows", "reference"], rows, align), ""]
    examples = [(finding.code, finding.examples[0]) for finding in findings if finding.examples]
    if examples:
        lines += [f"- {code(name)}: e.g. {markdown_text(example_text(example))}" for name, example in examples] + [""]
    reason = not_checked(report)
    if reason:
        lines += [f"Not checked: {markdown_text(reason)}", ""]
    return lines


def render_markdown(report: Report, load: Mapping[str, Any], top: int = 5) -> str:
    """The Markdown report of ``rollaudit compare --markdown``."""
    files = load.get("files", [])
    lines = [f"### rollaudit: advantages against {code(report.reference)}", ""]
    lines.append(f"{code(files_label(files))} ({load_line(load)})  ")
    lines.append(counts_line(report, load) + ("  " if found_lines(report) else ""))
    lines += [markdown_text(line) + "  " for line in found_lines(report)]
    lines[-1] = lines[-1].rstrip()
    lines += ["", *findings_section(report)]
    lines += [f"**{verdict_title(report, code=code)}**", "", markdown_text(trained_why(report)), ""]
    by_part = part_lines(report)
    if by_part:
        lines += [*(f"- {markdown_text(line)}" for line in by_part), ""]
    for line in verdicts(report):
        scheme, _, rest = line.partition(": ")
        name = scheme.removesuffix(" (trained)")
        lines.append(f"- {code(name)}{scheme[len(name) :]}: {markdown_text(rest)}")
    lines.append("")
    rounding = rounding_line(report)
    if rounding is not None:
        lines += [markdown_text(rounding), ""]
    advice = [
        f"- {markdown_text(change)}" if name is None else f"- {code(name)}: {markdown_text(change)}"
        for name, change in change_items(report)
    ]
    if advice:
        lines += ["**What to change**", "", *advice, ""]
    unaudited = report.not_auditable
    if unaudited:
        lines += ["**Not auditable on this dump**", ""]
        lines += [
            f"- {', '.join(map(code, schemes))}: {markdown_text(reason)}"
            for schemes, reason in not_auditable_groups(report)
        ] + [""]
    columns = list(METRIC_COLUMNS) + ([("unde-\nfined", "undefined", count)] if has_undefined(report) else [])
    rows = []
    for scheme, row in report.summary_table.rows():
        label = Code(code(scheme) + (" (reference)" if scheme == report.reference else ""))
        cells = [formatter(row[metric]) for _, metric, formatter in columns]
        if scheme != report.reference and not undefined(row["sign_flip_rate"]) and row["sign_flip_rate"] > 0:
            cells[0] = Markdown(f"**{markdown_text(cells[0])}**")
        rows.append([label, *cells])
    if rows:
        lines += [markdown_table(["scheme", *(one_line_header(header) for header, _, _ in columns)], rows), ""]
    if notes(report):
        lines += [f"- ⚠️ {markdown_text(line)}" for line in notes(report)] + [""]
    if report.recorded is not None:
        sentence = recorded_sentence(report, code=code)
        lines += [sentence[:1].upper() + sentence[1:] + ".", ""]
        title, header, fit_rows = recorded_fit_rows(report)
        if fit_rows:
            rows = [[code(row[0]), *row[1:]] for row in fit_rows]
            lines += [f"**{title}**", "", markdown_table([one_line_header(name) for name in header], rows), ""]
    if has_trend(report):
        lines += ["**Share of signs changed, by step**", ""]
        for line in trend_lines(report):
            scheme, _, rates = line.partition(":")
            lines.append(f"- {code(scheme)}: `{rates.strip()}`")
        lines.append("")
    trend = trend_section(report, top)
    if trend is not None:
        title, header, rows = trend
        lines += [f"**{title}**", "", markdown_table([one_line_header(name) for name in header], rows), ""]
    for title, header, prompt_table_rows in prompt_sections(report, top, fold_repeats=True):
        if not prompt_table_rows:  # the rows of the table above: said in one line
            lines += [f"**{title}**", ""]
            continue
        lines += [f"**{title}**", "", markdown_table([one_line_header(name) for name in header], prompt_table_rows), ""]
    if report.histograms:
        lines += ["<details><summary>Group sizes</summary>", ""]
        for name, title in HISTOGRAM_TITLES.items():
            sizes = report.histograms.get(name)
            if sizes:
                rows = [[label, f"{number_of:,}"] for label, number_of in histogram_rows(sizes, max_rows=12)]
                lines += [markdown_table([title.split(" / ")[0] + " per " + title.split(" / ")[1], "count"], rows), ""]
        lines += ["</details>", ""]
    lines.append(
        f"<sub>{markdown_text(sign_terms_line())} tokens changed: share of response tokens on samples whose sign "
        "changed; inflation: non-zero advantages against the reference's; cosine: length-weighted direction "
        "agreement (1 = same).</sub>"
    )
    # Dump text is escaped as Markdown above; this keeps a line of it from reading as a workflow command when
    # the report is printed in a CI log.
    return log_safe("\n".join(lines) + "\n")
