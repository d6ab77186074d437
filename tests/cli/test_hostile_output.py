"""Hostile text on the way out: prompt keys, field names and file names that would act on a CI log, a Markdown
summary or a terminal, an stdout that cannot encode them, keys a megabyte long.

Each case runs the way a user runs it (``python -m rollaudit`` in a child process, with the environment the case
names), is measured as :mod:`tests.loaders.test_hostile` measures (exit code, no traceback, seconds, peak memory)
and then reads what came out line by line.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from pathlib import Path

from markdown_it import MarkdownIt

from tests.loaders.test_hostile import (
    _measurement_table,  # noqa: F401 - ROLLAUDIT_HOSTILE_TABLE writes these too
    check,
    measure,
    size_of,
)

# Keys that are workflow commands (GitHub Actions runs a log line whose first non-blank characters are '::', and
# '##[' anywhere), Markdown that would render (an image: a tracking pixel; a link; a mention), and a key whose
# ':: ' lands at the start of a line when the prompt column folds it.
COMMAND_KEYS = [
    "::stop-commands::pwned",
    "  ::add-mask::secret",
    "##[error]legacy",
    "abcdefghijklmn::error::folded",
    "abcdefghijklmnop::error::folded",
]
MARKDOWN_KEYS = ["![](https://host/p.png)", "[click](http://evil/x)", "@octo *hi* #1 www.e.co", "<b>x</b>"]
# Far from every legacy code page: box drawing, arrows, CJK, an emoji.
UNENCODABLE_KEYS = ["→ 你好 ✓", "🚀 ∑ Ā"]
_FLIP_REWARDS = ([1.0, 0.9, 0.8, 0.6], [0.0, 0.1, 0.2, 0.4])
"""A group above the batch mean and one below it, each with a sample between: batch advantages flip signs there,
so every key shows up in the prompt tables."""


def dump(path: Path, keys: list[str], field: str = "status") -> Path:
    """A JSON Lines dump: four samples per key, rewards that make ``batch`` flip signs against ``prompt``."""
    rows = [
        {"prompt": key, "reward": reward, field: "ok"}
        for index, key in enumerate(keys)
        for reward in _FLIP_REWARDS[index % 2]
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_as_user(*args: str | Path, cwd: Path, **environment: str) -> dict:
    """``rollaudit ARGS`` measured in a child, with ``environment`` over the usual one (COLUMNS=120, a private
    cache, not under GitHub Actions unless the case says so)."""
    env = {**os.environ, "COLUMNS": "120", "XDG_CACHE_HOME": str(cwd / "cache")}
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "FORCE_COLOR", "TTY_COMPATIBLE", "PYTHONIOENCODING"):
        env.pop(name, None)
    env.update(environment)
    return measure([sys.executable, "-m", "rollaudit", *map(str, args)], cwd, env)


def runner_commands(text: str) -> list[str]:
    """The lines of ``text`` a GitHub Actions runner would run: '::' after leading blanks, or '##[' anywhere (it
    splits lines at CR as well as LF)."""
    return [line for line in re.split(r"\r\n|\r|\n", text) if line.lstrip().startswith("::") or "##[" in line]


def test_workflow_commands_in_dump_text_never_start_a_line(tmp_path: Path):
    """Prompt keys and field names that are workflow commands, in every report a CI log may show; only the
    gate's own annotations start with '::'."""
    path = dump(tmp_path / "commands.jsonl", COMMAND_KEYS, field="::set-output name=x::y")
    runs = {
        "compare": ("compare", path, "--no-cache"),
        "compare, folded keys": ("compare", path, "--no-cache", "--top", "10"),
        "compare --markdown": ("compare", path, "--no-cache", "--markdown"),
        "inspect": ("inspect", path, "--no-cache"),
        "gate": ("gate", path, "--no-cache", "--max", "batch:sign_flip_rate=0", "--require", "no-singletons"),
    }
    styled_too = ("compare, folded keys", "inspect")
    shown = ""
    for case, args in runs.items():
        # FORCE_COLOR: rich styles the output as for a terminal (CI logs allow it), through another path.
        for styled in (False, True) if case in styled_too else (False,):
            environment = {"FORCE_COLOR": "1"} if styled else {}
            environment["COLUMNS"] = "60" if case == "compare, folded keys" else "120"
            if case == "gate":
                environment |= {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
            result = run_as_user(*args, cwd=tmp_path, **environment)
            check(f"workflow commands in keys ({case})", result, size_of(path), codes=(1,) if case == "gate" else (0,))
            commands = runner_commands(result["stdout"]) + runner_commands(result["stderr"])
            own = [line for line in commands if re.match(r"::(error|notice|warning) title=rollaudit gate%3A ", line)]
            assert commands == own, commands
            assert len(own) == (1 if case == "gate" else 0), commands
            shown += result["stdout"] if case.startswith("compare") else ""
    assert "\\x3a:stop-commands::pwn" in shown and "#\\x23[error]legacy" in shown  # shown escaped, not dropped


def _rendered_text(markdown: str) -> tuple[str, str]:
    """(HTML, the text a reader sees) of ``markdown`` rendered as CommonMark with tables."""
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    return rendered, html.unescape(re.sub(r"<[^>]*>", "", rendered))


def test_markdown_in_dump_text_renders_as_literal_text(tmp_path: Path):
    """Images, links, emphasis, HTML, mentions, references and autolinks from a dump, in ``compare --markdown``
    and in the gate's step summary, show as the characters they are."""
    path = dump(tmp_path / "markdown.jsonl", [*MARKDOWN_KEYS, "single ![](https://host/q.png) @octocat"])
    path.write_text(path.read_text().rsplit("\n", 4)[0] + "\n")  # the last key: one sample, quoted by the gate
    summary = tmp_path / "summary.md"
    compare = run_as_user("compare", path, "--no-cache", "--markdown", "--top", "10", cwd=tmp_path)
    check("Markdown in keys (compare --markdown)", compare, size_of(path), codes=(0,))
    gate = run_as_user(
        "gate", path, "--no-cache", "--require", "no-singletons", cwd=tmp_path,
        GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary),
    )  # fmt: skip
    check("Markdown in keys (gate step summary)", gate, size_of(path), codes=(1,))
    for markdown in (compare["stdout"], summary.read_text()):
        rendered = _rendered_text(markdown)[0]
        for element in ("<img", "<a ", "<em>", "<b>", "<del>"):
            assert element not in rendered, rendered
        # GitHub links these after parsing, whatever escapes them: they must not be one word in the source.
        for linked in ("@octo", "#1", "www.e", "https://", "http://"):
            assert linked not in markdown, markdown
    # The reader sees each key as it is (compare cuts keys at 24 characters; the gate quotes them).
    assert "![](https://host/p.png)" in _rendered_text(compare["stdout"])[1]
    assert "@octo *hi* #1 www.e.co" in _rendered_text(compare["stdout"])[1]
    assert "single ![](https://host/q.png) @octocat" in _rendered_text(summary.read_text())[1]


