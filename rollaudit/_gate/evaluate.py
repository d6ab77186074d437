"""Running a gate: audit exactly what the rules need, then hold every rule against the report and the table."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from .._audit.findings.codes import BY_CODE
from .._audit.trained_with.fit import DEFAULT_RECORDED_TOLERANCE
from .._errors import GateFailed, SchemeError, UsageError
from .._json import json_object
from .._table import POSITION, PROMPT, REWARD, STEP, TRAJECTORY, validate_table
from .baseline import Baseline
from .config import GateConfig, schemes_needed
from .rules import METRIC_NAMES, BaselineTolerance, BoundRule, FindingRule, RecordedRule, RequireRule, format_value

if TYPE_CHECKING:
    import pyarrow as pa

    from .._audit.findings.finding import Finding
    from .._audit.report import Report
    from .._audit.trained_with.fit import Detection

GATE_SCHEMA_VERSION = 1

_UNDEFINED_BECAUSE = {
    "nonzero_inflation": "the reference gives no sample a nonzero advantage",
    "token_flip_rate": "the dump has no response lengths",
    "advantage_cosine": "one side gives every sample a zero advantage",
}

# Differences below this are float noise (the same dump audited on another device), never a move.
_FLOAT_NOISE = 1e-9


# ---------------------------------------------------------------------------------------------------------------------
# Results.


@dataclass(frozen=True)
class RuleResult:
    """One rule's outcome. ``measured``: the value checked (None when undefined); ``limit``: the bound it was
    held to (for a baseline metric the largest allowed move); ``limit_text``: the limit as a person reads it.
    ``finding``: for a failed ``fail-on`` rule, the finding that failed it (the JSON document carries it whole)."""

    name: str
    passed: bool
    measured: float | None
    limit: float | None
    message: str
    kind: str = ""
    limit_text: str = ""
    evaluated: bool = True  # False: the dump cannot support what the rule measures (neither passed nor failed)
    finding: Finding | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        document = {
            "name": self.name,
            "kind": self.kind,
            "passed": self.passed,
            "evaluated": self.evaluated,
            "measured": self.measured,
            "limit": self.limit,
            "limit_text": self.limit_text,
            "message": self.message,
        }
        if self.finding is not None:
            document["finding"] = self.finding.to_dict()
        return json_object(document)


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
    def not_evaluated(self) -> list[RuleResult]:
        return [result for result in self.results if not result.evaluated]

    @property
    def exit_code(self) -> int:
        """0 when every rule holds, 1 otherwise (usage and input errors exit 2 before a result exists)."""
        return 0 if self.passed else 1

    def summary_line(self) -> str:
        """One line: how many rules passed, or which failed."""
        unmeasured = self.not_evaluated
        skipped = (
            f"; {len(unmeasured)} not evaluated ({', '.join(result.name for result in unmeasured)})"
            if unmeasured
            else ""
        )
        if self.passed:
            held = len(self.results) - len(unmeasured)
            return f"gate passed: {held} rule{'s' if held != 1 else ''} held{skipped}"
        names = ", ".join(result.name for result in self.failures)
        total = len(self.results)
        return f"gate failed: {len(self.failures)} of {total} rule{'s' if total != 1 else ''} ({names}){skipped}"

    def raise_for_failures(self) -> None:
        """Raise :class:`GateFailed` (exit code 1) when a rule failed."""
        if not self.passed:
            raise GateFailed(self.summary_line())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready document, versioned by ``schema_version``."""
        return json_object(
            {
                "schema_version": GATE_SCHEMA_VERSION,
                "passed": self.passed,
                "reference": self.reference,
                "samples": self.samples,
                "counts": {
                    "rules": len(self.results),
                    "failed": len(self.failures),
                    "not_evaluated": len(self.not_evaluated),
                },
                "rules": [result.to_dict() for result in self.results],
            }
        )


