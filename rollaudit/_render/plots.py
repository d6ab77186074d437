"""The figures of a Report: PNGs for ``rollaudit compare --plot DIR``, SVG for the HTML report. matplotlib, Agg,
imported only when asked for.

Each figure is a function ``... -> Figure`` (testable without a file); :func:`figures` makes the set,
``write_plots`` saves them as PNGs atomically, :func:`figure_svg` inlines one in a page and :func:`panel_svgs`
gives a page each figure's panels as separate SVGs, to lay out side by side or one under the other. Every PNG carries
its title in its ``Title`` text chunk, so a reader (or a test) can tell what it shows.
"""

from __future__ import annotations

import html
import io
import itertools
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .._errors import UsageError
from .._output import write_atomic
from .findings import ordered
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
# Histograms of advantages: no more bins than this (the "auto" rule's choice when it asks for fewer).
MAX_DISTRIBUTION_BINS = 40
# Up to this many distinct group sizes, a tick (and, where there is room, a label) under every bar.
MAX_LABELLED_SIZES = 12
MIN_SIZE_SPAN = 5.0
ZERO_BAND = 1e-6  # the metrics' zero band: |A| <= 1e-6 is no push
# How each point relates to the reference, drawn in this order (the findings on top), each in its own colour
# and marker (Paul Tol's high-contrast colours: told apart by colour-blind readers and in grey print too).
POINT_KINDS = (
    ("agree", "same sign as the reference", "#bbbbbb", "o"),
    ("lost", "lost (reference ≠ 0, scheme 0)", "#0077bb", "v"),
    ("invented", "invented (reference 0, scheme ≠ 0)", "#ddaa33", "^"),
    ("reversed", "reversed (+ became − or back)", "#cc3311", "X"),
)
# The samples a finding's examples name, ringed over the points: one marker a finding, in the legend by its code.
FINDING_MARKERS = ("o", "s", "D", "p", "h")
FILES = {
    "group_sizes": "group_sizes.png",
    "advantage_scatter": "advantage_scatter.png",
    "advantage_distribution": "advantage_distribution.png",
    "per_step": "per_step.png",
}


def _size_ticks(axis: Axes, counts: Mapping[int, int]) -> None:
    """Whole-number ticks under the bars: one at each size present when there are few (labelled where there is
    room, the most common first), else integer ticks from the locator, which land on bar centres too."""
    sizes = list(counts)
    if not sizes or len(sizes) > MAX_LABELLED_SIZES:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        return
    low, high = min(sizes) - 0.6, max(sizes) + 0.6
    # At least five sizes wide, so that one or two bars stay bars rather than fill the panel.
    widen = max(0.0, MIN_SIZE_SPAN - (high - low)) / 2
    low, high = low - widen, high + widen
    axis.set_xlim(low, high)
    # Room for a label, in data units: its digits' width (about 0.09 inch each) and a gap, on a ~3.3 inch axis.
    room = (high - low) * (0.09 * max(len(str(size)) for size in sizes) + 0.06) / 3.3
    # The most common sizes are labelled first, then any other where there is room.
    labelled: list[int] = []
    for size in sorted(sizes, key=lambda size: -counts.get(size, 0)):
        if all(abs(size - other) >= room for other in labelled):
            labelled.append(size)
    labels = [str(size) if size in labelled else "" for size in sorted(sizes)]
    axis.set_xticks(sorted(sizes), labels)


def _group_size_panels(report: Report) -> list[Callable[[Axes], None]]:
    """One bar chart a histogram: the three, or samples per prompt alone where the dump has no trajectory key
    (a count of trajectories there would be a count of samples)."""
    names = [name for name in HISTOGRAM_TITLES if name in report.histograms] or ["samples_per_prompt"]

    def panel(name: str) -> Callable[[Axes], None]:
        def draw(axis: Axes) -> None:
            sizes = report.histograms.get(name, {})
            label_of, group_of = HISTOGRAM_TITLES[name].split(" / ")
            if sizes:
                axis.bar([int(size) for size in sizes], list(sizes.values()), width=0.8, color="#4477aa")
            else:
                axis.text(0.5, 0.5, "no groups", ha="center", va="center", transform=axis.transAxes)
            _size_ticks(axis, {int(size): number_of for size, number_of in sizes.items()})
            axis.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
            axis.set_title(f"{label_of} per {group_of}")
            axis.set_xlabel(f"{label_of} per {group_of}")
            axis.set_ylabel(f"{group_of}s" if not group_of.endswith("y") else f"{group_of[:-1]}ies")

        return draw

    return [panel(name) for name in names]


