"""Which scheme the run itself trained with, and how the report knows it.

The evidence, strongest first: the advantages recorded in the dump (the fit names the preset they match, and the
``recorded`` row audits them as they are, matched or not); the scheme the user names (they know their run's
config); the framework's default preset for the dump's layout and version (an assumption, said as one); else
unknown, said plainly. A scheme string the user or the loader names is audited like any other, in its own row.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .fit import Detection

Evidence = Literal["recorded", "given", "config", "framework default", "unknown"]

_NAME_IT = "name it with --trained-with PRESET"


@dataclass(frozen=True)
class Part:
    """What one part of a run trained with: a step range, within one environment where the framework sets its
    estimator per environment.

    steps
        the first and the last step of the part (inclusive; the dump's steps between them belong to it).
    where
        the environment (``env = delegate``), or None for every environment.
    scheme
        the scheme string, or None: its recorded advantages match no preset, or fit two schemes alike where the run
        changed from one to the other (``why`` says which).
    evidence, why
        as :class:`TrainedWith`'s.
    samples
        the part's samples with recorded advantages (with ``evidence="recorded"``), else its samples.
    undetermined
        the part's recorded advantages fit the schemes of the parts on either side alike: the run changed from one
        to the other on one of its steps (``scheme`` is None).
    """

    steps: tuple[int, int]
    where: str | None
    scheme: str | None
    evidence: Evidence
    why: str
    samples: int
    undetermined: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``steps`` ([first, last]), ``where``, ``scheme``, ``evidence``, ``why`` and ``samples``."""
        return {
            "steps": list(self.steps),
            "where": self.where,
            "scheme": self.scheme,
            "evidence": self.evidence,
            "why": self.why,
            "samples": self.samples,
        }


@dataclass(frozen=True)
class TrainedWith:
    """What the run trained with.

    scheme
        the scheme string, or None when nothing says which (``evidence="unknown"``) or the recorded
        advantages match no preset.
    evidence
        ``recorded`` (the dump's own advantages), ``given`` (named by the user), ``config`` (named by the run's own
        config file, read beside the dump or named with ``--config``), ``framework default`` (the
        loader's default for this layout and version: an assumption), or ``unknown``.
    why
        one sentence a person reads: where the answer comes from, and what would confirm it.
    row
        the row of ``Report.summary`` that holds the run's advantages: ``recorded`` where the dump records them,
        else the scheme's own row; None where there is none (unknown, or the scheme is not auditable here).
    parts
        what each part of the run trained with: one part where one scheme (or none, or nothing known) covers the
        whole dump; several where the recorded advantages show a scheme per step range or per environment
        (``scheme`` is then None, and :attr:`changed` names the parts).
    """

    scheme: str | None
    evidence: Evidence
    why: str
    row: str | None = None
    parts: tuple[Part, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the run trained with more than one scheme (or changed in a way the dump shows)."""
        return len(self.parts) > 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``scheme``, ``evidence``, ``why``, ``row`` and ``parts`` (see :meth:`Part.to_dict`)."""
        return {
            "scheme": self.scheme,
            "evidence": self.evidence,
            "why": self.why,
            "row": self.row,
            "parts": [part.to_dict() for part in self.parts],
        }


def _error_text(value: float) -> str:
    return f"{value:.2g}"


def _steps_text(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


def _changes(parts: list[Part]) -> list[str]:
    """Where consecutive step parts of one environment change scheme: ``at step 4``, or ``at one of steps 4-5``
    where undetermined steps lie between the two."""
    changes = []
    pending: Part | None = None  # an undetermined part since the last determined one
    for before, after in itertools.pairwise(parts):
        if after.undetermined:
            pending = after
            continue
        if before.scheme is None and pending is None:
            continue
        first = (pending or after).steps[0]
        changes.append(f"at step {first}" if pending is None else f"at one of steps {first}-{after.steps[0]}")
        pending = None
    return changes


def parts_phrase(parts: tuple[Part, ...], code: Callable[[str], str] = str) -> str:
    """``batch on steps 1-3, prompt from step 4 (changed at step 4)``; ``prime-grpo on env=delegate, ...``
    (``code`` marks up each scheme string)."""
    by_where: dict[str | None, list[Part]] = {}
    for part in parts:
        by_where.setdefault(part.where, []).append(part)
    phrases = []
    for where, group in by_where.items():
        if len(group) == 1:
            part = group[0]
            name = code(part.scheme) if part.scheme else "no preset"
            phrases.append(f"{name} on {where}" if where is not None else f"{name} on {_steps_text(*part.steps)}")
            continue
        items = []
        for place, part in enumerate(group):
            name = code(part.scheme) if part.scheme else ("undetermined" if part.undetermined else "no preset")
            last = place == len(group) - 1 and part.steps[0] != part.steps[1]
            items.append(f"{name} from step {part.steps[0]}" if last else f"{name} on {_steps_text(*part.steps)}")
        changes = _changes(group)
        text = ", ".join(items) + (f" (changed {', '.join(changes)})" if changes else "")
        phrases.append(f"on {where}: {text}" if where is not None else text)
    return "; ".join(phrases)


def part_label(part: Part) -> str:
    """``steps 1-3``, ``env=delegate``, ``env=delegate, step 4``: where a part lies."""
    steps = _steps_text(*part.steps)
    return steps if part.where is None else f"{part.where}, {steps}"


def whole_run(trained: TrainedWith, steps: tuple[int, int], samples: int) -> TrainedWith:
    """``trained`` with its one part, the whole dump, where it has none yet."""
    if trained.parts:
        return trained
    part = Part(steps, None, trained.scheme, trained.evidence, trained.why, samples)
    return replace(trained, parts=(part,))


def from_recorded(
    detection: Detection,
    given: str | None,
    recorded_row: str,
    parts: tuple[Part, ...] = (),
    config: dict[str, Any] | None = None,
) -> TrainedWith:
    """The run's scheme from its recorded advantages: the preset they match, else the scheme of each part where
    ``parts`` (:func:`~.parts.split_parts`) holds more than one, else none (said with the closest). Where the
    run's config (``config``: the loader's ``trained_default`` read from it) names something else, the recorded
    advantages win and the disagreement is said."""
    return config_said(_from_recorded(detection, given, recorded_row, parts), config, detection.equivalent)


def config_said(trained: TrainedWith, config: dict[str, Any] | None, equivalent: tuple[str, ...] = ()) -> TrainedWith:
    """``trained`` (from recorded advantages) with what the run's config says beside it, where a config was read
    (``config``: the loader's ``trained_default`` fact): that it names the same scheme, or that it names another,
    which the recorded advantages outrank."""
    if not config or not config.get("config"):
        return trained
    named = config.get("scheme")
    if named is not None and trained.scheme is not None and named in (trained.scheme, *equivalent):
        return replace(trained, why=f"{trained.why}; the run's config names it too ({config.get('why')})")
    if named is None and trained.scheme is None:  # the config says why no preset matches
        return replace(trained, why=f"{trained.why}; the run's config says why: {config.get('why')}")
    says = f"names {named}" if named is not None else "says the advantages are not reproducible"
    return replace(
        trained,
        why=f"{trained.why}; the run's config {says} ({config.get('why')}), which the recorded advantages "
        "contradict: they win",
    )


def _from_recorded(
    detection: Detection, given: str | None, recorded_row: str, parts: tuple[Part, ...] = ()
) -> TrainedWith:
    rows = f"{detection.rows:,} samples with recorded advantages"
    if detection.best_match is None and len(parts) > 1:
        why = (
            "the recorded advantages match no one preset over the whole dump, so each part of it is fitted on its "
            "own; they are audited as they are"
        )
        return TrainedWith(None, "recorded", why, recorded_row, parts)
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
    if (default or {}).get("config"):
        return TrainedWith(default_scheme, "config", str(default_why), default_scheme)
    if default_scheme is not None:
        why = default_why or "the framework's default for this dump"
        return TrainedWith(default_scheme, "framework default", why, default_scheme)
    if default_why:
        return TrainedWith(None, "unknown", f"{default_why}; {_NAME_IT}")
    return TrainedWith(None, "unknown", f"the dump records no advantages and names no framework default; {_NAME_IT}")


__all__ = [
    "Evidence",
    "Part",
    "TrainedWith",
    "config_said",
    "from_config",
    "from_recorded",
    "part_label",
    "parts_phrase",
    "whole_run",
]
