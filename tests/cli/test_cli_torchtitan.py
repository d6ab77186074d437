"""The rollaudit command on torchtitan's dumps (the bundled samples, the corpus) and on SkyRL's, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import rollaudit
from rollaudit._cli import app
from rollaudit._loaders.formats import torchtitan
from tests.conformance.conftest import corpus
from tests.loaders.test_skyrl import CURRENT, write_dump

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "sample_dumps" / "torchtitan"
WHOLE = ROOT / "sample_dumps" / "torchtitan_whole"


def run(*args: object):
    return CliRunner(env={"COLUMNS": "120"}).invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def test_compare_the_resumed_sample_names_segments_and_validation_lines():
    result = run("compare", DEFAULT, "--no-cache")
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "(torchtitan," in out
    assert "15 training groups, 30 training rows (a rollout each)" in out
    assert "12 validation lines left out" in out and "2 segments (process lifetimes)" in out
    assert "note: the file holds 2 segments" in out


def test_compare_json_on_the_whole_group_sample_and_the_corpus():
    report = json.loads(run("compare", WHOLE, "--json", "--no-cache").stdout)
    assert report["load"]["format"] == "torchtitan"
    # 32 rows of 8 groups, 2 of them not trained (constant, untrainable): left out of every scheme and rate.
    assert report["info"]["samples"] == 24 and report["info"]["prompts"] == 6
    assert report["trained_with"]["scheme"] == "torchtitan-drgrpo" and report["info"]["partial_groups"]["whole"]
    found = report["load"]["found"][torchtitan.LABEL] if "found" in report["load"] else None
    table = rollaudit.load(WHOLE)
    assert found is None or found == rollaudit._table.found_in(table)[torchtitan.LABEL]
    run_directory = corpus("torchtitan") / "drgrpo_default"
    done = subprocess.run(
        [sys.executable, "-m", "rollaudit", "compare", str(run_directory), "--no-cache", "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "25 training groups, 50 training rows (a rollout each)" in text
    assert "6 validation lines left out" in text


def test_inspect_json_counts_the_sample():
    document = json.loads(run("inspect", DEFAULT, "--json").stdout)
    assert document["samples"] == 30 and document["prompts"] == 15 and document["trajectories"] == 30
    assert document["load"]["format"] == "torchtitan"
    assert document["recorded_advantages"] == 30
    fields = {field["name"] for field in document["fields"]}
    assert {"segment", "group_id", "rollout_id", "not_trained", "line"} <= fields


def test_formats_lists_torchtitan_and_skyrl():
    entries = {entry["name"]: entry for entry in json.loads(run("formats", "--json").stdout)}
    assert entries["torchtitan"]["trained_with"] == [{"scheme": "torchtitan-drgrpo", "why": torchtitan.DEFAULT[1]}]
    assert entries["torchtitan"]["recorded_advantages"] is True
    assert entries["skyrl"]["recorded_advantages"] is False
    assert "refused" in entries["skyrl"]["reads"]


def test_skyrl_compare_is_exit_2_with_one_line(tmp_path):
    write_dump(tmp_path, 5, CURRENT, "reduce")
    result = run("compare", tmp_path, "--no-cache")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "without rewards and without uids" in line
