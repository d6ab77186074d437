"""The figures of a Report: PNGs for ``rollaudit compare --plot DIR``, SVG for the HTML report. matplotlib, Agg,
imported only when asked for.

Each figure is a function ``... -> Figure`` (testable without a file); :func:`figures` makes the set,
``write_plots`` saves them as PNGs atomically and :func:`figure_svg` inlines one in a page. Every PNG carries
its title in its ``Title`` text chunk, so a reader (or a test) can tell what it shows.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .._errors import UsageError
from .._output import write_atomic
from .text import HISTOGRAM_TITLES, percent

if TYPE_CHECKING:
    from .._audit.report import Report

DPI = 150
# A scatter of millions of points says no more than one of a few hundred thousand and takes far longer to draw.
MAX_SCATTER_POINTS = 200_000
# Above this many points a scatter is drawn as an image inside the SVG (still inline), not one element a point.
MAX_VECTOR_POINTS = 5_000
# Above this many steps a per-step line is drawn over bins of consecutive steps (each bin its worst step): a
# figure of 250,000 markers takes far longer to draw and inline than the trend it shows.
MAX_STEP_POINTS = 1_000
ZERO_BAND = 1e-6  # the metrics' zero band: |A| <= 1e-6 is no push
# How each point relates to the reference, drawn in this order (the findings on top), each in its own colour
# and marker (Paul Tol's high-contrast colours: told apart by colour-blind readers and in grey print too).
POINT_KINDS = (
    ("agree", "same sign as the reference", "#bbbbbb", "o"),
    ("lost", "signal lost (reference ≠ 0, scheme 0)", "#0077bb", "v"),
    ("invented", "signal invented (reference 0, scheme ≠ 0)", "#ddaa33", "^"),
    ("reversed", "pushed the opposite way", "#cc3311", "X"),
)
FILES = {
    "group_sizes": "group_sizes.png",
    "advantage_scatter": "advantage_scatter.png",
    "per_step": "per_step.png",
}


def group_sizes_figure(report: Report) -> Figure:
    """The group-size histograms as bar charts: the three, or samples per prompt alone where the dump has no
    trajectory key (a count of trajectories there would be a count of samples)."""
    names = [name for name in HISTOGRAM_TITLES if name in report.histograms] or ["samples_per_prompt"]
    figure = Figure(figsize=(4 * len(names), 3.6), dpi=DPI, layout="constrained")
    axes = figure.subplots(1, len(names), squeeze=False)[0]
    for axis, name in zip(axes, names, strict=True):
        sizes = report.histograms.get(name, {})
        label_of, group_of = HISTOGRAM_TITLES[name].split(" / ")
        if sizes:
            axis.bar([int(size) for size in sizes], list(sizes.values()), width=0.8, color="#4477aa")
        else:
            axis.text(0.5, 0.5, "no groups", ha="center", va="center", transform=axis.transAxes)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.yaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_title(f"{label_of} per {group_of}")
        axis.set_xlabel(f"{label_of} per {group_of}")
        axis.set_ylabel(f"{group_of}s" if not group_of.endswith("y") else f"{group_of[:-1]}ies")
    figure.suptitle(f"Group sizes ({report.info.get('samples', 0):,} samples)")
    return figure


def _every_nth(values: np.ndarray, limit: int) -> tuple[np.ndarray, int]:
    step = max(1, math.ceil(len(values) / limit))
    return values[::step], step


def _step_bins(steps: np.ndarray, limit: int = MAX_STEP_POINTS) -> np.ndarray:
    """Where each bin of consecutive points starts: every point where there are at most ``limit``."""
    return np.arange(0, len(steps), max(1, math.ceil(len(steps) / limit)))


def _binned(values: np.ndarray, starts: np.ndarray, reduce: np.ufunc) -> np.ndarray:
    """``reduce`` (``np.fmax``, ``np.fmin``: NaN only where a whole bin is NaN) over each bin of ``values``."""
    values = np.asarray(values, dtype=np.float64)
    return values[starts] if len(starts) == len(values) else reduce.reduceat(values, starts)


def point_kinds(reference: np.ndarray, scheme: np.ndarray) -> dict[str, np.ndarray]:
    """Masks of :data:`POINT_KINDS` over the samples where both advantages are defined."""
    defined = np.isfinite(reference) & np.isfinite(scheme)
    reference_sign = np.where(np.abs(reference) <= ZERO_BAND, 0, np.sign(reference))
    scheme_sign = np.where(np.abs(scheme) <= ZERO_BAND, 0, np.sign(scheme))
    reversed_ = defined & (reference_sign * scheme_sign < 0)
    invented = defined & (reference_sign == 0) & (scheme_sign != 0)
    lost = defined & (reference_sign != 0) & (scheme_sign == 0)
    return {
        "agree": defined & ~(reversed_ | invented | lost),
        "lost": lost,
        "invented": invented,
        "reversed": reversed_,
    }


def _compared_columns(report: Report, advantages: Mapping[str, np.ndarray]) -> list[str]:
    """The schemes drawn against the reference: every other scheme, and the recorded advantages when kept."""
    others = [name for name in advantages if name != report.reference]
    return others or [report.reference]


def advantage_scatter_figure(report: Report, advantages: Mapping[str, np.ndarray]) -> Figure:
    """Each scheme's advantage (and the recorded one) against the reference's, one panel each; reversed,
    invented, lost and agreeing points in their own colours, with a legend that counts them."""
    reference = report.reference
    others = _compared_columns(report, advantages)
    columns = min(3, len(others))
    rows = math.ceil(len(others) / columns)
    figure = Figure(figsize=(4.4 * columns, 4.4 * rows), dpi=DPI, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).flatten()
    x_all = np.asarray(advantages[reference], dtype=np.float64)
    x, stride = _every_nth(x_all, MAX_SCATTER_POINTS)
    for axis, scheme in zip(axes, others, strict=False):
        y_all = np.asarray(advantages[scheme], dtype=np.float64)
        y, _ = _every_nth(y_all, MAX_SCATTER_POINTS)
        counted = point_kinds(x_all, y_all)
        drawn = point_kinds(x, y)
        for kind, label, colour, marker in POINT_KINDS:
            mask = drawn[kind]
            axis.scatter(
                x[mask],
                y[mask],
                marker=marker,
                s=12 if kind == "agree" else 22,
                alpha=0.5 if kind == "agree" else 0.85,
                color=colour,
                edgecolors="none",
                rasterized=len(x) > MAX_VECTOR_POINTS,
                label=f"{label}: {int(counted[kind].sum()):,}",
            )
        finite = np.concatenate([x[np.isfinite(x)], y[np.isfinite(y)]])
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (-1.0, 1.0)
        pad = 0.05 * (high - low or 1.0)
        axis.plot([low - pad, high + pad], [low - pad, high + pad], color="grey", linewidth=0.8, linestyle="--")
        axis.axhline(0, color="black", linewidth=0.5)
        axis.axvline(0, color="black", linewidth=0.5)
        flips = report.summary.loc[scheme, "sign_flip_rate"] if scheme in report.summary.index else float("nan")
        axis.set_title(f"{scheme}: {percent(flips)} sign flips")
        axis.set_xlabel(f"advantage under {reference} (reference)")
        axis.set_ylabel(f"advantage under {scheme}")
        # "best" tests every point against every place the legend could go: seconds for a large sample.
        axis.legend(loc="best" if len(x) <= MAX_VECTOR_POINTS else "upper left", fontsize="x-small", framealpha=0.85)
    for axis in axes[len(others) :]:
        axis.set_visible(False)
    sampled = f"; every {stride}th of {len(x_all):,} samples" if stride > 1 else f"; {len(x_all):,} samples"
    figure.suptitle(f"Advantage under each scheme against the reference {reference}{sampled}")
    return figure


def per_step_figure(report: Report) -> Figure:
    """Sign-flip rate and non-zero inflation per step, one line per scheme other than the reference, and the
    spread of prompt-group sizes per step (smallest, median, largest)."""
    figure = Figure(figsize=(15, 4), dpi=DPI, layout="constrained")
    flip_axis, inflation_axis, size_axis = figure.subplots(1, 3)
    per_step = report.per_step.reset_index()
    binned = ""
    for scheme in per_step["scheme"].drop_duplicates():  # the recorded advantages too, when the dump has them
        if scheme == report.reference:
            continue
        rows = per_step[per_step["scheme"] == scheme].sort_values("step")
        steps = rows["step"].to_numpy()
        starts = _step_bins(steps)
        if len(starts) < len(steps):
            binned = f"; each point the worst of {math.ceil(len(steps) / len(starts)):,} steps"
        flips = _binned(rows["sign_flip_rate"].to_numpy() * 100, starts, np.fmax)
        inflation = _binned(rows["nonzero_inflation"].to_numpy(), starts, np.fmax)
        flip_axis.plot(steps[starts], flips, marker="o", markersize=3, label=scheme)
        inflation_axis.plot(steps[starts], inflation, marker="o", markersize=3, label=scheme)
    flip_axis.set_title(f"Sign-flip rate against {report.reference}")
    flip_axis.set_xlabel("step")
    flip_axis.set_ylabel("samples whose sign differs (%)")
    inflation_axis.set_title(f"Non-zero inflation against {report.reference}")
    inflation_axis.set_xlabel("step")
    inflation_axis.set_ylabel(f"non-zero advantages / non-zero under {report.reference}")
    inflation_axis.axhline(1, color="grey", linewidth=0.8, linestyle="--")
    groups = report.step_groups.sort_index()
    if not groups.empty:
        # Bins keep each bin's smallest and largest group, and the median of its first step.
        starts = _step_bins(groups.index.to_numpy())
        where = groups.index.to_numpy()[starts]
        smallest = _binned(groups["smallest_group"].to_numpy(), starts, np.fmin)
        largest = _binned(groups["largest_group"].to_numpy(), starts, np.fmax)
        size_axis.fill_between(where, smallest, largest, alpha=0.25, label="range")
        size_axis.plot(where, groups["median_group"].to_numpy()[starts], marker="o", markersize=3, label="median")
    size_axis.set_title("Prompt-group sizes")
    size_axis.set_xlabel("step")
    size_axis.set_ylabel("samples per prompt")
    for axis in (flip_axis, inflation_axis, size_axis):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize="small")
    steps = len(report.info.get("step_values", []))
    figure.suptitle(f"Per step ({steps:,} step{'s' if steps != 1 else ''}{binned})")
    return figure


def save_png(figure: Figure, path: Path) -> Path:
    """Save atomically, the figure's title in the PNG's Title chunk."""
    title = figure.get_suptitle()

    def draw(temporary: Path) -> None:
        figure.savefig(temporary, format="png", metadata={"Title": title, "Software": "rollaudit"})

    return write_atomic(path, draw)


def figures(report: Report) -> dict[str, Figure]:
    """The report's figures by name (:data:`FILES`): the scatter only when the report kept its advantages, the
    per-step figure only for a run of several steps."""
    made = {"group_sizes": group_sizes_figure(report)}
    if report.advantages is not None:
        advantages = {name: report.advantages.column(name).to_numpy() for name in report.advantages.column_names}
        made["advantage_scatter"] = advantage_scatter_figure(report, advantages)
    if len(report.info.get("step_values", [])) > 1:
        made["per_step"] = per_step_figure(report)
    return made


def write_plots(report: Report, directory: Path) -> list[Path]:
    """Write the PNGs into ``directory`` (made, with its parents, if missing); returns their paths. ``report``
    must hold its advantages (``rollaudit.audit(..., keep_advantages=True)``)."""
    if report.advantages is None:
        raise UsageError(
            "the report holds no advantages to plot", expected="rollaudit.audit(..., keep_advantages=True)"
        )
    made = figures(report)
    if "per_step" not in made:
        made["per_step"] = per_step_figure(report)  # one point a scheme: the PNG set is always the same three
    directory.mkdir(parents=True, exist_ok=True)
    return [save_png(figure, directory / FILES[name]) for name, figure in made.items()]


_SVG_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.DOTALL)
_SVG_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)


def figure_svg(figure: Figure, name: str) -> str:
    """The figure as an inline ``<svg>`` element: text kept as text, no XML prologue or RDF metadata, and ids
    salted with ``name`` so that several figures in one page never share one."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"rollaudit-{name}"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = _SVG_METADATA.sub("", _SVG_PROLOGUE.sub("", buffer.getvalue(), count=1), count=1)
    return svg.replace("<svg ", f'<svg role="img" aria-label="{html.escape(figure.get_suptitle())}" ', 1)


__all__ = [
    "FILES",
    "advantage_scatter_figure",
    "figure_svg",
    "figures",
    "group_sizes_figure",
    "per_step_figure",
    "point_kinds",
    "save_png",
    "write_plots",
]
