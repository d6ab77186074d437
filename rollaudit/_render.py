"""Rendering a Report (and the load that produced it) for people: the terminal and Markdown.

Pure functions of data already computed: a :class:`~rollaudit.Report`, the
``load`` summary the CLI builds (``format``, ``files``, ``bytes``,
``seconds``), or ``rollaudit._inspect.describe``'s dict. Nothing here
computes a metric; it chooses what to show and how to format it (rates as
percentages, counts as ints, undefined as ``n/a``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ._report import RECORDED_ROW

if TYPE_CHECKING:
    from ._report import Report

NOT_AVAILABLE = "n/a"
HISTOGRAM_TITLES = {
    "samples_per_prompt": "samples / prompt",
    "trajectories_per_prompt": "trajectories / prompt",
    "samples_per_trajectory": "samples / trajectory",
}
_HISTOGRAM_ROWS = 8
_BAR_WIDTH = 10
_EIGHTHS = " ▏▎▍▌▋▊▉"
_KEY_WIDTH = 24
_FOLDED_FIRST_COLUMN = 16
# A first column folded narrower than this is harder to read than a hidden column.
_FIRST_COLUMN_FLOOR = 14
# Presets shown in the fit table of recorded advantages: the match and the nearest misses tell the story.
_FIT_ROWS = 5
_EQUIVALENT_SHOWN = 3


# ---------------------------------------------------------------------------------------------------------------------
# Number formatting shared by the terminal and Markdown.


def _undefined(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def percent(value: Any) -> str:
    """A rate as a percentage; never rounds a non-zero rate to 0% or a partial one to 100%."""
    if _undefined(value):
        return NOT_AVAILABLE
    value = float(value)
    if 0 < value < 0.0005:
        return "<0.1%"
    if 0.9995 <= value < 1:
        return ">99.9%"
    return f"{value * 100:.1f}%"


def count(value: Any) -> str:
    """A count as an int with thousands separators."""
    return NOT_AVAILABLE if _undefined(value) else f"{int(value):,}"


def ratio(value: Any) -> str:
    """An inflation factor, e.g. ``4.18×``."""
    return NOT_AVAILABLE if _undefined(value) else f"{float(value):.2f}×"


def number(value: Any, digits: int = 3) -> str:
    """A float with ``digits`` significant digits."""
    if _undefined(value):
        return NOT_AVAILABLE
    value = float(value)
    return "0" if value == 0 else f"{value:.{digits}g}"


def signed(value: Any) -> str:
    """A mean advantage: sign always shown, two decimals (tiny values read as 0)."""
    if _undefined(value):
        return NOT_AVAILABLE
    value = float(value)
    return " 0.00" if abs(value) < 0.005 else f"{value:+.2f}"


def byte_size(value: int) -> str:
    """1234567 -> '1.2 MB'."""
    size = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"  # pragma: no cover - loop always returns


def plural(number_of: int, word: str, many: str | None = None) -> str:
    """``1 sample``, ``21 samples``."""
    return f"{number_of:,} {word if number_of == 1 else (many or word + 's')}"


def key_text(value: Any, width: int = _KEY_WIDTH) -> str:
    """A prompt key, shortened to ``width`` characters (string keys can be whole prompts)."""
    text = "∅" if value is None else " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


# The summary columns: (header, metric, formatter). ``nonzero_reference`` and ``compared`` go in the caption.
# Terminal headers take two lines (``\n``) so that the default three schemes fit in 100 columns.
METRIC_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("sign\nflips", "sign_flip_rate", percent),
    ("strict\nflips", "strict_flip_rate", percent),
    ("token\nflips", "token_flip_rate", percent),
    ("non-\nzero", "nonzero", count),
    ("infla-\ntion", "nonzero_inflation", ratio),
    ("spurious", "spurious_nonzero", count),
    ("lost", "lost_signal", count),
    ("cosine", "advantage_cosine", lambda value: number(value, 4)),
    ("max\n|ΔA|", "max_abs_diff", number),
    ("mean\n|ΔA|", "mean_abs_diff", number),
)


def one_line_header(header: str) -> str:
    """``'infla-\\ntion'`` -> ``'inflation'``, ``'sign\\nflips'`` -> ``'sign flips'`` (Markdown headers)."""
    return header.replace("-\n", "").replace("\n(", "(").replace("\n", " ")


def _has_undefined(report: Report) -> bool:
    return "undefined" in report.summary.columns and bool((report.summary["undefined"] > 0).any())


def steps_label(values: Sequence[int]) -> str:
    """``step 3``, ``steps 0-9 (10)``, ``steps 0, 3, 5``."""
    values = sorted(values)
    if not values:
        return "no steps"
    if len(values) == 1:
        return f"step {values[0]}"
    if values[-1] - values[0] + 1 == len(values):
        return f"steps {values[0]}–{values[-1]} ({len(values)})"
    if len(values) <= 5:
        return "steps " + ", ".join(str(value) for value in values)
    return f"{len(values)} steps, {values[0]}–{values[-1]}"


def files_label(files: Sequence[str]) -> str:
    """The one file, or ``4 files in sample_dumps`` (their common directory)."""
    if not files:
        return "no files"
    if len(files) == 1:
        return str(files[0])
    try:
        common = os.path.commonpath([os.path.dirname(str(path)) or "." for path in files])
    except ValueError:  # absolute and relative paths mixed
        common = ""
    return f"{len(files)} files in {common}" if common else f"{len(files)} files"


def load_line(load: Mapping[str, Any]) -> str:
    """``slime, 62.3 KB, loaded in 0.32 s``."""
    parts = [str(load.get("format", "?"))]
    if load.get("bytes") is not None:
        parts.append(byte_size(load["bytes"]))
    if load.get("seconds") is not None:
        parts.append(f"loaded in {load['seconds']:.2f} s")
    return ", ".join(parts)


def source_line(load: Mapping[str, Any]) -> str:
    """``sample_dumps/fanout/rollout_data/3.pt (slime, 62.3 KB, loaded in 0.12 s)``."""
    return f"{files_label(load.get('files', []))} ({load_line(load)})"


def counts_line(report: Report) -> str:
    """``step 3 · 88 samples · 8 prompts · 32 trajectories · audited on cpu in 0.04 s``."""
    info = report.info
    return " · ".join(
        [
            steps_label(info.get("step_values", [])),
            f"{count(info.get('samples', 0))} samples",
            f"{count(info.get('prompts', 0))} prompts",
            f"{count(info.get('trajectories', 0))} trajectories",
            f"audited on {info.get('device', '?')} in {info.get('seconds', 0):.2f} s",
        ]
    )


def notes(report: Report) -> list[str]:
    """Data issues worth a line: non-finite rewards, undefined advantages, missing per-prompt view."""
    info = report.info
    lines = []
    if info.get("nonfinite_rewards"):
        shown = info.get("nonfinite_rows", [])[:5]
        more = "…" if info["nonfinite_rewards"] > len(shown) else ""
        rows = ("row " if len(shown) == 1 and not more else "rows ") + ", ".join(str(row) for row in shown) + more
        lines.append(
            f"{plural(info['nonfinite_rewards'], 'sample')} with a NaN or infinite reward ({rows}); "
            "left out of every statistic and comparison"
        )
    # The recorded row's samples without a recorded value are counted by the recorded sentence, not here.
    undefined = report.summary["undefined"].drop(RECORDED_ROW, errors="ignore") if _has_undefined(report) else None
    if undefined is not None and bool((undefined > 0).any()):
        where = [str(scheme) for scheme, number_of in undefined.items() if number_of > 0]
        under = "every scheme" if len(where) == len(undefined) else ", ".join(where)
        samples = plural(int(undefined.max()), "sample")
        lines.append(f"{samples} not compared: the advantage is undefined there (under {under})")
    if info.get("per_prompt_unavailable"):
        lines.append(f"no per-prompt view: {info['per_prompt_unavailable']}")
    return lines


def verdicts(report: Report) -> list[str]:
    """One sentence per scheme other than the reference: what is wrong with it, in the report's own numbers."""
    lines = []
    reference = report.reference
    for scheme, row in report.summary.iterrows():
        if scheme == reference:
            continue
        flips, spurious, lost = row["sign_flip_rate"], int(row["spurious_nonzero"]), int(row["lost_signal"])
        if _undefined(flips):
            lines.append(f"{scheme}: nothing to compare with {reference}")
            continue
        if flips == 0:
            difference = (
                "identical advantages"
                if row["max_abs_diff"] == 0
                else f"advantages differ by up to {number(row['max_abs_diff'])} (mean {number(row['mean_abs_diff'])})"
            )
            lines.append(f"{scheme}: same signs as {reference}; {difference}")
            continue
        sentence = f"{scheme}: {percent(flips)} of samples get another sign than under {reference}"
        if not _undefined(row["token_flip_rate"]):
            sentence += f" ({percent(row['token_flip_rate'])} of response tokens)"
        extras = []
        if spurious:
            extras.append(f"{plural(spurious, 'sample')} with no learning signal got an advantage")
        if lost:
            extras.append(f"{plural(lost, 'sample')} lost {'its' if lost == 1 else 'their'} signal")
        if not _undefined(row["nonzero_inflation"]) and row["nonzero_inflation"] != 1:
            extras.append(f"{ratio(row['nonzero_inflation'])} as many non-zero advantages")
        lines.append(sentence + ("; " + ", ".join(extras) if extras else ""))
    return lines


