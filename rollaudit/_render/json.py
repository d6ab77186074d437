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
    return {**report.to_dict(), "load": json_value(dict(load))}


def inspect_document(description: Mapping[str, Any], load: Mapping[str, Any]) -> dict[str, Any]:
    """``rollaudit.describe``'s dict, versioned, and what was loaded."""
    return {"schema_version": SCHEMA_VERSION, **json_value(dict(description)), "load": json_value(dict(load))}


def dumps(document: Mapping[str, Any]) -> str:
    """The document as indented JSON text, one trailing newline; a NaN that slipped through is an error."""
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def render_compare_json(report: Report, load: Mapping[str, Any], top: int = 5) -> str:
    return dumps(compare_document(report, load))


def render_inspect_json(description: Mapping[str, Any], load: Mapping[str, Any]) -> str:
    return dumps(inspect_document(description, load))
