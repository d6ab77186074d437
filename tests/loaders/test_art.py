"""ART's trajectory logs: both writer versions, the dot directory, and what is never guessed."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit import InputError

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("trainable", pa.bool_())]))


def _log(path: Path, columns: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = len(columns["reward"])
    pq.write_table(pa.table({**columns, "messages": pa.array([[]] * rows, MESSAGES)}), path)
    return path


def test_version_two_takes_trajectory_index_and_leaves_out_an_empty_groups_sentinel(tmp_path: Path):
    train = tmp_path / ".art" / "p" / "models" / "m" / "trajectories" / "train"
    _log(
        train / "0007.parquet",
        {
            "format_version": pa.array([2] * 5, pa.int64()),
            "group_index": pa.array([0, 0, 1, 2, 2], pa.int64()),
            "trajectory_index": pa.array([1, 0, None, 0, 1], pa.int64()),
            "reward": pa.array([1.0, 0.0, None, 0.5, 0.5]),
        },
    )
    table = rollaudit.load(tmp_path)  # the directory above .art
    assert table.column("step").to_pylist() == [7] * 4
    assert table.column("prompt").to_pylist() == [0, 0, 2, 2]
    assert [key % (1 << 31) for key in table.column("trajectory").to_pylist()] == [1, 0, 0, 1]
    assert rollaudit.load(train).num_rows == 4  # the train directory itself


def test_version_one_numbers_each_trajectory_by_its_place_in_its_group(tmp_path: Path):
    path = _log(
        tmp_path / "0002.parquet", {"group_index": pa.array([1, 1, 0, 1, 0], pa.int64()), "reward": [1.0, 0, 0, 1, 1]}
    )
    table = rollaudit.load(path)
    assert [key % (1 << 31) for key in table.column("trajectory").to_pylist()] == [0, 1, 0, 2, 1]


def test_a_negative_group_index_is_named(tmp_path: Path):
    path = _log(tmp_path / "0001.parquet", {"group_index": pa.array([0, -1], pa.int64()), "reward": [1.0, 0.0]})
    with pytest.raises(InputError, match="group_index") as error:
        rollaudit.load(path)
    assert error.value.row == 1
