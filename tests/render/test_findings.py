"""Findings in every output: they lead the verdict, most severe first, with an example each; what to change starts
with each finding's change; the HTML marks the samples a finding names, seen in a browser. A report with nothing to
say of findings reads as before."""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import rollaudit
from rollaudit._audit.findings.finding import Example, Finding
from rollaudit._render import plots as _plots
from rollaudit._render.findings import NOT_CHECKED
from rollaudit._render.html import prompt_section, render_html
from rollaudit._render.markdown import render_markdown
from rollaudit._render.prompt_view import view_positions
from rollaudit._render.terminal import render_compare

from .test_html import _chromium, console_messages
from .test_render import text_of

LOAD = {"format": "slime", "files": ["dump.pt"]}
FANOUT = Path(__file__).resolve().parents[2] / "sample_dumps" / "fanout"
BATCH = Finding(
    "batch-as-group",
    "1 step centred as one group over 3 prompts (12 rows)",
    rows=12,
    groups=3,
    steps=(0,),
    examples=(Example(0, 7, (0, 1, 2, 3)), Example(0, 9, (8,))),
)
ORDER = Finding(
    "law-order",
    "a higher reward got a lower advantage in 1 group",
    rows=2,
    groups=1,
    steps=(0,),
    examples=(Example(0, 8, (5, 6)),),
)


@pytest.fixture(scope="module")
def plain() -> rollaudit.Report:
    """Three prompts of four samples, audited, with nothing to say of findings."""
    table = rollaudit.make_table(
        reward=[0, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 1], prompt=[7, 7, 7, 7, 8, 8, 8, 8, 9, 9, 9, 9]
    )
    report = rollaudit.audit(table, device="cpu", keep_advantages=True)
    return replace(report, findings=[], info={key: value for key, value in report.info.items() if key != NOT_CHECKED})


def found(report: rollaudit.Report, *findings: Finding, not_checked: str | None = None) -> rollaudit.Report:
    info = {**report.info, **({NOT_CHECKED: not_checked} if not_checked else {})}
    return replace(report, findings=list(findings), info=info)


def block(text: str, first: str, last: str) -> list[str]:
    """The lines from the one starting ``first`` up to (not including) the one starting ``last``."""
    lines = [line.rstrip() for line in text.splitlines()]
    start = next(index for index, line in enumerate(lines) if line.startswith(first))
    end = next(index for index, line in enumerate(lines) if index > start and line.startswith(last))
    return lines[start:end]


def test_the_terminal_verdict_leads_with_the_findings_most_severe_first(plain):
    text = text_of(render_compare(found(plain, ORDER, BATCH), LOAD), width=100)
    assert block(text, "Findings:", "Verdict:") == [
        "Findings:",
        "- error batch-as-group: 1 step centred as one group over 3 prompts (12 rows) (slime #2204)",
        "  e.g. step 0, prompt 7, rows 1, 2, 3, 4",  # rows counted from 1, as every row rollaudit prints
        "- warning law-order: a higher reward got a lower advantage in 1 group",
        "  e.g. step 0, prompt 8, rows 6, 7",
        "",
    ]
    assert block(text, "What to change:", "Not auditable")[1:] == [
        "- batch-as-group: group by the prompt key (slime: PR #2204)",
        "- law-order: find what reorders the advantages",
    ]


def test_a_report_with_nothing_to_say_of_findings_reads_as_before(plain):
    text = text_of(render_compare(plain, LOAD), width=100)
    assert "Findings" not in text and "What to change" not in text
    lines = text.splitlines()
    assert lines[2] == "" and lines[3].startswith("Verdict: ")  # the verdict right under the header, as before
    markdown = render_markdown(plain, LOAD)
    assert "Findings" not in markdown and "\n\n**Verdict: " in markdown
    page = render_html(plain, LOAD)
    assert "Findings" not in page and "finding" not in page.split("</style>")[1]


def test_findings_that_could_not_be_checked_say_why_in_one_line(plain):
    reason = "nothing says which advantages the run trained with"
    report = found(plain, not_checked=reason)
    text = text_of(render_compare(report, LOAD), width=100)
    assert block(text, "Findings:", "Verdict:") == [f"Findings: not checked: {reason}", ""]
    assert f"\n\nFindings: not checked: {reason}\n\n**Verdict: " in render_markdown(report, LOAD)
    assert f"<b>Findings:</b> not checked: {reason}</p><p><b>Verdict: " in render_html(report, LOAD)
    # Found where something could be checked: the reason closes the list.
    text = text_of(render_compare(found(plain, BATCH, not_checked=reason), LOAD), width=100)
    assert block(text, "Findings:", "Verdict:")[-2:] == [f"- not checked: {reason}", ""]


def test_a_change_is_said_once_led_by_the_first_finding_that_names_it():
    report = rollaudit.audit(rollaudit.load(FANOUT), device="cpu", trained_with="slime-legacy(n=8)")
    (advice,) = report.advice
    same = replace(ORDER, fix=advice)  # a finding whose change is the report's own advice
    again = replace(BATCH, code="law-bound", fix=BATCH.what_to_change)  # another finding, the same change
    text = text_of(render_compare(found(report, BATCH, same, again), {}), width=400)
    assert block(text, "What to change:", "samples / prompt")[1:] == [
        "- batch-as-group: group by the prompt key (slime: PR #2204)",
        f"- law-order: {advice}",
        "",
    ]


