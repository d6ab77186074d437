"""Findings as a report carries them: in its JSON, beside the verdict's advice, in the worst prompts, and in
``watch``'s records at the step each first appears."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq

import rollaudit
from tests.findings.reproductions import CASES

SAMPLE = "sample_dumps/dump_details"


def test_the_readme_sample_shows_batch_as_group_with_its_rows_and_fix():
    report = rollaudit.audit(rollaudit.load(SAMPLE))
    (finding,) = report.findings
    assert finding.code == "batch-as-group" and finding.evidence == "recorded"
    assert finding.rows == 24 and finding.groups == 6 and finding.steps == (0,)  # the 24 trained rows
    assert "PR #2204" in finding.what_to_change
    document = report.to_dict()
    assert document["findings"][0]["code"] == "batch-as-group"
    assert document["findings"][0]["examples"][0] == {"step": 0, "prompt": 1, "rows": [4, 5, 6, 7, 8, 9]}


def test_a_run_that_counts_each_trajectory_once_is_never_told_to_change(tmp_path):
    case = CASES["turn-level-bias"]()
    pq.write_table(case.control, tmp_path / "once.parquet")
    pq.write_table(case.defective, tmp_path / "every.parquet")
    once = rollaudit.audit(rollaudit.load(tmp_path / "once.parquet"))
    every = rollaudit.audit(rollaudit.load(tmp_path / "every.parquet"))
    assert once.trained_with.scheme == "trajectory" and once.advice == [] and once.findings == []
    assert [finding.code for finding in every.findings] == ["turn-level-bias"]
    assert every.findings[0].detail["rows_moved"] == every.findings[0].rows


def test_worst_prompts_rank_by_what_the_run_trained_with():
    # Prompt 3's recorded signs are reversed (2 rows); batch, never trained, changes prompt 2's three signs.
    table = rollaudit.make_table(
        reward=[0, 1, 1, 1, 1, 0, 1],
        prompt=[0, 0, 2, 2, 2, 3, 3],
        recorded_advantage=[-0.7071, 0.7071, 0, 0, 0, 0.7071, -0.7071],
    )
    report = rollaudit.audit(table, schemes=["prompt", "batch"])
    assert report.trained_row == "recorded"
    assert report.worst_prompt_table().column("prompt").tolist() == [3]
    assert report.worst_prompts().prompt.tolist() == [3]


def test_watch_names_a_finding_at_the_step_it_first_appears(tmp_path):
    jsonl = tmp_path / "audit.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollaudit",
            "watch",
            "sample_dumps/verl/rollout_data",
            "--until-idle",
            "0",
            "--trained-with",
            "batch",
            "--jsonl",
            str(jsonl),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [record["step"] for record in records] == [1, 2]
    assert records[0]["first_findings"] == ["batch-as-group"]
    assert "first_findings" not in records[1]
    assert [finding["code"] for finding in records[1]["findings"]] == ["batch-as-group"]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("step 1 ") and lines[0].endswith("· first found: batch-as-group")
    assert lines[1].startswith("step 2 ") and "first found" not in lines[1]


def test_a_finding_on_an_assumed_scheme_says_so():
    from rollaudit._audit.findings.finding import Finding
    from rollaudit._render.findings import finding_line

    assumed = Finding(
        "singleton-raw-reward", "2 one-member groups got their reward", 2, 2, (5,), evidence="framework default"
    )
    recorded = Finding("singleton-raw-reward", "2 one-member groups got their reward", 2, 2, (5,))
    assert finding_line(assumed).endswith("(verl #7150) (assumed: under the framework's default scheme)")
    assert finding_line(recorded).endswith("(verl #7150)")


def test_a_shifted_column_names_the_row_each_advantage_belongs_to(tmp_path):
    case = CASES["rows-misaligned/shift-1"]()
    pq.write_table(case.defective, tmp_path / "shifted.parquet")
    (finding,) = rollaudit.audit(rollaudit.load(tmp_path / "shifted.parquet")).findings
    # np.roll by 1: row i + 1 holds row i's advantage, the row 1 earlier.
    assert finding.detail["shift"] == 1 and "belongs to the row 1 earlier" in finding.summary


def test_an_unscaled_advantage_of_a_lone_reward_is_no_blow_up():
    # Dr.GRPO on rewards in the hundreds: row 0's peers share one reward, and r - mean = -75 is what the arithmetic
    # gives (within the group's reward range), not a std of rounding noise.
    table = rollaudit.make_table(
        reward=[0.0, 100.0, 100.0, 100.0, 0.0, 1.0],
        prompt=[0, 0, 0, 0, 1, 1],
        recorded_advantage=[-75.0, 25.0, 25.0, 25.0, -0.5, 0.5],
    )
    report = rollaudit.audit(table)
    assert report.trained_with.scheme == "dr-grpo" and report.findings == []