def test_file_names_reach_the_terminal_escaped(tmp_path: Path):
    """OSC 0 (window title), OSC 52 (clipboard) and a screen clear in file names: in warning lines, the progress
    bar (FORCE_COLOR draws it as on a terminal), the report header, and an error line."""
    hostile = "\x1b]0;owned\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\u202e"
    run = tmp_path / "run"
    run.mkdir()
    for index in range(2):  # two files: a progress bar; no prompt column and no steps: a warning per file and one
        rows = [{"reward": float(sample % 2), "id": sample} for sample in range(8)]
        (run / f"{hostile}{index}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / f"{hostile}.csv").write_text("not,a\ndump\n")
    cases = {
        "inspect, progress bar": (("inspect", run, "--no-cache"), {"FORCE_COLOR": "1"}, (0,)),
        "compare": (("compare", run, "--no-cache", "--n-samples-per-prompt", "4"), {}, (0,)),
        "an unreadable file": (("inspect", tmp_path / f"{hostile}.csv", "--no-cache"), {}, (2,)),
    }
    for case, (args, environment, codes) in cases.items():
        result = run_as_user(*args, cwd=tmp_path, **environment)
        check(f"escapes in file names ({case})", result, size_of(run), codes=codes)
        shown = result["stdout"] + result["stderr"]
        for control in ("\x1b]", "\x07", "\x1b[2J", "\u202e"):
            assert control not in shown, repr(shown[:600])
        assert "\\x1b]0;owned\\x07" in shown, repr(shown[:600])  # named, escaped


def test_an_stdout_that_cannot_encode_the_report(tmp_path: Path):
    """cp1252 and latin-1 stdout (Windows, a pipe): reports degrade to replacement characters, never a
    UnicodeEncodeError traceback."""
    path = dump(tmp_path / "unencodable.jsonl", UNENCODABLE_KEYS * 2 + ["ü", "€"])
    run = tmp_path / "run"
    run.mkdir()
    (run / "step_0.jsonl").write_text(path.read_text())
    commands = {
        "compare": ("compare", path, "--no-cache"),
        "inspect": ("inspect", path, "--no-cache"),
        "gate": ("gate", path, "--no-cache", "--max", "batch:sign_flip_rate=0"),
        "watch": ("watch", run, "--no-cache", "--until-idle", "0.5", "--max", "batch:sign_flip_rate=0"),
    }
    for encoding in ("cp1252", "latin-1"):
        for case, args in commands.items():
            if case == "watch" and encoding != "cp1252":
                continue  # the slowest command: once is enough
            result = run_as_user(*args, cwd=tmp_path, PYTHONIOENCODING=encoding)
            codes = (1,) if case in ("gate", "watch") else (0,)
            check(f"{encoding} stdout ({case})", result, size_of(path), codes=codes)
            assert "UnicodeEncodeError" not in result["stderr"], result["stderr"][-2000:]
            assert result["stdout"].strip(), case


def test_the_gate_cuts_a_megabyte_key_in_every_output(tmp_path: Path):
    """A 2 MB prompt key quoted by a failing rule: the table, the annotation, the step summary and the JUnit file
    stay small (GitHub drops a step summary over 1 MiB); the JSON document keeps the message whole."""
    key = "::error::" + "K" * (2 << 20)
    path = dump(tmp_path / "long_key.jsonl", ["a", "b"])
    with path.open("a") as handle:
        handle.write(json.dumps({"prompt": key, "reward": 1.0, "status": "ok"}) + "\n")
    summary, junit = tmp_path / "summary.md", tmp_path / "gate.xml"
    rules = ("--require", "no-singletons", "--max", "batch:sign_flip_rate=0")
    result = run_as_user(
        "gate", path, "--no-cache", *rules, "--junit", junit, cwd=tmp_path,
        GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary),
    )  # fmt: skip
    check("a 2 MB prompt key quoted by the gate", result, size_of(path), codes=(1,))
    lines = result["stdout"].splitlines() + result["stderr"].splitlines()
    assert max(len(line) for line in lines) < 2_000, max(len(line) for line in lines)
    assert len(result["stdout"]) + len(result["stderr"]) < 20_000
    assert summary.stat().st_size < 10_000 and junit.stat().st_size < 10_000
    annotations = [line for line in result["stdout"].splitlines() if line.startswith("::error ")]
    assert len(annotations) == 2 and any("KKK…" in line for line in annotations), annotations
    as_json = run_as_user("gate", path, "--no-cache", *rules, "--json", cwd=tmp_path)
    check("a 2 MB prompt key quoted by the gate (--json)", as_json, size_of(path), codes=(1,))
    messages = [rule["message"] for rule in json.loads(as_json["stdout"])["rules"]]
    assert any(key in message for message in messages)


def test_a_one_column_terminal_keeps_the_gate_table_readable(tmp_path: Path):
    """``COLUMNS=1``: the table keeps a minimum width, so a rule name and a verdict stay whole words."""
    path = dump(tmp_path / "narrow.jsonl", ["a", "b", "c", "d"])
    for environment in ({}, {"FORCE_COLOR": "1"}):
        result = run_as_user(
            "gate", path, "--no-cache", "--max", "batch:sign_flip_rate=0", cwd=tmp_path, COLUMNS="1", **environment
        )
        check("COLUMNS=1 (gate table)", result, size_of(path), codes=(1,))
        plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", result["stdout"])
        assert re.search(r"\bFAIL\b", plain) and re.search(r"\brule\b", plain) and "detail" in plain, plain
        assert len(plain.splitlines()) < 40, plain