def test_markdown_has_a_findings_section_before_the_verdict(plain):
    markdown = render_markdown(found(plain, ORDER, BATCH), LOAD)
    section = markdown[markdown.index("### Findings") : markdown.index("**Verdict: ")]
    assert section.splitlines() == [
        "### Findings",
        "",
        "| severity | code | summary | rows | reference |",
        "| --- | --- | --- | ---: | --- |",
        # GitHub would link #2204 to an issue of the repository the report is pasted in: broken, invisibly.
        "| error | `batch-as-group` | 1 step centred as one group over 3 prompts (12 rows) | 12 "
        "| slime #<!-- -->2204 |",
        "| warning | `law-order` | a higher reward got a lower advantage in 1 group | 2 |  |",
        "",
        "- `batch-as-group`: e.g. step 0, prompt 7, rows 1, 2, 3, 4",
        "- `law-order`: e.g. step 0, prompt 8, rows 6, 7",
        "",
    ]
    assert "- `batch-as-group`: group by the prompt key (slime: PR #<!-- -->2204)\n" in markdown


def test_the_html_verdict_leads_with_the_findings(plain):
    page = render_html(found(plain, ORDER, BATCH), LOAD)
    verdict = page[page.index("<section class='verdict") : page.index("</section>")]
    assert verdict.startswith("<section class='verdict'><p><b>Findings:</b></p><ul class='findings'>")
    assert verdict.index("batch-as-group") < verdict.index("law-order") < verdict.index("Verdict: ")
    assert "<li><code>batch-as-group</code>: group by the prompt key (slime: PR #2204)</li>" in verdict


def test_the_prompt_view_marks_the_samples_a_finding_names(plain):
    report = found(plain, BATCH)
    rows = view_positions(report, 7)
    assert rows == [0, 1, 2, 3]
    section = prompt_section(report.prompt(7), rows, {0: [BATCH], 2: [BATCH]})
    marked = re.findall(
        r"<tr class='finding' title='([^']*)'><td class='finding-mark'>([^<]*)</td><td>(\d+)</td>", section
    )
    assert marked == [
        (html.escape(f"error batch-as-group: {BATCH.summary} (slime #2204)"), "◆ batch-as-group", row)
        for row in ("1", "3")
    ]
    assert section.count("<tr><td>") == 2  # the two samples no finding names, unmarked
    # No finding names a sample of this prompt: the table as before, without the finding and row columns.
    assert "finding" not in prompt_section(report.prompt(8), view_positions(report, 8), {0: [BATCH]})


def test_the_scatter_rings_the_samples_a_finding_names(plain):
    report = found(plain, BATCH)
    figure = _plots.figures(report)["advantage_scatter"]
    axis = figure.axes[0]
    (rings,) = [collection for collection in axis.collections if collection.get_label().startswith("named by ")]
    assert rings.get_label() == "named by batch-as-group: 5"
    advantages = report.advantages_by_scheme()
    named = [0, 1, 2, 3, 8]
    np.testing.assert_allclose(rings.get_offsets(), np.column_stack([advantages["prompt"], advantages["batch"]])[named])
    assert "named by batch-as-group: 5" in [text.get_text() for text in axis.get_legend().get_texts()]


# The probe: what a person sees of the marked samples, as Chromium laid the page out.
_PROBE = """<script>
(function () {
  function seen(element) { var rect = element.getBoundingClientRect(); return rect.width > 0 && rect.height > 0; }
  var out = {tables: [], legends: []};
  document.querySelectorAll(".rollaudit table, body > div.scroll table").forEach(function (table) {
    var header = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
      return th.textContent.replace(/[\\u00ad\\u2060\\u2195]/g, "").trim(); });
    if (header[0] !== "finding") return;
    out.tables.push(Array.prototype.map.call(table.tBodies[0].rows, function (row) {
      var mark = row.cells[0];
      return {mark: seen(mark) ? mark.innerText.trim() : null, row: row.cells[1].innerText.trim(),
        title: row.title, background: getComputedStyle(row.cells[2]).backgroundColor,
        markColour: getComputedStyle(mark).color};
    }));
  });
  document.querySelectorAll("figure svg text").forEach(function (node) {
    if (node.textContent.indexOf("named by") === 0 && seen(node)) out.legends.push(node.textContent);
  });
  var pre = document.createElement("pre");
  pre.id = "finding-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script></body>"""


def test_a_person_sees_which_samples_a_finding_names(tmp_path, plain):
    report = found(plain, ORDER, BATCH)
    path = tmp_path / "findings.html"
    path.write_text(render_html(report, LOAD, prompt="8").replace("</body>", _PROBE), encoding="utf-8")
    result = _chromium(path, "--dump-dom", width=1280)
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_messages(result.stderr) == []
    probe = json.loads(html.unescape(re.search(r'<pre id="finding-probe">(.*?)</pre>', result.stdout).group(1)))
    # Each finding's first example (prompt 7 for batch-as-group, 8 for law-order), then the asked prompt 8.
    marks = [[(row["row"], row["mark"]) for row in table] for table in probe["tables"]]
    assert marks == [
        [("1", "◆ batch-as-group"), ("2", "◆ batch-as-group"), ("3", "◆ batch-as-group"), ("4", "◆ batch-as-group")],
        [("5", ""), ("6", "◆ law-order"), ("7", "◆ law-order"), ("8", "")],
        [("5", ""), ("6", "◆ law-order"), ("7", "◆ law-order"), ("8", "")],
    ]
    rows = probe["tables"][1]
    # Marked rows stand out from the others, their mark in its own colour; the finding shows on the row.
    assert rows[1]["background"] == rows[2]["background"] != rows[0]["background"] == rows[3]["background"]
    assert rows[1]["markColour"] != rows[0]["markColour"]
    assert rows[1]["title"] == "warning law-order: a higher reward got a lower advantage in 1 group"
    assert rows[0]["title"] == ""
    # The sample-by-sample panels ring the named samples, the code in each panel's legend.
    assert probe["legends"] == ["named by batch-as-group: 5", "named by law-order: 2"]
