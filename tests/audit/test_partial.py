"""A dump that holds part of each group while the recorded advantages cover the whole group (torchtitan's default
recorder): the recorded values' consistency names the run's scheme; nothing recomputed from the dumped rows is
audited unless every group is shown whole."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rollaudit
from rollaudit._audit.trained_with.partial import partial_groups
from rollaudit._cli import app

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_dumps"))
import generate_torchtitan as gen  # noqa: E402


def _run(tmp_path: Path, k: int, std: bool = False, seed: int = 5, size: int = 6) -> Path:
    config = gen.RunConfig(seed=seed, groups=10, group_size=size, should_std_normalize=std, constant_groups=(3,))
    return gen.write_run(tmp_path / "outputs" / "rl", gen.run_events(config), k=k)


@pytest.mark.parametrize(("std", "scheme"), [(False, "torchtitan-drgrpo"), (True, "torchtitan-grpo")])
def test_a_cut_dump_says_what_its_recorded_values_are_consistent_with(tmp_path, std, scheme):
    report = rollaudit.audit(rollaudit.load(_run(tmp_path, k=1, std=std)), device="cpu")
    trained = report.trained_with
    assert (trained.scheme, trained.evidence, trained.row) == (scheme, "recorded", None)
    assert "consistent with it on every one of the 9 groups" in trained.why and "not a reproduction" in trained.why
    # Nothing recomputed from two rows of a group of six is what the run trained on: every scheme not auditable.
    assert report.schemes == [] and report.summary.empty
    assert set(report.not_auditable) >= {"batch", "prompt", "trajectory", scheme}
    assert all("shown to be part of a larger group" in report.not_auditable[name] for name in ("prompt", scheme))
    assert "bound a group's step from below only" in report.not_auditable["batch"]  # no step, only a bound
    assert report.info["partial_groups"]["whole"] is False and report.info["partial_groups"]["partial_groups"] == 9
    assert report.info["not_trained"][0]["groups"] == 1  # the constant group, dropped by drop_zero_std
    # The gate does not pass or fail on what it could not measure.
    result = rollaudit.run_gate(
        rollaudit.load(_run(tmp_path, k=1, std=std)), rollaudit.gate_config(max_rules=["trained:sign_flip_rate=0"])
    )
    (rule,) = result.results
    assert rule.evaluated is False and "not auditable" in rule.message


def test_the_other_estimator_is_not_consistent(tmp_path):
    # Dr.GRPO's r - A is one value per group; under the std option it is not, and the scale fits.
    table = rollaudit.load(_run(tmp_path, k=1, std=True))
    assert partial_groups(table).scheme == "torchtitan-grpo"


@pytest.mark.parametrize("std", [False, True])
def test_whole_groups_are_audited_as_any_dump(tmp_path, std):
    report = rollaudit.audit(rollaudit.load(_run(tmp_path, k=3, std=std)), device="cpu")
    scheme = "torchtitan-grpo" if std else "torchtitan-drgrpo"
    assert report.info["partial_groups"]["whole"] is True
    assert (report.trained_with.scheme, report.trained_with.evidence, report.trained_row) == (
        scheme,
        "recorded",
        "recorded",
    )
    assert report.detection.fit_of(scheme).max_error < 1e-12
    assert {"prompt", "trajectory"} <= set(report.summary.index) and "batch" in report.not_auditable


def test_a_cut_group_whose_extremes_have_the_groups_mean_is_still_shown_cut(tmp_path):
    # Rewards 0, 0, 1, 1: the kept extremes' mean is the group's, so r - A is their own mean; the rollout ids kept
    # (one of 2 or 3) say the group had more siblings than the dump holds.
    rollouts = []
    for group_id, rewards in enumerate(([0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 1.0])):
        mean = sum(rewards) / 4
        kept = sorted(range(4), key=lambda index: rewards[index])
        for rollout_id in (kept[0], kept[-1]):
            rollouts.append(
                {
                    "is_validation": False,
                    "group_id": group_id,
                    "rollout_id": rollout_id,
                    "status": "completed",
                    "reward": rewards[rollout_id],
                    "reward_breakdown": {},
                    "advantage": rewards[rollout_id] - mean,
                    "turns": [],
                }
            )
    rollouts.sort(key=lambda line: (line["group_id"], line["reward"]))
    path = tmp_path / "outputs" / "rl" / gen.FILE_NAME
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in rollouts))
    facts = partial_groups(rollaudit.load(path))
    assert facts.scheme == "torchtitan-drgrpo" and facts.partial_groups == 2 and not facts.whole


def test_compare_on_the_cut_sample_says_it_in_every_output(tmp_path):
    runner = CliRunner()
    sample = ROOT / "sample_dumps" / "torchtitan"
    terminal = runner.invoke(app, ["compare", str(sample), "--no-cache"])
    assert terminal.exit_code == 0, terminal.output
    flat = " ".join(terminal.output.split())
    verdict = "Verdict: trained with torchtitan-drgrpo (consistent with its recorded advantages), which this dump"
    assert f"{verdict} cannot audit." in flat
    assert "- prompt, trajectory, torchtitan-drgrpo: torchtitan's recorder writes only" in flat
    assert "- batch: the dump has no step field: the turns' policy versions bound" in flat
    assert "Advantages against the reference" not in flat  # no metrics table of nothing
    document = json.loads(runner.invoke(app, ["compare", str(sample), "--no-cache", "--json"]).output)
    assert document["trained_with"]["scheme"] == "torchtitan-drgrpo" and document["summary"] == {}
    assert document["info"]["partial_groups"]["whole"] is False
    markdown = runner.invoke(app, ["compare", str(sample), "--no-cache", "--markdown"]).output
    assert "consistent with its recorded advantages" in markdown and "| scheme |" not in markdown
