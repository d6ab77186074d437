"""The audit report: plain data (numpy columns and dicts; pandas DataFrames made of them on first access), no torch,
ready for any renderer."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import UsageError
from .._json import json_object
from .._pandas_import import allow_pandas
from .._table import ADVANTAGE_PREFIX, PROMPT, REWARD, STEP, TRAJECTORY, key_matches
from .columns import Columns, descending, row_max
from .trained_with.trained import TrainedWith

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from .findings.finding import Finding
    from .trained_with.fit import Detection

SCHEMA_VERSION = 1
_READY = ("per_step", "step_groups")  # JSON-ready as built: not walked again
RECORDED_ROW = "recorded"
"""The name of the row (of ``summary``, ``per_step``, the per-prompt columns) that audits the advantages
recorded in the dump; no scheme may take it."""


class StepRows(Mapping[str, dict[str, dict[str, Any]]]):
    """``Report.per_step`` as JSON-ready ``{step: {scheme: {metric: value}}}``, steps in the order they first
    appear; its items are built a few thousand steps at a time, column by column (int counts stay ints)."""

    CHUNK_STEPS = 4096

    def __init__(self, table: Columns) -> None:
        steps = table.column("step")
        if len(steps):
            uniques, first, codes = np.unique(steps, return_index=True, return_inverse=True)
            appearance = np.argsort(first, kind="stable")  # steps in the order they first appear
            codes = np.argsort(appearance)[codes.reshape(-1)]
            uniques = uniques[appearance]
        else:
            uniques, codes = steps, np.zeros(0, dtype=np.int64)
        self._steps = [str(step) for step in uniques.tolist()]
        self._index = {step: index for index, step in enumerate(self._steps)}
        self._order = np.argsort(codes, kind="stable")
        self._bounds = np.searchsorted(codes[self._order], np.arange(len(self._steps) + 1))
        self._table = table

    def __len__(self) -> int:
        return len(self._steps)

    def __iter__(self) -> Iterator[str]:
        return iter(self._steps)

    def __getitem__(self, step: str) -> dict[str, dict[str, Any]]:
        index = self._index[step]  # KeyError for a step it does not hold, as a dict
        return next(self._chunk(index, index + 1))[1]

    def items(self) -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:  # type: ignore[override]
        for start in range(0, len(self._steps), self.CHUNK_STEPS):
            yield from self._chunk(start, min(start + self.CHUNK_STEPS, len(self._steps)))

    def _chunk(self, first: int, last: int) -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:
        rows = self._order[self._bounds[first] : self._bounds[last]]
        part = self._table.take(rows)
        records = part.records()
        schemes = [str(scheme) for scheme in part.column("scheme").tolist()]
        sizes = np.diff(self._bounds[first : last + 1]).tolist()
        at = 0
        for step, size in zip(self._steps[first:last], sizes, strict=True):
            yield step, dict(zip(schemes[at : at + size], records[at : at + size], strict=True))
            at += size


@dataclass(frozen=True)
class Distributions:
    """Each row's finite advantages (the reference's first) counted in ``BINS`` equal bins over ``[low, high]``,
    the same bins for every row; the last bin holds ``high``. ``merged(n)``: the counts in ``n`` bins, ``n`` a
    divisor of ``BINS``."""

    BINS = 240  # divisible by every bin count from 12 to 40 a divisor of it: 12, 15, 16, 20, 24, 30, 40
    low: float
    high: float
    counts: dict[str, list[int]]

    def merged(self, bins: int) -> dict[str, list[int]]:
        if self.BINS % bins:
            raise ValueError(f"{bins} does not divide {self.BINS}")
        width = self.BINS // bins
        return {
            name: [sum(counts[at : at + width]) for at in range(0, self.BINS, width)]
            for name, counts in self.counts.items()
        }


def _counts_differ_only(trained: str | None, reference: str) -> bool:
    """Whether the run's scheme is the reference's but for how a trajectory's samples count in the statistics
    (every sample, or each trajectory once): two conventions a run chooses between, neither a defect to change
    (the ``turn-level-bias`` finding gives the size of the difference)."""
    if trained is None:
        return False
    from dataclasses import replace

    from .presets import get_scheme

    run, target = get_scheme(trained), get_scheme(reference)
    if run.members == target.members:
        return False
    counted_alike = replace(run, members=target.members, representative=target.representative, siblings=target.siblings)
    return replace(counted_alike, name="") == replace(target, name="")


@dataclass
class Report:
    """What ``rollaudit.audit`` found.

    ``summary``: one row per scheme (index: the scheme string), one column per
    metric of the spec. ``per_step``: the same metrics per (step, scheme).
    ``per_prompt``: one row per (step, prompt) with its size, trajectories,
    mean reward, mean advantage under each scheme, and sign flips and
    spurious advantages against the reference. ``histograms``: the three
    group-size histograms, ``{size: count}``. ``info``: counts and data issues.

    ``detection``: when the table holds the trainer's own advantages, which
    scheme they come from (a :class:`rollaudit.Detection`), else None;
    ``recorded`` is the same as a JSON-ready dict (``best_match``, None when
    no preset matches, and the fit of each preset). The recorded advantages
    are then audited like a scheme, in a row named ``recorded`` (of
    ``summary``, ``per_step`` and the per-prompt columns), which ``schemes``
    does not list: it is not a scheme one can recompute.

    ``advantages``: when the audit was asked to keep them (else None), a
    table in row order: each sample's ``step``, ``prompt``, ``trajectory``
    and ``reward`` (named and typed as in the audited table, so that it
    joins it or groups by its keys alone), then one float64 column per
    scheme, ``advantage:<scheme>`` (``advantage:recorded`` for the recorded
    advantages): no advantage column can take a key's name.
    :meth:`prompt` shows one prompt's samples from it;
    :meth:`advantages_by_scheme` gives the advantages by scheme name.
    ``distributions``: the advantages as histograms on shared bins (a
    :class:`Distributions`, kept whatever ``advantages``; None where no
    advantage is finite).

    ``trained_with``: which scheme the run itself trained with and on what
    evidence (a :class:`~rollaudit._audit.trained.TrainedWith`).
    ``not_auditable``: ``{scheme: reason}`` for every scheme the dump cannot
    support; such a scheme has no row anywhere in the report.

    ``findings``: the defects the dump shows (:class:`~rollaudit._audit.findings.finding.Finding`), most
    severe first, each named by a code of ``rollaudit findings`` with its rows, groups, steps and examples;
    ``info["findings_not_checked"]`` says why the laws could not be checked, where they could not.
    """

    reference: str
    schemes: list[str]
    summary_table: Columns = field(repr=False)
    per_step_table: Columns = field(repr=False)
    per_prompt_table: Columns = field(repr=False)
    histograms: dict[str, dict[int, int]]
    info: dict[str, Any] = field(default_factory=dict)
    detection: Detection | None = field(default=None, repr=False)
    step_groups_table: Columns = field(default_factory=lambda: Columns({}), repr=False)
    advantages: pa.Table | None = field(default=None, repr=False)
    trained_with: TrainedWith = field(default_factory=lambda: TrainedWith(None, "unknown", "not audited"))
    not_auditable: dict[str, str] = field(default_factory=dict)
    distributions: Distributions | None = field(default=None, repr=False)
    findings: list[Finding] = field(default_factory=list)

    # The tables as pandas DataFrames for the library's users, made on first access (the renderers read the
    # ``*_table`` columns: a command never imports pandas).

    @cached_property
    def summary(self) -> pd.DataFrame:
        allow_pandas()
        from .frames import summary_frame

        return summary_frame(self.summary_table)

    @cached_property
    def per_step(self) -> pd.DataFrame:
        allow_pandas()
        from .frames import per_step_frame

        return per_step_frame(self.per_step_table)

    @cached_property
    def per_prompt(self) -> pd.DataFrame:
        allow_pandas()
        from .frames import per_prompt_frame

        return per_prompt_frame(self.per_prompt_table)

    @cached_property
    def step_groups(self) -> pd.DataFrame:
        allow_pandas()
        from .frames import step_groups_frame

        return step_groups_frame(self.step_groups_table)

    @property
    def trained_row(self) -> str | None:
        """The row of ``summary`` holding the run's own advantages (``recorded`` or its scheme's), if any."""
        row = self.trained_with.row
        return row if row is not None and row in self.summary_table.labels else None

    @property
    def advice(self) -> list[str]:
        """What to change in the run's framework for the reference's behaviour, where the run's scheme differs
        from the reference on this dump (each with its source); empty where they agree or nothing is known."""
        from .advice import advice_for

        row = self.trained_row
        if row is None or row == self.reference or _counts_differ_only(self.trained_with.scheme, self.reference):
            return []
        flips = self.summary_table.row(row)["sign_flip_rate"]
        if not (isinstance(flips, float) and math.isfinite(flips) and flips > 0):
            return []
        formats = self.info.get("formats", [])
        if self.trained_with.changed:
            return self._advice_by_part(row, formats)
        return advice_for(self.trained_with.scheme, self.reference, recorded=row == RECORDED_ROW, formats=formats)

    def _advice_by_part(self, row: str, formats: list[str]) -> list[str]:
        """The advice for each part of a run that changed scheme whose steps change signs against the reference
        (a part of one environment: where the whole run does), each line led by the part."""
        from .advice import advice_for
        from .trained_with.trained import part_label

        lines: list[str] = []
        for part in self.trained_with.parts:
            if part.scheme is None:
                continue
            if part.where is None and not self.per_step_table.empty:
                table = self.per_step_table
                steps = table.column("step")
                within = (table.column("scheme") == row) & (steps >= part.steps[0]) & (steps <= part.steps[1])
                if not bool((table.floats("sign_flip_rate")[within] > 0).any()):
                    continue
            lines += [
                f"{part_label(part)} ({part.scheme}): {line}"
                for line in advice_for(part.scheme, self.reference, recorded=True, formats=formats)
            ]
        return list(dict.fromkeys(lines))

    @property
    def recorded(self) -> dict[str, Any] | None:
        """Which scheme the recorded advantages come from, JSON-ready (:meth:`Detection.to_dict`), or None."""
        return None if self.detection is None else self.detection.to_dict()

    def advantages_by_scheme(self) -> dict[str, Any]:
        """The kept advantages as ``{scheme: float64 numpy array}`` in row order (``recorded`` last, when the dump
        records advantages), without the keys; UsageError when the audit kept none."""
        advantages = self._kept()
        return {
            name.removeprefix(ADVANTAGE_PREFIX): advantages.column(name).to_numpy()
            for name in advantages.column_names
            if name.startswith(ADVANTAGE_PREFIX)
        }

    def prompt(self, key: str | int) -> pd.DataFrame:
        """One prompt's samples side by side, in row order: each sample's ``step``, ``trajectory`` and ``reward``,
        then its advantage under each scheme (``advantage:<scheme>``, the reference's first, then
        ``advantage:recorded`` where the dump records advantages). ``key`` is compared as the text the report
        prints (``7`` or ``"7"``; a long key as a table cuts it, ending in ``…``); a key the dump does not hold is
        a UsageError naming a few it does. Needs the advantages kept
        (``rollaudit.audit(..., keep_advantages=True)``). The frame's ``attrs`` hold the ``prompt`` key and the
        ``reference``, for the renderers.
        """
        allow_pandas()
        import pandas as pd
        import pyarrow as pa

        advantages = self._kept()
        rows = advantages.filter(key_matches(advantages.column(PROMPT), key))
        schemes = [self.reference, *(name for name in self.schemes if name != self.reference)]
        if f"{ADVANTAGE_PREFIX}{RECORDED_ROW}" in rows.column_names:
            schemes.append(RECORDED_ROW)
        columns = [STEP, TRAJECTORY, REWARD, *(f"{ADVANTAGE_PREFIX}{scheme}" for scheme in schemes)]
        # Int keys stay ints where some sample has none (pandas would make the column float).
        frame = rows.select(columns).to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
        found = rows.column(PROMPT).unique().to_pylist()
        frame.attrs.update(prompt=found[0] if len(found) == 1 else str(key), reference=self.reference)
        return frame

    def _kept(self) -> pa.Table:
        if self.advantages is None:
            raise UsageError("the report holds no advantages", expected="rollaudit.audit(..., keep_advantages=True)")
        return self.advantages

    def worst_steps(self, limit: int = 5) -> pd.DataFrame:
        """Steps where a scheme (or the recorded advantages) flips the most signs against the reference.

        One row per step: the sign-flip rate and non-zero inflation of every scheme but the reference,
        with the step's group sizes; worst first by the highest flip rate of any scheme.
        """
        allow_pandas()
        from .frames import indexed_frame

        return indexed_frame(self.worst_step_table(limit))

    def worst_prompts(self, limit: int = 10) -> pd.DataFrame:
        """Prompts where what the run trained with (else any scheme) disagrees most with the reference, most sign
        flips first."""
        return self.per_prompt.iloc[self._worst_prompt_rows(limit)]

    def silent_prompts(self, limit: int = 10) -> pd.DataFrame:
        """Prompts with no learning signal under the reference that picked up advantages elsewhere."""
        return self.per_prompt.iloc[self._silent_prompt_rows(limit)]

    # The same three tables as numpy columns, for the renderers (the DataFrames above are made of them).

    def worst_step_table(self, limit: int = 5) -> Columns:
        """``worst_steps`` as columns: ``step`` (the index), then as that frame's."""
        table = self.per_step_table
        others = table.column("scheme") != self.reference if len(table) else np.zeros(0, dtype=bool)
        if not np.any(others):
            return Columns({})
        row_steps, row_schemes = table.column("step")[others], table.column("scheme")[others]
        steps = np.unique(row_steps)
        at = np.searchsorted(steps, row_steps)
        data: dict[str, np.ndarray] = {"step": steps}
        schemes = sorted(set(row_schemes.tolist()))
        for metric in ("sign_flip_rate", "nonzero_inflation"):
            values = table.floats(metric)[others]
            for scheme in schemes:
                mine = row_schemes == scheme
                column = np.full(len(steps), np.nan)
                column[at[mine]] = values[mine]
                data[f"{metric}:{scheme}"] = column
        flips = [data[f"sign_flip_rate:{scheme}"] for scheme in schemes]
        data["worst_flip_rate"] = worst = row_max(flips, len(steps))
        groups = self.step_groups_table
        if not groups.empty:  # joined on the step: a step without groups makes the columns float, NaN there
            group_steps = groups.column("step")
            sorter = np.argsort(group_steps, kind="stable")
            place = sorter[np.searchsorted(group_steps, steps, sorter=sorter).clip(max=len(group_steps) - 1)]
            found = group_steps[place] == steps
            for name in groups.names:
                values = groups.column(name)
                if found.all():
                    data[name] = values[place]
                else:
                    data[name] = np.where(found, values[place].astype(np.float64), np.nan)
        order = descending(worst)
        return Columns(data, ("step",)).take(order[worst[order] > 0][:limit])

    def worst_prompt_table(self, limit: int = 10) -> Columns:
        """``worst_prompts`` as columns."""
        return self.per_prompt_table.take(self._worst_prompt_rows(limit))

    def silent_prompt_table(self, limit: int = 10) -> Columns:
        """``silent_prompts`` as columns."""
        return self.per_prompt_table.take(self._silent_prompt_rows(limit))

    def _worst_prompt_rows(self, limit: int) -> np.ndarray:
        """The per-prompt rows with sign flips, most flips first, then most spurious advantages, then most samples:
        the flips of what the run trained with where the report knows it (its row's columns), else the most of any
        scheme's."""
        table = self.per_prompt_table
        trained = self.trained_row
        own = trained is not None and f"flips:{trained}" in table.names
        flips = [f"flips:{trained}"] if own else [name for name in table.names if name.startswith("flips:")]
        spurious = [f"spurious:{trained}"] if own else [name for name in table.names if name.startswith("spurious:")]
        spurious = [name for name in spurious if name in table.names]
        if table.empty or not flips:
            return np.zeros(0, dtype=np.int64)
        most_flips = row_max([table.floats(name) for name in flips], len(table))
        most_spurious = row_max([table.floats(name) for name in spurious], len(table))
        order = descending(most_flips, most_spurious, table.floats("samples"))
        rows: np.ndarray = order[most_flips[order] > 0]
        return rows[:limit]

    def _silent_prompt_rows(self, limit: int) -> np.ndarray:
        """The rows of prompts without signal under the reference given spurious advantages, most first."""
        table = self.per_prompt_table
        spurious = [name for name in table.names if name.startswith("spurious:")]
        if table.empty or not spurious:
            return np.zeros(0, dtype=np.int64)
        most = row_max([table.floats(name) for name in spurious], len(table))
        picked = np.flatnonzero(table.column("no_signal") & (most > 0))
        rows: np.ndarray = picked[descending(most[picked])]
        return rows[:limit]

    def to_dict(self, lazy_steps: bool = False) -> dict[str, Any]:
        """A JSON-ready document, versioned by ``schema_version``.

        ``lazy_steps``: ``per_step`` as a :class:`StepRows` mapping, each step's rows made as they are read
        (writers that stream need not hold a Python object per step and scheme of a long run)."""
        per_step = StepRows(self.per_step_table)
        groups = self.step_groups_table
        step_groups = dict(zip(map(str, groups.labels), groups.records(), strict=True)) if len(groups) else {}
        document = {
            "schema_version": SCHEMA_VERSION,
            "reference": self.reference,
            "schemes": list(self.schemes),
            "info": self.info,
            "summary": self.summary_table.by_label(),
            "per_step": per_step if lazy_steps else dict(per_step),
            "histograms": {
                name: {str(size): count for size, count in sizes.items()} for name, sizes in self.histograms.items()
            },
            "step_groups": step_groups,
            "worst_steps": self.worst_step_table(10).records(with_index=True),
            "worst_prompts": self.worst_prompt_table().records(),
            "silent_prompts": self.silent_prompt_table().records(),
        }
        if self.recorded is not None:
            document["recorded"] = self.recorded
        document["trained_with"] = self.trained_with.to_dict()
        document["findings"] = [finding.to_dict() for finding in self.findings]
        document["advice"] = self.advice
        document["not_auditable"] = dict(self.not_auditable)
        ready = json_object({key: value for key, value in document.items() if key not in _READY})
        return {key: document[key] if key in _READY else ready[key] for key in document}

    def _repr_html_(self) -> str:
        """The HTML report in a notebook cell: verdict, tables and figures (the page ``--html`` writes)."""
        from .._render.html import notebook_html

        return notebook_html(self)

    def __repr__(self) -> str:
        return (
            f"<rollaudit.Report reference={self.reference!r} schemes={self.schemes!r} "
            f"samples={self.info.get('samples', 0)}>"
        )