# ---------------------------------------------------------------------------------------------------------------------
# Recorded advantages: which preset the trainer's own advantages come from (``Report.recorded``).


def _plain(text: str) -> str:
    return text


def fit_error(value: Any) -> str:
    """A fit's error: two significant digits; None (inf in the report: one side NaN) as ∞."""
    return "∞" if value is None or (isinstance(value, float) and math.isinf(value)) else number(value, 2)


def small_number(value: Any) -> str:
    """A tolerance: ``1e-04``, ``1.5e-04``, ``0.002``."""
    if _undefined(value):
        return NOT_AVAILABLE
    value = float(value)
    if value == 0 or value >= 1e-3:
        return number(value, 2)
    mantissa, _, exponent = f"{value:.1e}".partition("e")
    return f"{mantissa.removesuffix('.0')}e{exponent}"


def tolerance_text(recorded: Mapping[str, Any]) -> str:
    """``1e-04``, or ``1e-04 × max |recorded| = 1.5e-04`` when the tolerance was scaled to large advantages."""
    tolerance, allowed = float(recorded["tolerance"]), float(recorded["allowed_error"])
    if allowed == tolerance:
        return small_number(tolerance)
    return f"{small_number(tolerance)} × max |recorded| = {small_number(allowed)}"


def recorded_sentence(report: Report, code: Callable[[str], str] = _plain) -> str:
    """What the recorded advantages are, in one sentence: the preset they match (or the closest one, saying
    that none matches) and how their signs compare with the reference. ``code`` marks up scheme strings."""
    recorded = report.recorded or {}
    rows, samples = int(recorded.get("rows", 0)), int(report.info.get("samples", 0))
    subject = "recorded advantages" + (f" ({count(rows)} of {count(samples)} samples)" if rows < samples else "")
    fits = recorded.get("fits", [])
    best_match = recorded.get("best_match")
    equivalent = list(recorded.get("equivalent", []))
    if best_match is not None:
        text = f"{subject} match {code(best_match)} (max err {fit_error(fits[0]['max_error'])}"
        if equivalent:
            # Ties are named: the recorded values cannot tell these schemes apart on this table.
            shown = ", ".join(code(scheme) for scheme in equivalent[:_EQUIVALENT_SHOWN])
            more = len(equivalent) - _EQUIVALENT_SHOWN
            text += f"; the same numbers: {shown}" + (f" and {more} more" if more > 0 else "")
        text += ")"
    elif fits:
        closest = fits[0]
        text = (
            f"{subject} match no preset within {tolerance_text(recorded)}; closest: {code(closest['scheme'])} "
            f"({percent(closest['share_within_tolerance'])} of samples within tolerance, "
            f"max err {fit_error(closest['max_error'])})"
        )
    else:
        return f"{subject}: no preset can run on this table to compare them with"
    if best_match is not None and report.reference in (best_match, *equivalent):
        return text  # they are the reference's numbers: no sign can differ
    if RECORDED_ROW in report.summary.index:
        flips = report.summary.loc[RECORDED_ROW, "sign_flip_rate"]
        if not _undefined(flips):
            reference = code(report.reference)
            text += (
                f"; they have the same signs as {reference}"
                if flips == 0
                else f"; they differ in sign from {reference} on {percent(flips)} of samples"
            )
    return text


