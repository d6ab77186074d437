"""Work side by side on the CPU: torch's scatter and gather kernels use one core each, so a second task fills
an idle core. On a GPU, or with one torch thread, tasks run one after another in this thread."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch


class SideBySide:
    """Tasks started by name (plain words), their results collected in the order asked for, so that the first
    failing task of that order raises its error, as it would one task after another.

    >>> with SideBySide(torch.device("cpu"), tasks=2) as work:
    ...     work.start("a", lambda: 1)
    ...     work.start("b", lambda: 2)
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
        self._started: dict[str, Future] = {}

    def __enter__(self) -> SideBySide:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def start(self, name: str, task: Callable[[], Any]) -> None:
        """Start ``task`` (in a thread where there is a pool; here and now otherwise, its error kept for later)."""
        if self._pool is not None:
            self._started[name] = self._pool.submit(task)
            return
        done: Future = Future()
        try:
            done.set_result(task())
        except Exception as error:  # raised again by ``result``, in its turn
            done.set_exception(error)
        self._started[name] = done

    def result(self, name: str) -> Any:
        """One task's result (waiting for it); its error if it failed."""
        return self._started[name].result()

    def forget(self, name: str) -> None:
        """Let go of a finished task's result (its memory, where nothing else holds it)."""
        self._started.pop(name).result()

    def results(self, names: Iterable[str]) -> dict[str, Any]:
        """The results of ``names``, by name, in that order."""
        return {name: self.result(name) for name in names}


__all__ = ["SideBySide"]
