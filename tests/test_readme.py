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
    edited[command.first + 1] = edited[command.first + 1].replace("88 samples", "89 samples")
    assert edited != block_lines
    _, drifts = readme_examples.check(edited)
    assert len(drifts) == 1 and "-step 3 · 89 samples" in drifts[0] and "+step 3 · 88 samples" in drifts[0]
    # Durations alone never count as drift.
    timed = [re.sub(r"\d+\.\d+ s\b", "99.99 s", line) for line in block_lines]
    assert timed != block_lines
    assert readme_examples.check(timed)[1] == []


def test_the_block_parser_joins_continued_commands_and_splits_outputs():
    lines = ["```console", "$ echo a \\", "    b", "a b", "$ echo c", "c", "```"]
    (block,) = readme_examples.blocks(lines)
    assert [command.text for command in block.commands] == ["echo a \\\n    b", "echo c"]
    assert [(command.first, command.end) for command in block.commands] == [(3, 4), (5, 6)]