def recorded_fit_rows(report: Report, limit: int = _FIT_ROWS) -> tuple[str, list[str], list[list[str]]]:
    """(title, header, rows) of the best ``limit`` fits; an ``undefined`` column only where some fit has one."""
    recorded = report.recorded or {}
    fits = recorded.get("fits", [])
    shown = fits[:limit]
    with_undefined = any(fit.get("undefined") for fit in shown)
    within = f"within\n±{small_number(recorded.get('allowed_error'))}"
    header = ["scheme", "max err", "mean err", within, *(["unde-\nfined"] if with_undefined else [])]
    rows = []
    for fit in shown:
        row = [
            str(fit["scheme"]),
            fit_error(fit["max_error"]),
            fit_error(fit["mean_error"]),
            percent(fit["share_within_tolerance"]),
        ]
        rows.append(row + ([count(fit.get("undefined", 0))] if with_undefined else []))
    more = f" (best {len(shown)} of {len(fits)})" if len(shown) < len(fits) else ""
    # The tolerance itself heads the share column; how it was scaled is in the sentence when nothing matched.
    title = f"Fit of each preset to the recorded advantages{more}"
    return title, header, rows


# ---------------------------------------------------------------------------------------------------------------------
# Histograms: a few rows of (size label, count), bucketed when there are many sizes.


