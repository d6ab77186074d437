"""Terminal and Markdown rendering of a Report: formats, n/a, widths, escaping."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from rich.console import Console

import rollaudit
from rollaudit._audit.describe import describe
from rollaudit._render import trend
from rollaudit._render.markdown import markdown_table, render_markdown
from rollaudit._render.terminal import render_compare, render_inspect
from rollaudit._render.text import (
    bar,
    count,
    files_label,
    histogram_lines,
    histogram_rows,
    number,
    percent,
    ratio,
    signed,
    steps_label,
    verdicts,
)

LOAD = {"format": "slime", "files": ["dump.pt"], "bytes": 1234, "seconds": 0.5}
SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def text_of(renderable, width: int = 100) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False).print(renderable)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def seed_report() -> rollaudit.Report:
    """A prompt that solved nothing next to one that solved everything, and a mixed one."""
    table = rollaudit.make_table(
        reward=[0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0],
        prompt=[1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3],
        trajectory=[10, 10, 11, 11, 20, 21, 22, 23, 30, 31, 32, 33],
        response_length=[5] * 12,
    )
    return rollaudit.audit(table, device="cpu")


def test_number_formats():
    assert percent(0.2386) == "23.9%"
    assert percent(0) == "0.0%"
    assert percent(1) == "100.0%"
    assert percent(1e-5) == "<0.1%"  # a rare flip never reads as none
    assert percent(0.99999) == ">99.9%"
    assert percent(float("nan")) == percent(None) == "n/a"
    assert count(1898) == "1,898" and count(float("nan")) == "n/a"
    assert ratio(4.18) == "4.18×" and ratio(float("nan")) == "n/a"
    assert number(0.0762037) == "0.0762" and number(0) == "0" and number(None) == "n/a"
    assert signed(-0.847) == "-0.85" and signed(1e-17) == " 0.00" and signed(1.2) == "+1.20"


def test_steps_and_files_labels():
    assert steps_label([3]) == "step 3"
    assert steps_label([0, 1, 2, 3]) == "steps 0–3 (4)"
    assert steps_label([5, 0, 3]) == "steps 0, 3, 5"
    assert steps_label(list(range(0, 100, 10))) == "10 steps, 0–90"
    assert files_label(["a/b/1.pt"]) == "a/b/1.pt"
    assert files_label(["run/rollout_data/1.pt", "run/train_data/1_0.pt"]) == "2 files in run"


def test_histogram_rows_bucket_many_sizes():
    assert histogram_rows({8: 3, 5: 1}) == [("5", 1), ("8", 3)]
    many = {size: 1 for size in range(1, 21)}
    rows = histogram_rows(many, max_rows=8)
    assert len(rows) <= 8
    assert sum(number_of for _, number_of in rows) == 20
    assert rows[0] == ("1–3", 3) and rows[-1][0].endswith("20")


def test_bars_scale_to_the_largest_and_never_vanish():
    assert bar(3, 3, width=10) == "█" * 10
    assert bar(0, 3) == ""
    assert bar(1, 1000, width=10) == "▏"  # non-zero shows at least a sliver
    assert len(bar(1, 2, width=10)) == 5
    lines = histogram_lines({5: 1, 8: 3, 28: 1})
    assert lines[1].split() == ["8", "█" * 10, "3"]
    assert histogram_lines({}) == ["(none)"]


def test_render_compare_sections_and_numbers(seed_report):
    text = text_of(render_compare(seed_report, LOAD, top=5))
    lines = text.splitlines()
    assert lines[0] == "dump.pt (slime, 1.2 KB, loaded in 0.50 s)"
    assert lines[1].startswith("step 0 · 12 samples · 3 prompts · 10 trajectories · audited on cpu")
    summary = seed_report.summary
    batch = next(line for line in lines if line.startswith("batch "))
    assert batch.split()[1] == percent(summary.loc["batch", "sign_flip_rate"])
    assert batch.split()[4] == str(summary.loc["batch", "nonzero"])
    assert "Worst prompts" in text and "Prompts with no learning signal that got advantages: the 2 prompts" in text
    assert max(len(line) for line in lines) <= 100


def test_render_compare_top_zero_and_no_disagreement():
    table = rollaudit.make_table(reward=[0, 1, 0, 1], prompt=[1, 1, 2, 2])
    report = rollaudit.audit(table, device="cpu")
    text = text_of(render_compare(report, LOAD, top=0))
    assert "Worst prompts" not in text  # batch and prompt agree on this batch
    assert "batch: same signs as prompt" in " ".join(text.split())


def test_undefined_metrics_render_as_n_a():
    # No response lengths: token_flip_rate is undefined; an all-zero reference: inflation and cosine too.
    table = rollaudit.make_table(reward=[1.0, 1.0, 0.0, 0.0], prompt=[1, 1, 2, 2])
    report = rollaudit.audit(table, device="cpu")
    batch = report.summary.loc["batch"]
    assert math.isnan(batch["token_flip_rate"]) and math.isnan(batch["nonzero_inflation"])
    row = next(line for line in text_of(render_compare(report, LOAD)).splitlines() if line.startswith("batch "))
    cells = row.split()
    assert cells[3] == "n/a" and cells[5] == "n/a" and cells[8] == "n/a"
    markdown_row = next(line for line in render_markdown(report, LOAD).splitlines() if line.startswith("| `batch`"))
    assert markdown_row.count("n/a") == 3


def test_long_scheme_strings_fold_instead_of_squeezing_numbers():
    table = rollaudit.make_table(reward=[0, 1, 1, 0, 1, 1], prompt=[1, 1, 1, 2, 2, 2])
    long_scheme = "trajectory(representative=mean, scale=none, singleton=raw, eps=0.001)"
    report = rollaudit.audit(table, schemes=["batch", long_scheme], device="cpu")
    text = text_of(render_compare(report, LOAD), width=100)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "…" not in text.split("Advantages against")[1].split("non-zero under")[0]  # numbers whole


def test_markdown_escapes_pipes_and_backticks():
    table = rollaudit.make_table(reward=[0, 0, 1, 1, 0, 1], prompt=["a|b", "a|b", "c`d", "c`d", "e", "e"])
    report = rollaudit.audit(table, device="cpu")
    text = render_markdown(report, LOAD)
    assert "a\\|b" in text and "| a|b |" not in text
    assert "`` c`d ``" not in text  # keys are table cells, not code spans
    assert markdown_table(["x", "y"], [["1|2", "3"]]).splitlines()[2] == "| 1\\|2 | 3 |"


def test_markdown_table_rows_have_as_many_cells_as_the_header(seed_report):
    text = render_markdown(seed_report, LOAD, top=5)
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            widths = {len(row.replace("\\|", "").split("|")) for row in block}
            assert len(widths) == 1, block
            block = []


def test_verdicts_quote_the_reports_numbers(seed_report):
    lines = verdicts(seed_report)
    batch = next(line for line in lines if line.startswith("batch:"))
    summary = seed_report.summary.loc["batch"]
    assert summary["strict_flip_rate"] == 0 < summary["sign_flip_rate"]  # every flip here is invented signal
    assert "batch: sign changed on " in batch
    assert f": 0 reversed, {int(summary['spurious_nonzero'])} invented" in batch
    assert "another sign" not in batch and "other way" not in batch
    assert not any(line.startswith("prompt:") for line in lines)  # the reference is not judged against itself


def test_verdicts_count_reversals_apart_from_invented_signal():
    # The batch mean is 1.4: prompt 1's two 1s (above their mean 2/3) turn negative, prompt 2's 2 (below its
    # mean 2.5) turns positive: three reversals, and no sample without signal.
    table = rollaudit.make_table(reward=[0, 1, 1, 2, 3], prompt=[1, 1, 1, 2, 2])
    report = rollaudit.audit(table, device="cpu")
    batch = next(line for line in verdicts(report) if line.startswith("batch:"))
    assert batch.startswith("batch: sign changed on 60.0% of samples: 3 reversed, 0 invented")


def test_render_inspect():
    table = rollaudit.make_table(
        reward=[1.0, 0.0, 0.5, float("nan")], prompt=[1, 1, None, 2], step=[0, 0, 1, 1], label=["x", "y", "z", "w"]
    )
    description = describe(table)
    assert description["identity"] == {"samples": 4, "with_prompt_key": 3, "with_trajectory_key": 0}
    # No trajectory key on any sample: no count of trajectories is stated, and inspect shows none.
    assert description["prompts"] == 2 and description["trajectories"] is None
    assert description["reward"]["nonfinite"] == 1 and description["reward"]["kind"].startswith("discrete")
    assert description["steps"]["samples_per_step"] == {0: 2, 1: 2}
    text = text_of(render_inspect(description, LOAD))
    assert "prompt key on 3 of 4 (75.0%)" in text and "trajectories" not in text.split("identity")[0]
    assert "1 NaN/inf" in text
    assert "label" in text and "passed through" in text


def test_narrow_terminal_hides_the_least_important_columns_and_says_so(seed_report):
    wide = text_of(render_compare(seed_report, LOAD), width=100)
    assert "hidden at this width" not in wide
    narrow = text_of(render_compare(seed_report, LOAD), width=80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert "hidden at this width: lost" in narrow
    header = next(line for line in narrow.splitlines() if line.startswith("scheme"))
    headers_above = narrow.split("\nscheme")[0].splitlines()[-1]
    # Reversals and invented signal say how wrong: they are the last columns a narrow terminal loses.
    assert "in-" in headers_above and "vented" in header and "re-" in headers_above and "versed" in header
    tiny = text_of(render_compare(seed_report, LOAD), width=40)
    tiny_header = next(line for line in tiny.splitlines() if line.startswith("scheme"))
    assert "vented" in tiny_header or "versed" in tiny_header


def test_a_run_of_several_steps_shows_its_trend_and_worst_steps():
    table = rollaudit.load([SAMPLES / "fanout", SAMPLES / "uniform.pt", SAMPLES / "dump_details"])
    report = rollaudit.audit(table)
    worst = report.worst_steps()
    # Step 0 (legacy batch-wide, uneven 1..7) flips most, step 3 next; the uniform step 5 flips nothing.
    assert list(worst.index) == [0, 3]
    assert worst.loc[0, "sign_flip_rate:batch"] == report.per_step.loc[(0, "batch"), "sign_flip_rate"]
    assert (worst.loc[3, "smallest_group"], worst.loc[3, "largest_group"]) == (5, 28)
    lines = trend.trend_lines(report)
    assert lines[0].startswith("batch:") and "█▄▁" in lines[0] and "53.8%" in lines[0]
    markdown = render_markdown(report, {"files": ["run"]})
    assert "**Worst steps: 2 of 3 steps have samples whose sign differs from prompt**" in markdown
    assert "| 0 | 26 | 6 | 1–7 | 53.8% |" in markdown


def test_sparkline_scales_to_the_largest_and_leaves_gaps_for_undefined():
    assert trend.sparkline([0.0, 0.5, 1.0, float("nan")]) == "▁▅█ "
    assert trend.sparkline([0.0, 0.0]) == "▁▁"


def test_found_counts_agree_in_number():
    from rollaudit._render.text import counted

    assert counted(1, "groups of unnamed trajectories") == "1 group of unnamed trajectories"
    assert counted(2, "groups of unnamed trajectories") == "2 groups of unnamed trajectories"
    assert counted(1, "padding rows left out") == "1 padding row left out"
    assert counted(1, "trajectory groups") == "1 trajectory group"
    assert counted(1234, "rows (one per LLM call)") == "1,234 rows (one per LLM call)"


def test_a_verdict_with_nothing_compared_says_no_against():
    """torchtitan's default dump: every scheme is not auditable, so the verdict compares nothing with the reference
    and its title does not announce a comparison."""
    from rollaudit._render.text import verdict_title
    from tests.conformance.conftest import corpus

    report = rollaudit.audit(rollaudit.load(corpus("torchtitan")), device="cpu")
    assert verdicts(report) == []
    assert verdict_title(report).endswith("which this dump cannot audit.")
    seeded = rollaudit.audit(rollaudit.make_table(reward=[0, 1, 1, 2, 3], prompt=[1, 1, 1, 2, 2]), device="cpu")
    assert verdict_title(seeded).endswith("Against prompt:")


def test_a_watched_step_says_how_its_scheme_is_known():
    from rollaudit._render.dashboards.watch import step_line
    from rollaudit._watch.records import StepPoint

    record = {
        "step": 1,
        "samples": 4,
        "prompts": 2,
        "reference": "prompt",
        "summary": {"verl-grpo": {"sign_flip_rate": 0.0, "strict_flip_rate": 0.0, "nonzero_inflation": 1.0}},
    }
    lines = {
        evidence: step_line(StepPoint.of({**record, "trained_with": {"row": "verl-grpo", "evidence": evidence}}))
        for evidence in ("framework default", "given", "recorded")
    }
    assert "trained verl-grpo (assumed): sign changed 0.0%" in lines["framework default"]
    assert "trained verl-grpo (as given): " in lines["given"]
    assert "trained verl-grpo: sign changed" in lines["recorded"]
