"""Runs written by the frameworks' own code beyond the shared corpus (``tests/fixtures/variants``: another seed,
config or size; a run cut mid-group; a scheme changed mid-run), each with the upstream functions' own outputs in
``expected.parquet`` (its README says how each was made)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import rollaudit

VARIANTS = Path(__file__).resolve().parents[1] / "fixtures" / "variants"


def _expected(variant: str):
    return pq.read_table(VARIANTS / variant / "expected.parquet").to_pandas()


def _same(actual, expected, tolerance: float) -> float:
    """``actual`` equals ``expected`` elementwise within ``tolerance`` times max(1, |expected|) (a float32 value's
    rounding grows with it), NaN exactly where it is NaN; the worst difference so scaled."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(actual), nan), np.flatnonzero(np.isnan(actual) != nan)
    difference = np.abs(actual[~nan] - expected[~nan]) / np.maximum(1.0, np.abs(expected[~nan]))
    worst = float(difference.max()) if difference.size else 0.0
    assert worst <= tolerance, worst
    return worst


# ---------------------------------------------------------------------------------------------------------------------
# open-instruct: n = 8, and mask_truncated_completions with standard normalisation.

OPEN_INSTRUCT = {
    # variant: (mode, true prompts, prompt_idx groups, slices mixing prompts)
    "oi_centered_n8": ("oi-centered", 10, 10, 0),
    "oi_standard_masktrunc_n8": ("oi-standard", 10, 8, 8),
}


@pytest.mark.parametrize("variant", sorted(OPEN_INSTRUCT))
def test_open_instruct_prompts_are_the_true_ones_and_the_presets_its_slices(variant):
    mode, prompts, slices, mixing = OPEN_INSTRUCT[variant]
    directory = VARIANTS / "open_instruct" / variant
    table = rollaudit.load(directory / "rollouts")
    expected = _expected(f"open_instruct/{variant}")
    assert table.num_rows == len(expected) and set(expected["n"]) == {8}
    keys = list(zip(table.column("step").to_pylist(), table.column("prompt").to_pylist(), strict=True))
    truth = list(zip(expected["step"], expected["dataset_index"], strict=True))
    assert len(set(keys)) == len(set(truth)) == prompts and len(set(zip(keys, truth, strict=True))) == prompts
    assert len(set(zip(expected["step"], expected["prompt_idx"], strict=True))) == slices
    recomputed = rollaudit.recompute(table, ["oi-centered", "oi-standard"], device="cpu")
    _same(recomputed.column(0), expected["open_instruct_grpo_centered"], 1e-12)
    _same(recomputed.column(1), expected["open_instruct_grpo_standard"], 1e-12)
    report = rollaudit.audit(table, keep_advantages=True, device="cpu")
    assert (report.trained_with.scheme, report.trained_with.evidence) == (mode, "recorded")
    assert report.info["prompts"] == prompts and len(report.trained_with.parts) == 1
    kept = report.advantages.to_pandas()
    changed = np.sign(kept["advantage:recorded"]) != np.sign(kept["advantage:prompt"])
    if mixing:
        # The sign changes sit on rows of slices that mix prompts, and the verdict says what to change.
        mixed = expected.groupby(["step", "prompt_idx"])["dataset_index"].transform("nunique") > 1
        assert changed.sum() > 0 and not (changed.to_numpy() & ~mixed.to_numpy()).any()
        assert any("mask_truncated_completions=False" in line for line in report.advice)
    else:
        assert changed.sum() == 0 and report.advice == []


# ---------------------------------------------------------------------------------------------------------------------
# prime-rl: an algorithm per env, a length penalty on one env, a run cut mid-group.

PRIME_COLUMNS = {
    "prime_rl_grpo": ("prime-grpo", 2e-7),
    "prime_rl_grpo_lenpen": ("prime-grpo-lenpen", 2e-7),
    "prime_rl_max_rl": ("prime-maxrl", 2e-7),
    "prime_rl_hierarchical_grpo": ("prime-hierarchical(episode_agents=solver)", 1e-15),
    "prime_rl_hierarchical_grpo_episode": ("prime-hierarchical(episode_agents=main|sub|judge|proposer|solver)", 1e-15),
    "prime_rl_rae": ("prime-rae", 1e-12),
}
PRIME_PARTS = {
    "lenpen_per_env": {"env=delegate": "prime-grpo-lenpen", "env=math": "prime-grpo"},
    "per_env_algos": {"env=delegate": "prime-grpo", "env=proposer-solver": "prime-hierarchical(episode_agents=solver)"},
    "cut_mid_group": {None: "prime-grpo"},
}
# Groups never scored by the end of the dump, and their members: none of them got an advantage upstream.
PRIME_UNSCORED = {"lenpen_per_env": (2, 9), "per_env_algos": (3, 16), "cut_mid_group": (5, 13)}