def _group_sizes_title(report: Report) -> str:
    return f"Group sizes ({report.info.get('samples', 0):,} samples)"


def _composed(title: str, panels: list[Callable[[Axes], None]], panel_size: tuple[float, float], most: int) -> Figure:
    """The panels side by side, at most ``most`` a row, under ``title``."""
    columns = max(1, min(most, len(panels)))
    rows = max(1, math.ceil(len(panels) / columns))
    width, height = panel_size
    figure = Figure(figsize=(width * columns, height * rows), dpi=DPI, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).flatten()
    for axis, draw in zip(axes, panels, strict=False):
        draw(axis)
    for axis in axes[len(panels) :]:
        axis.set_visible(False)
    figure.suptitle(title)
    return figure


def group_sizes_figure(report: Report) -> Figure:
    """The group-size histograms as bar charts, side by side."""
    return _composed(_group_sizes_title(report), _group_size_panels(report), (4, 3.6), 3)


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


def named_samples(report: Report, samples: int) -> list[tuple[str, np.ndarray]]:
    """``(code, row numbers)`` of each finding whose examples name rows of the ``samples`` drawn, most severe
    first."""
    named = []
    for finding in ordered(report):
        rows = {row for example in finding.examples for row in example.rows if 0 <= row < samples}
        if rows:
            named.append((finding.code, np.array(sorted(rows), dtype=np.int64)))
    return named


def _scatter_panels(report: Report, advantages: Mapping[str, np.ndarray]) -> tuple[str, list[Callable[[Axes], None]]]:
    """The scatter's title and one panel a compared scheme."""
    reference = report.reference
    x_all = np.asarray(advantages[reference], dtype=np.float64)
    x, stride = _every_nth(x_all, MAX_SCATTER_POINTS)
    named = named_samples(report, len(x_all))

    def panel(scheme: str) -> Callable[[Axes], None]:
        def draw(axis: Axes) -> None:
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
            # Every named sample, however the points above were thinned: there are a few of them.
            for (code, rows), marker in zip(named, itertools.cycle(FINDING_MARKERS)):
                axis.scatter(
                    x_all[rows],
                    y_all[rows],
                    marker=marker,
                    s=60,
                    facecolors="none",
                    edgecolors="black",
                    linewidths=1.0,
                    label=f"named by {code}: {len(rows):,}",
                )
            finite = np.concatenate([x[np.isfinite(x)], y[np.isfinite(y)]])
            low, high = (float(finite.min()), float(finite.max())) if finite.size else (-1.0, 1.0)
            pad = 0.05 * (high - low or 1.0)
            axis.plot([low - pad, high + pad], [low - pad, high + pad], color="grey", linewidth=0.8, linestyle="--")
            axis.axhline(0, color="black", linewidth=0.5)
            axis.axvline(0, color="black", linewidth=0.5)
            flips = report.summary.loc[scheme, "sign_flip_rate"] if scheme in report.summary.index else float("nan")
            axis.set_title(f"{scheme}: {percent(flips)} signs changed")
            axis.set_xlabel(f"advantage under {reference} (reference)")
            axis.set_ylabel(f"advantage under {scheme}")
            # "best" tests every point against every place the legend could go: seconds for a large sample.
            axis.legend(
                loc="best" if len(x) <= MAX_VECTOR_POINTS else "upper left", fontsize="x-small", framealpha=0.85
            )

        return draw

    sampled = f"; every {stride}th of {len(x_all):,} samples" if stride > 1 else f"; {len(x_all):,} samples"
    title = f"Advantage under each scheme against the reference {reference}{sampled}"
    return title, [panel(scheme) for scheme in _compared_columns(report, advantages)]


def advantage_scatter_figure(report: Report, advantages: Mapping[str, np.ndarray]) -> Figure:
    """Each scheme's advantage (and the recorded one) against the reference's, one panel each; reversed,
    invented, lost and agreeing points in their own colours, with a legend that counts them."""
    title, panels = _scatter_panels(report, advantages)
    return _composed(title, panels, (4.4, 4.4), 3)


