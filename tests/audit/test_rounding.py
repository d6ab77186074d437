"""Rounded arithmetic: NeMo-RL's float32 moments against a plain-Python float32 oracle, the residues they leave,
and fit tolerances that follow a scheme's dtype."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rollaudit
from rollaudit._audit.engine.encode import encode
from rollaudit._audit.rounding import Residues, rounding_residues
from rollaudit._audit.trained_with.fit import DEFAULT_RECORDED_TOLERANCE, allowed_error
from tests.conformance.conftest import corpus

f32 = np.float32


def matmul_row_sum(terms: list, row: int) -> np.float32:
    """Row ``row`` of NeMo-RL's float32 mask-matrix product (an ``N x N`` matrix times a vector: MKL's ``sgemv``).

    The rows of the leading blocks of 4: a sequential head of (N - 1) % 4 + 1 terms that goes on as lane 0, four
    lanes of every fourth term after it, then (lane0 + lane2) + (lane1 + lane3). The last N % 4 rows: a sequential
    head of 4 terms that goes on as lane 0, (N - 4) // 8 passes of 8 terms where N >= 12, each pass's term k to
    lane k (the second of two or three such rows: terms k and k + 4 to lane k, of four), the lanes combined in
    pairs, then the terms after the passes one by one."""
    size = len(terms)
    if row < size - size % 4:
        head = (size - 1) % 4 + 1
        lanes = [f32(0.0)] * 4
        for index, term in enumerate(terms):
            lane = 0 if index < head else (index - head) % 4
            lanes[lane] = f32(lanes[lane] + term)
        return f32(f32(lanes[0] + lanes[2]) + f32(lanes[1] + lanes[3]))
    total = f32(0.0)
    for term in terms[:4]:
        total = f32(total + term)
    passes = (size - 4) // 8 if size >= 12 else 0
    four = size % 4 >= 2 and row == size - size % 4 + 1
    if passes:
        lanes = [total] + [f32(0.0)] * (3 if four else 7)
        for at in range(passes):
            chunk = terms[4 + 8 * at : 12 + 8 * at]
            for k, term in enumerate(chunk):
                lanes[k % 4 if four else k] = f32(lanes[k % 4 if four else k] + term)
        if four:
            total = f32(f32(lanes[0] + lanes[2]) + f32(lanes[1] + lanes[3]))
        else:
            total = f32(
                f32(f32(lanes[0] + lanes[4]) + f32(lanes[2] + lanes[6]))
                + f32(f32(lanes[1] + lanes[5]) + f32(lanes[3] + lanes[7]))
            )
    for term in terms[4 + 8 * passes :]:
        total = f32(total + term)
    return total


def nemo_oracle(rewards: list[float], leave_one_out: bool, normalize: bool = True) -> list[float]:
    """``calculate_baseline_and_std_per_prompt`` and ``GRPOAdvantageEstimator`` for one group (rewards in batch
    order), in numpy float32 scalars, one row at a time."""
    values = [f32(r) for r in rewards]
    if len(values) <= 1:
        return [0.0] * len(values)
    counted = f32(len(values) - int(leave_one_out))
    out = []
    for i, value in enumerate(values):
        keep = [f32(0.0) if leave_one_out and j == i else v for j, v in enumerate(values)]
        baseline = f32(matmul_row_sum(keep, i) / counted)
        squares = f32(matmul_row_sum([f32(v * v) for v in keep], i) / counted)
        with np.errstate(divide="ignore", invalid="ignore"):
            variance = f32(f32(squares - f32(baseline * baseline)) * f32(counted / f32(counted - f32(1))))
            std = np.sqrt(variance)
        std = f32(0.0) if math.isnan(std) else std
        advantage = f32(value - baseline)
        if normalize and std > 0:
            advantage = f32(advantage / f32(std + f32(1e-6)))
        out.append(float(advantage))
    return out


NON_DYADIC = st.sampled_from([0.0, 1.0, 0.5, 0.3, 0.7, 0.1, 0.35, 0.95, 0.2])


@st.composite
def uneven_groups(draw):
    """Prompt groups of 1-13 rows, often of one repeated (non-dyadic) reward, rows interleaved in batch order."""
    groups = []
    for _ in range(draw(st.integers(1, 5))):
        size = draw(st.integers(1, 13))
        if draw(st.booleans()):
            groups.append([draw(NON_DYADIC)] * size)
        else:
            groups.append(draw(st.lists(NON_DYADIC, min_size=size, max_size=size)))
    prompts = [prompt for prompt, group in enumerate(groups) for _ in group]
    rewards = [reward for group in groups for reward in group]
    order = draw(st.permutations(range(len(rewards))))
    return [prompts[i] for i in order], [rewards[i] for i in order]


def oracle_by_group(prompts: list[int], rewards: list[float], leave_one_out: bool, normalize: bool) -> list[float]:
    result = [0.0] * len(rewards)
    for prompt in set(prompts):
        rows = [i for i, p in enumerate(prompts) if p == prompt]
        for row, value in zip(rows, nemo_oracle([rewards[i] for i in rows], leave_one_out, normalize), strict=True):
            result[row] = value
    return result


@pytest.mark.parametrize(
    ("scheme", "leave_one_out", "normalize"),
    [("nemo-loo", True, True), ("nemo-grpo", False, True), ("nemo-loo(scale=none)", True, False)],
)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=uneven_groups())
def test_float32_moments_match_the_plain_float32_oracle(scheme, leave_one_out, normalize, batch):
    prompts, rewards = batch
    table = rollaudit.make_table(reward=rewards, prompt=prompts)
    got = rollaudit.recompute(table, [scheme], device="cpu").column(0).to_pylist()
    expected = oracle_by_group(prompts, rewards, leave_one_out, normalize)
    for row, (a, e) in enumerate(zip(got, expected, strict=True)):
        # Every rounding the same; torch's float32 sqrt may differ from the correctly rounded one by an ulp.
        assert abs(a - e) <= 4e-7 * max(1.0, abs(e)), (row, a, e)
        assert (abs(a) > 1e-6) == (abs(e) > 1e-6), (row, a, e)  # the same residues, none more, none less


def test_a_constant_non_dyadic_group_of_eight_keeps_its_float32_residue():
    table = rollaudit.make_table(reward=[0.3] * 8 + [0.0, 1.0] * 4, prompt=[0] * 8 + [1] * 8)
    got = rollaudit.recompute(table, ["nemo-loo", "nemo-loo(dtype=float64)"], device="cpu")
    rounded, exact = (np.array(got.column(i).to_pylist()) for i in range(2))
    assert np.all(exact[:8] == 0.0)
    assert np.allclose(np.abs(rounded[:8]), 3.1626e-4, rtol=1e-3)
    assert np.abs(rounded[8:] - exact[8:]).max() < 1e-6
    assert rounded[:8].tolist() == nemo_oracle([0.3] * 8, leave_one_out=True)


def test_rounding_residues_count_what_float32_made_and_name_the_fix():
    table = rollaudit.validate_table(
        rollaudit.make_table(reward=[0.3] * 8 + [0.5] * 8 + [0.0, 1.0] * 4, prompt=[0] * 8 + [1] * 8 + [2] * 8)
    )
    encoded = encode(table, "cpu")
    residues = rounding_residues(encoded, "nemo-loo", 1e-6)
    assert residues == Residues(8, 8, residues.largest, "float32", "the defect NeMo-RL PR #4158 fixes")
    assert residues.largest == pytest.approx(3.1626e-4, rel=1e-3)
    assert rounding_residues(encoded, "nemo-loo(dtype=float64)", 1e-6) is None  # exact: nothing to count
    assert rounding_residues(encoded, "nemo-loo", 1e-3) is None  # all inside a wider zero band
    dyadic = encode(rollaudit.validate_table(rollaudit.make_table(reward=[0.5] * 8, prompt=[0] * 8)), "cpu")
    assert rounding_residues(dyadic, "nemo-loo") is None


@pytest.mark.parametrize("run", ["dapo", "grpo"])
def test_corpus_residues(run):
    encoded = encode(rollaudit.validate_table(rollaudit.load(corpus("nemo_rl") / run)), "cpu")
    residues = rounding_residues(encoded, "nemo-loo", 1e-6)
    assert (residues.samples, residues.in_constant_groups) == (8, 8)
    assert residues.largest == pytest.approx(3.162629436701536e-4, rel=1e-6)
    assert residues.fix == "the defect NeMo-RL PR #4158 fixes"
    assert rounding_residues(encoded, "nemo-grpo", 1e-6) is None


def test_allowed_error_follows_the_dtype():
    tolerance = DEFAULT_RECORDED_TOLERANCE
    assert allowed_error(tolerance, 2.0) == allowed_error(tolerance, 2.0, "float32") == 2 * tolerance
    assert allowed_error(tolerance, 2.0, "bfloat16") == 2 * 2 * 2.0**-7


def test_a_bfloat16_scheme_is_allowed_a_bfloat16_rounding():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.7, 0.2, 0.9, 0.4]
    prompts = [0, 0, 0, 0, 1, 1, 1, 1]
    plain = rollaudit.make_table(reward=rewards, prompt=prompts, trajectory=list(range(8)))
    truth = np.array(rollaudit.recompute(plain, ["agl-rollout"], device="cpu").column(0).to_pylist())
    off = truth.copy()
    off[5] += 2.0**-8 * abs(truth[5])  # one bfloat16 ulp, far beyond a float32 tolerance
    table = rollaudit.make_table(reward=rewards, prompt=prompts, trajectory=list(range(8)), recorded_advantage=off)
    detection = rollaudit.detect_scheme(table, schemes=["agl-rollout", "verl-grpo"], device="cpu")
    fit = detection.fit_of("agl-rollout")
    assert fit.allowed_error == pytest.approx(2 * 2.0**-7 * detection.scale)
    assert detection.allowed_for(fit) == fit.allowed_error > detection.allowed_error
    assert fit.share_within_tolerance == 1.0 and detection.best_match == "agl-rollout"
