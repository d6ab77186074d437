"""The HTML report: ``rollaudit compare --html FILE``, and ``Report._repr_html_`` in a notebook.

One self-contained page: the CSS, the one small script and every figure (inline SVG) are in the file, so it
opens offline, attaches to a ticket and never fetches anything. Without scripts it is the same report; the
script only makes the prompt and step tables sortable. The layout reflows to any width, the page never
scrolling sideways: column headers wrap so that tables fit (a table still too wide scrolls inside its own box),
and each figure's panels are separate SVGs in a grid, side by side on a wide screen and one under the other on a
phone, so that their text stays legible. Sizes follow the report's own width (a container query), so a notebook
cell narrower than the window gets the narrow layout too.

Every string from a dump (prompt keys, scheme strings, file names) goes through :func:`text`, which escapes
HTML and shows control characters as ``\\xNN``, so no dump can add markup, script or terminal escapes.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import visible
from .._version import __version__
from .findings import change_items, example_line, finding_line, findings_heading, named_rows, not_checked, ordered
from .text import (
    HISTOGRAM_TITLES,
    METRIC_COLUMNS,
    count,
    counts_line,
    found_lines,
    has_undefined,
    histogram_rows,
    not_auditable_groups,
    notes,
    one_line_header,
    part_lines,
    prompt_sections,
    recorded_fit_rows,
    recorded_sentence,
    rounding_line,
    sign_terms_line,
    source_line,
    trained_why,
    undefined,
    verdict_title,
    verdicts,
)
from .trend import has_trend, trend_lines, trend_section

if TYPE_CHECKING:
    import pandas as pd

    from .._audit.findings.finding import Finding
    from .._audit.report import Report

_STYLE = """
.rollaudit{--bad:#b8321a;--warn:#8a6d00;--ok:#1d6b2f;--rule:#d0d4da;--muted:#5b6470;--band:#f4f6f8;
 font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1b1f24;max-width:1640px;
 margin:0 auto;padding:16px;box-sizing:border-box;container-type:inline-size;overflow-wrap:anywhere}
.rollaudit *{box-sizing:border-box}
.rollaudit h1{font-size:1.45em;margin:0 0 .2em}.rollaudit h2{font-size:1.15em;margin:1.6em 0 .5em;
 border-bottom:1px solid var(--rule);padding-bottom:.2em}
.rollaudit p,.rollaudit li{margin:.25em 0}.rollaudit code{font:.92em ui-monospace,Menlo,Consolas,monospace;
 background:var(--band);padding:0 .25em;border-radius:3px;overflow-wrap:anywhere}
.rollaudit .muted{color:var(--muted)}.rollaudit .source{font-weight:600}
.rollaudit .verdict{background:var(--band);border-left:4px solid var(--bad);padding:.6em 1em;margin:1em 0}
.rollaudit .verdict.clean{border-left-color:var(--ok)}.rollaudit .verdict ul{margin:.3em 0;padding-left:1.2em}
.rollaudit .scroll{overflow-x:auto;max-width:100%}
.rollaudit table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:.3em 0;table-layout:auto;
 width:auto;overflow-wrap:normal}
.rollaudit th,.rollaudit td{padding:.25em .6em;border-bottom:1px solid var(--rule);text-align:right;
 white-space:nowrap}
