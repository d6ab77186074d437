"""The generic loader: Parquet, Arrow, JSON Lines and CSV tables, common names, column options, per-token lists."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rollaudit
from rollaudit import InputError, RollauditWarning, UsageError
from rollaudit._audit.trained_with.fit import fit_presets
from rollaudit._errors import ChoiceNeeded
from rollaudit._table import CANONICAL_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
DUMPS = ROOT / "sample_dumps"
_spec = importlib.util.spec_from_file_location("sample_dumps_generate_tables", DUMPS / "generate_tables.py")
generate_tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate_tables)


def column(table, name: str) -> list:
    return table.column(name).to_pylist()


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def load_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RollauditWarning)
        return rollaudit.load(*args, **kwargs)


def warnings_of(*args, **kwargs) -> tuple[pa.Table, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = rollaudit.load(*args, **kwargs)
    return table, [str(warning.message) for warning in caught if issubclass(warning.category, RollauditWarning)]


# ---------------------------------------------------------------------------------------------------------------------
# The committed samples.


def test_committed_samples_match_the_generator():
    assert generate_tables.main(["--check"]) == 0


def test_csv_jsonl_and_feather_give_the_same_table():
    tables = [rollaudit.load(DUMPS / "generic" / f"rollouts.{suffix}") for suffix in ("csv", "jsonl", "feather")]
    assert tables[0].equals(tables[1]) and tables[0].equals(tables[2])
    table = tables[0]
    assert table.column_names == list(CANONICAL_COLUMNS)  # uid, traj_uid, score, status: all found by name
    assert Counter(column(table, "step")) == {0: 6, 1: 6}
    assert column(table, "position") == list(range(6)) * 2
    assert column(table, "prompt")[:2] == ["q0-0", "q0-0"] and column(table, "trajectory")[:2] == ["t0-0-0", "t0-0-1"]
    assert column(table, "status") == ["completed"] * 12


def test_agent_lightning_export_keys_prompts_and_trajectories_apart():
    table = rollaudit.load(DUMPS / "agl" / "rollouts.parquet")
    raw = pq.read_table(DUMPS / "agl" / "rollouts.parquet")
    assert column(table, "prompt") == column(raw, "data_id")
    assert column(table, "trajectory") == column(raw, "rollout_id")
    assert {"attempt", "sequence_id"} <= set(table.column_names)
    assert column(table, "response_length") == column(raw, "response_length")
    trajectories_of = Counter(dict.fromkeys(zip(column(table, "prompt"), column(table, "trajectory"), strict=True)))
    per_prompt = Counter(prompt for prompt, _ in trajectories_of)
    assert sorted(per_prompt.values()) == [1, 2, 3, 3]
    assert max(Counter(column(table, "trajectory")).values()) > 1  # one row per LLM call of an attempt
    values = rollaudit.recompute(table, ["prompt", "trajectory", "agl-dedup"])
    assert values.column("advantage:prompt").to_pylist() != values.column("advantage:trajectory").to_pylist()


def test_nemo_rl_per_token_advantages_reduce_to_the_sequence_value():
    path = DUMPS / "nemo" / "train_data_step3.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    table = rollaudit.load(path)
    assert set(column(table, "step")) == {3}  # from the file name train_data_step{N}
    assert column(table, "prompt") == [line["prompt_id"] for line in lines]
    assert column(table, "reward") == [line["rewards"] for line in lines]
    first_masked_in = [line["advantages"][line["token_loss_mask"].index(1)] for line in lines]
    assert column(table, "recorded_advantage") == first_masked_in
    assert any(line["advantages"][0] != value for line, value in zip(lines, first_masked_in, strict=True))
    assert column(table, "response_length") == [sum(line["token_loss_mask"]) for line in lines]
    assert not {"content", "advantages", "generation_logprobs", "token_loss_mask"} & set(table.column_names)
    assert {"sample_loss_mask", "input_lengths"} <= set(table.column_names)
    for rule in ("last", "mean"):
        assert column(rollaudit.load(path, token_reduce=rule), "recorded_advantage") == pytest.approx(first_masked_in)
    fits = fit_presets(table)
    assert fits[0].scheme == "nemo-loo" and fits[0].share_within_tolerance == 1.0


# ---------------------------------------------------------------------------------------------------------------------
# Reduction rules.


def test_without_a_mask_the_first_element_is_the_advantage(tmp_path: Path):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"uid": 0, "reward": 1.0, "advantages": [0.5, 0.5]}])
    assert column(rollaudit.load(path), "recorded_advantage") == [0.5]
    assert column(rollaudit.load(path), "response_length") == [None]


def test_per_token_advantages_that_vary_are_not_an_outcome_scheme(tmp_path: Path):
    rows = [
        {"uid": 0, "reward": 1.0, "advantages": [9.0, 0.5, 0.25], "loss_mask": [0, 1, 1]},
        {"uid": 0, "reward": 0.0, "advantages": [9.0, -0.5, -0.5], "loss_mask": [0, 1, 1]},
        {"uid": 0, "reward": 0.0, "advantages": [1.0, 2.0, 3.0], "loss_mask": [1, 0, 1]},
        {"uid": 0, "reward": 0.0, "advantages": [], "loss_mask": []},
    ]
    table, messages = warnings_of(write_jsonl(tmp_path / "rows.jsonl", rows))
    assert column(table, "recorded_advantage") == [0.5, -0.5, 1.0, None]
    assert len(messages) == 1 and "vary within 2 rows: not an outcome scheme" in messages[0]
    mean = load_quietly(tmp_path / "rows.jsonl", token_reduce="mean")
    assert column(mean, "recorded_advantage") == [0.375, -0.5, 2.0, None]
    with pytest.raises(UsageError, match="token_reduce"):
        rollaudit.load(tmp_path / "rows.jsonl", token_reduce="median")


def test_per_token_rewards_sum_over_the_masked_in_tokens(tmp_path: Path):
    rows = [
        {"uid": 0, "rewards": [0.0, 0.0, 1.0], "response_mask": [0, 1, 1]},
        {"uid": 0, "rewards": [5.0, 0.5, 0.25], "response_mask": [0, 1, 1]},
    ]
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", rows))
    assert column(table, "reward") == [1.0, 0.75]
    assert column(table, "response_length") == [2, 2]


def test_a_mask_of_other_lengths_is_an_error(tmp_path: Path):
    rows = [{"uid": 0, "reward": 1.0, "advantages": [1.0, 1.0], "token_mask": [1]}]
    with pytest.raises(InputError, match=r"field 'token_mask': row 1: has 1 mask values for 2 values"):
        rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", rows))


def test_missing_rewards_are_nan_and_reported_once(tmp_path: Path):
    path = tmp_path / "rows.csv"
    path.write_text("uid,reward\na,1\na,\nb,nan\nb,0.5\n")
    table, messages = warnings_of(path)
    assert np.isnan(column(table, "reward")[1]) and np.isnan(column(table, "reward")[2])
    assert len(messages) == 1 and "2 rows have a NaN, infinite or missing reward (first at row 2" in messages[0]


# ---------------------------------------------------------------------------------------------------------------------
# Columns: options, common names, keys, pass-through.


def test_column_options_override_the_common_names(tmp_path: Path):
    table = pa.table(
        {
            "ep": [4, 4, 5],
            "task": ["a", "a", "b"],
            "episode": ["e1", "e2", "e3"],
            "final_return": [1.0, 0.0, 2.0],
            "adv": [0.5, -0.5, 0.0],
            "reward": [9.0, 9.0, 9.0],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    loaded = rollaudit.load(
        tmp_path / "t.parquet",
        reward_col="final_return",
        prompt_col="task",
        trajectory_col="episode",
        step_col="ep",
        advantage_col="adv",
    )
    assert column(loaded, "step") == [4, 4, 5]
    assert column(loaded, "prompt") == ["a", "a", "b"] and column(loaded, "trajectory") == ["e1", "e2", "e3"]
    assert column(loaded, "reward") == [1.0, 0.0, 2.0] and column(loaded, "recorded_advantage") == [0.5, -0.5, 0.0]
    assert column(loaded, "source_reward") == [9.0, 9.0, 9.0]  # a canonical name, kept under another
    with pytest.raises(InputError, match=r"no column 'nope' for the prompt key; columns found: 'ep', 'task'"):
        rollaudit.load(tmp_path / "t.parquet", prompt_col="nope")
    with pytest.raises(UsageError, match="prompt_col"):
        rollaudit.load(tmp_path / "t.parquet", prompt_col=3)


def test_common_names_in_priority_order(tmp_path: Path):
    rows = [{"score": 2.0, "reward": 1.0, "data_id": "d", "prompt": "text", "rollout_id": 3, "global_step": 8}]
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", rows))
    assert column(table, "reward") == [1.0] and column(table, "score") == [2.0]
    assert column(table, "prompt") == ["d"] and column(table, "source_prompt") == ["text"]
    assert column(table, "trajectory") == [3] and column(table, "step") == [8]


def test_keys_of_other_types(tmp_path: Path):
    table = pa.table(
        {
            "reward": [1.0, 0.0, 1.0],
            "group_index": pa.array([1.0, math.nan, 2.0]),  # integer ids with a gap, as pandas writes them
            "trajectory": pa.array([[{"role": "user", "content": "hi"}], None, []]),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    loaded = rollaudit.load(tmp_path / "t.parquet")
    assert column(loaded, "prompt") == [1, None, 2]
    assert column(loaded, "trajectory") == ['[{"content": "hi", "role": "user"}]', None, "[]"]
    pq.write_table(pa.table({"reward": [1.0], "group_index": [1.5]}), tmp_path / "fraction.parquet")
    with pytest.raises(InputError, match=r"field 'group_index': row 1: has non-integer keys"):
        rollaudit.load(tmp_path / "fraction.parquet")


def test_no_prompt_column(tmp_path: Path):
    path = tmp_path / "rows.csv"
    path.write_text("x,reward\na,1\nb,0\nc,1\nd,1\n")
    table, messages = warnings_of(path)
    assert column(table, "prompt") == [None] * 4 and "no prompt column" in messages[0]
    assert column(rollaudit.load(path, n_samples_per_prompt=2), "prompt") == [0, 0, 1, 1]
    with pytest.raises(InputError, match=r"not slices of --n-samples-per-prompt 3"):
        rollaudit.load(path, n_samples_per_prompt=3)


def test_files_of_one_step_form_one_batch(tmp_path: Path):
    first = write_jsonl(tmp_path / "task_a.jsonl", [{"task_id": "a", "reward": 1.0}, {"task_id": "a", "reward": 0.0}])
    second = write_jsonl(tmp_path / "task_b.jsonl", [{"task_id": "b", "reward": 1.0}])
    table, messages = warnings_of([first, second])
    assert column(table, "step") == [0, 0, 0] and column(table, "position") == [0, 1, 2]
    assert column(table, "prompt") == ["a", "a", "b"]
    assert any("2 files have no step column" in text for text in messages)
    stepped = write_jsonl(tmp_path / "more.jsonl", [{"task_id": "c", "reward": 1.0, "step": 0}])
    assert column(load_quietly([first, stepped]), "position") == [0, 1, 2]


def test_the_canonical_table_round_trips(tmp_path: Path):
    table = rollaudit.make_table(
        reward=[1.0, 0.0, 0.5],
        prompt=[7, 7, 8],
        trajectory=[1, 2, None],
        step=[3, 3, 3],
        status=["completed", "truncated", None],
        response_length=[4, 5, 6],
        recorded_advantage=[0.7, -0.7, None],
    )
    pq.write_table(table, tmp_path / "t.parquet")
    feather.write_feather(table, tmp_path / "t.feather")
    pa_csv.write_csv(table, tmp_path / "t.csv")
    with pa.OSFile(str(tmp_path / "t.arrows"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    for name in ("t.parquet", "t.feather", "t.csv", "t.arrows"):
        loaded = rollaudit.load(tmp_path / name)
        assert loaded.select(list(CANONICAL_COLUMNS)).equals(table), name


def test_a_directory_of_tables_skips_other_files(tmp_path: Path):
    write_jsonl(tmp_path / "a.jsonl", [{"uid": 1, "reward": 1.0, "step": 1}])
    (tmp_path / "README.md").write_text("# notes, and a comma\n")
    assert column(rollaudit.load(tmp_path), "reward") == [1.0]


# ---------------------------------------------------------------------------------------------------------------------
# Bad input: one line, exit code 2.


def cli_exit(path: Path, capsys, command: str = "inspect") -> tuple[int, str]:
    from rollaudit._cli import main

    with pytest.raises(SystemExit) as caught:
        main([command, str(path), "--quiet"])
    return caught.value.code, capsys.readouterr().err


BAD = {
    "no_reward.csv": ("uid,value\na,1\n", "no reward column; columns found: 'uid', 'value'"),
    "no_reward.jsonl": ('{"uid": 1, "value": 2}\n', "no reward column; columns found: 'uid', 'value'"),
    "text_reward.csv": ("uid,reward\na,1\nb,high\n", "field 'reward': row 2: is not a number: 'high'"),
    "text_reward.jsonl": ('{"uid": 1, "reward": "1"}\n{"uid": 1, "reward": "x"}\n', "row 2: is not a number: 'x'"),
    "ragged.csv": ("uid,reward\na,1\nb,2,3\n", "line 3 has 3 fields where the header has 2"),
    "ragged.jsonl": ('{"uid": 1, "reward": 1}\n{"uid": 1, "reward": [1, 2\n', "line 2 is not valid JSON"),
    "typed.jsonl": ('{"uid": 1, "reward": 1}\n{"uid": 1, "reward": {}}\n', "line 2 has 'reward' as an object"),
    "empty.csv": ("", "empty file"),
    "blank.jsonl": ("\n  \n", "empty file"),
    "header_only.csv": ("uid,reward\n", "empty file: the table has no rows"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_files_give_one_line_and_exit_2(tmp_path: Path, capsys, name: str):
    text, message = BAD[name]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        rollaudit.load(path)
    assert "\n" not in str(caught.value) and message in str(caught.value) and name in str(caught.value)
    # A table without a reward column leaves a choice to the user: inspect describes it (see below), compare stops.
    code, stderr = cli_exit(path, capsys, "compare" if name.startswith("no_reward") else "inspect")
    assert code == 2 and stderr.count("\n") == 1 and message in stderr


def test_a_table_without_a_reward_column_names_the_option_and_inspect_lists_its_columns(tmp_path: Path, capsys):
    from rollaudit._cli import main

    path = tmp_path / "scores.csv"
    path.write_text("uid,acc,fmt,step,note\na,1,0.5,0,x\na,0,1,0,y\nb,1,1,0,z\nb,1,0,0,w\n")
    with pytest.raises(ChoiceNeeded) as caught:
        rollaudit.load(path)
    assert caught.value.expected == "a column named reward, score, rewards, or --reward-col naming one"
    code, stderr = cli_exit(path, capsys, "compare")
    assert code == 2 and stderr == (
        f"error: {path}: no reward column; columns found: 'uid', 'acc', 'fmt', 'step', 'note' (expected a column "
        "named reward, score, rewards, or --reward-col naming one)\n"
    )
    with pytest.raises(SystemExit) as exited:
        main(["inspect", str(path), "--json", "--no-cache"])
    document = json.loads(capsys.readouterr().out)
    assert exited.value.code == 0 and document["samples"] == 4 and document["prompts"] == 2
    assert document["reward"] == {
        "kind": "no reward column (numeric columns: 'acc', 'fmt'); compare needs --reward-col COLUMN",
        "min": None,
        "mean": None,
        "max": None,
        "nonfinite": 0,
    }
    fields = {field["name"]: field["non_null"] for field in document["fields"]}
    assert fields["reward"] == 0 and fields["acc"] == fields["fmt"] == fields["note"] == 4
    assert rollaudit.load(path, reward_col="acc").column("reward").to_pylist() == [1.0, 0.0, 1.0, 1.0]


def test_bad_parquet_files(tmp_path: Path):
    pq.write_table(pa.table({"uid": [1], "reward": pa.array([[b"x"]])}), tmp_path / "odd.parquet")
    with pytest.raises(InputError, match=r"field 'reward': has type binary"):
        rollaudit.load(tmp_path / "odd.parquet")
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"uid": [1] * 100, "reward": [1.0] * 100}), good)
    (tmp_path / "cut.parquet").write_bytes(good.read_bytes()[:-30])
    with pytest.raises(InputError, match=r"cut.parquet: cannot read as Parquet"):
        rollaudit.load(tmp_path / "cut.parquet")


# ---------------------------------------------------------------------------------------------------------------------
# Steps read piece by piece across chunks: runs, positions, splits and the batch-order check.


def _chunked(values: list[int], cuts: list[int]) -> pa.ChunkedArray:
    bounds = [0, *sorted(cut % (len(values) + 1) for cut in cuts), len(values)]
    return pa.chunked_array([pa.array(values[a:b], pa.int64()) for a, b in itertools.pairwise(bounds)], pa.int64())


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.integers(0, 4), min_size=1, max_size=30).flatmap(
        lambda values: st.sampled_from([values, sorted(values), sorted(values, reverse=True)])
    ),
    cuts=st.lists(st.integers(0, 40), max_size=3),
    piece=st.sampled_from([1, 2, 3, 1 << 20]),
    most_in_place=st.sampled_from([0, 4096]),
)
def test_step_runs_and_positions_piece_by_piece_match_whole_arrays(steps, cuts, piece, most_in_place):
    from unittest import mock

    from rollaudit import _table
    from rollaudit._loaders.arrow.columns import split_steps
    from rollaudit._loaders.run import load as load_module

    changes = [0, *(row for row in range(1, len(steps)) if steps[row] != steps[row - 1]), len(steps)]
    run_steps = [steps[start] for start in changes[:-1]]
    contiguous = len(set(run_steps)) == len(run_steps)
    expected_positions = [sum(1 for earlier in steps[:row] if earlier == step) for row, step in enumerate(steps)]
    column = _chunked(steps, cuts)
    with (
        mock.patch.object(_table, "PIECE_ROWS", piece),
        mock.patch.object(_table, "_MOST_RUNS_IN_PLACE", most_in_place),
    ):
        runs = _table.contiguous_runs(column)
        positions = _table.positions_in_row_order(column).to_pylist()
        table = rollaudit.make_table(reward=[0.0] * len(steps), step=column)
        parts = split_steps(table)
        with mock.patch.object(load_module, "PIECE_ROWS", piece):
            shuffled = table.set_column(1, "position", pa.array(np.arange(len(steps))[::-1].copy()))
            in_order = load_module._sorted(table)
            reordered = load_module._sorted(shuffled)
            by_step = load_module._in_step_order([part for _, part in reversed(parts)])
    assert (runs is not None) == contiguous
    if contiguous:
        assert runs[0].tolist() == changes and runs[1].tolist() == run_steps
    assert positions == expected_positions
    assert [step for step, _ in parts] == sorted(set(steps))
    for step, part in parts:
        assert part.column("step").to_pylist() == [step] * steps.count(step)
        assert part.column("position").to_pylist() == list(range(steps.count(step)))
    ordered = all(
        (steps[row], expected_positions[row]) < (steps[row + 1], expected_positions[row + 1])
        for row in range(len(steps) - 1)
    )
    assert (in_order is table) == ordered
    assert in_order.column("step").to_pylist() == sorted(steps)
    pairs = list(zip(reordered.column("step").to_pylist(), reordered.column("position").to_pylist(), strict=True))
    assert len(pairs) == len(steps) and all(a < b for a, b in itertools.pairwise(pairs))
    # Tables of one step each, in any order, concatenated in step order as they are.
    assert by_step.column("step").to_pylist() == sorted(steps)
    assert by_step.column("position").to_pylist() == in_order.column("position").to_pylist()
