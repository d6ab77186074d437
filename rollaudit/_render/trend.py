"""The trend per step, shared by the renderers: each scheme's share of changed signs as a sparkline, and the steps
where the schemes flip the most."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .text import count, percent, ratio, undefined

if TYPE_CHECKING:
    from .._audit.report import Report

SPARK = "▁▂▃▄▅▆▇█"
"""A sparkline's eight heights, lowest first."""
# A sparkline never wider than this, whatever the terminal: a trend, not a chart.
_SPARK_MAX_WIDTH = 60
_SPARK_MIN_WIDTH = 8


def resample(values: Sequence[float], width: int) -> list[float]:
    """At most ``width`` values: consecutive runs of the series, each its largest defined value (a spike stays
    visible), NaN for a run with none."""
    if len(values) <= width:
        return list(values)
    out = []
    for index in range(width):
        run = values[index * len(values) // width : (index + 1) * len(values) // width]
        defined = [value for value in run if not undefined(value)]
        out.append(max(defined) if defined else math.nan)
    return out


def sparkline(values: Sequence[float]) -> str:
    """One character per value, scaled from 0 to the largest; undefined values are a space."""
    defined = [value for value in values if not undefined(value)]
    top = max(defined, default=0.0)
    if top <= 0:
        return "".join(" " if undefined(value) else SPARK[0] for value in values)
    return "".join(
        " " if undefined(value) else SPARK[min(len(SPARK) - 1, int(value / top * (len(SPARK) - 1) + 0.5))]
        for value in values
    )


def has_trend(report: Report) -> bool:
    """Whether the report has a trend to show: several steps, each with its numbers."""
    return len(report.info.get("step_values", [])) > 1 and not report.per_step_table.empty


def trend_lines(report: Report, width: int = 100) -> list[str]:
    """Per scheme, one line: its sign-flip rate over the steps as a sparkline (runs of steps resampled to fit
    ``width`` columns), then the first and last step's rates and the largest: ``53.8% at step 0 → 0.0% at
    step 5, max 53.8%``, so the words read the way the bars go."""
    table = report.per_step_table
    all_schemes, all_steps = table.column("scheme"), table.column("step")
    series = []
    for scheme in dict.fromkeys(all_schemes.tolist()):
        if scheme == report.reference:
            continue
        rows = np.flatnonzero(all_schemes == scheme)
        rows = rows[np.argsort(all_steps[rows], kind="stable")]
        rates, steps = table.column("sign_flip_rate")[rows].tolist(), all_steps[rows].tolist()
        defined = [(step, rate) for step, rate in zip(steps, rates, strict=True) if not undefined(rate)]
        if defined:
            (first_step, first), (last_step, last) = defined[0], defined[-1]
            label = (
                f"{percent(first)} at step {first_step} → {percent(last)} at step {last_step}, "
                f"max {percent(max(rate for _, rate in defined))}"
                if len(defined) > 1
                else f"{percent(first)} at step {first_step}, the one step with values"
            )
            series.append((scheme, rates, label))
    name_width = max((len(scheme) for scheme, _, _ in series), default=0) + 1
    label_width = max((len(label) for _, _, label in series), default=0)
    room = max(_SPARK_MIN_WIDTH, min(_SPARK_MAX_WIDTH, width - name_width - label_width - 4))
    lines = []
    for scheme, rates, label in series:
        bars = sparkline(resample(rates, room))
        lines.append(f"{scheme + ':':<{name_width}} {bars:<{min(room, len(rates))}}  {label}")
    return lines


def trend_section(report: Report, top: int) -> tuple[str, list[str], list[list[str]]] | None:
    """(title, header, rows) of the worst steps of a run, or None for a single step or no flips."""
    if not has_trend(report) or top <= 0:
        return None
    steps = len(report.info["step_values"])
    flipped = report.worst_step_table(steps)  # every step whose sign differs somewhere, worst first
    worst = flipped.head(top)
    if worst.empty:
        return None
    schemes = [column.split(":", 1)[1] for column in worst.names if column.startswith("sign_flip_rate:")]
    header = ["step", "samples", "prompts", "group\nsizes"]
    for scheme in schemes:
        header += [f"{scheme}\nchanged", f"{scheme}\ninflation"]
    rows = []
    for step, row in worst.rows():
        sizes = "n/a"
        if "smallest_group" in row:
            sizes = f"{count(row['smallest_group'])}–{count(row['largest_group'])}"
        cells = [str(step), count(row.get("samples")), count(row.get("prompts")), sizes]
        for scheme in schemes:
            cells += [percent(row[f"sign_flip_rate:{scheme}"]), ratio(row[f"nonzero_inflation:{scheme}"])]
        rows.append(cells)
    title = f"Worst steps: {len(flipped):,} of {steps:,} steps have samples whose sign differs from {report.reference}"
    if len(rows) < len(flipped):
        title += f" (top {len(rows)})"
    return title, header, rows