def histogram_rows(sizes: Mapping[int, int], max_rows: int = _HISTOGRAM_ROWS) -> list[tuple[str, int]]:
    """``{size: count}`` as at most ``max_rows`` rows; many sizes are bucketed into ranges ``lo–hi``."""
    ordered = sorted((int(size), int(number_of)) for size, number_of in sizes.items())
    if len(ordered) <= max_rows:
        return [(str(size), number_of) for size, number_of in ordered]
    rows = []
    per_row = math.ceil(len(ordered) / max_rows)
    for start in range(0, len(ordered), per_row):
        chunk = ordered[start : start + per_row]
        low, high = chunk[0][0], chunk[-1][0]
        rows.append((str(low) if low == high else f"{low}–{high}", sum(number_of for _, number_of in chunk)))
    return rows


def bar(value: int, largest: int, width: int = _BAR_WIDTH) -> str:
    """A horizontal bar in eighths of a character; any non-zero value shows at least a sliver."""
    if largest <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / largest * width * 8))
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def histogram_lines(sizes: Mapping[int, int], width: int = _BAR_WIDTH) -> list[str]:
    """``'    8 ████████   3'`` per row."""
    rows = histogram_rows(sizes)
    if not rows:
        return ["(none)"]
    largest = max(number_of for _, number_of in rows)
    label_width = max(len(label) for label, _ in rows)
    return [
        f"{label:>{label_width}} {bar(number_of, largest, width):<{width}} {number_of:,}" for label, number_of in rows
    ]


# ---------------------------------------------------------------------------------------------------------------------
# Prompt tables: the worst prompts and the silent ones, as rows of plain strings (shared by both renderers).


def _others(report: Report) -> list[str]:
    """The schemes compared with the reference in the prompt tables, and the recorded advantages when present."""
    others = [scheme for scheme in report.schemes if scheme != report.reference]
    if f"flips:{RECORDED_ROW}" in report.per_prompt.columns:
        others.append(RECORDED_ROW)
    return others


