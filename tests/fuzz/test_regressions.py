"""Every crash the fuzzers found, kept as a plain test: each input ends in a valid table or one InputError line.

Before the fixes each of these escaped as another exception (UnicodeDecodeError
from pyarrow, ArrowInvalid, OverflowError, ValueError from int-to-str,
RecursionError from repr, csv.Error, ArrowNotImplementedError).
"""

from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit import InputError
from tests.fuzz import mutations, payloads
from tests.fuzz.harness import generate, read_sample, run_case


def _load(path: Path, **options) -> pa.Table | InputError:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return rollaudit.validate_table(rollaudit.load(path, **options))
        except InputError as error:
            assert "\n" not in str(error)
            return error


def _verl_line(**fields) -> str:
    return json.dumps({"input": "p0", "output": "o", "score": 1.0, "step": 1, **fields})


# ---------------------------------------------------------------------------------------------------------------------
# Table loaders.


def test_invalid_utf8_in_a_json_value(tmp_path: Path):
    """pyarrow's JSON reader kept the bytes; audit failed on them later with UnicodeDecodeError."""
    data = mutations.apply_operations(read_sample("verl/rollout_data/2.jsonl"), [("set", 370, 128)])
    assert run_case("verl", {"2.jsonl": data}) == "error"
    path = tmp_path / "2.jsonl"
    path.write_bytes(data)
    assert "not UTF-8" in str(_load(path))


def test_invalid_utf8_in_a_json_key(tmp_path: Path):
    data = mutations.apply_operations(read_sample("verl/rollout_data/2.jsonl"), [("number", 272, 1, 128)])
    assert run_case("verl", {"2.jsonl": data}, format="verl") == "error"


def test_invalid_utf8_in_a_parquet_column_name():
    data = mutations.apply_operations(read_sample("trl/completions/completions_00010.parquet"), [("flip", 1446, 7)])
    assert run_case("trl", {"completions_00010.parquet": data}) == "error"
    assert run_case("trl", {"completions_00010.parquet": data}, format="trl") == "error"


@pytest.mark.parametrize(
    "head", [b"\x01\r", b"\r\x01", b"\x0b\xf6\x12\x06\x93,\re\x11U^\xdd"], ids=["ctrl-cr", "cr-ctrl", "binary"]
)
def test_a_carriage_return_in_a_would_be_csv_header(head: bytes):
    """csv.Error from the CSV sniffer."""
    assert run_case("verl", {"1.jsonl": head + read_sample("verl/rollout_data/1.jsonl")}) == "error"


def test_rewards_beyond_2_53_become_the_nearest_double(tmp_path: Path):
    path = tmp_path / "completions_00001.parquet"
    table = pa.table(
        {
            "step": [1, 1],
            "prompt": ["p", "p"],
            "completion": ["a", "b"],
            "accuracy_reward": pa.array([-(1 << 63), (1 << 62) + 1], pa.int64()),
        }
    )
    pq.write_table(table, path)
    loaded = _load(path)
    assert isinstance(loaded, pa.Table)
    assert loaded.column("reward").to_pylist() == [float(-(1 << 63)), float((1 << 62) + 1)]


@pytest.mark.parametrize("first", [[False, 0], [0.5, 9223372036854775808], [1, "a"]])
def test_a_verl_prompt_with_no_arrow_type(tmp_path: Path, first: list):
    path = tmp_path / "1.jsonl"
    path.write_text(_verl_line(input=first) + "\n" + _verl_line() + "\n")
    assert isinstance(_load(path), InputError)


@pytest.mark.parametrize(
    ("name", "loader"),
    [
        ("step_99999999999999999999.csv", "generic"),
        ("99999999999999999999.jsonl", "verl"),
        ("completions_99999999999999999999.parquet", "trl"),
    ],
)
def test_a_step_in_the_file_name_beyond_int64(tmp_path: Path, name: str, loader: str):
    path = tmp_path / name
    if loader == "generic":
        path.write_text("reward,uid\n1,a\n0,a\n")
    elif loader == "verl":
        path.write_text(json.dumps({"input": "p", "output": "o", "score": 1}) + "\n")
    else:
        pq.write_table(pa.table({"prompt": ["p"], "completion": ["c"], "accuracy_reward": [1.0]}), path)
    error = _load(path)
    assert isinstance(error, InputError) and "digits" in str(error), error


def test_a_mask_column_that_is_not_a_list(tmp_path: Path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"reward": [1.0, 0.0], "uid": ["a", "a"], "flag": [1.0, 0.0]}), path)
    error = _load(path, mask_col="flag")
    assert isinstance(error, InputError) and "per-token list" in str(error)


def test_uint64_keys_and_steps_beyond_int64(tmp_path: Path):
    big = pa.array([1 << 63, 1 << 63], pa.uint64())
    keys = tmp_path / "keys.parquet"
    pq.write_table(pa.table({"reward": [1.0, 0.0], "uid": big}), keys)
    loaded = _load(keys)
    assert isinstance(loaded, pa.Table) and loaded.column("prompt").to_pylist() == [str(1 << 63)] * 2
    steps = tmp_path / "steps.parquet"
    pq.write_table(pa.table({"reward": [1.0, 0.0], "uid": ["a", "a"], "step": big}), steps)
    error = _load(steps)
    assert isinstance(error, InputError) and "row 1" in str(error)


def test_a_string_view_column_passes_through_as_strings(tmp_path: Path):
    path = tmp_path / "t.arrow"
    table = pa.table(
        {"reward": [1.0, 0.0], "uid": ["a", "a"], "step": [0, 1], "note": pa.array(["x", "y"]).cast(pa.string_view())}
    )
    with pa.ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
    loaded = _load(path)
    assert isinstance(loaded, pa.Table)
    assert loaded.column("note").type == pa.string()


