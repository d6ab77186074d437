"""The audit report: plain data (pandas and dicts), no torch, ready for any renderer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from .._json import json_object
from .trained import TrainedWith

if TYPE_CHECKING:
    import pyarrow as pa

    from .fit import Detection

SCHEMA_VERSION = 1
RECORDED_ROW = "recorded"
"""The name of the row (of ``summary``, ``per_step``, the per-prompt columns) that audits the advantages
recorded in the dump; no scheme may take it."""


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

    ``advantages``: every scheme's advantages (a float64 column per scheme,
    in row order), when the audit was asked to keep them, else None.

    ``trained_with``: which scheme the run itself trained with and on what
    evidence (a :class:`~rollaudit._audit.trained.TrainedWith`).
    ``not_auditable``: ``{scheme: reason}`` for every scheme the dump cannot
    support; such a scheme has no row anywhere in the report.
    """

    reference: str
    schemes: list[str]
    summary: pd.DataFrame
    per_step: pd.DataFrame
    per_prompt: pd.DataFrame
    histograms: dict[str, dict[int, int]]
    info: dict[str, Any] = field(default_factory=dict)
    detection: Detection | None = field(default=None, repr=False)
    step_groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    advantages: pa.Table | None = field(default=None, repr=False)
    trained_with: TrainedWith = field(default_factory=lambda: TrainedWith(None, "unknown", "not audited"))
    not_auditable: dict[str, str] = field(default_factory=dict)

    @property
    def trained_row(self) -> str | None:
        """The row of ``summary`` holding the run's own advantages (``recorded`` or its scheme's), if any."""
        row = self.trained_with.row
        return row if row is not None and row in self.summary.index else None

    @property
    def advice(self) -> list[str]:
        """What to change in the run's framework for the reference's behaviour, where the run's scheme differs
        from the reference on this dump (each with its source); empty where they agree or nothing is known."""
        from .advice import advice_for

        row = self.trained_row
        if row is None or row == self.reference:
            return []
        metrics = self.summary.loc[row]
        flips = metrics["sign_flip_rate"]
        if not (isinstance(flips, float) and math.isfinite(flips) and flips > 0):
            return []
        return advice_for(
            self.trained_with.scheme, self.reference, recorded=row == RECORDED_ROW, formats=self.info.get("formats", [])
        )

    @property
    def recorded(self) -> dict[str, Any] | None:
        """Which scheme the recorded advantages come from, JSON-ready (:meth:`Detection.to_dict`), or None."""
        return None if self.detection is None else self.detection.to_dict()

    def worst_steps(self, limit: int = 5) -> pd.DataFrame:
        """Steps where a scheme (or the recorded advantages) flips the most signs against the reference.

        One row per step: the sign-flip rate and non-zero inflation of every scheme but the reference,
        with the step's group sizes; worst first by the highest flip rate of any scheme.
        """
        per_step = self.per_step.reset_index()
        per_step = per_step[per_step["scheme"] != self.reference]
        if per_step.empty:
            return pd.DataFrame()
        wide = per_step.pivot(index="step", columns="scheme", values=["sign_flip_rate", "nonzero_inflation"])
        wide.columns = [f"{metric}:{scheme}" for metric, scheme in wide.columns]
        flips = wide[[column for column in wide.columns if column.startswith("sign_flip_rate:")]]
        wide = wide.assign(worst_flip_rate=flips.max(axis=1))
        if not self.step_groups.empty:
            wide = wide.join(self.step_groups)
        ranked = wide.sort_values("worst_flip_rate", ascending=False, kind="stable")
        return ranked[ranked["worst_flip_rate"] > 0].head(limit)

    def worst_prompts(self, limit: int = 10) -> pd.DataFrame:
        """Prompts where the schemes disagree most with the reference, most sign flips first."""
        table = self.per_prompt
        flips = [column for column in table.columns if column.startswith("flips:")]
        spurious = [column for column in table.columns if column.startswith("spurious:")]
        if table.empty or not flips:
            return table.head(0)
        ranked = table.assign(
            most_flips=table[flips].max(axis=1), most_spurious=table[spurious].max(axis=1)
        ).sort_values(["most_flips", "most_spurious", "samples"], ascending=False, kind="stable")
        return ranked[ranked["most_flips"] > 0].head(limit).drop(columns=["most_flips", "most_spurious"])

    def silent_prompts(self, limit: int = 10) -> pd.DataFrame:
        """Prompts with no learning signal under the reference that picked up advantages elsewhere."""
        table = self.per_prompt
        spurious = [column for column in table.columns if column.startswith("spurious:")]
        if table.empty or not spurious:
            return table.head(0)
        picked = table[table["no_signal"] & (table[spurious].max(axis=1) > 0)]
        order = picked[spurious].max(axis=1).sort_values(ascending=False, kind="stable").index
        return picked.loc[order].head(limit)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready document, versioned by ``schema_version``."""
        per_step: dict[str, dict[str, dict[str, Any]]] = {}
        # to_dict(orient="index") keeps each column's type (iterrows would turn the int counts into floats).
        for (step, scheme), row in self.per_step.to_dict(orient="index").items():
            per_step.setdefault(str(step), {})[scheme] = row
        document = {
            "schema_version": SCHEMA_VERSION,
            "reference": self.reference,
            "schemes": list(self.schemes),
            "info": self.info,
            "summary": self.summary.to_dict(orient="index"),
            "per_step": per_step,
            "histograms": {
                name: {str(size): count for size, count in sizes.items()} for name, sizes in self.histograms.items()
            },
            "step_groups": {str(step): row for step, row in self.step_groups.to_dict(orient="index").items()},
            "worst_steps": self.worst_steps(10).reset_index().to_dict(orient="records"),
            "worst_prompts": self.worst_prompts().to_dict(orient="records"),
            "silent_prompts": self.silent_prompts().to_dict(orient="records"),
        }
        if self.recorded is not None:
            document["recorded"] = self.recorded
        document["trained_with"] = self.trained_with.to_dict()
        document["advice"] = self.advice
        document["not_auditable"] = dict(self.not_auditable)
        return json_object(document)

    def _repr_html_(self) -> str:
        """The HTML report in a notebook cell: verdict, tables and figures (the page ``--html`` writes)."""
        from .._render.html import notebook_html

        return notebook_html(self)

    def __repr__(self) -> str:
        return (
            f"<rollaudit.Report reference={self.reference!r} schemes={self.schemes!r} "
            f"samples={self.info.get('samples', 0)}>"
        )