def _distribution_edges(values: list[np.ndarray]) -> np.ndarray:
    """Bin edges shared by every scheme's histogram, so that bars line up with the reference's outline."""
    finite = np.concatenate([column[np.isfinite(column)] for column in values])
    if not finite.size:
        return np.linspace(-1.0, 1.0, 11)
    low, high = float(finite.min()), float(finite.max())
    if high - low < ZERO_BAND:
        return np.linspace(low - 0.5, high + 0.5, 11)
    width = float(np.diff(np.histogram_bin_edges(finite, bins="auto")[:2])[0])
    width = max(width, (high - low) / MAX_DISTRIBUTION_BINS)
    # Bins centred on whole multiples of their width: zero (no push) is a bin of its own, its centre.
    first, last = math.floor(low / width + 0.5), math.ceil(high / width - 0.5)
    return (np.arange(first, last + 2) - 0.5) * width


def _distribution_panels(
    report: Report, advantages: Mapping[str, np.ndarray]
) -> tuple[str, list[Callable[[Axes], None]]]:
    """The distributions' title and one panel a compared scheme."""
    reference = report.reference
    columns = {name: np.asarray(values, dtype=np.float64) for name, values in advantages.items()}
    edges = _distribution_edges(list(columns.values())).tolist()
    reference_values = columns[reference]

    def panel(scheme: str) -> Callable[[Axes], None]:
        def draw(axis: Axes) -> None:
            values = columns[scheme]
            # Both over the same samples: the recorded advantages only cover the samples the trainer kept.
            shared = np.isfinite(values) & np.isfinite(reference_values)
            axis.hist(
                values[shared], bins=edges, color="#4477aa", alpha=0.7, label=f"{scheme}: {shared.sum():,} samples"
            )
            axis.hist(
                reference_values[shared],
                bins=edges,
                histtype="step",
                color="black",
                linewidth=1.2,
                label=f"{reference} (reference), same samples",
            )
            axis.axvline(0, color="grey", linewidth=0.6, linestyle=":")
            axis.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
            axis.set_title(f"{scheme} against {reference}")
            axis.set_xlabel("advantage")
            axis.set_ylabel("samples")
            axis.legend(fontsize="x-small", framealpha=0.85)

        return draw

    title = f"Advantage distributions against the reference {reference} ({len(reference_values):,} samples)"
    return title, [panel(scheme) for scheme in _compared_columns(report, advantages)]


def advantage_distribution_figure(report: Report, advantages: Mapping[str, np.ndarray]) -> Figure:
    """Histograms of the advantages, one panel a scheme (and the recorded ones when kept): the scheme's
    values filled, the reference's drawn as an outline over the same bins."""
    title, panels = _distribution_panels(report, advantages)
    return _composed(title, panels, (4.4, 3.6), 3)


def _per_step_panels(report: Report) -> tuple[str, list[Callable[[Axes], None]]]:
    """Sign-flip rate and non-zero inflation per step, one line per scheme other than the reference, and the
    spread of prompt-group sizes per step (smallest, median, largest)."""
    per_step = report.per_step.reset_index()
    lines: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
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
        lines.append((scheme, steps[starts], flips, inflation))

    def finish(axis: Axes) -> None:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize="small")

    def flip_panel(axis: Axes) -> None:
        for scheme, where, flips, _ in lines:
            axis.plot(where, flips, marker="o", markersize=3, label=scheme)
        axis.set_title(f"Share of signs changed against {report.reference}")
        axis.set_xlabel("step")
        axis.set_ylabel("samples whose sign differs (%)")
        finish(axis)

    def inflation_panel(axis: Axes) -> None:
        for scheme, where, _, inflation in lines:
            axis.plot(where, inflation, marker="o", markersize=3, label=scheme)
        axis.set_title(f"Non-zero inflation against {report.reference}")
        axis.set_xlabel("step")
        axis.set_ylabel(f"non-zero advantages / non-zero under {report.reference}")
        axis.axhline(1, color="grey", linewidth=0.8, linestyle="--")
        finish(axis)

    def size_panel(axis: Axes) -> None:
        groups = report.step_groups.sort_index()
        if not groups.empty:
            # Bins keep each bin's smallest and largest group, and the median of its first step.
            starts = _step_bins(groups.index.to_numpy())
            where = groups.index.to_numpy()[starts]
            smallest = _binned(groups["smallest_group"].to_numpy(), starts, np.fmin)
            largest = _binned(groups["largest_group"].to_numpy(), starts, np.fmax)
            axis.fill_between(where, smallest, largest, alpha=0.25, label="range")
            axis.plot(where, groups["median_group"].to_numpy()[starts], marker="o", markersize=3, label="median")
        axis.set_title("Prompt-group sizes")
        axis.set_xlabel("step")
        axis.set_ylabel("samples per prompt")
        finish(axis)

    steps = len(report.info.get("step_values", []))
    title = f"Per step ({steps:,} step{'s' if steps != 1 else ''}{binned})"
    return title, [flip_panel, inflation_panel, size_panel]


