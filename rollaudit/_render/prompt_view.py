"""One prompt's samples side by side (``compare --prompt KEY``, :meth:`rollaudit.Report.prompt`): each sample's
step, trajectory and reward, and its advantage under each scheme (and the recorded one), as a terminal table, a
Markdown section, a JSON object and an HTML section.

Every function takes the view, the frame ``Report.prompt`` returns (its ``attrs`` name the prompt key and the
reference).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._json import json_value
from .._table import ADVANTAGE_PREFIX, PROMPT, REWARD, STEP, TRAJECTORY, key_matches
from .text import NOT_AVAILABLE, key_text, number, plural, steps_label

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import RenderableType

    from .._audit.findings.finding import Example
    from .._audit.report import Report

JSON_KEY = "prompt"
"""The key of the view in the ``compare --json`` document."""


def _schemes(view: pd.DataFrame) -> list[str]:
    return [column.removeprefix(ADVANTAGE_PREFIX) for column in view.columns if column.startswith(ADVANTAGE_PREFIX)]


def advantage_text(value: Any) -> str:
    """A sample's advantage: signed, four decimals; exactly 0 as ``0``; a residue below 1e-4 in scientific
    notation (it is not 0, and a rounding residue is what the view is for); undefined as n/a."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NOT_AVAILABLE
    value = float(value)
    if value == 0:
        return "0"
    return f"{value:+.1e}" if abs(value) < 1e-4 else f"{value:+.4f}"


def view_title(view: pd.DataFrame) -> str:
    """``Prompt 30: 8 samples, 4 trajectories, step 3``."""
    key = key_text(view.attrs.get("prompt"), width=60)
    trajectories = view[TRAJECTORY]
    # A sample without a trajectory key is a trajectory of its own.
    counted = int(trajectories.nunique()) + int(trajectories.isna().sum())
    steps = sorted(int(step) for step in view[STEP].unique())
    return f"Prompt {key}: {plural(len(view), 'sample')}, {plural(counted, 'trajectory', 'trajectories')}, " + (
        steps_label(steps)
    )


def view_header(view: pd.DataFrame) -> list[str]:
    """``step``, ``traj. key``, ``reward``, then each scheme's advantage, headed by the scheme (the reference
    marked ``(ref)``)."""
    reference = view.attrs.get("reference")
    schemes = [f"{scheme} (ref)" if scheme == reference else scheme for scheme in _schemes(view)]
    return ["step", "traj. key", "reward", *schemes]


def view_rows(view: pd.DataFrame) -> list[list[str]]:
    """One row of plain strings per sample, in row order."""
    advantages = [f"{ADVANTAGE_PREFIX}{scheme}" for scheme in _schemes(view)]
    rows = []
    for sample in view.to_dict(orient="records"):
        trajectory = sample[TRAJECTORY]
        rows.append(
            [
                str(sample[STEP]),
                key_text(None if _missing(trajectory) else trajectory),
                number(sample[REWARD], 4),
                *(advantage_text(sample[column]) for column in advantages),
            ]
        )
    return rows


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or type(value).__name__ == "NAType"


def view_positions(report: Report, key: str | int) -> list[int]:
    """The row numbers (0-based, of the audited table) of the samples ``report.prompt(key)`` shows, in its order:
    the rows of the kept advantages it selects, which are the audited table's."""
    import numpy as np

    advantages = report.advantages
    if advantages is None:
        return []
    selected = key_matches(advantages.column(PROMPT), key).to_numpy(zero_copy_only=False)
    return np.flatnonzero(selected).tolist()


def example_view(report: Report, example: Example) -> tuple[pd.DataFrame, list[int]] | None:
    """The samples of an example's prompt at its step, as ``report.prompt`` shows them, and their row numbers;
    None where the report kept no advantages or holds no such prompt."""
    from .._errors import UsageError

    if report.advantages is None:
        return None
    try:
        view = report.prompt(example.prompt)
    except UsageError:  # a key no sample holds (or none at all): nothing to show
        return None
    positions = view_positions(report, example.prompt)
    at_step = (view[STEP] == example.step).to_numpy(dtype=bool, na_value=False)
    shown = view[at_step]
    shown.attrs.update(view.attrs)
    return shown, [position for position, kept in zip(positions, at_step, strict=True) if kept]


def prompt_renderable(view: pd.DataFrame) -> RenderableType:
    """The terminal table (it drops the last schemes first where the console is narrow, and says so)."""
    from .terminal import FittedTable

    header = view_header(view)
    return FittedTable(title=view_title(view), header=header, rows=view_rows(view), drop_order=header[:2:-1])


def prompt_markdown(view: pd.DataFrame) -> str:
    """The Markdown section: a heading and a table."""
    from .markdown import markdown_table, markdown_text

    return f"#### {markdown_text(view_title(view))}\n\n{markdown_table(view_header(view), view_rows(view))}\n"


def prompt_json(view: pd.DataFrame) -> dict[str, Any]:
    """``{"key", "reference", "samples": [{"step", "trajectory", "reward", "advantages": {scheme: value}}]}``,
    undefined values as null."""
    schemes = _schemes(view)
    samples = []
    for sample in view.to_dict(orient="records"):
        samples.append(
            {
                "step": sample[STEP],
                "trajectory": None if _missing(sample[TRAJECTORY]) else sample[TRAJECTORY],
                "reward": sample[REWARD],
                "advantages": {scheme: sample[f"{ADVANTAGE_PREFIX}{scheme}"] for scheme in schemes},
            }
        )
    return json_value({"key": view.attrs.get("prompt"), "reference": view.attrs.get("reference"), "samples": samples})


def with_prompt(output_format: str, rendered: Any, view: pd.DataFrame) -> Any:
    """A rendered compare report (``output_format``: a name of ``COMPARE_RENDERERS``) with the view added at its
    end: a table after the terminal report, a section after the Markdown, a ``prompt`` object in the JSON."""
    if output_format == "terminal":
        from rich.console import Group
        from rich.text import Text

        return Group(rendered, Text(""), prompt_renderable(view))
    if output_format == "markdown":
        return f"{rendered.rstrip()}\n\n{prompt_markdown(view)}"
    if output_format == "json":
        import json

        from .json import dumps

        document: Mapping[str, Any] = json.loads(rendered)
        return dumps({**document, JSON_KEY: prompt_json(view)})
    raise ValueError(f"no prompt view for the {output_format!r} output")
