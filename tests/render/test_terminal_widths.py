"""The terminal report at 80 and 120 columns, in a rich Console and piped from the real command: scheme names and
titles never break inside, repeated tables are one line, token-id prompt keys read as labels, the advantage
distributions are drawn only from advantages the report holds."""

from __future__ import annotations

import io
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from rich.console import Console

import rollaudit
from rollaudit._render.distributions import distribution_lines
from rollaudit._render.markdown import render_markdown
from rollaudit._render.terminal import Phrases, render_compare
from rollaudit._render.text import key_text, token_key_label

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
FANOUT = SAMPLES / "fanout"
LOAD = {"format": "slime", "files": ["dump.pt"], "bytes": 1234, "seconds": 0.5}
LONG = "trajectory(representative=max)"
WIDTHS = (80, 120)


def text_of(renderable, width: int) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False).print(renderable)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def run_report() -> rollaudit.Report:
    """Three steps of slime dumps (one with recorded advantages), a long scheme name and a named trained scheme."""
    table = rollaudit.load([FANOUT, SAMPLES / "uniform.pt", SAMPLES / "dump_details"])
    return rollaudit.audit(table, schemes=["batch", "prompt", LONG], trained_with="slime-legacy(n=4)", device="cpu")


@pytest.fixture(scope="module")
def fanout_report() -> rollaudit.Report:
    table = rollaudit.load(FANOUT)
    return rollaudit.audit(
        table, schemes=["batch", "prompt", "trajectory", "slime-legacy(n=4)"], keep_advantages=True, device="cpu"
    )


def _scheme_fragments(text: str, scheme: str) -> list[str]:
    """Lines that end with ``scheme`` cut after its ``(`` ("slime-legacy(n=4"), or start with the rest of it
    (")"): a name broken inside."""
    opening = scheme.index("(")
    cut = []
    for line in text.splitlines():
        if scheme in line:
            continue
        stripped = line.strip()
        if any(stripped.endswith(scheme[:index]) for index in range(opening + 1, len(scheme))):
            cut.append(line)
        if any(stripped.startswith(scheme[index:]) for index in range(opening + 1, len(scheme))):
            cut.append(line)
    return cut


@pytest.mark.parametrize("width", WIDTHS)
def test_scheme_names_never_break_inside(run_report, fanout_report, width):
    for report, scheme in [(run_report, LONG), (fanout_report, "slime-legacy(n=4)")]:
        text = text_of(render_compare(report, LOAD), width)
        assert max(len(line) for line in text.splitlines()) <= width
        assert _scheme_fragments(text, scheme) == [], text
        assert scheme in text.split("Advantages against")[1]  # in the metrics table, whole (or in its key)


def test_a_scheme_name_too_long_for_the_width_is_a_key_written_out_below():
    table = rollaudit.make_table(reward=[0, 1, 1, 0, 1, 1], prompt=[1, 1, 1, 2, 2, 2], trajectory=[1, 1, 2, 3, 4, 4])
    long_scheme = "trajectory(representative=mean, scale=none, singleton=raw, eps=0.001)"
    report = rollaudit.audit(table, schemes=["batch", long_scheme], device="cpu")
    text = text_of(render_compare(report, LOAD), 100)
    assert "[1] " + long_scheme in text.splitlines()
    assert any(line.startswith("[1] ") and "%" in line for line in text.splitlines())
    assert max(len(line) for line in text.splitlines()) <= 100


@pytest.mark.parametrize("width", WIDTHS)
def test_titles_never_break_mid_phrase(run_report, width):
    # One scheme makes narrow tables: a title as wide as its table would wrap inside "(top 1)".
    narrow = rollaudit.audit(
        rollaudit.load([FANOUT, SAMPLES / "uniform.pt", SAMPLES / "dump_details"]), schemes=["batch"]
    )
    for report in (run_report, narrow):
        text = text_of(render_compare(report, LOAD, top=1), width)
        lines = text.splitlines()
        assert not any(line.rstrip().endswith("(top") for line in lines), text
        assert not any(re.match(r"\s*\d+\)", line) for line in lines), text
        title = next(line for line in lines if line.startswith("Worst steps"))
        assert title.rstrip().endswith(("prompt", "(top 1)"))


def test_phrases_wrap_between_phrases():
    text = text_of(Phrases.of("Worst steps: 12 of 100 steps have samples whose sign differs from prompt (top 5)"), 76)
    assert text.splitlines() == [
        "Worst steps: 12 of 100 steps have samples whose sign differs from prompt",
        "(top 5)",
    ]


def test_silent_prompts_that_repeat_the_worst_are_one_line(fanout_report):
    for width in WIDTHS:
        text = text_of(render_compare(fanout_report, LOAD), width)
        assert text.count("\nprompt   samples") == 1, text  # one prompt table, not two
        assert "Prompts with no learning signal that got advantages: the 3 prompts above" in " ".join(text.split())
    markdown = render_markdown(fanout_report, LOAD)
    assert markdown.count("| prompt |") == 1
    assert "**Prompts with no learning signal that got advantages: the 3 prompts above, with the same counts" in (
        markdown
    )


