"""``--wandb PROJECT`` in W&B's offline mode, as a user runs it (real processes, a home, a temporary directory and a
working directory of their own): the history read back from the run's own ``.wandb`` file holds ``--json``'s
per-step values at the dump's steps; the run is rollaudit's own, never the trainer's, whatever the environment
says; a restarted watch logs no step twice; an unusable ``WANDB_DIR`` is one line and exit 2, with nothing written
anywhere; text from a file name reaches W&B cleaned."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import rollaudit
from rollaudit._render.dashboards.dashboard import clean_label

from .readers import tree, wandb_offline_runs, watch_then_interrupt

pytest.importorskip("wandb")

ROOT = Path(__file__).resolve().parents[2]
VERL = ROOT / "sample_dumps" / "verl" / "rollout_data"
CORPUS_V1 = ROOT.parent / "shared" / "corpus" / "verl" / "rollout_data_v1"
PROJECT = "rollaudit-tests"


class Sandbox:
    """A user's machine in ``tmp_path``: home, temporary directory, working directory and WANDB_DIR of its own."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.home, self.tmp, self.cwd = tmp_path / "home", tmp_path / "tmp", tmp_path / "work"
        self.wandb_dir = tmp_path / "wandb-root"
        for directory in (self.home, self.tmp, self.cwd):
            directory.mkdir()
        self.env = {key: value for key, value in os.environ.items() if not key.startswith(("WANDB_", "ROLLAUDIT_"))}
        self.env.update(
            HOME=str(self.home),
            TMPDIR=str(self.tmp),
            XDG_CACHE_HOME=str(self.home / ".cache"),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            WANDB_MODE="offline",
            WANDB_DIR=str(self.wandb_dir),
            COLUMNS="100",
        )

    def rollaudit(self, *args: object, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "rollaudit", *map(str, args)],
            cwd=self.cwd,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def outside(self) -> dict:
        """Everything the sandbox holds outside WANDB_DIR (home, temporary and working directories)."""
        return {name: tree(path) for name, path in (("home", self.home), ("tmp", self.tmp), ("cwd", self.cwd))}


def expected_history(document: dict) -> dict[int, dict[str, float]]:
    """``--json``'s per-step values under the keys they must be logged with (float64: W&B keeps them exactly)."""
    trained_row = document["trained_with"]["row"]
    expected: dict[int, dict[str, float]] = defaultdict(dict)
    for step, rows in document["per_step"].items():
        for row, metrics in rows.items():
            part = "trained" if row == trained_row else row
            for metric, value in metrics.items():
                if value is not None:
                    expected[int(step)][f"rollaudit/{part}/{metric}"] = value
    return expected


def no_signal_shares(path: Path) -> dict[int, float]:
    rewards: dict[tuple, list] = defaultdict(list)
    for row in rollaudit.load(path).to_pylist():
        rewards[(row["step"], row["prompt"])].append(row["reward"])
    steps: dict[int, list[bool]] = defaultdict(list)
    for (step, _), values in rewards.items():
        steps[step].append(len(set(values)) == 1)
    return {step: sum(silent) / len(silent) for step, silent in steps.items()}


def logged(row: dict) -> dict:
    return {key: value for key, value in row.items() if key.startswith("rollaudit/")}


