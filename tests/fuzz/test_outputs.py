"""Every output is written whole or not at all, and a path that cannot be written is one line and exit 2.

Outputs: compare's JSON, Markdown and text reports (``-o``), its HTML page
(``--html``), its PNGs (``--plot``), convert's tables (Parquet, Feather, CSV, JSON Lines), gate's
JUnit XML (``--junit``) and baselines (``--write-baseline``). Each is checked
with an output path in a missing directory (which ``--plot`` makes), in a
read-only directory, and a path that is a directory (a file, for ``--plot``); then with the run
interrupted in the middle of the write (KeyboardInterrupt from inside the
writer, and just before the rename): no partial file and no temporary file is
left, and a file already at the path keeps its old content.

As root, permissions do not stop writes; the read-only case then runs in a
forked child that has dropped to an unprivileged user id.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rollaudit
from rollaudit import _output
from rollaudit._cli import app
from tests.fuzz.harness import SAMPLES

DUMP = str(SAMPLES / "spec_4_3_4.pt")
_UNPRIVILEGED = 65534  # nobody


def _invoke(*args: str):
    return CliRunner(env={"COLUMNS": "100"}).invoke(app, list(args), catch_exceptions=False)


def _has_gate() -> bool:
    return any((command.name or command.callback.__name__) == "gate" for command in app.registered_commands)


# name -> (arguments with {out} for the output path, file name, whether the output is a directory)
OUTPUTS: dict[str, tuple[tuple[str, ...], str, bool]] = {
    "json": (("compare", DUMP, "--json", "-o", "{out}", "-q"), "report.json", False),
    "markdown": (("compare", DUMP, "--markdown", "-o", "{out}", "-q"), "report.md", False),
    "text": (("compare", DUMP, "-o", "{out}", "-q"), "report.txt", False),
    "png": (("compare", DUMP, "--json", "--plot", "{out}", "-q"), "plots", True),
    "html": (("compare", DUMP, "--json", "--html", "{out}", "-q"), "report.html", False),
    "parquet": (("convert", DUMP, "-o", "{out}", "-q"), "table.parquet", False),
    "feather": (("convert", DUMP, "-o", "{out}", "-q"), "table.feather", False),
    "csv": (("convert", DUMP, "-o", "{out}", "-q"), "table.csv", False),
    "jsonl": (("convert", DUMP, "-o", "{out}", "-q"), "table.jsonl", False),
    "junit": (("gate", DUMP, "--max", "batch:sign_flip_rate=1", "--junit", "{out}", "-q"), "gate.xml", False),
    "baseline": (("gate", DUMP, "--write-baseline", "{out}", "-q"), "baseline.json", False),
}


def _arguments(name: str, out: Path) -> list[str]:
    if OUTPUTS[name][0][0] == "gate" and not _has_gate():
        pytest.skip("no gate command in this build")
    return [str(out) if argument == "{out}" else argument for argument in OUTPUTS[name][0]]


def _one_line_error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines
    assert "Traceback" not in result.output
    return lines[0]


def _leftovers(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if path.name.startswith(".") or ".tmp" in path.name)


# ---------------------------------------------------------------------------------------------------------------------
# Paths that cannot be written.


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_an_output_in_a_missing_directory(tmp_path: Path, name: str):
    out = tmp_path / "missing" / "deeper" / OUTPUTS[name][1]
    if OUTPUTS[name][2]:  # --plot makes its directory, parents and all
        result = _invoke(*_arguments(name, out))
        assert result.exit_code == 0, result.stderr
        assert sorted(path.name for path in out.iterdir()) == [
            "advantage_distribution.png",
            "advantage_scatter.png",
            "group_sizes.png",
            "per_step.png",
        ]
        return
    line = _one_line_error(_invoke(*_arguments(name, out)))
    assert "does not exist" in line
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_an_output_path_that_is_a_directory(tmp_path: Path, name: str):
    out = tmp_path / OUTPUTS[name][1]
    if OUTPUTS[name][2]:  # --plot wants a directory: a file is the wrong kind of path
        out.write_text("a file")
        line = _one_line_error(_invoke(*_arguments(name, out)))
        assert "not a directory" in line
        assert out.read_text() == "a file"
    else:
        out.mkdir()
        line = _one_line_error(_invoke(*_arguments(name, out)))
        assert "is a directory" in line
        assert list(out.iterdir()) == []


def _in_unprivileged_child(run: Callable[[], dict]) -> dict:
    """``run()`` in a forked child with an unprivileged uid (root writes through read-only directories)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: everything it needs is imported already
        code = 0
        try:
            os.close(read)
            signal.alarm(60)  # a child stuck on a lock another thread held at fork time dies instead of hanging
            os.setgroups([])
            os.setgid(_UNPRIVILEGED)
            os.setuid(_UNPRIVILEGED)
            outcome = run()
        except BaseException as error:
            outcome, code = {"crash": f"{type(error).__name__}: {error}"}, 1
        os.write(write, json.dumps(outcome).encode())
        os.close(write)
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        data = stream.read()
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_an_output_in_a_read_only_directory(name: str):
    arguments_template = OUTPUTS[name]
    # Not under pytest's tmp_path: an unprivileged child could not reach into root's 0700 directories.
    base = Path(tempfile.mkdtemp(prefix="rollaudit-readonly-"))
    try:
        base.chmod(0o755)
        read_only = base / "read-only"
        read_only.mkdir()
        out = read_only / arguments_template[1]
        arguments = _arguments(name, out)
        read_only.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)

        def run() -> dict:
            result = _invoke(*arguments)
            return {"exit_code": result.exit_code, "stderr": result.stderr, "output": result.output}

        if os.geteuid() == 0:
            # The child cannot read root's site-packages: import what this command imports first, by running it
            # into a missing directory (the same path through the code, up to the output check).
            _invoke(*_arguments(name, base / "missing" / arguments_template[1]))
            outcome = _in_unprivileged_child(run)
        else:
            outcome = run()
        assert "crash" not in outcome, outcome
        assert outcome["exit_code"] == 2, outcome
        lines = outcome["stderr"].strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "not writable" in lines[0], outcome
        assert "Traceback" not in outcome["output"]
        assert list(read_only.iterdir()) == []
    finally:
        (base / "read-only").chmod(0o755)
        import shutil

        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------------------
