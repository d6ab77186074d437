"""The HTML report (``compare --html``, ``Report._repr_html_``): self-contained, escaped, and seen in a browser.

The browser tests run Chromium headless (Debian's ``chromium``, which ``.ci/run`` installs): the page must render
with no console error, its screenshot must not be blank at desktop and phone widths, a phone-width page must not
scroll sideways, and its sort buttons must sort. Where no browser can be installed they skip with one line.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from typer.testing import CliRunner

import rollaudit
from rollaudit._cli import app
from rollaudit._render.html import render_html

ROOT = Path(__file__).resolve().parents[2]
FANOUT = ROOT / "sample_dumps" / "fanout"
DUMP_DETAILS = ROOT / "sample_dumps" / "dump_details"
# Anything a page could fetch: a URL in an attribute or in CSS, or an import. The SVG namespaces are names, not
# fetches, and are the only URLs allowed.
_FETCHES = re.compile(r"""(?:src|href|action|poster|data)\s*=\s*["']?(?!#|data:)|url\(\s*["']?(?!#|data:)|@import""")
_NAMESPACES = ("http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink")


def _write_report(tmp_path: Path, *inputs: Path) -> tuple[Path, str]:
    target = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["compare", *map(str, inputs), "--html", str(target)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert f"wrote {target}" in result.stderr
    return target, target.read_text(encoding="utf-8")


def test_the_html_report_is_one_self_contained_file(tmp_path):
    _path, page = _write_report(tmp_path, FANOUT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not _FETCHES.search(page.replace('xlink:href="#', "")), _FETCHES.search(page)
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls <= set(_NAMESPACES), urls
    # Group sizes, the scatter and the distributions, each panel its own inline SVG.
    assert page.count("<figure") == 3 and page.count("<svg") == 3 + 2 + 2 and "<img" not in page
    assert page.count("<table") >= 4 and "class='sortable'" in page
    assert ": 0 reversed, 21 invented, 0 lost" in page
    # The terms are defined where the verdict first uses them, not only in the footer.
    verdict = page[page.index("<section class='verdict") : page.index("</section>")]
    assert "invented: 0 became + or −" in verdict
    sections = (
        "Verdict",
        "Advantages against the reference",
        "Group sizes",
        "Sample by sample",
        "Advantage distributions",
    )
    for section in sections:
        assert section in page
    assert "Worst prompts" in page and "Prompts with no learning signal" in page


def test_a_run_gets_the_per_step_chart_and_the_recorded_fit(tmp_path):
    _, page = _write_report(tmp_path, FANOUT, DUMP_DETAILS)
    assert page.count("<figure") == 4 and "By step (2 steps)" in page
    assert "Recorded advantages" in page and "Fit of each preset to the recorded advantages" in page
    assert "Worst steps" in page


def test_dump_text_cannot_become_markup_in_the_page(tmp_path):
    hostile = "<b>x</b>\x1b]0;t\x07"  # short enough that the prompt tables show it whole
    table = pa.table({"reward": [0.0, 0.0, 0.0, 1.0], "prompt": [hostile, hostile, "b", "b"]})
    path = tmp_path / "rollouts.parquet"
    pq.write_table(table, path)
    _, page = _write_report(tmp_path, path)
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "\x1b" not in page and "\x07" not in page and "\\x1b]0;t\\x07" in page


def test_the_notebook_view_is_the_same_report_with_rounded_numbers():
    report = rollaudit.audit(rollaudit.load(FANOUT), device="cpu")
    view = report._repr_html_()
    assert ": 0 reversed, " in view and "23.9%" in view
    assert "e-17" not in view and "0.238636" not in view  # percentages and rounded values, no float noise
    # The group sizes alone: the advantage figures need keep_advantages=True, and nothing stands in for them.
    assert view.count("<figure") == 1 and "Advantage distributions" not in view


# ---------------------------------------------------------------------------------------------------------------------
# In a real browser.


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium to render the HTML report in (.ci/run installs Debian's chromium)")


def _chromium(page: Path, *arguments: str, width: int = 1280, height: int = 2400) -> subprocess.CompletedProcess:
    command = [
        _browser(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={page.parent / 'chromium-profile'}",
        f"--window-size={width},{height}",
        *arguments,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def console_messages(stderr: str) -> list[str]:
    """The page's console output (messages and uncaught errors) as Chromium logs it."""
    return [line.split("] ", 1)[-1] for line in stderr.splitlines() if ":CONSOLE" in line]


def _not_blank(path: Path) -> float:
    """The share of the screenshot's pixels that are not the background."""
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("L"), dtype=np.float64)
    return float((np.abs(pixels - np.median(pixels)) > 24).mean())


def test_the_console_check_sees_a_broken_page(tmp_path):
    # The check below must be able to fail: a page with an error in its script is caught.
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><p>x</p><script>console.error('boom'); missing();</script>")
    messages = console_messages(_chromium(broken, "--dump-dom").stderr)
    assert any("boom" in message for message in messages)
    assert any("Uncaught ReferenceError" in message for message in messages)


@pytest.mark.parametrize("width", [1280, 390], ids=["desktop", "phone"])
def test_the_report_renders_in_a_browser(tmp_path, width):
    path, _ = _write_report(tmp_path, FANOUT, DUMP_DETAILS)
    dom = _chromium(path, "--dump-dom", width=width)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == []
    assert 'data-rollaudit-ready="1"' in dom.stdout  # the script ran to its end
    shot = tmp_path / f"shot-{width}.png"
    result = _chromium(path, f"--screenshot={shot}", width=width)
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (width, 2400)
    assert _not_blank(shot) > 0.03  # text, tables and figures, not an empty page


def test_the_page_fits_a_phone_and_its_tables_sort(tmp_path):
    _path, page = _write_report(tmp_path, FANOUT)
    # The report with a probe appended: it clicks the "samples" header of the worst-prompts table twice and
    # logs what the browser laid out and sorted.
    probe = """<script>
    var doc = document.documentElement;
    console.log("width " + doc.scrollWidth + " of " + window.innerWidth);
    var table = document.querySelector("table.sortable");
    var headers = Array.prototype.slice.call(table.querySelectorAll("thead th"));
    var column = headers.findIndex(function (th) { return th.textContent.trim() === "samples"; });
    function values() { return Array.prototype.map.call(table.tBodies[0].rows,
        function (row) { return parseFloat(row.cells[column].textContent); }).join(","); }
    headers[column].querySelector("button").click();
    console.log("descending " + values());
    headers[column].querySelector("button").click();
    console.log("ascending " + values());
    </script></body>"""
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", probe), encoding="utf-8")
    messages = console_messages(_chromium(probed, "--dump-dom", width=390).stderr)
    width = next(message for message in messages if message.startswith('"width'))
    scrolled, shown = (int(number) for number in re.findall(r"\d+", width)[:2])
    assert scrolled <= shown, width  # wide tables scroll in their own box; the page itself does not
    descending = next(message for message in messages if message.startswith('"descending'))
    ascending = next(message for message in messages if message.startswith('"ascending'))
    down = [float(value) for value in descending.split()[1].strip('",').split(",")]
    up = [float(value) for value in ascending.split()[1].strip('",').split(",")]
    assert len(down) > 1 and down == sorted(down, reverse=True) and up == sorted(up)


def test_render_html_without_a_load_summary():
    report = rollaudit.audit(rollaudit.make_table(reward=[0, 1, 1, 1], prompt=[1, 1, 2, 2]), device="cpu")
    page = render_html(report, {})
    assert "<title>rollaudit report</title>" in page and "Verdict" in page