def prompt_rows(report: Report, prompts: Any, kind: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows for a per-prompt table; ``kind`` is ``flips`` (worst) or ``spurious`` (silent)."""
    multi_step = len(report.info.get("step_values", [])) > 1
    reference = report.reference
    # Two-line headers (scheme, then what): the Markdown renderer joins them with a space.
    header = [*(["step"] if multi_step else []), "prompt", "samples", "traj.", "mean\nreward", f"{reference}\nĀ"]
    others = _others(report)
    for scheme in others:
        header.append(f"{scheme}\n{kind}")
        header.append(f"{scheme}\nĀ")
    rows = []
    for _, prompt in prompts.iterrows():
        row = [*([str(prompt["step"])] if multi_step else [])]
        row += [
            key_text(prompt["prompt"]),
            count(prompt["samples"]),
            count(prompt["trajectories"]),
            number(prompt["mean_reward"]),
            signed(prompt[f"mean_advantage:{reference}"]),
        ]
        for scheme in others:
            row.append(count(prompt[f"{kind}:{scheme}"]))
            row.append(signed(prompt[f"mean_advantage:{scheme}"]))
        rows.append(row)
    return header, rows


def _prompt_sections(report: Report, top: int) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the worst prompts and the silent prompts, empty sections left out."""
    if report.per_prompt.empty:
        return []
    sections = []
    total = len(report.per_prompt)
    worst_all = report.worst_prompts(total)
    if len(worst_all):
        shown = report.worst_prompts(top)
        title = (
            f"Worst prompts: {len(worst_all):,} of {total:,} prompts have samples whose sign differs "
            f"from {report.reference}" + (f" (top {len(shown)})" if len(shown) < len(worst_all) else "")
        )
        sections.append((title, *prompt_rows(report, shown, "flips")))
    silent_all = report.silent_prompts(total)
    if len(silent_all):
        shown = report.silent_prompts(top)
        title = f"Prompts with no learning signal that got advantages: {len(silent_all):,}" + (
            f" (top {len(shown)})" if len(shown) < len(silent_all) else ""
        )
        sections.append((title, *prompt_rows(report, shown, "spurious")))
    return sections


_SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    """One character per value, scaled from 0 to the largest; undefined values are a space."""
    defined = [value for value in values if not _undefined(value)]
    top = max(defined, default=0.0)
    if top <= 0:
        return "".join(" " if _undefined(value) else _SPARK[0] for value in values)
    return "".join(
        " " if _undefined(value) else _SPARK[min(len(_SPARK) - 1, int(value / top * (len(_SPARK) - 1) + 0.5))]
        for value in values
    )


def trend_lines(report: Report) -> list[str]:
    """Per scheme, its sign-flip rate over the steps as a sparkline with its range (runs of several steps)."""
    per_step = report.per_step.reset_index()
    lines = []
    for scheme in per_step["scheme"].drop_duplicates():
        if scheme == report.reference:
            continue
        rates = per_step[per_step["scheme"] == scheme].sort_values("step")["sign_flip_rate"].tolist()
        defined = [rate for rate in rates if not _undefined(rate)]
        if defined:
            lines.append((scheme, f"{sparkline(rates)}  {percent(min(defined))} to {percent(max(defined))}"))
    width = max((len(scheme) for scheme, _ in lines), default=0)
    return [f"{scheme + ':':<{width + 1}} {trend}" for scheme, trend in lines]


def trend_section(report: Report, top: int) -> tuple[str, list[str], list[list[str]]] | None:
    """(title, header, rows) of the worst steps of a run, or None for a single step or no flips."""
    steps = len(report.info.get("step_values", []))
    worst = report.worst_steps(top)
    if steps < 2 or worst.empty:
        return None
    schemes = [column.split(":", 1)[1] for column in worst.columns if column.startswith("sign_flip_rate:")]
    header = ["step", "samples", "prompts", "group\nsizes"]
    for scheme in schemes:
        header += [f"{scheme}\nflips", f"{scheme}\ninflation"]
    rows = []
    for step, row in worst.iterrows():
        sizes = "n/a"
        if "smallest_group" in row:
            sizes = f"{count(row['smallest_group'])}–{count(row['largest_group'])}"
        cells = [str(step), count(row.get("samples")), count(row.get("prompts")), sizes]
        for scheme in schemes:
            cells += [percent(row[f"sign_flip_rate:{scheme}"]), ratio(row[f"nonzero_inflation:{scheme}"])]
        rows.append(cells)
    flipped = int((report.worst_steps(steps)["worst_flip_rate"] > 0).sum())
    title = f"Worst steps: {flipped:,} of {steps:,} steps have samples whose sign differs from {report.reference}"
    if len(rows) < flipped:
        title += f" (top {len(rows)})"
    return title, header, rows


# ---------------------------------------------------------------------------------------------------------------------
# The terminal.


def _histogram_grid(report: Report) -> RenderableType:
    grid = Table.grid(padding=(0, 4))
    names = [name for name in HISTOGRAM_TITLES if name in report.histograms]
    for _ in names:
        grid.add_column(no_wrap=True)
    grid.add_row(*(Text(HISTOGRAM_TITLES[name], style="bold") for name in names))
    grid.add_row(*(Text("\n".join(histogram_lines(report.histograms[name])), style="cyan") for name in names))
    return grid


@dataclass
class FittedTable:
    """A table that drops its least important columns until it fits the console, and says which it hid.

    The first column (scheme or prompt key) folds rather than vanish; the numbers never wrap.
    """

    title: str
    header: list[str]
    rows: list[list[str | Text]]
    drop_order: list[str] = field(default_factory=list)
    row_styles: list[str | None] = field(default_factory=list)
    caption: str | None = None
    first_max_width: int | None = None

    def build(self, hidden: frozenset[str] = frozenset(), first_width: int | None = None) -> Table:
        """The table without the ``hidden`` columns, its first column at most ``first_width`` wide."""
        keep = [position for position, name in enumerate(self.header) if name not in hidden]
        caption = self.caption
        if hidden:
            shown = ", ".join(one_line_header(name) for name in self.header if name in hidden)
            caption = (caption + "\n" if caption else "") + f"hidden at this width: {shown}"
        table = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, 1),
            title=self.title,
            title_justify="left",
            caption=caption,
            caption_justify="left",
        )
        limits = [width for width in (self.first_max_width, first_width) if width is not None]
        for position in keep:
            if position == 0:
                table.add_column(self.header[0], overflow="fold", max_width=min(limits) if limits else None)
            else:
                table.add_column(self.header[position], justify="right", no_wrap=True)
        for index, row in enumerate(self.rows):
            style = self.row_styles[index] if index < len(self.row_styles) else None
            table.add_row(*(row[position] for position in keep), style=style)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        unbounded = options.update_width(10_000)
        first_natural = max(cell_len(str(value)) for value in [self.header[0], *(row[0] for row in self.rows)])
        if self.first_max_width is not None:
            first_natural = min(first_natural, self.first_max_width)
        # Fold a long first column (scheme strings, prompt keys) as far as it stays readable; past that,
        # drop the least important columns one at a time.
        hidden: frozenset[str] = frozenset()
        for name in [None, *self.drop_order]:
            if name is not None:
                hidden = hidden | {name}
            table = self.build(hidden)
            excess = console.measure(table, options=unbounded).maximum - options.max_width
            if excess <= 0:
                yield table
                return
            if first_natural - excess >= _FIRST_COLUMN_FLOOR:
                yield self.build(hidden, first_width=first_natural - excess)
                return
        yield self.build(hidden, first_width=_FIRST_COLUMN_FLOOR)


