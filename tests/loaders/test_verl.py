"""The verl loader: rollout_data_dir samples, balanced line order, steps, extra info, bad lines."""

from __future__ import annotations

import itertools
import json
import warnings
from collections import Counter
from pathlib import Path

import pytest

import rollaudit
from rollaudit import InputError, RollauditWarning
from rollaudit._table import CANONICAL_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
VERL = ROOT / "sample_dumps" / "verl" / "rollout_data"
LINE = {"input": "p0", "output": "an answer", "gts": "4", "score": 1.0, "step": 3, "acc": True}


def write_lines(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def column(table, name: str) -> list:
    return table.column(name).to_pylist()


def one_line(error: BaseException) -> str:
    message = str(error)
    assert "\n" not in message and "Traceback" not in message
    return message


def cli_exit(path: Path, capsys, *options: str) -> tuple[int, str]:
    """``rollaudit inspect PATH``: the exit code and stderr."""
    from rollaudit._cli import main

    with pytest.raises(SystemExit) as caught:
        main(["inspect", str(path), "--quiet", *options])
    return caught.value.code, capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------------
# The committed samples.


def test_rollout_data_dir_gives_one_batch_per_step():
    table = rollaudit.load(VERL)
    assert table.column_names[: len(CANONICAL_COLUMNS)] == list(CANONICAL_COLUMNS)
    assert Counter(column(table, "step")) == {1: 24, 2: 16}
    for step in (1, 2):
        part = table.filter(table.column("step").to_numpy() == step)
        assert column(part, "position") == list(range(part.num_rows))
        assert set(Counter(column(part, "prompt")).values()) == {4}  # verl's rollout.n = 4 per prompt
    # Texts are read for the key and never kept; numeric and boolean extra info passes through.
    assert not {"input", "output", "gts", "pred"} & set(table.column_names)
    assert table.schema.field("acc").type == "bool"
    assert column(table, "trajectory") == [None] * table.num_rows


def test_lines_keep_the_trainers_balanced_order():
    lines = [json.loads(line) for line in (VERL / "1.jsonl").read_text(encoding="utf-8").splitlines()]
    table = rollaudit.load(VERL / "1.jsonl")
    assert column(table, "prompt") == [line["input"] for line in lines]
    assert column(table, "reward") == [line["score"] for line in lines]
    assert column(table, "acc") == [line["acc"] for line in lines]
    runs = sum(1 for a, b in itertools.pairwise(lines) if a["input"] != b["input"]) + 1
    assert runs > len({line["input"] for line in lines})  # a prompt's lines are not contiguous


def test_prompt_groups_follow_the_text_in_any_order():
    table = rollaudit.load(VERL / "1.jsonl")
    advantages = rollaudit.recompute(table, ["verl-grpo"]).column(0).to_pylist()
    by_prompt: dict[str, list[float]] = {}
    for prompt, advantage in zip(column(table, "prompt"), advantages, strict=True):
        by_prompt.setdefault(prompt, []).append(advantage)
    for values in by_prompt.values():
        assert abs(sum(values)) < 1e-9  # centred within each prompt, wherever its lines sit


def test_the_json_reader_is_pyarrows(tmp_path: Path, monkeypatch):
    """No Python pass per line: json.loads only sees the first line (format detection and field types)."""
    path = write_lines(tmp_path / "5.jsonl", [{**LINE, "input": f"p{i % 50}", "step": 5} for i in range(3000)])
    from rollaudit._loaders.arrow import tables

    calls = []
    original = tables.json.loads
    monkeypatch.setattr(tables.json, "loads", lambda text, *a, **k: calls.append(1) or original(text, *a, **k))
    table = rollaudit.load(path)
    assert table.num_rows == 3000 and len(calls) <= 3


# ---------------------------------------------------------------------------------------------------------------------
# Steps, extra info, column options.


def test_step_comes_from_the_file_name_when_lines_have_none(tmp_path: Path):
    line = {key: value for key, value in LINE.items() if key != "step"}
    table = rollaudit.load(write_lines(tmp_path / "12.jsonl", [line, line]))
    assert column(table, "step") == [12, 12]
    with pytest.raises(InputError, match=r"no 'step' field and the file name is not \{step\}.jsonl"):
        rollaudit.load(write_lines(tmp_path / "rollouts.jsonl", [line]), format="verl")


def test_two_files_of_one_step_are_an_error(tmp_path: Path):
    for folder in ("train", "val"):
        (tmp_path / folder).mkdir()
        write_lines(tmp_path / folder / "3.jsonl", [LINE, LINE])
    with pytest.raises(InputError, match="two verl dumps of step 3"):
        rollaudit.load([tmp_path / "train" / "3.jsonl", tmp_path / "val" / "3.jsonl"])


def test_validation_lines_keep_their_reward_under_another_name(tmp_path: Path):
    table = rollaudit.load(write_lines(tmp_path / "3.jsonl", [{**LINE, "reward": 0.25}] * 2))
    assert column(table, "reward") == [1.0, 1.0]
    assert column(table, "source_reward") == [0.25, 0.25]


def test_an_extra_field_of_changing_type_is_left_out_with_a_warning(tmp_path: Path):
    path = write_lines(tmp_path / "3.jsonl", [LINE, {**LINE, "acc": "yes"}])
    with pytest.warns(RollauditWarning, match=r"left out .*line 2 has 'acc' as a string where a boolean"):
        table = rollaudit.load(path)
    assert "acc" not in table.column_names and table.num_rows == 2


def test_column_options(tmp_path: Path):
    lines = [
        {**LINE, "uid": "u1", "traj": 7, "adv": 0.5, "score": 0.0, "acc": 1.0},
        {**LINE, "uid": "u1", "traj": 8, "adv": -0.5, "score": 1.0, "acc": 0.0},
    ]
    table = rollaudit.load(
        write_lines(tmp_path / "3.jsonl", lines),
        prompt_col="uid",
        reward_col="acc",
        trajectory_col="traj",
        advantage_col="adv",
    )
    assert column(table, "prompt") == ["u1", "u1"]
    assert column(table, "reward") == [1.0, 0.0]
    assert column(table, "trajectory") == [7, 8]
    assert column(table, "recorded_advantage") == [0.5, -0.5]
    assert column(table, "score") == [0.0, 1.0]  # the default reward field, now an extra
    with pytest.raises(InputError, match=r"no 'nope' field; fields found: 'input', 'output'"):
        rollaudit.load(tmp_path / "3.jsonl", reward_col="nope")


def test_a_first_line_longer_than_the_sniff_limit_and_a_json_block(tmp_path: Path, monkeypatch):
    from rollaudit._loaders.arrow import tables

    monkeypatch.setattr(tables, "_JSON_BLOCK_BYTES", 1 << 20)  # the line straddles blocks: read again, larger
    long_prompt = "x" * (5 << 20)
    long_line, short_line = {**LINE, "input": long_prompt, "step": 4}, {**LINE, "step": 4}
    path = write_lines(tmp_path / "4.jsonl", [long_line, short_line, long_line, short_line])
    for format in (None, "verl"):
        table = rollaudit.load(path, format=format)
        assert column(table, "reward") == [1.0] * 4 and column(table, "step") == [4] * 4
        assert len(set(column(table, "prompt"))) == 2


# ---------------------------------------------------------------------------------------------------------------------
# Bad input: one line naming the file (and line), exit code 2.

BAD = {
    "missing_score.jsonl": ([{"input": "p", "output": "o", "step": 1}], "the first line has no 'score' field"),
    "string_score.jsonl": ([LINE, {**LINE, "score": "high"}], "line 2 has 'score' as a string where a number"),
    "null_score.jsonl": ([LINE, {**LINE, "score": None}], "row 2: line without a 'score' value"),
    "truncated.jsonl": ([LINE, json.dumps(LINE)[:25]], "line 2 is not valid JSON"),
    "array_line.jsonl": ([LINE, "[1, 2]"], "line 2 is an array, not a JSON object"),
    "changing_input.jsonl": ([LINE, {**LINE, "input": ["chat"]}], "line 2 has 'input' as an array where a string"),
    "empty.jsonl": ([], "empty file"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_files_give_one_line_and_exit_2(tmp_path: Path, capsys, name: str):
    lines, message = BAD[name]
    path = write_lines(tmp_path / name, lines) if lines else tmp_path / name
    path.touch()
    with pytest.raises(InputError) as caught:
        rollaudit.load(path, format="verl")
    assert message in one_line(caught.value) and name in str(caught.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, stderr = cli_exit(path, capsys, "--format", "verl")
    assert code == 2
    assert stderr.count("\n") == 1 and message in stderr


CORPUS_VERL = ROOT.parent / "shared" / "corpus" / "verl"
_BATCHES = {
    "corpus v1": sorted((CORPUS_VERL / "rollout_data_v1").glob("*.jsonl")),
    "corpus v0": sorted((CORPUS_VERL / "rollout_data_v0").glob("*.jsonl")),
    "sample v1": sorted((ROOT / "sample_dumps" / "verl_v1").rglob("*.jsonl")),
    "sample v0": sorted(VERL.glob("*.jsonl")),
}


@pytest.mark.parametrize("name", sorted(_BATCHES))
def test_files_read_together_are_the_files_read_one_by_one(name: str):
    """A worker reads a task's verl files in one pass: each table is what ``read`` makes of its file, metadata and
    positions included (V1's padding rows counted per file)."""
    from rollaudit._loaders.formats import verl
    from rollaudit._loaders.options import LoadOptions

    paths = _BATCHES[name]
    if not paths:
        pytest.skip("no such files here")
    options = LoadOptions()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a missing reward is said by the file's own read (the engine's fallback)
        together = verl.read_files([*paths, *paths], options)
        alone = [verl.read(path, options) for path in [*paths, *paths]]
    assert len(together) == len(alone)
    for mine, theirs in zip(together, alone, strict=True):
        assert mine.equals(theirs, check_metadata=True)


def test_a_bad_file_read_with_others_is_named_as_alone(tmp_path: Path):
    """One file of a task that fails, or that warns, is said exactly as its own read says it: the others' tables
    are still read, its error names it and its row."""
    from rollaudit._loaders.options import LoadOptions
    from rollaudit._loaders.run.engine import read_outcomes

    line = {**LINE, "uid": "p_0_0"}
    good = [write_lines(tmp_path / f"{step}.jsonl", [dict(line, step=step)] * 4) for step in (1, 2)]
    bad = write_lines(tmp_path / "3.jsonl", [dict(line, step=3), dict(line, step=3, uid="p_x_0")])
    outcomes = read_outcomes([("verl", path) for path in [*good, bad]], LoadOptions())
    assert [outcome.table is not None for outcome in outcomes] == [True, True, False]
    assert outcomes[2].error is not None
    _, fields = outcomes[2].error
    assert fields["file"] == str(bad) and fields["row"] == 1 and "session_id is not a number" in fields["message"]
    warned = write_lines(tmp_path / "4.jsonl", [dict(line, step=4), dict(line, step=4, score=float("nan"))])
    outcomes = read_outcomes([("verl", path) for path in [*good, warned]], LoadOptions())
    assert [len(outcome.warned) for outcome in outcomes] == [0, 0, 1]
    assert str(warned) in outcomes[2].warned[0][1] or "4.jsonl" in outcomes[2].warned[0][1]
