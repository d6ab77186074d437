"""ms-swift runs written by ms-swift's own code beyond the corpus (``tests/fixtures/variants/ms_swift``: each
estimator and scale_rewards mode as the run's own setting, batches logged again, a prompt text that is two groups,
reward weights, KL in the reward, dynamic sampling), each with its args.json as ms-swift saved it and the values
ms-swift's own compute_advantages returned."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import rollaudit

VARIANTS = Path(__file__).resolve().parents[1] / "fixtures" / "variants" / "ms_swift"
RUN = "output/v0-20261207-000000"
# The preset of each (advantage_estimator, scale_rewards), and the upstream column that computes it.
PRESETS = {
    ("grpo", "group"): "swift-grpo",
    ("grpo", "batch"): "swift-grpo-batch",
    ("grpo", "none"): "swift-grpo-none",
    ("rloo", "group"): "swift-rloo-group",
    ("rloo", "batch"): "swift-rloo-batch",
    ("rloo", "none"): "swift-rloo",
    ("reinforce_plus_plus", "group"): "swift-rpp-group",
    ("reinforce_plus_plus", "batch"): "swift-rpp",
    ("reinforce_plus_plus", "none"): "swift-grpo-none",
}
NAMES = sorted(path.name for path in VARIANTS.iterdir() if path.is_dir()) if VARIANTS.is_dir() else []


def _run(name: str) -> tuple[dict, object, object]:
    args = json.loads((VARIANTS / name / RUN / "args.json").read_text(encoding="utf-8"))
    expected = pq.read_table(VARIANTS / name / "expected.parquet").to_pandas()
    return args, rollaudit.load(VARIANTS / name / RUN), expected


def test_every_mode_and_estimator_is_some_runs_own_setting():
    settings = set()
    for name in NAMES:
        args = json.loads((VARIANTS / name / RUN / "args.json").read_text(encoding="utf-8"))
        settings.add((args["advantage_estimator"], args["scale_rewards"]))
    assert {estimator for estimator, _ in settings} == {"grpo", "rloo", "reinforce_plus_plus"}
    assert {mode for _, mode in settings} == {"group", "batch", "none"}


@pytest.mark.parametrize("name", NAMES)
def test_the_rows_read_once_in_their_groups(name):
    args, table, expected = _run(name)
    kept = expected[~expected["is_repeat"]].reset_index(drop=True)
    assert table.num_rows == len(kept)
    keys = list(zip(table.column("step").to_pylist(), table.column("prompt").to_pylist(), strict=True))
    truth = kept["group_key"].tolist()
    # Each group of the table is one true group, and the other way round.
    assert len(set(keys)) == len(set(truth)) == len(set(zip(keys, truth, strict=True)))
    assert np.array_equal(table.column("reward").to_numpy(), kept["reward_weighted_f32"].to_numpy())
    assert np.array_equal(table.column("recorded_advantage").to_numpy(), kept["recorded_advantage"].to_numpy())
    counts = next(iter(rollaudit.audit(table, device="cpu").info["found"].values()))
    assert counts.get("rows repeated (read once)", 0) == int(expected["is_repeat"].sum())
    notes = rollaudit.audit(table, device="cpu").info["loader_notes"]
    assert any(f"group size G={args['num_generations']}: num_generations=" in note for note in notes), notes


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_equals_ms_swifts_own_and_the_run_names_its_mode(name):
    args, table, expected = _run(name)
    kept = expected[~expected["is_repeat"]].reset_index(drop=True)
    presets = {preset: f"swift_{estimator}_{mode}_nokl" for (estimator, mode), preset in PRESETS.items()}
    recomputed = rollaudit.recompute(table, list(presets), device="cpu")
    for index, column in enumerate(presets.values()):
        actual, want = recomputed.column(index).to_numpy(), kept[column].to_numpy()
        scale = np.maximum(1.0, np.abs(want))
        # float32 upstream: within 8 roundings of a float32 (the recomputation rounds once, at the end)
        assert np.max(np.abs(actual - want) / scale) <= 1e-6, (name, column)
    report = rollaudit.audit(table, device="cpu")
    trained = report.trained_with
    own = PRESETS[(args["advantage_estimator"], args["scale_rewards"])]
    if args["kl_in_reward"] and args["beta"]:
        # The advantages used beta x KL, which the dump does not hold: no preset matches, the config says why, and
        # no finding compares the advantages with rewards the run did not train on.
        assert trained.scheme is None and trained.evidence == "recorded"
        assert "the run's config says why: not reproducible from the logged rewards" in trained.why
        assert report.findings == [], [finding.code for finding in report.findings]
    else:
        assert trained.evidence == "recorded"
        assert trained.scheme == own or own in trained.why, (trained.scheme, own, trained.why)
        assert "args.json" in trained.why