def _prime(variant: str):
    table = rollaudit.load(VARIANTS / "prime_rl" / variant)
    expected = _expected(f"prime_rl/{variant}")
    members = expected[expected["is_member"]].set_index("trace_id")
    place = {trace: row for row, trace in enumerate(table.column("trace_id").to_pylist())}
    return table, members, np.array([place[trace] for trace in members.index])


@pytest.mark.parametrize("variant", sorted(PRIME_PARTS))
def test_prime_rl_presets_give_advantages_only_where_prime_rl_did(variant):
    table, members, rows = _prime(variant)
    assert table.num_rows == len(members)
    for column, (preset, tolerance) in PRIME_COLUMNS.items():
        recomputed = rollaudit.recompute(table, [preset], device="cpu").column(0).to_numpy()[rows]
        _same(recomputed, members[column], tolerance)  # the defined/NaN pattern is upstream's on every row
    groups, rows_left_out = PRIME_UNSCORED[variant]
    unscored = ~members["group_scored"].to_numpy()
    assert int(unscored.sum()) == rows_left_out and members["group_id"][unscored].nunique() == groups
    flagged = table.column("not_trained").to_numpy(zero_copy_only=False)[rows]
    assert np.array_equal(np.array([value is not None for value in flagged]), unscored)


@pytest.mark.parametrize("variant", sorted(PRIME_PARTS))
def test_prime_rl_verdict_names_each_envs_algorithm_and_counts_the_unscored(variant):
    report = rollaudit.audit(rollaudit.load(VARIANTS / "prime_rl" / variant), device="cpu")
    trained = report.trained_with
    assert {part.where: part.scheme for part in trained.parts} == PRIME_PARTS[variant]
    assert {part.evidence for part in trained.parts} == {"recorded"}
    groups, rows = PRIME_UNSCORED[variant]
    assert report.info["not_trained"] == [
        {"reason": "group not scored by the end of the dump", "rows": rows, "groups": groups}
    ]
    # Left out of every rate's denominator: each scheme compares the scored members only.
    _, members, _ = _prime(variant)
    scored = int(members["group_scored"].sum())
    assert report.info["samples"] == scored and int(report.summary.loc["prompt", "compared"]) == scored


# ---------------------------------------------------------------------------------------------------------------------
# slime: a --dump-details run resumed after an upgrade to PR #2204 (whole-batch values, then per group).


def test_slime_scheme_change_mid_run_is_two_parts():
    directory = VARIANTS / "slime" / "scheme_change_resumed"
    table = rollaudit.load(directory)
    expected = _expected("slime/scheme_change_resumed")
    assert table.num_rows == len(expected) == 56
    assert table.column("step").to_pylist() == expected["dump_rollout_id"].tolist()
    recomputed = rollaudit.recompute(table, ["slime-legacy(n=4)", "slime-2204"], device="cpu")
    _same(recomputed.column(0), expected["slime_legacy"], 2e-7)
    _same(recomputed.column(1), expected["slime_pr2204_std"], 2e-7)
    _same(table.column("recorded_advantage"), expected["train_advantage"], 0.0)
    report = rollaudit.audit(table, device="cpu")
    parts = [(part.steps, part.scheme, part.evidence) for part in report.trained_with.parts]
    # Steps 3-5 are per prompt (PR #2204 gives the reference's numbers where no group is a singleton, and 0 there).
    assert parts == [((0, 2), "batch", "recorded"), ((3, 5), "prompt", "recorded")]
    # What to change is said for the part that changed signs (the batch-wide one), led by the part.
    assert report.advice and all(line.startswith("steps 0-2 (batch): slime: apply PR #2204") for line in report.advice)


def test_watch_says_where_the_slime_run_changed_scheme():
    records = list(rollaudit.watch(VARIANTS / "slime" / "scheme_change_resumed", until_idle=0, settle=0))
    changes = [(record.step, record.scheme_changed) for record in records if record.scheme_changed]
    assert changes == [(3, "scheme changed at step 3: was batch, now prompt")]
