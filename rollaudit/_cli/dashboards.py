"""``--tensorboard`` and ``--wandb``: the audit's per-step scalars on the dashboards beside the trainer's curves.

Each dashboard is checked before anything is loaded (its package installed, its directory usable) and opened at the
first step it gets, so that a command that fails early leaves no empty event file or run. ``compare`` and ``gate``
write every step of their report; ``watch`` writes each step as it is audited, flushed at once (Ctrl-C loses
nothing written), and a watch started again with ``--jsonl`` audits, and so writes, no step twice.
"""

from __future__ import annotations

import glob
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .io import echo_status
from .options import DashboardOptions

if TYPE_CHECKING:
    from .._audit.report import Report
    from .._render.dashboards.dashboard import StepScalars


def run_name(inputs: Sequence[str | Path]) -> str:
    """The run directory's name: the first input's own where it is a directory, else its parent's (a glob's part
    before its first pattern)."""
    path = Path(inputs[0]) if inputs else Path(".")
    while glob.has_magic(path.name) and path != path.parent:
        path = path.parent
    resolved = path.resolve()
    return resolved.name if resolved.is_dir() else resolved.parent.name


class Dashboards:
    """The dashboards one command writes to."""

    def __init__(
        self, options: DashboardOptions, *, group: str, config: Mapping[str, Any], quiet: bool = False
    ) -> None:
        self.writers: list[Any] = []
        self._last_text: list[dict[str, str]] = []
        self._event_log: dict[str, str] | None = None
        if options.tensorboard is not None:
            from .._render.dashboards.tensorboard_events import EventFile, check_directory

            self.writers.append(EventFile(check_directory(options.tensorboard)))
            self._event_log = {}
            self._last_text.append(self._event_log)
        if options.wandb_project is not None:
            from .._render.dashboards.wandb_run import WandbRun

            def started(line: str) -> None:
                echo_status(line, quiet)

            self.writers.append(WandbRun(options.wandb_project, options.wandb_group or group, config, started))
            self._last_text.append({})  # a run of its own: it says the scheme at its first step

    def resume(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Go on from an earlier watch of the run (its ``--jsonl`` records): the event log, which TensorBoard reads
        with the earlier watch's, does not say the run's scheme again where it has not changed. A W&B run is new:
        it says it at its first step."""
        from .._render.dashboards.dashboard import SCHEME_TAG, recorded_scheme_text

        scheme = recorded_scheme_text(records)
        if self._event_log is not None and scheme is not None:
            self._event_log[SCHEME_TAG] = scheme

    def __enter__(self) -> Dashboards:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def write(self, step: StepScalars) -> None:
        """One step on every dashboard; a text (the run's scheme) only where it changed on that dashboard."""
        from .._render.dashboards.dashboard import StepScalars

        for writer, last in zip(self.writers, self._last_text, strict=True):
            texts = {tag: text for tag, text in step.texts.items() if last.get(tag) != text}
            last.update(texts)
            writer.write(StepScalars(step.step, step.scalars, texts))

    def write_report(self, report: Report) -> None:
        """Every step of ``report``, in step order."""
        from .._render.dashboards.dashboard import report_scalars

        for step in report_scalars(report):
            self.write(step)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


def open_dashboards(
    options: DashboardOptions, *, inputs: Sequence[str | Path], config: Mapping[str, Any], quiet: bool = False
) -> Dashboards | None:
    """The command's dashboards, checked now, or None where none is asked for."""
    if not options.any:
        return None
    from .._version import __version__

    return Dashboards(options, group=run_name(inputs), config={"rollaudit_version": __version__, **config}, quiet=quiet)
