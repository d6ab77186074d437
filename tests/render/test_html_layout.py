"""The HTML report laid out by a real browser at a phone's, a notebook's, a laptop's and a large screen's width.

A probe script appended to the page measures what Chromium laid out (the page's scroll width, each table against
its scroll box and the viewport, each figure's rendered width and the size its smallest text is drawn at) and
writes it into the DOM, which ``--dump-dom`` returns. The rules are the ones a reader sees: the page never scrolls
sideways; a table fits, or scrolls inside its own box only (never wider than the viewport); on a screen of 1280 px
or more every table fits whole; figures never shrink below legible text, their panels stacking on a phone.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

import rollaudit
from rollaudit._render.html import notebook_html, render_html

from .test_html import _chromium, console_messages

ROOT = Path(__file__).resolve().parents[2]
DUMPS = ROOT / "sample_dumps"
RUN = [DUMPS / "fanout", DUMPS / "dump_details", DUMPS / "uniform.pt"]
WIDTHS = [390, 900, 1280, 1920]
# A figure's smallest text (legend entries) drawn smaller than this many CSS pixels cannot be read.
MIN_TEXT_PX = 7.0
# Tick labels and titles: the text a reader reads first.
MIN_TICK_TEXT_PX = 9.0

_PROBE = """<script>
(function () {
  var view = window.innerWidth;
  var out = {viewport: view, page: document.documentElement.scrollWidth, tables: [], figures: []};
  var report = document.querySelector(".rollaudit");
  out.report = report.getBoundingClientRect().width;
  document.querySelectorAll(".rollaudit table").forEach(function (table) {
    var rect = table.getBoundingClientRect();
    if (rect.width === 0) return;  // in a closed <details>: not shown
    var box = table.parentElement, boxRect = box.getBoundingClientRect();
    var scrolls = box.scrollWidth > box.clientWidth + 1;
    var shownRight = Math.min(boxRect.right, view);
    var hidden = [];
    table.querySelectorAll("thead th").forEach(function (th) {
      if (th.getBoundingClientRect().right > shownRight + 1) hidden.push(th.textContent.trim());
    });
    out.tables.push({
      // Soft hyphens and word joiners are where a header may or may not wrap: not part of its text.
      header: Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.textContent.replace(/[\\u00ad\\u2060]/g, "").replace(/\\s+/g, " ").trim();
      }).join(" | "),
      width: rect.width, box: boxRect.width, boxLeft: boxRect.left, boxRight: boxRect.right,
      overflow: getComputedStyle(box).overflowX, scrolls: scrolls, hidden: hidden});
  });
  document.querySelectorAll(".rollaudit figure svg").forEach(function (svg) {
    var rect = svg.getBoundingClientRect(), sizes = [];
    svg.querySelectorAll("text").forEach(function (node) {
      if (!node.textContent.trim()) return;
      var matrix = node.getScreenCTM();
      sizes.push(parseFloat(getComputedStyle(node).fontSize) * Math.hypot(matrix.a, matrix.b));
    });
    sizes.sort(function (a, b) { return a - b; });
    out.figures.push({label: svg.getAttribute("aria-label"), width: rect.width, left: rect.left,
      right: rect.right, minText: sizes.length ? sizes[0] : null,
      medianText: sizes.length ? sizes[Math.floor(sizes.length / 2)] : null});
  });
  var pre = document.createElement("pre");
  pre.id = "layout-probe";
  pre.textContent = JSON.stringify(out);
  (window.parent || window).document.body.appendChild(pre);
})();
</script></body>"""

# What JupyterLab's own stylesheet does to tables in an output cell (jp-RenderedHTMLCommon), and the width its
# output area leaves in a 900 px cell once the prompt column and padding are taken.
_NOTEBOOK_PAGE = """<!DOCTYPE html><html><head><meta charset='utf-8'><style>
body{margin:0;font:13px system-ui,sans-serif}
.jp-OutputArea-output{width:820px;margin-left:64px;overflow-x:auto}
.jp-RenderedHTMLCommon table{border-collapse:collapse;border-spacing:0;border:none;font-size:12px;
 table-layout:fixed;margin-left:auto;margin-right:auto;margin-bottom:1em}
.jp-RenderedHTMLCommon td,.jp-RenderedHTMLCommon th{max-width:none;padding:.5em .5em;text-align:right;
 vertical-align:middle;border:none}
