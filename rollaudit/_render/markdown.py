"""The Markdown renderer: ``rollaudit compare --markdown``, which reads well pasted into a pull request.

Every table cell goes through :func:`markdown_cell`, the one escaper of the
project's Markdown (the gate's step summary uses it too): pipes escaped,
newlines folded, and HTML made inert, since GitHub renders HTML in Markdown
and a prompt key is text a dump chooses.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import visible
from .text import (
    HISTOGRAM_TITLES,
    METRIC_COLUMNS,
    advice_lines,
    count,
    counts_line,
    files_label,
    found_lines,
    has_undefined,
    histogram_rows,
    load_line,
    notes,
    one_line_header,
    prompt_sections,
    recorded_fit_rows,
    recorded_sentence,
    rounding_line,
    trained_why,
    trend_lines,
    trend_section,
    undefined,
    verdict_title,
    verdicts,
)

if TYPE_CHECKING:
    from .._audit.report import Report


class Code(str):
    """Markdown already safe as HTML: an inline code span (GitHub never renders HTML inside one)."""


def markdown_text(text: Any) -> str:
    """Plain text for Markdown: one line, HTML made inert."""
    return html.escape(visible(" ".join(str(text).split())), quote=False)


def markdown_cell(text: Any) -> str:
    """A table cell: one line, ``|`` escaped, HTML made inert (a :class:`Code` span keeps its characters)."""
    folded = visible(" ".join(str(text).split()))
    return (folded if isinstance(text, Code) else html.escape(folded, quote=False)).replace("|", "\\|")


def code(text: Any) -> Code:
    """Inline code that survives backticks in the text."""
    text = " ".join(str(text).split())
    fence = "``" if "`" in text else "`"
    return Code(f"{fence} {text} {fence}" if fence == "``" else f"`{text}`")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    align = align or ["left"] + ["right"] * (len(header) - 1)
    rule = ["---:" if side == "right" else "---" for side in align]
    lines = ["| " + " | ".join(markdown_cell(cell) for cell in header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: Report, load: Mapping[str, Any], top: int = 5) -> str:
    """The Markdown report of ``rollaudit compare --markdown``."""
    files = load.get("files", [])
    lines = [f"### rollaudit: advantages against {code(report.reference)}", ""]
    lines.append(f"{code(files_label(files))} ({load_line(load)})  ")
    lines.append(counts_line(report, load) + ("  " if found_lines(report) else ""))
    lines += [markdown_text(line) + "  " for line in found_lines(report)]
    lines[-1] = lines[-1].rstrip()
    lines += ["", f"**{verdict_title(report, code=code)}**", "", markdown_text(trained_why(report)), ""]
    for line in verdicts(report):
        scheme, _, rest = line.partition(": ")
        name = scheme.removesuffix(" (trained)")
        lines.append(f"- {code(name)}{scheme[len(name) :]}: {markdown_text(rest)}")
    lines.append("")
    rounding = rounding_line(report)
    if rounding is not None:
        lines += [markdown_text(rounding), ""]
    advice = advice_lines(report)
    if advice:
        lines += ["**What to change**", "", *(f"- {markdown_text(line)}" for line in advice), ""]
    unaudited = report.not_auditable
    if unaudited:
        lines += ["**Not auditable on this dump**", ""]
        lines += [f"- {code(scheme)}: {markdown_text(reason)}" for scheme, reason in unaudited.items()] + [""]
    columns = list(METRIC_COLUMNS) + ([("unde-\nfined", "undefined", count)] if has_undefined(report) else [])
    rows = []
    for scheme, row in report.summary.iterrows():
        label = Code(code(scheme) + (" (reference)" if scheme == report.reference else ""))
        cells = [formatter(row[metric]) for _, metric, formatter in columns]
        if scheme != report.reference and not undefined(row["sign_flip_rate"]) and row["sign_flip_rate"] > 0:
            cells[0] = f"**{cells[0]}**"
        rows.append([label, *cells])
    lines.append(markdown_table(["scheme", *(one_line_header(header) for header, _, _ in columns)], rows))
    lines.append("")
    if notes(report):
        lines += [f"- ⚠️ {markdown_text(line)}" for line in notes(report)] + [""]
    if report.recorded is not None:
        sentence = recorded_sentence(report, code=code)
        lines += [sentence[:1].upper() + sentence[1:] + ".", ""]
        title, header, fit_rows = recorded_fit_rows(report)
        if fit_rows:
            rows = [[code(row[0]), *row[1:]] for row in fit_rows]
            lines += [f"**{title}**", "", markdown_table([one_line_header(name) for name in header], rows), ""]
    if len(report.info.get("step_values", [])) > 1:
        lines += ["**Sign-flip rate by step**", ""]
        for line in trend_lines(report):
            scheme, _, rates = line.partition(":")
            lines.append(f"- {code(scheme)}: `{rates.strip()}`")
        lines.append("")
    trend = trend_section(report, top)
    if trend is not None:
        title, header, rows = trend
        lines += [f"**{title}**", "", markdown_table([one_line_header(name) for name in header], rows), ""]
    for title, header, prompt_table_rows in prompt_sections(report, top):
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
        "<sub>sign flips: share of samples whose advantage sign differs from the reference; strict: + became − "
        "or back; token flips: share of response tokens on flipped samples; inflation: non-zero advantages "
        "against the reference's; spurious: samples the reference gives 0 that got an advantage; lost: the "
        "reverse; cosine: length-weighted direction agreement (1 = same).</sub>"
    )
    return "\n".join(lines) + "\n"
