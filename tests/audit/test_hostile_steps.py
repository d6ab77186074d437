"""Hostile shapes for the audit itself, run the way a user runs it (``python -m rollaudit`` in a measured child):
a small table of very many steps, and rewards at the edge of float64.

Every case ends in exit 0 with no traceback and no warning, in under 30 s and 1.5 GB.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from tests.loaders.test_hostile import check, run_measured, size_of

MANY_STEPS = 250_000


def many_steps_table(steps: int) -> pa.Table:
    """Two samples of one prompt per step, rewards 0/1: 3.6 MB as Parquet, 7.5 MB as CSV at 250,000 steps."""
    step = np.repeat(np.arange(steps, dtype=np.int64), 2)
    reward = np.random.default_rng(11).integers(0, 2, len(step)).astype(np.float64)
    return pa.table({"step": step, "prompt": step, "reward": reward})


def test_rewards_near_the_largest_float(tmp_path: Path):
    """issue: rewards near 1e308 printed numpy's two-line RuntimeWarning (an overflow in a reduction) with a
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
