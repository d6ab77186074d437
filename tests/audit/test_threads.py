"""SideBySide: tasks in threads on the CPU, one after another elsewhere, results and errors in the order asked for."""

from __future__ import annotations

import threading

import pytest
import torch

from rollaudit._audit.engine.threads import SideBySide

MODES = {"threads": torch.device("cpu"), "one after another": torch.device("cuda")}


@pytest.fixture(autouse=True)
def two_torch_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("device", MODES.values(), ids=MODES.keys())
def test_results_come_in_the_order_asked_and_tasks_may_wait_for_earlier_ones(device):
    with SideBySide(device, tasks=4) as work:
        work.start("a", lambda: 1)
        work.start("b", lambda: work.result("a") + 1)  # waits for a task started before it
        work.start(len, lambda: work.result("b") * 10)  # any hashable names a task
        assert work.results([len, "a", "b"]) == {len: 20, "a": 1, "b": 2}


@pytest.mark.parametrize("device", MODES.values(), ids=MODES.keys())
def test_the_first_failing_task_in_the_order_asked_raises(device):
    def fail(message):
        raise ValueError(message)

    ran = []
    with SideBySide(device, tasks=3) as work:
        work.start("first", lambda: fail("first"))
        work.start("second", lambda: fail("second"))
        work.start("third", lambda: ran.append("third") or 3)
        with pytest.raises(ValueError, match="second"):
            work.results(["third", "second", "first"])
        with pytest.raises(ValueError, match="first"):
            work.result("first")
    assert ran == ["third"]  # a failing task does not stop the others


def test_tasks_run_in_threads_on_the_cpu_and_here_on_a_gpu():
    names = {}
    for mode, device in MODES.items():
        with SideBySide(device, tasks=2) as work:
            work.start("where", lambda: threading.current_thread().name)
            names[mode] = work.result("where")
    assert names["threads"].startswith("rollaudit")
    assert names["one after another"] == threading.current_thread().name


def test_one_torch_thread_means_one_after_another():
    torch.set_num_threads(1)
    with SideBySide(torch.device("cpu"), tasks=3) as work:
        work.start("where", lambda: threading.current_thread().name)
        assert work.result("where") == threading.current_thread().name
