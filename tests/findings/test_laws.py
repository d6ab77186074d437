"""The laws every GRPO-family estimator keeps within a true group: the vectorised checker against a plain-Python
oracle on random uneven batches, and every preset keeping the laws it declares on random input (so that no law is
a false alarm under the run's own estimator)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rollaudit
from rollaudit._audit.findings.laws import (
    BOUND,
    CENTRED,
    EQUAL,
    FINITE,
    LAWS,
    ORDER,
    LawsKept,
    broken_laws,
    laws_kept,
    laws_of_parts,
    relative_tolerance,
)
from rollaudit._audit.presets import PRESETS

REWARDS = st.sampled_from([-1.0, 0.0, 0.1, 0.25, 1 / 3, 0.5, 1.0, 2.0, 7.5, math.nan])
ADVANTAGES = st.one_of(st.floats(-5, 5, allow_nan=False), st.sampled_from([0.0, math.nan, math.inf, 1e-7]))


def oracle(rewards, advantages, groups, kept: LawsKept, dtype: str = "float64") -> dict[str, list[bool]]:
    """Each law, row by row, as its definition reads."""
    rows = len(rewards)
    out = {law: [False] * rows for law in kept.laws}
    if FINITE in kept.laws:
        out[FINITE] = [math.isfinite(r) and not math.isfinite(a) for r, a in zip(rewards, advantages, strict=True)]
    members: dict[int, list[int]] = {}
    for i in range(rows):
        if groups[i] >= 0 and math.isfinite(rewards[i]) and math.isfinite(advantages[i]):
            members.setdefault(groups[i], []).append(i)
    relative = relative_tolerance(dtype)
    for rows_of in members.values():
        n = len(rows_of)
        if n < 2:
            continue
        scale = max(1.0, max(abs(advantages[i]) for i in rows_of))
        tolerance = relative * scale
        for i in rows_of:
            for j in rows_of:
                if EQUAL in kept.laws and rewards[i] == rewards[j] and abs(advantages[i] - advantages[j]) > tolerance:
                    out[EQUAL][i] = True
                if ORDER in kept.laws and rewards[i] > rewards[j] and advantages[j] - advantages[i] > tolerance:
                    out[ORDER][i] = True
        if BOUND in kept.laws:
            if kept.bound == "range":
                limit = max(rewards[i] for i in rows_of) - min(rewards[i] for i in rows_of)
            elif kept.bound == "unbiased":
                limit = (n - 1) / math.sqrt(n)
            else:
                limit = math.sqrt(n - 1)
            for i in rows_of:
                out[BOUND][i] = abs(advantages[i]) > limit * (1 + relative) + tolerance
        if CENTRED in kept.laws:
            off = abs(math.fsum(advantages[i] for i in rows_of)) > relative * n * scale
            for i in rows_of:
                out[CENTRED][i] = off
    return out


@st.composite
def batches(draw):
    rows = draw(st.integers(1, 40))
    rewards = draw(st.lists(REWARDS, min_size=rows, max_size=rows))
    advantages = draw(st.lists(ADVANTAGES, min_size=rows, max_size=rows))
    groups = draw(st.lists(st.integers(-1, 5), min_size=rows, max_size=rows))
    bound = draw(st.sampled_from(["unbiased", "population", "range"]))
    laws = draw(st.sets(st.sampled_from(LAWS), min_size=1))
    return rewards, advantages, groups, LawsKept(frozenset(laws), bound)


@settings(max_examples=300, deadline=None)
@given(batches())
def test_the_checker_is_the_oracle(batch):
    rewards, advantages, groups, kept = batch
    found = broken_laws(
        torch.tensor(rewards, dtype=torch.float64),
        torch.tensor(advantages, dtype=torch.float64),
        torch.tensor(groups, dtype=torch.int64),
        kept,
    )
    expected = oracle(rewards, advantages, groups, kept)
    assert {law: flags.tolist() for law, flags in found.items()} == expected


def test_a_law_broken_on_purpose_is_found():
    rewards = torch.tensor([0.0, 1.0, 1.0, 2.0, 5.0, 5.0])
    advantages = torch.tensor([-1.0, 0.5, 0.4, 0.2, 0.0, 3.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    found = broken_laws(rewards, advantages, groups, laws_kept(rollaudit.get_scheme("prompt")))
    assert found[EQUAL].tolist() == [False, True, True, False, True, True]
    assert found[ORDER].tolist() == [False, False, False, True, False, False]
    assert found[BOUND].tolist() == [False, False, False, False, False, True]  # (2-1)/sqrt(2) < 3
    assert found[CENTRED].tolist() == [True, True, True, True, True, True]


# Presets with what their arithmetic needs beside rewards and keys: agents, scoring order, lengths.
_NEEDS = {"prime-hierarchical", "prime-rae", "prime-grpo-lenpen", "verl-rpp-baseline", "roll-grpo-tags"}


def _runnable_presets() -> list[str]:
    names = []
    for name, scheme in PRESETS.items():
        if name == "custom" or scheme.groups in ("positional", "legacy") or name in _NEEDS:
            continue
        if scheme.group_by not in ("prompt", "trajectory") or scheme.reward != "reward":
            continue  # grouped by, or trained on, a column of its framework's own (prompt_idx, legacy_reward)
        if scheme.notes is not None and scheme.notes.not_auditable:
            continue
        names.append(name)
    return names


@st.composite
def uneven_runs(draw):
    steps, prompts, trajectories, rewards = [], [], [], []
    trajectory = 0
    for step in range(draw(st.integers(1, 3))):
        for prompt in range(draw(st.integers(1, 5))):
            for _ in range(draw(st.integers(1, 4))):
                trajectory += 1
                reward = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0, 3.0, 10.0]))
                for _ in range(draw(st.integers(1, 3))):
                    steps.append(step)
                    prompts.append(prompt)
                    trajectories.append(trajectory)
                    rewards.append(reward)
    return steps, prompts, trajectories, rewards


@pytest.mark.parametrize("name", _runnable_presets())
@settings(max_examples=60, deadline=None)
@given(run=uneven_runs())
def test_every_preset_keeps_the_laws_it_declares(name, run):
    steps, prompts, trajectories, rewards = run
    table = rollaudit.make_table(reward=rewards, prompt=prompts, trajectory=trajectories, step=steps)
    scheme = rollaudit.get_scheme(name)
    try:
        values = rollaudit.recompute(table, [name]).column(0).to_numpy()
    except rollaudit.SchemeError:
        assume(False)  # the preset cannot run on this batch; one that never runs fails the health check
    groups = np.asarray(steps) * 100 + np.asarray(prompts)
    broken = broken_laws(
        torch.tensor(rewards, dtype=torch.float64),
        torch.from_numpy(values.astype(np.float64)),
        torch.from_numpy(groups.astype(np.int64)),
        laws_kept(scheme),
        scheme.dtype,
    )
    assert {law: int(flags.sum()) for law, flags in broken.items() if bool(flags.any())} == {}


def test_parts_keep_what_all_keep():
    grpo, hierarchical = rollaudit.get_scheme("prime-grpo"), rollaudit.get_scheme("prime-hierarchical")
    assert laws_of_parts([grpo, hierarchical]).laws == laws_kept(hierarchical).laws & laws_kept(grpo).laws
    assert laws_of_parts([grpo, None]).laws == {FINITE, EQUAL, ORDER} & laws_kept(grpo).laws
