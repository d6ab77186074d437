"""numpy's huge-page advice: off inside rollaudit's calls and processes, as it was outside, the user's setting kept."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from rollaudit import _memory


def _advice() -> bool:
    switch = _memory._switch()
    assert switch is not None, "this numpy has no huge-page switch: the module would do nothing"
    current = switch(True)
    switch(current)
    return current


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(_memory.NUMPY_SETTING, raising=False)
    switch = _memory._switch()
    assert switch is not None
    before = switch(True)
    yield
    switch(before)


def test_small_pages_inside_the_call_and_the_caller_setting_after(unset):
    for outside in (True, False):
        _memory._switch()(outside)  # type: ignore[misc]
        with _memory.small_pages():
            assert _advice() is False
            with _memory.small_pages():  # nested: the inner end does not turn the advice back on
                pass
            assert _advice() is False
        assert _advice() is outside


def test_overlapping_calls_in_threads_put_back_the_setting_once_both_end(unset):
    entered, release = threading.Barrier(3), threading.Event()

    def call() -> None:
        with _memory.small_pages():
            entered.wait()
            release.wait()

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    entered.wait()
    assert _advice() is False
    release.set()
    for thread in threads:
        thread.join()
    assert _advice() is True


def test_the_user_setting_decides(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(_memory.NUMPY_SETTING, "1")
    before = _advice()
    with _memory.small_pages():
        assert _advice() is before
    _memory.prefer_small_pages()
    assert os.environ[_memory.NUMPY_SETTING] == "1" and _advice() is before


def test_the_command_line_process_and_its_children_have_it_off():
    probe = (
        "import os, numpy as np\n"
        "from rollaudit._cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(os.environ.get('NUMPY_MADVISE_HUGEPAGE'), np._core.multiarray._set_madvise_hugepage(True))\n"
    )
    environment = {key: value for key, value in os.environ.items() if key != _memory.NUMPY_SETTING}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=environment, check=True)
    assert done.stdout.split()[-2:] == ["0", "False"], done.stdout
    assert hasattr(np, "_core")


@pytest.mark.parametrize(("given", "used"), [(None, "system"), ("mimalloc", "mimalloc")])
def test_the_command_line_allocates_arrow_memory_with_the_system_allocator_unless_told_otherwise(given, used):
    """Arrow's default pool keeps what a read freed; the system's gives it back. The switch is read as pyarrow is
    imported, so the command line sets it before: a command's tables, not a probe's, decide the pool."""
    sample = os.path.join(os.path.dirname(__file__), "..", "sample_dumps", "generic", "rollouts.csv")
    probe = (
        "import sys\n"
        "from rollaudit._cli import main\n"
        "try:\n"
        f"    main(['inspect', {sample!r}, '--no-cache'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "import pyarrow\n"
        "print(pyarrow.default_memory_pool().backend_name)\n"
    )
    environment = {key: value for key, value in os.environ.items() if key != _memory.ARROW_POOL_SETTING}
    if given is not None:
        environment[_memory.ARROW_POOL_SETTING] = given
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=environment, check=True)
    assert done.stdout.split()[-1] == used, done.stdout
