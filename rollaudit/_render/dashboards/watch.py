"""What ``rollaudit watch`` shows: a line per step as it is audited, the run's summary when the watch ends, and
the HTML page of the run so far (its per-step trend), rewritten after each step.

Everything is drawn from :class:`~rollaudit._watch.records.StepPoint` (a step's key numbers), never from the
steps' tables, so the page and the summary cost the same at step 10 and at step 10,000.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..._errors import visible
from ..._version import __version__
from ..._watch.records import StepPoint, latest_points
from ..html import page, table, text
from ..text import key_text, percent, plural, ratio
from ..trend import resample, sparkline

_WORST_STEPS = 5
_SPARK_WIDTH = 60
_CHART_WIDTH, _CHART_HEIGHT = 720, 180


def _verdict(point: StepPoint) -> str:
    if point.passed is None:
        return ""
    if point.passed:
        return "PASS" + (f" ({point.unmeasured} not evaluated)" if point.unmeasured else "")
    return "FAIL " + ", ".join(key_text(name, 48) for name in point.failed)


# How the run's own scheme is known, said after its name; recorded advantages need no word.
_EVIDENCE = {"given": " (as given)", "framework default": " (assumed)", "config": " (from its config)"}


def step_line(point: StepPoint, files: Sequence[str] = ()) -> str:
    """One step as one line: ``step 12 · 5,000 samples · 1,250 prompts · trained slime-2204 (assumed): sign
    changed 0.0% (0.0% reversed), 1.00× non-zero · worst batch 23.9% · first found: batch-as-group · PASS``
    (the finding codes no earlier step had)."""
    if point.error is not None:
        where = visible(files[0]) if files else "?"
        return f"step ? · {where}: could not be audited: {visible(point.error)}"
    parts = [f"step {point.step}", f"{point.samples:,} samples", f"{point.prompts:,} prompts"]
    if point.trained is not None:
        evidence = _EVIDENCE.get(point.evidence or "", "")
        parts.append(
            f"trained {key_text(point.trained, 40)}{evidence}: sign changed {percent(point.flips)} "
            f"({percent(point.strict)} reversed), {ratio(point.inflation)} non-zero"
        )
    else:
        parts.append("trained with: unknown")
    if point.worst is not None and point.worst != point.trained and (point.worst_flips or 0) > 0:
        parts.append(f"worst {key_text(point.worst, 40)} {percent(point.worst_flips)}")
    if point.scheme_changed is not None:
        parts.append(visible(point.scheme_changed))
    if point.first_findings:
        parts.append("first found: " + ", ".join(key_text(code, 40) for code in point.first_findings))
    verdict = _verdict(point)
    if verdict:
        parts.append(verdict)
    line = " · ".join(parts)
    return line + " (replaces the earlier record)" if point.replaces else line


def _series(points: Sequence[StepPoint], pick: str) -> list[float]:
    values = []
    for point in points:
        value = getattr(point, pick)
        values.append(math.nan if value is None else float(value))
    return values


def _worst(points: Sequence[StepPoint]) -> list[StepPoint]:
    def badness(point: StepPoint) -> float:
        rate = point.flips if point.flips is not None else point.worst_flips
        return -1.0 if rate is None else rate

    failed = [point for point in points if point.passed is False]
    ranked = sorted(points, key=badness, reverse=True)
    chosen = failed[:_WORST_STEPS] + [point for point in ranked if point not in failed]
    return [point for point in chosen[:_WORST_STEPS] if point.passed is False or badness(point) > 0]


def summary_lines(points: Sequence[StepPoint], how: str) -> list[str]:
    """The run so far, on one screen: steps, failures, the trend of the key rates, the worst steps."""
    audited = [point for point in latest_points(points) if point.error is None]
    unreadable = [point for point in latest_points(points) if point.error is not None]
    failed = [point for point in audited if point.passed is False]
    lines = [
        f"watch {how}: {plural(len(audited), 'step')} audited"
        + (f", {len(unreadable):,} could not be read" if unreadable else "")
        + (f", {len(failed):,} failed a rule" if failed else "")
    ]
    if not audited:
        return lines
    first, last = audited[0], audited[-1]
    trend = []
    for label, pick, name in (
        ("the run's own", "flips", last.trained),
        ("the worst other scheme", "worst_flips", last.worst),
    ):
        values = _series(audited, pick)
        defined = [value for value in values if not math.isnan(value)]
        if defined:
            named = f" ({key_text(name, 32)} at the last step)" if name else ""
            trend.append(
                f"  {label}: {sparkline(resample(values, _SPARK_WIDTH))}  {percent(values[0])} at step {first.step} "
                f"→ {percent(values[-1])} at step {last.step}, max {percent(max(defined))}{named}"
            )
    if trend:
        lines.append("share of signs changed against the reference, per step:")
        lines.extend(trend)
    worst = _worst(audited)
    if worst:
        lines.append("worst steps:")
        lines.extend("  " + step_line(point) for point in worst)
    return lines


def _chart(points: Sequence[StepPoint]) -> str:
    """An inline SVG line chart of the trained row's and the worst scheme's sign-flip rate per step."""
    series = [
        ("trained", _series(points, "flips"), "#b8321a"),
        ("worst scheme", _series(points, "worst_flips"), "#5b6470"),
    ]
    steps = [point.step or 0 for point in points]
    if not steps or all(math.isnan(value) for _, values, _ in series for value in values):
        return ""
    low, high = min(steps), max(steps)
    span = max(high - low, 1)
    top = max([value for _, values, _ in series for value in values if not math.isnan(value)] + [0.01])
    left, bottom = 48, _CHART_HEIGHT - 24

    def x(step: int) -> float:
        return left + (step - low) / span * (_CHART_WIDTH - left - 12)

    def y(value: float) -> float:
        return bottom - value / top * (bottom - 12)

    shapes = [
        f"<line x1='{left}' y1='{bottom}' x2='{_CHART_WIDTH - 12}' y2='{bottom}' stroke='#d0d4da'/>",
        f"<text x='4' y='16' font-size='12' fill='#5b6470'>{text(percent(top))}</text>",
        f"<text x='4' y='{bottom}' font-size='12' fill='#5b6470'>0%</text>",
        f"<text x='{left}' y='{_CHART_HEIGHT - 6}' font-size='12' fill='#5b6470'>step {low}</text>",
        f"<text x='{_CHART_WIDTH - 12}' y='{_CHART_HEIGHT - 6}' font-size='12' fill='#5b6470' "
        f"text-anchor='end'>step {high}</text>",
    ]
    for name, values, colour in series:
        coordinates = [
            f"{x(step):.1f},{y(value):.1f}" for step, value in zip(steps, values, strict=True) if not math.isnan(value)
        ]
        if coordinates:
            shapes.append(
                f"<polyline fill='none' stroke='{colour}' stroke-width='2' points='{' '.join(coordinates)}'>"
                f"<title>{text(name)}</title></polyline>"
            )
    legend = " · ".join(f"<span style='color:{colour}'>■</span> {text(name)}" for name, _, colour in series)
    return (
        f"<figure><svg viewBox='0 0 {_CHART_WIDTH} {_CHART_HEIGHT}' width='{_CHART_WIDTH}' role='img' "
        f"aria-label='share of signs changed per step'>{''.join(shapes)}</svg>"
        f"<figcaption>Share of signs changed against the reference, per step: {legend}</figcaption></figure>"
    )


def render_watch_html(points: Sequence[StepPoint], run: str, state: str) -> str:
    """The page of the run so far: counts, the trend chart, the worst steps and every step's row."""
    latest = latest_points(points)
    audited = [point for point in latest if point.error is None]
    header = [
        "step",
        "samples",
        "prompts",
        "trained",
        "signs changed",
        "reversed",
        "inflation",
        "worst scheme",
        "worst changed",
        "gate",
    ]
    rows = [
        [
            "?" if point.step is None else point.step,
            f"{point.samples:,}",
            f"{point.prompts:,}",
            key_text(point.trained or "unknown", 40),
            percent(point.flips),
            percent(point.strict),
            ratio(point.inflation),
            key_text(point.worst or "", 40),
            percent(point.worst_flips),
            _verdict(point) or ("could not be audited" if point.error else ""),
        ]
        for point in latest
    ]
    classes = [["", "", "", "", "", "", "", "", "", "bad" if point.passed is False else ""] for point in latest]
    summary = "".join(f"<li>{text(line)}</li>" for line in summary_lines(points, state)[1:])
    body = (
        f"<header><h1>rollaudit watch</h1><p class='source'>{text(run)}</p>"
        f"<p>{text(summary_lines(points, state)[0])}</p></header>"
        + (f"<h2>Trend</h2>{_chart(audited)}<ul class='muted'>{summary}</ul>" if audited else "")
        + f"<h2>Steps</h2>{table(header, rows, sortable=True, cell_classes=classes)}"
        + f"<footer><p>rollaudit {text(__version__)}</p></footer>"
    )
    return page(f"rollaudit watch: {run}", f"<div class='rollaudit'>{body}</div>")
