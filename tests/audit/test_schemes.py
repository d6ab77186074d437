"""Worked vectors of shared/spec/schemes.md (abs 1e-5), presets and scheme strings."""

from __future__ import annotations

import math

import pytest

import rollaudit
from rollaudit import SchemeError, get_scheme

SPEC_REWARDS = [0, 1, 2, 3, 5, 5, 5, 10, 11, 12, 13]
SPEC_PROMPTS = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2]


def advantages(reward, prompt, scheme, **columns):
    table = rollaudit.make_table(reward=reward, prompt=prompt, **columns)
    return rollaudit.recompute(table, [scheme], device="cpu").column(0).to_pylist()


def test_prompt_without_std_4_3_4():
    assert advantages(SPEC_REWARDS, SPEC_PROMPTS, "prompt(scale=none)") == pytest.approx(
        [-1.5, -0.5, 0.5, 1.5, 0, 0, 0, -1.5, -0.5, 0.5, 1.5], abs=1e-5
    )


def test_batch_without_std_gives_the_fives_a_negative_advantage():
    result = advantages(SPEC_REWARDS, SPEC_PROMPTS, "batch(scale=none)")
    assert result[4:7] == pytest.approx([5 - 67 / 11] * 3, abs=1e-5)
    assert result[4] == pytest.approx(-1.090909, abs=1e-5)


def test_prompt_with_std_and_singletons():
    result = advantages([-1, 4, 0, 7, 1, 4], [10, 20, 10, 30, 10, 20], "prompt")
    assert result == pytest.approx([-1, 0, 0, 0, 1, 0], abs=1e-5)


def test_missing_keys_fall_back_to_slices_of_n():
    assert advantages([1, 3, 10, 10], None, "prompt(n=2, scale=none)") == pytest.approx([-1, 1, 0, 0], abs=1e-5)
    assert advantages([1, 3, 10, 10], None, "prompt(n=2)") == pytest.approx([-0.7071063, 0.7071063, 0, 0], abs=1e-5)


def test_uneven_and_unidentified_is_an_error():
    with pytest.raises(SchemeError, match="prompt keys are required when groups are not uniformly sized"):
        advantages([1, 2, 3], None, "prompt(n=2)")


def test_some_keys_missing_names_the_position():
    with pytest.raises(SchemeError, match="position 1"):
        advantages([0.0, 0.5], [0, None], "prompt")


def test_two_plus_one():
    assert advantages([1, 3, 5], [0, 0, 1], "prompt") == pytest.approx([-0.7071063, 0.7071063, 0], abs=1e-5)


def test_singleton_raw_keeps_the_reward():
    assert advantages([1, 3, 5], [0, 0, 1], "verl-grpo")[2] == pytest.approx(5 / (1 + 1e-6))
    assert advantages([1, 3, 5], [0, 0, 1], "prompt(scale=none, singleton=raw)")[2] == 5


def test_slime_legacy_nan_on_one_sample_rows():
    # n=1 and one sample per prompt: N == n * B, so slices of one sample: NaN in slime itself.
    result = advantages([1.0, 2.0], [0, 1], "slime-legacy(n=1)")
    assert all(math.isnan(value) for value in result)


def test_slime_legacy_batch_wide_when_count_does_not_fit():
    legacy = advantages(SPEC_REWARDS, SPEC_PROMPTS, "slime-legacy(n=4)")
    batch = advantages(SPEC_REWARDS, SPEC_PROMPTS, "batch")
    assert legacy == pytest.approx(batch, abs=1e-12)
    uniform = advantages([0, 1, 1, 1], [0, 0, 1, 1], "slime-legacy(n=2)")
    assert uniform == pytest.approx(advantages([0, 1, 1, 1], [0, 0, 1, 1], "prompt"), abs=1e-12)


def test_verl_rloo_is_leave_one_out():
    assert advantages([1, 0, 0, 5], [0, 0, 0, 1], "verl-rloo") == pytest.approx([1, -0.5, -0.5, 5])


def test_nemo_loo_divides_only_where_std_is_positive():
    # NeMo-RL divides by (leave-one-out std + 1e-6) where that std is positive (corpus nemo_rl/README.md); the
    # middle sample's others are equal: std 0, left unscaled.
    result = advantages([1, 0, 1], [0, 0, 0], "nemo-loo(dtype=float64)")
    assert result == pytest.approx([0.5 / (math.sqrt(0.5) + 1e-6), -1.0, 0.5 / (math.sqrt(0.5) + 1e-6)], rel=1e-12)
    # The preset is the run's float32 arithmetic: the same values to float32 precision.
    assert advantages([1, 0, 1], [0, 0, 0], "nemo-loo") == pytest.approx(result, rel=1e-6)


def test_nemo_presets_compute_in_float32_from_moments():
    for name in ("nemo-loo", "nemo-grpo"):
        scheme = rollaudit.get_scheme(name)
        assert (scheme.dtype, scheme.std_from) == ("float32", "moments")
        assert rollaudit.get_scheme(f"{name}(dtype=float64)").dtype == "float64"
    assert rollaudit.get_scheme("nemo-loo(std_from=deviations)").std_from == "deviations"
    with pytest.raises(SchemeError, match="std_from=moments"):
        rollaudit.get_scheme("prompt(std_from=moments, std_over=batch)")
    with pytest.raises(SchemeError, match="std_from"):
        rollaudit.get_scheme("prompt(std_from=squares)")


