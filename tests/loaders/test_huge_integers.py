"""Integers past 64 bits in key columns and steps: read exactly where the format can hold them, else refused in one
line naming the field and its row; never wrapped, rounded or warned about by numpy."""

from __future__ import annotations

import decimal
import json
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit import InputError

BIG = 2**70


def _load(path: Path | pa.Table) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's "invalid value encountered in cast" is a failure
        warnings.simplefilter("ignore", rollaudit.RollauditWarning)
        return rollaudit.load(path)


def _refused(path: Path | pa.Table) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(InputError) as caught:
            rollaudit.load(path)
    line = str(caught.value)
    assert "\n" not in line and "row 0" not in line, line
    return line


def _rows(steps: list[int], prompts: list[int]) -> list[dict]:
    return [
        {"step": step, "prompt": prompt, "reward": float(index % 2)}
        for index, (step, prompt) in enumerate(zip(steps, prompts, strict=True))
    ]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _write_csv(path: Path, rows: list[dict]) -> Path:
    path.write_text("step,prompt,reward\n" + "".join(f"{r['step']},{r['prompt']},{r['reward']}\n" for r in rows))
    return path


@pytest.mark.parametrize("write", [_write_jsonl, _write_csv], ids=["jsonl", "csv"])
def test_a_step_past_64_bits_is_refused_naming_its_row(tmp_path: Path, write):
    """Once audited as step -9223372036854775808, exit 0, numpy's RuntimeWarning on stderr."""
    path = write(tmp_path / f"steps.{write.__name__[7:]}", _rows([1, 1, 1, 1, BIG, BIG], [0, 0, 1, 1, 0, 0]))
    line = _refused(path)
    assert "field 'step': row 5:" in line and "1.1805916207174113e+21" in line, line


@pytest.mark.parametrize("step", [2**63, -(2**63) - 1, 2**64])
def test_steps_just_past_int64_are_refused(tmp_path: Path, step: int):
    path = _write_jsonl(tmp_path / "edge.jsonl", _rows([1, 1, step, step], [0, 0, 0, 0]))
    assert "field 'step': row 3:" in _refused(path)


def test_the_lowest_int64_step_is_a_step(tmp_path: Path):
    path = _write_csv(tmp_path / "low.csv", _rows([-(2**63)] * 2, [0, 0]))
    assert _load(path).column("step").to_pylist() == [-(2**63)] * 2


def test_csv_prompt_ids_past_64_bits_are_exact_keys(tmp_path: Path):
    """pyarrow reads such a column as doubles (2**70 and 2**70 + 1 would be one key): it is read as its text."""
    path = _write_csv(tmp_path / "ids.csv", _rows([1] * 4, [BIG, BIG, BIG + 1, BIG + 1]))
    table = _load(path)
    assert table.column("prompt").to_pylist() == [str(BIG)] * 2 + [str(BIG + 1)] * 2
    assert table.column("reward").to_pylist() == [0.0, 1.0, 0.0, 1.0]


def test_csv_rewards_past_64_bits_are_still_numbers(tmp_path: Path):
    path = tmp_path / "rewards.csv"
    path.write_text("step,prompt,reward\n1,0,0\n1,0," + str(BIG) + "\n")
    assert _load(path).column("reward").to_pylist() == [0.0, float(BIG)]


def test_float_keys_past_int64_are_refused_naming_their_row(tmp_path: Path):
    """Once "row 0" (a row that does not exist): a double past 2**63 cannot hold a key exactly."""
    path = tmp_path / "floats.parquet"
    pq.write_table(pa.table({"prompt": [1.0, 1.0, 2.0**70, 2.0**70], "reward": [0.0, 1.0, 0.0, 1.0]}), path)
    line = _refused(path)
    assert "field 'prompt': row 3:" in line and "past 64 bits" in line, line


def test_parquet_decimal_and_uint64_keys_are_exact(tmp_path: Path):
    ids = [BIG, BIG, BIG + 1, BIG + 1]
    decimals = pa.array([decimal.Decimal(value) for value in ids], pa.decimal128(38, 0))
    unsigned = pa.array([2**64 - 1, 2**64 - 1, 2**64 - 2, 2**64 - 2], pa.uint64())
    for name, prompts in (("decimal", decimals), ("uint64", unsigned)):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"step": [1] * 4, "prompt": prompts, "reward": [0.0, 1.0, 0.0, 1.0]}), path)
        assert _load(path).column("prompt").to_pylist() == [str(value) for value in prompts.to_pylist()]


@pytest.mark.parametrize(
    "steps",
    [
        pa.array([decimal.Decimal(1), decimal.Decimal(BIG)], pa.decimal128(38, 0)),
        pa.array([1, 2**64 - 1], pa.uint64()),
        pa.array([1.0, 2.0**70]),
    ],
    ids=["decimal", "uint64", "double"],
)
def test_parquet_steps_past_int64_are_refused_naming_their_row(tmp_path: Path, steps: pa.Array):
    path = tmp_path / "steps.parquet"
    pq.write_table(pa.table({"step": steps, "prompt": [1, 1], "reward": [0.0, 1.0]}), path)
    assert "field 'step': row 2:" in _refused(path)


def test_a_library_table_with_uint64_keys_and_steps(tmp_path: Path):
    """A table passed to validate_table: uint64 keys past int64 are text keys; such a step names its row."""
    from rollaudit._table import validate_table

    base = {"position": [0, 1], "reward": [0.0, 1.0]}
    keys = pa.table({**base, "step": [1, 1], "prompt": pa.array([2**64 - 1, 2**63], pa.uint64())})
    assert validate_table(keys).column("prompt").to_pylist() == [str(2**64 - 1), str(2**63)]
    steps = pa.table({**base, "step": pa.array([1, 2**64 - 1], pa.uint64())})
    with pytest.raises(InputError, match="field 'step': row 2:"):
        validate_table(steps)


def test_json_lines_prompt_ids_past_64_bits_name_field_and_row(tmp_path: Path):
    """Once "row 0" (a row that does not exist). A generic JSON Lines table's types are inferred by pyarrow's
    reader, which holds such ids as doubles: refused, naming the first row past int64."""
    path = _write_jsonl(tmp_path / "ids.jsonl", _rows([1] * 4, [5, 5, BIG, BIG]))
    line = _refused(path)
    assert "field 'prompt': row 3:" in line and "past 64 bits" in line, line


def test_json_lines_int_fields_past_64_bits_name_field_and_line(tmp_path: Path):
    """A format whose fields are typed by its schema (open-instruct's prompt_idx is an int64): one line naming the
    field, its line and the exact value, never a wrapped or rounded id."""
    sample = Path(__file__).resolve().parents[2] / "sample_dumps" / "open_instruct" / "rollouts"
    lines = (sample / "demo_rollouts_000000.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["prompt_idx"] = BIG
    lines[1] = json.dumps(record)
    path = tmp_path / "rollouts" / "demo_rollouts_000000.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")
    line = _refused(path)
    assert f"field 'prompt_idx': line 2 has 'prompt_idx' = {BIG}, an integer past 64 bits" in line, line
