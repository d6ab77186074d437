"""The JSON documents of ``compare --json`` and ``inspect --json``: versioned, NaN and inf as null."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._audit.report import SCHEMA_VERSION
from .._json import json_value

if TYPE_CHECKING:
    from .._audit.report import Report


def compare_document(report: Report, load: Mapping[str, Any]) -> dict[str, Any]:
    """The audit (``Report.to_dict``) and what was loaded (``load``: format, files, bytes, seconds)."""
    return {**report.to_dict(lazy_steps=True), "load": json_value(dict(load))}


def inspect_document(description: Mapping[str, Any], load: Mapping[str, Any]) -> dict[str, Any]:
    """``rollaudit.describe``'s dict, versioned, and what was loaded."""
    return {"schema_version": SCHEMA_VERSION, **json_value(dict(description)), "load": json_value(dict(load))}


EXPANDED_LEVELS = 2
"""How deep the text is indented: the document's keys, and then one entry per line (a scheme's summary, a step,
a prompt); each entry is one line. A key per line all the way down made the 250 MB document of a 250,000-step
table take 35 s through json's pure-Python indenting encoder; one line per entry is written by its C encoder."""


_ENCODE = json.JSONEncoder(allow_nan=False).encode


def _encode(value: Any, level: int, pieces: list[str]) -> None:
    """``value``'s JSON text onto ``pieces`` (joined once at the end: no copy per level)."""
    if level >= EXPANDED_LEVELS or not isinstance(value, (Mapping, list)) or not value:
        # A mapping that is not a dict (the lazy per-step rows) as the dict it reads as.
        pieces.append(_ENCODE(dict(value) if isinstance(value, Mapping) and not isinstance(value, dict) else value))
        return
    inner, outer = "\n" + "  " * (level + 1), "\n" + "  " * level
    pieces.append("{" if isinstance(value, Mapping) else "[")
    items = value.items() if isinstance(value, Mapping) else ((None, item) for item in value)
    for index, (key, item) in enumerate(items):
        pieces.append(("," if index else "") + inner)
        if key is not None:
            pieces.append(_ENCODE(str(key)) + ": ")
        _encode(item, level + 1, pieces)
    pieces.append(outer + ("}" if isinstance(value, Mapping) else "]"))


def dumps(document: Mapping[str, Any]) -> str:
    """The document as JSON text indented two levels deep (an entry per line), one trailing newline; a NaN that
    slipped through is an error."""
    pieces: list[str] = []
    _encode(dict(document), 0, pieces)
    pieces.append("\n")
    return "".join(pieces)


def render_compare_json(report: Report, load: Mapping[str, Any], top: int = 5) -> str:
    return dumps(compare_document(report, load))


def render_inspect_json(description: Mapping[str, Any], load: Mapping[str, Any]) -> str:
    return dumps(inspect_document(description, load))


def runs_document(documents: list[dict[str, Any]], errors: list[tuple[str, str]], **facts: Any) -> dict[str, Any]:
    """Several runs' documents as one: each run's (its name in its ``load``, or its ``run``), and the error line
    of each run that could not be read; ``facts``: what holds over them all (the gate's ``passed``)."""
    return {
        "schema_version": SCHEMA_VERSION,
        **facts,
        # A document's lazy per-step rows as the dicts they read as: one level deeper here, the encoder meets them
        # inside a run's entry rather than at the document's top.
        "runs": [{key: _plain(value) for key, value in document.items()} for document in documents],
        "errors": [{"run": name, "error": line} for name, line in errors],
    }


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) and not isinstance(value, dict) else value
