"""A file's format and fields do not depend on the size of its first line: a verl dump whose first line carries a
50 MB output reads as it reads with that line elsewhere, with or without ``--format verl``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import rollaudit
from rollaudit._loaders.arrow import tables

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "verl" / "rollout_data_v1" / "5.jsonl"


def _load(path: Path, **options: object):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rollaudit.load(path, **options)


@pytest.mark.skipif(not CORPUS.exists(), reason="the shared corpus is not beside the project")
@pytest.mark.parametrize("where", ["first", "middle"])
def test_a_verl_dump_whose_first_line_is_50_mb(tmp_path: Path, where: str):
    """Once "line 246 has 'gts' as an object where a string was expected": a first line past the sniffing limit
    sent the file to pyarrow's type inference, and verl's gts varies in type by design."""
    lines = CORPUS.read_text().splitlines()
    index = 0 if where == "first" else len(lines) // 2
    record = json.loads(lines[index])
    record["output"] = "x" * (50 << 20)
    lines[index] = json.dumps(record)
    path = tmp_path / "rollout_data" / "5.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")
    expected = _load(CORPUS)
    for format in (None, "verl"):
        table = _load(path, format=format)
        assert table.num_rows == expected.num_rows == 392  # 400 lines, 8 of them verl V1's padding
        for name in ("step", "prompt", "trajectory", "reward"):
            assert table.column(name).to_pylist() == expected.column(name).to_pylist(), name


def test_sniffing_reads_the_whole_first_line(tmp_path: Path):
    path = tmp_path / "wide.jsonl"
    path.write_text(json.dumps({"reward": 1, "prompt": "a", "pad": "y" * (8 << 20)}) + "\n")
    assert tables.sniff(path) == "jsonl"
    assert set(tables.first_json_object(path) or {}) == {"reward", "prompt", "pad"}
    path.write_text('{"reward": 1, "pad": "' + "y" * (8 << 20) + "\n")  # a cut first line: no JSON object
    assert tables.sniff(path) is None and tables.first_json_object(path) is None