# Interrupted writes.


class _Interrupted(KeyboardInterrupt):
    pass


def _interrupt_in_writer(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make the writer of ``name`` write part of its file, then be interrupted (Ctrl-C in the middle)."""

    def partial(path: Path, *args, **kwargs) -> None:
        Path(path).write_bytes(b"partial ")
        raise _Interrupted

    if name == "png":
        import matplotlib.figure

        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, path, *a, **k: partial(path))
    elif name in ("parquet", "feather", "csv", "jsonl"):
        from rollaudit._render import table_files

        suffix = "." + name
        monkeypatch.setitem(table_files.TABLE_WRITERS, suffix, lambda table, path: partial(path))
    else:  # text outputs: JSON, Markdown, terminal text, JUnit, baselines
        original = Path.write_text

        def write_text(self: Path, data: str, *args, **kwargs) -> int:
            if self.name.endswith(".tmp"):
                original(self, data[: len(data) // 2], *args, **kwargs)
                raise _Interrupted
            return original(self, data, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", write_text)


def _interrupt_before_rename(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole temporary file is written; the run is interrupted just before it replaces the output."""

    def replace(source, target) -> None:
        raise _Interrupted

    monkeypatch.setattr(_output.os, "replace", replace)


def _run_interrupted(arguments: list[str]):
    runner = CliRunner(env={"COLUMNS": "100"})
    try:
        return runner.invoke(app, arguments, catch_exceptions=True)
    except KeyboardInterrupt:  # the CLI may let Ctrl-C through: the files are what this test is about
        return None


@pytest.mark.parametrize("where", ["in the writer", "before the rename"])
@pytest.mark.parametrize("name", sorted(OUTPUTS))
@pytest.mark.parametrize("existing", [False, True])
def test_an_interrupted_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, where: str, existing: bool
):
    directory = tmp_path / "out"
    directory.mkdir()
    out = directory / OUTPUTS[name][1]
    arguments = _arguments(name, out)
    old = directory / "plots" / "group_sizes.png" if OUTPUTS[name][2] else out
    if existing:
        old.parent.mkdir(exist_ok=True)
        old.write_bytes(b"the previous report")
    if where == "in the writer":
        _interrupt_in_writer(monkeypatch, name)
    else:
        _interrupt_before_rename(monkeypatch)
    result = _run_interrupted(arguments)
    if result is not None:
        assert result.exit_code != 0, result.output
        assert not isinstance(result.exception, (AssertionError, TypeError, AttributeError)), result.exception
    if existing:
        assert old.read_bytes() == b"the previous report"
    elif OUTPUTS[name][2]:
        assert not any(out.glob("*.png")) if out.exists() else True
    else:
        assert not out.exists()
    leftovers = _leftovers(directory) + (_leftovers(out) if OUTPUTS[name][2] and out.exists() else [])
    assert leftovers == [], leftovers


def test_write_atomic_keeps_the_old_file_when_the_content_fails(tmp_path: Path):
    target = tmp_path / "report.json"
    target.write_text("old")

    def fails(path: Path) -> None:
        path.write_text("half")
        raise OSError("disk full")

    with pytest.raises(rollaudit.UsageError, match="cannot write: disk full"):
        _output.write_atomic(target, fails)
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_every_writer_goes_through_write_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Each output lands at its path by one rename of a complete temporary file beside it."""
    renames: list[tuple[str, str]] = []
    original = os.replace

    def replace(source, target) -> None:
        assert Path(source).parent == Path(target).parent
        assert Path(source).stat().st_size > 0
        renames.append((Path(source).name, Path(target).name))
        original(source, target)

    monkeypatch.setattr(_output.os, "replace", replace)
    for name in sorted(OUTPUTS):
        if OUTPUTS[name][0][0] == "gate" and not _has_gate():
            continue
        out = tmp_path / name / OUTPUTS[name][1]
        out.parent.mkdir()
        result = _invoke(*_arguments(name, out))
        assert result.exit_code == 0, (name, result.output)
        written = sorted(out.glob("*.png")) if OUTPUTS[name][2] else [out]
        assert written and all(path.stat().st_size > 0 for path in written), name
        for path in written:
            assert any(target == path.name and source.startswith(f".{path.name}.") for source, target in renames), name
        assert _leftovers(out.parent) == []
    rollaudit.validate_table(__import__("pyarrow.parquet").parquet.read_table(tmp_path / "parquet" / "table.parquet"))


@pytest.mark.parametrize("name", ["json", "parquet"])
def test_a_write_that_fails_midway_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    if name == "parquet":
        from rollaudit._render import table_files

        monkeypatch.setitem(table_files.TABLE_WRITERS, ".parquet", lambda table, path: full())
    else:
        monkeypatch.setattr(Path, "write_text", full)
    out = tmp_path / OUTPUTS[name][1]
    result = CliRunner(env={"COLUMNS": "100"}).invoke(app, _arguments(name, out), catch_exceptions=True)
    assert not isinstance(result.exception, OSError), result.exception
    line = _one_line_error(result)
    assert "No space left" in line
    assert not out.exists() and _leftovers(tmp_path) == []