@pytest.mark.parametrize("dump", [pytest.param(VERL, id="verl-sample"), pytest.param(CORPUS_V1, id="verl-v1-corpus")])
def test_offline_history_read_back_equals_the_json(tmp_path: Path, dump: Path) -> None:
    if not dump.exists():
        pytest.skip(f"{dump} is not here (the corpus lies beside the project)")
    sandbox = Sandbox(tmp_path)
    result = sandbox.rollaudit("compare", dump, "--json", "--no-cache", "--wandb", PROJECT)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    (run,) = wandb_offline_runs(sandbox.wandb_dir)
    assert (run.project, run.group, run.job_type) == (PROJECT, dump.name, "rollaudit")
    assert run.name == f"rollaudit {dump.name}"
    assert {key: run.config[key] for key in ("command", "reference", "schemes")} == {
        "command": "compare",
        "reference": "prompt",
        "schemes": ["batch", "prompt", "trajectory"],
    }
    assert run.config["rollaudit_version"] == rollaudit.__version__
    assert [row["_step"] for row in run.history] == sorted(int(step) for step in document["per_step"])
    expected = expected_history(document)
    shares = no_signal_shares(dump)
    trained = document["trained_with"]
    for number, row in enumerate(run.history):
        step = row["_step"]
        values = logged(row)
        text = values.pop("rollaudit/trained/scheme", None)
        assert text == (f"{trained['scheme']} ({trained['evidence']})" if number == 0 else None)
        assert values.pop("rollaudit/data/no_signal_prompt_share") == shares[step]
        assert values == expected[step]
    assert f"wandb: run rollaudit {dump.name} ({run.run_id}) in project {PROJECT}" in result.stderr
    assert "offline" in result.stderr
    assert sandbox.outside() == {"home": {}, "tmp": {}, "cwd": {}}


