"""The TRL loader: completions parquet, positional groups, TRL's reward and recorded advantages, bad files."""

from __future__ import annotations

import importlib.util
import math
import random
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import rollaudit
from rollaudit import InputError, RollauditWarning, UsageError
from rollaudit._audit.trained_with.fit import fit_presets

ROOT = Path(__file__).resolve().parents[2]
TRL = ROOT / "sample_dumps" / "trl"
SAMPLE = TRL / "completions" / "completions_00010.parquet"
_spec = importlib.util.spec_from_file_location(
    "sample_dumps_generate_tables", ROOT / "sample_dumps" / "generate_tables.py"
)
generate_tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate_tables)


def column(table, name: str) -> list:
    return table.column(name).to_pylist()


def same(a: list, b: list) -> bool:
    return all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True))


def write_trl(path: Path, prompts: list, rewards: dict[str, list], step=1, advantage=None, **extra) -> Path:
    data = {"step": [step] * len(prompts), "prompt": prompts, "completion": ["c"] * len(prompts), **rewards, **extra}
    if advantage is not None:
        data["advantage"] = advantage
    pq.write_table(pa.table(data), path)
    return path


def load_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RollauditWarning)
        return rollaudit.load(*args, **kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# The committed sample.


def test_sample_is_trls_layout():
    schema = pq.read_schema(SAMPLE)
    assert schema.names == ["step", "prompt", "completion", "accuracy_reward", "format_reward", "advantage"]
    assert schema.field("prompt").type == pa.large_string()


def test_sample_loads_with_positional_groups():
    raw = pq.read_table(SAMPLE)
    table = load_quietly(TRL)  # an output_dir: its completions/completions_*.parquet
    assert table.num_rows == 24 and set(column(table, "step")) == {10}
    assert column(table, "prompt") == [position // 4 for position in range(24)]
    texts = column(raw, "prompt")
    assert texts[8] == texts[12]  # slices 2 and 3 share a prompt text and stay two groups
    assert column(table, "recorded_advantage") == column(raw, "advantage")
    assert same(column(table, "accuracy_reward"), column(raw, "accuracy_reward"))
    assert not {"completion", "advantage"} & set(table.column_names)
    rewards = column(table, "reward")
    assert rewards[9] == 0.5  # accuracy None, format 0.5: nan-sum
    assert math.isnan(rewards[18])  # every function None: unscorable
    assert rewards[0] == 1.5


def test_sample_warns_once_about_the_unscorable_row():
    with pytest.warns(RollauditWarning, match=r"1 row has a NaN, infinite or missing reward \(first at row 19"):
        rollaudit.load(SAMPLE)


def test_recorded_advantages_are_detected_as_trl_group():
    fits = fit_presets(load_quietly(SAMPLE))
    assert fits[0].scheme == "trl-group(n=4)" and fits[0].share_within_tolerance == 1.0
    assert all(fit.share_within_tolerance < 1.0 for fit in fits[1:])


@pytest.mark.parametrize("seed", range(6))
def test_trls_formula_is_fitted_exactly(tmp_path: Path, seed: int):
    """Random reward functions with None (NaN) values, TRL's float32 arithmetic: trl-group reproduces it."""
    rng = random.Random(seed)
    n = rng.choice([2, 3, 4, 8])
    groups = rng.randint(1, 6)
    rows = n * groups
    functions = rng.randint(1, 3)
    values = [[rng.choice([0.0, 1.0, 0.5, -1.0, 2.25, math.nan]) for _ in range(functions)] for _ in range(rows)]
    weights = [rng.choice([1.0, 0.5, 2.0]) for _ in range(functions)]
    per_func = torch.tensor(values, dtype=torch.float32)
    advantages = generate_tables.trl_advantages(per_func, torch.tensor(weights), n)
    prompts = [f"prompt {position // n}" for position in range(rows)]
    rewards = {f"reward_{k}": per_func[:, k].tolist() for k in range(functions)}
    path = write_trl(tmp_path / "completions_00001.parquet", prompts, rewards, advantage=advantages.tolist())
    table = load_quietly(path, reward_weights=weights)
    fits = fit_presets(table, schemes=[f"trl-group(n={n})"])
    assert fits[0].share_within_tolerance == 1.0, fits


# ---------------------------------------------------------------------------------------------------------------------
# Options: reward columns, weights, num_generations.


def test_reward_columns_and_weights():
    raw = pq.read_table(SAMPLE)
    accuracy, formatting = column(raw, "accuracy_reward"), column(raw, "format_reward")
    only_accuracy = column(load_quietly(SAMPLE, reward_columns=["accuracy_reward"]), "reward")
    assert same(only_accuracy, accuracy)
    assert same(column(load_quietly(SAMPLE, reward_col="accuracy_reward"), "reward"), accuracy)
    weighted = column(load_quietly(SAMPLE, reward_weights=[1.0, 2.0]), "reward")
    expected = [
        math.nan if math.isnan(a) and math.isnan(f) else (0 if math.isnan(a) else a) + 2 * (0 if math.isnan(f) else f)
        for a, f in zip(accuracy, formatting, strict=True)
    ]
    assert same(weighted, expected)
    by_name = column(load_quietly(SAMPLE, reward_weights={"format_reward": 0.0}), "reward")
    assert by_name[9] == 0.0 and by_name[0] == 1.0  # a weight of 0 keeps the row scorable, as in TRL
    with pytest.raises(InputError, match=r"--reward-weights gives 3 weights for 2 reward columns"):
        rollaudit.load(SAMPLE, reward_weights=[1, 1, 1])
    with pytest.raises(InputError, match=r"--reward-weights names 'speed', not a reward column"):
        rollaudit.load(SAMPLE, reward_weights={"speed": 1.0})
    with pytest.raises(InputError, match=r"no reward column 'speed'; columns found: 'step', 'prompt'"):
        rollaudit.load(SAMPLE, reward_columns=["speed"])
    for bad in ("heavy", [1.0, math.inf], [True], {"format_reward": "x"}):
        with pytest.raises(UsageError, match="reward_weights"):
            rollaudit.load(SAMPLE, reward_weights=bad)


def test_num_generations_given_wins_over_the_text_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = rollaudit.load(SAMPLE, num_generations=8)
    messages = [str(warning.message) for warning in caught]
    assert any("prompt text changes inside the group of rows 1-8 (num_generations=8)" in text for text in messages)
    assert column(table, "prompt") == [position // 8 for position in range(24)]
    same_as_n = load_quietly(SAMPLE, n_samples_per_prompt=4)
    assert column(same_as_n, "prompt") == [position // 4 for position in range(24)]
    with pytest.raises(InputError, match=r"--num-generations 5 does not divide the 24 rows of step 10"):
        load_quietly(SAMPLE, num_generations=5)
    with pytest.raises(UsageError, match="num_generations"):
        rollaudit.load(SAMPLE, num_generations=0)


def test_text_changing_inside_an_inferred_group_names_the_row(tmp_path: Path):
    path = write_trl(tmp_path / "completions_00001.parquet", list("aabbbc"), {"r": [1.0, 0, 1, 0, 1, 1]})
    with pytest.raises(
        InputError, match=r"field 'prompt': row 6: the prompt text changes inside the group of rows 5-6"
    ):
        rollaudit.load(path)
    uneven = write_trl(tmp_path / "completions_00002.parquet", list("aaab"), {"r": [1.0, 0, 1, 0]})
    with pytest.raises(InputError, match=r"inferred num_generations=3 \(the first run of equal prompts\) does not"):
        rollaudit.load(uneven)


def test_string_steps_and_steps_from_the_file_name(tmp_path: Path):
    path = write_trl(tmp_path / "completions_00004.parquet", list("aabb"), {"r": [1.0, 0, 1, 0]}, step="4")
    assert column(rollaudit.load(path), "step") == [4] * 4
    no_step = tmp_path / "completions_00006.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["step"]), no_step)
    assert column(rollaudit.load(no_step), "step") == [6] * 4
    renamed = tmp_path / "log.parquet"
    renamed.write_bytes(no_step.read_bytes())
    with pytest.raises(InputError, match=r"no step column and the file name is not completions_\{step\}.parquet"):
        rollaudit.load(renamed)


def test_several_steps_and_a_repeated_step(tmp_path: Path):
    first = write_trl(tmp_path / "completions_00001.parquet", list("aabb"), {"r": [1.0, 0, 1, 0]}, step=1)
    second = write_trl(tmp_path / "completions_00002.parquet", list("aaab"), {"r": [1.0, 0, 1, 0]}, step=2)
    table = load_quietly([second, first], num_generations=2, reward_col="r")
    assert column(table, "step") == [1] * 4 + [2] * 4
    again = write_trl(tmp_path / "other.parquet", list("aabb"), {"r": [1.0, 0, 1, 0]}, step=1)
    with pytest.raises(InputError, match="two TRL completion logs of step 1"):
        rollaudit.load([first, again])


def test_extra_columns_pass_through_and_text_does_not(tmp_path: Path):
    path = write_trl(
        tmp_path / "completions_00001.parquet",
        list("aabb"),
        {"accuracy": [1.0, 0, 1, 0]},
        advantage=[0.7, -0.7, 0.7, -0.7],
        solution=["4", "4", "5", "5"],
        mode=["train"] * 4,
    )
    table = rollaudit.load(path, reward_columns=["accuracy"])
    assert column(table, "accuracy") == [1.0, 0, 1, 0]
    assert column(table, "recorded_advantage") == [0.7, -0.7, 0.7, -0.7]
    assert not {"solution", "mode", "completion"} & set(table.column_names)


# ---------------------------------------------------------------------------------------------------------------------
# Bad input: one line, exit code 2.


def cli_exit(path: Path, capsys, *options: str) -> tuple[int, str]:
    from rollaudit._cli import main

    with pytest.raises(SystemExit) as caught:
        main(["inspect", str(path), "--quiet", *options])
    return caught.value.code, capsys.readouterr().err


def _bad_files(folder: Path) -> dict[str, tuple[Path, str]]:
    no_reward = write_trl(folder / "completions_00001.parquet", list("aabb"), {}, advantage=[0.0] * 4)
    text_reward = write_trl(folder / "completions_00002.parquet", list("aabb"), {"judge": ["1", "0", "high", "1"]})
    empty_table = write_trl(folder / "completions_00003.parquet", [], {"r": pa.array([], pa.float64())})
    empty_file = folder / "completions_00004.parquet"
    empty_file.write_bytes(b"")
    ragged = write_trl(folder / "completions_00005.parquet", list("aabbbc"), {"r": [1.0] * 6})
    return {
        "missing reward": (no_reward, "no reward-function column; columns found: 'step', 'prompt'"),
        "non-numeric reward": (text_reward, "field 'judge': row 3: is not a number: 'high'"),
        "empty table": (empty_table, "empty file: the table has no rows"),
        "empty file": (empty_file, "empty file"),
        "groups out of step": (ragged, "row 6: the prompt text changes inside the group of rows 5-6"),
    }


def test_bad_files_give_one_line_and_exit_2(tmp_path: Path, capsys):
    for case, (path, message) in _bad_files(tmp_path).items():
        options = ["--format", "trl"] if case != "empty file" else []
        with pytest.raises(InputError) as caught:
            rollaudit.load(path, reward_columns=["judge"] if case == "non-numeric reward" else None)
        text = str(caught.value)
        assert "\n" not in text and message in text and path.name in text, (case, text)
        if case != "non-numeric reward":  # the CLI's --reward-col wiring is not part of this loader
            code, stderr = cli_exit(path, capsys, *options)
            assert code == 2 and stderr.count("\n") == 1 and message in stderr, (case, stderr)
