"""The terminal renderer: ``rollaudit compare`` and ``rollaudit inspect`` as rich renderables that fit the console.

Tables drop their least important columns, one at a time, until they fit the
terminal's width, and say which they hid.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from .._audit.report import RECORDED_ROW
from .._errors import log_safe, visible
from .distributions import distribution_lines
from .findings import change_lines, example_line, finding_line, findings_heading, not_checked, ordered
from .text import (
    HISTOGRAM_TITLES,
    KEY_WIDTH,
    METRIC_COLUMNS,
    count,
    counts_line,
    files_label,
    found_lines,
    has_undefined,
    histogram_lines,
    load_line,
    not_auditable_lines,
    notes,
    number,
    one_line_header,
    part_lines,
    percent,
    prompt_sections,
    recorded_fit_rows,
    recorded_sentence,
    rounding_line,
    sign_terms_line,
    source_line,
    steps_label,
    trained_why,
    undefined,
    verdict_title,
    verdicts,
)
from .trend import has_trend, trend_lines, trend_section

if TYPE_CHECKING:
    from .._audit.report import Report

# A first column folded narrower than this is harder to read than a hidden column.
_FIRST_COLUMN_FLOOR = 14


def _histogram_grid(report: Report) -> RenderableType:
    grid = Table.grid(padding=(0, 4))
    names = [name for name in HISTOGRAM_TITLES if name in report.histograms]
    for _ in names:
        grid.add_column(no_wrap=True)
    grid.add_row(*(Text(HISTOGRAM_TITLES[name], style="bold") for name in names))
    grid.add_row(*(Text("\n".join(histogram_lines(report.histograms[name])), style="cyan") for name in names))
    return grid


# Where a title or caption may break: after a colon or semicolon, before a parenthesis. A phrase stays whole.
_PHRASE_BREAKS = re.compile(r"(?<=: )|(?<=; )|(?= \()")


@dataclass
class Phrases:
    """Lines of text that wrap at the console's width between phrases, never inside one ("(top 5)" stays
    together); a phrase wider than the console wraps between its words."""

    phrases: list[str]
    style: str = ""

    @classmethod
    def of(cls, text: str, style: str = "") -> Phrases:
        return cls([phrase for phrase in _PHRASE_BREAKS.split(text) if phrase], style)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        line = ""
        for phrase in self.phrases:
            if line.strip() and cell_len(line + phrase.rstrip()) > options.max_width:
                yield Text(line.rstrip(), style=self.style)
                line = phrase.lstrip()
            else:
                line += phrase
        if line.strip():
            yield Text(line.rstrip(), style=self.style)


@dataclass
class FittedTable:
    """A table that drops its least important columns until it fits the console, and says which it hid.

    Its title and caption are lines of their own at the console's width (a table's title wraps at the table's).
    A first column of scheme names (``whole_names``) never breaks: a name too long for the width is shown as a
    key (``[1]``) and written out in full under the table. Another first column (prompt keys) folds rather than
    vanish. The numbers never wrap.
    """

    title: str
    header: list[str]
    rows: Sequence[Sequence[str | Text]]
    drop_order: list[str] = field(default_factory=list)
    row_styles: list[str | None] = field(default_factory=list)
    caption: str | None = None
    first_max_width: int | None = None
    whole_names: bool = False

    def _keyed_rows(self) -> tuple[list[list[str | Text]], list[str]]:
        """The rows with each scheme name longer than the fold floor replaced by a key, and the legend lines."""
        rows: list[list[str | Text]] = []
        legend: list[str] = []
        for row in self.rows:
            label = row[0]
            name = label.plain if isinstance(label, Text) else label
            scheme = name.removesuffix(" (ref)")
            if cell_len(scheme) <= _FIRST_COLUMN_FLOOR:
                rows.append(list(row))
                continue
            legend.append(f"[{len(legend) + 1}] {scheme}")
            key = Text(f"[{len(legend)}]", style=label.style if isinstance(label, Text) else "")
            if scheme != name:
                key += Text(" (ref)", style="dim")
            rows.append([key, *row[1:]])
        return rows, legend

    def build(self, hidden: frozenset[str] = frozenset(), first_width: int | None = None, keyed: bool = False) -> Table:
        """The table without the ``hidden`` columns, its first column at most ``first_width`` wide (scheme names
        as keys when ``keyed``)."""
        keep = [position for position, name in enumerate(self.header) if name not in hidden]
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
        limits = [width for width in (self.first_max_width, first_width) if width is not None]
        for position in keep:
            if position == 0 and self.whole_names:
                table.add_column(self.header[0], no_wrap=True)
            elif position == 0:
                table.add_column(self.header[0], overflow="fold", max_width=min(limits) if limits else None)
            else:
                table.add_column(self.header[position], justify="right", no_wrap=True)
        rows = self._keyed_rows()[0] if keyed else self.rows
        for index, row in enumerate(rows):
            style = self.row_styles[index] if index < len(self.row_styles) else None
            # Text(), not markup: a cell may hold a prompt key, and '[link=...]' from a dump must stay text.
            table.add_row(
                *(Text(cell) if isinstance(cell, str) else cell for cell in map(row.__getitem__, keep)), style=style
            )
        return table

    def _with_lines(self, table: Table, hidden: frozenset[str], keyed: bool) -> list[RenderableType]:
        parts: list[RenderableType] = [Phrases.of(self.title, "bold")] if self.title else []
        parts.append(table)
        if self.caption:
            parts.append(Phrases.of(self.caption))
        if hidden:
            shown = [one_line_header(name) for name in self.header if name in hidden]
            parts.append(Phrases(["hidden at this width: ", *(f"{name}, " for name in shown[:-1]), shown[-1]]))
        if keyed:
            parts += [Text(line, no_wrap=True, overflow="fold") for line in self._keyed_rows()[1]]
        return parts

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        unbounded = options.update_width(10_000)

        def fits(table: Table) -> int:
            return console.measure(table, options=unbounded).maximum - options.max_width

        first_natural = max(cell_len(_plain(value)) for value in [self.header[0], *(row[0] for row in self.rows)])
        if self.first_max_width is not None:
            first_natural = min(first_natural, self.first_max_width)
        can_key = self.whole_names and bool(self._keyed_rows()[1])
        # Fold a long first column (prompt keys) as far as it stays readable, or show long scheme names as keys;
        # past that, drop the least important columns one at a time.
        hidden: frozenset[str] = frozenset()
        for name in [None, *self.drop_order]:
            if name is not None:
                hidden = hidden | {name}
            table = self.build(hidden)
            excess = fits(table)
            if excess <= 0:
                yield from self._with_lines(table, hidden, keyed=False)
                return
            if can_key:
                keyed = self.build(hidden, keyed=True)
                if fits(keyed) <= 0:
                    yield from self._with_lines(keyed, hidden, keyed=True)
                    return
            elif not self.whole_names and first_natural - excess >= _FIRST_COLUMN_FLOOR:
                table = self.build(hidden, first_width=first_natural - excess)
                yield from self._with_lines(table, hidden, keyed=False)
                return
        if self.whole_names:
            yield from self._with_lines(self.build(hidden, keyed=can_key), hidden, keyed=can_key)
        else:
            yield from self._with_lines(self.build(hidden, first_width=_FIRST_COLUMN_FLOOR), hidden, keyed=False)


def _plain(value: str | Text) -> str:
    return value.plain if isinstance(value, Text) else str(value)


def metrics_table(report: Report) -> FittedTable:
    """One row per scheme, the spec's metrics against the reference."""
    info = report.info
    reference_row = report.summary_table.row(report.reference)
    caption = (
        f"non-zero under {report.reference}: {count(reference_row['nonzero_reference'])} of "
        f"{count(info.get('samples', 0))} samples; rates are shares of the {count(reference_row['compared'])} compared"
    )
    columns = [*METRIC_COLUMNS]
    if has_undefined(report):
        columns.append(("unde-\nfined", "undefined", count))
    rows: list[list[str | Text]] = []
    styles: list[str | None] = []
    for scheme, row in report.summary_table.rows():
        is_reference = scheme == report.reference
        label = Text(str(scheme), style="bold italic" if scheme == RECORDED_ROW else "bold")
        label += Text(" (ref)", style="dim") if is_reference else Text("")
        cells = [Text(formatter(row[metric])) for _, metric, formatter in columns]
        if not is_reference and not undefined(row["sign_flip_rate"]) and row["sign_flip_rate"] > 0:
            cells[0].stylize("bold red")
        rows.append([label, *cells])
        styles.append("dim" if is_reference else None)
    return FittedTable(
        title=f"Advantages against the reference {report.reference}",
        header=["scheme", *(header for header, _, _ in columns)],
        rows=rows,
        row_styles=styles,
        caption=caption,
        drop_order=list(_METRIC_DROP_ORDER),
        whole_names=True,
    )


