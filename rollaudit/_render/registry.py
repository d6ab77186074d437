"""The renderers of a compare report and of an inspect description, chosen by name from one table each.

A renderer is a function ``(report, load, top) -> str | rich renderable`` (a string goes to its output as it is, a
renderable is printed to the console, or to plain text for a file). Adding an output is one function and one line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .json import render_compare_json, render_inspect_json
from .markdown import render_markdown
from .terminal import render_compare, render_inspect

CompareRenderer = Callable[..., Any]

COMPARE_RENDERERS: Mapping[str, CompareRenderer] = {
    "terminal": render_compare,
    "json": render_compare_json,
    "markdown": render_markdown,
}
"""``rollaudit compare``: renderer name -> ``(report, load, top)`` -> text or a rich renderable."""

INSPECT_RENDERERS: Mapping[str, Callable[..., Any]] = {
    "terminal": render_inspect,
    "json": render_inspect_json,
}
"""``rollaudit inspect``: renderer name -> ``(description, load)`` -> text or a rich renderable."""
