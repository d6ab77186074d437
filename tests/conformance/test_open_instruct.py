"""open-instruct's own --save_traces dumps against its own advantage loop (three runs: centered with the
zero-std filter, standard without it, centered with mask_truncated_completions)."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit import InputError
from rollaudit._loaders.registry import FORMATS
from rollaudit._table import found_in, notes_in
from tests.conformance.conftest import assert_matches, compare_json, corpus

LABEL = "open-instruct (prompt = prompt_tokens, trajectory = the row; normalised by prompt_idx)"
# The README's tables: steps, rows, prompt_idx groups, groups mixing prompts, groups with all-equal rewards, and the
# true prompts (dataset rows).
RUNS = {
    "oi_default": ([3, 4], 80, 20, 0, 0, 20),
    "oi_standard_nofilter": ([3, 4], 128, 32, 0, 12, 32),
    "oi_masktrunc": ([5], 40, 10, 3, 0, 11),
}
COLUMNS = {"oi-centered": "open_instruct_grpo_centered", "oi-standard": "open_instruct_grpo_standard"}


def _load(run: str):
    return rollaudit.load(corpus("open_instruct") / "rollouts" / f"{run}_rollouts_000000.jsonl")


@pytest.mark.parametrize("run", sorted(RUNS))
def test_oi_presets_equal_open_instructs_own_values(run):
    steps, rows, groups, mixing, constant, prompts = RUNS[run]
    table = _load(run)
    expected = pq.read_table(corpus("open_instruct") / f"expected_{run}.parquet").to_pandas()
    assert table.num_rows == len(expected) == rows
    assert sorted(set(table.column("step").to_pylist())) == steps
    assert table.column("step").to_pylist() == expected["step"].tolist()
    assert table.column("position").to_pylist() == expected["sample_idx"].tolist()
    # The prompt is the true one (prompt_tokens: the same groups as the dataset row, which the dump lacks); the
    # slices open-instruct normalised by are passed through for its presets.
    assert table.column("prompt_idx").to_pylist() == expected["prompt_idx"].tolist()
    keys = list(zip(table.column("step").to_pylist(), table.column("prompt").to_pylist(), strict=True))
    truth = list(zip(expected["step"], expected["dataset_index"], strict=True))
    assert len(set(keys)) == len(set(truth)) == prompts
    assert len(set(zip(keys, truth, strict=True))) == prompts  # the same partition of the rows
    sizes = np.unique(np.c_[expected["step"], expected["prompt_idx"]], axis=0, return_counts=True)[1]
    assert len(sizes) == groups and set(sizes.tolist()) == {4}  # every prompt_idx group has n = 4 rows
    assert table.column("response_length").to_pylist() == expected["response_length"].tolist()
    recomputed = rollaudit.recompute(table, list(COLUMNS), device="cpu")
    for index, (preset, column) in enumerate(COLUMNS.items()):
        worst = assert_matches(
            f"open_instruct: {preset} = {column} ({run})", recomputed.column(index).to_numpy(), expected[column]
        )
        assert worst <= 1e-12
    recorded = table.column("recorded_advantage").to_numpy()
    assert np.abs(recorded - expected["recorded_advantage"].to_numpy()).max() == 0.0
    counts = found_in(table)[LABEL]
    assert counts["prompt_idx groups"] == groups and counts["rows (a response each)"] == rows
    assert counts["prompts (prompt_tokens)"] == prompts
    assert counts.get("prompt_idx groups mixing prompts (prompt_tokens differ)", 0) == mixing
    assert counts.get("groups with all-equal rewards (kept: filter_zero_std_samples off)", 0) == constant


def test_mask_truncated_completions_slices_that_straddle_prompts_are_a_finding():
    table = _load("oi_masktrunc")
    expected = pq.read_table(corpus("open_instruct") / "expected_oi_masktrunc.parquet").to_pandas()
    # The true prompts (dataset_index, not in the dump) of the three mixing slices: 2, 3 and 4.
    true_prompts = expected.groupby("prompt_idx")["dataset_index"].nunique()
    mixed = true_prompts.index[true_prompts > 1].tolist()
    assert mixed == [2, 3, 4]
    (note,) = [note for note in notes_in(table) if "mask_truncated_completions" in note]
    assert note.startswith("step 5: 3 of 10 prompt_idx groups mix rows of different prompts")
    assert "upstream defect" in note and "the 11 true prompts" in note
    # The audit measures the defect: the recorded advantages are oi-centered's (slices), the reference groups the 11
    # true prompts, and the sign changes sit on the rows of the mixed slices only.
    report = rollaudit.audit(table, keep_advantages=True, device="cpu")
    assert report.info["prompts"] == 11
    assert report.trained_with.scheme == "oi-centered" and report.trained_with.evidence == "recorded"
    kept = report.advantages.to_pandas()
    oi = rollaudit.recompute(table, ["oi-centered"], device="cpu").column(0).to_numpy()
    assert np.array_equal(oi, kept["advantage:recorded"].to_numpy())  # elementwise, mixed slices included
    changed = np.sign(kept["advantage:recorded"]) != np.sign(kept["advantage:prompt"])
    assert changed.sum() == 2 and set(expected["prompt_idx"][changed.to_numpy()]) <= set(mixed)
    assert report.summary.loc["recorded", "strict_flip_rate"] == 2 / 40
    assert any("mask_truncated_completions=False" in line for line in report.advice)


def test_filtered_groups_are_said_absent_never_counted():
    for run, said in (("oi_default", True), ("oi_standard_nofilter", False), ("oi_masktrunc", True)):
        notes = notes_in(_load(run))
        assert any("filter_zero_std_samples" in note for note in notes) is said
    assert any("filter_zero_std_samples" in line for line in FORMATS["open_instruct"].cannot_audit)


def test_the_shared_rollouts_directory_names_its_runs_never_merges_them():
    for directory in (corpus("open_instruct"), corpus("open_instruct") / "rollouts"):
        with pytest.raises(InputError, match="holds 3 runs") as error:
            rollaudit.load(directory)
        for run in ("oi_default", "oi_masktrunc", "oi_standard_nofilter"):
            assert f"{run} (open_instruct, " in str(error.value)
        assert list(rollaudit.find_runs(directory)) == ["oi_default", "oi_masktrunc", "oi_standard_nofilter"]


@pytest.mark.parametrize("run", sorted(RUNS))
def test_compare_on_a_run_directory_and_the_directory_above_it(tmp_path, run):
    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    for name in (f"{run}_rollouts_000000.jsonl", f"{run}_metadata.jsonl"):
        shutil.copy(corpus("open_instruct") / "rollouts" / name, rollouts / name)
    steps, rows, _, _, _, prompts = RUNS[run]
    for directory in (tmp_path, rollouts):
        report = compare_json(directory)
        assert report["load"]["format"] == "open_instruct"
        assert report["info"]["step_values"] == steps and report["info"]["samples"] == rows
        assert report["info"]["prompts"] == prompts
        assert len(report["trained_with"]["parts"]) == 1
        # Recorded advantages outrank the default preset: the run's own mode, found by the fit.
        assert report["trained_with"]["evidence"] == "recorded"
        scheme = report["trained_with"]["scheme"]
        mode = "oi-standard" if run == "oi_standard_nofilter" else "oi-centered"
        # An identical preset listed earlier (dr-grpo = oi-centered) wins an exact tie; the run's mode fits exactly.
        assert scheme == mode or (mode == "oi-centered" and scheme == "dr-grpo"), scheme
        assert report["trained_with"]["why"].startswith("the recorded advantages match it: max err ")
