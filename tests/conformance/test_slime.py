"""slime's own dumps (a --dump-details run of agent fan-out) against slime's own functions (main, #2204, #2062)."""

from __future__ import annotations

import json
import math

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import rollaudit
from tests.conformance.conftest import CORPUS, assert_matches, corpus

PRESETS = {
    "slime-legacy(n=4)": "slime_legacy",
    "slime-legacy(n=4, scale=none)": "slime_legacy_nostd",
    "slime-2204": "slime_pr2204_std",
    "slime-2204(scale=none)": "slime_pr2204_nostd",
    "slime-2062": "slime_pr2062_std",
    "slime-2062(scale=none)": "slime_pr2062_nostd",
}


@pytest.fixture(scope="module")
def run():
    # Step 5 was a --reward-key score run: every reward is a dict. Step 4's are floats, which the key leaves alone.
    return rollaudit.load(corpus("slime"), reward_key="score")


@pytest.mark.parametrize("step", [4, 5])
def test_every_preset_equals_slimes_own_values(run, step):
    expected = pq.read_table(corpus("slime") / f"expected_{step}.parquet").to_pandas()
    table = run.filter(pc.equal(run.column("step"), step))
    assert table.column("position").to_pylist() == expected["position"].tolist()
    assert table.column("prompt").to_pylist() == expected["group_index"].tolist()
    assert table.column("reward").to_pylist() == pytest.approx(expected["reward"].tolist(), abs=0)
    recomputed = rollaudit.recompute(table, list(PRESETS), device="cpu")
    for preset, column in PRESETS.items():
        assert_matches(
            f"slime: {preset} = {column}", recomputed.column(f"advantage:{preset}").to_numpy(), expected[column]
        )


@pytest.mark.parametrize("step", [4, 5])
def test_the_train_dump_joins_on_rollout_position(run, step):
    """Fan-out siblings share ``index`` (so ``sample_index`` repeats): the recorded advantage of every trained
    sample is its own, the samples the schedule dropped have none."""
    expected = pq.read_table(corpus("slime") / f"expected_{step}.parquet").to_pandas()
    table = run.filter(pc.equal(run.column("step"), step))
    recorded = table.column("recorded_advantage").to_numpy(zero_copy_only=False)
    trained = expected["train_rollout_position"].notna().to_numpy()
    assert_matches(f"slime: recorded (train dump) = train_rewards, step {step}", recorded, expected["train_rewards"])
    assert (~trained).sum() == {4: 2, 5: 3}[step]
    assert len(set(expected["index"][trained])) < trained.sum()  # sample_index could not have joined them


def test_compare_says_what_the_trainer_did_and_what_it_found(run):
    report = rollaudit.audit(run, schemes=["slime-2204", "slime-2062"], device="cpu")
    assert report.recorded["best_match"] == "slime-legacy(n=4)"
    found = report.info["found"]["slime (prompt = group_index, trajectory = rollout_id, else index)"]
    assert found["prompts"] == 20 and found["trajectories"] == 66 and found["samples"] == 92
    assert found["trained samples (train dump)"] == 87 and found["samples the train schedule dropped"] == 5


def test_a_sample_index_that_is_not_the_rollout_samples_index_names_both_files(tmp_path):
    """A train dump of another run: its sample_index at a rollout position is not that sample's index."""
    import shutil

    import torch

    source = corpus("slime")
    shutil.copytree(source / "rollout_data", tmp_path / "rollout_data")
    dump = torch.load(source / "train_data" / "4.pt", weights_only=True)  # the corpus's own file, builtins only
    dump["samples"][3]["sample_index"] += 1
    (tmp_path / "train_data").mkdir()
    torch.save(dump, tmp_path / "train_data" / "4.pt")
    (tmp_path / "rollout_data" / "5.pt").unlink()
    with pytest.raises(rollaudit.InputError) as raised:
        rollaudit.load(tmp_path)
    line = raised.value.line()
    assert "train_data/4.pt" in line and "rollout_data/4.pt" in line and "rollout_position 3" in line


_VECTORS = CORPUS / "slime" / "pr2062_vectors.json"
VECTORS = json.loads(_VECTORS.read_text()) if _VECTORS.is_file() else [{"name": "absent"}]


@pytest.mark.parametrize("case", VECTORS, ids=[case["name"] for case in VECTORS])
@pytest.mark.parametrize("std", [True, False])
def test_pr2062_edge_vectors(case, std):
    """slime PR #2062's normalize_rewards_by_rollout on its hand-made cases: values, or the error it raised."""
    corpus("slime")
    pairs = zip(case["rollout_id"], case["index"], strict=True)
    keys = [rollout if rollout is not None else index for rollout, index in pairs]
    table = rollaudit.make_table(
        reward=[math.nan if reward is None else float(reward) for reward in case["rewards"]],
        prompt=case["group_index"],
        trajectory=keys,
    )
    scheme = f"slime-2062(n={case['n_samples_per_prompt']}, batch_size={case['rollout_batch_size']}"
    scheme += ")" if std else ", scale=none)"
    expected = case["std" if std else "nostd"]
    if isinstance(expected, dict):
        with pytest.raises(rollaudit.SchemeError, match="different rewards"):
            rollaudit.recompute(table, [scheme], device="cpu")
        return
    assert_matches("slime: slime-2062 = pr2062_vectors", rollaudit.recompute(table, [scheme]).column(0), expected)


def test_the_reward_key_is_the_one_the_train_dump_verifies(tmp_path):
    """Step 5's rewards are dicts and no --reward-key is given: its train dump's raw_reward (the scalar slime trained
    on) equals 'score' and no other key, so 'score' is read, and said; a raw_reward that no key (or a rollout dump
    with no train dump) verifies is refused, naming the keys."""
    import shutil

    import torch

    from rollaudit._errors import ChoiceNeeded
    from rollaudit._table import notes_in

    verified = rollaudit.load(corpus("slime"), cache=False)
    given = rollaudit.load(corpus("slime"), reward_key="score", cache=False)
    assert verified.column("reward").equals(given.column("reward"))
    assert verified.column("recorded_advantage").equals(given.column("recorded_advantage"))
    assert not [name for name in verified.column_names if name.startswith("slime.reward:")]
    assert any("reward = reward['score'] (no --reward-key given): on step 5" in note for note in notes_in(verified))

    copy = tmp_path / "slime"
    shutil.copytree(corpus("slime"), copy)
    train = torch.load(copy / "train_data" / "5.pt", weights_only=False)
    rollout = rollaudit.load(copy / "rollout_data" / "5.pt", reward_key="acc", cache=False)
    train["raw_reward"] = rollout.column("reward").to_pylist()
    torch.save(train, copy / "train_data" / "5.pt")
    by_acc = rollaudit.load(copy, cache=False)
    step5 = pc.equal(by_acc.column("step"), 5)
    assert by_acc.filter(step5).column("reward").equals(rollout.column("reward"))

    train["raw_reward"] = [7.0] * len(train["raw_reward"])
    torch.save(train, copy / "train_data" / "5.pt")
    with pytest.raises(ChoiceNeeded, match="its train dump's raw_reward equals none of them"):
        rollaudit.load(copy, cache=False)
    with pytest.raises(ChoiceNeeded, match="no train dump of its step holds the raw_reward"):
        rollaudit.load(copy / "rollout_data", cache=False)
