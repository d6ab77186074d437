"""JSON-ready values: what every JSON document rollaudit writes goes through."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any


def json_value(value: Any) -> Any:
    """A JSON-ready copy: numpy scalars to Python, NaN, inf and pandas' NA to None (undefined).

    >>> json_value({"mean": float("nan"), "sizes": (1, 2)})
    {'mean': None, 'sizes': [1, 2]}
    """
    if isinstance(value, dict):
        return json_object(value)
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    pandas = sys.modules.get("pandas")  # pandas' NA can only come from pandas, already imported then
    if pandas is not None and value is pandas.NA:
        return None
    return value


def json_object(document: Mapping[Any, Any]) -> dict[str, Any]:
    """``json_value`` of a document, typed as the JSON object it is: string keys, JSON-ready values."""
    return {str(key): json_value(item) for key, item in document.items()}
