"""SideBySide: tasks in threads on the CPU, one after another elsewhere, results and errors in the order asked for."""

from __future__ import annotations

import threading

import pytest
import torch

from rollaudit._audit.threads import SideBySide

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


@pytest.mark.parametrize("device", MODES.values(), ids=MODES.keys())
def test_a_task_after_others_starts_once_they_are_done_and_no_thread_waits_meanwhile(device):
    release = threading.Event()
    order = []

    def slow():
        release.wait(2)
        order.append("slow")
        return 1

    with SideBySide(device, tasks=2) as work:
        if device.type == "cpu":
            work.start("slow", slow)
            work.start("after", lambda: order.append("after") or work.result("slow") + 1, after=["slow"])
            # Both threads are free for other work while "after" waits: this runs, and finishes, first.
            work.start("free", lambda: order.append("free") or 3)
            assert work.result("free") == 3
            assert "slow" not in order  # it ran beside "slow", not after it
            release.set()
        else:  # one after another: each task's dependencies are done when it starts
            release.set()
            work.start("slow", slow)
            work.start("after", lambda: order.append("after") or work.result("slow") + 1, after=["slow"])
        assert work.result("after") == 2
    assert order.index("slow") < order.index("after")


def test_a_task_after_a_failed_one_still_runs_and_the_end_waits_for_every_task():
    def fail():
        raise ValueError("first")

    ran = []
    with SideBySide(torch.device("cpu"), tasks=2) as work:
        work.start("fail", fail)
        work.start("after", lambda: ran.append("after") or work.result("fail"), after=["fail"])
        work.start("last", lambda: ran.append("last"), after=["after"])
    # Leaving the block waited for tasks that were still waiting for others, errors kept for their callers.
    assert sorted(ran) == ["after", "last"]
    with pytest.raises(ValueError, match="first"):
        work.result("after")
