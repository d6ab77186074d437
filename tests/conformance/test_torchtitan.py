"""torchtitan's RL recorder dump (written by torchtitan's own controller loop) against its own estimator: what the
loader groups, counts and marks untrained, and the two presets on whole groups and on the dumped rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit._loaders.formats.torchtitan import LABEL, UNTRAINABLE, ZERO_STD
from rollaudit._table import NOT_TRAINED, facts_in, found_in, notes_in
from tests.conformance.conftest import assert_matches, compare_json, corpus

RUN = "drgrpo_default"
PRESETS = {"torchtitan-drgrpo": "drgrpo", "torchtitan-drgrpo(scale=std)": "grpo", "torchtitan-grpo": "grpo"}


@pytest.fixture(scope="module")
def loaded():
    table = rollaudit.load(corpus("torchtitan") / RUN)
    expected = pq.read_table(corpus("torchtitan") / f"expected_{RUN}.parquet").to_pandas()
    rows = expected.set_index("line").loc[table.column("line").to_pylist()].reset_index()
    return table, expected, rows


def test_the_issues_counts_groups_rows_and_validation_lines(loaded):
    table, expected, _ = loaded
    counts = found_in(table)[LABEL]
    assert counts["training groups"] == 25 == len(set(table.column("prompt").to_pylist()))
    assert counts["training rows (a rollout each)"] == 50 == table.num_rows
    assert counts["validation lines left out"] == 6 == int(expected["is_validation"].sum())
    assert "segments (process lifetimes)" not in counts  # one process wrote the file
    (note,) = [note for note in notes_in(table) if "validation line" in note]
    assert note.startswith("6 validation lines (2 passes")


def test_groups_are_the_true_group_instances_and_rows_keep_the_recorded_values(loaded):
    table, _, rows = loaded
    assert not rows["is_validation"].any()
    prompt = table.column("prompt").to_pylist()
    # One loader key per true group instance, and the other way round.
    pairs = set(zip(prompt, rows["group_key"], strict=True))
    assert len(pairs) == len(set(prompt)) == len(set(rows["group_key"])) == 25
    assert table.column("segment").to_pylist() == rows["segment"].tolist()
    assert table.column("rollout_id").to_pylist() == rows["rollout_id"].tolist()
    assert table.column("trajectory").to_pylist() == [
        f"{p}/{r}" for p, r in zip(prompt, rows["rollout_id"], strict=True)
    ]
    recorded = table.column("recorded_advantage").to_numpy()
    assert np.array_equal(recorded, rows["recorded_advantage"].to_numpy())  # bit for bit
    assert np.array_equal(table.column("reward").to_numpy(), rows["reward"].to_numpy())
    assert table.column("status").to_pylist() == rows["status"].tolist()
    assert table.column("n_turns").to_pylist() == rows["n_turns"].tolist()


def test_not_trained_is_what_the_builder_dropped_as_far_as_the_dump_shows_it(loaded):
    table, _, rows = loaded
    reason = table.column(NOT_TRAINED).to_pylist()
    outcome = rows["builder_outcome"].tolist()
    want = {"dropped_zero_std": ZERO_STD, "dropped_untrainable": UNTRAINABLE}
    assert reason == [want.get(value) for value in outcome]
    # Groups built but still queued at the stop cannot be told from trained ones: never marked.
    assert {value for value, why in zip(outcome, reason, strict=True) if why is None} == {
        "trained_group",
        "built_not_batched",
    }
    groups = {p: why for p, why in zip(table.column("prompt").to_pylist(), reason, strict=True)}
    assert sum(why == ZERO_STD for why in groups.values()) == 5
    assert sum(why == UNTRAINABLE for why in groups.values()) == 2
    assert found_in(table)[LABEL][f"groups not trained: {ZERO_STD}"] == 5
    assert any("drop_zero_std_reward_groups assumed on" in note for note in notes_in(table))


def test_the_step_is_a_lower_bound_of_the_step_that_trained_each_group(loaded):
    table, _, rows = loaded
    step = table.column("step").to_numpy()
    trained = rows["train_step"].notna().to_numpy()
    assert np.all(step[trained] <= rows["train_step"][trained].to_numpy().astype(int))
    newest = rows.groupby("group_key")["max_policy_version"].transform("max")
    has_turns = newest.notna().to_numpy()
    assert np.array_equal(step[has_turns], newest[has_turns].to_numpy().astype(int) + 1)
    assert sorted(set(step.tolist())) == [1, 2, 3, 4]
    # A bound gathers the groups of one bound, not the batch that trained them: batch-wide schemes cannot run.
    assert facts_in(table)["no_step"].startswith("the dump has no step field: the turns' policy versions bound")
    assert any(note.startswith("step = 1 + the newest max_policy_version") for note in notes_in(table))


def test_facts_name_the_subsample_and_the_default(loaded):
    table, _, _ = loaded
    facts = facts_in(table)
    assert facts["partial_groups"]["kept"] == 2
    assert "the recorded advantages cover the whole group" in facts["partial_groups"]["why"]
    assert facts["trained_default"]["scheme"] == "torchtitan-drgrpo"


def _full_groups(expected: pd.DataFrame) -> tuple[pa.Table, dict[str, int]]:
    """Every sibling of every group (the README's full_group_rewards, rollout_id order) as a table."""
    keys, rewards, start = [], [], {}
    for key, text in expected.drop_duplicates("group_key")[["group_key", "full_group_rewards"]].itertuples(index=False):
        start[key] = len(rewards)
        values = json.loads(text)
        keys += [key] * len(values)
        rewards += values
    return rollaudit.make_table(reward=pa.array(rewards), prompt=keys), start


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_equal_torchtitans_estimator_on_whole_groups(loaded, preset):
    _, expected, _ = loaded
    whole, start = _full_groups(expected)
    values = rollaudit.recompute(whole, [preset], device="cpu").column(0).to_numpy()
    at = [start[key] + rollout for key, rollout in zip(expected["group_key"], expected["rollout_id"], strict=True)]
    column = f"tt_{PRESETS[preset]}_full"
    worst = assert_matches(f"torchtitan: {preset} = {column}", values[at], expected[column], tolerance=1e-12)
    assert worst <= 4.5e-16  # float64 rounding: the mean summed left to right, as Python's sum on 3.11
    if PRESETS[preset] == "drgrpo":
        assert worst == 0.0  # 8 x 0.2 keeps its inexact mean: 2.7755575615628914e-17, as recorded


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_on_the_dumped_rows_are_what_a_recomputation_gives_not_what_was_trained(loaded, preset):
    table, _, rows = loaded
    # Every dumped row, the groups torchtitan did not train among them (a preset gives those none otherwise).
    every_row = table.drop_columns(["not_trained"])
    values = rollaudit.recompute(every_row, [preset], device="cpu").column(0).to_numpy()
    trained = rollaudit.recompute(table, [preset], device="cpu").column(0).to_numpy()
    left_out = np.array([reason is not None for reason in table.column("not_trained").to_pylist()])
    assert np.isnan(trained[left_out]).all()
    # The trained groups' rows in a longer table: torch may sum them in another order there (another CPU's kernels).
    label = f"torchtitan: {preset} trained = every row's"
    assert_matches(label, trained[~left_out], values[~left_out], tolerance=1e-12)
    column = f"tt_{PRESETS[preset]}_dumped"
    worst = assert_matches(f"torchtitan: {preset} = {column}", values, rows[column], tolerance=1e-12)
    assert worst <= 2.3e-16
    if PRESETS[preset] == "drgrpo":
        differs = np.abs(values - table.column("recorded_advantage").to_numpy()) > 1e-12
        assert int(differs.sum()) == 36  # the README: 36 of 50 rows differ from what was trained


def test_recorded_values_are_consistent_with_drgrpo_on_every_group(loaded):
    """The README's self-check: under Dr.GRPO, r - A is the whole group's mean on every row of a group; the GRPO
    scale recovered from two distinct rewards is 1 (Dr.GRPO divides by 1), never pstdev + 1e-6 <= 0.5 + 1e-6."""
    table, _, rows = loaded
    frame = table.select(["prompt", "reward", "recorded_advantage"]).to_pandas()
    frame["implied"] = frame["reward"] - frame["recorded_advantage"]
    spread = frame.groupby("prompt")["implied"].agg(lambda v: v.max() - v.min())
    assert spread.max() <= 1.2e-16
    true_mean = rows["full_group_rewards"].map(lambda text: float(np.mean(json.loads(text))))
    assert np.abs(frame["implied"].to_numpy() - true_mean.to_numpy()).max() <= 1.2e-16
    ranges = frame.groupby("prompt").agg(r=("reward", np.ptp), a=("recorded_advantage", np.ptp))
    varied = ranges[ranges["r"] > 0]
    assert len(varied) == 19 and np.allclose(varied["r"] / varied["a"], 1.0, rtol=0, atol=1e-15)


def test_compare_on_the_run_directory(loaded):
    report = compare_json(corpus("torchtitan") / RUN)
    assert report["load"]["format"] == "torchtitan"
    # 25 groups and 50 training rows, 6 validation lines left out; 7 groups (14 rows) not trained, counted apart.
    found = report["info"]["found"][LABEL]
    assert (found["training groups"], found["training rows (a rollout each)"]) == (25, 50)
    assert found["validation lines left out"] == 6
    assert sorted((entry["groups"], entry["rows"]) for entry in report["info"]["not_trained"]) == [(2, 4), (5, 10)]
    assert report["info"]["samples"] == 36 and report["info"]["prompts"] == 18
    assert report["info"]["step_values"] == [1, 2, 3, 4]
    # The run's scheme from its recorded values' consistency; nothing recomputed from the dumped rows audited.
    trained = report["trained_with"]
    assert (trained["scheme"], trained["evidence"], trained["row"]) == ("torchtitan-drgrpo", "recorded", None)
    assert "consistent with it on every one of the 18 groups" in trained["why"]
    partial = report["info"]["partial_groups"]
    assert (partial["whole"], partial["groups"], partial["partial_groups"]) == (False, 18, 18)
    assert report["summary"] == {} and report["schemes"] == []
    for scheme in ("prompt", "trajectory", "torchtitan-drgrpo"):
        assert "shown to be part of a larger group" in report["not_auditable"][scheme]
