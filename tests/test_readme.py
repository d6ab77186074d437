"""The README is kept true by running it: every console example's output must be what its command prints now.

``python tests/readme_examples.py --update`` rewrites the outputs from real runs after a deliberate change.
"""

from __future__ import annotations

import re
import shutil

import pytest

from tests import readme_examples


def test_every_console_example_in_the_readme_prints_what_it_shows():
    if shutil.which("jq") is None:
        pytest.skip("no jq for the README's JSON examples (.ci/run installs it)")
    lines = readme_examples.README.read_text(encoding="utf-8").splitlines()
    assert len(readme_examples.blocks(lines)) >= 5
    _, drifts = readme_examples.check(lines)
    assert not drifts, (
        "README examples drifted from what their commands print (run `python tests/readme_examples.py --update` "
        "if the change is meant):\n" + "\n".join(drifts)
    )


def test_an_example_edited_by_hand_is_caught():
    lines = readme_examples.README.read_text(encoding="utf-8").splitlines()
    first = readme_examples.blocks(lines)[0]
    block_lines = lines[first.start : first.commands[-1].end + 1]
    command = readme_examples.blocks(block_lines)[0].commands[0]
    edited = list(block_lines)
    edited[command.first + 1] = edited[command.first + 1].replace("26 samples", "27 samples")
    assert edited != block_lines
    _, drifts = readme_examples.check(edited)
    assert len(drifts) == 1 and "-step 0 · 27 samples" in drifts[0] and "+step 0 · 26 samples" in drifts[0]
    # The README shows durations as "…": a number written there instead is drift, the one a machine's speed makes.
    assert any("… s" in line for line in block_lines)
    assert not any(re.search(r"\d+\.\d+ s\b", line) for line in block_lines)
    timed = [line.replace("… s", "9.63 s") for line in block_lines]
    assert len(readme_examples.check(timed)[1]) == 1


def test_the_block_parser_joins_continued_commands_and_splits_outputs():
    lines = ["```console", "$ echo a \\", "    b", "a b", "$ echo c", "c", "```"]
    (block,) = readme_examples.blocks(lines)
    assert [command.text for command in block.commands] == ["echo a \\\n    b", "echo c"]
    assert [(command.first, command.end) for command in block.commands] == [(3, 4), (5, 6)]


def test_ci_runs_the_readme_s_test_command() -> None:
    """The README's second command (set up a machine and run the tests) is what ``.ci/run`` runs, extras included,
    so that the tests CI runs are those a user runs."""
    text = readme_examples.README.read_text(encoding="utf-8")
    commands = re.findall(r"```bash\n(python3 -m venv .*?)\n```", text)
    assert len(commands) >= 2, commands
    readme_steps = [step.strip() for step in commands[1].split("&&")]
    ci_lines = (readme_examples.ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    ci_steps = [step.strip().replace("pip install -q ", "pip install ") for step in ci_lines[-1].split("&&")]
    assert readme_steps[:2] == ["python3 -m venv .venv", ". .venv/bin/activate"]
    assert readme_steps[2] == "python -m pip install torch==2.13.0"
    assert any(line.endswith("|| python -m pip install -q torch==2.13.0") for line in ci_lines)
    assert readme_steps[3:] == ci_steps
    assert "tensorboard" in ci_steps[0] and "wandb" in ci_steps[0]


def test_the_first_command_shows_a_finding_on_recorded_evidence() -> None:
    """A newcomer's first screen: the Set-up command audits a bundled dump whose verdict rests on the recorded
    advantages and finds something (a finding with its code, signs changed, invented signal, the advice), and the
    first example shows it (its first screen: the command as run, cut with ``head``)."""
    import json

    from typer.testing import CliRunner

    from rollaudit._cli import app

    text = readme_examples.README.read_text(encoding="utf-8")
    setup = re.findall(r"```bash\n(python3 -m venv .*?)\n```", text)[0]
    first = setup.split("&&")[-1].strip()
    assert first == "rollaudit compare sample_dumps/dump_details"
    lines = text.splitlines()
    shown_command = readme_examples.blocks(lines)[0].commands[0].text
    assert re.fullmatch(re.escape(first) + r"( \| head -n \d+)?", shown_command), shown_command
    result = CliRunner().invoke(app, [*first.split()[1:], "--json", "--no-cache"], catch_exceptions=False)
    document = json.loads(result.stdout)
    assert document["trained_with"]["evidence"] == "recorded" and document["trained_with"]["scheme"] == "batch"
    trained = document["summary"][document["trained_with"]["row"]]
    assert trained["sign_flip_rate"] > 0 and trained["spurious_nonzero"] > 0 and document["advice"]
    assert [finding["code"] for finding in document["findings"]] == ["batch-as-group"]
    shown = "\n".join(lines)
    assert "Findings:\n- error batch-as-group: 1 step centred as one group over 6 prompts (24 rows)" in shown
    assert "Verdict: trained with batch (its recorded advantages)." in shown
    assert f"0 reversed, {trained['spurious_nonzero']} invented, 0 lost" in shown
