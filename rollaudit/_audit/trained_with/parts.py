"""A scheme per part of a run: where no one preset explains the recorded advantages of a whole dump, which preset
explains each step range, and each environment where the framework configures its estimator per environment.

Real runs change: a mid-run upgrade, an algorithm per environment. The fit of every candidate scheme is counted per
cell (a step, within an environment where the dump names one: :class:`~.cells.CellFits`), and the cells are put
together:

- per environment first, where the framework sets its estimator per environment (the table's ``estimator_per``
  fact names the column): an environment one scheme fits whole is one part;
- else per step: consecutive steps that one scheme fits merge (the schemes every step of the part matches, the
  part's scheme the one with the least error, ties in the order the schemes were fitted, the framework's default
  first); a step no scheme matches starts a part of its own, and consecutive such steps merge;
- where the last steps of a part fit the next part's scheme as well, the recorded values cannot say on which of
  them the scheme changed: those steps are a part of their own, undetermined, never given to either side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .cells import CellFits
from .trained import Part


@dataclass
class _Run:
    """Consecutive steps (codes) of one environment and the schemes every one of them matches."""

    steps: list[int]
    matching: list[str]
    undetermined: tuple[str, str] | None = None


def _error_text(value: float) -> str:
    return "∞" if not np.isfinite(value) else f"{value:.2g}"


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


class _Table:
    """The cell fits looked up by (environment code, step code)."""

    def __init__(self, fits: CellFits, steps: int) -> None:
        self.fits, self.steps = fits, steps
        self.index = {int(cell): place for place, cell in enumerate(fits.cells)}
        self.order = list(fits.misses)

    def places(self, where: int, steps: Sequence[int]) -> np.ndarray:
        return np.array([self.index[where * self.steps + step] for step in steps], dtype=np.int64)

    def steps_of(self, where: int) -> list[int]:
        return [step for step in range(self.steps) if where * self.steps + step in self.index]

    def matching(self, places: np.ndarray) -> list[str]:
        """The schemes within tolerance on every recorded row of these cells, as :func:`~.fit.detect_scheme` ranks
        them: by tier (the dump's own framework's presets first), then least error (ties in fit order)."""
        found = [name for name in self.order if int(self.fits.misses[name][places].sum()) == 0]
        return sorted(
            found, key=lambda name: (self.fits.tiers.get(name, 1), float(self.fits.error_sum[name][places].sum()))
        )

    def closest(self, places: np.ndarray) -> tuple[str, float] | None:
        """The scheme with the most rows within tolerance on these cells, and that share."""
        if not self.order:
            return None
        rows = max(int(self.fits.rows[places].sum()), 1)

        def rank(name: str) -> tuple[int, float]:
            return int(self.fits.misses[name][places].sum()), float(self.fits.error_sum[name][places].sum())

        best = min(self.order, key=rank)
        return best, 1.0 - int(self.fits.misses[best][places].sum()) / rows


def _runs(table: _Table, where: int) -> list[_Run]:
    """The steps of one environment in runs that one scheme fits (see the module's rules)."""
    each = {step: table.matching(table.places(where, [step])) for step in table.steps_of(where)}
    runs: list[_Run] = []
    for step, matching in each.items():
        last = runs[-1] if runs else None
        if last is not None and (shared := [name for name in last.matching if name in matching]):
            last.steps.append(step)
            last.matching = shared
        elif last is not None and not last.matching and not matching:
            last.steps.append(step)  # consecutive steps that match nothing: one part
        else:
            runs.append(_Run([step], matching))
    # A part's last steps that fit the next part's scheme too: the change falls somewhere in them. (Not all of its
    # steps: the next part's first step would have joined it.)
    settled: list[_Run] = []
    for run, following in zip(runs, [*runs[1:], None], strict=True):
        ahead = following.matching[0] if following is not None and following.matching and run.matching else None
        tail = 0
        while ahead is not None and tail < len(run.steps) and ahead in each[run.steps[len(run.steps) - 1 - tail]]:
            tail += 1
        if tail == 0:
            settled.append(run)
            continue
        head = run.steps[: len(run.steps) - tail]
        settled.append(_Run(head, table.matching(table.places(where, head))))
        settled.append(_Run(run.steps[len(head) :], [], undetermined=(settled[-1].matching[0], str(ahead))))
    return settled


def _part(table: _Table, run: _Run, where: int, step_values: np.ndarray, label: str | None) -> Part:
    places = table.places(where, run.steps)
    samples = int(table.fits.rows[places].sum())
    first, last = int(step_values[run.steps[0]]), int(step_values[run.steps[-1]])
    rows = _plural(samples, "sample")
    if run.undetermined is not None:
        before, after = run.undetermined
        why = (
            f"the recorded advantages of these steps ({rows}) fit {before} and {after} alike, so the change from "
            f"{before} to {after} happened on one of them"
        )
        return Part((first, last), label, None, "recorded", why, samples, undetermined=True)
    if run.matching:
        scheme = run.matching[0]
        error = float(table.fits.max_error[scheme][places].max())
        why = f"the recorded advantages of its {rows} match it: max err {_error_text(error)}"
        return Part((first, last), label, scheme, "recorded", why, samples)
    closest = table.closest(places)
    why = "the recorded advantages match no preset"
    if closest is not None:
        why += f"; closest: {closest[0]}, with {closest[1]:.1%} of {rows} within tolerance"
    return Part((first, last), label, None, "recorded", why, samples)


def split_parts(fits: CellFits, step_values: np.ndarray, where_labels: Sequence[str] | None = None) -> tuple[Part, ...]:
    """The parts of a run no one scheme fits whole (see the module's rules): ``fits`` counted per cell, a cell
    being ``where * len(step_values) + step`` (step codes index ``step_values``); ``where_labels`` names each
    environment code (``env = delegate``), None where the run is split by steps alone."""
    table = _Table(fits, len(step_values))
    parts: list[Part] = []
    for where, label in enumerate(where_labels or [None]):
        steps = table.steps_of(where)
        if not steps:
            continue
        whole = table.matching(table.places(where, steps))
        if where_labels is not None and whole:
            parts.append(_part(table, _Run(steps, whole), where, step_values, label))
            continue
        parts += [_part(table, run, where, step_values, label) for run in _runs(table, where)]
    return tuple(parts)


__all__ = ["split_parts"]
