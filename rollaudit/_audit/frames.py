"""The report's tables as the pandas DataFrames a library user reads (``Report.summary`` and the others): made
from its numpy columns on first access, so that a command that prints them never imports pandas."""

from __future__ import annotations

import pandas as pd

from .columns import Columns, Masked
from .metric_names import METRICS


def summary_frame(columns: Columns) -> pd.DataFrame:
    """One row per scheme (index ``scheme``), a column per metric."""
    if not len(columns):
        return pd.DataFrame(columns=list(METRICS), index=pd.Index([], name="scheme"))
    names = columns.raw["scheme"]
    return pd.DataFrame({metric: columns.raw[metric] for metric in METRICS}, index=pd.Index(names, name="scheme"))


def per_step_frame(columns: Columns) -> pd.DataFrame:
    """One row per (step, scheme), a column per metric."""
    if not len(columns):
        return pd.DataFrame(columns=["step", "scheme", *METRICS]).set_index(["step", "scheme"])
    return pd.DataFrame(columns.raw).set_index(["step", "scheme"])


def per_prompt_frame(columns: Columns) -> pd.DataFrame:
    """One row per (step, prompt); counts that may be missing as nullable integers."""
    if not columns.data:
        return pd.DataFrame()
    # The columns are this audit's own arrays: the frame takes them as they are (no copy into 2-D blocks).
    return pd.DataFrame(
        {
            name: pd.arrays.IntegerArray(values.values, values.missing) if isinstance(values, Masked) else values
            for name, values in columns.raw.items()
        },
        copy=False,
    )


def step_groups_frame(columns: Columns) -> pd.DataFrame:
    """One row per step with prompt groups (index ``step``): its groups' counts and sizes."""
    frame = pd.DataFrame(columns.raw)
    return frame if frame.empty else frame.set_index("step")


def indexed_frame(columns: Columns) -> pd.DataFrame:
    """A table of plain columns as a DataFrame, its index columns as the frame's index (none: an empty frame)."""
    frame = pd.DataFrame(columns.raw)
    return frame.set_index(list(columns.index)) if columns.index and len(frame.columns) else frame
