"""What ``watch`` says of each step: a record (the numbers ``compare`` gives for that step alone, and the gate's
verdict), and the few numbers per step kept for the run's trend, so that memory stays flat in the number of steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._json import json_object

if TYPE_CHECKING:
    from .._audit.report import Report
    from .._gate.evaluate import GateResult


@dataclass(frozen=True)
class StepRecord:
    """One step's audit as it landed.

    ``step``: the step (None when its files could not be read: ``error`` says why). ``files``: the dump files read
    for it. ``report``: the audit, as ``rollaudit.audit`` returns it for the step alone. ``gate``: the rules'
    verdict, when rules were given. ``replaces``: the step had a record already, which this one supersedes (a
    later file of the step landed, as slime's train dumps land after its rollout dump, or a file was rewritten).
    """

    step: int | None
    files: tuple[str, ...]
    report: Report | None = None
    gate: GateResult | None = None
    error: str | None = None
    replaces: bool = False
    scheme_changed: str | None = None
    """``scheme changed at step 4: was batch, now prompt``: on the step whose scheme differs from the step before
    it (the scheme each step's own audit names)."""
    first_findings: tuple[str, ...] = ()
    """The codes of the step's findings that no earlier step of the watch had: where each defect first appears."""

    @property
    def passed(self) -> bool | None:
        """Whether every rule held; None without rules or without an audit."""
        return None if self.gate is None else self.gate.passed

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON object (one line of ``--jsonl``): ``step``, ``files``, ``summary``, ``trained_with``,
        ``not_auditable``, ``findings``, and ``gate`` with rules; ``replaces`` when it supersedes; ``error`` when
        unreadable; ``first_findings``: the codes first found at this step."""
        document: dict[str, Any] = {"step": self.step, "files": list(self.files)}
        if self.report is not None:
            document["samples"] = self.report.info.get("samples")
            document["prompts"] = self.report.info.get("prompts")
            document["reference"] = self.report.reference
            document["summary"] = self.report.summary_table.by_label()
            document["trained_with"] = self.report.trained_with.to_dict()
            document["not_auditable"] = dict(self.report.not_auditable)
            document["findings"] = [finding.to_dict() for finding in self.report.findings]
        if self.gate is not None:
            document["gate"] = self.gate.to_dict()
        if self.error is not None:
            document["error"] = self.error
        if self.replaces:
            document["replaces"] = True
        if self.scheme_changed is not None:
            document["scheme_changed"] = self.scheme_changed
        if self.first_findings:
            document["first_findings"] = list(self.first_findings)
        return json_object(document)


def scheme_label(trained_with: Mapping[str, Any] | None) -> str | None:
    """What a step trained with, as one phrase, from its record's ``trained_with``: the scheme, its parts where it
    has several (an env each), ``no preset`` where its recorded advantages match none; None where unknown."""
    from .._audit.trained_with.trained import Part, parts_phrase

    if not trained_with:
        return None
    parts = trained_with.get("parts") or []
    if len(parts) > 1:
        return parts_phrase(
            tuple(
                Part(
                    (int(part["steps"][0]), int(part["steps"][-1])),
                    part.get("where"),
                    part.get("scheme"),
                    part.get("evidence", "recorded"),
                    part.get("why", ""),
                    int(part.get("samples") or 0),
                )
                for part in parts
            )
        )
    scheme = trained_with.get("scheme")
    if isinstance(scheme, str):
        return scheme
    return "no preset" if trained_with.get("evidence") == "recorded" else None


def _rate(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


@dataclass(frozen=True)
class StepPoint:
    """A step's key numbers, from its record's JSON object: what the run's trend, summary and page are drawn from.

    ``trained``: the row of the run's own advantages (the recorded ones, else the scheme it trained with), None
    when unknown; ``flips``/``strict``/``inflation``: that row against the reference. ``worst``: the scheme that
    flips the most signs and its rate. ``failed``: the rules that failed (empty when all held or none were given);
    ``unmeasured``: how many rules the step's dump could not support (neither passed nor failed).
    """

    step: int | None
    samples: int
    prompts: int
    trained: str | None
    flips: float | None
    strict: float | None
    inflation: float | None
    worst: str | None
    worst_flips: float | None
    passed: bool | None
    failed: tuple[str, ...]
    unmeasured: int
    error: str | None
    replaces: bool
    scheme_changed: str | None = None
    evidence: str | None = None
    """How the run's own scheme is known: ``recorded``, ``given``, ``config`` (the run's config names it) or
    ``framework default`` (an assumption)."""
    first_findings: tuple[str, ...] = ()
    """The codes of the findings first found at this step."""

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> StepPoint:
        summary: Mapping[str, Mapping[str, Any]] = record.get("summary") or {}
        trained_with: Mapping[str, Any] = record.get("trained_with") or {}
        trained = trained_with.get("row")
        row = summary.get(trained) if isinstance(trained, str) else None
        reference = record.get("reference")
        others = {
            name: _rate(metrics.get("sign_flip_rate"))
            for name, metrics in summary.items()
            if name != reference and isinstance(metrics, Mapping)
        }
        rated = {name: rate for name, rate in others.items() if rate is not None}
        worst = max(rated, key=rated.__getitem__) if rated else None
        gate: Mapping[str, Any] = record.get("gate") or {}
        rules: Sequence[Mapping[str, Any]] = gate.get("rules") or ()
        return cls(
            step=record.get("step"),
            samples=int(record.get("samples") or 0),
            prompts=int(record.get("prompts") or 0),
            trained=trained if row is not None else None,
            flips=_rate(row.get("sign_flip_rate")) if row is not None else None,
            strict=_rate(row.get("strict_flip_rate")) if row is not None else None,
            inflation=_rate(row.get("nonzero_inflation")) if row is not None else None,
            worst=worst,
            worst_flips=rated.get(worst) if worst is not None else None,
            passed=gate.get("passed") if gate else None,
            failed=tuple(str(rule.get("name")) for rule in rules if not rule.get("passed", True)),
            unmeasured=sum(1 for rule in rules if rule.get("evaluated") is False),
            error=record.get("error"),
            replaces=bool(record.get("replaces")),
            scheme_changed=record.get("scheme_changed"),
            evidence=trained_with.get("evidence") if row is not None else None,
            first_findings=tuple(str(code) for code in record.get("first_findings") or ()),
        )


def latest_points(points: Sequence[StepPoint]) -> list[StepPoint]:
    """One point per step, the latest (a replacing record supersedes the earlier one), in step order; unreadable
    steps last, in the order they came."""
    latest: dict[int, StepPoint] = {}
    unreadable: list[StepPoint] = []
    for point in points:
        if point.step is None:
            unreadable.append(point)
        else:
            latest[point.step] = point
    return [latest[step] for step in sorted(latest)] + unreadable
