"""The CI regression gate: rules over an audit, each reported by name with its measured value and limit.

A gate is a :class:`GateConfig` (rules parsed from CLI-style strings merged
over ``[tool.rollaudit.gate]``), evaluated against a :class:`~rollaudit.Report`
and the table it came from into a :class:`GateResult`. The CLI only parses
options; everything else is here, so a test suite can run the same gate
through the library.

Rule kinds
==========
bound (``--max`` / ``--min SCHEME:METRIC=LIMIT``)
    a summary metric of a scheme against the reference must stay at most /
    at least ``LIMIT``. For the rate metrics (:data:`RATE_METRICS`) ``LIMIT``
    may be written as a percentage (``1%`` = 0.01). An undefined metric
    (e.g. ``token_flip_rate`` without response lengths) fails: a gate does
    not pass on what it could not measure.
recorded (``--expect-recorded SCHEME``)
    the advantages the trainer recorded must equal ``SCHEME``'s within
    ``tolerance * max(1, max |recorded|)`` on every row that has one; on a
    mismatch the message names the preset that fits best.
requirements (``--require NAME``)
    ``prompt-key`` (every sample has a prompt key), ``trajectory-key``
    (every sample has a trajectory key), ``finite-rewards`` (no NaN/inf
    reward), ``no-singletons`` (no (step, prompt) group of exactly one sample).
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

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow.compute as pc

from ._detect import DEFAULT_RECORDED_TOLERANCE, advantage_errors, error_scale, fit_presets, recorded_mask
from ._errors import GateFailed, SchemeError, UsageError
from ._metric_names import METRICS, RATE_METRICS
from ._output import write_atomic
from ._report import RECORDED_ROW, json_value
from ._schemes import get_scheme, split_schemes
from ._table import POSITION, PROMPT, RECORDED_ADVANTAGE, REWARD, STEP, TRAJECTORY, validate_table

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser under its PyPI name, when installed
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import pyarrow as pa

    from ._report import Report

GATE_SCHEMA_VERSION = 1
BASELINE_SCHEMA_VERSION = 1
BASELINE_KIND = "rollaudit-baseline"
DEFAULT_GATE_SCHEMES = ("batch", "prompt", "trajectory")

METRIC_NAMES = METRICS  # the gate parses metric names without importing torch
"""Metrics whose values are shares (cosine: a signed share): a ``%`` on them means percentage points."""

_UNDEFINED_BECAUSE = {
    "nonzero_inflation": "the reference gives no sample a nonzero advantage",
    "token_flip_rate": "the dump has no response lengths",
    "advantage_cosine": "one side gives every sample a zero advantage",
}

Requirement = Literal["prompt-key", "trajectory-key", "finite-rewards", "no-singletons"]
REQUIREMENTS: tuple[str, ...] = ("prompt-key", "trajectory-key", "finite-rewards", "no-singletons")

# Differences below this are float noise (the same dump audited on another device), never a move.
_FLOAT_NOISE = 1e-9


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


@dataclass(frozen=True)
class RecordedRule:
    """The recorded advantages must equal ``scheme``'s within ``tolerance`` (relative to max(1, max |recorded|))."""

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


@dataclass(frozen=True)
class Baseline:
    """A stored baseline: the reference it was measured against and ``{scheme: {metric: value or None}}``."""

    path: str
    reference: str
    summary: dict[str, dict[str, float | None]]
    samples: int | None = None


# ---------------------------------------------------------------------------------------------------------------------
# Parsers: one string each, one clear line on any error.


def _known_metrics() -> str:
    return ", ".join(METRIC_NAMES)


def _metric(text: str, where: str) -> str:
    metric = text.strip()
    if metric not in METRIC_NAMES:
        raise UsageError(f"{where}: unknown metric {metric!r}; known: {_known_metrics()}")
    return metric


def _scheme_name(text: str, where: str) -> str:
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
    return BoundRule(scheme=_scheme_name(scheme_text, where), metric=metric, op=op, limit=limit)


def parse_requirement(text: str, where: str | None = None) -> RequireRule:
    """A requirement name (``prompt-key``, ``trajectory-key``, ``finite-rewards``, ``no-singletons``;
    ``_`` works for ``-``)."""
    name = text.strip().lower().replace("_", "-")
    if name not in REQUIREMENTS:
        where = where or f"--require {text.strip()!r}"
        raise UsageError(f"{where}: unknown requirement; known: {', '.join(REQUIREMENTS)}")
    return RequireRule(name)  # type: ignore[arg-type]


def parse_recorded(scheme: str, tolerance: float | str | None = None, where: str | None = None) -> RecordedRule:
    """``--expect-recorded SCHEME`` with an optional tolerance (default 1e-4, relative to max(1, max |recorded|))."""
    where = where or f"--expect-recorded {scheme.strip()!r}"
    if tolerance is None:
        value = DEFAULT_RECORDED_TOLERANCE
    elif isinstance(tolerance, str):
        value, _ = _number(tolerance, f"{where} tolerance", percent_ok=False)
    else:
        value = float(tolerance)
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{where}: tolerance {tolerance!r} must be a number >= 0")
    return RecordedRule(scheme=_scheme_name(scheme, where), tolerance=value)


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


