"""The notebook path run in a notebook: the README's notebook section, one cell a line (``readme.ipynb``), executed in
order in a real Jupyter kernel (nbclient, ipykernel), each cell's outputs checked; and the notebook kept equal to the
README's section."""

from __future__ import annotations

import re

import pytest

import rollaudit
from tests.render.test_html import _FETCHES, _NAMESPACES

from . import readme_notebook

ROOT = readme_notebook.ROOT


def test_the_notebook_holds_the_readme_s_notebook_section_line_for_line() -> None:
    assert readme_notebook.notebook_cells() == readme_notebook.readme_cells(), (
        "the README's notebook section and tests/notebook/readme.ipynb differ "
        "(python tests/notebook/readme_notebook.py --update writes the notebook from the README)"
    )


def test_the_drift_check_sees_an_edited_line() -> None:
    text = readme_notebook.README.read_text(encoding="utf-8").replace('report.prompt("30")', 'report.prompt("31")')
    assert readme_notebook.readme_cells(text) != readme_notebook.notebook_cells()


def header_columns(html: str) -> list[str]:
    """The column names of a DataFrame's HTML (its last header row: the one naming the columns)."""
    head = re.search(r"<thead>(.*?)</thead>", html, re.DOTALL)
    assert head, html[:500]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", head.group(1), re.DOTALL)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<th[^>]*>.*?</th>", rows[0], re.DOTALL)]


def result_of(cell) -> dict:
    (result,) = [output for output in cell.outputs if output.output_type == "execute_result"]
    return result.data


@pytest.fixture(scope="module")
def executed():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.read(readme_notebook.NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    return {cell.source.split("#")[0].strip(): cell for cell in notebook.cells}


def test_the_readme_s_notebook_section_runs_in_a_kernel_and_each_cell_shows_what_it_says(executed) -> None:
    for source, cell in executed.items():
        kinds = [output.output_type for output in cell.outputs]
        assert "error" not in kinds, (source, cell.outputs)
        streams = [output.text for output in cell.outputs if output.output_type == "stream"]
        assert not streams, (source, streams)  # no warning, no stray print

    for quiet in ("import rollaudit", 'table = rollaudit.load("sample_dumps/fanout")'):
        assert executed[quiet].outputs == []

    # The report renders itself in the cell: the verdict, self-contained (nothing fetched from a network).
    table = rollaudit.load(ROOT / "sample_dumps" / "fanout")
    expected = rollaudit.audit(table, keep_advantages=True)
    shown = result_of(executed["report"])
    page = shown["text/html"]
    assert "Verdict: trained with an unknown scheme." in page
    assert ": 0 reversed, 21 invented, 0 lost" in page
    assert not _FETCHES.search(page.replace('xlink:href="#', "")), _FETCHES.search(page)
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) <= set(_NAMESPACES)
    assert shown["text/plain"] == repr(expected)

    assert result_of(executed["report.trained_with"])["text/plain"] == repr(expected.trained_with)
    assert result_of(executed["report.advice, report.not_auditable"])["text/plain"] == repr(
        (expected.advice, expected.not_auditable)
    )

    summary = result_of(executed['report.summary[["sign_flip_rate", "strict_flip_rate", "spurious_nonzero"]]'])
    assert header_columns(summary["text/html"]) == ["", "sign_flip_rate", "strict_flip_rate", "spurious_nonzero"]
    assert re.search(r"<th>batch</th>\s*<td>0\.238636</td>", summary["text/html"])

    worst = result_of(executed["report.worst_prompts(10)"])
    assert header_columns(worst["text/html"]) == ["", *expected.worst_prompts(10).columns]
    assert "flips:batch" in header_columns(worst["text/html"])

    joined = result_of(executed["table.to_pandas().join(advantages.to_pandas())"])
    columns = header_columns(joined["text/html"])
    assert columns[1 : 1 + table.num_columns] == table.column_names
    assert columns[1 + table.num_columns :] == [
        "advantage:prompt",
        "advantage:nemo-loo",
        "advantage:trajectory(representative=last)",
    ]
    assert f"{table.num_rows} rows × {table.num_columns + 3} columns" in joined["text/html"]

    prompt = result_of(executed['report.prompt("30")'])
    assert header_columns(prompt["text/html"]) == ["", *expected.prompt("30").columns]
    assert "advantage:prompt" in header_columns(prompt["text/html"])

    (watched,) = [cell for source, cell in executed.items() if source.startswith("[(record.step")]
    assert result_of(watched)["text/plain"] == "[(1, 'verl-grpo'), (2, 'verl-grpo')]"
