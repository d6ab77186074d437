"""Fuzzing the shapes an attacker writes rather than bytes a disk damages: text that a CI runner, a spreadsheet,
a Markdown renderer or a terminal would act on, in file names, keys, field names and statuses; ROLL's
``reward_info`` of every JSON type; lone surrogates in ROLL tags and rllm trajectory names.

Whatever the input, a command ends in exit 0 with its output or exit 2 with one ``error:`` line, never a
traceback; no output line starts with ``::`` (a GitHub Actions workflow command); no raw control character
reaches stdout or stderr; a CSV text cell never starts with a formula character; Markdown never holds ``![``.
"""

from __future__ import annotations

import csv
import functools
import json
import unicodedata
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rollaudit._cli import app
from tests.fuzz import harness, mutations
from tests.fuzz.harness import case_directory, read_sample, run_case

# Pieces that act on something downstream: workflow commands, terminal escapes (OSC title and clipboard, CSI, C1,
# bidi), spreadsheet formulas, Markdown images, links and mentions.
HOSTILE_PIECES = (
    "::error::owned",
    "::stop-commands::token",
    "::add-mask::secret",
    "::warning file=x::y",
    "\x1b]0;owned\x07",
    "\x1b]52;c;b3duZWQ=\x07",
    "\x1b[2J",
    "\x9b31m",
    "\u202e",
    "\x07",
    "\r",
    "\n",
    "\t",
    '=HYPERLINK("https://host/x","y")',
    "@SUM(1+1)",
    "+1",
    "-1",
    "![](https://host/p.png)",
    "[link](https://host)",
    "@octocat",
    "%0A",
)
# Characters that may never leave rollaudit raw: C0 and C1 controls (the newline between lines aside) and the
# bidi overrides and isolates.
_BIDI = {chr(code) for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def hostile_text(surrogates: bool = False) -> st.SearchStrategy[str]:
    """A few hostile pieces, plain text between them (a lone surrogate among it, where asked for)."""
    plain = st.text(alphabet="ab:=@![]()/ ", max_size=3)
    pieces = [st.sampled_from(HOSTILE_PIECES), plain]
    if surrogates:
        pieces.append(st.sampled_from(["\ud800", "\udfff", "a\udc80b"]))
    return st.lists(st.one_of(*pieces), min_size=1, max_size=4).map("".join)


def _settings() -> settings:
    profile = harness.fuzz_settings()
    return settings(profile, max_examples=max(20, profile.max_examples // 10))


def check_output(result: Any, note: str) -> None:
    """The promise of every command on untrusted input (see the module's docstring)."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{note}: raised {result.exception!r}") from result.exception
    output = result.stdout + result.stderr
    shown = f"{note}: exit {result.exit_code}\n{output[-3000:]!r}"
    assert result.exit_code in (0, 2), shown
    assert "Traceback" not in output, shown
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
    if result.exit_code == 2:
        assert len(errors) == 1 and errors[0].startswith("error: "), shown
    for line in output.split("\n"):
        assert not line.lstrip().startswith("::"), f"a workflow command: {line!r}\n{shown}"
    raw = sorted({character for character in output if _raw_control(character)})
    assert not raw, f"raw control characters {raw!r}\n{shown}"


def _raw_control(character: str) -> bool:
    return character != "\n" and (unicodedata.category(character) == "Cc" or character in _BIDI)


def invoke(*arguments: str | Path) -> Any:
    return CliRunner(env={"COLUMNS": "100", "GITHUB_ACTIONS": None}).invoke(
        app, [str(argument) for argument in arguments], catch_exceptions=True
    )


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


# ---------------------------------------------------------------------------------------------------------------------
# File names: printed in the load line, in warnings, in error lines.


@_settings()
@given(names=st.lists(hostile_text(), min_size=2, max_size=3, unique=True), broken=st.booleans())
def test_file_names_with_escapes(names: list[str], broken: bool):
    with case_directory() as directory:
        run = directory / "run"
        run.mkdir()
        written = []
        for index, name in enumerate(names):
            # A name is one path part of at most 255 bytes: no "/" and no NUL.
            part = name.replace("/", "_").replace("\x00", "_").encode()[:200].decode(errors="ignore") or "x"
            path = run / f"{part}{index}.jsonl"
            rows = [{"prompt": row // 2, "reward": float(row % 2)} for row in range(8)]
            path.write_text("{not json\n" if broken and index == 0 else _jsonl(rows))
            written.append(path)
        # Two files without steps: a warning names the first; a broken file: the error line names it.
        for arguments in (("compare", run), ("inspect", run), ("compare", written[-1]), ("inspect", written[0])):
            check_output(invoke(*arguments, "--no-cache"), f"{arguments[0]} {names!r} broken={broken}")


# ---------------------------------------------------------------------------------------------------------------------
# Keys, field names and statuses: prompt tables, Fields rows, CSV cells, Markdown.


@_settings()
@given(keys=st.lists(hostile_text(), min_size=2, max_size=4, unique=True), field=hostile_text(), status=hostile_text())
def test_keys_and_fields_that_act_downstream(keys: list[str], field: str, status: str):
    rows = [
        {"prompt": keys[row % len(keys)], "reward": float(row % 3 == 0), "status": status, field: keys[0]}
        for row in range(4 * len(keys))
    ]
    with case_directory() as directory:
        dump = directory / "rollouts.jsonl"
        dump.write_text(_jsonl(rows))
        note = f"keys {keys!r}, field {field!r}, status {status!r}"
        for arguments in (("compare",), ("compare", "--top", "10"), ("inspect",)):
            check_output(invoke(*arguments, dump, "--no-cache"), f"{' '.join(arguments)} {note}")
        markdown = invoke("compare", dump, "--no-cache", "--markdown")
        check_output(markdown, f"compare --markdown {note}")
        assert "![" not in markdown.stdout, f"a Markdown image from the dump: {note}\n{markdown.stdout[-2000:]}"
        table = directory / "table.csv"
        converted = invoke("convert", dump, "--no-cache", "-o", table, "-q")
        check_output(converted, f"convert {note}")
        if converted.exit_code == 0:
            with table.open(encoding="utf-8", newline="") as text:
                rows_read = list(csv.DictReader(text))
            for row in rows_read:
                for name in ("prompt", "status"):
                    cell = row.get(name) or ""
                    assert not cell.startswith(_FORMULA_STARTS), f"a formula cell {cell!r} in {name}: {note}"


# ---------------------------------------------------------------------------------------------------------------------
# ROLL: reward_info of every JSON type, lone surrogates in tags. rllm: lone surrogates in trajectory names.

_ROLL_SAMPLE = "roll/rollout_dump_data.step_2.jsonl"
_RLLM_STEP = "rllm/episodes/train_step_1_epoch_0"
JSON_OF_EVERY_TYPE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    hostile_text(surrogates=True),
    st.lists(st.one_of(st.none(), st.floats(allow_nan=False), st.text(max_size=3)), max_size=3),
    st.dictionaries(
        st.sampled_from(["episode_reward", "step_rewards", "final_reward", "other"]), mutations.JSON_VALUES, max_size=4
    ),
)


@functools.cache
def _roll_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in read_sample(_ROLL_SAMPLE).decode().splitlines() if line.strip()]


def _roll_dump(reward_info: Any, tag: str, every: bool) -> bytes:
    """The ROLL sample with ``reward_info`` and ``tag`` in its first trajectory (in every one, where asked)."""
    lines = []
    for line in _roll_lines():
        changed = dict(line)
        trajectories = []
        for index, text in enumerate(line["trajectory_data"]):
            trajectory = json.loads(text)
            if every or index == 0:
                trajectory["reward_info"] = reward_info
                trajectory["env_info"]["tag"] = tag
            trajectories.append(json.dumps(trajectory))  # a lone surrogate is written as its \\u escape
        changed["trajectory_data"] = trajectories
        lines.append(json.dumps(changed))
    return ("\n".join(lines) + "\n").encode()


@_settings()
@given(reward_info=JSON_OF_EVERY_TYPE, tag=hostile_text(surrogates=True), every=st.booleans())
def test_roll_reward_info_of_every_type_and_hostile_tags(reward_info: Any, tag: str, every: bool):
    data = _roll_dump(reward_info, tag, every)
    name = "rollout_dump_data.step_2.jsonl"
    run_case("roll", {name: data}, description=f"reward_info {reward_info!r}, tag {tag!r}")
    with case_directory() as directory:
        (directory / name).write_bytes(data)
        for command in ("compare", "inspect"):
            check_output(invoke(command, directory / name, "--no-cache"), f"{command} {reward_info!r} {tag!r}")


@functools.cache
def _rllm_files() -> dict[str, bytes]:
    folder = harness.SAMPLES / _RLLM_STEP
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@_settings()
@given(name=hostile_text(surrogates=True), episode=st.integers(0, 8))
def test_rllm_trajectory_names_with_surrogates(name: str, episode: int):
    files = dict(_rllm_files())
    episodes = sorted(file for file in files if file.startswith("episode_"))
    chosen = episodes[episode % len(episodes)]
    document = json.loads(files[chosen])
    for trajectory in document.get("trajectories", []):
        trajectory["name"] = name
    files[chosen] = json.dumps(document).encode()
    folder = "episodes/train_step_1_epoch_0"
    run_case("rllm", {f"{folder}/{file}": data for file, data in files.items()}, target=folder,
             description=f"rllm trajectory name {name!r}")  # fmt: skip
    with case_directory() as directory:
        step = directory / folder
        step.mkdir(parents=True)
        for file, data in files.items():
            (step / file).write_bytes(data)
        for command in ("compare", "inspect"):
            check_output(invoke(command, step, "--no-cache"), f"{command} rllm name {name!r}")
