"""The torch kernel against the plain-Python oracle on random uneven batches, and its invariants."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rollaudit
from rollaudit import SchemeError
from rollaudit._audit.engine import groups as _groups
from rollaudit._audit.engine import sizing as _sizing
from tests.oracle import OracleError, oracle_advantages

SCHEMES = [
    "batch",
    "prompt",
    "trajectory",
    "batch(scale=none)",
    "prompt(std=population)",
    "trajectory(representative=max)",
    "trajectory(representative=mean, scale=none)",
    "slime-legacy(n=2)",
    "slime-legacy(n=3, batch_size=2)",
    "slime-2204(n=2)",
    "verl-grpo",
    "verl-rloo",
    "dr-grpo",
    "trl-group(n=2)",
    "trl-batch(n=3)",
    "nemo-loo(dtype=float64)",
    "nemo-loo(dtype=float64, std=population)",
    "agl-dedup",
    "positional(n=2, singleton=raw)",
    "custom(baseline=leave-one-out, scale=std, eps=0.001)",
    "prompt(drop=constant)",
    "positional(n=2, scale=none, drop=constant)",
    "positional(n=3, remainder=unnormalized, drop=constant)",
    # The last representative, rounded arithmetic, siblings that must agree, the later presets.
    "trajectory(representative=last)",
    "trajectory(representative=last, singleton=raw, scale=none)",
    "prompt(dtype=bfloat16)",
    "prompt(dtype=float32, singleton=raw)",
    "trajectory(dtype=bfloat16, scale=none)",
    "verl-grpo(dtype=bfloat16)",
    "slime-2062",
    "slime-2062(n=2, batch_size=3)",
    "slime-2062(scale=none)",
    "verl-grpo-v1",
    "verl-rloo-vectorized",
    "verl-rpp-baseline",
    "agl-rollout",
    "agl-rollout(scale=none)",
    # AReaL, rllm, NeMo-RL and ROLL.
    "nemo-grpo(dtype=float64)",
    "areal-group",
    "areal-group(std=population)",
    "areal-stride(n=3)",
    "areal-stride(n=2, scale=none)",
    "areal-batch",
    "areal-loo",
    "rllm-grpo",
    "rllm-grpo(scale=none)",
    "rllm-rloo",
    "rllm-verl-legacy",
    "roll-grpo",
    "roll-grpo(scale=none)",
    "roll-grpo-tags",
    "roll-grpo-batch",
    "custom(std_guard=cutoff, eps=0.3)",
]
# Dyadic rewards: sums and means of equal values stay exact, so a zero std is exactly zero in both.
REWARDS = st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0])
ODD_REWARDS = st.sampled_from([math.nan, math.inf, -math.inf])


@st.composite
def batches(draw, allow_nonfinite=True, allow_missing_trajectory=True, string_keys=None, repeat_prompts=False):
    """Rows of 1-3 steps, uneven prompt groups, trajectories of 1+ samples, rows shuffled across steps.

    Trajectory keys are strings nested in their prompt, integers nested in their prompt with gaps
    between them (empty codes), or integers shared by every prompt (not nested: units are pairs).
    ``repeat_prompts``: every step uses the same prompt keys again (a dataset's epochs), and so its
    trajectory keys.
    """
    rows = []
    prompt_counter = 0
    use_strings = draw(st.booleans()) if string_keys is None else string_keys
    trajectory_keys = draw(st.sampled_from(["nested", "gaps", "shared"]))
    # Often every sample of a trajectory carries one reward (what slime-2062 and agl-rollout require).
    sibling_rewards: dict | None = {} if draw(st.booleans()) else None
    for step in draw(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True)):
        step_rows = []
        if repeat_prompts:
            prompt_counter = 0
        for _ in range(draw(st.integers(1, 5))):
            prompt = f"p{prompt_counter}" if use_strings else prompt_counter
            prompt_counter += 1
            trajectories = draw(st.integers(1, 4))
            for _ in range(draw(st.integers(1, 7))):
                trajectory = draw(st.integers(0, trajectories - 1))
                key = {
                    "nested": f"{prompt}/{trajectory}",
                    "gaps": prompt_counter * 9 + trajectory * 2,
                    "shared": trajectory,
                }[trajectory_keys]
                missing = allow_missing_trajectory and draw(st.integers(0, 9)) == 0
                reward = draw(ODD_REWARDS) if allow_nonfinite and draw(st.integers(0, 24)) == 0 else draw(REWARDS)
                if sibling_rewards is not None and not missing:
                    reward = sibling_rewards.setdefault((step, prompt, key), reward)
                step_rows.append(
                    {
                        "step": step,
                        "prompt": prompt,
                        "trajectory": None if missing else key,
                        "reward": reward,
                        "response_length": draw(st.integers(0, 4)),
                        "legacy_reward": 0.0 if not math.isfinite(reward) else reward,
                        "tag": draw(st.sampled_from(["swe", "terminal"])),
                    }
                )
        order = draw(st.permutations(range(len(step_rows))))
        for position, row in zip(order, step_rows, strict=True):
            row["position"] = position
        rows.extend(step_rows)
    return draw(st.permutations(rows))


def table_of(rows):
    return rollaudit.make_table(
        reward=[row["reward"] for row in rows],
        prompt=[row["prompt"] for row in rows],
        trajectory=[row["trajectory"] for row in rows],
        step=[row["step"] for row in rows],
        position=[row["position"] for row in rows],
        response_length=[row.get("response_length") for row in rows],
        **{name: [row[name] for row in rows] for name in ("tag", "legacy_reward") if all(name in row for row in rows)},
    )


def kernel(rows, scheme):
    return rollaudit.recompute(table_of(rows), [scheme], device="cpu").column(0).to_pylist()


def assert_close(actual, expected, tol=1e-9):
    assert len(actual) == len(expected)
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if math.isnan(e):
            assert math.isnan(a), f"row {index}: {a} != nan"
        else:
            assert abs(a - e) <= tol, f"row {index}: {a} != {e}"


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("scheme", SCHEMES)
@PROPERTY
@given(
    rows=batches(),
    piece=st.sampled_from([1, 2, 5, _sizing.PIECE_ROWS]),
    order=st.sampled_from(["shuffled", "steps", "batch"]),
    most_spans=st.sampled_from([0, 8]),
)
def test_kernel_matches_oracle(scheme, rows, piece, order, most_spans):
    if order == "steps":  # steps as runs of rows: their sums add slices, one by one or by segment reduction
        rows = sorted(rows, key=lambda row: row["step"])
    elif order == "batch":  # rows in batch order, as a loaded table's are: ranks counted piece by piece
        rows = sorted(rows, key=lambda row: (row["step"], row["position"]))
    parsed = rollaudit.get_scheme(scheme)
    try:
        expected = oracle_advantages([dict(row) for row in rows], parsed)
    except OracleError:
        with pytest.raises(SchemeError):
            kernel(rows, scheme)
        return
    # Small pieces: the piecewise loops cross piece boundaries as they do on millions of rows.
    with mock.patch.object(_sizing, "PIECE_ROWS", piece), mock.patch.object(_groups, "_MOST_SPANS", most_spans):
        assert_close(kernel(rows, scheme), expected)


@PROPERTY
@given(rows=batches())
def test_schemes_side_by_side_equal_one_at_a_time(rows):
    # recompute runs several schemes in threads on the CPU; each must be bit for bit its own run.
    schemes = [scheme for scheme in SCHEMES if _recomputes(rows, scheme)]
    together = rollaudit.recompute(table_of(rows), schemes, device="cpu")
    for scheme in schemes:
        alone = rollaudit.recompute(table_of(rows), [scheme], device="cpu").column(0).to_numpy()
        assert together.column(f"advantage:{scheme}").to_numpy().tobytes() == alone.tobytes(), scheme


def _recomputes(rows, scheme) -> bool:
    try:
        kernel(rows, scheme)
    except SchemeError:
        return False
    return True


def test_an_invalid_scheme_among_several_raises_its_own_error():
    table = rollaudit.make_table(reward=[1.0, 0.0, 1.0], prompt=[0, 0, 1])
    with pytest.raises(SchemeError, match="n=2"):
        rollaudit.recompute(
            table, ["prompt", "trajectory(representative=first)", "positional(n=2)", "batch"], device="cpu"
        )


@PROPERTY
@given(rows=batches(allow_missing_trajectory=False), n=st.integers(1, 4), prompts=st.integers(1, 6))
def test_keyless_batches_use_slices_of_n(rows, n, prompts):
    rewards = [row["reward"] for row in rows][: n * prompts]
    if len(rewards) < n * prompts:
        return
    table = rollaudit.make_table(reward=rewards)
    keyed = rollaudit.make_table(reward=rewards, prompt=[index // n for index in range(len(rewards))])
    for scheme in ("prompt", "trajectory", "verl-grpo", "nemo-loo"):
        assert_close(
            rollaudit.recompute(table, [f"{scheme}(n={n})"]).column(0).to_pylist(),
            rollaudit.recompute(keyed, [scheme]).column(0).to_pylist(),
            tol=1e-12,
        )


ORDER_FREE = [
    "batch",
    "prompt",
    "trajectory(representative=max)",
    "trajectory(representative=mean)",
    "verl-grpo",
    "verl-rloo",
    "dr-grpo",
    "nemo-loo",
]


@PROPERTY
@given(rows=batches(), data=st.data())
def test_permuting_rows_permutes_the_output(rows, data):
    permutation = data.draw(st.permutations(range(len(rows))))
    shuffled = [rows[index] for index in permutation]
    # Positions travel with their rows: batch order is unchanged, so every scheme permutes.
    for scheme in [*ORDER_FREE, "trajectory", "positional(n=1)", "slime-legacy(n=2)"]:
        try:
            before = kernel(rows, scheme)
        except SchemeError:
            continue
        assert_close(kernel(shuffled, scheme), [before[index] for index in permutation], tol=1e-12)
    # Positions reassigned to the new row order: only order-free schemes may permute.
    renumbered = [dict(row, position=place) for place, row in enumerate(shuffled)]
    for scheme in ORDER_FREE:
        try:
            before = kernel(rows, scheme)
        except SchemeError:
            continue
        assert_close(kernel(renumbered, scheme), [before[index] for index in permutation], tol=1e-12)


@PROPERTY
@given(prompts=st.integers(1, 30), n=st.integers(1, 9), seed=st.integers(0, 2**32 - 1))
def test_uniform_layout_prompt_equals_reshape(prompts, n, seed):
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 3, (prompts * n,), generator=generator).to(torch.float64) / 2
    table = rollaudit.make_table(reward=rewards, prompt=torch.arange(prompts * n) // n)
    got = torch.tensor(rollaudit.recompute(table, ["prompt"]).column(0).to_pylist(), dtype=torch.float64)
    grid = rewards.view(-1, n)
    if n == 1:
        expected = torch.zeros_like(rewards)  # singleton zero
    else:
        expected = ((grid - grid.mean(-1, keepdim=True)) / (grid.std(-1, keepdim=True) + 1e-6)).flatten()
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


@PROPERTY
@given(rows=batches(allow_missing_trajectory=False))
def test_trajectory_equals_prompt_when_every_trajectory_has_one_sample(rows):
    single = [dict(row, trajectory=f"t{index}") for index, row in enumerate(rows)]
    assert_close(kernel(single, "trajectory"), kernel(single, "prompt"), tol=1e-12)
    keyless = [dict(row, trajectory=None) for row in rows]
    assert_close(kernel(keyless, "agl-dedup"), kernel(keyless, "verl-grpo"), tol=1e-12)


@PROPERTY
@given(rows=batches(allow_nonfinite=False))
def test_centred_advantages_sum_to_zero_per_prompt(rows):
    values = kernel(rows, "prompt(scale=none)")
    sums = {}
    for row, value in zip(rows, values, strict=True):
        sums[(row["step"], row["prompt"])] = sums.get((row["step"], row["prompt"]), 0.0) + value
    assert all(abs(total) < 1e-9 for total in sums.values())


@PROPERTY
@given(rows=batches())
def test_nan_never_leaks_from_singletons(rows):
    for scheme in ("prompt", "trajectory(representative=first)", "verl-grpo", "nemo-loo", "agl-dedup", "verl-rloo"):
        values = kernel(rows, scheme)
        for row, value in zip(rows, values, strict=True):
            assert math.isfinite(row["reward"]) == (not math.isnan(value))


def test_large_offsets_keep_their_digits():
    # A one-pass E[x^2] - E[x]^2 on 1e9-sized rewards cancels to noise (ulp of 1e18 is 128); two passes are exact.
    rewards = [1e9 + delta for delta in (0.0, 1.0, 2.0, 3.0)]
    table = rollaudit.make_table(reward=rewards, prompt=[0, 0, 0, 0])
    values = rollaudit.recompute(table, ["prompt"]).column(0).to_pylist()
    std = math.sqrt(5 / 3)
    assert values == pytest.approx([d / (std + 1e-6) for d in (-1.5, -0.5, 0.5, 1.5)], abs=1e-12)


def test_float32_rewards_are_accumulated_in_float64():
    rewards = torch.full((100_001,), 0.1, dtype=torch.float32)
    rewards[0] = 1.1
    table = rollaudit.make_table(reward=rewards, prompt=[0] * len(rewards))
    value = rollaudit.recompute(table, ["prompt(scale=none)"]).column(0)[1].as_py()
    expected = (
        float(torch.tensor(0.1, dtype=torch.float32))
        - (float(torch.tensor(1.1, dtype=torch.float32)) + 100_000 * float(torch.tensor(0.1, dtype=torch.float32)))
        / 100_001
    )
    assert value == pytest.approx(expected, abs=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.gpu
@PROPERTY
@given(rows=batches())
def test_cuda_matches_cpu(rows):
    table = table_of(rows)
    for scheme in SCHEMES:
        try:
            cpu = rollaudit.recompute(table, [scheme], device="cpu").column(0).to_pylist()
        except SchemeError:
            continue
        assert_close(rollaudit.recompute(table, [scheme], device="cuda").column(0).to_pylist(), cpu, tol=1e-12)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("rows", [0, 1, 5, 6])
def test_pieces_cover_every_row_once_with_a_buffer_of_their_length(device, rows):
    # "meta" stands in for a GPU here: one piece, whatever PIECE is.
    with mock.patch.object(_sizing, "PIECE_ROWS", 3):
        slices = list(_sizing.pieces(rows, torch.float64, torch.device(device)))
    covered = [row for piece, _ in slices for row in range(piece.start, piece.stop)]
    assert covered == list(range(rows))
    assert all(buffer.numel() == piece.stop - piece.start for piece, buffer in slices)
    assert len(slices) == (-(-rows // 3) if device == "cpu" else min(rows, 1))


def test_drop_constant_leaves_constant_groups_untrained_and_keeps_a_step_that_would_be_empty():
    # Step 0: group 7 varies, groups 8 (equal rewards) and 9 (one member) are constant. Step 1: every group is
    # constant, so its first group in batch order (9, at position 0) is kept, with advantages 0.
    table = rollaudit.make_table(
        reward=[1.0, 0.0, 2.0, 2.0, 5.0, 3.0, 3.0, 1.0, 1.0],
        prompt=[7, 7, 8, 8, 9, 8, 8, 9, 9],
        step=[0, 0, 0, 0, 0, 1, 1, 1, 1],
        position=[0, 1, 2, 3, 4, 2, 3, 0, 1],
    )
    dropped = rollaudit.recompute(table, ["prompt(scale=none, drop=constant)"], device="cpu").column(0).to_pylist()
    assert dropped[:2] == [0.5, -0.5]
    assert all(math.isnan(value) for value in dropped[2:7])
    assert dropped[7:] == [0.0, 0.0]
    report = rollaudit.audit(table, schemes=["prompt(scale=none, drop=constant)"], device="cpu")
    assert int(report.summary.loc["prompt(scale=none, drop=constant)", "undefined"]) == 5
    assert any(
        "5 samples of groups whose rewards are all equal" in note
        for note in report.info["scheme_notes"]["prompt(scale=none, drop=constant)"]
    )


def test_drop_constant_on_one_step_and_non_finite_rewards():
    table = rollaudit.make_table(reward=[1.0, math.nan, 1.0, 0.0, 2.0], prompt=[0, 0, 0, 1, 1])
    values = rollaudit.recompute(table, ["prompt(drop=constant)"], device="cpu").column(0).to_pylist()
    # Group 0's finite rewards are all 1: constant, dropped; the NaN reward is undefined anyway.
    assert all(math.isnan(value) for value in values[:3])
    assert values[3] < 0 < values[4]