# ---------------------------------------------------------------------------------------------------------------------
# Configuration.


@dataclass(frozen=True)
class GateConfig:
    """Every rule of one gate run, plus what to audit.

    ``reference``: None means the baseline's reference when a baseline is
    given, else ``prompt``; use :attr:`reference_name`. ``schemes``: extra
    schemes to audit (and store in a written baseline) besides those the
    rules mention. ``source``: the config file the settings came from.
    """

    bounds: tuple[BoundRule, ...] = ()
    requirements: tuple[RequireRule, ...] = ()
    recorded: RecordedRule | None = None
    baseline: Baseline | None = None
    baseline_tolerances: tuple[BaselineTolerance, ...] = ()
    reference: str | None = None
    schemes: tuple[str, ...] = ()
    source: str | None = None

    @property
    def reference_name(self) -> str:
        """The reference every metric is measured against."""
        if self.reference is not None:
            return self.reference
        return self.baseline.reference if self.baseline is not None else "prompt"

    @property
    def has_rules(self) -> bool:
        return bool(self.bounds or self.requirements or self.recorded or self.baseline)


CONFIG_KEYS = (
    "max",
    "min",
    "reference",
    "schemes",
    "require",
    "expect_recorded",
    "recorded_tolerance",
    "baseline",
    "baseline_tolerance",
)