def metrics_table(report: Report) -> FittedTable:
    """One row per scheme, the spec's metrics against the reference."""
    info = report.info
    reference_row = report.summary.loc[report.reference]
    caption = (
        f"non-zero under {report.reference}: {count(reference_row['nonzero_reference'])} of "
        f"{count(info.get('samples', 0))} samples; rates are shares of the {count(reference_row['compared'])} compared"
    )
    columns = [*METRIC_COLUMNS]
    if _has_undefined(report):
        columns.append(("unde-\nfined", "undefined", count))
    rows: list[list[str | Text]] = []
    styles: list[str | None] = []
    for scheme, row in report.summary.iterrows():
        is_reference = scheme == report.reference
        label = Text(str(scheme), style="bold italic" if scheme == RECORDED_ROW else "bold")
        label += Text(" (ref)", style="dim") if is_reference else Text("")
        cells = [Text(formatter(row[metric])) for _, metric, formatter in columns]
        if not is_reference and not _undefined(row["sign_flip_rate"]) and row["sign_flip_rate"] > 0:
            cells[0].stylize("bold red")
        rows.append([label, *cells])
        styles.append("dim" if is_reference else None)
    return FittedTable(
        title=f"Advantages against the reference [bold]{escape(report.reference)}[/bold]",
        header=["scheme", *(header for header, _, _ in columns)],
        rows=rows,
        row_styles=styles,
        caption=caption,
        drop_order=list(_METRIC_DROP_ORDER),
    )


# The summary columns a narrow terminal loses first (the others answer "how wrong, how badly").
_METRIC_DROP_ORDER = ("strict\nflips", "lost", "max\n|ΔA|", "cosine", "mean\n|ΔA|", "token\nflips")


def _split_scheme(header: str) -> str:
    """``'trajectory(representative=max)\\nflips'`` -> the scheme's options on a line of their own."""
    scheme, newline, rest = header.rpartition("\n")
    if not newline or len(scheme) <= _FOLDED_FIRST_COLUMN or "(" not in scheme:
        return header
    name, _, options = scheme.partition("(")
    return f"{name}\n({options}\n{rest}"


def _prompt_table(title: str, header: list[str], rows: list[list[str]], reference: str) -> FittedTable:
    # Narrow terminals lose the per-scheme mean advantages first, then the reference's, then the trajectory count.
    means = [name for name in header if name.endswith("\nĀ") and not name.startswith(f"{reference}\n")]
    drop_order = [_split_scheme(name) for name in [*reversed(means), f"{reference}\nĀ", "traj."]]
    return FittedTable(
        title=title,
        header=[_split_scheme(name) for name in header],
        rows=list(rows),
        drop_order=drop_order,
        first_max_width=_KEY_WIDTH,
    )


def _recorded_renderables(report: Report) -> list[RenderableType]:
    """The recorded sentence (the matched scheme in bold green, no match in yellow) and the fit table."""
    matched = (report.recorded or {}).get("best_match") is not None
    sentence = Text(recorded_sentence(report))
    sentence.highlight_words([str(report.recorded.get("best_match"))] if matched else [], style="bold green")
    if not matched:
        sentence.stylize("yellow")
    title, header, rows = recorded_fit_rows(report)
    if not rows:
        return [sentence]
    styles: list[str | None] = [("green" if matched else None), *([None] * (len(rows) - 1))]
    # The title on a line of its own: as a table title it would wrap to the width of this narrow table.
    table = FittedTable(title="", header=header, rows=list(rows), row_styles=styles, first_max_width=_KEY_WIDTH + 16)
    return [sentence, Text(""), Text(title), table]


