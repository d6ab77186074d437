"""Advantage distributions for the terminal: each scheme's advantages as a one-line histogram over the same bins
as the reference's, from the counts every report holds (``Report.distributions``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .text import number
from .trend import SPARK

if TYPE_CHECKING:
    from .._audit.report import Report

_DISTRIBUTION_MAX_BINS = 40
_DISTRIBUTION_MIN_BINS = 12


def _histogram_spark(counts: Sequence[int]) -> str:
    """One character per bin, its height scaled to the fullest bin; an empty bin is a space, a non-empty one at
    least the lowest bar."""
    top = max(counts, default=0)
    if top <= 0:
        return " " * len(counts)
    levels = len(SPARK) - 1
    return "".join(" " if n == 0 else SPARK[round(n / top * levels)] for n in counts)


def distribution_lines(report: Report, width: int = 100) -> list[str] | None:
    """The reference's advantages and each other row's as one-line histograms on shared bins, then an axis line
    (low end, 0, high end); None when the report has no distributions (no finite advantage)."""
    distributions = report.distributions
    if distributions is None:
        return None
    names = list(distributions.counts)
    labels = {name: name + (" (ref)" if name == report.reference else "") for name in names}
    label_width = max(len(label) for label in labels.values()) + 1
    room = max(_DISTRIBUTION_MIN_BINS, min(_DISTRIBUTION_MAX_BINS, width - label_width - 2))
    bins = max(count for count in range(_DISTRIBUTION_MIN_BINS, room + 1) if distributions.BINS % count == 0)
    counts = distributions.merged(bins)
    lines = [f"{labels[name]:<{label_width}} {_histogram_spark(counts[name])}".rstrip() for name in names]
    low, high = distributions.low, distributions.high
    axis = [" "] * bins
    if low < 0 < high:
        axis[min(bins - 1, int((0 - low) / (high - low) * bins))] = "0"
    left, right = number(low), number(high)
    ruler = "".join(axis)
    ruler = left + ruler[len(left) :]
    ruler = ruler[: bins - len(right)] + right if len(left) + len(right) < bins else f"{left} … {right}"
    lines.append(f"{'':<{label_width}} {ruler}".rstrip())
    return lines