.rollaudit thead th{white-space:normal;hyphens:manual;min-width:3.2em}
.rollaudit th:first-child,.rollaudit td:first-child{text-align:left;white-space:normal;
 overflow-wrap:break-word;min-width:5.5em;max-width:22em;position:sticky;left:0;background:#fff}
.rollaudit thead th:first-child{background:var(--band)}
.rollaudit thead th{background:var(--band);font-weight:600;vertical-align:bottom}
.rollaudit tr.reference td{color:var(--muted)}.rollaudit td.bad{color:var(--bad);font-weight:600}
.rollaudit .notes li{color:var(--warn)}.rollaudit figure{margin:.6em 0}
.rollaudit .panels{display:grid;gap:.5em 1em;grid-template-columns:repeat(auto-fill,minmax(min(100%,340px),1fr))}
.rollaudit .panels svg{width:100%;height:auto;display:block}
.rollaudit figcaption{color:var(--muted);font-size:.9em}.rollaudit figcaption b{color:#1b1f24}
.rollaudit table.sortable th button{all:unset;cursor:pointer}
.rollaudit table.sortable th button::after{content:" \\2195";color:var(--muted)}
.rollaudit .histograms{display:flex;flex-wrap:wrap;gap:1.5em}
.rollaudit .findings li.error .severity{color:var(--bad)}.rollaudit .findings li.warning .severity{color:var(--warn)}
.rollaudit tr.finding td,.rollaudit tr.finding td:first-child{background:#fbe9e5}
.rollaudit td.finding-mark{color:var(--bad);font-weight:600}
.rollaudit footer{margin-top:2em;color:var(--muted);font-size:.85em}
@container (max-width:1000px){.rollaudit table{font-size:.93em}
 .rollaudit th,.rollaudit td{padding:.2em .35em}}
@media (max-width:640px){.rollaudit{font-size:14px;padding:8px}.rollaudit th,.rollaudit td{padding:.2em .35em}}
"""

# Sorting by a column's numbers ("23.9%", "1.31×", "+0.54", "1,234"; "n/a" last); text columns by text.
_SCRIPT = """
(function(){
  function value(cell){var t=cell.textContent.trim();if(t==="n/a"||t==="")return null;
    var n=parseFloat(t.replace(/[,%×<>+]/g,""));return isNaN(n)?t.toLowerCase():n;}
  document.querySelectorAll(".rollaudit table.sortable").forEach(function(table){
    table.querySelectorAll("thead th").forEach(function(th,index){
      var button=document.createElement("button");button.type="button";
      while(th.firstChild)button.appendChild(th.firstChild);th.appendChild(button);
      button.addEventListener("click",function(){
        var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);
        var down=th.getAttribute("aria-sort")!=="descending";
        table.querySelectorAll("thead th").forEach(function(other){other.removeAttribute("aria-sort");});
        th.setAttribute("aria-sort",down?"descending":"ascending");
        rows.sort(function(a,b){var x=value(a.cells[index]),y=value(b.cells[index]);
          if(x===null)return 1;if(y===null)return -1;if(x===y)return 0;
          return (x<y?-1:1)*(down?-1:1);});
        rows.forEach(function(row){body.appendChild(row);});
      });
    });
  });
  document.documentElement.setAttribute("data-rollaudit-ready","1");
})();
"""


def text(value: Any) -> str:
    """Any value as HTML text: escaped, control characters shown as ``\\xNN``."""
    return html.escape(visible(str(value)))


def _code(value: Any) -> str:
    return f"<code>{text(value)}</code>"


def _header_cell(name: str) -> str:
    """A column header that may wrap: at its spaces and line breaks, and where a word is split by ``-\\n``
    (a soft hyphen), so that a wide table can narrow to fit its box."""
    words = one_line_header(name.replace("-\n", "\x00")).split("\x00")
    # A word joiner after each "|": browsers may otherwise break "|ΔA|" after its first bar.
    cell = "&shy;".join(text(word).replace("|", "|&#8288;") for word in words)
    return f"<th scope='col'>{cell}</th>"


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    sortable: bool = False,
    row_classes: Sequence[str] = (),
    cell_classes: Sequence[Sequence[str]] = (),
    row_titles: Sequence[str] = (),
) -> str:
    """A table in its own scrolling box; ``sortable`` ones get the script's sort buttons; a row's title shows
    where the pointer rests on it."""
    body = []
    for index, row in enumerate(rows):
        classes = row_classes[index] if index < len(row_classes) else ""
        title = row_titles[index] if index < len(row_titles) else ""
        cells = []
        for position, cell in enumerate(row):
            css = cell_classes[index][position] if index < len(cell_classes) else ""
            cells.append(f"<td{f' class={css!r}' if css else ''}>{text(cell)}</td>")
        attributes = (f" class={classes!r}" if classes else "") + (f" title='{text(title)}'" if title else "")
        body.append(f"<tr{attributes}>{''.join(cells)}</tr>")
    kind = " class='sortable'" if sortable else ""
    head = "".join(_header_cell(name) for name in header)
    return (
        f"<div class='scroll'><table{kind}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def _findings(report: Report) -> str:
    """``Findings:`` and an item a finding, its severity and code marked; nothing where there is nothing to say."""
    heading = findings_heading(report)
    if heading is None:
        return ""
    if not report.findings:
        return f"<p class='findings-not-checked'><b>Findings:</b> {text(heading.removeprefix('Findings: '))}</p>"
    items = []
    for finding in ordered(report):
        rest = finding_line(finding).removeprefix(f"{finding.severity} {finding.code}")
        example = example_line(finding)
        items.append(
            f"<li class={finding.severity!r}><b class='severity'>{text(finding.severity)}</b> {_code(finding.code)}"
            f"{text(rest)}" + (f"<br><span class='muted'>{text(example)}</span>" if example else "") + "</li>"
        )
    reason = not_checked(report)
    if reason:
        items.append(f"<li class='muted'>not checked: {text(reason)}</li>")
    return f"<p><b>Findings:</b></p><ul class='findings'>{''.join(items)}</ul>"


def _verdict(report: Report) -> str:
    lines = verdicts(report)
    clean = not report.findings and all(line.split(": ", 1)[1].startswith("same signs") for line in lines)
    items = "".join(
        f"<li><b>{text(scheme)}</b>: {text(rest)}</li>" for scheme, _, rest in (line.partition(": ") for line in lines)
    )
    title = verdict_title(report, code=lambda value: f"\x00{value}\x01")
    # The title's scheme strings become code spans once the sentence is escaped.
    title_html = text(title).replace("\\x00", "<code>").replace("\\x01", "</code>")
    rounding = rounding_line(report)
    by_part = "".join(f"<li>{text(line)}</li>" for line in part_lines(report))
    advice = "".join(
        f"<li>{text(change)}</li>" if name is None else f"<li>{_code(name)}: {text(change)}</li>"
        for name, change in change_items(report)
    )
    unaudited = "".join(
        f"<li>{', '.join(map(_code, schemes))}: {text(reason)}</li>" for schemes, reason in not_auditable_groups(report)
    )
    return (
        f"<section class='verdict{' clean' if clean else ''}'>{_findings(report)}<p><b>{title_html}</b></p>"
        f"<p class='muted'>{text(trained_why(report))}</p>"
        + (f"<ul class='parts'>{by_part}</ul>" if by_part else "")
        + f"<ul>{items}</ul>"
        + (f"<p class='muted'>{text(sign_terms_line())}</p>" if any(": sign changed on " in x for x in lines) else "")
        + (f"<p>{text(rounding)}</p>" if rounding else "")
        + (f"<p><b>What to change</b></p><ul class='advice'>{advice}</ul>" if advice else "")
        + (f"<p><b>Not auditable on this dump</b></p><ul class='notes'>{unaudited}</ul>" if unaudited else "")
        + "</section>"
    )


def _metrics(report: Report) -> str:
    if report.reference not in report.summary.index:  # nothing the dump holds could be recomputed
        warnings = "".join(f"<li>{text(line)}</li>" for line in notes(report))
        return f"<ul class='notes'>{warnings}</ul>" if warnings else ""
    columns = list(METRIC_COLUMNS) + ([("unde-\nfined", "undefined", count)] if has_undefined(report) else [])
    rows, row_classes, cell_classes = [], [], []
    for scheme, row in report.summary.iterrows():
        is_reference = scheme == report.reference
        rows.append([f"{scheme} (reference)" if is_reference else scheme, *(f(row[m]) for _, m, f in columns)])
        row_classes.append("reference" if is_reference else "")
        flipped = not is_reference and not undefined(row["sign_flip_rate"]) and row["sign_flip_rate"] > 0
        cell_classes.append(["", "bad" if flipped else "", *([""] * (len(columns) - 1))])
    reference_row = report.summary.loc[report.reference]
    caption = (
        f"non-zero under {report.reference}: {count(reference_row['nonzero_reference'])} of "
        f"{count(report.info.get('samples', 0))} samples; rates are shares of the "
        f"{count(reference_row['compared'])} compared"
    )
    header = ["scheme", *(name for name, _, _ in columns)]
    body = table(header, rows, row_classes=row_classes, cell_classes=cell_classes)
    warnings = "".join(f"<li>{text(line)}</li>" for line in notes(report))
    return (
        f"<h2>Advantages against the reference {_code(report.reference)}</h2>{body}"
        f"<p class='muted'>{text(caption)}</p>" + (f"<ul class='notes'>{warnings}</ul>" if warnings else "")
    )


def _figure(svgs: Mapping[str, tuple[str, list[str]]], name: str, caption: str) -> str:
    """A figure's panels in a grid: side by side where they fit at a legible size, one under the other where not."""
    if name not in svgs:
        return ""
    title, panels = svgs[name]
    return (
        f"<figure><figcaption><b>{text(title)}</b>. {text(caption)}</figcaption>"
        f"<div class='panels'>{''.join(panels)}</div></figure>"
    )


def _histograms(report: Report, svgs: Mapping[str, tuple[str, list[str]]]) -> str:
    if not report.histograms:
        return ""
    tables = []
    for name, title in HISTOGRAM_TITLES.items():
        sizes = report.histograms.get(name)
        if sizes:
            rows = [[label, f"{number_of:,}"] for label, number_of in histogram_rows(sizes, max_rows=12)]
            tables.append(f"<div>{table([title, 'count'], rows)}</div>")
    figure = _figure(svgs, "group_sizes", "How many samples and trajectories each prompt group holds.")
    return f"<h2>Group sizes</h2>{figure}<details><summary>As tables</summary><div class='histograms'>" + (
        "".join(tables) + "</div></details>"
    )


def _recorded(report: Report) -> str:
    if report.recorded is None:
        return ""
    sentence = recorded_sentence(report)
    title, header, rows = recorded_fit_rows(report)
    fit = f"<p>{text(title)}</p>{table(header, rows)}" if rows else ""
    return f"<h2>Recorded advantages</h2><p>{text(sentence[:1].upper() + sentence[1:])}.</p>{fit}"


def _steps(report: Report, top: int, svgs: Mapping[str, tuple[str, list[str]]]) -> str:
    steps = len(report.info.get("step_values", []))
    if not has_trend(report):
        return ""
    parts = [f"<h2>By step ({steps:,} steps)</h2>"]
    parts.append(_figure(svgs, "per_step", "Share of signs changed, non-zero inflation and group sizes per step."))
    trends = "".join(f"<li><code>{text(line)}</code></li>" for line in trend_lines(report, 120))
    parts.append(f"<ul>{trends}</ul>")
    section = trend_section(report, top)
    if section is not None:
        title, header, rows = section
        parts.append(f"<p>{text(title)}</p>{table(header, rows, sortable=True)}")
    return "".join(parts)


def _prompts(report: Report, top: int) -> str:
    # A section that repeats the one before it (the same prompts and counts) is its title alone.
    return "".join(
        f"<h2>{text(title)}</h2>{table(header, rows, sortable=True)}" if rows else f"<p>{text(title)}</p>"
        for title, header, rows in prompt_sections(report, top, fold_repeats=True)
    )


def _scatter(svgs: Mapping[str, tuple[str, list[str]]], ringed: bool = False) -> str:
    """The sample-by-sample panels; ``ringed`` where rings mark the samples a finding names."""
    caption = (
        "Each sample's advantage under a scheme against the reference's. Red crosses: reversed; "
        "yellow triangles: invented (the reference gives 0); blue: lost (the scheme gives 0); grey: same sign."
    ) + (" Black rings: the samples a finding names, its code in the legend." if ringed else "")
    figure = _figure(svgs, "advantage_scatter", caption)
    distribution = _figure(
        svgs,
        "advantage_distribution",
        "How many samples get each advantage: the scheme's filled, the reference's drawn as an outline over the "
        "same bins.",
    )
    return (f"<h2>Sample by sample</h2>{figure}" if figure else "") + (
        f"<h2>Advantage distributions</h2>{distribution}" if distribution else ""
    )


def report_body(report: Report, load: Mapping[str, Any] | None = None, top: int = 10, figures: bool = True) -> str:
    """The report as one ``<div class="rollaudit">`` (a notebook cell's output; the page's body)."""
    svgs: dict[str, tuple[str, list[str]]] = {}
    if figures:
        from .plots import panel_svgs

        svgs = panel_svgs(report)
    load = load or {}
    found = "".join(f"<li>{text(line)}</li>" for line in found_lines(report))
    header = (
        "<header><h1>rollaudit report</h1>"
        + (f"<p class='source'>{text(source_line(load))}</p>" if load.get("files") else "")
        + f"<p>{text(counts_line(report, load))}</p>"
        + (f"<ul class='muted'>{found}</ul>" if found else "")
        + "</header>"
    )
    sections = [
        header,
        _verdict(report),
        _metrics(report),
        _recorded(report),
        _histograms(report, svgs),
        _scatter(svgs, ringed=bool(named_rows(report))),
        _named_samples(report),
        _steps(report, top, svgs),
        _prompts(report, top),
    ]
    glossary = (
        f"{sign_terms_line()} Inflation: non-zero advantages against the reference's; cosine: length-weighted "
        "direction agreement (1 = same)."
    )
    footer = f"<footer><p>{text(glossary)}</p><p>rollaudit {text(__version__)}</p></footer>"
    return f"<div class='rollaudit'>{''.join(sections)}{footer}</div>"


def page(title: str, body: str) -> str:
    """A whole self-contained page: ``title`` (plain text, escaped here) and ``body`` (HTML)."""
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{text(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}<script>{_SCRIPT}</script></body></html>\n"
    )


# The mark of a row a finding names, before its codes: seen at a glance in a column of numbers.
FINDING_MARK = "◆"


def _samples_table(
    view: pd.DataFrame, rows: Sequence[int] = (), named: Mapping[int, Sequence[Finding]] | None = None
) -> str:
    """A prompt's samples as a sortable table; where a finding names some of them (``rows``: each sample's row
    number, ``named``: the findings by row), a ``finding`` column marks those with their codes, their row (class
    ``finding``) says the findings where the pointer rests, and a ``row`` column numbers every sample."""
    from .prompt_view import view_header, view_rows

    header, cells = view_header(view), view_rows(view)
    named = named or {}
    if not any(row in named for row in rows):
        return table(header, cells, sortable=True)
    marks = [named.get(row, ()) for row in rows]
    body = [
        [f"{FINDING_MARK} {', '.join(finding.code for finding in found)}" if found else "", f"{row + 1}", *sample]
        for row, found, sample in zip(rows, marks, cells, strict=True)
    ]
    legend = (
        f"<p class='muted'>{FINDING_MARK} marks the samples a finding names (its line shows where the pointer rests "
        "on the row); rows count from 1, as in the findings' lines.</p>"
    )
    return legend + table(
        ["finding", "row", *header],
        body,
        sortable=True,
        row_classes=["finding" if found else "" for found in marks],
        cell_classes=[["finding-mark" if found else "", *([""] * (len(header) + 1))] for found in marks],
        row_titles=["; ".join(finding_line(finding) for finding in found) for found in marks],
    )


def prompt_section(
    view: pd.DataFrame, rows: Sequence[int] = (), named: Mapping[int, Sequence[Finding]] | None = None
) -> str:
    """One prompt's samples (``Report.prompt``): a heading and a sortable table, the samples a finding names
    marked (see :func:`_samples_table`)."""
    from .prompt_view import view_title

    return f"<h2>{text(view_title(view))}</h2>{_samples_table(view, rows, named)}"


def _named_samples(report: Report) -> str:
    """Each finding's first example: its prompt's samples at its step, the rows the finding names marked."""
    from .prompt_view import example_view, view_title

    named = named_rows(report)
    parts = []
    for finding in ordered(report):
        shown = example_view(report, finding.examples[0]) if finding.examples else None
        if shown is None:
            continue
        view, rows = shown
        title = f"{finding.severity} {finding.code}, e.g. {view_title(view)}"
        parts.append(f"<p><b>{text(title)}</b></p>{_samples_table(view, rows, named)}")
    return f"<h2>Samples the findings name</h2>{''.join(parts)}" if parts else ""


def render_html(report: Report, load: Mapping[str, Any], top: int = 10, prompt: str | None = None) -> str:
    """The whole page of ``rollaudit compare --html``; ``prompt``: a key whose samples follow the report."""
    from .prompt_view import view_positions

    title = f"rollaudit: {source_line(load)}" if load.get("files") else "rollaudit report"
    body = report_body(report, load, top)
    if prompt is not None:
        body += prompt_section(report.prompt(prompt), view_positions(report, prompt), named_rows(report))
    return page(title, body)


def notebook_html(report: Report) -> str:
    """``Report._repr_html_``: the same content for a notebook cell, its style scoped to the report."""
    return f"<style>{_STYLE}</style>{report_body(report, top=5)}<script>{_SCRIPT}</script>"


__all__ = ["notebook_html", "page", "prompt_section", "render_html", "report_body", "table", "text"]
