"""The gate's rules: what each one checks, and the parser of its one-string spelling.

A gate is a :class:`GateConfig` (rules parsed from CLI-style strings merged
over ``[tool.rollaudit.gate]``), evaluated against a :class:`~rollaudit.Report`
and the table it came from into a :class:`GateResult`. The CLI only parses
options; everything else is here, so a test suite can run the same gate
through the library.

Rule kinds
==========
Two questions, two kinds of rule. Rules that check the trainer: ``--expect-recorded`` and a bound on
``trained`` (the run's own scheme, :class:`~rollaudit._audit.trained_with.trained.TrainedWith`). Rules that
measure the data's exposure: a bound on a named scheme measures what that scheme *would* do to this data,
whatever the trainer did (``batch:sign_flip_rate`` fails on any fan-out run).

bound (``--max`` / ``--min SCHEME:METRIC=LIMIT``)
    a summary metric of a scheme against the reference must stay at most /
    at least ``LIMIT``. ``SCHEME`` may be ``trained``: the row of the run's
    own advantages (recorded, else the scheme named with ``--trained-with``
    or the framework's default). For the rate metrics (:data:`RATE_METRICS`)
    ``LIMIT`` may be written as a percentage (``1%`` = 0.01). An undefined
    metric (e.g. ``token_flip_rate`` without response lengths) fails: a gate
    does not pass on what it measured as undefined. A rule on a scheme the
    dump cannot support (not auditable), or on ``trained`` where the run's
    scheme is unknown, is not evaluated: it neither passes nor fails, and
    the output says so.
recorded (``--expect-recorded SCHEME``)
    the advantages the trainer recorded must equal ``SCHEME``'s within
    ``tolerance * max(1, |recorded| over the row's prompt group)`` on every row that has one; on a
    mismatch the message names the preset that fits best.
requirements (``--require NAME``)
    ``prompt-key`` (every sample has a prompt key), ``trajectory-key``
    (every sample has a trajectory key), ``finite-rewards`` (no NaN/inf
    reward), ``no-singletons`` (no (step, prompt) group of exactly one sample).
findings (``--fail-on CODE,...`` and ``--ignore CODE,...``)
    as a linter's rules: the report must hold no finding of a selected code
    (``rollaudit findings`` lists them). An item is a code, a severity
    (``error``, ``warning``, ``note``: every code of it) or ``all``;
    ``--ignore`` takes codes out of what ``--fail-on`` selects. Each selected
    code is one rule: it fails naming the finding's summary, rows and fix.
baseline (``--baseline FILE`` with ``--baseline-tolerance METRIC:TOL``)
    every metric of every scheme stored in the baseline must stay within its
    tolerance of the stored value, in either direction (a move in the good
    direction also means the baseline is stale). Tolerance syntax, in the
    spirit of pytest-benchmark's ``--benchmark-compare-fail``:

    - ``METRIC:X`` (no ``%``): absolute, ``|now - baseline| <= X``;
    - ``METRIC:X%`` on a rate metric (:data:`RATE_METRICS`: the flip rates
      and ``advantage_cosine``, values in [0, 1]): X percentage points,
      absolute, so ``sign_flip_rate:0.5%`` allows 0.005 either way;
    - ``METRIC:X%`` on any other metric (counts, ``nonzero_inflation``, the
      abs diffs): relative, ``|now - baseline| <= X/100 * |baseline|``, so
      ``nonzero:5%`` allows 5% of the stored count;
    - ``*:TOL``: the tolerance of every metric not named.

    With no tolerance given, every metric is checked and must not move
    beyond float noise; once some are named, only those (and ``*``) are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from .._audit.findings.codes import BY_CODE, CODES
from .._audit.metric_names import METRICS, RATE_METRICS
from .._audit.presets import get_scheme
from .._audit.trained_with.fit import DEFAULT_RECORDED_TOLERANCE
from .._errors import SchemeError, UsageError, did_you_mean

METRIC_NAMES = METRICS  # the gate parses metric names without importing torch
TRAINED = "trained"
"""The scheme name of a bound rule on the run's own advantages."""
"""Metrics whose values are shares (cosine: a signed share): a ``%`` on them means percentage points."""

Requirement = Literal["prompt-key", "trajectory-key", "finite-rewards", "no-singletons"]
REQUIREMENTS: tuple[str, ...] = ("prompt-key", "trajectory-key", "finite-rewards", "no-singletons")
FINDING_GROUPS: tuple[str, ...] = ("all", "error", "warning", "note")
"""What ``--fail-on`` and ``--ignore`` take besides a code: every code, or every code of a severity."""


# ---------------------------------------------------------------------------------------------------------------------
# Rules.