def per_step_figure(report: Report) -> Figure:
    """Sign-flip rate and non-zero inflation per step, one line per scheme other than the reference, and the
    spread of prompt-group sizes per step (smallest, median, largest)."""
    title, panels = _per_step_panels(report)
    return _composed(title, panels, (5, 4), 3)


def save_png(figure: Figure, path: Path) -> Path:
    """Save atomically, the figure's title in the PNG's Title chunk."""
    title = figure.get_suptitle()

    def draw(temporary: Path) -> None:
        figure.savefig(temporary, format="png", metadata={"Title": title, "Software": "rollaudit"})

    return write_atomic(path, draw)


Panels = tuple[str, list[Callable[[Axes], None]], tuple[float, float]]


def _panel_sets(report: Report) -> dict[str, Panels]:
    """Each figure of the report by name: its title, its panels and one panel's size in inches. The advantage
    figures only when the report kept its advantages, the per-step figure only for a run of several steps."""
    made: dict[str, Panels] = {"group_sizes": (_group_sizes_title(report), _group_size_panels(report), (4, 3.6))}
    if report.advantages is not None:
        advantages = report.advantages_by_scheme()
        made["advantage_scatter"] = (*_scatter_panels(report, advantages), (4.4, 4.4))
        made["advantage_distribution"] = (*_distribution_panels(report, advantages), (4.4, 3.6))
    if len(report.info.get("step_values", [])) > 1:
        made["per_step"] = (*_per_step_panels(report), (5, 4))
    return made


def figures(report: Report) -> dict[str, Figure]:
    """The report's figures by name (:data:`FILES`), each its panels side by side: the advantage figures only
    when the report kept its advantages, the per-step figure only for a run of several steps."""
    return {name: _composed(title, panels, size, 3) for name, (title, panels, size) in _panel_sets(report).items()}


# A panel of the HTML report: about 460 x 345 CSS pixels at its natural size, so that three fit a wide screen
# and one fills a phone with its text at its natural size.
HTML_PANEL_SIZE = (4.8, 3.6)


def panel_svgs(report: Report) -> dict[str, tuple[str, list[str]]]:
    """The report's figures for a page: each its title and one inline ``<svg>`` a panel, so that the page can
    set the panels side by side on a wide screen and one under the other on a narrow one."""
    made: dict[str, tuple[str, list[str]]] = {}
    for name, (title, panels, size) in _panel_sets(report).items():
        svgs = []
        for index, draw in enumerate(panels):
            width, height = HTML_PANEL_SIZE if size[0] != size[1] else (HTML_PANEL_SIZE[0], HTML_PANEL_SIZE[0])
            figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
            draw(figure.subplots())
            svgs.append(figure_svg(figure, f"{name}-{index}"))
        made[name] = (title, svgs)
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
        made["per_step"] = per_step_figure(report)  # one point a scheme: the PNG set is always the same four
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
    label = figure.get_suptitle() or next((axis.get_title() for axis in figure.axes if axis.get_title()), "")
    return svg.replace("<svg ", f'<svg role="img" aria-label="{html.escape(label)}" ', 1)


__all__ = [
    "FILES",
    "advantage_distribution_figure",
    "advantage_scatter_figure",
    "figure_svg",
    "figures",
    "group_sizes_figure",
    "panel_svgs",
    "per_step_figure",
    "point_kinds",
    "save_png",
    "write_plots",
]