def render_compare(report: Report, load: Mapping[str, Any], top: int = 5) -> RenderableType:
    """The terminal report of ``rollaudit compare``: header, histograms, metrics, verdicts, worst prompts."""
    parts: list[RenderableType] = [
        Text(source_line(load), style="bold"),
        Text(counts_line(report)),
        Text(""),
    ]
    if report.histograms:
        parts += [_histogram_grid(report), Text("")]
    parts += [metrics_table(report), Text("")]
    findings = Table.grid(padding=(0, 1))
    findings.add_column(no_wrap=True, style="bold")
    findings.add_column()
    for line in verdicts(report):
        scheme, _, rest = line.partition(": ")
        findings.add_row(f"{scheme}:", rest)
    parts.append(findings)
    for line in notes(report):
        parts.append(Text(f"note: {line}", style="yellow"))
    if report.recorded is not None:
        parts += [Text(""), *_recorded_renderables(report)]
    trend = trend_section(report, top)
    if trend is not None:
        title, header, rows = trend
        parts += [Text(""), Text(f"Sign-flip rate by step ({len(report.info['step_values'])} steps)", style="bold")]
        parts += [Text(line) for line in trend_lines(report)]
        labels = [_split_scheme(name) for name in header]
        # Narrow terminals lose the inflation columns first (last scheme first), then the group sizes.
        inflations = [name for name in labels if name.endswith("inflation")]
        drop_order = [*reversed(inflations), labels[3]]
        parts += [Text(""), FittedTable(title=title, header=labels, rows=rows, drop_order=drop_order)]
    for title, header, rows in _prompt_sections(report, top):
        parts += [Text(""), _prompt_table(title, header, rows, report.reference)]
    return Group(*parts)


# ---------------------------------------------------------------------------------------------------------------------
# Markdown: reads well pasted into a pull request.


