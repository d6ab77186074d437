"""What the dashboards (TensorBoard, Weights & Biases) show of an audit: each step's metrics as scalars, named by tag.

A tag is ``rollaudit/<row>/<metric>``: ``<row>`` is ``trained`` for the run's own advantages (the recorded ones,
else the scheme it trained with) and each other audited scheme's name otherwise; ``<metric>`` is the metric's JSON
name (``sign_flip_rate``, ``nonzero_inflation``, ...), as ``--json`` and the gate's rules spell it. Both UIs group
charts by a tag's first part, so the audit's charts stay together beside the trainer's. The share of a step's
prompts with no learning signal is ``rollaudit/data/no_signal_prompt_share``, and the run's own scheme is the text
``rollaudit/trained/scheme``, written where it changes.

Tags are built from rollaudit's own names. A scheme string keeps its letters, digits and ``-_.=``, drops its
spaces, and every other character becomes ``_`` (``slime-legacy(n=8)`` is ``slime-legacy_n=8``): the filter box of
both UIs is a regular expression, in which ``(`` would not match itself. Any text that reaches a dashboard (a tag's
part, a run's name or group, a text event) goes through :func:`clean_label` first: no control or bidi character,
no ``..``, no leading ``/``, at most 256 characters.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._audit.metric_names import METRICS
from ..._audit.trained_with.trained import parts_phrase

if TYPE_CHECKING:
    from ..._audit.report import Report

PREFIX = "rollaudit"
TRAINED = "trained"
DATA = "data"
NO_SIGNAL_TAG = f"{PREFIX}/{DATA}/no_signal_prompt_share"
SCHEME_TAG = f"{PREFIX}/{TRAINED}/scheme"
MAX_LABEL = 256
"""The most characters of any text rollaudit puts on a dashboard."""

# Unicode's "other" categories: controls (terminal escapes), formats (bidi overrides and isolates, zero-width
# characters), surrogates, private use, unassigned; and the line and paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NOT_IN_TAGS = re.compile(r"[^A-Za-z0-9_.=-]+")


def clean_label(text: object, limit: int = MAX_LABEL) -> str:
    """``text`` fit to be shown on a dashboard: whitespace folded to single spaces, control, format (bidi) and
    unassigned characters dropped, every ``..`` made ``_``, no leading ``/``, cut to ``limit`` characters."""
    folded = " ".join(str(text).split())
    kept = "".join(char for char in folded if unicodedata.category(char) not in _HIDDEN_CATEGORIES)
    kept = re.sub(r"\.{2,}", "_", kept).lstrip("/ ")
    return kept[:limit].rstrip()


def tag_part(name: object) -> str:
    """One part of a tag, from a name: :func:`clean_label` without its spaces, then every run of characters other
    than letters, digits and ``-_.=`` made ``_`` (``/`` included: a part never splits a tag); never empty."""
    part = _NOT_IN_TAGS.sub("_", "".join(clean_label(name).split())).strip("_")
    return re.sub(r"\.{2,}", "_", part).lstrip(".")[:MAX_LABEL] or "_"


def row_parts(report: Report) -> dict[str, str]:
    """Each row of the report's ``per_step`` and the tag part it is written under: ``trained`` for the run's own
    advantages, the scheme's :func:`tag_part` for every other; two rows that would share a part are told apart
    by a suffix (``_2``), and no row takes ``trained`` or ``data``."""
    rows = [str(row) for row in report.per_step.index.get_level_values(1).unique()]
    trained = report.trained_row
    taken = {TRAINED, DATA}
    parts = {}
    for row in rows:
        if row == trained:
            parts[row] = TRAINED
            continue
        base = part = tag_part(row)
        suffix = 2
        while part in taken:
            part = f"{base}_{suffix}"[-MAX_LABEL:]
            suffix += 1
        taken.add(part)
        parts[row] = part
    return parts


def scheme_text(scheme: str | None, evidence: str | None) -> str:
    """The run's own scheme as a dashboard shows it: ``batch (recorded)``, ``unknown`` where nothing says."""
    name = scheme if scheme is not None else "no preset matches" if evidence == "recorded" else "unknown"
    return clean_label(name if evidence in (None, "unknown") else f"{name} ({evidence})")


def scheme_changes(report: Report) -> list[tuple[int, str]]:
    """The run's own scheme, as text, at each step where it changes: ``[(step, text)]``: each step range's at its
    first step where the run changed scheme between steps; else the run's scheme (or its scheme per environment)
    at its first step."""
    steps = report.per_step.index.get_level_values(0)
    if len(steps) == 0:
        return []
    trained = report.trained_with
    if trained.changed and all(part.where is None for part in trained.parts):
        return [
            (part.steps[0], scheme_text(part.scheme or ("undetermined" if part.undetermined else None), part.evidence))
            for part in trained.parts
        ]
    if trained.changed:
        return [(int(steps.min()), clean_label(f"{parts_phrase(trained.parts)} ({trained.evidence})"))]
    return [(int(steps.min()), scheme_text(trained.scheme, trained.evidence))]


@dataclass(frozen=True)
class StepScalars:
    """What one step puts on a dashboard: ``scalars`` (tag -> number; a metric the step cannot measure, null in
    ``--json``, is left out) and ``texts`` (tag -> text)."""

    step: int
    scalars: dict[str, float]
    texts: dict[str, str] = field(default_factory=dict)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def no_signal_shares(report: Report) -> dict[int, float]:
    """Per step, the share of its prompts whose samples all got the same reward (no learning signal); empty where
    the dump has no prompt groups."""
    prompts = report.per_prompt
    if prompts.empty or "no_signal" not in prompts.columns:
        return {}
    shares = prompts.groupby("step", sort=True)["no_signal"].mean()
    return {int(step): float(share) for step, share in shares.items()}


def report_scalars(report: Report) -> Iterator[StepScalars]:
    """Every step of a report, in step order, as the dashboards show it (see the module's docstring)."""
    frame = report.per_step
    if frame.empty:
        return
    parts = row_parts(report)
    metrics = [metric for metric in METRICS if metric in frame.columns]
    tags = {row: [f"{PREFIX}/{part}/{metric}" for metric in metrics] for row, part in parts.items()}
    shares = no_signal_shares(report)
    texts = dict(scheme_changes(report))
    by_step: dict[int, dict[str, float]] = {}
    values = frame[metrics].to_numpy(dtype="float64", na_value=math.nan)
    for (step, row), numbers in zip(frame.index.tolist(), values, strict=True):
        scalars = by_step.setdefault(int(step), {})
        for tag, number in zip(tags[str(row)], numbers.tolist(), strict=True):
            if math.isfinite(number):
                scalars[tag] = number
    for step in sorted(by_step):
        scalars = by_step[step]
        share = _number(shares.get(step))
        if share is not None:
            scalars[NO_SIGNAL_TAG] = share
        yield StepScalars(step, scalars, {SCHEME_TAG: texts[step]} if step in texts else {})


def recorded_scheme_text(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The run's own scheme as the last of the records of an earlier watch says it (``--jsonl``), or None."""
    for record in reversed(records):
        trained = record.get("trained_with")
        if isinstance(trained, Mapping):
            scheme, evidence = trained.get("scheme"), trained.get("evidence")
            return scheme_text(scheme if isinstance(scheme, str) else None, str(evidence) if evidence else None)
    return None
