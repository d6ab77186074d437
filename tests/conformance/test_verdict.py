"""What each framework's own dumps say the run trained with, what they cannot support, and the commands a user
runs on them: the verdict on every conformance set."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import rollaudit

from .conftest import corpus

AREAL_TRIAL = "areal/experiments/logs/rl/gsm8k-agent-grpo/trial0"

# (run directory, load options, scheme, evidence): each run's own scheme, and how the report knows it.
TRAINED = [
    ("slime", {"reward_key": "score"}, "slime-legacy(n=4)", "recorded"),
    ("verl/rollout_data_v0", {}, "verl-grpo", "framework default"),
    ("verl/rollout_data_v1", {}, "verl-grpo-v1", "framework default"),
    (AREAL_TRIAL, {}, "areal-group", "framework default"),
    ("rllm", {}, "rllm-grpo", "framework default"),
    ("nemo_rl/dapo", {}, "nemo-loo", "recorded"),
    ("roll/agentic", {}, "roll-grpo", "framework default"),
]


def audit_of(run: str, **options):
    framework = run.split("/")[0]
    path = corpus(framework).parent / run
    return rollaudit.audit(rollaudit.load(path, cache=False, **options), device="cpu")


@pytest.mark.parametrize(("run", "options", "scheme", "evidence"), TRAINED, ids=[item[0] for item in TRAINED])
def test_every_run_says_what_it_trained_with(run, options, scheme, evidence):
    report = audit_of(run, **options)
    assert (report.trained_with.scheme, report.trained_with.evidence) == (scheme, evidence)
    # One scheme fits the whole run: one part, the run's steps, never split.
    ((part,),) = (report.trained_with.parts,)
    steps = report.info["step_values"]
    assert (part.scheme, part.evidence, part.steps, part.where) == (scheme, evidence, (steps[0], steps[-1]), None)
    expected_row = "recorded" if evidence == "recorded" else scheme
    assert report.trained_row == expected_row
    from rollaudit._render.text import verdict_title

    assert verdict_title(report).startswith(f"Verdict: trained with {scheme} (")


@pytest.mark.parametrize(
    ("run", "options", "scheme"),
    [
        ("miles", {}, "miles-grpo"),
        ("open_instruct/rollouts/oi_default_rollouts_000000.jsonl", {}, "oi-centered"),
        ("open_instruct/rollouts/oi_masktrunc_rollouts_000000.jsonl", {}, "oi-centered"),
        ("open_instruct/rollouts/oi_standard_nofilter_rollouts_000000.jsonl", {}, "oi-standard"),
    ],
)
def test_every_recorded_run_one_preset_fits_keeps_one_part(run, options, scheme):
    trained = audit_of(run, **options).trained_with
    assert (trained.scheme, trained.evidence, len(trained.parts), trained.parts[0].scheme) == (
        scheme,
        "recorded",
        1,
        scheme,
    )


def test_nemo_rl_grpo_matches_nemo_loo_with_truncated_prompts_as_their_own_groups():
    """The 16 rows of prompts the data processor truncated are their own groups upstream (NeMo-RL's key is the
    padded prompt tokens): nemo-loo reproduces every recorded advantage, the reference still groups by the prompt."""
    report = audit_of("nemo_rl/grpo")
    assert (report.trained_with.scheme, report.trained_with.evidence) == ("nemo-loo", "recorded")
    assert report.detection.beyond_tolerance(report.detection.fit_of("nemo-loo")) == 0


def test_nemo_rl_float32_residues_are_reproduced_and_named():
    report = audit_of("nemo_rl/dapo")
    fit = report.detection.fit_of("nemo-loo")
    assert fit.max_error < 1e-6
    residues = report.info["rounding_residues"]
    assert (residues["samples"], residues["in_constant_groups"]) == (8, 8)
    assert residues["largest"] == pytest.approx(3.16e-4, rel=1e-2) and "PR #4158" in residues["fix"]


def test_roll_trajectory_needs_a_named_representative():
    report = audit_of("roll/agentic")
    assert "52 of 112 trajectories have rows with different rewards" in report.not_auditable["trajectory"]
    assert "trajectory" not in report.summary.index
    named = rollaudit.audit(
        rollaudit.load(corpus("roll") / "agentic", cache=False), ["trajectory(representative=last)"], device="cpu"
    )
    assert "trajectory(representative=last)" in named.summary.index and not named.not_auditable


def test_areal_has_no_trajectories_to_count():
    report = audit_of(AREAL_TRIAL)
    assert report.info["trajectories"] is None
    assert "attempt id" in report.not_auditable["trajectory"]
    assert set(report.histograms) == {"samples_per_prompt"}
    assert "trajectories" not in report.per_prompt.columns


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rollaudit", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_a_scheme_the_dump_cannot_support_is_listed_and_the_command_goes_on():
    run = str(corpus("verl") / "rollout_data_v1")
    result = cli("compare", run, "-s", "verl-grpo-v1,verl-rpp-baseline", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert "verl-grpo-v1" in document["summary"] and "verl-rpp-baseline" not in document["summary"]
    assert document["not_auditable"]["verl-rpp-baseline"].startswith("whitening by tokens needs the response length")


def test_gate_on_a_stock_nemo_rl_run_passes_the_preset_it_used():
    result = cli("gate", str(corpus("nemo_rl") / "dapo"), "--expect-recorded", "nemo-loo")
    assert result.returncode == 0, result.stdout + result.stderr


def test_runs_in_one_directory_are_never_merged():
    result = cli("compare", str(corpus("verl")))
    assert result.returncode == 0, result.stderr
    assert "Run rollout_data_v0 (1 of 2 runs)" in result.stdout and "Run rollout_data_v1 (2 of 2 runs)" in result.stdout
    result = cli("convert", str(corpus("verl")), "-o", "never-written.csv")
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "\n" not in line and "rollout_data_v0 (verl" in line and "rollout_data_v1 (verl" in line


def test_options_a_format_does_not_read_are_refused():
    result = cli("compare", str(corpus("roll") / "agentic"), "--prompt-col", "nope")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: --prompt-col is not read by roll dumps")
