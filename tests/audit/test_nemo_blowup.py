"""NeMo-RL's own leave-one-out estimator on near-constant groups, where a row whose peers share one reward gets a
std of float32 rounding noise and an advantage in the thousands: the preset must give the same number.

Every expected value below was produced by running NeMo-RL's ``calculate_baseline_and_std_per_prompt``
(``nemo_rl/algorithms/utils.py``, NVIDIA-NeMo/RL commit 7ea279abfbeb698b092856d0dab61e7cf39bc909) followed by
``GRPOAdvantageEstimator.compute_advantage`` (``nemo_rl/algorithms/advantage_estimator.py``, same commit:
normalize_rewards, eps 1e-6, divide where std > 0), on float32 reward tensors, on CPU with torch 2.13 (MKL
2024.2 ``sgemv``): ``use_leave_one_out_baseline=True`` for nemo-loo, ``False`` for nemo-grpo. The values are
float32 numbers written as Python floats; the preset must equal them exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

import rollaudit

f32 = np.float32

# One prompt each, rewards in batch order. The odd reward sits in the last place (the matrix's last row, which
# MKL sums with another kernel than the leading blocks of four), except in rise-in-middle-15.
SINGLE = {
    "drop-at-end-15": [0.95] * 14 + [0.0],
    "rise-at-end-15": [1 / 3] * 14 + [1.0],
    "rise-at-end-14": [0.1] * 13 + [1.0],
    "drop-at-end-10": [0.7] * 9 + [0.0],
    "rise-in-middle-15": [0.3] * 7 + [1.0] + [0.3] * 7,
}

UPSTREAM_SINGLE = {
    "drop-at-end-15": [
        0.2672600746154785,
        0.2672600746154785,
        0.2672600746154785,
        0.2672600746154785,
        0.2672603130340576,
        0.2672600746154785,
        0.2672603130340576,
        0.2672600746154785,
        0.2672603130340576,
        0.2672600746154785,
        0.2672603130340576,
        0.2672600746154785,
        0.26726019382476807,
        0.26726019382476807,
        -2159.94140625,
    ],
    "rise-at-end-15": [
        -0.2672596275806427,
        -0.2672596275806427,
        -0.2672596275806427,
        -0.2672596275806427,
        -0.2672596871852875,
        -0.2672596275806427,
        -0.2672596275806427,
        -0.2672596275806427,
        -0.2672596871852875,
        -0.2672596275806427,
        -0.2672596275806427,
        -0.2672596275806427,
        -0.2672596275806427,
        -0.2672596275806427,
        7360.37255859375,
    ],
    "rise-at-end-14": [
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        -0.27734899520874023,
        0.8999999761581421,
    ],
    "drop-at-end-10": [
        0.33333200216293335,
        0.33333200216293335,
        0.33333200216293335,
        0.3333319127559662,
        0.33333200216293335,
        0.3333319127559662,
        0.33333200216293335,
        0.3333319127559662,
        0.3333319127559662,
        -2200.23388671875,
    ],
    "rise-in-middle-15": [
        -0.2672596871852875,
        -0.2672596871852875,
        -0.2672596871852875,
        -0.2672596871852875,
        -0.2672596871852875,
        -0.2672596871852875,
        -0.2672596871852875,
        0.699999988079071,
        -0.2672596871852875,
        -0.2672596871852875,
        -0.2672596871852875,
        -0.2672596871852875,
        -0.26726025342941284,
        -0.26726025342941284,
        -0.26726025342941284,
    ],
}

# Five prompts in one batch, round robin (positions mixed, each group's own order kept): groups of 7, 13, 22, 23
# and 15 rows.
BATCH_GROUPS = [
    [0.3] * 6 + [1.0],
    [0.7] * 12 + [0.0],
    [
        0.0,
        0.37,
        0.74,
        0.11,
        0.48,
        0.85,
        0.22,
        0.59,
        0.96,
        0.33,
        0.7,
        0.07,
        0.44,
        0.81,
        0.18,
        0.55,
        0.92,
        0.29,
        0.66,
        0.03,
        0.4,
        0.77,
    ],
    [2 / 3] * 21 + [0.0] + [2 / 3],
    [0.95] * 14 + [0.0],
]


def batch() -> tuple[list[float], list[str]]:
    longest = max(len(group) for group in BATCH_GROUPS)
    pairs = [(group[j], f"p{g}") for j in range(longest) for g, group in enumerate(BATCH_GROUPS) if j < len(group)]
    return [reward for reward, _ in pairs], [prompt for _, prompt in pairs]


UPSTREAM_BATCH = [
    -0.4082466959953308,
    0.28867384791374207,
    -1.7327238321304321,
    0.21319913864135742,
    0.2672600746154785,
    -0.4082466959953308,
    0.28867384791374207,
    -0.36175283789634705,
    0.21319913864135742,
    0.2672600746154785,
    -0.4082466959953308,
    0.2886737287044525,
    0.917121171951294,
    0.21319913864135742,
    0.2672600746154785,
    -0.4082466959953308,
    0.28867384791374207,
    -1.2948392629623413,
    0.21319913864135742,
    0.2672600746154785,
    -0.4082466959953308,
    0.2886737287044525,
    0.013929938897490501,
    0.21319913864135742,
    0.2672603130340576,
    -0.4082466959953308,
    0.28867384791374207,
    1.3261932134628296,
    0.21319913864135742,
    0.2672600746154785,
    5195.9111328125,
    0.2886737287044525,
    -0.8876213431358337,
    0.21319913864135742,
    0.2672603130340576,
    0.28867384791374207,
    0.38989466428756714,
    0.21319913864135742,
    0.2672600746154785,
    0.2886737287044525,
    1.7669087648391724,
    0.21319913864135742,
    0.2672603130340576,
    0.28867384791374207,
    -0.49978363513946533,
    0.21319913864135742,
    0.2672600746154785,
    0.2886737287044525,
    0.7738742828369141,
    0.21319913864135742,
    0.2672603130340576,
    0.28867384791374207,
    -1.4498237371444702,
    0.21319913864135742,
    0.2672600746154785,
    -0.699999988079071,
    -0.12231665104627609,
    0.21319913864135742,
    0.26726019382476807,
    1.1744529008865356,
    0.21319913864135742,
    0.26726019382476807,
    -1.0329283475875854,
    0.21319913864135742,
    -2159.94140625,
    0.252669095993042,
    0.21319913864135742,
    1.6021103858947754,
    0.21319913864135742,
    -0.6391763091087341,
    0.21319913864135742,
    0.6328049898147583,
    0.21319913864135742,
    -1.6094794273376465,
    0.21319913864135742,
    -0.2588891386985779,
    0.21319903433322906,
    1.026261329650879,
    -0.6666667461395264,
    0.21319903433322906,
]

GRPO_REWARDS = [0.0, 0.37, 0.74, 0.11, 0.48, 0.85, 0.22, 0.59, 0.96, 0.33, 0.7, 0.07, 0.44, 0.81, 0.18]
UPSTREAM_GRPO = [
    -1.4842233657836914,
    -0.2816772758960724,
    0.9208688139915466,
    -1.1267096996307373,
    0.07583636045455933,
    1.2783825397491455,
    -0.7691959738731384,
    0.43334999680519104,
    1.6358959674835205,
    -0.41168224811553955,
    0.7908637523651123,
    -1.2567147016525269,
    -0.054168689996004105,
    1.1483774185180664,
    -0.8992010354995728,
]


def recompute(rewards: list[float], prompts: list[str], scheme: str) -> list[float]:
    table = rollaudit.make_table(reward=rewards, prompt=prompts)
    return rollaudit.recompute(table, [scheme], device="cpu").column(0).to_pylist()


def test_the_recorded_values_hold_blow_ups() -> None:
    blown = [value for values in UPSTREAM_SINGLE.values() for value in values if abs(value) > 1000]
    assert len(blown) == 3 and min(abs(value) for value in blown) > 2000
    assert -2159.94140625 in UPSTREAM_BATCH


@pytest.mark.parametrize("name", list(SINGLE))
def test_nemo_loo_equals_upstream_on_a_near_constant_group(name: str) -> None:
    rewards = SINGLE[name]
    assert recompute(rewards, ["p"] * len(rewards), "nemo-loo") == UPSTREAM_SINGLE[name]


def test_nemo_loo_equals_upstream_on_a_batch_of_prompts() -> None:
    rewards, prompts = batch()
    assert recompute(rewards, prompts, "nemo-loo") == UPSTREAM_BATCH


def test_nemo_grpo_equals_upstream_on_the_last_rows() -> None:
    assert recompute(GRPO_REWARDS, ["p"] * len(GRPO_REWARDS), "nemo-grpo") == UPSTREAM_GRPO


def _centred_where_peers_agree(rewards: list[float], got: list[float]) -> None:
    """nemo-loo-4158: a row whose leave-one-out peers share one reward is r - that reward in float32; the rest
    are divided as before, and nothing is large."""
    for row, (reward, value) in enumerate(zip(rewards, got, strict=True)):
        peers = {f32(other) for at, other in enumerate(rewards) if at != row}
        if len(peers) == 1:
            assert value == float(f32(f32(reward) - peers.pop())), (row, value)
    assert max(abs(value) for value in got) < 2.0


@pytest.mark.parametrize("name", list(SINGLE))
def test_nemo_loo_4158_centres_the_rows_upstream_blows_up(name: str) -> None:
    rewards = SINGLE[name]
    got = recompute(rewards, ["p"] * len(rewards), "nemo-loo-4158")
    _centred_where_peers_agree(rewards, got)
    for row, (value, upstream) in enumerate(zip(got, UPSTREAM_SINGLE[name], strict=True)):
        if abs(upstream) > 1000:
            assert value == float(f32(f32(rewards[row]) - f32(rewards[0]))), (row, value)


def test_nemo_loo_4158_centres_the_blow_up_in_a_batch() -> None:
    rewards, prompts = batch()
    got = recompute(rewards, prompts, "nemo-loo-4158")
    for g in range(len(BATCH_GROUPS)):
        rows = [row for row, prompt in enumerate(prompts) if prompt == f"p{g}"]
        _centred_where_peers_agree([rewards[row] for row in rows], [got[row] for row in rows])
    assert got[UPSTREAM_BATCH.index(-2159.94140625)] == float(f32(f32(0.0) - f32(0.95)))