def find_pyproject(start_dir: str | os.PathLike[str] = ".") -> Path | None:
    """The nearest ``pyproject.toml`` in ``start_dir`` or a parent that has a ``[tool.rollaudit.gate]`` table."""
    directory = Path(start_dir).resolve()
    for candidate in (directory, *directory.parents):
        path = candidate / "pyproject.toml"
        try:
            present = path.is_file()
        except PermissionError:
            present = False  # a directory we may not look into holds no config we could read
        if present and _gate_table(_read_toml(path), path, required=False) is not None:
            return path
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    if tomllib is None:
        raise UsageError("reading a TOML config needs Python 3.11 or the tomli package", file=str(path))
    try:
        with path.open("rb") as stream:
            return tomllib.load(stream)
    except FileNotFoundError:
        raise UsageError("config file does not exist", file=str(path)) from None
    except IsADirectoryError:
        raise UsageError("config is a directory", file=str(path), expected="a TOML file") from None
    except OSError as error:
        raise UsageError(f"cannot read config: {error.strerror or error}", file=str(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"not valid TOML: {error}", file=str(path)) from None


def _gate_table(document: dict[str, Any], path: Path, *, required: bool) -> dict[str, Any] | None:
    """``[tool.rollaudit.gate]`` of a document; for an explicit non-pyproject file, its top-level keys."""
    table: Any = document
    for key in ("tool", "rollaudit", "gate"):
        table = table.get(key) if isinstance(table, dict) else None
        if table is None:
            break
    if table is None:
        if not required:
            return None
        if path.name == "pyproject.toml":
            raise UsageError("has no [tool.rollaudit.gate] table", file=str(path))
        # A dedicated gate file (``--config ci/gate.toml``) may hold the keys at the top level.
        table = {key: value for key, value in document.items() if key != "tool"}
    if not isinstance(table, dict):
        raise UsageError("[tool.rollaudit.gate] is not a table", file=str(path))
    return table


def _strings(value: Any, key: str, path: str) -> list[str]:
    """A config value that is one string or a list of strings."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise UsageError("must be a string or a list of strings", file=path, field=key)


def _in_config(path: str, key: str, parse: Any, *args: Any, **options: Any) -> Any:
    """Run a parser on a config value; its error names the config file and the key."""
    try:
        return parse(*args, **options)
    except UsageError as error:
        raise UsageError(error.message, file=path, field=key) from None


def _bounds_from_config(value: Any, op: Literal["max", "min"], path: str) -> list[BoundRule]:
    """``max``/``min``: a list of ``"SCHEME:METRIC=LIMIT"`` strings or ``{scheme, metric, limit}`` tables,
    or a table ``{"SCHEME:METRIC" = LIMIT}``."""
    if isinstance(value, dict):
        items: list[Any] = [f"{target}={limit}" for target, limit in value.items()]
    elif isinstance(value, (str, list)):
        items = [value] if isinstance(value, str) else list(value)
    else:
        raise UsageError("must be a list of SCHEME:METRIC=LIMIT strings or a table", file=path, field=op)
    rules = []
    for item in items:
        if isinstance(item, dict):
            missing = [name for name in ("scheme", "metric", "limit") if name not in item]
            if missing or set(item) - {"scheme", "metric", "limit"}:
                raise UsageError("a rule table has exactly the keys scheme, metric, limit", file=path, field=op)
            item = f"{item['scheme']}:{item['metric']}={item['limit']}"
        if not isinstance(item, str):
            raise UsageError(f"{item!r} is not a SCHEME:METRIC=LIMIT string", file=path, field=op)
        rules.append(_in_config(path, op, parse_bound, item, op, where=repr(item)))
    return rules


def _tolerances_from_config(value: Any, path: str) -> list[BaselineTolerance]:
    """``baseline_tolerance``: a list of ``"METRIC:TOL"`` strings or a table ``{METRIC = "TOL"}``."""
    items = [f"{metric}:{tol}" for metric, tol in value.items()] if isinstance(value, dict) else value
    return [
        _in_config(path, "baseline_tolerance", parse_baseline_tolerance, item, where=repr(item))
        for item in _strings(items, "baseline_tolerance", path)
    ]


def load_gate_config(path: str | os.PathLike[str] | None = None, start_dir: str | os.PathLike[str] = ".") -> GateConfig:
    """The gate configuration of a file: ``path`` (``--config FILE``), else the nearest ``pyproject.toml``
    with a ``[tool.rollaudit.gate]`` table in ``start_dir`` or its parents, else an empty config.

    ``path`` may be a ``pyproject.toml`` (its ``[tool.rollaudit.gate]``) or a
    dedicated TOML file with the keys at the top level. Keys (``-`` and
    ``_`` are the same): ``max``, ``min`` (lists of ``"SCHEME:METRIC=LIMIT"``,
    or a table ``{"SCHEME:METRIC" = LIMIT}``), ``reference``, ``schemes``,
    ``require`` (list of requirement names), ``expect_recorded``,
    ``recorded_tolerance``, ``baseline`` (a path, relative to the config
    file's directory), ``baseline_tolerance`` (list of ``"METRIC:TOL"``).
    An unreadable file, a malformed value or an unknown key is a
    :class:`UsageError` naming the file and the key.
    """
    if path is None:
        found = find_pyproject(start_dir)
        if found is None:
            return GateConfig()
        config_path = found
    else:
        config_path = Path(path)
    table = _gate_table(_read_toml(config_path), config_path, required=True) or {}
    where = str(config_path)
    values: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        if key not in CONFIG_KEYS:
            raise UsageError(f"unknown key; known: {', '.join(CONFIG_KEYS)}", file=where, field=raw_key)
        values[key] = value

    bounds = [
        *_bounds_from_config(values.get("max", []), "max", where),
        *_bounds_from_config(values.get("min", []), "min", where),
    ]
    requirements = [
        _in_config(where, "require", parse_requirement, item, where=repr(item))
        for item in _strings(values.get("require", []), "require", where)
    ]
    reference = None
    if "reference" in values:
        if not isinstance(values["reference"], str):
            raise UsageError("must be a scheme string", file=where, field="reference")
        reference = _in_config(where, "reference", _scheme_name, values["reference"], repr(values["reference"]))
    schemes: list[str] = []
    for item in _strings(values.get("schemes", []), "schemes", where):
        parts = _in_config(where, "schemes", _split, item)
        schemes.extend(_in_config(where, "schemes", _scheme_name, part, repr(part)) for part in parts)
    recorded = None
    tolerance = values.get("recorded_tolerance")
    if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float, str))):
        raise UsageError("must be a number", file=where, field="recorded_tolerance")
    if "expect_recorded" in values:
        if not isinstance(values["expect_recorded"], str):
            raise UsageError("must be a scheme string", file=where, field="expect_recorded")
        recorded = _in_config(
            where,
            "expect_recorded",
            parse_recorded,
            values["expect_recorded"],
            tolerance,
            repr(values["expect_recorded"]),
        )
    elif tolerance is not None:
        raise UsageError("is set but expect_recorded is not", file=where, field="recorded_tolerance")
    baseline = None
    if "baseline" in values:
        if not isinstance(values["baseline"], str):
            raise UsageError("must be a path string", file=where, field="baseline")
        # Relative to the config file, so the gate finds it from any working directory.
        baseline = read_baseline(config_path.parent / values["baseline"])
    tolerances = _tolerances_from_config(values.get("baseline_tolerance", []), where)
    config = GateConfig(
        bounds=tuple(_merge_bounds([], bounds)),
        requirements=tuple(dict.fromkeys(requirements)),
        recorded=recorded,
        baseline=baseline,
        baseline_tolerances=tuple(_merge_tolerances([], tolerances)),
        reference=reference,
        schemes=tuple(dict.fromkeys(schemes)),
        source=where,
    )
    _check_reference(config)
    return config


def _split(text: str) -> list[str]:
    try:
        return split_schemes(text)
    except SchemeError as error:
        raise UsageError(error.line()) from None


def _merge_bounds(base: Iterable[BoundRule], overrides: Iterable[BoundRule]) -> list[BoundRule]:
    """Later rules replace earlier ones on the same (op, scheme, metric); order of first appearance kept."""
    merged: dict[tuple[str, str, str], BoundRule] = {}
    for rule in (*base, *overrides):
        merged[(rule.op, rule.scheme, rule.metric)] = rule
    return list(merged.values())


def _merge_tolerances(
    base: Iterable[BaselineTolerance], overrides: Iterable[BaselineTolerance]
) -> list[BaselineTolerance]:
    merged: dict[str, BaselineTolerance] = {}
    for tolerance in (*base, *overrides):
        merged[tolerance.metric] = tolerance
    return list(merged.values())


def _check_reference(config: GateConfig) -> None:
    baseline = config.baseline
    if baseline is not None and config.reference is not None and config.reference != baseline.reference:
        raise UsageError(
            f"baseline was measured against reference {baseline.reference!r}, the gate uses {config.reference!r}",
            file=baseline.path,
            expected=f"--reference {baseline.reference} or a baseline written with --reference {config.reference}",
        )


def gate_config(
    base: GateConfig | None = None,
    *,
    max_rules: Sequence[str] = (),
    min_rules: Sequence[str] = (),
    reference: str | None = None,
    schemes: str | Sequence[str] | None = None,
    require: Sequence[str] = (),
    expect_recorded: str | None = None,
    recorded_tolerance: float | None = None,
    baseline: str | os.PathLike[str] | None = None,
    baseline_tolerance: Sequence[str] = (),
) -> GateConfig:
    """CLI-style values merged over ``base`` (usually :func:`load_gate_config`'s result).

    ``max_rules``/``min_rules`` are ``"SCHEME:METRIC=LIMIT"`` strings; a rule
    on the same (op, scheme, metric) as the config's replaces it, others add
    to it. ``require`` adds requirements. ``reference``, ``expect_recorded``,
    ``recorded_tolerance`` and ``baseline`` (a path, relative to the working
    directory) replace the config's when given. ``baseline_tolerance``
    entries replace the config's for the same metric. ``schemes`` (a list, or
    one comma-separated string) adds schemes to audit.
    """
    base = base or GateConfig()
    bounds = [*(parse_bound(text, "max") for text in max_rules), *(parse_bound(text, "min") for text in min_rules)]
    requirements = [parse_requirement(text) for text in require]
    extra_schemes: list[str] = []
    for item in [schemes] if isinstance(schemes, str) else (schemes or []):
        extra_schemes.extend(_scheme_name(part, "--schemes") for part in _split(item))
    recorded = base.recorded
    if expect_recorded is not None:
        recorded = parse_recorded(expect_recorded, recorded_tolerance)
    elif recorded_tolerance is not None:
        if recorded is None:
            raise UsageError("--recorded-tolerance needs --expect-recorded SCHEME")
        recorded = parse_recorded(recorded.scheme, recorded_tolerance)
    config = replace(
        base,
        bounds=tuple(_merge_bounds(base.bounds, bounds)),
        requirements=tuple(dict.fromkeys((*base.requirements, *requirements))),
        recorded=recorded,
        baseline=read_baseline(baseline) if baseline is not None else base.baseline,
        baseline_tolerances=tuple(
            _merge_tolerances(base.baseline_tolerances, (parse_baseline_tolerance(t) for t in baseline_tolerance))
        ),
        reference=_scheme_name(reference, "--reference") if reference is not None else base.reference,
        schemes=tuple(dict.fromkeys((*base.schemes, *extra_schemes))),
    )
    _check_reference(config)
    return config


def require_rules(config: GateConfig, writing_baseline: bool = False) -> None:
    """A usage error when the gate has nothing to check (a typo in the config section passes nothing silently);
    writing a baseline alone is a valid run."""
    if not config.has_rules and not writing_baseline:
        where = f" (config: {config.source})" if config.source else " (no [tool.rollaudit.gate] found)"
        raise UsageError(
            "no gate rules given" + where,
            expected="--max/--min SCHEME:METRIC=LIMIT, --expect-recorded, --require, --baseline, or --write-baseline",
        )


def schemes_needed(config: GateConfig) -> list[str]:
    """The schemes to audit, in order: those the rules and the baseline mention, plus ``config.schemes``;
    the default trio when nothing names one. The reference is added by ``rollaudit.audit`` itself."""
    names = [
        *config.schemes,
        *(rule.scheme for rule in config.bounds),
        *(config.baseline.summary if config.baseline is not None else ()),
    ]
    if not names:
        names = list(DEFAULT_GATE_SCHEMES)
    return list(dict.fromkeys(names))


# ---------------------------------------------------------------------------------------------------------------------
# Results.


@dataclass(frozen=True)
class RuleResult:
    """One rule's outcome. ``measured``: the value checked (None when undefined); ``limit``: the bound it was
    held to (for a baseline metric the largest allowed move); ``limit_text``: the limit as a person reads it."""

    name: str
    passed: bool
    measured: float | None
    limit: float | None
    message: str
    kind: str = ""
    limit_text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return json_value(
            {
                "name": self.name,
                "kind": self.kind,
                "passed": self.passed,
                "measured": self.measured,
                "limit": self.limit,
                "limit_text": self.limit_text,
                "message": self.message,
            }
        )


@dataclass(frozen=True)
class GateResult:
    """Every rule's outcome, in rule order; ``report`` is the audit the gate measured (for a baseline)."""

    results: tuple[RuleResult, ...]
    reference: str = "prompt"
    samples: int = 0
    report: Report | None = field(default=None, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    @property
    def failures(self) -> list[RuleResult]:
        return [result for result in self.results if not result.passed]

    @property
    def exit_code(self) -> int:
        """0 when every rule holds, 1 otherwise (usage and input errors exit 2 before a result exists)."""
        return 0 if self.passed else 1

    def summary_line(self) -> str:
        """One line: how many rules passed, or which failed."""
        if self.passed:
            return f"gate passed: {len(self.results)} rule{'s' if len(self.results) != 1 else ''} held"
        names = ", ".join(result.name for result in self.failures)
        return f"gate failed: {len(self.failures)} of {len(self.results)} rules ({names})"

    def raise_for_failures(self) -> None:
        """Raise :class:`GateFailed` (exit code 1) when a rule failed."""
        if not self.passed:
            raise GateFailed(self.summary_line())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready document, versioned by ``schema_version``."""
        return json_value(
            {
                "schema_version": GATE_SCHEMA_VERSION,
                "passed": self.passed,
                "reference": self.reference,
                "samples": self.samples,
                "counts": {"rules": len(self.results), "failed": len(self.failures)},
                "rules": [result.to_dict() for result in self.results],
            }
        )


def format_value(value: float | None, metric: str | None = None) -> str:
    """A measured value for people: 4 significant digits, a percentage beside a rate, ``undefined`` for None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "undefined"
    # Counts print whole (1898, not 1.898e+03); everything else to 4 significant digits.
    text = str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    if metric in RATE_METRICS and metric != "advantage_cosine":
        text += f" ({value * 100:.4g}%)"
    return text


def _number_or_none(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _bound_limit_text(rule: BoundRule) -> str:
    return f"{'<=' if rule.op == 'max' else '>='} {format_value(rule.limit, rule.metric)}"


def _bound_result(rule: BoundRule, report: Report) -> RuleResult:
    measured = _number_or_none(report.summary.loc[rule.scheme, rule.metric])
    limit_text = _bound_limit_text(rule)
    target = f"{rule.scheme}:{rule.metric} vs {report.reference}"
    if measured is None:
        why = _UNDEFINED_BECAUSE.get(rule.metric, "no sample could be compared")
        return RuleResult(rule.name, False, None, rule.limit, f"{target} is undefined ({why})", "bound", limit_text)
    passed = measured <= rule.limit if rule.op == "max" else measured >= rule.limit
    if rule.op == "max":
        verdict = "at or below the maximum" if passed else "above the maximum"
    else:
        verdict = "at or above the minimum" if passed else "below the minimum"
    message = f"{target} = {format_value(measured, rule.metric)}, {verdict} {format_value(rule.limit, rule.metric)}"
    if not passed and report.info.get("steps", 1) > 1:
        message += _worst_step(report, rule)
    return RuleResult(rule.name, passed, measured, rule.limit, message, "bound", limit_text)


def _worst_step(report: Report, rule: BoundRule) -> str:
    """Where a failing bound is worst, for a multi-step run."""
    by_step = report.per_step.xs(rule.scheme, level="scheme")[rule.metric].dropna()
    if by_step.empty:
        return ""
    step = by_step.idxmax() if rule.op == "max" else by_step.idxmin()
    return f"; worst at step {step}: {format_value(float(by_step[step]), rule.metric)}"


def _first_row_where(mask: Any) -> int:
    return int(pc.index(mask, True).as_py())


def _row_place(table: pa.Table, row: int) -> str:
    step = table.column(STEP)[row].as_py()
    position = table.column(POSITION)[row].as_py()
    return f"row {row} (step {step}, position {position})"


def _key_result(rule: RequireRule, table: pa.Table, column: str, what: str) -> RuleResult:
    keys = table.column(column)
    missing = keys.null_count
    total = table.num_rows
    if not missing:
        message = f"all {total} samples have a {what}"
    else:
        first = _row_place(table, _first_row_where(pc.is_null(keys)))
        message = f"{missing} of {total} samples have no {what} (first: {first})"
    return RuleResult(rule.name, not missing, float(missing), 0.0, message, "require", "0 missing")


def _finite_rewards_result(rule: RequireRule, table: pa.Table) -> RuleResult:
    rewards = table.column(REWARD)
    nonfinite = pc.invert(pc.is_finite(rewards))
    count = int(pc.sum(nonfinite).as_py() or 0)
    if not count:
        message = f"all {table.num_rows} rewards are finite"
    else:
        row = _first_row_where(nonfinite)
        message = (
            f"{count} of {table.num_rows} rewards are NaN or inf "
            f"(first: {_row_place(table, row)}, reward {rewards[row].as_py()})"
        )
    return RuleResult(rule.name, not count, float(count), 0.0, message, "require", "0 non-finite")


def _no_singletons_result(rule: RequireRule, table: pa.Table) -> RuleResult:
    """(step, prompt) groups of exactly one sample; samples without a prompt key are the prompt-key rule's."""
    keyed = table.filter(pc.is_valid(table.column(PROMPT))).select([STEP, PROMPT])
    unkeyed = table.num_rows - keyed.num_rows
    # Single-threaded grouping keeps groups in order of first appearance, so "first" means first in the dump.
    sizes = keyed.group_by([STEP, PROMPT], use_threads=False).aggregate([([], "count_all")])
    singletons = sizes.filter(pc.equal(sizes.column("count_all"), 1))
    count = singletons.num_rows
    if not count:
        message = f"no one-sample group among {sizes.num_rows} prompt groups"
    else:
        message = (
            f"{count} of {sizes.num_rows} prompt groups have one sample (first: prompt "
            f"{singletons.column(PROMPT)[0].as_py()!r} at step {singletons.column(STEP)[0].as_py()})"
        )
    if unkeyed:
        message += f"; {unkeyed} samples without a prompt key not checked"
    return RuleResult(rule.name, not count, float(count), 0.0, message, "require", "0 one-sample groups")


def check_requirements(table: pa.Table, config: GateConfig) -> list[RuleResult]:
    """The data requirements, from the table alone: they hold or fail even where the audit cannot run
    (missing prompt keys make every prompt-grouped scheme an error)."""
    results = []
    for rule in config.requirements:
        if rule.requirement == "prompt-key":
            results.append(_key_result(rule, table, PROMPT, "prompt key"))
        elif rule.requirement == "trajectory-key":
            results.append(_key_result(rule, table, TRAJECTORY, "trajectory key"))
        elif rule.requirement == "finite-rewards":
            results.append(_finite_rewards_result(rule, table))
        else:
            results.append(_no_singletons_result(rule, table))
    return results


def _recorded_result(rule: RecordedRule, table: pa.Table, device: str) -> RuleResult:
    from ._api import recompute

    limit_text = f"max error <= {rule.tolerance:g}"
    present = recorded_mask(table)
    if not present.any():
        message = (
            "the dump holds no recorded advantages (only train dumps, TRL parquet or tables with an advantage "
            "column do)"
        )
        return RuleResult(rule.name, False, None, rule.tolerance, message, "recorded", limit_text)
    recorded = table.column(RECORDED_ADVANTAGE).to_numpy(zero_copy_only=False).astype(np.float64)[present]
    try:
        recomputed = recompute(table, [rule.scheme], device).column(0).to_numpy(zero_copy_only=False)[present]
    except SchemeError as error:
        # The expected scheme cannot even run on this dump: it is not what the trainer did.
        message = f"{rule.scheme} cannot run on this dump ({error.line()}); {_best_fit_text(table, rule)}"
        return RuleResult(rule.name, False, None, rule.tolerance, message, "recorded", limit_text)
    errors = advantage_errors(recorded, recomputed)
    scale = error_scale(recorded)
    allowed = rule.tolerance * scale
    if scale != 1.0:
        limit_text = f"max error <= {allowed:.4g} ({rule.tolerance:g} x max |recorded| {scale:.4g})"
    worst = float(errors.max())
    passed = worst <= allowed
    over = int((errors > allowed).sum())
    counted = f"{int(present.sum())} of {table.num_rows} samples with a recorded advantage"
    if passed:
        message = f"recorded advantages match {rule.scheme} (max error {format_value(worst)} over {counted})"
    else:
        message = (
            f"recorded advantages do not match {rule.scheme}: {over} samples off by more than {allowed:.4g} "
            f"(max error {format_value(worst)} over {counted}); {_best_fit_text(table, rule)}"
        )
    return RuleResult(rule.name, passed, worst, allowed, message, "recorded", limit_text)


def _best_fit_text(table: pa.Table, rule: RecordedRule) -> str:
    fits = fit_presets(table, rule.tolerance)
    if not fits:
        return "no preset runs on this dump"
    best = fits[0]
    equal = [fit.scheme for fit in fits[1:] if fit[1:] == best[1:]][:3]
    also = f" (equally: {', '.join(equal)})" if equal else ""
    if best.share_within_tolerance == 1.0:
        return f"they match {best.scheme}{also} (max error {format_value(best.max_error)})"
    return (
        f"no preset matches; closest: {best.scheme}{also} ({best.share_within_tolerance:.1%} of samples within "
        f"tolerance, max error {format_value(best.max_error)})"
    )


def _tolerance_for(metric: str, tolerances: Mapping[str, BaselineTolerance]) -> BaselineTolerance | None:
    if tolerances:
        return tolerances.get(metric, tolerances.get("*"))
    return BaselineTolerance(metric="*", value=0.0, text="unchanged")


def _baseline_results(baseline: Baseline, report: Report, config: GateConfig) -> list[RuleResult]:
    tolerances = {tolerance.metric: tolerance for tolerance in config.baseline_tolerances}
    results = []
    for scheme, stored in baseline.summary.items():
        for metric in METRIC_NAMES:
            tolerance = _tolerance_for(metric, tolerances)
            if tolerance is None:
                continue  # only the metrics the tolerances name are checked once some are named
            name = f"baseline {scheme}:{metric}"
            now = _number_or_none(report.summary.loc[scheme, metric])
            if metric not in stored:
                message = f"{scheme}:{metric} is not in the baseline {baseline.path}; rewrite it with --write-baseline"
                results.append(RuleResult(name, False, now, None, message, "baseline", "in the baseline"))
                continue
            before = stored[metric]
            results.append(_baseline_result(name, f"{scheme}:{metric}", metric, before, now, tolerance))
    return results


def _baseline_result(
    name: str, target: str, metric: str, before: float | None, now: float | None, tolerance: BaselineTolerance
) -> RuleResult:
    if before is None or now is None:
        passed = before is None and now is None
        how = "undefined in both" if passed else f"was {format_value(before, metric)}, now {format_value(now, metric)}"
        return RuleResult(name, passed, now, None, f"{target} {how}", "baseline", f"baseline {format_value(before)}")
    allowed = tolerance.allowed(before)
    moved = now - before
    noise = _FLOAT_NOISE * max(1.0, abs(before), abs(now))
    passed = abs(moved) <= allowed + noise
    written = "" if tolerance.text in ("", "unchanged") else f" ({tolerance.text})"
    limit_text = (
        f"{format_value(before)} ± {allowed:.4g}{written}" if allowed else f"{format_value(before)} (unchanged)"
    )
    direction = "rose" if moved > 0 else "fell"
    if passed:
        message = f"{target} = {format_value(now, metric)}, baseline {format_value(before, metric)}"
    else:
        message = (
            f"{target} {direction} from {format_value(before, metric)} to {format_value(now, metric)} "
            f"(moved {abs(moved):.4g}, allowed {allowed:.4g})"
        )
    return RuleResult(name, passed, now, allowed, message, "baseline", limit_text)


def evaluate(report: Report, table: pa.Table, config: GateConfig) -> GateResult:
    """Every rule of ``config`` against ``report`` (the audit of ``table``), in the order: bounds, recorded,
    requirements, baseline. ``report`` must include the schemes of :func:`schemes_needed`."""
    if report.reference != config.reference_name:
        raise UsageError(
            f"the report's reference is {report.reference!r} but the gate's is {config.reference_name!r}",
            expected="rollaudit.audit(table, schemes_needed(config), reference=config.reference_name)",
        )
    table = validate_table(table)
    missing = [scheme for scheme in schemes_needed(config) if scheme not in report.summary.index]
    if missing:
        raise UsageError(
            f"the report has no scheme {missing[0]!r}",
            expected="rollaudit.audit(table, schemes_needed(config), ...)",
        )
    results = [_bound_result(rule, report) for rule in config.bounds]
    if config.recorded is not None:
        results.append(_recorded_result(config.recorded, table, str(report.info.get("device", "auto"))))
    results.extend(check_requirements(table, config))
    if config.baseline is not None:
        results.extend(_baseline_results(config.baseline, report, config))
    return GateResult(
        results=tuple(results),
        reference=report.reference,
        samples=int(report.info.get("samples", table.num_rows)),
        report=report,
    )


def run_gate(table: pa.Table, config: GateConfig, device: str = "auto") -> GateResult:
    """Audit ``table`` with exactly the schemes the gate needs and evaluate every rule: the library's one call.

    >>> import rollaudit
    >>> from rollaudit._gate import gate_config, run_gate
    >>> table = rollaudit.make_table(reward=[0, 1, 0, 0], prompt=[0, 0, 1, 1])
    >>> run_gate(table, gate_config(max_rules=["batch:spurious_nonzero=0"]), device="cpu").passed
    False
    """
    from ._api import audit

    table = validate_table(table)
    try:
        report = audit(table, schemes_needed(config), reference=config.reference_name, device=device)
    except SchemeError as error:
        # A scheme cannot apply to this data (e.g. some prompt keys missing). When a data requirement explains
        # why, that is a failed gate (exit 1) naming the requirement; otherwise a usage error as before.
        requirements = check_requirements(table, config)
        if all(result.passed for result in requirements):
            raise
        return _unmeasured(table, config, requirements, error)
    return evaluate(report, table, config)


def _unmeasured(table: pa.Table, config: GateConfig, requirements: list[RuleResult], error: SchemeError) -> GateResult:
    """The result when the audit could not run: the requirements as measured, every other rule failed."""
    why = f"not measured: the audit could not run ({error.line()})"
    results = [
        RuleResult(rule.name, False, None, rule.limit, why, "bound", _bound_limit_text(rule)) for rule in config.bounds
    ]
    if config.recorded is not None:
        results.append(RuleResult(config.recorded.name, False, None, config.recorded.tolerance, why, "recorded"))
    results.extend(requirements)
    if config.baseline is not None:
        results.append(RuleResult(f"baseline {config.baseline.path}", False, None, None, why, "baseline"))
    return GateResult(results=tuple(results), reference=config.reference_name, samples=table.num_rows)


# ---------------------------------------------------------------------------------------------------------------------
# Baselines.


def baseline_document(report: Report) -> dict[str, Any]:
    """What ``write_baseline`` stores: versioned, the reference, and every summary metric per scheme."""
    from . import __version__

    return json_value(
        {
            "schema_version": BASELINE_SCHEMA_VERSION,
            "kind": BASELINE_KIND,
            "rollaudit_version": __version__,
            "reference": report.reference,
            "samples": report.info.get("samples"),
            "steps": report.info.get("step_values", []),
            "summary": {
                str(scheme): {metric: row[metric] for metric in METRIC_NAMES if metric in row.index}
                for scheme, row in report.summary.iterrows()
                # The recorded row is data, not a scheme: a baseline holds what can be recomputed.
                if scheme != RECORDED_ROW
            },
        }
    )


def write_baseline(path: str | os.PathLike[str], report: Report) -> Path:
    """Store ``report``'s summary metrics as a baseline JSON file, atomically (undefined metrics as null)."""
    text = json.dumps(baseline_document(report), indent=2, allow_nan=False) + "\n"
    return write_atomic(path, text)


def read_baseline(path: str | os.PathLike[str]) -> Baseline:
    """A baseline written by :func:`write_baseline`; a missing or corrupt file is a one-line UsageError."""
    where = str(path)
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            "baseline file does not exist", file=where, expected="a file written by --write-baseline"
        ) from None
    except IsADirectoryError:
        raise UsageError("baseline is a directory", file=where, expected="a JSON file") from None
    except OSError as error:
        raise UsageError(f"cannot read baseline: {error.strerror or error}", file=where) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"baseline is not valid JSON: {error}", file=where) from None
    if not isinstance(document, dict) or document.get("kind") != BASELINE_KIND:
        raise UsageError("not a rollaudit baseline", file=where, expected="a file written by --write-baseline")
    version = document.get("schema_version")
    if version != BASELINE_SCHEMA_VERSION:
        raise UsageError(
            f"baseline schema_version {version!r} is not supported",
            file=where,
            expected=f"{BASELINE_SCHEMA_VERSION}; rewrite it with --write-baseline",
        )
    reference, summary = document.get("reference"), document.get("summary")
    if not isinstance(reference, str) or not isinstance(summary, dict) or not summary:
        raise UsageError("baseline has no reference or no summary", file=where, field="summary")
    checked: dict[str, dict[str, float | None]] = {}
    for scheme, metrics in summary.items():
        if not isinstance(metrics, dict) or not all(
            value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
            for value in metrics.values()
        ):
            raise UsageError("metrics must be numbers or null", file=where, field=f"summary.{scheme}")
        try:
            name = str(get_scheme(scheme))
        except SchemeError as error:
            raise UsageError(f"baseline scheme: {error.line()}", file=where, field=f"summary.{scheme}") from None
        checked[name] = {str(metric): None if value is None else float(value) for metric, value in metrics.items()}
    samples = document.get("samples")
    return Baseline(
        path=where, reference=reference, summary=checked, samples=samples if isinstance(samples, int) else None
    )


__all__ = [
    "BASELINE_SCHEMA_VERSION",
    "GATE_SCHEMA_VERSION",
    "METRIC_NAMES",
    "RATE_METRICS",
    "REQUIREMENTS",
    "Baseline",
    "BaselineTolerance",
    "BoundRule",
    "GateConfig",
    "GateResult",
    "RecordedRule",
    "RequireRule",
    "RuleResult",
    "check_requirements",
    "evaluate",
    "find_pyproject",
    "gate_config",
    "load_gate_config",
    "parse_baseline_tolerance",
    "parse_bound",
    "parse_recorded",
    "parse_requirement",
    "read_baseline",
    "require_rules",
    "run_gate",
    "schemes_needed",
    "write_baseline",
]
