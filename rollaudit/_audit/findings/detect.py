"""Every check on one audit: the grouping defects of the run's scheme (or, where no preset reproduces the recorded
advantages, each defect's signature refit), the value defects, then the laws on the rows no code explains."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import torch

from ..._table import NOT_TRAINED, facts_in
from ..presets import get_scheme
from .codes import BY_CODE
from .context import Rows
from .finding import Finding
from .laws import UNKNOWN_ESTIMATOR, broken_laws
from .structure import Hit, known_grouping, search_grouping
from .values import masked_in_baseline, misaligned, mixed_scales, near_constant, nonfinite, singleton_raw, turn_level

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import pyarrow as pa

    from ..engine.encode import Encoded
    from ..schemes import Scheme
    from ..trained_with.fit import Detection
    from ..trained_with.trained import Part as TrainedPart
    from ..trained_with.trained import TrainedWith

_LAW_WORDS = {
    "law-finite": "advantages not finite on finite rewards",
    "law-equal-rewards": "rows whose equal rewards in one group got different advantages",
    "law-order": "rows with a higher reward than another of their group and a lower advantage",
    "law-bound": "rows with |A| beyond the estimator's bound for their group's size",
    "law-centred": "rows of groups whose advantages do not sum to 0",
}


Part = tuple["torch.Tensor | None", "Scheme | None"]
"""Rows of a run (a mask; None: every row) and the preset their advantages come from (None where none does)."""


def find(
    enc: Encoded,
    table: pa.Table,
    advantage: torch.Tensor,
    evidence: str,
    parts: Sequence[Part],
    full: pa.Table | None = None,
    closest: Scheme | None = None,
    fix: str | None = None,
    present: torch.Tensor | None = None,
    row_numbers: np.ndarray | None = None,
    prompt_groups: tuple[torch.Tensor, int] | None = None,
) -> list[Finding]:
    """The findings on the audited rows, most severe first.

    ``advantage``: what the run trained with on each row (its recorded advantages, or its scheme's where given or
    assumed); ``parts``: the run's rows and the preset each part's advantages come from (one part of every row for
    a run of one scheme; a step range, or an environment, each for a run that changed), None where its recorded
    advantages match none: there each defect's signature is refit, ``closest`` the nearest fit; ``full``: every
    row, the untrained ones too, where the dump has some; ``fix``: the framework's own setting for a grouping
    defect of its scheme, where one is known; ``present``: the rows with an advantage (recorded ones: those
    recorded); ``row_numbers``: each audited row's number in the table as loaded, where untrained rows were left
    out of the audit (the examples name rows by it); ``prompt_groups``: the audit's own (step, prompt) groups.
    """
    present = torch.ones(int(enc.rows), dtype=torch.bool) if present is None else present.cpu()
    advantage = advantage.to(torch.float64).cpu()
    found: dict[str, list[Hit]] = {}
    whole: Rows | None = None  # every row of the run: where findings are counted and their examples taken
    # Rewards that are not what the run trained on (a KL it subtracted, which the dump lacks) support no finding that
    # compares advantages with them: only the values' own checks stand.
    rewards_apart = bool(facts_in(table).get("rewards_not_trained"))
    for mask, scheme in parts:
        on = present if mask is None else present & mask
        rows = Rows(enc, table, advantage, scheme, evidence, on, full, row_numbers, prompt_groups)
        whole = rows if mask is None else whole
        hits = nonfinite(rows, scheme) if rewards_apart else _part_hits(rows, scheme, closest)
        for hit in hits:
            found.setdefault(hit.code, []).append(hit._replace(flagged=hit.flagged & rows.present))
    if whole is None:
        whole = Rows(enc, table, advantage, None, evidence, present, full, row_numbers, prompt_groups)
    findings = []
    for code, hits in found.items():
        flagged = hits[0].flagged
        for hit in hits[1:]:
            flagged = flagged | hit.flagged
        if not bool(flagged.any()):
            continue
        summary = "; ".join(dict.fromkeys(hit.summary for hit in hits))
        findings.append(
            Finding(
                code=code,
                summary=summary,
                rows=int(flagged.sum()),
                groups=whole.groups_of(flagged),
                steps=whole.steps_of(flagged),
                examples=whole.examples(flagged),
                evidence=evidence,
                detail=hits[0].detail,
                fix=fix if code in _GROUPING_CODES else None,
            )
        )
    return sorted(findings, key=Finding.rank)


def _part_hits(rows: Rows, scheme: Scheme | None, closest: Scheme | None) -> list[Hit]:
    """What one part of a run shows: the grouping defects of its scheme, or each signature refit where no preset
    reproduces its advantages; the value defects; and, where no preset does, the laws on the rows no error-severity
    code explains."""
    hits: list[Hit] = []
    if scheme is None:
        candidates = [get_scheme("prompt"), get_scheme("dr-grpo"), *([closest] if closest is not None else [])]
        hits += misaligned(rows, candidates)
        if not hits:
            hits += masked_in_baseline(rows, candidates)
        if not hits:
            hits += search_grouping(rows, candidates)
    else:
        hits += known_grouping(rows, scheme)
        hits += turn_level(rows, scheme)
        hits += mixed_scales(rows, scheme)
    if any(hit.code == "rows-misaligned" for hit in hits):
        return hits  # every value is another row's: no check of values or laws means anything
    explained = torch.zeros(rows.rows, dtype=torch.bool)
    for hit in hits:
        if BY_CODE[hit.code].severity == "error":
            explained |= hit.flagged
    hits += nonfinite(rows, scheme) + singleton_raw(rows) + near_constant(rows, explained)
    for hit in hits:
        if BY_CODE[hit.code].severity == "error":
            explained |= hit.flagged
    # A preset's own advantages keep the laws it declares by construction (tested on random input): the laws are
    # checked where no preset reproduces the run's recorded advantages.
    if scheme is None:
        nonfinite_found = any(hit.code == "nan-advantages" for hit in hits)
        for law, broken in broken_laws(rows.reward, rows.advantage, rows.group, UNKNOWN_ESTIMATOR, rows.dtype).items():
            left = broken & ~explained
            if law == "law-finite" and nonfinite_found:
                continue
            if bool(left.any()):
                hits.append(Hit(law, left, f"{int(left.sum()):,} {_LAW_WORDS[law]}", {}))
    return hits


_GROUPING_CODES = frozenset(
    {"batch-as-group", "tail-rows-unnormalised", "straddling-slices", "key-splits-prompts", "per-trajectory-key"}
)


def run_findings(
    encoded: Encoded,
    table: pa.Table,
    every_row: pa.Table | None,
    detection: Detection | None,
    computed: Mapping[str, torch.Tensor],
    trained: TrainedWith,
    reference: str,
    info: dict[str, Any],
    prompt_groups: tuple[torch.Tensor, int] | None = None,
) -> list[Finding]:
    """The findings of one audit: on the run's recorded advantages (``detection`` says which preset they match),
    else on its given or default scheme's (``computed``, by scheme string); where nothing says what it trained
    with, none, and ``info["findings_not_checked"]`` says why. ``every_row``: the table with its untrained rows,
    where it has some; ``prompt_groups``: the audit's own (step, prompt) group codes and their count, reused."""
    import pyarrow.compute as pc

    from ..advice import advice_for
    from ..trained_with.fit import has_recorded, recorded_mask, recorded_values

    scheme: Scheme | None = None
    closest = present = None
    if has_recorded(table):
        advantage = torch.from_numpy(recorded_values(table))
        present = torch.from_numpy(recorded_mask(table))
        if detection is not None and detection.matched and detection.best_match is not None:
            scheme = get_scheme(detection.best_match)
        elif detection is not None and detection.closest is not None:
            closest = get_scheme(detection.closest.scheme)
        evidence = "recorded"
    elif trained.scheme is not None and trained.scheme in computed:
        advantage, scheme, evidence = computed[trained.scheme], get_scheme(trained.scheme), trained.evidence
    else:
        info["findings_not_checked"] = (
            "nothing says what the run trained with: the dump records no advantages of its own, --trained-with "
            "names none, and its format has no default"
            if trained.scheme is None
            else f"the run's scheme {trained.scheme} is not auditable on this dump"
        )
        return []
    fix = None
    if scheme is not None:
        advice = advice_for(str(scheme), reference, recorded=evidence == "recorded", formats=info.get("formats", []))
        fix = advice[0] if advice and not advice[0].startswith("rollaudit knows no setting") else None
    row_numbers = None
    if every_row is not None:
        trained_rows = pc.is_null(every_row.column(NOT_TRAINED)).to_numpy(zero_copy_only=False)
        row_numbers = np.flatnonzero(trained_rows)
    parts: list[Part] = [(None, scheme)]
    if trained.changed:
        parts = [
            (_part_rows(encoded, table, part), None if part.scheme is None else get_scheme(part.scheme))
            for part in trained.parts
        ]
    return find(
        encoded,
        table,
        advantage,
        evidence,
        parts,
        full=every_row,
        closest=closest,
        fix=fix,
        present=present,
        row_numbers=row_numbers,
        prompt_groups=prompt_groups,
    )


def _part_rows(encoded: Encoded, table: pa.Table, part: TrainedPart) -> torch.Tensor:
    """The rows of one part of a run that changed scheme: its steps, and its environment where it names one
    (``env=delegate``, or ``no env``)."""
    import pyarrow.compute as pc

    steps = torch.from_numpy(np.asarray(encoded.step_values, dtype=np.int64)).index_select(0, encoded.step.cpu())
    rows = (steps >= part.steps[0]) & (steps <= part.steps[1])
    if part.where is not None:
        column, _, value = part.where.partition("=")
        if part.where.startswith("no ") and not value:
            where = pc.is_null(table.column(part.where[3:]))
        else:
            where = pc.fill_null(pc.equal(table.column(column).cast(pa.string()), value), False)
        rows &= torch.from_numpy(where.to_numpy(zero_copy_only=False).astype(bool))
    return rows
