"""The README's console examples, run for real: the drift check of ``tests/test_readme.py``, and the updater.

    python tests/readme_examples.py            # exit 1 and show a diff where an example's output drifted
    python tests/readme_examples.py --update   # rewrite every example's output from a real run

An example is a fenced ``console`` block of README.md: each ``$ `` line is a command (a trailing ``\\``
continues it on the next line), and the lines after it, up to the next ``$ `` line, are what it prints
(stdout and stderr, as a terminal shows them). Blocks of other languages (``bash``, ``python``) are
illustrations and never run.

Each block runs as one bash script (so ``echo $?`` reads the previous command's exit code) in a scratch
directory that holds the project's ``sample_dumps`` and ``README.md`` and a cache of its own, at
:data:`COLUMNS` columns. Durations are the one thing that differ from run to run and machine to machine: the
README shows each as ``…`` (``loaded in … s``, ``"seconds": …``), and a run's durations are written so before
comparing, so that no duration in the README can be out of date.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COLUMNS = 100
_FENCE = re.compile(r"^(`{3,})console\s*$")
_MARKER = "@@rollaudit-readme-example@@"
# What differs from run to run: durations. The README shows each as the placeholder; a run's are replaced by it.
_VOLATILE = (
    (re.compile(r"\b\d+\.\d+ s\b"), "… s"),
    (re.compile(r'("(?:command_)?seconds": )[0-9.e-]+'), r"\1…"),
)


@dataclass
class Command:
    """One ``$`` command of a block: its text, and the README lines of its output (``first``..``end``)."""

    text: str
    first: int
    end: int


@dataclass
class Block:
    start: int  # the line of the opening fence
    commands: list[Command]


def blocks(lines: list[str]) -> list[Block]:
    """Every console block of the README's lines, with its commands and where their outputs are."""
    found, index = [], 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        fence, start, index = match.group(1), index, index + 1
        commands: list[Command] = []
        while index < len(lines) and lines[index].rstrip() != fence:
            line = lines[index]
            if line.startswith("$ "):
                if commands:
                    commands[-1].end = index
                text = line[2:]
                while text.endswith("\\") and index + 1 < len(lines):
                    index += 1
                    text += "\n" + lines[index]  # bash joins the lines itself
                commands.append(Command(text, index + 1, index + 1))
            elif commands:
                commands[-1].end = index + 1
            index += 1
        if commands:
            commands[-1].end = index
            found.append(Block(start, commands))
        index += 1
    return found


def run_block(block: Block) -> list[str]:
    """Run a block's commands in a scratch directory; each command's output, as text."""
    with tempfile.TemporaryDirectory(prefix="rollaudit-readme-") as scratch:
        directory = Path(scratch)
        (directory / "sample_dumps").symlink_to(ROOT / "sample_dumps")
        (directory / "README.md").symlink_to(README)
        # The marker goes between commands without changing $?, so that ``echo $?`` reads the command's.
        script = ["exec 2>&1", "status=0"]
        for command in block.commands:
            script += [f"echo {_MARKER}; (exit $status)", command.text, "status=$?"]
        environment = {key: value for key, value in os.environ.items() if not key.startswith(("GITHUB_", "ROLLAUDIT_"))}
        environment.update(
            COLUMNS=str(COLUMNS), XDG_CACHE_HOME=str(directory / ".cache"), TERM="dumb", NO_COLOR="1", LC_ALL="C.UTF-8"
        )
        result = subprocess.run(
            ["bash", "-c", "\n".join(script)],
            cwd=directory,
            env=environment,
            capture_output=True,
            text=True,
            timeout=600,
        )
    outputs = result.stdout.split(_MARKER + "\n")[1:]
    if len(outputs) != len(block.commands):
        raise RuntimeError(f"README block at line {block.start + 1} did not run to its end:\n{result.stdout}")
    return outputs


def _masked(text: str) -> str:
    for pattern, placeholder in _VOLATILE:
        text = pattern.sub(placeholder, text)
    return text


def _expected(lines: list[str], command: Command) -> str:
    return "".join(line + "\n" for line in lines[command.first : command.end])


def check(lines: list[str], jobs: int = 4) -> tuple[list[str], list[str]]:
    """Run every block; (the README's lines with every output replaced by a fresh run's, the drift diffs)."""
    found = blocks(lines)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        outputs = list(pool.map(run_block, found))
    updated, drifts, taken = [], [], 0
    for block, block_outputs in zip(found, outputs, strict=True):
        for command, output in zip(block.commands, block_outputs, strict=True):
            expected, output = _expected(lines, command), _masked(output)
            if expected != output:
                diff = difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    output.splitlines(keepends=True),
                    f"README.md:{command.first} (as written)",
                    f"$ {command.text} (as it runs)",
                )
                drifts.append("".join(diff))
                updated += lines[taken : command.first] + output.splitlines()
            else:
                updated += lines[taken : command.end]
            taken = command.end
    updated += lines[taken:]
    return updated, drifts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the outputs in README.md from real runs")
    options = parser.parse_args(argv)
    lines = README.read_text(encoding="utf-8").splitlines()
    updated, drifts = check(lines)
    if options.update:
        README.write_text("\n".join(updated) + "\n", encoding="utf-8")
        print(f"README.md: {len(drifts)} example output(s) rewritten", file=sys.stderr)
        return 0
    for diff in drifts:
        print(diff, file=sys.stderr)
    return 1 if drifts else 0


if __name__ == "__main__":
    sys.exit(main())