@dataclass(frozen=True)
class BoundRule:
    """``summary[scheme, metric]`` must be ``<= limit`` (op ``max``) or ``>= limit`` (op ``min``)."""

    scheme: str
    metric: str
    op: Literal["max", "min"]
    limit: float

    @property
    def name(self) -> str:
        return f"{self.op} {self.scheme}:{self.metric}"

    @property
    def checks_trainer(self) -> bool:
        """Whether the rule holds the run's own advantages (``trained``), not what a named scheme would do."""
        return self.scheme == TRAINED


@dataclass(frozen=True)
class RecordedRule:
    """The recorded advantages must equal ``scheme``'s within ``tolerance`` (relative to max(1, |recorded|) over
    each row's prompt group)."""

    scheme: str
    tolerance: float = DEFAULT_RECORDED_TOLERANCE

    @property
    def name(self) -> str:
        return f"expect-recorded {self.scheme}"


@dataclass(frozen=True)
class RequireRule:
    """A data requirement: one of :data:`REQUIREMENTS`."""

    requirement: Requirement

    @property
    def name(self) -> str:
        return f"require {self.requirement}"


@dataclass(frozen=True)
class FindingRule:
    """The report must hold no finding of ``code`` (one of :data:`~rollaudit._audit.findings.codes.CODES`)."""

    code: str

    @property
    def name(self) -> str:
        return f"fail-on {self.code}"


@dataclass(frozen=True)
class BaselineTolerance:
    """How far ``metric`` may move from its baseline value; ``metric == "*"`` is the default for the others.

    ``value`` is absolute unless ``relative`` (a fraction of the baseline value). ``text`` is as written.
    """

    metric: str
    value: float
    relative: bool = False
    text: str = ""

    def allowed(self, baseline: float) -> float:
        """The largest move allowed from ``baseline``."""
        return self.value * abs(baseline) if self.relative else self.value


# ---------------------------------------------------------------------------------------------------------------------
# Parsers: one string each, one clear line on any error.


def _known_metrics() -> str:
    return ", ".join(METRIC_NAMES)


def _metric(text: str, where: str) -> str:
    metric = text.strip()
    if metric not in METRIC_NAMES:
        hint = did_you_mean(metric, METRIC_NAMES)
        raise UsageError(f"{where}: unknown metric {metric!r}{hint}; known: {_known_metrics()}")
    return metric


def scheme_name(text: str, where: str) -> str:
    """The scheme string as the report names it (validated: unknown scheme or bad key is a usage error)."""
    try:
        return str(get_scheme(text.strip()))
    except SchemeError as error:
        raise UsageError(f"{where}: {error.line()}") from None


def _number(text: str, where: str, *, percent_ok: bool) -> tuple[float, bool]:
    """A finite number, and whether it was written with ``%`` (then divided by 100)."""
    raw = text.strip()
    is_percent = raw.endswith("%")
    if is_percent and not percent_ok:
        raise UsageError(
            f"{where}: {raw!r}: a percentage is only allowed on a rate ({', '.join(sorted(RATE_METRICS))})"
        )
    try:
        value = float(raw[:-1] if is_percent else raw)
    except ValueError:
        raise UsageError(f"{where}: {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{where}: {raw!r} is not a finite number")
    return (value / 100.0 if is_percent else value), is_percent


def parse_bound(text: str, op: Literal["max", "min"], where: str | None = None) -> BoundRule:
    """``"SCHEME:METRIC=LIMIT"`` to a :class:`BoundRule`; ``LIMIT`` of a rate may be ``1%``.

    The scheme may carry options (``slime-legacy(n=8):sign_flip_rate=0.01``): the limit is after the last
    ``=`` and the metric after the last ``:``.

    >>> parse_bound("batch:sign_flip_rate=1%", "max").limit
    0.01
    """
    where = where or f"--{op} {text.strip()!r}"
    left, equals, limit_text = text.rpartition("=")
    scheme_text, colon, metric_text = left.rpartition(":")
    if not equals or not colon or not scheme_text.strip() or "(" in metric_text or ")" in limit_text:
        raise UsageError(f"{where}: expected SCHEME:METRIC=LIMIT, e.g. batch:sign_flip_rate=0.01")
    metric = _metric(metric_text, where)
    limit, _ = _number(limit_text, where, percent_ok=metric in RATE_METRICS)
    scheme = TRAINED if scheme_text.strip() == TRAINED else scheme_name(scheme_text, where)
    return BoundRule(scheme=scheme, metric=metric, op=op, limit=limit)


