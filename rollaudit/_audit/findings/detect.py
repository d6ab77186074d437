"""Every check on one audit: the grouping defects of the run's scheme (or, where no preset reproduces the recorded
advantages, each defect's signature refit), the value defects, then the laws on the rows no code explains."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..._table import NOT_TRAINED
from ..presets import get_scheme
from .codes import BY_CODE
from .context import Rows
from .finding import Finding
from .laws import UNKNOWN_ESTIMATOR, broken_laws, laws_of_parts
from .structure import Hit, known_grouping, search_grouping
from .values import masked_in_baseline, misaligned, mixed_scales, near_constant, nonfinite, singleton_raw, turn_level

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pyarrow as pa

    from ..engine.encode import Encoded
    from ..schemes import Scheme
    from ..trained_with.fit import Detection
    from ..trained_with.trained import TrainedWith

_LAW_WORDS = {
    "law-finite": "advantages not finite on finite rewards",
    "law-equal-rewards": "rows whose equal rewards in one group got different advantages",
    "law-order": "rows with a higher reward than another of their group and a lower advantage",
    "law-bound": "rows with |A| beyond the estimator's bound for their group's size",
    "law-centred": "rows of groups whose advantages do not sum to 0",
}


def find(
    enc: Encoded,
    table: pa.Table,
    advantage: torch.Tensor,
    scheme: Scheme | None,
    evidence: str,
    full: pa.Table | None = None,
    closest: Scheme | None = None,
    search: bool = True,
    fix: str | None = None,
    present: torch.Tensor | None = None,
    parts: list[Scheme | None] | None = None,
    row_numbers: np.ndarray | None = None,
    prompt_groups: tuple[torch.Tensor, int] | None = None,
) -> list[Finding]:
    """The findings on the audited rows, most severe first.

    ``advantage``: what the run trained with on each row (its recorded advantages, or its scheme's where given or
    assumed); ``scheme``: the preset they come from, None where recorded advantages match none (``closest``: the
    nearest fit then); ``full``: every row, the untrained ones too, where the dump has some; ``fix``: the
    framework's own setting for a grouping defect of its scheme, where one is known; ``search``: refit the
    defects' signatures where no preset reproduces the advantages (not where the run changed scheme midway: its
    parts each match their own); ``parts``: the scheme of each part of such a run (None where a part matches
    none), whose laws hold on every row where all of them keep them; ``row_numbers``: each audited row's number in
    the table as loaded, where untrained rows were left out of the audit (the examples name rows by it).
    """
    present = torch.ones(int(enc.rows), dtype=torch.bool) if present is None else present
    rows = Rows(enc, table, advantage.to(torch.float64).cpu(), scheme, evidence, present, full, row_numbers)
    rows.group_rows(prompt_groups)
    hits: list[Hit] = []
    if scheme is None and search:
        candidates = [get_scheme("prompt"), get_scheme("dr-grpo"), *([closest] if closest is not None else [])]
        hits += misaligned(rows, candidates)
        if not hits:
            hits += masked_in_baseline(rows, candidates)
        if not hits:
            hits += search_grouping(rows, candidates)
    elif scheme is not None:
        hits += known_grouping(rows, scheme)
        hits += turn_level(rows, scheme)
        hits += mixed_scales(rows, scheme)
    shifted = any(hit.code == "rows-misaligned" for hit in hits)
    if not shifted:
        hits += nonfinite(rows, scheme) + singleton_raw(rows) + near_constant(rows)
    explained = torch.zeros(rows.rows, dtype=torch.bool)
    for hit in hits:
        if BY_CODE[hit.code].severity == "error":
            explained |= hit.flagged
    # A preset's own advantages keep the laws it declares by construction (tested on random input): the laws are
    # checked where no preset reproduces the run's recorded advantages.
    if not shifted and scheme is None:
        kept = laws_of_parts(parts) if parts else UNKNOWN_ESTIMATOR
        for law, broken in broken_laws(rows.reward, rows.advantage, rows.group, kept, rows.dtype).items():
            left = broken & ~explained
            if law == "law-finite":
                left &= ~torch.tensor([hit.code == "nan-advantages" for hit in hits]).any()
            if bool(left.any()):
                hits.append(Hit(law, left, f"{int(left.sum()):,} {_LAW_WORDS[law]}", {}))
    hits = [hit._replace(flagged=hit.flagged & rows.present) for hit in hits]
    findings = [
        Finding(
            code=hit.code,
            summary=hit.summary,
            rows=int(hit.flagged.sum()),
            groups=rows.groups_of(hit.flagged),
            steps=rows.steps_of(hit.flagged),
            examples=rows.examples(hit.flagged),
            evidence=evidence,
            detail=hit.detail,
            fix=fix if hit.code in _GROUPING_CODES else None,
        )
        for hit in hits
        if bool(hit.flagged.any())
    ]
    return sorted(findings, key=Finding.rank)


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

    scheme = closest = present = None
    if has_recorded(table):
        advantage = torch.from_numpy(recorded_values(table))
        present = torch.from_numpy(recorded_mask(table))
        if detection is not None and detection.matched and detection.best_match is not None:
            scheme = get_scheme(detection.best_match)
        elif detection is not None and detection.closest is not None and not trained.changed:
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
    return find(
        encoded,
        table,
        advantage,
        scheme,
        evidence,
        full=every_row,
        closest=closest,
        search=not trained.changed,
        fix=fix,
        present=present,
        parts=[None if part.scheme is None else get_scheme(part.scheme) for part in trained.parts]
        if trained.changed
        else None,
        row_numbers=row_numbers,
        prompt_groups=prompt_groups,
    )
