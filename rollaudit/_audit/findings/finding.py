"""A finding: a defect the dump shows, named by its code, with the rows, groups and steps that show it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .codes import BY_CODE, SEVERITY_ORDER


@dataclass(frozen=True)
class Example:
    """One place to look: a step, a prompt key (as the table holds it) and the row numbers (0-based, in the
    audited table's order) that show the defect there."""

    step: int
    prompt: Any
    rows: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "prompt": self.prompt, "rows": list(self.rows)}


@dataclass(frozen=True)
class Finding:
    """What one code found: ``summary`` (one line, with its size), ``rows``, ``groups`` and ``steps`` that show it,
    the worst few places (``examples``), ``evidence`` (whose advantages show it: ``recorded``, ``given``,
    ``framework default``) and ``detail`` (numbers specific to the code: the shift k, the stride n, ...)."""

    code: str
    summary: str
    rows: int
    groups: int
    steps: tuple[int, ...]
    examples: tuple[Example, ...] = ()
    evidence: str = "recorded"
    detail: dict[str, Any] = field(default_factory=dict)
    fix: str | None = None  # the framework's own setting, where one is known; else the registry's

    @property
    def severity(self) -> str:
        return BY_CODE[self.code].severity

    @property
    def reference(self) -> str:
        return BY_CODE[self.code].reference

    @property
    def what_to_change(self) -> str:
        return self.fix or BY_CODE[self.code].fix

    def rank(self) -> tuple[int, int]:
        """Most severe first, then most rows."""
        return SEVERITY_ORDER[self.severity], -self.rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``code``, ``severity``, ``summary``, ``rows``, ``groups``, ``steps``, ``examples`` (``step``,
        ``prompt``, ``rows``), ``evidence``, ``reference``, ``fix`` and ``detail``."""
        return {
            "code": self.code,
            "severity": self.severity,
            "summary": self.summary,
            "rows": self.rows,
            "groups": self.groups,
            "steps": list(self.steps),
            "examples": [example.to_dict() for example in self.examples],
            "evidence": self.evidence,
            "reference": self.reference or None,
            "fix": self.what_to_change,
            "detail": dict(self.detail),
        }
