"""open-instruct's --save_traces shards: keys checked against sample_idx and prompt_tokens, runs never merged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rollaudit
from rollaudit import InputError
from rollaudit._table import facts_in, found_in, notes_in

LABEL = "open-instruct (prompt = prompt_tokens, trajectory = the row; normalised by prompt_idx)"


def _line(step: int, sample: int, n: int = 2, prompt: list[int] | None = None, **fields) -> dict:
    row = {
        "step": step,
        "sample_idx": sample,
        "prompt_idx": sample // n,
        "prompt_tokens": prompt if prompt is not None else [7, sample // n],
        "response_tokens": [3] * (sample + 1),
        "reward": float(sample % 2),
        "advantage": 0.5 if sample % 2 else -0.5,
        "finish_reason": "stop",
        "dataset": "gsm8k",
        "logprobs": [float("nan")],
    }
    return {**row, **fields}


def _write(path: Path, lines: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))  # NaN as open-instruct writes it
    return path


def test_every_step_of_a_shard_one_batch_each(tmp_path: Path):
    lines = [_line(0, i) for i in range(4)] + [_line(1, i) for i in range(6)]
    _write(tmp_path / "run_rollouts_000000.jsonl", lines)
    _write(tmp_path / "run_metadata.jsonl", [{"run_name": "run", "git_commit": "x"}])
    table = rollaudit.load(tmp_path)
    assert table.column("step").to_pylist() == [0] * 4 + [1] * 6
    assert table.column("prompt").to_pylist() == ["7,0", "7,0", "7,1", "7,1", "7,0", "7,0", "7,1", "7,1", "7,2", "7,2"]
    assert table.column("prompt_idx").to_pylist() == [0, 0, 1, 1, 0, 0, 1, 1, 2, 2]
    assert table.column("trajectory").to_pylist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5]
    assert table.column("response_length").to_pylist() == [1, 2, 3, 4, 1, 2, 3, 4, 5, 6]
    assert table.column("recorded_advantage").to_pylist()[:2] == [-0.5, 0.5]
    assert facts_in(table)["trained_default"]["scheme"] == "oi-centered"
    assert found_in(table)[LABEL] == {
        "prompts (prompt_tokens)": 5,
        "prompt_idx groups": 5,
        "rows (a response each)": 10,
    }
    assert any("n = 2 rows per prompt_idx" in note for note in notes_in(table))


def test_shards_of_one_run_are_read_in_shard_order(tmp_path: Path):
    _write(tmp_path / "r_rollouts_000001.jsonl", [_line(5, i) for i in range(2)])
    _write(tmp_path / "r_rollouts_000000.jsonl", [_line(4, i) for i in range(2)])
    assert rollaudit.load(tmp_path).column("step").to_pylist() == [4, 4, 5, 5]


def test_two_runs_in_one_directory_are_named_never_merged(tmp_path: Path):
    _write(tmp_path / "a_rollouts_000000.jsonl", [_line(0, i) for i in range(2)])
    _write(tmp_path / "b_rollouts_000000.jsonl", [_line(0, i) for i in range(2)])
    with pytest.raises(InputError, match=r"holds 2 runs \(not merged\): a \(open_instruct, .*b \(open_instruct"):
        rollaudit.load(tmp_path)
    assert list(rollaudit.find_runs(tmp_path)) == ["a", "b"]
    with pytest.raises(InputError, match="runs are never merged"):
        rollaudit.load([tmp_path / "a_rollouts_000000.jsonl", tmp_path / "b_rollouts_000000.jsonl"])


def test_a_slice_holding_two_prompts_is_the_presets_grouping_not_the_references(tmp_path: Path):
    lines = [_line(2, 0, prompt=[1]), _line(2, 1, prompt=[1]), _line(2, 2, prompt=[1]), _line(2, 3, prompt=[9])]
    table = rollaudit.load(_write(tmp_path / "m_rollouts_000000.jsonl", lines))
    assert table.column("prompt").to_pylist() == ["1", "1", "1", "9"]  # the true prompts: the reference's groups
    assert table.column("prompt_idx").to_pylist() == [0, 0, 1, 1]  # the slices upstream normalized
    centered = rollaudit.recompute(table, ["oi-centered", "prompt(scale=none)"], device="cpu")
    assert centered.column(0).to_pylist() == [-0.5, 0.5, -0.5, 0.5]
    assert centered.column(1).to_pylist() == pytest.approx([-1 / 3, 2 / 3, -1 / 3, 0.0], abs=1e-15)
    assert found_in(table)[LABEL]["prompt_idx groups mixing prompts (prompt_tokens differ)"] == 1
    assert any(note.startswith("step 2: 1 of 2 prompt_idx groups mix rows") for note in notes_in(table))


def test_a_prompt_of_another_length_differs(tmp_path: Path):
    lines = [_line(0, 0, prompt=[1, 2]), _line(0, 1, prompt=[1, 2, 3])]
    table = rollaudit.load(_write(tmp_path / "x_rollouts_000000.jsonl", lines))
    assert found_in(table)[LABEL]["prompt_idx groups mixing prompts (prompt_tokens differ)"] == 1


@pytest.mark.parametrize(
    ("lines", "field", "row"),
    [
        ([_line(0, 0), _line(0, 2)], "sample_idx", 1),  # a row missing from the batch
        ([_line(0, 0), _line(0, 1), _line(0, 2), _line(0, 3, prompt_idx=2)], "prompt_idx", 3),  # not sample_idx // n
        ([_line(0, i) for i in range(3)], "prompt_idx", 2),  # a short last group: groups of different sizes
        ([_line(0, 0), _line(0, 1, prompt_tokens=None)], "prompt_tokens", 1),
        ([_line(0, 0), _line(0, 1, reward=None)], "reward", 1),
        ([_line(0, 0), {**_line(0, 1), "step": -1}], "step", 1),
    ],
)
def test_keys_that_do_not_verify_are_refused_naming_the_field(tmp_path: Path, lines, field, row):
    with pytest.raises(InputError) as error:
        rollaudit.load(_write(tmp_path / "r_rollouts_000000.jsonl", lines))
    assert error.value.field == field and error.value.row == row


def test_a_step_written_twice_is_refused(tmp_path: Path):
    lines = [_line(0, i) for i in range(2)] + [_line(1, i) for i in range(2)] + [_line(0, i) for i in range(2)]
    with pytest.raises(InputError, match="holds step 0 twice"):
        rollaudit.load(_write(tmp_path / "r_rollouts_000000.jsonl", lines))
    _write(tmp_path / "s" / "s_rollouts_000000.jsonl", [_line(0, i) for i in range(2)])
    _write(tmp_path / "s" / "s_rollouts_000001.jsonl", [_line(0, i) for i in range(2)])
    with pytest.raises(InputError, match="step 0 is written in two shards or twice"):
        rollaudit.load(tmp_path / "s")


def test_groups_the_zero_std_filter_dropped_are_said_absent(tmp_path: Path):
    table = rollaudit.load(_write(tmp_path / "f_rollouts_000000.jsonl", [_line(0, i) for i in range(4)]))
    assert any("filter_zero_std_samples" in note for note in notes_in(table))
    equal = [_line(0, i, reward=1.0) for i in range(2)] + [_line(0, i) for i in range(2, 4)]
    table = rollaudit.load(_write(tmp_path / "g_rollouts_000000.jsonl", equal))
    assert not any("filter_zero_std_samples" in note for note in notes_in(table))
    assert found_in(table)[LABEL]["groups with all-equal rewards (kept: filter_zero_std_samples off)"] == 1