def _number_or_none(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _bound_limit_text(rule: BoundRule) -> str:
    return f"{'<=' if rule.op == 'max' else '>='} {format_value(rule.limit, rule.metric)}"


def _not_evaluated(name: str, why: str, kind: str, limit: float | None = None, limit_text: str = "") -> RuleResult:
    return RuleResult(name, True, None, limit, f"not evaluated: {why}", kind, limit_text, evaluated=False)


def _bound_result(rule: BoundRule, report: Report) -> RuleResult:
    limit_text = _bound_limit_text(rule)
    row = report.trained_row if rule.checks_trainer else rule.scheme
    if row is None:
        trained = report.trained_with
        why = (
            f"the run's scheme {trained.scheme} is not auditable on this dump "
            f"({report.not_auditable.get(trained.scheme, '')})"
            if trained.scheme is not None
            else f"the run's own scheme is unknown ({trained.why})"
        )
        return _not_evaluated(rule.name, why, "bound", rule.limit, limit_text)
    if row in report.not_auditable:
        why = f"{row} is not auditable on this dump ({report.not_auditable[row]})"
        return _not_evaluated(rule.name, why, "bound", rule.limit, limit_text)
    measured = _number_or_none(report.summary_table.value(row, rule.metric))
    if rule.checks_trainer:
        own = "its recorded advantages" if row == "recorded" else f"{row}, {report.trained_with.evidence}"
        target = f"the run's own advantages ({own}): {rule.metric} vs {report.reference}"
    else:
        target = f"{rule.scheme}:{rule.metric} vs {report.reference} (what {rule.scheme} would do to this data)"
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
        message += _worst_step(report, row, rule)
    return RuleResult(rule.name, passed, measured, rule.limit, message, "bound", limit_text)


def _worst_step(report: Report, row: str, rule: BoundRule) -> str:
    """Where a failing bound is worst, for a multi-step run."""
    table = report.per_step_table
    mine = table.column("scheme") == row
    values, steps = table.floats(rule.metric)[mine], table.column("step")[mine]
    defined = ~np.isnan(values)
    if not defined.any():
        return ""
    values, steps = values[defined], steps[defined]
    at = int(np.argmax(values) if rule.op == "max" else np.argmin(values))  # the first of equals, as idxmax
    return f"; worst at step {steps[at]}: {format_value(float(values[at]), rule.metric)}"


def _first_row_where(mask: Any) -> int:
    return int(pc.index(mask, True).as_py())


def _row_place(table: pa.Table, row: int) -> str:
    step = table.column(STEP)[row].as_py()
    position = table.column(POSITION)[row].as_py()
    return f"row {row + 1} (step {step}, position {position})"  # counted from 1, as every row rollaudit names


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


def _recorded_result(rule: RecordedRule, report: Report) -> RuleResult:
    """The recorded advantages against ``rule.scheme``, read from the audit's own fit (never fitted again here)."""
    limit_text = f"error <= {rule.tolerance:g} x max(1, |A| of the row's group)"
    detection = report.detection
    if detection is None:
        message = (
            "the dump holds no recorded advantages (only train dumps, TRL parquet or tables with an advantage "
            "column do)"
        )
        return RuleResult(rule.name, False, None, rule.tolerance, message, "recorded", limit_text)
    fit = detection.fit_of(rule.scheme)
    if fit is None:
        # The expected scheme cannot even run on this dump: it is not what the trainer did.
        why = detection.unavailable.get(rule.scheme, "not fitted")
        message = f"{rule.scheme} cannot run on this dump ({why}); {_best_fit_text(detection)}"
        return RuleResult(rule.name, False, None, rule.tolerance, message, "recorded", limit_text)
    allowed = detection.allowed_for(fit)  # the fit's own dtype sets how far its rounding may stray
    if allowed != rule.tolerance:
        limit_text = f"error <= {allowed:.4g} x max(1, |A| of the row's group) (the preset's rounding)"
    worst = fit.max_error
    # Each row is held to its group's magnitude (a blown-up group loosens no other): every row within it.
    passed = detection.beyond_tolerance(fit) == 0
    counted = f"{detection.rows} of {report.info.get('samples', detection.rows)} samples with a recorded advantage"
    if passed:
        message = f"recorded advantages match {rule.scheme} (max error {format_value(worst)} over {counted})"
    else:
        message = (
            f"recorded advantages do not match {rule.scheme}: {detection.beyond_tolerance(fit)} samples off by "
            f"more than {allowed:.4g} x max(1, |A| of their group) (max error {format_value(worst)} over {counted}); "
            f"{_best_fit_text(detection)}"
        )
    return RuleResult(rule.name, passed, worst, allowed, message, "recorded", limit_text)


def _best_fit_text(detection: Detection) -> str:
    best = detection.closest
    if best is None:
        return "no preset runs on this dump"
    equal = list(detection.equivalent[:3])
    also = f" (equally: {', '.join(equal)})" if equal else ""
    if detection.matched:
        return f"they match {best.scheme}{also} (max error {format_value(best.max_error)})"
    return (
        f"no preset matches; closest: {best.scheme}{also} ({best.share_within_tolerance:.1%} of samples within "
        f"tolerance, max error {format_value(best.max_error)})"
    )


_FINDING_LIMIT = "0 rows"  # measured: the rows that show the finding
_SHOWN = 5  # steps and rows a finding's message names before it counts the rest


def _first_few(noun: str, values: tuple[Any, ...] | list[Any]) -> str:
    """``rows 4, 5, 6`` or ``step 3``: the noun in number, then the first few values and how many more."""
    shown = ", ".join(str(value) for value in values[:_SHOWN])
    more = f" and {len(values) - _SHOWN} more" if len(values) > _SHOWN else ""
    return f"{noun}{'s' * (len(values) != 1)} {shown}{more}"


def _finding_message(finding: Finding) -> str:
    """The finding's summary, how far it reaches, its first example and what to change."""
    reach = f"{finding.rows} row{'s' * (finding.rows != 1)} in {finding.groups} group{'s' * (finding.groups != 1)}"
    if finding.steps:
        reach += f" at {_first_few('step', finding.steps)}"
    message = f"{finding.summary}: {reach}"
    if finding.examples:
        example = finding.examples[0]
        rows = [row + 1 for row in example.rows]  # counted from 1, as every row rollaudit names
        message += f"; first: step {example.step}, prompt {example.prompt!r}, {_first_few('row', rows)}"
    return f"{message}; fix: {finding.what_to_change}"


def _finding_result(rule: FindingRule, report: Report) -> RuleResult:
    """Fails when the report holds a finding of the rule's code (the most severe, widest one is named)."""
    found = [finding for finding in report.findings if finding.code == rule.code]
    if found:
        message = _finding_message(found[0])
        if len(found) > 1:
            message += f" (and {len(found) - 1} more {rule.code} finding{'s' * (len(found) > 2)})"
        rows = float(sum(finding.rows for finding in found))
        return RuleResult(rule.name, False, rows, 0.0, message, "finding", _FINDING_LIMIT, finding=found[0])
    why = report.info.get("findings_not_checked")
    if why:
        # Not found because not looked for: the gate does not pass on what it could not check.
        return _not_evaluated(rule.name, f"the findings could not be checked: {why}", "finding", 0.0, _FINDING_LIMIT)
    message = f"not found: {BY_CODE[rule.code].shows}"
    return RuleResult(rule.name, True, 0.0, 0.0, message, "finding", _FINDING_LIMIT)


def _tolerance_for(metric: str, tolerances: Mapping[str, BaselineTolerance]) -> BaselineTolerance | None:
    if tolerances:
        return tolerances.get(metric, tolerances.get("*"))
    return BaselineTolerance(metric="*", value=0.0, text="unchanged")


def _baseline_results(baseline: Baseline, report: Report, config: GateConfig) -> list[RuleResult]:
    tolerances = {tolerance.metric: tolerance for tolerance in config.baseline_tolerances}
    results = []
    for scheme, stored in baseline.summary.items():
        if scheme in report.not_auditable:
            why = f"{scheme} is not auditable on this dump ({report.not_auditable[scheme]})"
            results.append(_not_evaluated(f"baseline {scheme}", why, "baseline"))
            continue
        for metric in METRIC_NAMES:
            tolerance = _tolerance_for(metric, tolerances)
            if tolerance is None:
                continue  # only the metrics the tolerances name are checked once some are named
            name = f"baseline {scheme}:{metric}"
            now = _number_or_none(report.summary_table.value(scheme, metric))
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
    requirements, findings, baseline. ``report`` must include the schemes of :func:`schemes_needed`."""
    if report.reference != config.reference_name:
        raise UsageError(
            f"the report's reference is {report.reference!r} but the gate's is {config.reference_name!r}",
            expected="rollaudit.audit(table, schemes_needed(config), reference=config.reference_name)",
        )
    table = validate_table(table)
    missing = [
        scheme
        for scheme in schemes_needed(config)
        if scheme not in report.summary_table.labels and scheme not in report.not_auditable
    ]
    if missing:
        raise UsageError(
            f"the report has no scheme {missing[0]!r}",
            expected="rollaudit.audit(table, schemes_needed(config), ...)",
        )
    detection, rule = report.detection, config.recorded
    if rule is not None and detection is not None:
        fitted = detection.fit_of(rule.scheme) is not None or rule.scheme in detection.unavailable
        if not fitted or detection.tolerance != rule.tolerance:
            raise UsageError(
                f"the report's fit of the recorded advantages does not cover {rule.scheme} "
                f"at tolerance {rule.tolerance:g}",
                expected="rollaudit.audit(table, ..., recorded_schemes=[scheme], recorded_tolerance=tolerance)",
            )
    results = [_bound_result(rule, report) for rule in config.bounds]
    if config.recorded is not None:
        results.append(_recorded_result(config.recorded, report))
    results.extend(check_requirements(table, config))
    results.extend(_finding_result(rule, report) for rule in config.finding_rules)
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
    >>> from rollaudit._gate.config import gate_config
    >>> table = rollaudit.make_table(reward=[0, 1, 0, 0], prompt=[0, 0, 1, 1])
    >>> run_gate(table, gate_config(max_rules=["batch:spurious_nonzero=0"]), device="cpu").passed
    False
    """
    from .._audit.api import audit

    table = validate_table(table)
    recorded = config.recorded
    try:
        report = audit(
            table,
            schemes_needed(config),
            reference=config.reference_name,
            device=device,
            recorded_schemes=[recorded.scheme] if recorded is not None else (),
            recorded_tolerance=recorded.tolerance if recorded is not None else DEFAULT_RECORDED_TOLERANCE,
            trained_with=config.trained_with,
        )
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
    results.extend(
        RuleResult(rule.name, False, None, 0.0, why, "finding", _FINDING_LIMIT) for rule in config.finding_rules
    )
    if config.baseline is not None:
        results.append(RuleResult(f"baseline {config.baseline.path}", False, None, None, why, "baseline"))
    return GateResult(results=tuple(results), reference=config.reference_name, samples=table.num_rows)
