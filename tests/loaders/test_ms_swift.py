"""ms-swift's completions.jsonl beyond the corpus run: repeated batches, the group size from args.json or from
what verifies, a prompt text that is two groups, the run's config against its recorded advantages."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import rollaudit
from rollaudit import InputError
from tests.conformance.conftest import corpus

RUN = "grpo_default/output/v0-20261207-000000"


def _lines() -> list[dict]:
    text = (corpus("ms_swift") / RUN / "completions.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def _write(folder: Path, lines: list[dict], args: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "completions.jsonl").write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8"
    )
    if args is not None:
        (folder / "args.json").write_text(json.dumps(args), encoding="utf-8")
    return folder


def _relogged(line: dict, step: int) -> dict:
    return {**line, "step": [str(step)] * len(line["step"])}


def test_a_batch_written_again_is_read_once_and_counted(tmp_path):
    lines = _lines()
    # The buffer logged again at the next step before a new batch was generated.
    folder = _write(tmp_path / "run", [lines[0], _relogged(lines[0], 6), lines[1], lines[2]])
    table = rollaudit.load(folder)
    assert table.num_rows == 48
    assert sorted(set(table.column("step").to_pylist())) == [5, 10, 15]
    found = rollaudit.audit(table, device="cpu").info["found"]
    counts = next(iter(found.values()))
    assert counts["lines repeating an earlier line (read once)"] == 1 and counts["rows repeated (read once)"] == 16


def test_the_same_prompt_text_twice_in_a_step_is_two_groups(tmp_path):
    lines = _lines()
    first = lines[0]
    # The step's second group given the first group's prompt text: two dataset rows of one text.
    prompts = first["prompt"][:8] * 2
    folder = _write(tmp_path / "run", [{**first, "prompt": prompts}])
    table = rollaudit.load(folder)
    assert len(set(table.column("prompt").to_pylist())) == 2
    counts = next(iter(rollaudit.audit(table, device="cpu").info["found"].values()))
    assert counts["groups sharing a prompt text with another group of their step"] == 2


def test_the_group_size_from_args_json_is_a_fact_and_a_wrong_one_refused(tmp_path):
    lines = _lines()
    good = _write(tmp_path / "good", lines, {"num_generations": 8})
    notes = rollaudit.audit(rollaudit.load(good), device="cpu").info["loader_notes"]
    assert any("num_generations=8 (from" in note and "args.json" in note for note in notes), notes
    bad = _write(tmp_path / "bad", lines, {"num_generations": 16})
    with pytest.raises(InputError, match="num_generations=16"):
        rollaudit.load(bad)


def test_a_group_size_nothing_verifies_is_refused_naming_the_field(tmp_path):
    lines = _lines()
    # Every advantage 0 and every reward one value: every size of one prompt text fits alike.
    flat = [
        {**line, "reward_correct": [1.0] * 16, "reward_format": [1.0] * 16, "advantages": [0.0] * 16} for line in lines
    ]
    folder = _write(tmp_path / "run", flat)
    with pytest.raises(InputError, match="group sizes 2, 4, 8 all fit") as raised:
        rollaudit.load(folder)
    assert "num_generations" in str(raised.value)
    assert rollaudit.load(folder, num_generations=8).num_rows == 48


def test_the_config_names_the_preset_and_a_contradiction_is_said(tmp_path):
    lines = _lines()
    agreeing = _write(tmp_path / "agree", lines, {"advantage_estimator": "grpo", "scale_rewards": "group"})
    trained = rollaudit.audit(rollaudit.load(agreeing), device="cpu").trained_with
    assert (trained.scheme, trained.evidence) == ("swift-grpo", "recorded")
    assert "the run's config names it too" in trained.why and "scale_rewards=group" in trained.why
    contradicting = _write(tmp_path / "contra", lines, {"advantage_estimator": "grpo", "scale_rewards": "batch"})
    trained = rollaudit.audit(rollaudit.load(contradicting), device="cpu").trained_with
    assert (trained.scheme, trained.evidence) == ("swift-grpo", "recorded")
    assert "names swift-grpo-batch" in trained.why and "they win" in trained.why


def test_kl_in_the_reward_is_said_not_reproducible(tmp_path):
    lines = _lines()
    folder = _write(tmp_path / "run", lines, {"advantage_estimator": "rloo", "kl_in_reward": True, "beta": 0.04})
    table = rollaudit.load(folder)
    said = rollaudit.audit(table, device="cpu").trained_with.why
    assert "not reproducible from the logged rewards" in said and "holds no KL" in said


def test_reward_weights_from_args_json_weigh_the_functions(tmp_path):
    lines = _lines()
    folder = _write(tmp_path / "run", lines, {"reward_weights": [2.0, 0.5], "num_generations": 8})
    table = rollaudit.load(folder)
    correct, form = (np.asarray(table.column(name)) for name in ("reward_correct", "reward_format"))
    expected = correct.astype(np.float32) * np.float32(2.0) + form.astype(np.float32) * np.float32(0.5)
    assert np.array_equal(table.column("reward").to_numpy(), expected.astype(np.float64))
    with pytest.raises(InputError, match="reward_weights gives 3 weights"):
        rollaudit.load(_write(tmp_path / "three", lines, {"reward_weights": [1.0, 1.0, 1.0]}))


def test_a_resumed_run_that_logs_a_step_twice_is_refused(tmp_path):
    lines = _lines()
    other = {**lines[1], "step": lines[0]["step"]}
    with pytest.raises(InputError, match="both log step 5"):
        rollaudit.load(_write(tmp_path / "run", [lines[0], other]))


def test_a_bad_value_names_its_line_counted_from_one(tmp_path):
    lines = _lines()
    lines[2] = {**lines[2], "advantages": ["x"] * 16}
    with pytest.raises(InputError, match="line 3: advantages holds a value that is not a number"):
        rollaudit.load(_write(tmp_path / "run", lines))


def test_unwritten_weights_leave_no_group_size_and_the_refusal_says_why(tmp_path):
    lines = _lines()
    # The advantages of rewards weighted (2, 0.5), logged beside the unweighted rewards, with no args.json.
    weighted = []
    for line in lines:
        rewards = np.array(line["reward_correct"]) * 2.0 + np.array(line["reward_format"]) * 0.5
        groups = rewards.reshape(-1, 8)
        centred = (groups - groups.mean(axis=1, keepdims=True)) / (groups.std(axis=1, ddof=1, keepdims=True) + 1e-4)
        weighted.append({**line, "advantages": centred.reshape(-1).tolist()})
    with pytest.raises(InputError, match="weighted its rewards or subtracted a KL") as raised:
        rollaudit.load(_write(tmp_path / "run", weighted))
    assert "field 'num_generations'" in str(raised.value)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"step": [["5"]] * 16}, "line 1: step"),
        ({"step": ["--5"] * 16}, "line 1: step"),
        ({"step": ["²"] * 16}, "line 1: step"),
        ({"advantages": [[0.5]] * 16}, "line 1: advantages holds a value that is not a number"),
        ({"advantages": ["0.7"] * 16}, "line 1: advantages holds a value that is not a number"),
        ({"advantages": [True] * 16}, "line 1: advantages holds a value that is not a number"),
        ({"step": [], "prompt": [], "completion": [], "advantages": []}, "line 1 logs no row"),
    ],
)
def test_bad_values_are_one_line_naming_their_line(tmp_path, change, said):
    first = {**_lines()[0], **change}
    with pytest.raises(InputError, match=re.escape(said)):
        rollaudit.load(_write(tmp_path / "run", [first]))


def test_a_line_without_reward_functions_is_refused(tmp_path):
    first = {key: value for key, value in _lines()[0].items() if not key.startswith("reward_")}
    with pytest.raises(InputError, match="no reward-function list"):
        rollaudit.load(_write(tmp_path / "run", [first]))


def test_the_users_options_outrank_args_json(tmp_path):
    lines = _lines()
    folder = _write(tmp_path / "run", lines, {"num_generations": 16, "reward_weights": None})
    table = rollaudit.load(folder, num_generations=8, reward_weights=[1.0, 0.0])
    assert np.array_equal(table.column("reward").to_numpy(), np.asarray(table.column("reward_correct")))


def test_two_runs_are_never_merged(tmp_path):
    lines = _lines()
    first, second = _write(tmp_path / "a", lines), _write(tmp_path / "b", lines)
    with pytest.raises(InputError, match="never merged"):
        rollaudit.load([first / "completions.jsonl", second / "completions.jsonl"])


def test_a_repeat_whose_entropy_differs_is_still_a_repeat(tmp_path):
    lines = [{**line, "entropy": [0.1] * 16} for line in _lines()]
    again = {**_relogged(lines[0], 6), "entropy": [0.2] * 16}
    table = rollaudit.load(_write(tmp_path / "run", [lines[0], again, lines[1], lines[2]]))
    assert table.num_rows == 48