def test_silent_prompts_with_other_rows_keep_their_table():
    # Prompt 3 has signal, and batch-wide centring reverses its 0.4 (above its mean, below the batch's): the
    # worst prompts are 1, 2 and 3, the silent ones 1 and 2.
    table = rollaudit.make_table(
        reward=[0, 0, 0, 0, 1, 1, 1, 1, 0.3, 0.3, 0.3, 0.4],
        prompt=[1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3],
    )
    report = rollaudit.audit(table, device="cpu")
    text = text_of(render_compare(report, LOAD), 100)
    assert text.count("\nprompt   samples") == 2
    assert "the prompts above" not in text


def test_token_id_prompt_keys_show_as_a_short_stable_label():
    key = ",".join(str(token) for token in [3552, 6364, 812, 90, 4410, 17])
    label = token_key_label(key)
    assert label is not None and re.fullmatch(r"p:[0-9a-f]{6} \(6 tokens\)", label)
    assert token_key_label(key) == label and token_key_label(key + ",1") != label
    assert key_text(key) == label
    assert token_key_label("30") is None and token_key_label("what is 2,3,4?") is None
    # Worst prompts are those of what the run trained with: without its recorded advantages, a run named as
    # trained with batch has some to show.
    table = rollaudit.load(SAMPLES / "nemo_rl")
    unrecorded = pa.nulls(table.num_rows, pa.float64())
    table = table.set_column(table.column_names.index("recorded_advantage"), "recorded_advantage", unrecorded)
    report = rollaudit.audit(table, device="cpu", trained_with="batch")
    text = text_of(render_compare(report, LOAD), 100)
    assert re.search(r"^p:[0-9a-f]{6} \(\d+ tokens\)", text, re.MULTILINE), text
    assert not re.search(r"\d+,\d+,\d+", text.split("Worst prompts")[1])
    # The group key itself is unchanged: the per-prompt table and the JSON keep the token ids.
    assert all("," in str(key) for key in report.per_prompt["prompt"])


def test_metric_headers_say_changed_and_reversed(fanout_report):
    text = text_of(render_compare(fanout_report, LOAD), 120)
    header = text.split("Advantages against")[1].split("─")[0]
    assert "changed" in header and "versed" in header and "flips" not in header
    markdown = render_markdown(fanout_report, LOAD)
    assert "| scheme | sign changed | reversed | tokens changed |" in markdown
    assert "flips" not in markdown.split("| scheme |")[1].split("\n")[0]


def test_advantage_distributions_from_every_report(fanout_report):
    text = text_of(render_compare(fanout_report, LOAD), 80)
    section = text.split("Advantage distributions")[1].split("\n\n")[0].splitlines()[1:]
    assert section[0].startswith("prompt (ref) ") and any(line.startswith("slime-legacy(n=4) ") for line in section)
    assert max(len(line) for line in section) <= 80
    lines = distribution_lines(fanout_report, 80)
    assert lines is not None and "0" in lines[-1]
    # Batch-wide centring: the advantages of batch sit in two bins only (all-0 and all-1 prompts alike).
    batch = next(line for line in lines if line.startswith("batch "))
    assert len(batch.split()) == 3  # the label and two bars
    # The counts travel in every report: one that kept no advantages draws the same lines, at any width.
    kept_not = rollaudit.audit(rollaudit.load(FANOUT), schemes=fanout_report.schemes, device="cpu")
    assert kept_not.advantages is None
    for width in (60, 80, 120):
        assert distribution_lines(kept_not, width) == distribution_lines(fanout_report, width)
    counted = fanout_report.distributions
    assert counted is not None and next(iter(counted.counts)) == "prompt"
    for name, values in fanout_report.advantages_by_scheme().items():
        finite = np.asarray(values)[np.isfinite(values)]
        assert sum(counted.counts[name]) == len(finite)
        assert counted.low == min(
            float(np.min(other[np.isfinite(other)])) for other in fanout_report.advantages_by_scheme().values()
        )
    nothing_finite = rollaudit.make_table(reward=[math.nan] * 4, prompt=[0, 0, 1, 1])
    silent = rollaudit.audit(nothing_finite, device="cpu")
    assert silent.distributions is None and distribution_lines(silent) is None
    assert "Advantage distributions" not in text_of(render_compare(silent, LOAD), 100)


def _entry_point() -> str:
    found = shutil.which("rollaudit", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("the rollaudit console script is not installed")
    return found


def _piped(columns: int, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The installed command with its output piped at ``columns``: it succeeds and no line is wider."""
    environment = {**os.environ, "COLUMNS": str(columns)}
    result = subprocess.run(
        [_entry_point(), *args], capture_output=True, text=True, cwd=ROOT, env=environment, timeout=300
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    return result, lines


@pytest.mark.parametrize("columns", [80, 120])
def test_the_real_command_piped_keeps_titles_whole(columns):
    runs = [str(FANOUT), str(SAMPLES / "uniform.pt"), str(SAMPLES / "dump_details")]
    result, lines = _piped(columns, "compare", *runs, "-s", "batch", "--top", "1")
    assert not any(line.rstrip().endswith("(top") for line in lines), result.stdout


@pytest.mark.parametrize("columns", [80, 120])
def test_the_real_command_piped_fits_and_breaks_nothing(columns):
    result, lines = _piped(columns, "compare", "sample_dumps/fanout", "--trained-with", "slime-legacy(n=4)", "-s", LONG)
    assert _scheme_fragments(result.stdout, LONG) == [] and _scheme_fragments(result.stdout, "slime-legacy(n=4)") == []
    assert not any(line.rstrip().endswith("(top") for line in lines)