def test_the_trainer_s_run_is_never_resumed_or_written(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path)
    trainer = (
        "import wandb\n"
        "run = wandb.init(project='rollaudit-tests', id='trainer0001', group='rollout_data', "
        "settings=wandb.Settings(silent=True, console='off'))\n"
        "run.log({'loss': 1.0}, step=1)\n"
        "run.finish()\n"
    )
    made = subprocess.run(
        [sys.executable, "-c", trainer], cwd=sandbox.cwd, env=sandbox.env, capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stderr
    (trainer_run,) = wandb_offline_runs(sandbox.wandb_dir)
    trainer_files = tree(trainer_run.path.parent)
    result = sandbox.rollaudit(
        "watch", VERL, "--until-idle", "0", "--no-cache", "--wandb", PROJECT,
        WANDB_RUN_ID="trainer0001", WANDB_RESUME="must", WANDB_NAME="trainer", WANDB_JOB_TYPE="train",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    runs = wandb_offline_runs(sandbox.wandb_dir)
    ours = [run for run in runs if run.path != trainer_run.path]
    assert len(runs) == 2 and len(ours) == 1
    assert ours[0].run_id != "trainer0001" and ours[0].job_type == "rollaudit" and ours[0].name != "trainer"
    assert [row["_step"] for row in ours[0].history] == [1, 2]
    assert tree(trainer_run.path.parent) == trainer_files  # the trainer's run: not a byte changed


def test_a_restarted_watch_logs_no_step_twice(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path)
    run_dir, records = tmp_path / "run", tmp_path / "audit.jsonl"
    run_dir.mkdir()
    shutil.copy(VERL / "1.jsonl", run_dir)
    arguments = ("watch", run_dir, "--until-idle", "0", "--no-cache", "--jsonl", records, "--wandb", PROJECT)
    assert sandbox.rollaudit(*arguments).returncode == 0
    shutil.copy(VERL / "2.jsonl", run_dir)
    assert sandbox.rollaudit(*arguments).returncode == 0
    again = sandbox.rollaudit(*arguments)
    assert again.returncode == 0 and "wandb: run" not in again.stderr  # nothing new: no run at all
    runs = wandb_offline_runs(sandbox.wandb_dir)
    assert [[row["_step"] for row in run.history] for run in runs] == [[1], [2]]
    assert {run.group for run in runs} == {"run"}
    # Each run is a run of its own: it says the scheme at its first step.
    assert [run.history[0].get("rollaudit/trained/scheme") for run in runs] == ["verl-grpo (framework default)"] * 2
    compare = json.loads(sandbox.rollaudit("compare", VERL, "--json", "--no-cache").stdout)
    expected = expected_history(compare)
    for run in runs:
        (row,) = run.history
        values = logged(row)
        values.pop("rollaudit/trained/scheme")
        values.pop("rollaudit/data/no_signal_prompt_share")
        assert values == expected[row["_step"]]


def _unwritable(tmp_path: Path) -> Path:
    if os.geteuid() == 0:
        return Path("/sys/kernel")  # sysfs takes no new files, even from root
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    return locked


HAZARDS = ["a file", "under a file", "unwritable", "a planted link", "a planted link at its wandb directory"]


@pytest.mark.parametrize("hazard", HAZARDS)
def test_an_unusable_wandb_dir_is_one_line_and_exit_2_with_nothing_written_anywhere(
    tmp_path: Path, hazard: str
) -> None:
    sandbox = Sandbox(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "a-file").write_text("x")
    if hazard == "a file":
        wandb_dir, words = tmp_path / "a-file", "is not a directory"
    elif hazard == "under a file":
        wandb_dir, words = tmp_path / "a-file" / "w", "Not a directory"
    elif hazard == "unwritable":
        wandb_dir, words = _unwritable(tmp_path), "is not writable"
    elif hazard == "a planted link":
        wandb_dir, words = tmp_path / "planted", "is a symbolic link"
        wandb_dir.symlink_to(elsewhere, target_is_directory=True)
    else:
        wandb_dir, words = tmp_path / "root", "is a symbolic link"
        wandb_dir.mkdir()
        (wandb_dir / "wandb").symlink_to(elsewhere, target_is_directory=True)
    before = tree(tmp_path)
    result = sandbox.rollaudit("compare", VERL, "--no-cache", "--wandb", PROJECT, WANDB_DIR=str(wandb_dir))
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: ") and words in result.stderr and "WANDB_DIR" in result.stderr
    assert tree(tmp_path) == before  # home, temporary directory, working directory, the link's target: untouched


def test_text_from_a_file_name_reaches_w_and_b_cleaned(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path)
    hostile = "\x1b]0;owned\x07..\u202eevil\n" + "x" * 200
    run_dir = tmp_path / hostile
    shutil.copytree(VERL, run_dir)
    result = sandbox.rollaudit("compare", run_dir, "--no-cache", "-q", "--wandb", PROJECT)
    assert result.returncode == 0, result.stderr
    named = sandbox.rollaudit("compare", VERL, "--no-cache", "-q", "--wandb", PROJECT, "--wandb-group", "a\nb\u2066c")
    assert named.returncode == 0, named.stderr
    first, second = wandb_offline_runs(sandbox.wandb_dir)
    assert first.group == clean_label(hostile, 128) == "]0;owned_evil " + "x" * 114
    assert second.group == "a bc"
    for run in (first, second):
        keys = {key for row in run.history for key in row if not key.startswith("_")}
        assert all(key.startswith("rollaudit/") and "\n" not in key and ".." not in key for key in keys)


def test_option_mistakes_are_one_line(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path)
    group_alone = sandbox.rollaudit("compare", VERL, "--wandb-group", "g")
    assert group_alone.returncode == 2 and group_alone.stderr.startswith("error: --wandb-group needs --wandb")
    for project in ("a/b", "x" * 129, "ok\x1b[31m", " "):
        bad = sandbox.rollaudit("compare", VERL, "--wandb", project)
        assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr
        assert "is not a W&B project name" in bad.stderr
    assert not sandbox.wandb_dir.exists()


def test_ctrl_c_loses_no_step_already_audited(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path)
    run_dir, records = tmp_path / "run", tmp_path / "audit.jsonl"
    shutil.copytree(VERL, run_dir)
    watch_then_interrupt([str(run_dir), "--no-cache", "--wandb", PROJECT], records, cwd=sandbox.cwd, env=sandbox.env)
    (run,) = wandb_offline_runs(sandbox.wandb_dir)
    assert [row["_step"] for row in run.history] == [1, 2]
