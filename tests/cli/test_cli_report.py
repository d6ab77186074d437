"""The report as a user reads it from the command line: the verdict, widths, pipes, help, hints, CI errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rollaudit._cli import app

ROOT = Path(__file__).resolve().parents[2]
FANOUT = ROOT / "sample_dumps" / "fanout"
FANOUT_FILE = FANOUT / "rollout_data" / "3.pt"


def run(*args: object, env: dict[str, str] | None = None):
    return CliRunner(env={"COLUMNS": "100", **(env or {})}).invoke(app, [str(arg) for arg in args])


def _subprocess(*args: str, columns: int | None) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "GITHUB_ACTIONS")}
    if columns is not None:
        environment["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "rollaudit", *args], capture_output=True, text=True, cwd=ROOT, env=environment
    )


@pytest.mark.parametrize("columns", [80, 120])
def test_the_verdict_on_the_fanout_sample_separates_reversals_from_invented_signal(columns):
    result = _subprocess("compare", "sample_dumps/fanout/rollout_data/3.pt", columns=columns)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert ": 0 reversed, 21 invented, 0 lost" in text
    assert "another sign" not in text and "other way" not in text
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert all(line == line.rstrip() for line in lines)  # piped: no trailing spaces
    # The verdict comes before the tables; the reversals column is on screen even at 80 columns.
    assert text.index("Verdict") < text.index("samples / prompt") < text.index("Advantages against")
    at = next(index for index, line in enumerate(lines) if line.startswith("scheme "))
    assert "re-" in lines[at - 1] and "versed" in lines[at]


def test_a_pipe_without_columns_gets_120_columns():
    result = _subprocess("compare", "sample_dumps/fanout", "sample_dumps/uniform.pt", "--top", "8", columns=None)
    assert result.returncode == 0, result.stderr
    widths = [len(line) for line in result.stdout.splitlines()]
    assert 100 < max(widths) <= 120
    assert "hidden at this width" not in result.stdout


def test_top_zero_prints_no_empty_tables():
    result = run("compare", FANOUT, "sample_dumps/uniform.pt", "--top", "0")
    assert result.exit_code == 0, result.stderr
    assert "Worst prompts" not in result.stdout and "Worst steps" not in result.stdout
    assert "Prompts with no learning signal" not in result.stdout
    assert "Share of signs changed, by step (2 steps)" in result.stdout  # the trend is no table


def test_worst_prompts_are_those_of_the_recorded_advantages_where_the_run_records_some():
    # The fan-out step (3) has no train dump: its prompts' recorded counts are undefined, so none of them is a worst
    # prompt of what the run trained with, however many signs batch changes there.
    result = run("compare", FANOUT, "sample_dumps/dump_details", "--json")
    prompts = json.loads(result.stdout)["worst_prompts"]
    assert prompts and all(prompt["step"] == 0 and isinstance(prompt["flips:recorded"], int) for prompt in prompts)
    assert all(prompt["flips:recorded"] > 0 for prompt in prompts)
    terminal = run("compare", FANOUT, "sample_dumps/dump_details", "--top", "10").stdout
    worst = terminal.split("Worst prompts")[1].split("Prompts with no learning signal")[0]
    assert not [line for line in worst.splitlines() if line.startswith("3 ")]


def test_the_sparkline_fits_the_terminal_and_reads_the_way_its_bars_go():
    import rollaudit
    from rollaudit._audit.report import Report
    from rollaudit._render.trend import trend_lines

    steps = 2000
    table = rollaudit.make_table(
        reward=[float((step * 7 + sample // 2) % 3 == 0) for step in range(steps) for sample in range(6)],
        prompt=[sample // 3 for _ in range(steps) for sample in range(6)],
        trajectory=[sample // 2 for _ in range(steps) for sample in range(6)],
        step=[step for step in range(steps) for _ in range(6)],
    )
    report: Report = rollaudit.audit(table, schemes=["batch", "trajectory"], device="cpu")
    lines = trend_lines(report, 80)
    assert len(lines) == 2 and all(len(line) <= 80 for line in lines)
    assert "at step 0 →" in lines[0] and "at step 1999" in lines[0]


def test_every_command_has_an_example_in_its_help():
    for command in ("compare", "inspect", "convert", "gate"):
        result = run(command, "--help")
        assert result.exit_code == 0
        assert "Examples:" in result.stdout and f"rollaudit {command} " in result.stdout.split("Examples:")[1]


@pytest.mark.parametrize(
    "args, hint",
    [
        (["compare", FANOUT, "-s", "promt"], "unknown scheme 'promt' (did you mean 'prompt'?)"),
        (["compare", FANOUT, "-s", "prompt(sclae=none)"], "unknown key 'sclae' (did you mean 'scale'?)"),
        (["gate", FANOUT, "--max", "batch:sign_flip_rat=0.1"], "(did you mean 'sign_flip_rate'?)"),
        (["gate", FANOUT, "--require", "prompt-kye"], "(did you mean 'prompt-key'?)"),
    ],
)
def test_a_misspelt_name_gets_a_did_you_mean(args, hint):
    result = run(*args)
    assert result.exit_code == 2 and hint in result.stderr and len(result.stderr.splitlines()) == 1


def test_under_github_actions_an_input_error_is_an_annotation_and_a_summary_line(tmp_path):
    summary = tmp_path / "summary.md"
    result = run("compare", "missing.pt", env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: missing.pt: no such file or directory",
        "::error title=rollaudit::missing.pt: no such file or directory",
    ]
    assert summary.read_text() == "❌ **rollaudit could not run**: missing.pt: no such file or directory\n"
    usage = run("compare", FANOUT, "--top", "-1", env={"GITHUB_ACTIONS": "true"})
    assert usage.exit_code == 2 and usage.stderr.splitlines()[1].startswith("::error title=rollaudit::")
    assert len(run("compare", "missing.pt").stderr.splitlines()) == 1  # outside Actions: the one line


def test_a_verl_run_directory_is_found_from_its_parent():
    result = run("inspect", "sample_dumps/verl")
    assert result.exit_code == 0, result.stderr
    assert "2 files in sample_dumps/verl/rollout_data" in result.stdout


def test_a_one_column_csv_reads_and_says_it_has_no_prompt_key(tmp_path):
    path = tmp_path / "rewards.csv"
    path.write_text("reward\n1\n0\n1\n0\n")
    result = run("inspect", path)
    assert result.exit_code == 0, result.stderr
    assert "4 samples" in result.stdout and "prompt key on 0 of 4" in result.stdout
    assert "no prompt column" in result.stderr
    batch = run("compare", path, "-s", "batch", "-r", "batch", "--json")
    assert batch.exit_code == 0 and json.loads(batch.stdout)["info"]["samples"] == 4


def test_the_header_times_the_whole_command():
    result = run("compare", FANOUT, "--json")
    load = json.loads(result.stdout)["load"]
    assert load["command_seconds"] >= load["seconds"] > 0
    assert " s in all" in run("compare", FANOUT).stdout.splitlines()[1]


def test_ctrl_c_says_interrupted_and_exits_130(tmp_path):
    # The load made slow, so that the command is surely running when Ctrl-C comes.
    files = [str(FANOUT_FILE), str(ROOT / "sample_dumps" / "uniform.pt")]
    script = (
        "import time, rollaudit, rollaudit._cli as cli\n"
        "real = rollaudit.load\n"
        "def slow(*a, **k):\n"
        "    time.sleep(30)\n"
        "    return real(*a, **k)\n"
        "rollaudit.load = slow\n"
        "print('ready', flush=True)\n"
        f"cli.main(['compare', *{files!r}])\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    assert process.stdout.readline() == "ready\n"
    time.sleep(1.5)  # into the command (imports done, the load sleeping)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "error: interrupted" and "Traceback" not in stderr
    assert stdout == ""