# The summary columns a narrow terminal loses first. Reversed and invented signs answer "how
# wrong": they go last, and the scheme column never.
_METRIC_DROP_ORDER = (
    "lost",
    "unde-\nfined",
    "max\n|ΔA|",
    "cosine",
    "mean\n|ΔA|",
    "tokens\nchanged",
    "non-\nzero",
    "infla-\ntion",
    "sign\nchanged",
    "in-\nvented",
    "re-\nversed",
)


def _prompt_table(
    title: str, header: list[str], rows: list[list[str]], reference: str, trained: str | None
) -> FittedTable:
    # Narrow terminals lose the per-scheme mean advantages first, then the reference's, then the trajectory count,
    # then the counts of the schemes after the first (the run's own row last). A scheme name in a header stays
    # whole, on a line of its own.
    means = [name for name in header if name.endswith("\nĀ") and not name.startswith(f"{reference}\n")]
    counts = [name for name in header if "\n" in name and not name.endswith(("\nĀ", "\nreward"))]
    later = sorted(reversed(counts[1:]), key=lambda name: name.startswith(f"{trained}\n"))
    drop_order = [*reversed(means), f"{reference}\nĀ", "traj.", *later]
    return FittedTable(
        title=title, header=list(header), rows=list(rows), drop_order=drop_order, first_max_width=KEY_WIDTH
    )