def test_rounding_fix_is_data_carried_by_the_preset():
    from rollaudit._audit.presets import rounding_fix

    assert rounding_fix(rollaudit.get_scheme("nemo-loo(n=8)")) == "the defect NeMo-RL PR #4158 fixes"
    assert rounding_fix(rollaudit.get_scheme("prompt(dtype=float32)")) is None
    assert {name for name, preset in rollaudit.PRESETS.items() if preset.notes.rounding_fix} == {
        "nemo-loo",
        "nemo-grpo",
    }


def test_every_preset_carries_its_notes_through_parameters():
    for name, preset in rollaudit.PRESETS.items():
        assert preset.notes is not None and preset.notes.description and preset.notes.source, name
        assert (preset.notes.undefined is not None) == (preset.singleton == "nan"), name
    parsed = rollaudit.get_scheme("rllm-grpo(eps=1e-4)")
    assert parsed.notes is rollaudit.PRESETS["rllm-grpo"].notes
    assert parsed == rollaudit.PRESETS["rllm-grpo"].with_options(eps=1e-4)  # notes take no part in equality


def test_trl_group_leaves_nan_rewards_out_and_gives_them_zero():
    result = advantages([1, 0, math.nan, 1], None, "trl-group(n=2)")
    assert result[2] == 0.0 and result[3] == 0.0
    assert result[0] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-4))


def test_trajectory_counts_each_trajectory_once():
    # Prompt 0: trajectory 5 has three samples of reward 1, trajectory 6 one of reward 0.
    result = advantages([1, 1, 1, 0], [0, 0, 0, 0], "trajectory(scale=none)", trajectory=[5, 5, 5, 6])
    assert result == pytest.approx([0.5, 0.5, 0.5, -0.5])
    assert advantages([1, 1, 1, 0], [0, 0, 0, 0], "prompt(scale=none)") == pytest.approx([0.25, 0.25, 0.25, -0.75])


def test_trajectory_representatives():
    reward, prompt, trajectory = [0, 1, 1, 3], [0, 0, 0, 0], [1, 1, 2, 2]
    # Rows of one trajectory with different rewards: which one counts is a choice to name.
    with pytest.raises(rollaudit.SchemeError, match="name it: trajectory"):
        advantages(reward, prompt, "trajectory(scale=none)", trajectory=trajectory)
    first = advantages(reward, prompt, "trajectory(scale=none, representative=first)", trajectory=trajectory)
    best = advantages(reward, prompt, "trajectory(scale=none, representative=max)", trajectory=trajectory)
    mean = advantages(reward, prompt, "trajectory(scale=none, representative=mean)", trajectory=trajectory)
    assert first == pytest.approx([-0.5, -0.5, 0.5, 0.5])
    assert best == pytest.approx([-1, -1, 1, 1])
    assert mean == pytest.approx([-0.75, -0.75, 0.75, 0.75])


@pytest.mark.parametrize("name", sorted(rollaudit.PRESETS))
def test_every_preset_parses_with_n(name):
    scheme = get_scheme(f"{name}(n=2)")
    assert scheme.name == f"{name}(n=2)" and scheme.n == 2


def test_scheme_strings():
    scheme = get_scheme("prompt(scale=none, singleton=raw, eps=1e-4)")
    assert (scheme.scale, scheme.singleton, scheme.eps) == ("none", "raw", 1e-4)
    assert get_scheme("agl-dedup") == rollaudit.Scheme(groups="prompt", members="trajectories", singleton="raw")
    assert rollaudit.split_schemes("batch, prompt(n=8, scale=none),trajectory") == [
        "batch",
        "prompt(n=8, scale=none)",
        "trajectory",
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("nope", "unknown scheme 'nope'"),
        ("prompt(scale=sometimes)", "scale='sometimes' is not one of std, none"),
        ("prompt(colour=red)", "unknown key 'colour'"),
        ("prompt(n=zero)", "n='zero' must be a positive integer"),
        ("prompt(n=0)", "n=0 must be a positive integer"),
        ("prompt(eps=-1)", "eps=-1.0 must be a number >= 0"),
        ("trl-group", "needs n"),
        ("prompt(scale)", "is not key=value"),
        ("prompt(", "cannot parse"),
    ],
)
def test_bad_scheme_strings_say_what_is_wrong(text, message):
    with pytest.raises(SchemeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_scheme(text)


def test_custom_scheme_object():
    scheme = rollaudit.Scheme(groups="prompt", scale="none", singleton="raw")
    table = rollaudit.make_table(reward=[1.0, 3.0, 5.0], prompt=[0, 0, 1])
    assert rollaudit.recompute(table, [scheme]).column(0).to_pylist() == [-1.0, 1.0, 5.0]


def test_positional_slices_must_fit():
    with pytest.raises(SchemeError, match="not a multiple of n=2"):
        advantages([1, 2, 3], [0, 0, 0], "positional(n=2)")


def test_schemes_command_lists_every_preset():
    # `rollaudit schemes` is the user's index of presets, printed from PRESETS itself.
    import json

    from typer.testing import CliRunner

    from rollaudit._cli import app

    result = CliRunner().invoke(app, ["schemes", "--json"], catch_exceptions=False)
    assert result.exit_code == 0
    listed = [entry["name"] for entry in json.loads(result.stdout)]
    assert listed == sorted(rollaudit.PRESETS, key=str.casefold)
