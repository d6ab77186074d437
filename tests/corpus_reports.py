"""What ``rollaudit compare`` says of every run of the conformance corpus (its JSON, its terminal text and its
Markdown) and what ``rollaudit gate`` says of it (JSON and text), timings masked: the outputs a change that promises
the same numbers must leave byte for byte the same.

    python -m tests.corpus_reports --write   # with the code before a change: tests/fixtures/corpus_reports.json.gz

A run is a path of the corpus (a framework's folder, a run's folder or one file, three levels down at most, and the
runs deeper than that), with the options it needs; a path that refuses to load is recorded too, by its exit code
and error line (the same errors are part of the same outputs).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("ROLLAUDIT_CORPUS", ROOT.parent / "shared" / "corpus"))
FIXTURE = ROOT / "tests" / "fixtures" / "corpus_reports.json.gz"
MOST_LEVELS = 3
# Runs below MOST_LEVELS, and runs that need an option, by path relative to the corpus.
EXTRA_RUNS: dict[str, list[str]] = {
    "areal/experiments/logs/rl/gsm8k-agent-grpo/trial0": [],
    "areal/experiments/logs/rl/gsm8k-agent-grpo/trial1-concat-rnorm": [],
    "slime --reward-key score": ["--reward-key", "score"],
}
# Timings, and where the audit ran, differ from run to run and machine to machine; the corpus lies anywhere.
_MASKED = re.compile(r'"(seconds|command_seconds|device)": ("[^"]*"|[-+0-9.eE]+)')
_SECONDS = re.compile(r"\b(on \w+ in|loaded in) [0-9.]+ s\b|\b[0-9.]+ s in all\b")
_SECONDS_VALUE = re.compile(r"[0-9][0-9.]*(?= s\b)")
GATE_RULES = ["--max", "batch:sign_flip_rate=0.1", "--min", "prompt:advantage_cosine=0.99"]
WIDTH = "100"


def runs() -> dict[str, tuple[Path, list[str]]]:
    """Every run: its name, its path and its options."""
    found: dict[str, tuple[Path, list[str]]] = {".": (CORPUS, [])}
    for path in sorted(CORPUS.rglob("*")):
        parts = path.relative_to(CORPUS).parts
        if len(parts) > MOST_LEVELS or any(part.startswith((".", "expected")) for part in parts):
            continue
        if path.is_file() and path.suffix == ".md":
            continue
        found["/".join(parts)] = (path, [])
    for name, options in EXTRA_RUNS.items():
        found[name] = (CORPUS / name.split(" ")[0], options)
    return found


def masked(text: str) -> str:
    return _MASKED.sub(lambda match: f'"{match.group(1)}": "<masked>"', text).replace(str(CORPUS), "<corpus>")


def masked_text(text: str) -> str:
    """A text report with its timings masked: each paragraph that holds one (wrapped to the width the timings take) as
    one line, with ``<t>`` for the seconds."""
    paragraphs = text.replace(str(CORPUS), "<corpus>").split("\n\n")
    for index, paragraph in enumerate(paragraphs):
        line = " ".join(part.strip() for part in paragraph.splitlines())
        if _SECONDS.search(line):
            paragraphs[index] = _SECONDS.sub(lambda match: _SECONDS_VALUE.sub("<t>", match.group(0)), line)
    return "\n\n".join(paragraphs)


def _run(*arguments: str) -> tuple[int, str, list[str]]:
    from typer.testing import CliRunner

    from rollaudit._cli import app

    result = CliRunner(env={"COLUMNS": WIDTH}).invoke(app, [*arguments, "--no-cache", "--quiet"])
    return result.exit_code, result.stdout, [line for line in result.stderr.splitlines() if line.startswith("error:")]


def report(path: Path, options: list[str]) -> dict[str, object]:
    """``compare PATH --json`` in this process: its exit code, and its masked report or its error line; where it
    reports, its terminal text and Markdown, and the gate's JSON and text on ``GATE_RULES``."""
    code, out, errors = _run("compare", str(path), *options, "--json")
    if code != 0:
        return {"exit": code, "error": masked("\n".join(errors))}
    outputs: dict[str, object] = {"exit": 0, "report": masked(out)}
    outputs["terminal"] = masked_text(_run("compare", str(path), *options)[1])
    outputs["markdown"] = masked_text(_run("compare", str(path), *options, "--markdown")[1])
    for name, extra in (("gate", ["--json"]), ("gate_text", [])):
        code, out, errors = _run("gate", str(path), *options, *GATE_RULES, *extra)
        outputs[name] = {"exit": code, "output": masked(out) if extra else masked_text(out), "errors": errors}
    return outputs


def recorded() -> dict[str, dict[str, object]]:
    with gzip.open(FIXTURE, "rt", encoding="utf-8") as stream:
        return json.load(stream)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"record every run's report in {FIXTURE}")
    arguments = parser.parse_args()
    if not CORPUS.is_dir():
        sys.exit(f"no corpus at {CORPUS} (set ROLLAUDIT_CORPUS)")
    reports = {name: report(path, options) for name, (path, options) in runs().items()}
    for name, outcome in reports.items():
        print(outcome["exit"], name)
    if arguments.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        # mtime 0: the same reports make the same bytes.
        with gzip.GzipFile(FIXTURE, "wb", mtime=0) as stream:
            stream.write(json.dumps(reports, indent=0, sort_keys=True).encode())


if __name__ == "__main__":
    main()
