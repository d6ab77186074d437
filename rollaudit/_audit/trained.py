"""Which scheme the run itself trained with, and how the report knows it.

The evidence, strongest first: the advantages recorded in the dump (the fit names the preset they match, and the
``recorded`` row audits them as they are, matched or not); the scheme the user names (they know their run's
config); the framework's default preset for the dump's layout and version (an assumption, said as one); else
unknown, said plainly. A scheme string the user or the loader names is audited like any other, in its own row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .fit import Detection

Evidence = Literal["recorded", "given", "framework default", "unknown"]

_NAME_IT = "name it with --trained-with PRESET"


@dataclass(frozen=True)
class TrainedWith:
    """What the run trained with.

    scheme
        the scheme string, or None when nothing says which (``evidence="unknown"``) or the recorded
        advantages match no preset.
    evidence
        ``recorded`` (the dump's own advantages), ``given`` (named by the user), ``framework default`` (the
        loader's default for this layout and version: an assumption), or ``unknown``.
    why
        one sentence a person reads: where the answer comes from, and what would confirm it.
    row
        the row of ``Report.summary`` that holds the run's advantages: ``recorded`` where the dump records them,
        else the scheme's own row; None where there is none (unknown, or the scheme is not auditable here).
    """

    scheme: str | None
    evidence: Evidence
    why: str
    row: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``scheme``, ``evidence``, ``why`` and ``row``."""
        return {"scheme": self.scheme, "evidence": self.evidence, "why": self.why, "row": self.row}


def _error_text(value: float) -> str:
    return f"{value:.2g}"


def from_recorded(detection: Detection, given: str | None, recorded_row: str) -> TrainedWith:
    """The run's scheme from its recorded advantages: the preset they match, or none (said with the closest)."""
    rows = f"{detection.rows:,} samples with recorded advantages"
    if detection.best_match is not None:
        best = detection.closest
        assert best is not None
        why = f"the recorded advantages match it: max err {_error_text(best.max_error)} over {rows}"
        if given is not None and given not in (detection.best_match, *detection.equivalent):
            fit = detection.fit_of(given)
            how = "cannot run on this dump" if fit is None else f"misses by up to {_error_text(fit.max_error)}"
            why += f"; the given {given} {how}, and the dump's own advantages outrank it"
        return TrainedWith(detection.best_match, "recorded", why, recorded_row)
    closest = detection.closest
    if closest is None:
        why = "the dump records advantages, but no preset can run on it to compare them with"
    else:
        why = (
            f"the recorded advantages match no preset; closest: {closest.scheme}, with "
            f"{closest.share_within_tolerance:.1%} of {rows} within tolerance; they are audited as they are"
        )
    return TrainedWith(None, "recorded", why, recorded_row)


def from_config(given: str | None, default: dict[str, Any] | None) -> TrainedWith:
    """The run's scheme without recorded advantages: the one the user names, else the framework's default."""
    default_scheme = (default or {}).get("scheme")
    default_why = (default or {}).get("why")
    if given is not None:
        why = "named with --trained-with; the dump records no advantages to confirm it"
        if default_scheme is not None and default_scheme != given:
            why += f"; the framework's default would be {default_scheme}"
        return TrainedWith(given, "given", why, given)
    if default_scheme is not None:
        why = default_why or "the framework's default for this dump"
        return TrainedWith(default_scheme, "framework default", why, default_scheme)
    if default_why:
        return TrainedWith(None, "unknown", f"{default_why}; {_NAME_IT}")
    return TrainedWith(None, "unknown", f"the dump records no advantages and names no framework default; {_NAME_IT}")


__all__ = ["Evidence", "TrainedWith", "from_config", "from_recorded"]
