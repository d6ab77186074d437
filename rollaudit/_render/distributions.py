"""Advantage distributions for the terminal: each scheme's advantages as a one-line histogram over the same bins
as the reference's, from the advantages a report kept (``Report.advantages``); nothing when it kept none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._table import ADVANTAGE_PREFIX
from .text import number

if TYPE_CHECKING:
    from .._audit.report import Report

_SPARK = "▁▂▃▄▅▆▇█"

_DISTRIBUTION_MAX_BINS = 40
_DISTRIBUTION_MIN_BINS = 12


def _histogram_spark(counts: Sequence[int]) -> str:
    """One character per bin, its height scaled to the fullest bin; an empty bin is a space, a non-empty one at
    least the lowest bar."""
    top = max(counts, default=0)
    if top <= 0:
        return " " * len(counts)
    levels = len(_SPARK) - 1
    return "".join(" " if n == 0 else _SPARK[round(n / top * levels)] for n in counts)


def distribution_lines(report: Report, width: int = 100) -> list[str] | None:
    """The reference's advantages and each other scheme's as one-line histograms on shared bins, then an axis
    line (low end, 0, high end); None when the report did not keep its advantages (nothing to draw)."""
    advantages = report.advantages
    # The kept table holds the canonical columns too (prompt, trajectory, reward): only ``advantage:<scheme>`` is one.
    kept = {
        column.removeprefix(ADVANTAGE_PREFIX): column
        for column in ([] if advantages is None else advantages.column_names)
        if column.startswith(ADVANTAGE_PREFIX)
    }
    if advantages is None or report.reference not in kept:
        return None
    import numpy as np

    names = [report.reference, *(name for name in kept if name != report.reference)]
    finite = {}
    for name in names:
        column = np.asarray(advantages.column(kept[name]).to_numpy(zero_copy_only=False), dtype=np.float64)
        finite[name] = column[np.isfinite(column)]
    every = np.concatenate([column for column in finite.values()]) if finite else np.zeros(0)
    if every.size == 0:
        return None
    low, high = float(every.min()), float(every.max())
    if low == high:
        low, high = low - 0.5, high + 0.5
    labels = {name: name + (" (ref)" if name == report.reference else "") for name in names}
    label_width = max(len(label) for label in labels.values()) + 1
    bins = max(_DISTRIBUTION_MIN_BINS, min(_DISTRIBUTION_MAX_BINS, width - label_width - 2))
    edges = np.linspace(low, high, bins + 1)
    lines = []
    for name in names:
        counts, _ = np.histogram(finite[name], bins=edges)
        lines.append(f"{labels[name]:<{label_width}} {_histogram_spark([int(n) for n in counts])}".rstrip())
    axis = [" "] * bins
    if low < 0 < high:
        axis[min(bins - 1, int((0 - low) / (high - low) * bins))] = "0"
    left, right = number(low), number(high)
    ruler = "".join(axis)
    ruler = left + ruler[len(left) :]
    ruler = ruler[: bins - len(right)] + right if len(left) + len(right) < bins else f"{left} … {right}"
    lines.append(f"{'':<{label_width}} {ruler}".rstrip())
    return lines
