"""agent-lightning v1.0's rollout-level advantage (bfloat16, as upstream computes) on its trained rows."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import rollaudit
from tests.conformance.conftest import assert_matches, corpus

PRESETS = {
    "agl-rollout": "agl_rollout_level",
    "agl-rollout(scale=none)": "agl_rollout_level_nostd",
    "verl-grpo(dtype=bfloat16)": "agl_legacy",
    "verl-grpo(dtype=bfloat16, scale=none)": "agl_legacy_nostd",
}


@pytest.fixture(scope="module")
def trained():
    expected = pq.read_table(corpus("agent_lightning") / "expected.parquet").to_pandas()
    return expected[expected["trained"]].reset_index(drop=True)


def test_the_presets_equal_agent_lightnings_bfloat16_values(trained):
    table = rollaudit.make_table(
        reward=trained["reward_filled"], prompt=trained["data_id"].tolist(), trajectory=trained["rollout_id"].tolist()
    )
    recomputed = rollaudit.recompute(table, list(PRESETS), device="cpu")
    for preset, column in PRESETS.items():
        assert_matches(
            f"agent_lightning: {preset} = {column}",
            recomputed.column(f"advantage:{preset}").to_numpy(),
            trained[column],
        )
    # In float64 the same formula misses bf16's numbers by up to 6e-3: the dtype is what makes them exact.
    exact = rollaudit.recompute(table, ["agl-rollout(dtype=float64)"], device="cpu").column(0).to_numpy()
    assert abs(exact - trained["agl_rollout_level"].to_numpy()).max() > 1e-3


@pytest.mark.parametrize("name", ["train_trajectories.jsonl", "step_3/train_trajectories.jsonl.zip", "."])
def test_the_wandb_export_is_refused_naming_data_id(name):
    with pytest.raises(rollaudit.InputError) as raised:
        rollaudit.load(corpus("agent_lightning") / name)
    assert raised.value.field == "data_id" and "--prompt-col" in raised.value.line()
    assert rollaudit.detect_format(corpus("agent_lightning") / "train_trajectories.jsonl") == "agent_lightning"
