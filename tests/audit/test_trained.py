"""What the run trained with, what to change, and what the dump cannot support: the report's first answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pytest

import rollaudit
from rollaudit._audit.advice import ADVICE, advice_for
from rollaudit._cli import app
from rollaudit._errors import NotAuditable, SchemeError
from rollaudit._table import with_facts, with_trained_default

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def step_rewards_table(**facts):
    """Two prompts of two trajectories each, prompt 0 solved by none; trajectory 3 carries a reward per step."""
    table = rollaudit.make_table(
        reward=[0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0],
        prompt=[0, 0, 0, 0, 1, 1, 1, 1],
        trajectory=[1, 1, 2, 2, 3, 3, 4, 4],
    )
    return with_facts(table, **facts) if facts else table


def seed_table():
    """A prompt nobody solved next to one solved by half its samples, 7 samples for 2 prompts of n=4: legacy slime
    centres the whole batch and invents signal."""
    return rollaudit.make_table(
        reward=[0, 0, 0, 1, 1, 0, 0],
        prompt=[0, 0, 0, 1, 1, 1, 1],
        trajectory=[0, 1, 2, 3, 4, 5, 6],
    )


# ---------------------------------------------------------------------------------------------------------------------
# Not auditable.


def test_trajectory_with_per_step_rewards_is_not_auditable_until_a_representative_is_named():
    table = step_rewards_table()
    with pytest.raises(NotAuditable, match="1 of 4 trajectories have rows with different rewards"):
        rollaudit.recompute(table, ["trajectory"])
    report = rollaudit.audit(table)
    assert "trajectory" in report.not_auditable and "representative=" in report.not_auditable["trajectory"]
    assert list(report.summary.index) == ["batch", "prompt"]
    assert report.schemes == ["batch", "prompt"]
    assert not any(column.endswith(":trajectory") for column in report.per_prompt.columns)
    assert "trajectory" not in set(report.per_step.index.get_level_values("scheme"))
    document = report.to_dict()
    assert "trajectory" not in document["summary"] and document["not_auditable"] == report.not_auditable
    # Naming the representative makes it a choice the user made: audited.
    named = rollaudit.audit(table, ["trajectory(representative=last)"])
    assert "trajectory(representative=last)" in named.summary.index and not named.not_auditable


def test_trajectory_whose_rows_agree_is_audited_as_the_first_representative():
    table = seed_table()
    assert (
        rollaudit.recompute(table, ["trajectory"]).column(0).to_pylist()
        == rollaudit.recompute(table, ["trajectory(representative=first)"]).column(0).to_pylist()
    )


def test_no_trajectory_key_means_no_trajectory_count_histogram_or_scheme():
    table = rollaudit.make_table(reward=[0, 1, 0, 0], prompt=[0, 0, 1, 1])
    report = rollaudit.audit(table)
    assert report.info["trajectories"] is None
    assert set(report.histograms) == {"samples_per_prompt"}
    assert "trajectories" not in report.per_prompt.columns and "trajectories" not in report.step_groups.columns
    assert report.not_auditable["trajectory"].startswith("no sample has a trajectory key")
    # The loader's own words, where it knows why.
    why = "AReaL dumps carry no attempt id"
    assert rollaudit.audit(with_facts(table, no_trajectory=why)).not_auditable == {"trajectory": why}
    assert rollaudit.describe(table)["trajectories"] is None


def test_a_scheme_needing_a_missing_field_is_listed_and_the_rest_goes_on():
    report = rollaudit.audit(seed_table(), ["verl-grpo-v1", "verl-rpp-baseline"])
    assert "verl-grpo-v1" in report.summary.index
    assert "response length" in report.not_auditable["verl-rpp-baseline"]


def test_a_reference_the_dump_cannot_support_is_an_error():
    with pytest.raises(SchemeError, match="the reference trajectory cannot be audited"):
        rollaudit.audit(step_rewards_table(), reference="trajectory")


# ---------------------------------------------------------------------------------------------------------------------
# trained_with: recorded > given > framework default > unknown.


def test_recorded_advantages_name_the_scheme_and_outrank_a_given_one():
    table = seed_table()
    recorded = rollaudit.recompute(table, ["batch"]).column(0)
    table = table.set_column(table.schema.get_field_index("recorded_advantage"), "recorded_advantage", recorded)
    report = rollaudit.audit(table, trained_with="prompt")
    trained = report.trained_with
    assert (trained.scheme, trained.evidence, trained.row) == ("batch", "recorded", "recorded")
    assert "outrank" in trained.why and "prompt" in trained.why
    assert report.trained_row == "recorded"
    assert report.to_dict()["trained_with"]["evidence"] == "recorded"


def test_recorded_advantages_that_match_nothing_are_the_run_s_own_row():
    table = seed_table()
    weird = pa.array([5.0, -3.0, 2.0, 0.5, 1.0, -7.0, 0.0])
    table = table.set_column(table.schema.get_field_index("recorded_advantage"), "recorded_advantage", weird)
    report = rollaudit.audit(table)
    assert (report.trained_with.scheme, report.trained_with.evidence) == (None, "recorded")
    assert report.trained_row == "recorded"
    assert "match no preset" in report.trained_with.why
    assert any("no setting can be named" in line for line in report.advice)


def test_the_framework_default_is_an_assumption_audited_in_its_own_row():
    why = "verl V1 trainer with algorithm.adv_estimator=grpo"
    report = rollaudit.audit(with_trained_default(seed_table(), "verl-grpo-v1", why))
    trained = report.trained_with
    assert (trained.scheme, trained.evidence, trained.row) == ("verl-grpo-v1", "framework default", "verl-grpo-v1")
    assert trained.why == why
    assert "verl-grpo-v1" in report.summary.index
    given = rollaudit.audit(with_trained_default(seed_table(), "verl-grpo-v1", why), trained_with="batch")
    assert (given.trained_with.scheme, given.trained_with.evidence) == ("batch", "given")
    assert "default would be verl-grpo-v1" in given.trained_with.why


def test_unknown_is_said_plainly_and_a_loader_may_say_why():
    plain = rollaudit.audit(seed_table())
    assert (plain.trained_with.scheme, plain.trained_with.evidence, plain.trained_row) == (None, "unknown", None)
    assert "--trained-with" in plain.trained_with.why and plain.advice == []
    slime = rollaudit.audit(with_trained_default(seed_table(), None, "slime's default depends on its version"))
    assert slime.trained_with.why.startswith("slime's default depends on its version")


def test_a_default_the_dump_cannot_support_is_named_and_not_audited():
    table = with_trained_default(step_rewards_table(), "trajectory", "a default over trajectories")
    report = rollaudit.audit(table)
    assert (report.trained_with.scheme, report.trained_with.row) == ("trajectory", None)
    assert "trajectory" in report.not_auditable


# ---------------------------------------------------------------------------------------------------------------------
# Advice.


def test_advice_only_where_the_run_s_scheme_differs_from_the_reference():
    differs = rollaudit.audit(seed_table(), trained_with="slime-legacy(n=4)")
    assert differs.summary.loc["slime-legacy(n=4)", "sign_flip_rate"] > 0
    assert any("PR #2204" in line and "source:" in line for line in differs.advice)
    same = rollaudit.audit(seed_table(), trained_with="verl-grpo")
    assert same.summary.loc["verl-grpo", "sign_flip_rate"] == 0 and same.advice == []


def test_advice_for_a_generic_scheme_follows_the_framework_that_wrote_the_dump():
    assert advice_for("batch", "prompt", formats=["slime"])[0].startswith("slime: apply PR #2204")
    assert advice_for("batch", "prompt", formats=["roll"])[0].startswith("rollaudit knows no setting")
    report = rollaudit.audit(rollaudit.load(SAMPLES / "dump_details", cache=False))
    assert report.trained_with.scheme == "batch" and "PR #2204" in report.advice[0]


def test_rounding_residues_of_the_run_s_own_arithmetic_are_named():
    report = rollaudit.audit(rollaudit.load(SAMPLES / "nemo_rl", cache=False))
    assert report.trained_with.scheme == "nemo-loo"
    table = rollaudit.make_table(
        reward=[0.3] * 8 + [0.0, 1.0] * 4,
        prompt=[0] * 8 + [1] * 8,
    )
    # Eight 0.3s: NeMo-RL's float32 moments leave a std of ~1e-4 on each, so |A| = 3.2e-4 where exact is 0.
    report = rollaudit.audit(table, trained_with="nemo-loo")
    residues = report.info["rounding_residues"]
    assert (residues["samples"], residues["in_constant_groups"], residues["dtype"]) == (8, 8, "float32")
    assert residues["largest"] == pytest.approx(3.1626e-4, rel=1e-4) and "PR #4158" in residues["fix"]
    assert rollaudit.audit(table, trained_with="nemo-loo(dtype=float64)").info.get("rounding_residues") is None
    from rollaudit._render.text import rounding_line

    assert rounding_line(report) == (
        "8 samples in constant-reward groups got |A| up to 3.2e-04 from float32 rounding in nemo-loo, where exact "
        "arithmetic gives 0 (the defect NeMo-RL PR #4158 fixes)"
    )


def test_every_advice_entry_names_a_preset_and_a_source():
    for entry in ADVICE:
        assert entry.preset in rollaudit.PRESETS, entry
        assert entry.reference in ("prompt", "trajectory", "*") and entry.source
    assert advice_for("batch", "prompt") == [
        "rollaudit knows no setting that turns batch into prompt: check the framework's advantage options"
    ]


# ---------------------------------------------------------------------------------------------------------------------
# As a user sees it.


def test_the_verdict_leads_with_the_run_s_scheme_in_every_format(tmp_path):
    from typer.testing import CliRunner

    dump = tmp_path / "run.parquet"
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table(
            {
                "reward": [0.0, 0, 0, 1, 1, 0, 0],
                "prompt": [0, 0, 0, 1, 1, 1, 1],
                "trajectory": list(range(7)),
            }
        ),
        dump,
    )
    runner = CliRunner()
    result = runner.invoke(app, ["compare", str(dump), "--trained-with", "slime-legacy(n=4)"])
    assert result.exit_code == 0, result.output
    verdict = result.output[result.output.index("Verdict") :]
    assert verdict.startswith("Verdict: trained with slime-legacy(n=4) (as given). Against prompt:\nnamed with")
    assert "slime-legacy(n=4) (trained):" in verdict and "What to change:" in verdict
    markdown = runner.invoke(app, ["compare", str(dump), "--trained-with", "slime-legacy(n=4)", "--markdown"])
    assert "**Verdict: trained with `slime-legacy(n=4)`" in markdown.output and "**What to change**" in markdown.output
    document = json.loads(runner.invoke(app, ["compare", str(dump), "--json"]).output)
    why = document["trained_with"]["why"]
    assert document["trained_with"] == {
        "scheme": None,
        "evidence": "unknown",
        "why": why,
        "row": None,
        "parts": [{"steps": [0, 0], "where": None, "scheme": None, "evidence": "unknown", "why": why, "samples": 7}],
    }
    assert document["advice"] == [] and document["not_auditable"] == {}
    bad = runner.invoke(app, ["compare", str(dump), "--trained-with", "nonsense"])
    assert bad.exit_code == 2 and "unknown scheme 'nonsense'" in bad.output


def test_the_gate_checks_the_trainer_with_trained_and_skips_what_it_cannot_measure(tmp_path):
    from rollaudit._gate.config import gate_config
    from rollaudit._gate.evaluate import run_gate

    table = with_trained_default(step_rewards_table(), "prompt", "a test default")
    config = gate_config(
        max_rules=["trained:strict_flip_rate=0", "trajectory:sign_flip_rate=0", "batch:sign_flip_rate=0"]
    )
    result = run_gate(table, config, device="cpu")
    by_name = {rule.name: rule for rule in result.results}
    assert by_name["max trained:strict_flip_rate"].passed and by_name["max trained:strict_flip_rate"].evaluated
    skipped = by_name["max trajectory:sign_flip_rate"]
    assert skipped.passed and not skipped.evaluated and skipped.message.startswith("not evaluated: trajectory")
    assert not by_name["max batch:sign_flip_rate"].passed
    assert "what batch would do to this data" in by_name["max batch:sign_flip_rate"].message
    assert result.summary_line() == (
        "gate failed: 1 of 3 rules (max batch:sign_flip_rate); 1 not evaluated (max trajectory:sign_flip_rate)"
    )
    unknown = run_gate(step_rewards_table(), gate_config(max_rules=["trained:strict_flip_rate=0"]), device="cpu")
    assert unknown.passed and not unknown.results[0].evaluated
    assert "the run's own scheme is unknown" in unknown.results[0].message
    given = run_gate(
        step_rewards_table(),
        gate_config(max_rules=["trained:spurious_nonzero=0"], trained_with="batch"),
        device="cpu",
    )
    assert not given.passed and given.results[0].measured == 4


def test_gate_trained_with_comes_from_the_config_file(tmp_path):
    from rollaudit._gate.config import load_gate_config

    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.rollaudit.gate]\ntrained_with = "verl-grpo"\nmax = ["trained:sign_flip_rate=0"]\n')
    assert load_gate_config(config).trained_with == "verl-grpo"
    config.write_text('[tool.rollaudit.gate]\ntrained_with = "nope"\n')
    with pytest.raises(rollaudit.UsageError, match="trained_with"):
        load_gate_config(config)


def test_rates_stay_finite_in_the_json_of_a_not_auditable_report():
    document = rollaudit.audit(step_rewards_table()).to_dict()
    text = json.dumps(document, allow_nan=False)
    assert math.isfinite(json.loads(text)["summary"]["batch"]["sign_flip_rate"])