# ---------------------------------------------------------------------------------------------------------------------
# slime.


def _slime(tmp_path: Path, data: bytes) -> pa.Table | InputError:
    return _load(generate.write_torch_zip(tmp_path / "dump.pt", data))


def test_a_status_with_a_lone_surrogate(tmp_path: Path):
    """Pickled strings may hold lone surrogates (UnicodeEncodeError in pyarrow): they become U+FFFD."""
    loaded = _slime(tmp_path, payloads.dump_with("status", b"X\x03\x00\x00\x00\xed\xa0\x80"))
    assert isinstance(loaded, pa.Table)
    assert loaded.column("status").to_pylist()[0] == "\ufffd" * 3


def test_an_int_too_long_to_print(tmp_path: Path):
    """str() refuses ints past 4300 digits (ValueError): the message says how many bits instead."""
    huge = b"\x8b" + struct.pack("<i", 5000) + b"\x01" * 5000
    error = _slime(tmp_path, payloads.dump_with("group_index", huge))
    assert isinstance(error, InputError) and "an int of 39993 bits" in str(error)


@pytest.mark.parametrize(
    "key",
    [b"K\x00" + b"\x85" * 5000, b"\x8b" + struct.pack("<i", 5000) + b"\x01" * 5000],
    ids=["5000-deep tuple", "40000-bit int"],
)
def test_a_reward_dict_whose_key_cannot_be_printed(tmp_path: Path, key: bytes):
    """repr of the key raised RecursionError (a deep tuple) or ValueError (a huge int) in the error message."""
    error = _slime(tmp_path, payloads.dump_with("reward", b"}" + key + b"K\x01s"))
    assert isinstance(error, InputError) and "reward is a dict with keys" in str(error)


def test_per_token_advantages_beyond_a_double(tmp_path: Path):
    """np.asarray([10**400], float64) raised OverflowError: not numbers, so not compared."""
    rollout = tmp_path / "d" / "rollout_data" / "0.pt"
    generate.save_rollout_dump(rollout, 0, generate.spec_4_3_4_step())
    huge = b"\x8b" + struct.pack("<i", 200) + b"\x01" * 200
    sample = payloads.sample(
        sample_index=payloads.small_int(0), rewards=payloads.float_(0.5), advantages=b"](" + huge + b"e"
    )
    train = payloads.train_dump([sample])
    generate.write_torch_zip(tmp_path / "d" / "train_data" / "0_0.pt", train)
    loaded = _load(tmp_path / "d")
    assert isinstance(loaded, pa.Table)
    assert np.isclose(loaded.column("recorded_advantage").to_pylist()[0], 0.5)


@pytest.mark.parametrize(
    "text",
    ["null\n", "  null\n", 'null\n{"reward": 1}\n', '{"reward": 1}\nnull\n{"reward": 1}\n{"reward": 1}\n'],
    ids=["null", "blank-null", "null-first", "null-later"],
)
def test_a_null_line_never_reaches_pyarrow(tmp_path: Path, text: str):
    """pyarrow 26's JSON reader dies of a segmentation fault on a block that starts with ``null``: checked in a child
    process, so that a regression fails this test instead of killing the session."""
    import subprocess
    import sys

    from tests.fuzz.harness import ROOT

    path = tmp_path / "1.jsonl"
    path.write_text(text)
    script = (
        "import sys, warnings; sys.path.insert(0, sys.argv[1]); import rollaudit; warnings.simplefilter('ignore')\n"
        "for fmt in (None, 'verl', 'generic'):\n"
        "    try:\n"
        "        rollaudit.load(sys.argv[2], format=fmt)\n"
        "    except rollaudit.InputError as error:\n"
        "        print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(ROOT), str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("\n") == 3, result.stdout


def test_two_columns_of_one_name(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text("reward,reward,uid\n1,0,a\n")
    error = _load(path)
    assert isinstance(error, InputError) and "two columns are named 'reward'" in str(error)
    stream = tmp_path / "t.arrow"
    table = pa.Table.from_arrays([pa.array([1.0]), pa.array([0.0]), pa.array(["a"])], names=["reward", "reward", "uid"])
    with pa.ipc.new_stream(stream, table.schema) as writer:
        writer.write_table(table)
    error = _load(stream)
    assert isinstance(error, InputError) and "two columns" in str(error)


def test_a_string_view_reward_column_that_is_not_numbers(tmp_path: Path):
    """float_values tried a regular expression on a string_view column: no such kernel (ArrowNotImplementedError)."""
    path = tmp_path / "t.arrow"
    table = pa.table({"reward": pa.array(["1", "x"]).cast(pa.string_view()), "uid": ["a", "a"]})
    with pa.ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
    error = _load(path)
    assert isinstance(error, InputError) and "is not a number: 'x'" in str(error), error


def test_half_float_keys_masks_and_extras(tmp_path: Path):
    """pyarrow casts float16 to int64 by its bits and has no floor, comparison, sort or min_max kernel for it."""
    half = pa.array(np.array([2.0, 2.0], dtype=np.float16))
    path = tmp_path / "t.parquet"
    table = pa.table(
        {
            "reward": [1.0, 0.0],
            "uid": half,
            "advantages": [[0.5, 0.5], [-0.5]],
            "token_loss_mask": pa.array([[1.0, 0.0], [1.0]], pa.list_(pa.float16())),
            "extra": half,
        }
    )
    pq.write_table(table, path)
    loaded = _load(path)
    assert isinstance(loaded, pa.Table), loaded
    assert loaded.column("prompt").to_pylist() == [2, 2]
    assert loaded.column("response_length").to_pylist() == [1, 1]
    assert loaded.column("extra").type == pa.float32()
