"""``compare --steps`` (audit some steps of a run) and ``compare --prompt`` (one prompt's samples side by side)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rollaudit._cli import app
from tests.cli.test_reference_commands import validator

ROOT = Path(__file__).resolve().parents[2]
VERL = ROOT / "sample_dumps" / "verl" / "rollout_data"
FANOUT = ROOT / "sample_dumps" / "fanout"
DUMP_DETAILS = ROOT / "sample_dumps" / "dump_details"
# The prompt text verl's sample repeats in both of its steps, as the report prints it.
REPEATED = r"<|im_start|>user What is 12 + 30? Put the answer in \boxed{}.<|im_end|> <|im_start|>assistant"


def run(*args: object):
    return CliRunner(env={"COLUMNS": "100"}).invoke(app, [str(arg) for arg in args])


def test_steps_audits_only_those_steps():
    result = run("compare", VERL, "--steps", "2", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["info"]["step_values"] == [2] and document["info"]["samples"] == 16
    both = json.loads(run("compare", VERL, "--steps", "1-2", "--json").stdout)
    assert both["info"]["step_values"] == [1, 2] and both["info"]["samples"] == 40


@pytest.mark.parametrize(
    "steps, line",
    [
        ("40-45", "error: steps 40-45 are not in the dump (it holds 1-2)"),
        ("2,7", "error: step 7 is not in the dump (it holds 1-2)"),
        ("1-x", "error: steps '1-x': '1-x' is not a step or a range (expected steps and inclusive ranges"),
    ],
)
def test_steps_the_dump_lacks_are_one_line_and_exit_2(steps, line):
    result = run("compare", VERL, "--steps", steps)
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(line)


def test_prompt_shows_its_samples_after_the_report():
    result = run("compare", FANOUT, "--prompt", "30")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    title = lines.index("Prompt 30: 8 samples, 4 trajectories, step 3")
    assert title > next(index for index, line in enumerate(lines) if line.startswith("Worst prompts"))
    assert lines[title + 1].split() == ["step", "traj.", "key", "reward", "prompt", "(ref)", "batch", "trajectory"]
    samples = [line.split() for line in lines[title + 3 :] if line.strip()]
    # Prompt 30 solved nothing: no signal under prompt and trajectory, an invented one under batch.
    assert len(samples) == 8 and all(row[2:] == ["0", "0", "-0.8469", "0"] for row in samples)


def test_prompt_in_markdown_and_json_with_the_recorded_advantages():
    markdown = run("compare", DUMP_DETAILS, "--prompt", "2", "--markdown")
    assert markdown.exit_code == 0, markdown.stderr
    assert "#### Prompt 2: 3 samples, 3 trajectories, step 0" in markdown.stdout
    assert "| step | traj. key | reward | prompt (ref) | batch | trajectory | recorded |" in markdown.stdout
    result = run("compare", DUMP_DETAILS, "--prompt", "2", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    validator("compare").validate(document)
    view = document["prompt"]
    assert view["key"] == 2 and view["reference"] == "prompt" and len(view["samples"]) == 3
    assert list(view["samples"][0]["advantages"]) == ["prompt", "batch", "trajectory", "recorded"]
    assert view["samples"][0]["step"] == 0 and view["samples"][0]["trajectory"] == 10


def test_a_prompt_key_the_dump_lacks_is_one_line_naming_some_it_has():
    result = run("compare", FANOUT, "--prompt", "300")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: prompt '300' is not in the dump (did you mean '30'?) (it has 8: 24, 25, 26, 27, 28, ...)"
    ]


def test_prompt_with_steps_figures_and_a_page(tmp_path):
    result = run(
        "compare", VERL, "--steps", "1", "--prompt", REPEATED, "--html", tmp_path / "r.html", "--plot", tmp_path
    )
    assert result.exit_code == 0, result.stderr
    assert "Prompt <|im_start|>user What is 12 + 30?" in result.stdout and "4 samples" in result.stdout
    assert (tmp_path / "advantage_scatter.png").exists() and "<svg" in (tmp_path / "r.html").read_text()
    # A prompt of step 1 alone is not there once step 2 alone is chosen.
    only_in_1 = REPEATED.replace("12 + 30", "7 + 8")
    assert run("compare", VERL, "--prompt", only_in_1).exit_code == 0
    only_2 = run("compare", VERL, "--steps", "2", "--prompt", only_in_1)
    assert only_2.exit_code == 2 and only_2.stderr.startswith("error: prompt '<|im_start|>user What is 7 + 8?")


def test_the_installed_command_audits_chosen_steps_and_one_prompt():
    bin_directory = Path(sys.executable).parent
    environment = {**os.environ, "PATH": f"{bin_directory}{os.pathsep}{os.environ.get('PATH', '')}"}
    environment.pop("GITHUB_ACTIONS", None)
    result = subprocess.run(
        ["rollaudit", "compare", "sample_dumps/verl/rollout_data", "--steps", "2", "--prompt", REPEATED, "--markdown"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "step 2" in result.stdout
        and "#### Prompt" in result.stdout
        and "4 samples, 4 trajectories, step 2" in result.stdout
    )
    missing = subprocess.run(
        ["rollaudit", "compare", "sample_dumps/verl/rollout_data", "--steps", "40-45"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=300,
    )
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr == "error: steps 40-45 are not in the dump (it holds 1-2)\n"