</style></head><body><div class='jp-OutputArea-output jp-RenderedHTMLCommon'>BODY</div></body></html>"""


def measure(tmp_path: Path, page: str, width: int, name: str = "page") -> dict[str, Any]:
    """Lay ``page`` out in Chromium in a window ``width`` px wide and return what the probe measured.

    Headless Chromium lays a page out at least 500 px wide whatever the window's size, so the page is shown in
    an ``<iframe>`` exactly ``width`` px wide (its own viewport), the way a phone shows it."""
    framed = html.escape(page.replace("</body>", _PROBE), quote=True)
    host = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body style='margin:0'>"
        f"<iframe style='border:0;display:block;width:{width}px;height:1200px' srcdoc=\"{framed}\"></iframe>"
        "</body></html>"
    )
    path = tmp_path / f"{name}-{width}.html"
    path.write_text(host, encoding="utf-8")
    result = _chromium(path, "--dump-dom", width=max(width, 500) + 40, height=1300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_messages(result.stderr) == []
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', result.stdout, re.DOTALL)
    assert found, result.stdout[-2000:]
    layout: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    assert layout["viewport"] == width, layout["viewport"]
    return layout


@pytest.fixture(scope="module")
def run_report():
    return rollaudit.audit(rollaudit.load(RUN), device="cpu", keep_advantages=True), {}


@pytest.fixture(scope="module")
def run_page(run_report) -> str:
    report, load = run_report
    return render_html(report, load)


def _assert_page_rules(layout: dict[str, Any]) -> None:
    view = layout["viewport"]
    assert layout["page"] <= view, f"the page scrolls sideways: {layout['page']} px in a {view} px window"
    for table in layout["tables"]:
        # A table either fits, or scrolls inside its own box, and that box stays inside the window.
        assert table["boxLeft"] >= -1 and table["boxRight"] <= view + 1, table
        if table["scrolls"] or table["hidden"]:
            assert table["overflow"] in ("auto", "scroll"), table
    for figure in layout["figures"]:
        assert figure["left"] >= -1 and figure["right"] <= view + 1, figure
        assert figure["minText"] >= MIN_TEXT_PX, figure
        assert figure["medianText"] >= MIN_TICK_TEXT_PX, figure


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_is_readable_at_every_width(tmp_path, run_page, width):
    layout = measure(tmp_path, run_page, width)
    _assert_page_rules(layout)
    assert len(layout["tables"]) >= 6 and len(layout["figures"]) >= 4


@pytest.mark.parametrize("width", [1280, 1920])
def test_every_table_fits_whole_on_a_large_screen(tmp_path, run_page, width):
    layout = measure(tmp_path, run_page, width)
    for table in layout["tables"]:
        assert not table["scrolls"] and not table["hidden"], table
    # The worst-steps and worst-prompts tables are the widest: they are shown whole.
    headers = " ".join(table["header"] for table in layout["tables"])
    assert "group sizes" in headers and "recorded Ā" in headers


def test_a_large_screen_gets_a_wide_page(tmp_path, run_page):
    layout = measure(tmp_path, run_page, 1920)
    assert layout["report"] >= 1400, layout["report"]


def test_figures_stack_their_panels_on_a_phone(tmp_path, run_page):
    layout = measure(tmp_path, run_page, 390)
    for figure in layout["figures"]:
        # A panel takes the phone's width rather than a third of it.
        assert figure["width"] >= 300, figure


def test_figures_sit_side_by_side_on_a_large_screen(tmp_path, run_page):
    layout = measure(tmp_path, run_page, 1920)
    rows: dict[int, int] = {}
    for figure in layout["figures"]:
        rows[round(figure["left"])] = rows.get(round(figure["left"]), 0) + 1
    assert len(rows) >= 3, rows  # panels in columns, not one long column


def test_the_notebook_view_shows_every_column_in_a_900_px_cell(tmp_path, run_report):
    report, _ = run_report
    page = _NOTEBOOK_PAGE.replace("BODY", notebook_html(report))
    layout = measure(tmp_path, page, 900, name="notebook")
    assert layout["page"] <= layout["viewport"]
    metrics = next(table for table in layout["tables"] if table["header"].startswith("scheme"))
    assert "max |ΔA|" in metrics["header"] and "mean |ΔA|" in metrics["header"]
    assert metrics["hidden"] == [] and not metrics["scrolls"], metrics
    for figure in layout["figures"]:
        assert figure["minText"] >= MIN_TEXT_PX, figure
