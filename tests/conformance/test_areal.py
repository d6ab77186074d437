"""AReaL's own rollout dumps against AReaL's own normalizations (every version directory of the set)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import rollaudit
from tests.conformance.conftest import assert_matches, corpus

RUNS = [("trial0", 3), ("trial0", 4), ("trial1-concat-rnorm", 3)]
PRESETS = {
    "areal-group": "areal_group",
    "areal-group(std=population)": "areal_group_popstd",
    "areal-batch": "areal_batch",
    "areal-loo": "areal_loo",
    "areal-group(scale=none)": "areal_drgrpo",
    "areal-stride(n=8, baseline=leave-one-out, scale=none)": "areal_loo_stride",
}


def version_directory(trial: str, version: int):
    return corpus("areal") / "experiments" / "logs" / "rl" / "gsm8k-agent-grpo" / trial / "rollout" / str(version)


@pytest.mark.parametrize(("trial", "version"), RUNS, ids=[f"{trial}-{version}" for trial, version in RUNS])
def test_every_preset_equals_areals_own_values(trial, version):
    table = rollaudit.load(version_directory(trial, version))
    expected = pq.read_table(corpus("areal") / "expected" / f"{trial}_rollout_{version}.parquet").to_pandas()
    # A version directory is one batch: tasks ascending, rows in file order.
    assert table.column("prompt").to_pylist() == expected["task_id"].tolist()
    assert table.column("sample_idx").to_pylist() == expected["sample_idx"].tolist()
    assert table.column("step").to_pylist() == [version] * len(expected)
    assert table.column("response_length").to_pylist() == expected["gen_tokens"].tolist()
    recomputed = rollaudit.recompute(table, [*PRESETS, "areal-stride(n=8)"], device="cpu")
    for preset, column in PRESETS.items():
        assert_matches(
            f"areal: {preset} = {column}", recomputed.column(f"advantage:{preset}").to_numpy(), expected[column]
        )
    # The stride remainder: a reward of 1 becomes 100000 (relative tolerance there).
    stride = recomputed.column("advantage:areal-stride(n=8)").to_numpy()
    assert_matches(
        "areal: areal-stride(n=8) = areal_group_stride (relative)",
        stride,
        expected["areal_group_stride"],
        relative=True,
    )


def test_a_run_directory_is_one_step_per_version_and_the_report_says_what_it_cannot_tell():
    run = corpus("areal") / "experiments" / "logs" / "rl" / "gsm8k-agent-grpo" / "trial0"
    table = rollaudit.load(run)
    assert sorted(set(table.column("step").to_pylist())) == [3, 4] and table.num_rows == 453 + 477
    report = rollaudit.audit(table, schemes=["areal-group", "areal-stride(n=8)", "trajectory"], device="cpu")
    assert report.info["found"]["AReaL (prompt = task_id)"] == {"tasks": 60, "rows (one per LLM call)": 930}
    # What the dump cannot tell is the audit's to say: no attempt id, so no trajectory scheme, count or histogram.
    assert "attempt id" in report.not_auditable["trajectory"] and report.info["trajectories"] is None
    (stride_note,) = report.info["scheme_notes"]["areal-stride(n=8)"]
    assert "10 samples after the last full slice of 8" in stride_note and "100000" in stride_note


def test_two_trials_of_one_version_are_refused():
    with pytest.raises(rollaudit.InputError, match="two AReaL files of task 90 in version 3"):
        rollaudit.load([version_directory("trial0", 3), version_directory("trial1-concat-rnorm", 3)])
