"""Presets of upstream changes made after the conformance sets (NeMo-RL #4158, AReaL #1563/#1619, verl #7794,
slime #2083): each beside the version it changes, each naming its source."""

from __future__ import annotations

import numpy as np
import pytest

import rollaudit
from rollaudit._audit.presets import PRESETS, get_scheme
from tests.oracle import oracle_advantages

# One reward off a common value the float32 moments cannot hold: leave-one-out peers all 0.45.
LOO_REWARDS = [0.0, 0.45, 0.45, 0.45]


def _recompute(rewards, prompts, schemes):
    table = rollaudit.make_table(reward=rewards, prompt=prompts)
    values = rollaudit.recompute(table, schemes, device="cpu")
    return [values.column(index).to_numpy() for index in range(len(schemes))]


def test_nemo_loo_4158_leaves_a_row_whose_peers_agree_undivided():
    before, after = _recompute(LOO_REWARDS, [0] * 4, ["nemo-loo", "nemo-loo-4158"])
    # Before: the float32 moments of 0.45, 0.45, 0.45 leave a std residue that blows the first row up.
    assert before[0] < -1000
    # After, by hand: row 0's peers are all 0.45, so A = 0 - 0.45 (not divided); rows 1-3 have peers
    # (0, 0.45, 0.45): baseline 0.3, unbiased std sqrt(0.0675), A = 0.15 / (0.2598076 + 1e-6).
    expected = [-0.45, *[0.15 / (np.sqrt(0.0675) + 1e-6)] * 3]
    assert np.abs(after - expected).max() <= 1e-6
    assert np.abs(before[1:] - after[1:]).max() <= 1e-6  # rows whose peers differ are unchanged


def test_nemo_grpo_4158_never_divides_a_group_of_one_value():
    rewards = [0.1, 0.1, 0.1, 0.7, 0.7, 0.7, 1.0, 0.0, 0.0, 0.0]
    prompts = [0, 0, 0, 1, 1, 1, 2, 2, 2, 2]
    exact, after = _recompute(rewards, prompts, ["nemo-grpo(dtype=float64)", "nemo-grpo-4158"])
    assert np.abs(after[:6]).max() == 0.0
    assert np.abs(after - exact).max() <= 1e-6


def test_varied_guard_matches_the_oracle_in_exact_arithmetic():
    rewards = [0.0, 0.45, 0.45, 0.45, 1.0, 2.0, 4.0, 3.0, 3.0, 5.0, 5.0, 5.0]
    prompts = [0, 0, 0, 0, 1, 1, 1, 2, 3, 3, 3, 3]
    scheme = get_scheme("nemo-loo-4158(dtype=float64)")
    rows = [
        {"step": 0, "position": i, "prompt": p, "trajectory": None, "reward": r}
        for i, (r, p) in enumerate(zip(rewards, prompts, strict=True))
    ]
    expected = oracle_advantages(rows, scheme)
    (actual,) = _recompute(rewards, prompts, ["nemo-loo-4158(dtype=float64)"])
    assert np.abs(actual - np.array(expected)).max() <= 1e-12
    # Row 0: peers all 0.45, so 0 - 0.45 undivided; row 4 (reward 1, peers 2 and 4): -2 / (sqrt(2) + 1e-6).
    assert actual[0] == pytest.approx(-0.45) and actual[4] == pytest.approx(-2 / (np.sqrt(2) + 1e-6))


def test_the_old_nemo_presets_are_kept_and_say_which_change_fixes_them():
    for old, new in (("nemo-loo", "nemo-loo-4158"), ("nemo-grpo", "nemo-grpo-4158")):
        assert PRESETS[old].std_guard == "positive" and PRESETS[new].std_guard == "varied"
        assert "#4158" in PRESETS[old].notes.rounding_fix and "PR #4158" in PRESETS[new].notes.source
        assert PRESETS[new].notes.rounding_fix is None


def test_areal_1563_is_not_auditable_on_areal_dumps_and_says_why(tmp_path):
    table = rollaudit.make_table(reward=[1.0, 0.0, 1.0, 1.0], prompt=[0, 0, 1, 1], trajectory=[0, 1, 2, 3])
    report = rollaudit.audit(table, schemes=["prompt", "areal-group", "areal-group-1563"], device="cpu")
    assert "areal-group-1563" not in report.summary.index
    reason = report.not_auditable["areal-group-1563"]
    assert "attempt" in reason and "AReaL" in reason
    assert "areal-group" in report.summary.index  # the version before the change still audits
    assert "#1563" in PRESETS["areal-group-1563"].notes.source


def test_verl_7794_is_the_singleton_parameter_of_rloo_vectorized():
    rewards, prompts = [1.0, 0.0, 1.0, 3.0], [0, 0, 0, 1]
    vectorized, with_7794, rloo = _recompute(
        rewards, prompts, ["verl-rloo-vectorized", "verl-rloo-vectorized(singleton=raw)", "verl-rloo"]
    )
    assert vectorized[3] == 0.0 and with_7794[3] == 3.0
    assert np.array_equal(with_7794, rloo)
    assert np.allclose(vectorized[:3], [0.5, -1.0, 0.5])
    assert "#7794" in PRESETS["verl-rloo-vectorized"].notes.description


@pytest.mark.parametrize("preset", ["slime-2204", "slime-2062"])
def test_slime_2083_reinforce_is_named_by_the_grpo_presets(preset):
    assert "reinforce (slime PR #2083" in PRESETS[preset].notes.source
