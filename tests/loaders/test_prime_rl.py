"""prime-rl's rollout traces: what the loader reads, joins and refuses (on the generator's sample run)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import rollaudit
from rollaudit import InputError
from rollaudit._errors import NotAuditable
from rollaudit._table import notes_in

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_dumps"))
import generate_agentic  # noqa: E402


@pytest.fixture
def run(tmp_path: Path) -> Path:
    generate_agentic.write_prime_rl(tmp_path)
    return tmp_path / "prime_rl"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _rewrite(path: Path, episodes: list[dict]) -> None:
    path.write_text("".join(json.dumps(episode) + "\n" for episode in episodes))


def test_members_rewards_and_recorded_advantages(run):
    table = rollaudit.load(run)
    frame = table.to_pandas()
    episodes = [e for step in (1, 2) for e in _lines(run / f"rollouts/step_{step}/train/all/traces.jsonl")]
    members = [
        (e, t) for e in episodes for t in e["traces"] if t["agent"]["trainable"] and t["ok"]
    ]  # every trace of the sample has sampled tokens
    assert table.num_rows == len(members) == 24
    assert sorted(frame["reward"]) == sorted(
        sum(r["score"] * r["weight"] for r in t["rewards"].values()) for _, t in members
    )
    assert set(frame["agent"]) == {"main", "sub", "proposer", "solver"}  # the judge is not trainable
    # The shipped traces' advantages, joined on the trace id; pruned zeros and unshipped traces are null.
    shipped = {
        t["id"]: t["info"]["advantage"]
        for step in (1, 2)
        for e in _lines(run / f"rollouts/step_{step}/train/effective/traces.jsonl")
        for t in e["traces"]
    }
    recorded = dict(zip(frame["trace_id"], frame["recorded_advantage"], strict=True))
    assert {k: v for k, v in recorded.items() if not np.isnan(v)} == shipped
    # The last group's final episode arrived in step_2: the whole group is audited there.
    assert frame.groupby("prompt")["step"].nunique().max() == 1
    assert set(frame.loc[frame["arrival_step"] != frame["step"], "step"]) == {2}
    assert any("two step directories" in note for note in notes_in(table))


def test_metrics_jsonl_is_not_a_dump_and_the_run_root_is_one_run(run):
    assert rollaudit.load(run).num_rows == rollaudit.load(run / "rollouts").num_rows


def test_rewards_written_with_spaces_are_read_the_same(run, tmp_path):
    path = run / "rollouts/step_1/train/all/traces.jsonl"
    before = rollaudit.load(run).column("reward").to_pylist()
    _rewrite(path, _lines(path))  # json.dumps' default ", " and ": " separators
    assert rollaudit.load(run).column("reward").to_pylist() == before


def test_a_missing_group_id_is_refused_by_name(run):
    path = run / "rollouts/step_1/train/all/traces.jsonl"
    episodes = _lines(path)
    del episodes[2]["group"]["id"]
    _rewrite(path, episodes)
    with pytest.raises(InputError, match=r"group\.id"):
        rollaudit.load(run)


def test_a_rewards_object_it_cannot_read_is_refused_not_skipped(run):
    path = run / "rollouts/step_1/train/all/traces.jsonl"
    episodes = _lines(path)
    episodes[0]["traces"][0]["rewards"]["correct"] = {"score": 1.0, "weight": 1.0, "detail": {"nested": 1}}
    _rewrite(path, episodes)
    with pytest.raises(InputError, match="rewards"):
        rollaudit.load(run)


def test_branching_nodes_are_refused(run):
    path = run / "rollouts/step_1/train/all/traces.jsonl"
    episodes = _lines(path)
    nodes = episodes[0]["traces"][0]["nodes"]
    nodes.append(dict(nodes[-1], parent=0))
    _rewrite(path, episodes)
    with pytest.raises(InputError, match="parent"):
        rollaudit.load(run)


def test_effective_files_alone_are_refused(run):
    with pytest.raises(InputError, match="effective"):
        rollaudit.load(run / "rollouts/step_1/train/effective")


def test_rae_is_not_auditable_without_the_first_step(run, tmp_path):
    shutil.rmtree(run / "rollouts/step_1")
    table = rollaudit.load(run)
    assert table.column("scoring_order").null_count == table.num_rows
    with pytest.raises(NotAuditable, match="scoring"):
        rollaudit.recompute(table, ["prime-rae"], device="cpu")
    # The per-group presets still run on what is there.
    assert rollaudit.recompute(table, ["prime-grpo"], device="cpu").num_rows == table.num_rows


def test_lenpen_is_not_auditable_without_token_counts(run):
    table = rollaudit.load(run).drop_columns(["num_turns"])
    with pytest.raises(Exception, match="num_turns"):
        rollaudit.recompute(table, ["prime-grpo-lenpen"], device="cpu")
