"""What an output path points to decides how it is written, and nothing it points to is ever clobbered.

A FIFO, a character device and ``/dev/stdout`` are written straight into (never replaced by a regular file); a
symlink is followed and its target replaced atomically, the link kept; a socket or a directory is refused; an
unwritable place is one line before anything is loaded; SIGTERM in the middle of a write leaves no temporary
file, and a temporary file of a process killed outright is swept by the next run that writes beside it.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rollaudit
from rollaudit import _output
from rollaudit._cli import app

ROOT = Path(__file__).resolve().parents[2]
DUMP = str(ROOT / "sample_dumps" / "spec_4_3_4.pt")


def run(*args: object):
    return CliRunner(env={"COLUMNS": "100"}).invoke(app, [str(arg) for arg in args])


def _temporaries(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if path.name.endswith(".tmp"))


def test_a_fifo_is_written_into_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    result = run("compare", DUMP, "--markdown", "-o", fifo)
    reader.join(timeout=60)
    assert result.exit_code == 0, result.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert received and received[0].startswith(b"### rollaudit: advantages against `prompt`")
    assert _temporaries(tmp_path) == []


def test_dev_null_and_dev_stdout_are_streams_never_files(tmp_path):
    # In a child whose stdout is a pipe: /dev/stdout must reach the pipe, and stay the link it is (as root too).
    before = os.lstat("/dev/stdout").st_mode, os.stat("/dev/null").st_mode
    script = f"from rollaudit._cli import main\nmain(['compare', {DUMP!r}, '--markdown', '-o', '/dev/stdout'])\n"
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith("### rollaudit: advantages against `prompt`")
    assert run("compare", DUMP, "--json", "-o", "/dev/null").exit_code == 0
    assert (os.lstat("/dev/stdout").st_mode, os.stat("/dev/null").st_mode) == before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and os.path.getsize("/dev/null") == 0


def test_dash_is_stdout():
    result = run("compare", DUMP, "--markdown", "-o", "-")
    assert result.exit_code == 0 and result.stdout.startswith("### rollaudit")
    assert "wrote" not in result.stderr


def test_a_symlink_is_followed_and_kept(tmp_path):
    target = tmp_path / "reports" / "latest.md"
    target.parent.mkdir()
    target.write_text("the previous report")
    link = tmp_path / "report.md"
    link.symlink_to(target)
    assert run("compare", DUMP, "--markdown", "-o", link).exit_code == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("### rollaudit")
    assert _temporaries(tmp_path) == [] and _temporaries(target.parent) == []
    dangling = tmp_path / "new.md"
    dangling.symlink_to(tmp_path / "reports" / "created.md")
    assert run("compare", DUMP, "--markdown", "-o", dangling).exit_code == 0
    assert dangling.is_symlink() and (tmp_path / "reports" / "created.md").read_text().startswith("### rollaudit")


def test_a_socket_is_refused_before_loading(tmp_path, monkeypatch):
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        monkeypatch.setattr(rollaudit, "load", lambda *a, **k: pytest.fail("loaded"))
        result = run("compare", DUMP, "--json", "-o", path)
        assert result.exit_code == 2 and "is not a regular file, a device or a FIFO" in result.stderr
        assert stat.S_ISSOCK(path.lstat().st_mode)
    finally:
        server.close()


def test_an_unwritable_filesystem_is_one_line_before_loading(tmp_path, monkeypatch):
    # A read-only filesystem refuses the temporary file even to root: the same refusal, simulated.
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(_output.tempfile, "mkstemp", read_only)
    monkeypatch.setattr(rollaudit, "load", lambda *a, **k: pytest.fail("loaded before the output was checked"))
    result = run("compare", DUMP, "--json", "-o", tmp_path / "report.json")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'report.json'}: directory is not writable (Read-only file system)"
    )
    assert list(tmp_path.iterdir()) == []


_SLOW_WRITE = """
import sys, time
from pathlib import Path
from rollaudit import _output
real = _output._write_to
def slow(temporary, content):
    real(temporary, content if not isinstance(content, str) else content[: len(content) // 2])
    Path(sys.argv[2]).write_text("writing")
    time.sleep(60)
_output._write_to = slow
from rollaudit._cli import main
main(["compare", sys.argv[1], "--markdown", "-o", sys.argv[3]])
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_in_the_middle_of_a_write_leaves_no_temporary_file(tmp_path, signum):
    out = tmp_path / "report.md"
    out.write_text("the previous report")
    marker = tmp_path / "marker"
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WRITE, DUMP, str(marker), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), child.stderr.read() if child.poll() is not None else "no write started"
    assert len(_temporaries(tmp_path)) == 1  # the half-written temporary, beside the report
    child.send_signal(signum)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("error: ")
    assert _temporaries(tmp_path) == []
    assert out.read_text() == "the previous report"


def test_a_killed_run_leaves_a_temporary_that_the_next_run_sweeps(tmp_path):
    out = tmp_path / "report.md"
    marker = tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", _SLOW_WRITE, DUMP, str(marker), str(out)])
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child.kill()  # SIGKILL: no handler runs
    child.wait(timeout=60)
    (stale,) = _temporaries(tmp_path)
    assert stale.startswith(f".report.md.{child.pid}.")
    assert run("compare", DUMP, "--markdown", "-o", out).exit_code == 0
    assert _temporaries(tmp_path) == [] and out.read_text().startswith("### rollaudit")


def test_a_live_process_temporary_is_left_alone(tmp_path):
    out = tmp_path / "report.md"
    mine = tmp_path / f".report.md.{os.getppid()}.abcdef.tmp"  # the parent of this process is alive
    mine.write_text("someone else's write in progress")
    assert _output.sweep_stale(out) == []
    assert mine.exists()


def test_writing_a_library_output_goes_through_the_same_rules(tmp_path):
    link = tmp_path / "baseline.json"
    real = tmp_path / "real.json"
    real.write_text("{}")
    link.symlink_to(real)
    _output.write_atomic(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    with (
        tempfile.TemporaryDirectory() as scratch,
        pytest.raises(rollaudit.UsageError, match="is a directory"),
    ):
        _output.write_atomic(scratch, "x")
