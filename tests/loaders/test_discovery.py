"""Directories searched down to their dumps: run roots below experiment folders, files beside dumps that are no
dumps, and two or more runs named, never merged: each audited under its name, or the one ``--run`` names."""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import rollaudit
from rollaudit import InputError, RollauditWarning
from rollaudit._cli import app
from rollaudit._loaders.base import Format
from rollaudit._loaders.registry import FORMATS
from rollaudit._loaders.run import discover
from tests.conformance import conftest as conformance
from tests.conformance.conftest import corpus

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
VERL_SAMPLE = SAMPLES / "verl" / "rollout_data"
AREAL_TRIALS = Path("experiments", "logs", "rl", "gsm8k-agent-grpo")


def run(*args: object):
    return CliRunner(env={"COLUMNS": "120"}).invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def error_line(result) -> str:
    """The command's one error line (exit 2, nothing on stdout)."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and result.stdout == "", result.stderr
    return lines[0]


def load_quietly(*args, **kwargs) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RollauditWarning)
        return rollaudit.load(*args, **kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# The conformance corpus: each framework's folder as it is published (README, expected outputs, run roots).


def test_two_verl_runs_are_named_never_merged(tmp_path: Path):
    for command in (["convert", "-o", tmp_path / "t.csv"], ["compare", "--html", tmp_path / "r.html"]):
        message = error_line(run(*command, corpus("verl")))
        assert "holds 2 runs" in message or "holds 2 runs (rollout_data_v0, rollout_data_v1)" in message
        assert "--run" in message
    message = error_line(run("convert", "-o", tmp_path / "t.csv", corpus("verl")))
    assert "rollout_data_v0 (verl, step 9)" in message and "rollout_data_v1 (verl, steps 5-6)" in message
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InputError, match="holds 2 runs"):
        rollaudit.load(corpus("verl"))
    assert {name: len(files) for name, files in rollaudit.find_runs(corpus("verl")).items()} == {
        "rollout_data_v0": 1,
        "rollout_data_v1": 2,
    }
    assert (
        rollaudit.load(corpus("verl"), run="rollout_data_v1").num_rows
        == rollaudit.load(corpus("verl") / "rollout_data_v1").num_rows
    )


def test_a_folder_of_runs_audits_each_under_its_name(tmp_path: Path):
    result = run("compare", corpus("verl"), "--no-cache")
    assert result.exit_code == 0, result.stderr
    headings = [line for line in result.stdout.splitlines() if line.startswith("Run ")]
    assert headings == ["Run rollout_data_v0 (1 of 2 runs)", "Run rollout_data_v1 (2 of 2 runs)"]
    single = run("compare", corpus("verl") / "rollout_data_v1", "--no-cache", "--json")
    document = __import__("json").loads(run("compare", corpus("verl"), "--no-cache", "--json").stdout)
    assert [entry["load"]["run"] for entry in document["runs"]] == ["rollout_data_v0", "rollout_data_v1"]
    assert document["errors"] == []
    alone = __import__("json").loads(single.stdout)
    assert document["runs"][1]["summary"] == alone["summary"]
    markdown = run("compare", corpus("areal"), "--no-cache", "--markdown").stdout
    assert [line for line in markdown.splitlines() if line.startswith("## Run")] == [
        "## Run trial0 (1 of 2 runs)",
        "## Run trial1-concat-rnorm (2 of 2 runs)",
    ]
    picked = run("compare", corpus("open_instruct"), "--no-cache", "--run", "oi_masktrunc")
    assert picked.exit_code == 0 and "oi_masktrunc_rollouts_000000.jsonl" in picked.stdout
    assert " runs) " not in picked.stdout
    message = error_line(run("compare", corpus("open_instruct"), "--run", "oi_mask"))
    assert "no run named 'oi_mask' (did you mean 'oi_masktrunc'?)" in message
    assert "oi_default, oi_masktrunc, oi_standard_nofilter" in message


def test_a_gate_over_runs_fails_when_any_run_fails():
    rules = ["--max", "trained:sign_flip_rate=0.1", "--no-cache"]
    assert run("gate", corpus("verl"), *rules).exit_code == 0
    failing = run("gate", corpus("nemo_rl"), "--max", "batch:sign_flip_rate=0.2", "--no-cache", "--json")
    assert failing.exit_code == 1
    document = __import__("json").loads(failing.stdout)
    assert document["passed"] is False
    assert [(entry["run"], entry["passed"]) for entry in document["runs"]] == [("dapo", False), ("grpo", True)]
    assert "gate failed on 1 of 2 runs (dapo)" in failing.stderr


def test_a_run_that_cannot_be_read_is_named_and_the_others_audited(tmp_path: Path):
    for name in ("rollout_data_v0", "rollout_data_v1"):
        shutil.copytree(corpus("verl") / name, tmp_path / name)
    (tmp_path / "rollout_data_v0" / "9.jsonl").write_text('{"input": "a", "output": "b"}\n')
    result = run("compare", tmp_path, "--no-cache")
    assert result.exit_code == 2
    assert "Run rollout_data_v1 (2 of 2 runs)" in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: run rollout_data_v0: ")


def test_a_missing_corpus_fails_in_ci_and_skips_elsewhere(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(conformance, "CORPUS", tmp_path / "nowhere")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no conformance corpus"):
        conformance.corpus("verl")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no conformance corpus"):
        conformance.corpus("verl")


def test_one_verl_run_reads():
    result = run("compare", corpus("verl") / "rollout_data_v1")
    assert result.exit_code == 0, result.stderr
    assert sorted(set(load_quietly(corpus("verl") / "rollout_data_v1").column("step").to_pylist())) == [5, 6]


def test_areal_trials_below_experiment_folders_are_found(tmp_path: Path):
    # The corpus holds two trials: each is a run, and both are named.
    message = error_line(run("convert", corpus("areal"), "-o", tmp_path / "t.csv"))
    assert f"under {AREAL_TRIALS}" in message
    assert "trial0 (areal, steps 3-4)" in message and "trial1-concat-rnorm (areal, step 3)" in message
    # One trial below the README, the expected outputs and the experiment folders: read as that run.
    root = tmp_path / "areal"
    (root / AREAL_TRIALS).mkdir(parents=True)
    for name in ("README.md", "expected"):
        (root / name).symlink_to(corpus("areal") / name)
    (root / AREAL_TRIALS / "trial0").symlink_to(corpus("areal") / AREAL_TRIALS / "trial0")
    result = run("compare", root)
    assert result.exit_code == 0, result.stderr
    table = load_quietly(root)
    assert sorted(set(table.column("step").to_pylist())) == [3, 4] and table.num_rows == 453 + 477


def test_the_rllm_run_below_its_logs_folder_reads():
    result = run("compare", corpus("rllm"))
    assert result.exit_code == 0, result.stderr
    assert load_quietly(corpus("rllm")).num_rows == 210 + 208


@pytest.mark.parametrize("folder", ["roll/agentic", "nemo_rl/dapo", "nemo_rl/grpo"])
def test_a_run_directory_with_its_readme_and_expected_files_reads(folder: str):
    framework, name = folder.split("/")
    result = run("compare", corpus(framework) / name)
    assert result.exit_code == 0, result.stderr


def test_two_nemo_rl_runs_are_named():
    message = error_line(run("convert", corpus("nemo_rl"), "-o", "unwritten.csv"))
    assert "dapo (nemo_rl, steps 3-4)" in message and "grpo (nemo_rl, steps 3-4)" in message
    assert not Path("unwritten.csv").exists()


def test_a_parent_of_runs_never_says_it_holds_no_dumps():
    for framework in ("verl", "areal", "nemo_rl"):
        message = error_line(run("convert", corpus(framework), "-o", "unwritten.csv"))
        assert "no dump files" not in message and "runs" in message


def test_a_real_process_audits_both_verl_runs():
    result = subprocess.run(
        [sys.executable, "-m", "rollaudit", "compare", str(corpus("verl")), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    headings = [line for line in result.stdout.splitlines() if line.startswith("Run ")]
    assert headings == ["Run rollout_data_v0 (1 of 2 runs)", "Run rollout_data_v1 (2 of 2 runs)"]


# ---------------------------------------------------------------------------------------------------------------------
# Files that are no dumps, and errors that stay one short line.


def test_readme_expected_outputs_and_configs_beside_dumps_are_skipped(tmp_path: Path):
    for step in VERL_SAMPLE.iterdir():
        shutil.copyfile(step, tmp_path / step.name)
    (tmp_path / "README.md").write_text("# a run\n")
    pq.write_table(pa.table({"reward": [1.0]}), tmp_path / "expected_1.parquet")
    (tmp_path / "expected").mkdir()
    pq.write_table(pa.table({"reward": [1.0]}), tmp_path / "expected" / "step_1.parquet")
    (tmp_path / "config.json").write_text('{\n  "lr": 1e-6\n}\n')
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 4096}\n')
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    (tmp_path / "train.yaml").write_text("lr: 1e-6\n")
    assert [path.name for path in rollaudit.expand_paths(tmp_path)] == ["1.jsonl", "2.jsonl"]
    assert load_quietly(tmp_path).equals(load_quietly(VERL_SAMPLE))
    assert run("compare", tmp_path).exit_code == 0


def test_a_file_named_twice_is_read_once_however_it_is_spelled(tmp_path: Path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    for step in VERL_SAMPLE.iterdir():
        shutil.copyfile(step, run / step.name)
    (tmp_path / "linked_run").symlink_to(run, target_is_directory=True)
    (tmp_path / "linked_step.jsonl").symlink_to(run / "2.jsonl")
    monkeypatch.chdir(tmp_path)
    spellings = [
        "run/1.jsonl",
        run / "2.jsonl",
        tmp_path / "linked_run" / "1.jsonl",  # through a linked folder
        "linked_step.jsonl",  # a linked file
        "run/../run/2.jsonl",
        "linked_run",
        run,
    ]
    assert rollaudit.expand_paths(spellings) == [Path("run/1.jsonl"), run / "2.jsonl"]  # each as first given


def test_generic_tables_beside_side_files_read(tmp_path: Path):
    shutil.copyfile(SAMPLES / "generic" / "rollouts.csv", tmp_path / "rollouts.csv")
    (tmp_path / "README").write_text("notes\n")
    (tmp_path / "generation_config.json").write_text('{"temperature": 1.0}\n')
    pq.write_table(pa.table({"reward": [1.0]}), tmp_path / "expected.parquet")
    assert [path.name for path in rollaudit.expand_paths(tmp_path)] == ["rollouts.csv"]


def test_not_a_dump_is_one_short_line(monkeypatch):
    monkeypatch.chdir(ROOT)
    message = error_line(run("compare", "README.md"))
    assert message.startswith("error: README.md: not a dump rollaudit reads") and len(message) < 200
    assert not any(entry.description in message for entry in FORMATS.values())


def test_an_empty_directory_says_so_in_one_short_line(tmp_path: Path):
    (tmp_path / "README.md").write_text("# nothing here yet\n")
    message = error_line(run("compare", tmp_path))
    assert "holds no dump files" in message and len(message) - len(str(tmp_path)) < 200


def test_two_frameworks_given_together_are_refused():
    message = error_line(run("compare", SAMPLES / "uniform.pt", SAMPLES / "generic" / "rollouts.csv"))
    assert "2 formats given together" in message and "slime (" in message and "generic (" in message
    message = error_line(run("compare", SAMPLES / "fanout", VERL_SAMPLE))
    assert "slime (" in message and "verl (" in message
    # Several paths of one framework still make one report.
    assert run("compare", SAMPLES / "fanout", SAMPLES / "uniform.pt").exit_code == 0


def test_dumps_of_two_frameworks_in_one_folder_are_two_runs(tmp_path: Path):
    shutil.copyfile(SAMPLES / "uniform.pt", tmp_path / "5.pt")
    shutil.copyfile(VERL_SAMPLE / "1.jsonl", tmp_path / "1.jsonl")
    message = error_line(run("convert", tmp_path, "-o", tmp_path / "t.csv"))
    assert ". (slime, step 5)" in message and ". (verl, step 1)" in message
    assert list(rollaudit.find_runs(tmp_path)) == ["slime", "verl"]
    assert run("compare", tmp_path, "--run", "verl", "--no-cache").exit_code == 0


# ---------------------------------------------------------------------------------------------------------------------
# The walk: symbolic links, depth, hidden folders, and how a format declares its run roots.


def test_links_are_followed_once_and_a_loop_ends(tmp_path: Path):
    run_root = tmp_path / "runs" / "a"
    shutil.copytree(VERL_SAMPLE, run_root)
    (tmp_path / "runs" / "loop").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "runs" / "again").symlink_to(run_root, target_is_directory=True)
    runs = discover.find_runs(tmp_path)
    assert [(run.root.name, run.format) for run in runs] == [("a", "verl")]
    assert load_quietly(tmp_path).equals(load_quietly(VERL_SAMPLE))


def test_the_walk_stops_at_its_depth(tmp_path: Path):
    deepest = tmp_path.joinpath(*[f"level{index}" for index in range(discover.MAX_DEPTH)])
    shutil.copytree(SAMPLES / "roll", deepest)  # ROLL's files lie in their folder: no format claims a folder above
    assert [run.root for run in discover.find_runs(tmp_path)] == [deepest]
    too_deep = tmp_path / "other"
    shutil.copytree(SAMPLES / "roll", too_deep.joinpath(*[f"x{index}" for index in range(discover.MAX_DEPTH + 1)]))
    assert [run.root for run in discover.find_runs(too_deep)] == []


def test_hidden_folders_are_searched_only_by_a_format_that_keeps_its_runs_there(tmp_path, monkeypatch):
    split = tmp_path / ".runs" / "project" / "models" / "agent-001" / "trajectories" / "train"
    split.mkdir(parents=True)
    for step in (3, 4):
        pq.write_table(pa.table({"reward": [1.0, 0.0], "group_index": [0, 0]}), split / f"{step:04d}.parquet")
    message = error_line(run("compare", tmp_path))
    assert "holds no dump files" in message and "hidden" in message

    def expand_art(directory: Path) -> list[Path] | None:
        # A format declares a run root in a dot directory by looking into it from the folder above (as ART's .art).
        return sorted((directory / ".runs").glob("*/models/*/trajectories/train/*.parquet")) or None

    generic = FORMATS["generic"]
    fake = Format(
        name="art_like",
        description="a format whose runs sit in a hidden folder",
        detect=generic.detect,
        read=generic.read,
        combine=generic.combine,
        expand_directory=expand_art,
    )
    monkeypatch.setitem(FORMATS, "art_like", fake)
    (found,) = discover.find_runs(tmp_path)
    assert found.root == tmp_path and found.format == "art_like"
    assert found.label(tmp_path) == ". (art_like, steps 3-4)"


def test_every_sample_dump_directory_still_reads():
    for folder in ("fanout", "dump_details", "verl", "verl_v1", "trl", "rllm", "areal", "roll", "nemo_rl", "generic"):
        files = rollaudit.expand_paths(SAMPLES / folder)
        assert files, folder
        assert not any(discover.is_side_file(path) for path in files), folder
