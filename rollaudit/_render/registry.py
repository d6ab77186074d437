"""The renderers of a compare report and of an inspect description, chosen by name from one table each.

A renderer is a function ``(report, load, top) -> str | rich renderable`` (a string goes to its output as it is, a
renderable is printed to the console, or to plain text for a file). Adding an output is one function and one line.
The tables name their functions by module, imported when one is chosen: the command line reads the names (its
``--format`` choices) without loading any renderer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from importlib import import_module
from typing import Any

CompareRenderer = Callable[..., Any]


class Renderers(Mapping[str, Callable[..., Any]]):
    """Renderer name -> function, from ``name -> ".module:function"`` (the module imported on first use)."""

    def __init__(self, entries: Mapping[str, str]) -> None:
        self._entries = dict(entries)

    def __getitem__(self, name: str) -> Callable[..., Any]:
        module, _, function = self._entries[name].partition(":")
        return getattr(import_module(module, __package__), function)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


COMPARE_RENDERERS: Mapping[str, CompareRenderer] = Renderers(
    {
        "terminal": ".terminal:render_compare",
        "json": ".json:render_compare_json",
        "markdown": ".markdown:render_markdown",
    }
)
"""``rollaudit compare``: renderer name -> ``(report, load, top)`` -> text or a rich renderable."""

INSPECT_RENDERERS: Mapping[str, Callable[..., Any]] = Renderers(
    {
        "terminal": ".terminal:render_inspect",
        "json": ".json:render_inspect_json",
    }
)
"""``rollaudit inspect``: renderer name -> ``(description, load)`` -> text or a rich renderable."""

JSON_SCHEMAS = ("compare", "inspect", "gate")
"""The commands whose ``--json`` document has a JSON Schema shipped beside the renderers (``schemas/``)."""


def json_schema(command: str) -> str:
    """The JSON Schema (draft 2020-12) of ``rollaudit {command} --json``, as the text shipped with the package."""
    from importlib.resources import files

    return (files(__package__) / "schemas" / f"{command}.schema.json").read_text(encoding="utf-8")