def _markdown_cell(text: Any) -> str:
    """A table cell: pipes escaped, newlines folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: Any) -> str:
    """Inline code that survives backticks in the text."""
    text = " ".join(str(text).split())
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    align = align or ["left"] + ["right"] * (len(header) - 1)
    rule = ["---:" if side == "right" else "---" for side in align]
    lines = ["| " + " | ".join(_markdown_cell(cell) for cell in header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(_markdown_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: Report, load: Mapping[str, Any], top: int = 5) -> str:
    """The Markdown report of ``rollaudit compare --markdown``."""
    files = load.get("files", [])
    lines = [f"### rollaudit: advantages against {_code(report.reference)}", ""]
    lines.append(f"{_code(files_label(files))} ({load_line(load)})  ")
    lines.append(counts_line(report))
    lines.append("")
    columns = list(METRIC_COLUMNS) + ([("unde-\nfined", "undefined", count)] if _has_undefined(report) else [])
    rows = []
    for scheme, row in report.summary.iterrows():
        label = _code(scheme) + (" (reference)" if scheme == report.reference else "")
        cells = [formatter(row[metric]) for _, metric, formatter in columns]
        if scheme != report.reference and not _undefined(row["sign_flip_rate"]) and row["sign_flip_rate"] > 0:
            cells[0] = f"**{cells[0]}**"
        rows.append([label, *cells])
    lines.append(markdown_table(["scheme", *(one_line_header(header) for header, _, _ in columns)], rows))
    lines.append("")
    for line in verdicts(report):
        scheme, _, rest = line.partition(": ")
        lines.append(f"- {_code(scheme)}: {rest}")
    for line in notes(report):
        lines.append(f"- ⚠️ {line}")
    lines.append("")
    if report.recorded is not None:
        sentence = recorded_sentence(report, code=_code)
        lines += [sentence[:1].upper() + sentence[1:] + ".", ""]
        title, header, fit_rows = recorded_fit_rows(report)
        if fit_rows:
            rows = [[_code(row[0]), *row[1:]] for row in fit_rows]
            lines += [f"**{title}**", "", markdown_table([one_line_header(name) for name in header], rows), ""]
    trend = trend_section(report, top)
    if trend is not None:
        title, header, rows = trend
        lines += ["**Sign-flip rate by step**", ""]
        for line in trend_lines(report):
            scheme, _, trend = line.partition(":")
            lines.append(f"- {_code(scheme)}: `{trend.strip()}`")
        lines += ["", f"**{title}**", "", markdown_table([one_line_header(name) for name in header], rows), ""]
    for title, header, prompt_table_rows in _prompt_sections(report, top):
        lines += [f"**{title}**", "", markdown_table([one_line_header(name) for name in header], prompt_table_rows), ""]
    if report.histograms:
        lines += ["<details><summary>Group sizes</summary>", ""]
        for name, title in HISTOGRAM_TITLES.items():
            sizes = report.histograms.get(name)
            if sizes:
                rows = [[label, f"{number_of:,}"] for label, number_of in histogram_rows(sizes, max_rows=12)]
                lines += [markdown_table([title.split(" / ")[0] + " per " + title.split(" / ")[1], "count"], rows), ""]
        lines += ["</details>", ""]
    lines.append(
        "<sub>sign flips: share of samples whose advantage sign differs from the reference; strict: + became − "
        "or back; token flips: share of response tokens on flipped samples; inflation: non-zero advantages "
        "against the reference's; spurious: samples the reference gives 0 that got an advantage; lost: the "
        "reverse; cosine: length-weighted direction agreement (1 = same).</sub>"
    )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# inspect


def render_inspect(description: Mapping[str, Any], load: Mapping[str, Any]) -> RenderableType:
    """The terminal view of ``rollaudit inspect``: what the dump holds, without recomputing anything."""
    samples = description["samples"]
    identity = description["identity"]
    reward = description["reward"]
    overview = Table.grid(padding=(0, 2))
    overview.add_column(style="bold", no_wrap=True)
    overview.add_column()
    overview.add_row("files", files_label(load.get("files", [])))
    overview.add_row("format", load_line(load))
    overview.add_row(
        "steps",
        steps_label(description["steps"]["values"])
        + f" · {count(samples)} samples"
        + (f" ({_per_step(description)})" if len(description["steps"]["values"]) > 1 else ""),
    )
    overview.add_row(
        "groups", f"{count(description['prompts'])} prompts · {count(description['trajectories'])} trajectories"
    )
    overview.add_row(
        "identity",
        f"prompt key on {_share(identity['with_prompt_key'], samples)} · "
        f"trajectory key on {_share(identity['with_trajectory_key'], samples)}",
    )
    reward_text = f"{reward['kind']}"
    if reward.get("min") is not None:
        reward_text += f" · min {number(reward['min'])} · mean {number(reward['mean'])} · max {number(reward['max'])}"
    if reward.get("nonfinite"):
        reward_text += f" · {count(reward['nonfinite'])} NaN/inf"
    overview.add_row("reward", reward_text)
    if description.get("recorded_advantages"):
        overview.add_row("recorded", f"trainer's advantage on {_share(description['recorded_advantages'], samples)}")
    if description.get("response_tokens") is not None:
        overview.add_row("tokens", f"{count(description['response_tokens'])} response tokens")
    if description.get("status"):
        overview.add_row(
            "status", " · ".join(f"{name} {count(number_of)}" for name, number_of in description["status"].items())
        )
    fields = Table(
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), title="Fields", title_justify="left"
    )
    fields.add_column("field", no_wrap=True, style="bold")
    fields.add_column("type", no_wrap=True)
    fields.add_column("present", justify="right", no_wrap=True)
    fields.add_column("", no_wrap=True, style="dim")
    for column in description["fields"]:
        fields.add_row(
            column["name"],
            column["type"],
            _share(column["non_null"], samples),
            "canonical" if column["canonical"] else "passed through",
        )
    return Group(overview, Text(""), fields)


def _share(part: int, whole: int) -> str:
    if whole == 0:
        return "0 of 0"
    return f"{part:,} of {whole:,} ({percent(part / whole)})"


def _per_step(description: Mapping[str, Any]) -> str:
    per_step = description["steps"]["samples_per_step"]
    values = list(per_step.values())
    low, high = min(values), max(values)
    return f"{low:,} per step" if low == high else f"{low:,}–{high:,} per step"


__all__ = [
    "HISTOGRAM_TITLES",
    "METRIC_COLUMNS",
    "bar",
    "count",
    "counts_line",
    "histogram_lines",
    "histogram_rows",
    "load_line",
    "markdown_table",
    "number",
    "percent",
    "ratio",
    "recorded_fit_rows",
    "recorded_sentence",
    "render_compare",
    "render_inspect",
    "render_markdown",
    "verdicts",
]
