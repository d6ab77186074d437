"""Work side by side on the CPU: torch's scatter and gather kernels use one core each, so a second task fills
an idle core. On a GPU, or with one torch thread, tasks run one after another in this thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import torch


class SideBySide:
    """Tasks started by name, their results collected in the order asked for, so that the first failing task of
    that order raises its error, as it would one task after another.

    A task that needs others' results names them in ``after``: it is handed to a thread only once they are done,
    so that no thread sits waiting while there is work another task could do.

    >>> with SideBySide(torch.device("cpu"), tasks=2) as work:
    ...     work.start("a", lambda: 1)
    ...     work.start("b", lambda: work.result("a") + 1, after=["a"])
    ...     work.results(["b", "a"])
    {'b': 2, 'a': 1}
    """

    def __init__(self, device: torch.device, tasks: int) -> None:
        workers = min(tasks, torch.get_num_threads())
        self._pool = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollaudit")
            if device.type == "cpu" and workers >= 2
            else None
        )
        self._started: dict[Hashable, Future] = {}

    def __enter__(self) -> SideBySide:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._pool is not None:
            wait(list(self._started.values()))  # tasks still waiting for others are handed over before the end
            self._pool.shutdown(wait=True)

    def start(self, name: Hashable, task: Callable[[], Any], after: Iterable[Hashable] = ()) -> None:
        """Start ``task`` once the tasks named in ``after`` are done (in a thread where there is a pool; here and
        now otherwise, its error kept for later)."""
        waiting = [self._started[other] for other in after]
        waiting = [future for future in waiting if not future.done()]
        if self._pool is None:
            assert not waiting, "one after another, a task's dependencies are done before it starts"
            done: Future = Future()
            try:
                done.set_result(task())
            except Exception as error:  # raised again by ``result``, in its turn
                done.set_exception(error)
            self._started[name] = done
        elif not waiting:
            self._started[name] = self._pool.submit(task)
        else:
            self._started[name] = self._when_done(waiting, task)

    def _when_done(self, waiting: list[Future], task: Callable[[], Any]) -> Future:
        """A future of ``task``, handed to the pool by whichever of ``waiting`` finishes last."""
        pool, outcome = self._pool, Future()
        assert pool is not None
        left, lock = [len(waiting)], threading.Lock()

        def hand_over(running: Future) -> None:
            if running.cancelled():
                outcome.cancel()
            elif running.exception() is not None:
                outcome.set_exception(running.exception())
            else:
                outcome.set_result(running.result())

        def one_done(_: Future) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                pool.submit(task).add_done_callback(hand_over)

        for future in waiting:
            future.add_done_callback(one_done)
        return outcome

    def result(self, name: Hashable) -> Any:
        """One task's result (waiting for it); its error if it failed."""
        return self._started[name].result()

    def results(self, names: Iterable[Hashable]) -> dict[Hashable, Any]:
        """The results of ``names``, by name, in that order."""
        return {name: self.result(name) for name in names}


__all__ = ["SideBySide"]
