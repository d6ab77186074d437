"""NeMo-RL's own training-data logs against NeMo-RL's own estimators (grpo and dapo runs, both steps)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import rollaudit
from tests.conformance.conftest import assert_matches, corpus

# The expected columns are NeMo-RL's estimators on float64 tensors: the presets' exact arithmetic.
PRESETS = {
    "nemo-loo(dtype=float64)": "nemo_grpo_loo_std",
    "nemo-loo(dtype=float64, scale=none)": "nemo_grpo_loo_nostd",
    "nemo-grpo(dtype=float64)": "nemo_grpo_mean_std",
    "nemo-grpo(dtype=float64, scale=none)": "nemo_grpo_mean_nostd",
}
FILES = [(run, step) for run in ("grpo", "dapo") for step in (3, 4)]


@pytest.mark.parametrize(("run", "step"), FILES, ids=[f"{run}-{step}" for run, step in FILES])
def test_every_preset_equals_nemos_own_values(run, step):
    table = rollaudit.load(corpus("nemo_rl") / run / f"train_data_step{step}.jsonl")
    expected = pq.read_table(corpus("nemo_rl") / run / f"expected_step{step}.parquet").to_pandas()
    assert table.column("prompt").to_pylist() == expected["prompt_key"].tolist()
    assert_matches(f"nemo_rl: reward = reward ({run})", table.column("reward").to_numpy(), expected["reward"])
    recorded = table.column("recorded_advantage").to_numpy(zero_copy_only=False)
    assert_matches(f"nemo_rl: recorded = dump_advantage ({run})", recorded, expected["dump_advantage"])
    assert table.column("response_length").to_pylist() == expected["n_loss_tokens"].tolist()
    # key_matches_upstream false: a prompt the data processor truncated, whose upstream key takes in the response.
    keep = expected["key_matches_upstream"].to_numpy()
    recomputed = rollaudit.recompute(table, list(PRESETS), device="cpu")
    for preset, column in PRESETS.items():
        assert_matches(
            f"nemo_rl: {preset} = {column}", recomputed.column(f"advantage:{preset}").to_numpy(), expected[column], keep
        )


@pytest.mark.parametrize(("run", "step"), FILES, ids=[f"{run}-{step}" for run, step in FILES])
def test_the_float32_preset_is_the_runs_own_arithmetic_bit_for_bit(run, step):
    # Its float32 moments keep the 3.2e-4 residue on the rows of a constant 0.3 group (step 4), as the run did.
    table = rollaudit.load(corpus("nemo_rl") / run / f"train_data_step{step}.jsonl")
    expected = pq.read_table(corpus("nemo_rl") / run / f"expected_step{step}.parquet").to_pandas()
    keep = expected["key_matches_upstream"].to_numpy()
    recomputed = rollaudit.recompute(table, ["nemo-loo"], device="cpu").column(0).to_numpy()
    assert_matches(f"nemo_rl: nemo-loo = dump_advantage ({run})", recomputed, expected["dump_advantage"], keep, 1e-6)
    residue = keep & (expected["dump_advantage"].abs().to_numpy() > 1e-4) & (expected["nemo_grpo_loo_std"] == 0)
    assert int(residue.sum()) == (8 if step == 4 else 0)


def test_fit_names_nemo_loo_with_no_error_and_the_gate_passes():
    dapo = rollaudit.load(corpus("nemo_rl") / "dapo")
    detection = rollaudit.detect_scheme(dapo, device="cpu")
    assert (detection.best_match, detection.rows) == ("nemo-loo", 192)
    # Bit for bit where the corpus was first checked; on an AVX-512 Xeon with the same torch build, five rows differ
    # by one float32 unit in the last place (2.4e-7 at |a| ~ 1.5-2.3). Either way nemo-loo is the one preset fitted.
    assert detection.closest.max_error <= 2.5e-7
    # grpo: every row but the 8 whose prompt the data processor truncated (upstream keys them alone).
    grpo = rollaudit.load(corpus("nemo_rl") / "grpo")
    fit = rollaudit.detect_scheme(grpo, device="cpu").closest
    assert fit.scheme == "nemo-loo" and round(fit.share_within_tolerance * 480) == 480 - 16


def test_dynamic_sampling_reads_filtered_rewards_and_says_rewards_are_not_aligned():
    report = rollaudit.audit(rollaudit.load(corpus("nemo_rl") / "dapo"), schemes=["nemo-loo"], device="cpu")
    notes = report.info["loader_notes"]
    assert any("filtered_rewards" in note and "47 rows differ" in note for note in notes)
    assert any("41 rows differ" in note for note in notes)


def test_compare_names_the_estimator_the_run_used():
    report = rollaudit.audit(rollaudit.load(corpus("nemo_rl") / "grpo" / "train_data_step3.jsonl"), device="cpu")
    assert report.detection.closest.scheme == "nemo-loo"
