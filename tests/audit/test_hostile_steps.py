"""Hostile shapes for the audit itself, run the way a user runs it (``python -m rollaudit`` in a measured child):
a small table of very many steps, and rewards at the edge of float64.

Every case ends in exit 0 with no traceback and no warning, in under 30 s and 1.5 GB.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from tests.loaders.test_hostile import check, run_measured, size_of

MANY_STEPS = 250_000


def many_steps_table(steps: int) -> pa.Table:
    """Two samples of one prompt per step, rewards 0/1: 3.6 MB as Parquet, 7.5 MB as CSV at 250,000 steps."""
    step = np.repeat(np.arange(steps, dtype=np.int64), 2)
    reward = np.random.default_rng(11).integers(0, 2, len(step)).astype(np.float64)
    return pa.table({"step": step, "prompt": step, "reward": reward})


def test_rewards_near_the_largest_float(tmp_path: Path):
    """Rewards near 1e308 once printed numpy's two-line RuntimeWarning (an overflow in a reduction) with a
    source line. The overflow is handled (an overflowing group is undefined, like a NaN reward): no warning, and
    the numbers are the product's usual ones."""
    path = tmp_path / "huge.jsonl"
    rewards = [1.7e308 if index % 3 else -1.6e308 for index in range(16)]
    rewards[12:16] = [0.0, 1.0, 1.0, 0.0]  # one ordinary prompt beside the overflowing ones
    rows = [{"prompt": index // 4, "reward": reward} for index, reward in enumerate(rewards)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    documents = {}
    for command in ("compare", "inspect"):
        for extra in ((), ("--json",)):
            result = run_measured(command, path, "--no-cache", *extra, cwd=tmp_path)
            check(f"rewards near 1e308 ({command} {' '.join(extra)})".replace(" )", ")"), result, size_of(path),
                  codes=(0,))  # fmt: skip
            assert "Warning" not in result["stderr"] and result["stderr"].strip() == "", result["stderr"]
            if extra:
                documents[command] = json.loads(result["stdout"])
    reward = documents["inspect"]["reward"]
    assert (reward["min"], reward["max"], reward["nonfinite"]) == (-1.6e308, 1.7e308, 0)
    assert reward["mean"] is None  # the mean overflows: not a number to show
    audit = documents["compare"]
    assert audit["info"]["nonfinite_rewards"] == 0 and audit["info"]["prompts"] == 4
    prompt = audit["summary"]["prompt"]
    # The ordinary prompt is compared; the three whose sums overflow are undefined, as a NaN reward would be.
    assert (prompt["compared"], prompt["undefined"]) == (4, 12)
    assert prompt["nonzero_reference"] == 4


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_many_steps_in_one_small_table(tmp_path: Path, suffix: str):
    """250,000 steps in a 3.6 MB Parquet (7.5 MB as CSV) once took 24-42 s and 1.8-2.5 GB: the loader made a table
    per step and sorted them one by one, and the JSON document was indented value by value. Nothing is done step by
    step now: compare, inspect and compare --json each end in the bounds, with every step in the report."""
    path = tmp_path / f"steps.{suffix}"
    table = many_steps_table(MANY_STEPS)
    if suffix == "parquet":
        pq.write_table(table, path)
    else:
        pa_csv.write_csv(table, path)
    runs = {"compare": (), "inspect": (), "compare --json": ("--json", "-o", tmp_path / "audit.json")}
    for case, extra in runs.items():
        command = case.split()[0]
        result = run_measured(command, path, "--no-cache", *extra, cwd=tmp_path)
        check(f"{MANY_STEPS:,} steps in one {suffix} table ({case})", result, size_of(path), codes=(0,))
        if case == "compare":
            assert f"({MANY_STEPS})" in result["stdout"] and f"{2 * MANY_STEPS:,} samples" in result["stdout"]
    with (tmp_path / "audit.json").open() as handle:
        document = json.load(handle)
    assert len(document["per_step"]) == MANY_STEPS == len(document["step_groups"])
    step = document["per_step"][str(MANY_STEPS - 1)]
    assert set(step) == {"batch", "prompt"} and step["prompt"]["compared"] == 2


def test_many_steps_in_one_file_of_a_file_per_step_format(tmp_path: Path):
    """A TRL completions log of 250,000 steps (1.8 MB) ran its per-step checks 250,000 times (killed at 120 s). TRL
    writes a file per logging step: more than MAX_STEPS_PER_FILE steps in one is refused in one line."""
    from rollaudit._loaders.arrow.columns import MAX_STEPS_PER_FILE

    folder = tmp_path / "run" / "completions"
    folder.mkdir(parents=True)
    rows = 2 * MANY_STEPS
    texts = pa.array(["p"] * rows, pa.large_string())
    table = many_steps_table(MANY_STEPS).drop_columns(["prompt"]).append_column("prompt", texts)
    pq.write_table(table.append_column("completion", texts), folder / "completions_00010.parquet")
    result = run_measured("compare", tmp_path / "run", "--no-cache", cwd=tmp_path)
    check(f"{MANY_STEPS:,} steps in one TRL completions log", result, size_of(folder), codes=(2,),
          said=f"holds {MANY_STEPS:,} steps")  # fmt: skip
    assert f"at most {MAX_STEPS_PER_FILE:,} steps in one file" in result["stderr"]
