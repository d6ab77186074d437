"""prime-rl's own rollout traces (verifiers episodes) against its own algorithm classes (both steps, every column)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import rollaudit
from tests.conformance.conftest import assert_matches, compare_json, corpus

PRESETS = {
    "prime_rl_grpo": "prime-grpo",
    "prime_rl_grpo_lenpen": "prime-grpo-lenpen",
    "prime_rl_max_rl": "prime-maxrl",
    "prime_rl_hierarchical_grpo": "prime-hierarchical(episode_agents=solver)",
    "prime_rl_hierarchical_grpo_episode": "prime-hierarchical(episode_agents=main|sub|judge|proposer|solver)",
    "prime_rl_rae": "prime-rae",
}
# The README's tables: members per group, traces per file, and the run's totals.
MEMBERS_PER_GROUP = {1: 1, 3: 2, 4: 1, 6: 1, 9: 3, 10: 3, 13: 1}
TRACES = 84 + 33


def _expected() -> pd.DataFrame:
    return pd.concat([pd.read_parquet(corpus("prime_rl") / f"expected_step{step}.parquet") for step in (1, 2)])


def _loaded():
    table = rollaudit.load(corpus("prime_rl"))
    expected = _expected()
    members = expected[expected["is_member"]].set_index("trace_id")
    place = {trace: row for row, trace in enumerate(table.column("trace_id").to_pylist())}
    rows = np.array([place[trace] for trace in members.index])
    return table, members, rows


def test_rows_groups_rewards_and_tokens_are_the_readmes():
    table, members, rows = _loaded()
    assert table.num_rows == len(members) == 87 and len(_expected()) == TRACES
    sizes = table.to_pandas().groupby("prompt").size().value_counts().to_dict()
    assert sizes == MEMBERS_PER_GROUP
    frame = table.to_pandas().iloc[rows]
    assert frame["prompt"].tolist() == members["group_id"].tolist()
    assert frame["trajectory"].tolist() == members["episode_id"].tolist()
    assert np.abs(frame["reward"].to_numpy() - members["reward"].to_numpy()).max() == 0.0
    assert frame["num_output_tokens"].tolist() == members["num_output_tokens"].tolist()
    assert frame["num_input_tokens"].tolist() == members["num_input_tokens_lenpen"].tolist()
    assert frame["num_turns"].tolist() == members["num_turns"].tolist()
    # Recorded advantages: the shipped traces' node advantages, joined on the trace id.
    recorded = frame["recorded_advantage"].to_numpy()
    assert np.array_equal(np.isnan(recorded), np.isnan(members["recorded_advantage"].to_numpy()))
    assert np.nanmax(np.abs(recorded - members["recorded_advantage"].to_numpy())) == 0.0
    assert int((~np.isnan(recorded)).sum()) == 60
    # The run's scoring order, per env, is the README's rae_order (scored groups).
    scored = members["group_scored"].to_numpy()
    rank = frame.groupby("env")["scoring_order"].rank(method="first").to_numpy() - 1
    assert rank[scored].tolist() == members["rae_order"].to_numpy()[scored].astype(int).tolist()
    # The group spanning step_1 and step_2 is audited whole in step 2, where its last episode arrived.
    spanning = frame[frame["arrival_step"] != frame["step"]]
    assert spanning["prompt"].nunique() == 1 and set(spanning["step"]) == {2}


@pytest.mark.parametrize("column", list(PRESETS))
def test_each_preset_equals_prime_rls_own_values(column):
    table, members, rows = _loaded()
    recomputed = rollaudit.recompute(table, [PRESETS[column]], device="cpu").column(0).to_numpy()[rows]
    expected = members[column].to_numpy()
    # The 2 groups still short at the end of the dump were never scored upstream: no preset gives them an
    # advantage either (NaN), so the defined/NaN pattern is upstream's on every row.
    scored = members["group_scored"].to_numpy()
    assert int((~scored).sum()) == 6 and bool(np.isnan(expected[~scored]).all())
    worst = assert_matches(f"prime_rl: {PRESETS[column]} = {column}", recomputed, expected)
    assert worst <= (2e-7 if column in ("prime_rl_grpo", "prime_rl_grpo_lenpen", "prime_rl_max_rl") else 1e-15)


def test_recorded_advantages_are_each_envs_configured_algorithm():
    table, _, rows = _loaded()
    frame = table.to_pandas().iloc[rows]
    recorded = frame["recorded_advantage"].to_numpy()
    values = rollaudit.recompute(table, ["prime-grpo", PRESETS["prime_rl_hierarchical_grpo"]], device="cpu")
    for env, column in (("delegate", 0), ("proposer-solver", 1)):
        shipped = (frame["env"].to_numpy() == env) & ~np.isnan(recorded)
        assert shipped.sum() > 0
        assert_matches(
            f"prime_rl: recorded ({env})", values.column(column).to_numpy()[rows][shipped], recorded[shipped]
        )


def test_compare_on_the_run_root_reads_the_rollouts_not_metrics_jsonl():
    report = compare_json(corpus("prime_rl"))
    assert report["load"]["format"] == "prime_rl" and report["info"]["step_values"] == [1, 2]
    # The 2 groups not scored by the end of the dump (6 members) are left out of every scheme and rate.
    assert report["info"]["samples"] == 81 and report["info"]["prompts"] == 10
    assert report["info"]["not_trained"] == [
        {"reason": "group not scored by the end of the dump", "rows": 6, "groups": 2}
    ]
    # The recorded advantages outrank the default; each env ran its own algorithm: a part per env, both recorded.
    trained = report["trained_with"]
    assert trained["evidence"] == "recorded" and trained["scheme"] is None and trained["row"] == "recorded"
    parts = {part["where"]: (part["scheme"], part["evidence"], part["steps"]) for part in trained["parts"]}
    assert parts == {
        "env=delegate": ("prime-grpo", "recorded", [1, 2]),
        "env=proposer-solver": ("prime-hierarchical(episode_agents=solver)", "recorded", [1, 2]),
    }
    assert sum(part["samples"] for part in trained["parts"]) == 60  # the shipped traces
