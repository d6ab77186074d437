"""``rollaudit watch`` as a user runs it beside a trainer: real processes, a trainer-like writer, exit codes, stdout,
the records file. Every record is checked against ``rollaudit compare`` on that step's files alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rollaudit._cli import app

ROOT = Path(__file__).resolve().parents[2]
TRAINER = Path(__file__).with_name("trainer.py")
FANOUT_DUMP = ROOT / "sample_dumps" / "fanout" / "rollout_data" / "3.pt"
WAIT = 90.0  # seconds a record may take on a loaded machine (torch's import included)


class Watch:
    """``rollaudit watch RUN --jsonl RECORDS ...`` in its own process."""

    def __init__(self, run: Path, records: Path, *args: str) -> None:
        self.records_path = records
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rollaudit", "watch", str(run), "--jsonl", str(records), "--no-cache", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def records(self) -> list[dict]:
        if not self.records_path.exists():
            return []
        return [json.loads(line) for line in self.records_path.read_text().splitlines() if line.strip()]

    def wait_for(self, count: int) -> list[dict]:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            records = self.records()
            if len(records) >= count:
                return records
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{count} records expected, got {self.records()}; stderr: {self.finish()[2]}")

    def finish(self, timeout: float = WAIT) -> tuple[int, str, str]:
        stdout, stderr = self.process.communicate(timeout=timeout)
        return self.process.returncode, stdout, stderr

    def stop(self, signum: int) -> tuple[int, str, str]:
        self.process.send_signal(signum)
        return self.finish()


def write(scenario: str, run: Path) -> None:
    subprocess.run([sys.executable, str(TRAINER), scenario, str(run)], check=True, timeout=WAIT)


def compare_summary(files: list[str]) -> dict:
    result = CliRunner().invoke(app, ["compare", *files, "--json", "--no-cache"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["summary"]


def assert_equals_compare(record: dict) -> None:
    assert record["summary"] == compare_summary(record["files"]), record["step"]


def test_halves_written_seconds_apart_give_one_record_per_step(tmp_path: Path) -> None:
    watch = Watch(tmp_path / "run", tmp_path / "audit.jsonl", "--until-idle", "3")
    (tmp_path / "run").mkdir()
    write("halves", tmp_path / "run")
    code, stdout, stderr = watch.finish()
    assert code == 0, stderr
    records = watch.records()
    assert [record["step"] for record in records] == [1, 2, 3]
    for record in records:
        assert "replaces" not in record and "error" not in record
        assert record["samples"] == 24 and record["prompts"] == 6
        assert_equals_compare(record)
    step_lines = [line for line in stdout.splitlines() if line.startswith("step ")]
    assert [line.split(" · ")[0] for line in step_lines] == ["step 1", "step 2", "step 3"]
    assert "watch idle: 3 steps audited" in stdout
    assert "Traceback" not in stderr


def test_a_train_dump_landing_after_its_rollout_dump_replaces_the_record(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    watch = Watch(run, tmp_path / "audit.jsonl")
    write("slime-rollout", run)
    first = watch.wait_for(1)
    assert first[0]["step"] == 0 and first[0]["files"] == [str(run / "rollout_data" / "0.pt")]
    assert first[0]["trained_with"]["evidence"] != "recorded advantages"
    write("slime-train", run)
    records = watch.wait_for(2)
    code, stdout, _ = watch.stop(signal.SIGINT)
    assert code == 0
    assert len(records) == 2
    second = records[1]
    assert second["step"] == 0 and second["replaces"] is True
    assert sorted(second["files"]) == sorted([str(run / "rollout_data" / "0.pt"), str(run / "train_data" / "0_0.pt")])
    assert "recorded" in second["summary"]  # the train dump's advantages
    assert_equals_compare(first[0])
    assert_equals_compare(second)
    assert "(replaces the earlier record)" in stdout
    assert "watch stopped: 1 step audited" in stdout


def test_version_directories_renamed_into_place(tmp_path: Path) -> None:
    run = tmp_path / "trial"
    run.mkdir()
    watch = Watch(run, tmp_path / "audit.jsonl", "--until-idle", "2")
    write("rename", run)
    code, _, stderr = watch.finish()
    assert code == 0, stderr
    records = watch.records()
    # A version is whole once the next one starts; the last one once the run goes idle.
    assert [record["step"] for record in records] == [3, 4]
    for record in records:
        assert len(record["files"]) == 4
        assert_equals_compare(record)


def test_steps_landing_faster_than_they_are_audited(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    watch = Watch(run, tmp_path / "audit.jsonl", "--until-idle", "2")
    write("burst", run)
    code, _, stderr = watch.finish()
    assert code == 0, stderr
    records = watch.records()
    assert sorted(record["step"] for record in records) == list(range(1, 31))
    assert len(records) == 30  # exactly one each
    for record in records[::10]:
        assert_equals_compare(record)


def test_fail_fast_names_the_step_and_the_rule(tmp_path: Path) -> None:
    run = tmp_path / "run" / "rollout_data"
    run.mkdir(parents=True)
    shutil.copy(FANOUT_DUMP, run / "3.pt")
    watch = Watch(tmp_path / "run", tmp_path / "audit.jsonl", "--max", "batch:sign_flip_rate=1%", "--fail-fast")
    code, stdout, stderr = watch.finish()
    assert code == 1
    assert stdout.splitlines()[0].startswith("step 3 · 88 samples · 8 prompts")
    assert "FAIL max batch:sign_flip_rate" in stdout
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("error: step 3 failed max batch:sign_flip_rate"), stderr
    assert watch.records()[0]["gate"]["passed"] is False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_with_the_summary(tmp_path: Path, signum: int) -> None:
    run = tmp_path / "run" / "rollout_data"
    run.mkdir(parents=True)
    shutil.copy(FANOUT_DUMP, run / "3.pt")
    watch = Watch(tmp_path / "run", tmp_path / "audit.jsonl", "--max", "batch:sign_flip_rate=1%")
    watch.wait_for(1)
    code, stdout, stderr = watch.stop(signum)
    assert code == 1, stderr  # a step failed a rule
    assert "watch stopped: 1 step audited, 1 failed a rule" in stdout
    assert "worst steps:" in stdout and "Traceback" not in stderr


def test_until_idle_and_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    records = tmp_path / "audit.jsonl"
    write("halves", run)
    started = time.monotonic()
    first = Watch(run, records, "--until-idle", "1")
    code, stdout, _ = first.finish()
    assert code == 0 and len(first.records()) == 3
    assert "watch idle: 3 steps audited" in stdout
    # Started again: nothing new to audit, and a new step alone once it lands.
    again = Watch(run, records, "--until-idle", "1")
    code, stdout, _ = again.finish()
    assert code == 0 and len(again.records()) == 3
    assert not [line for line in stdout.splitlines() if line.startswith("step ")]
    (run / "rollout_data" / "9.jsonl").write_bytes(
        (run / "rollout_data" / "1.jsonl").read_bytes().replace(b'"step": 1,', b'"step": 9,')
    )
    last = Watch(run, records, "--until-idle", "1")
    code, stdout, _ = last.finish()
    assert code == 0
    assert [record["step"] for record in last.records()] == [1, 2, 3, 9]
    assert [line.split(" · ")[0] for line in stdout.splitlines() if line.startswith("step ")] == ["step 9"]
    assert "watch idle: 4 steps audited" in stdout
    assert time.monotonic() - started < 3 * WAIT


def test_a_corrupt_step_is_a_warning_and_the_watch_goes_on(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write("corrupt", run)
    write("halves", run)
    watch = Watch(run, tmp_path / "audit.jsonl", "--until-idle", "1")
    code, stdout, stderr = watch.finish()
    assert code == 0
    records = watch.records()
    assert [record["step"] for record in records if "error" not in record] == [1, 2, 3]
    broken = [record for record in records if "error" in record]
    assert (
        len(broken) == 1 and broken[0]["step"] is None and broken[0]["files"] == [str(run / "rollout_data" / "4.jsonl")]
    )
    warning = [line for line in stderr.splitlines() if "4.jsonl" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: ") and "step skipped" in warning[0]
    assert "1 could not be read" in stdout


def test_a_missing_run_directory_is_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["watch", str(tmp_path / "nowhere"), "--until-idle", "0"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'nowhere'}: no such directory (expected the run directory the trainer writes)"
    ]
    file = tmp_path / "file.jsonl"
    file.write_text("{}\n")
    result = CliRunner().invoke(app, ["watch", str(file), "--until-idle", "0"])
    assert result.exit_code == 2 and "is not a directory" in result.stderr


def test_html_page_of_the_run_so_far(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write("halves", run)
    page = tmp_path / "watch.html"
    result = CliRunner().invoke(
        app, ["watch", str(run), "--until-idle", "0", "--html", str(page), "--no-cache"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "rollaudit watch" in html
    assert html.count("<tr") == 4  # the header and three steps
    assert "watch idle: 3 steps audited" in html
    assert not list(tmp_path.glob(".watch.html*"))  # no temporary left beside it


def test_fail_fast_needs_a_rule(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["watch", str(tmp_path), "--fail-fast", "--until-idle", "0"])
    assert result.exit_code == 2 and "--fail-fast needs a rule" in result.stderr


def test_records_file_must_be_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    result = CliRunner().invoke(app, ["watch", str(tmp_path), "--jsonl", str(tmp_path / "fifo"), "--until-idle", "0"])
    assert result.exit_code == 2 and "is not a regular file" in result.stderr


def test_a_signal_during_a_steps_writes_waits_for_them_and_a_second_one_does_not() -> None:
    from rollaudit._cli.app import Terminated, _signals_stop_the_command, signals_held

    written: list[str] = []
    with pytest.raises(KeyboardInterrupt), signals_held():
        signal.raise_signal(signal.SIGINT)
        written.append("records")  # the step goes on to every sink
        written.append("dashboards")
    assert written == ["records", "dashboards"]
    with _signals_stop_the_command(), pytest.raises(Terminated), signals_held():
        signal.raise_signal(signal.SIGTERM)
        written.append("records")
    assert written[-1] == "records"
    with pytest.raises(KeyboardInterrupt) as stopped, signals_held():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)  # a hung write: the second Ctrl-C stops it
        written.append("never")
    assert "never" not in written
    assert stopped.value.__context__ is None  # delivered once, not again as the block ends
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