def parse_requirement(text: str, where: str | None = None) -> RequireRule:
    """A requirement name (``prompt-key``, ``trajectory-key``, ``finite-rewards``, ``no-singletons``;
    ``_`` works for ``-``)."""
    name = text.strip().lower().replace("_", "-")
    if name not in REQUIREMENTS:
        where = where or f"--require {text.strip()!r}"
        hint = did_you_mean(name, REQUIREMENTS)
        raise UsageError(f"{where}: unknown requirement{hint}; known: {', '.join(REQUIREMENTS)}")
    return RequireRule(name)  # type: ignore[arg-type]


def parse_finding_items(text: str, where: str | None = None) -> tuple[str, ...]:
    """``"CODE,CODE"`` to the items it names: codes, severities or ``all`` (``_`` works for ``-``, any case).

    >>> parse_finding_items("rows-misaligned, warning")
    ('rows-misaligned', 'warning')
    """
    where = where or f"--fail-on {text.strip()!r}"
    items = []
    for part in text.split(","):
        item = part.strip().lower().replace("_", "-")
        if not item:
            raise UsageError(f"{where}: an empty item", expected="codes, severities or all, comma-separated")
        if item not in BY_CODE and item not in FINDING_GROUPS:
            hint = did_you_mean(item, [*BY_CODE, *FINDING_GROUPS])
            raise UsageError(
                f"{where}: unknown finding code {part.strip()!r}{hint}",
                expected=None if hint else "a code `rollaudit findings` lists, error, warning, note or all",
            )
        items.append(item)
    return tuple(dict.fromkeys(items))


def selected_codes(fail_on: tuple[str, ...], ignore: tuple[str, ...]) -> tuple[str, ...]:
    """The codes ``fail_on`` selects and ``ignore`` leaves, in registry order (defects, then laws).

    >>> selected_codes(("warning",), ("law-order", "law-bound", "law-centred"))
    ('turn-level-bias', 'mixed-reward-scales', 'law-equal-rewards', 'law-finite')
    """

    def codes(items: tuple[str, ...]) -> set[str]:
        named = set(items)
        return {entry.code for entry in CODES if {"all", entry.severity, entry.code} & named}

    chosen = codes(fail_on) - codes(ignore)
    return tuple(entry.code for entry in CODES if entry.code in chosen)


def parse_recorded(scheme: str, tolerance: float | str | None = None, where: str | None = None) -> RecordedRule:
    """``--expect-recorded SCHEME`` with an optional tolerance (default 1e-4, relative to max(1, |recorded|) over
    each row's prompt group)."""
    where = where or f"--expect-recorded {scheme.strip()!r}"
    if tolerance is None:
        value = DEFAULT_RECORDED_TOLERANCE
    elif isinstance(tolerance, str):
        value, _ = _number(tolerance, f"{where} tolerance", percent_ok=False)
    else:
        value = float(tolerance)
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{where}: tolerance {tolerance!r} must be a number >= 0")
    return RecordedRule(scheme=scheme_name(scheme, where), tolerance=value)


def parse_baseline_tolerance(text: str, where: str | None = None) -> BaselineTolerance:
    """``"METRIC:X"`` (absolute), ``"METRIC:X%"`` (points on a rate, relative otherwise), ``"*:TOL"`` (default).

    >>> parse_baseline_tolerance("sign_flip_rate:0.5%")
    BaselineTolerance(metric='sign_flip_rate', value=0.005, relative=False, text='sign_flip_rate:0.5%')
    >>> parse_baseline_tolerance("nonzero:5%").relative
    True
    """
    where = where or f"--baseline-tolerance {text.strip()!r}"
    metric_text, colon, value_text = text.rpartition(":")
    if not colon or not metric_text.strip() or not value_text.strip():
        raise UsageError(f"{where}: expected METRIC:TOLERANCE, e.g. sign_flip_rate:0.5% or nonzero:5%")
    metric = "*" if metric_text.strip() == "*" else _metric(metric_text, where)
    value, is_percent = _number(value_text, where, percent_ok=True)
    if value < 0:
        raise UsageError(f"{where}: a tolerance must be >= 0")
    # A percentage on a rate is percentage points; on a count or a ratio it is a share of the baseline value.
    relative = is_percent and metric not in RATE_METRICS
    return BaselineTolerance(metric=metric, value=value, relative=relative, text=text.strip())


def format_value(value: float | None, metric: str | None = None) -> str:
    """A measured value for people: 4 significant digits, a percentage beside a rate, ``undefined`` for None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "undefined"
    # Counts print whole (1898, not 1.898e+03); everything else to 4 significant digits.
    text = str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    if metric in RATE_METRICS and metric != "advantage_cosine":
        text += f" ({value * 100:.4g}%)"
    return text
