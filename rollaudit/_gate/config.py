"""The gate's configuration: ``[tool.rollaudit.gate]`` of the nearest pyproject.toml (or a TOML file), merged with
the command line's rules into one :class:`GateConfig`."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from .._audit.presets import split_schemes
from .._errors import SchemeError, UsageError, did_you_mean
from .._json import read_small_file
from .baseline import Baseline, read_baseline
from .rules import (
    BaselineTolerance,
    BoundRule,
    FindingRule,
    RecordedRule,
    RequireRule,
    parse_baseline_tolerance,
    parse_bound,
    parse_finding_items,
    parse_recorded,
    parse_requirement,
    scheme_name,
    selected_codes,
)

DEFAULT_GATE_SCHEMES = ("batch", "prompt", "trajectory")


@dataclass(frozen=True)
class GateConfig:
    """Every rule of one gate run, plus what to audit.

    ``reference``: None means the baseline's reference when a baseline is
    given, else ``prompt``; use :attr:`reference_name`. ``schemes``: extra
    schemes to audit (and store in a written baseline) besides those the
    rules mention. ``source``: the config file the settings came from.
    ``fail_on``/``ignore``: the finding codes, severities or ``all`` as
    named (:attr:`finding_rules`: the codes they select).
    """

    bounds: tuple[BoundRule, ...] = ()
    requirements: tuple[RequireRule, ...] = ()
    recorded: RecordedRule | None = None
    baseline: Baseline | None = None
    baseline_tolerances: tuple[BaselineTolerance, ...] = ()
    reference: str | None = None
    schemes: tuple[str, ...] = ()
    trained_with: str | None = None
    source: str | None = None
    fail_on: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    @property
    def reference_name(self) -> str:
        """The reference every metric is measured against."""
        if self.reference is not None:
            return self.reference
        return self.baseline.reference if self.baseline is not None else "prompt"

    @property
    def finding_rules(self) -> tuple[FindingRule, ...]:
        """One rule per code ``fail_on`` selects and ``ignore`` leaves, in registry order."""
        return tuple(FindingRule(code) for code in selected_codes(self.fail_on, self.ignore))

    @property
    def has_rules(self) -> bool:
        return bool(self.bounds or self.requirements or self.recorded or self.baseline or self.fail_on)


CONFIG_KEYS = (
    "max",
    "min",
    "reference",
    "schemes",
    "trained_with",
    "require",
    "expect_recorded",
    "recorded_tolerance",
    "baseline",
    "baseline_tolerance",
    "fail_on",
    "ignore",
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
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        try:  # Python 3.10: the same parser under its PyPI name, when installed
            import tomli as tomllib
        except ModuleNotFoundError:
            raise UsageError("reading a TOML config needs Python 3.11 or the tomli package", file=str(path)) from None
    try:
        document: dict[str, Any] = tomllib.loads(read_small_file(path).decode("utf-8"))
        return document
    except FileNotFoundError:
        raise UsageError("config file does not exist", file=str(path)) from None
    except IsADirectoryError:
        raise UsageError("config is a directory", file=str(path), expected="a TOML file") from None
    except OSError as error:
        raise UsageError(f"cannot read config: {error.strerror or error}", file=str(path)) from None
    except (ValueError, UnicodeDecodeError) as error:  # TOMLDecodeError, or an integer of too many digits
        raise UsageError(f"not valid TOML: {error}", file=str(path)) from None
    except RecursionError:
        raise UsageError("not valid TOML: it nests too deeply", file=str(path)) from None


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
        # A dedicated gate file (``--gate-config ci/gate.toml``) may hold the keys at the top level.
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


def _findings_from_config(value: Any, key: str, path: str) -> tuple[str, ...]:
    """``fail_on``/``ignore``: a list of codes, severities or ``all``, or one comma-separated string."""
    items = _strings(value, key, path)
    return tuple(
        dict.fromkeys(code for item in items for code in _in_config(path, key, parse_finding_items, item, repr(item)))
    )


def load_gate_config(path: str | os.PathLike[str] | None = None, start_dir: str | os.PathLike[str] = ".") -> GateConfig:
    """The gate configuration of a file: ``path`` (``--gate-config FILE``), else the nearest ``pyproject.toml``
    with a ``[tool.rollaudit.gate]`` table in ``start_dir`` or its parents, else an empty config.

    ``path`` may be a ``pyproject.toml`` (its ``[tool.rollaudit.gate]``) or a
    dedicated TOML file with the keys at the top level. Keys (``-`` and
    ``_`` are the same): ``max``, ``min`` (lists of ``"SCHEME:METRIC=LIMIT"``,
    or a table ``{"SCHEME:METRIC" = LIMIT}``), ``reference``, ``schemes``,
    ``require`` (list of requirement names), ``expect_recorded``,
    ``recorded_tolerance``, ``baseline`` (a path, relative to the config
    file's directory), ``baseline_tolerance`` (list of ``"METRIC:TOL"``),
    ``fail_on`` and ``ignore`` (finding codes, severities or ``all``: a
    list, or one comma-separated string). An unreadable file, a malformed
    value or an unknown key is a :class:`UsageError` naming the file and
    the key.
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
            hint = did_you_mean(raw_key, CONFIG_KEYS)
            raise UsageError(f"unknown key{hint}; known: {', '.join(CONFIG_KEYS)}", file=where, field=raw_key)
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
        reference = _in_config(where, "reference", scheme_name, values["reference"], repr(values["reference"]))
    trained_with = None
    if "trained_with" in values:
        if not isinstance(values["trained_with"], str):
            raise UsageError("must be a scheme string", file=where, field="trained_with")
        trained_with = _in_config(
            where, "trained_with", scheme_name, values["trained_with"], repr(values["trained_with"])
        )
    schemes: list[str] = []
    for item in _strings(values.get("schemes", []), "schemes", where):
        parts = _in_config(where, "schemes", _split, item)
        schemes.extend(_in_config(where, "schemes", scheme_name, part, repr(part)) for part in parts)
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
    fail_on, ignore = (_findings_from_config(values.get(key, []), key, where) for key in ("fail_on", "ignore"))
    config = GateConfig(
        bounds=tuple(_merge_bounds([], bounds)),
        requirements=tuple(dict.fromkeys(requirements)),
        recorded=recorded,
        baseline=baseline,
        baseline_tolerances=tuple(_merge_tolerances([], tolerances)),
        reference=reference,
        schemes=tuple(dict.fromkeys(schemes)),
        trained_with=trained_with,
        source=where,
        fail_on=fail_on,
        ignore=ignore,
    )
    _check_reference(config)
    _in_config(where, "fail_on", _check_findings, config)
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


def _check_findings(config: GateConfig) -> None:
    """Finding rules that ignore every code they select are a mistake, not a gate that passes on nothing."""
    if config.fail_on and not config.finding_rules:
        left = f" that ignore {', '.join(config.ignore)} leaves" if config.ignore else ""
        raise UsageError(f"fail-on {', '.join(config.fail_on)} selects no code{left} (see `rollaudit findings`)")


def _finding_items(values: str | Sequence[str], option: str) -> list[str]:
    """``--fail-on``/``--ignore`` values (each comma-separated, repeatable), each item checked."""
    texts = [values] if isinstance(values, str) else values
    return [item for text in texts for item in parse_finding_items(text, f"{option} {text.strip()!r}")]


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
    trained_with: str | None = None,
    fail_on: str | Sequence[str] = (),
    ignore: str | Sequence[str] = (),
) -> GateConfig:
    """CLI-style values merged over ``base`` (usually :func:`load_gate_config`'s result).

    ``max_rules``/``min_rules`` are ``"SCHEME:METRIC=LIMIT"`` strings; a rule
    on the same (op, scheme, metric) as the config's replaces it, others add
    to it. ``require`` adds requirements. ``reference``, ``expect_recorded``,
    ``recorded_tolerance``, ``trained_with`` and ``baseline`` (a path,
    relative to the working directory) replace the config's when given. ``baseline_tolerance``
    entries replace the config's for the same metric. ``schemes`` (a list, or
    one comma-separated string) adds schemes to audit. ``fail_on`` and
    ``ignore`` (codes, severities or ``all``; a list, or one comma-separated
    string) add to the config's.
    """
    base = base or GateConfig()
    bounds = [*(parse_bound(text, "max") for text in max_rules), *(parse_bound(text, "min") for text in min_rules)]
    requirements = [parse_requirement(text) for text in require]
    extra_schemes: list[str] = []
    for item in [schemes] if isinstance(schemes, str) else (schemes or []):
        extra_schemes.extend(scheme_name(part, "--schemes") for part in _split(item))
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
        reference=scheme_name(reference, "--reference") if reference is not None else base.reference,
        schemes=tuple(dict.fromkeys((*base.schemes, *extra_schemes))),
        trained_with=scheme_name(trained_with, "--trained-with") if trained_with is not None else base.trained_with,
        fail_on=tuple(dict.fromkeys((*base.fail_on, *_finding_items(fail_on, "--fail-on")))),
        ignore=tuple(dict.fromkeys((*base.ignore, *_finding_items(ignore, "--ignore")))),
    )
    _check_reference(config)
    _check_findings(config)
    return config


def require_rules(config: GateConfig, writing_baseline: bool = False) -> None:
    """A usage error when the gate has nothing to check (a typo in the config section passes nothing silently);
    writing a baseline alone is a valid run."""
    if not config.has_rules and not writing_baseline:
        where = f" (config: {config.source})" if config.source else " (no [tool.rollaudit.gate] found)"
        raise UsageError(
            "no gate rules given" + where,
            expected=(
                "--max/--min SCHEME:METRIC=LIMIT, --fail-on CODE, --expect-recorded, --require, --baseline, "
                "or --write-baseline"
            ),
        )


def schemes_needed(config: GateConfig) -> list[str]:
    """The schemes to audit, in order: those the rules and the baseline mention, plus ``config.schemes``;
    the default trio when nothing names one. The reference is added by ``rollaudit.audit`` itself."""
    # ``trained`` is the run's own row, which the audit adds itself.
    names = [
        *config.schemes,
        *(rule.scheme for rule in config.bounds if not rule.checks_trainer),
        *(config.baseline.summary if config.baseline is not None else ()),
    ]
    if not names:
        names = list(DEFAULT_GATE_SCHEMES)
    return list(dict.fromkeys(names))