def _recorded_renderables(report: Report) -> list[RenderableType]:
    """The recorded sentence (the matched scheme in bold green, no match in yellow) and the fit table."""
    best_match = (report.recorded or {}).get("best_match")
    matched = best_match is not None
    sentence = Text(recorded_sentence(report))
    sentence.highlight_words([str(best_match)] if matched else [], style="bold green")
    if not matched:
        sentence.stylize("yellow")
    title, header, rows = recorded_fit_rows(report)
    if not rows:
        return [sentence]
    styles: list[str | None] = [("green" if matched else None), *([None] * (len(rows) - 1))]
    # The title on a line of its own: as a table title it would wrap to the width of this narrow table.
    table = FittedTable(title=title, header=header, rows=list(rows), row_styles=styles, whole_names=True)
    return [sentence, Text(""), table]


_SEVERITY_STYLES = {"error": "bold red", "warning": "bold yellow", "note": "bold"}


def _findings(report: Report) -> list[RenderableType]:
    """``Findings:`` and a line a finding (severity, code, summary, reference), its first example indented under
    it, then a blank line; nothing where the report has nothing to say of findings."""
    heading = findings_heading(report)
    if heading is None:
        return []
    title = Text(heading, style="bold")
    if not report.findings:
        title.stylize("yellow", len("Findings: "))
        return [title, Text("")]
    parts: list[RenderableType] = [title]
    for finding in ordered(report):
        line = Text(f"- {finding_line(finding)}")
        line.stylize(_SEVERITY_STYLES[finding.severity], 2, 2 + len(finding.severity))
        line.stylize("bold", 3 + len(finding.severity), 3 + len(finding.severity) + len(finding.code))
        example = example_line(finding)
        parts += [line, *([Text(f"  {example}", style="dim")] if example else [])]
    reason = not_checked(report)
    if reason:
        parts.append(Text(f"- not checked: {reason}", style="yellow"))
    return [*parts, Text("")]


def _verdict(report: Report) -> RenderableType:
    """The verdict: the findings, then what the run trained with, its scheme against the reference, then the other
    schemes; what to change, and what this dump cannot audit."""
    title = Text(verdict_title(report), style="bold")
    trained = report.trained_with
    schemes = [part.scheme for part in trained.parts if part.scheme] if trained.changed else [trained.scheme]
    named = [scheme for scheme in schemes if scheme is not None]
    if named:
        title.highlight_words(named, style="bold green" if trained.evidence == "recorded" else "bold")
    lines = Table.grid(padding=(0, 1))
    lines.add_column(no_wrap=True, style="bold")
    lines.add_column()
    for line in verdicts(report):
        name, _, rest = line.partition(": ")
        lines.add_row(f"{name}:", rest)
    parts: list[RenderableType] = [*_findings(report), title, Text(trained_why(report), style="dim")]
    parts += [Text(f"- {line}") for line in part_lines(report)]
    parts.append(lines)
    if any(": sign changed on " in line for line in verdicts(report)):
        parts.append(Text(sign_terms_line(), style="dim"))
    rounding = rounding_line(report)
    if rounding is not None:
        parts.append(Text(rounding, style="yellow"))
    advice = change_lines(report)
    if advice:
        parts += [Text("What to change:", style="bold"), *(Text(f"- {line}") for line in advice)]
    unaudited = not_auditable_lines(report)
    if unaudited:
        parts += [
            Text("Not auditable on this dump:", style="bold"),
            *(Text(f"- {line}", style="yellow") for line in unaudited),
        ]
    return Group(*parts)


