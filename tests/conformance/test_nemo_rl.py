"""NeMo-RL's own training-data logs against NeMo-RL's own estimators (grpo and dapo runs, both steps)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit._loaders.formats.nemo_rl import NEMO_KEY
from tests.conformance.conftest import assert_matches, corpus

# The expected columns are NeMo-RL's estimators on float64 tensors: the presets' exact arithmetic.
PRESETS = {
    "nemo-loo(dtype=float64)": "nemo_grpo_loo_std",
    "nemo-loo(dtype=float64, scale=none)": "nemo_grpo_loo_nostd",
    "nemo-grpo(dtype=float64)": "nemo_grpo_mean_std",
    "nemo-grpo(dtype=float64, scale=none)": "nemo_grpo_mean_nostd",
}
FILES = [(run, step) for run in ("grpo", "dapo") for step in (3, 4)]
IDS = [f"{run}-{step}" for run, step in FILES]
# One float32 unit in the last place at |a| ~ 1.5-2.3, which an AVX-512 build of the same torch can differ by.
FLOAT32_ROUNDING = 2.5e-7


def _load(run: str, step: int):
    table = rollaudit.load(corpus("nemo_rl") / run / f"train_data_step{step}.jsonl")
    expected = pq.read_table(corpus("nemo_rl") / run / f"expected_step{step}.parquet").to_pandas()
    return table, expected


@pytest.mark.parametrize(("run", "step"), FILES, ids=IDS)
def test_every_preset_equals_nemos_own_values_on_every_row(run, step):
    table, expected = _load(run, step)
    assert table.column("prompt").to_pylist() == expected["prompt_key"].tolist()
    # NeMo-RL's own key: the prompt, but the whole row where the data processor truncated the prompt.
    assert table.column(NEMO_KEY).to_pylist() == expected["nemo_group_key"].tolist()
    assert_matches(f"nemo_rl: reward = reward ({run})", table.column("reward").to_numpy(), expected["reward"])
    recorded = table.column("recorded_advantage").to_numpy(zero_copy_only=False)
    assert_matches(f"nemo_rl: recorded = dump_advantage ({run})", recorded, expected["dump_advantage"])
    assert table.column("response_length").to_pylist() == expected["n_loss_tokens"].tolist()
    recomputed = rollaudit.recompute(table, list(PRESETS), device="cpu")
    for preset, column in PRESETS.items():
        # Every row, those whose prompt was truncated (key_matches_upstream false) included.
        assert_matches(
            f"nemo_rl: {preset} = {column}", recomputed.column(f"advantage:{preset}").to_numpy(), expected[column]
        )


@pytest.mark.parametrize(("run", "step"), FILES, ids=IDS)
def test_the_float32_preset_is_the_runs_own_arithmetic_on_every_row(run, step):
    # Its float32 moments keep the 3.2e-4 residue on the rows of a constant 0.3 group (step 4), as the run did.
    table, expected = _load(run, step)
    recomputed = rollaudit.recompute(table, ["nemo-loo"], device="cpu").column(0).to_numpy()
    assert_matches(
        f"nemo_rl: nemo-loo = dump_advantage ({run})", recomputed, expected["dump_advantage"], None, FLOAT32_ROUNDING
    )
    residue = (expected["dump_advantage"].abs().to_numpy() > 1e-4) & (expected["nemo_grpo_loo_std"] == 0)
    assert int(residue.sum()) == (8 if step == 4 else 0)


@pytest.mark.parametrize("step", [3, 4])
def test_truncated_prompts_are_their_own_groups_in_the_presets_and_one_group_in_the_reference(step):
    table, expected = _load("grpo", step)
    cut = ~expected["key_matches_upstream"].to_numpy()
    assert int(cut.sum()) == 8 and (expected["nemo_group_size"].to_numpy()[cut] == 1).all()
    assert len(set(expected["prompt_key"][cut])) == 1  # one true prompt, 8 rows
    recomputed = rollaudit.recompute(table, ["nemo-loo", "prompt", "nemo-loo(framework_key=none)"], device="cpu")
    # NeMo-RL: each row alone, so 0.
    assert (recomputed.column("advantage:nemo-loo").to_numpy()[cut] == 0).all()
    # The reference: the 8 rows are one group of the true prompt, (r - mean) / (unbiased std + 1e-6).
    rewards = expected["reward"].to_numpy()[cut]
    truth = (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-6)
    assert np.abs(truth).max() > 0.5
    assert_matches("nemo_rl: prompt on truncated rows", recomputed.column("advantage:prompt").to_numpy()[cut], truth)
    # framework_key=none: NeMo-RL's arithmetic over the true prompt, as the presets grouped before.
    assert (recomputed.column("advantage:nemo-loo(framework_key=none)").to_numpy()[cut] != 0).any()


def test_fit_names_nemo_loo_on_every_row_and_the_gate_passes():
    # Bit for bit where the corpus was first checked; on an AVX-512 Xeon with the same torch build, five rows differ
    # by one float32 unit in the last place (2.4e-7 at |a| ~ 1.5-2.3). Either way nemo-loo is the one preset fitted.
    for run in ("dapo", "grpo"):
        table = rollaudit.load(corpus("nemo_rl") / run)
        detection = rollaudit.detect_scheme(table, device="cpu")
        assert (detection.best_match, detection.rows) == ("nemo-loo", table.num_rows)
        assert detection.closest.max_error <= FLOAT32_ROUNDING
        assert detection.closest.share_within_tolerance == 1.0


def test_grpo_says_it_trained_with_nemo_loo_by_its_recorded_advantages():
    report = rollaudit.audit(rollaudit.load(corpus("nemo_rl") / "grpo", cache=False), device="cpu")
    assert (report.trained_with.scheme, report.trained_with.evidence, report.trained_row) == (
        "nemo-loo",
        "recorded",
        "recorded",
    )
    ((part,),) = (report.trained_with.parts,)
    assert (part.scheme, part.steps) == ("nemo-loo", (3, 4))
    from rollaudit._render.text import verdict_title

    assert verdict_title(report).startswith("Verdict: trained with nemo-loo (")
    notes = report.info["loader_notes"]
    assert sum("on 8 rows the data processor cut the prompt" in note for note in notes) == 2


def test_dynamic_sampling_reads_filtered_rewards_and_says_rewards_are_not_aligned():
    report = rollaudit.audit(rollaudit.load(corpus("nemo_rl") / "dapo"), schemes=["nemo-loo"], device="cpu")
    notes = report.info["loader_notes"]
    assert any("filtered_rewards" in note and "47 rows differ" in note for note in notes)
    assert any("41 rows differ" in note for note in notes)
    assert not any("cut the prompt" in note for note in notes)


def test_compare_names_the_estimator_the_run_used():
    report = rollaudit.audit(rollaudit.load(corpus("nemo_rl") / "grpo" / "train_data_step3.jsonl"), device="cpu")
    assert report.detection.closest.scheme == "nemo-loo"
