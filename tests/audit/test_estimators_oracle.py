"""prime-rl's estimators (MaxRL, the length penalty, agent sub-groups, the decayed baseline) against the
plain-Python oracle on random uneven batches over several steps."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rollaudit
from tests.oracle import oracle_prime_advantages

SCHEMES = [
    "prime-maxrl",
    "prime-maxrl(dtype=float64)",
    "prime-grpo-lenpen",
    "prime-grpo-lenpen(dtype=float64)",
    "prime-hierarchical",
    "prime-hierarchical(episode_agents=solver)",
    "prime-hierarchical(episode_agents=main|solver)",
    "prime-rae",
    "prime-rae(decay=0.5)",
    "prime-rae(decay=0.999)",
    "prime-rae(decay=1)",
]
REWARDS = st.sampled_from([-1.0, 0.0, 0.125, 0.25, 1 / 3, 0.5, 0.75, 1.0, 1.375])


@st.composite
def runs(draw):
    rows = []
    for step in draw(st.lists(st.integers(1, 4), min_size=1, max_size=3, unique=True)):
        for group in range(draw(st.integers(1, 4))):
            env = draw(st.sampled_from(["delegate", "proposer-solver"]))
            for episode in range(draw(st.integers(1, 3))):
                for _ in range(draw(st.integers(1, 4))):
                    rows.append(
                        {
                            "step": step,
                            "prompt": f"g{step}-{group}",
                            "trajectory": f"e{step}-{group}-{episode}",
                            "reward": draw(REWARDS),
                            "env": env,
                            "agent": draw(st.sampled_from(["main", "sub", "solver"])),
                            "num_output_tokens": draw(st.integers(0, 60)),
                            "num_input_tokens": draw(st.integers(0, 90)),
                            "num_turns": draw(st.integers(0, 3)),
                        }
                    )
    order = draw(st.permutations(range(len(rows))))
    for rank, index in enumerate(order):
        rows[index]["scoring_order"] = rank
    return draw(st.permutations(rows))


def _table(rows):
    columns = {key: [row[key] for row in rows] for key in rows[0]}
    steps = columns["step"]
    columns["position"] = [sum(1 for earlier in steps[:i] if earlier == step) for i, step in enumerate(steps)]
    return pa.table(columns)


@pytest.mark.parametrize("scheme", SCHEMES)
@settings(max_examples=40, deadline=None)
@given(rows=runs())
def test_estimators_match_the_oracle(scheme, rows):
    actual = rollaudit.recompute(_table(rows), [scheme], device="cpu").column(0).to_numpy()
    expected = np.array(oracle_prime_advantages(rows, rollaudit.get_scheme(scheme)), dtype=np.float64)
    assert np.allclose(actual, expected, rtol=0, atol=1e-9), (scheme, np.abs(actual - expected).max())


def test_long_decayed_sequences_stay_exact():
    # Many blocks of the closed form, and a decay whose blocks are short: the sequential recurrence, row by row.
    rng = np.random.default_rng(3)
    for decay, count in ((0.95, 5000), (0.01, 300), (0.9999, 3000)):
        rewards = rng.choice([0.0, 0.5, 1.0, 2.0], size=count)
        table = pa.table(
            {
                "step": np.ones(count, dtype=np.int64),
                "position": np.arange(count),
                "prompt": np.arange(count) // 4,
                "reward": rewards,
                "env": ["e"] * count,
                "agent": ["a"] * count,
                "scoring_order": np.arange(count),
            }
        )
        actual = rollaudit.recompute(table, [f"prime-rae(decay={decay})"], device="cpu").column(0).to_numpy()
        baseline, expected = 0.0, []
        for reward in rewards:
            expected.append(reward - baseline)
            baseline = decay * baseline + (1 - decay) * reward
        assert np.abs(actual - np.array(expected)).max() <= 1e-12 * max(1.0, math.fabs(max(rewards)))