def render_compare(report: Report, load: Mapping[str, Any], top: int = 5) -> RenderableType:
    """The terminal report of ``rollaudit compare``: header, verdict, histograms, metrics, worst prompts."""
    parts: list[RenderableType] = [
        Text(source_line(load), style="bold"),
        Text(counts_line(report, load)),
        *(Text(line, style="dim") for line in found_lines(report)),
        Text(""),
        _verdict(report),
        Text(""),
    ]
    if report.histograms:
        parts += [_histogram_grid(report), Text("")]
    if report.reference in report.summary_table.labels:
        parts.append(metrics_table(report))
    if report.distributions is not None:
        parts += [Text(""), _Distributions(report)]
    for line in notes(report):
        parts.append(Text(f"note: {line}", style="yellow"))
    if report.recorded is not None:
        parts += [Text(""), *_recorded_renderables(report)]
    if has_trend(report):
        parts += [Text(""), _Trends(report)]
    trend = trend_section(report, top)
    if trend is not None:
        title, header, rows = trend
        # Narrow terminals lose the inflation columns first (last scheme first), then the group sizes, then the
        # sign changes of all schemes but the first.
        inflations = [name for name in header if name.endswith("inflation")]
        changes = [name for name in header if name.endswith("\nchanged")]
        drop_order = [*reversed(inflations), header[3], *reversed(changes[1:])]
        parts += [Text(""), FittedTable(title=title, header=header, rows=rows, drop_order=drop_order)]
    for title, header, rows in prompt_sections(report, top, fold_repeats=True):
        if rows:
            parts += [Text(""), _prompt_table(title, header, rows, report.reference, report.trained_row)]
        else:
            parts += [Text(""), Phrases.of(title, "bold")]
    return Group(*parts)


@dataclass
class _Trends:
    """Each scheme's share of changed signs by step, one sparkline a scheme, as wide as the console allows."""

    report: Report

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        steps = len(self.report.info.get("step_values", []))
        yield Text(f"Share of signs changed, by step ({steps:,} steps)", style="bold")
        for line in trend_lines(self.report, options.max_width):
            yield Text(line)


@dataclass
class _Distributions:
    """The reference's advantages and each scheme's, one histogram line each on the same bins."""

    report: Report

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = distribution_lines(self.report, options.max_width)
        if not lines:
            return
        yield Phrases.of("Advantage distributions: samples per bin, the same bins for every scheme", "bold")
        for line in lines:
            yield Text(line, no_wrap=True, overflow="crop")


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
    trajectories = description["trajectories"]
    counted = "" if trajectories is None else f" · {count(trajectories)} trajectories"
    overview.add_row("groups", f"{count(description['prompts'])} prompts{counted}")
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
    overview.add_row("reward", Text(visible(reward_text)))  # a reward dict's keys are the dump's text
    if description.get("recorded_advantages"):
        overview.add_row("recorded", f"trainer's advantage on {_share(description['recorded_advantages'], samples)}")
    if description.get("response_tokens") is not None:
        overview.add_row("tokens", f"{count(description['response_tokens'])} response tokens")
    if description.get("status"):
        statuses = description["status"].items()
        overview.add_row("status", Text(" · ".join(f"{visible(str(name))} {count(n)}" for name, n in statuses)))
    fields = Table(
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), title="Fields", title_justify="left"
    )
    fields.add_column("field", no_wrap=True, style="bold")
    fields.add_column("type", no_wrap=True)
    fields.add_column("present", justify="right", no_wrap=True)
    fields.add_column("", no_wrap=True, style="dim")
    for column in description["fields"]:
        fields.add_row(
            Text(log_safe(visible(column["name"]))),  # the first cell of a line: escaped before the layout; no markup
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
