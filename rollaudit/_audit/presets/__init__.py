"""The named presets (each framework's estimator as data) and the scheme-string parser over them.

Semantics and sources: ``shared/spec/schemes.md``. A preset is one entry of a module of this folder: a
:class:`~..schemes.Scheme` with its :class:`~..schemes.PresetNotes`; ``rollaudit._audit.kernel`` turns any of them
into numbers.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..._errors import SchemeError, did_you_mean
from ..schemes import _NOT_PARAMETERS, Scheme
from . import frameworks, molt, ms_swift

DEFAULT_SCHEMES = ("batch", "prompt", "trajectory")
"""What ``compare`` and ``audit`` recompute unless told otherwise."""

PRESETS: dict[str, Scheme] = {
    preset.name: preset for preset in (*frameworks.ENTRIES, *ms_swift.ENTRIES, *molt.ENTRIES, *frameworks.LAST)
}
"""Every preset by name, in the order ``rollaudit schemes`` lists them."""


def rounding_fix(scheme: Scheme) -> str | None:
    """The upstream change that removes the rounding residues of a scheme's preset, or None when none is known."""
    return scheme.notes.rounding_fix if scheme.notes is not None else None


_SPEC_KEYS = ("eps", "scale", "std", "singleton", "representative", "n", "batch_size", "dtype")
_ALL_KEYS = tuple(f.name for f in dataclasses.fields(Scheme) if f.name not in _NOT_PARAMETERS)
_STRING = re.compile(r"^\s*([A-Za-z][\w.-]*)\s*(?:\((.*)\))?\s*$", re.DOTALL)


def _parse_value(key: str, text: str, label: str) -> object:
    if key in ("n", "batch_size"):
        try:
            return int(text)
        except ValueError:
            raise SchemeError(f"{label}: {key}={text!r} must be a positive integer") from None
    if key in ("eps", "decay"):
        try:
            return float(text)
        except ValueError:
            raise SchemeError(f"{label}: {key}={text!r} must be a number") from None
    value = text.strip("'\"")
    if key == "representative" and value in ("None", "none"):
        return None  # the trajectory scheme's "no representative named", as spec_string writes it
    if key == "framework_key" and value in ("None", "none"):
        return ""  # no framework key: group by group_by on every table
    return value


def get_scheme(spec: str | Scheme) -> Scheme:
    """The scheme a string names: ``NAME`` or ``NAME(key=value, ...)``.

    ``NAME`` is a preset (``rollaudit.PRESETS``); keys are those of the spec
    (eps, scale, std, singleton, representative, n, batch_size, dtype) plus any other
    field of :class:`Scheme`. The result's ``name`` is the string as given.

    >>> get_scheme("prompt(scale=none)").scale
    'none'
    """
    if isinstance(spec, Scheme):
        return spec
    if not isinstance(spec, str):
        raise SchemeError(f"a scheme is a string or a Scheme, not {type(spec).__name__}")
    label = spec.strip()
    match = _STRING.match(spec)
    if not match:
        raise SchemeError(f"cannot parse scheme {label!r}: expected NAME or NAME(key=value, ...)")
    name, arguments = match.group(1), match.group(2)
    if name not in PRESETS:
        raise SchemeError(f"unknown scheme {name!r}{did_you_mean(name, PRESETS)}; known: {', '.join(PRESETS)}")
    options: dict[str, Any] = {}  # each value's type is checked by Scheme.__post_init__
    for item in filter(None, (part.strip() for part in (arguments or "").split(","))):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not value:
            raise SchemeError(f"{label}: {item!r} is not key=value")
        if key not in _ALL_KEYS:
            others = ", ".join(k for k in _ALL_KEYS if k not in _SPEC_KEYS)
            hint = did_you_mean(key, _ALL_KEYS)
            raise SchemeError(f"{label}: unknown key {key!r}{hint}; keys: {', '.join(_SPEC_KEYS)} (and {others})")
        if key in options:
            raise SchemeError(f"{label}: {key} given twice")
        options[key] = _parse_value(key, value, label)
    scheme = dataclasses.replace(PRESETS[name], name=label, **options)
    if scheme.groups in ("positional", "legacy"):
        scheme.require_n()  # fail at parse time, before any file is read
    return scheme


def split_schemes(text: str) -> list[str]:
    """Split ``"batch,prompt(n=8, scale=none)"`` on the commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SchemeError(f"unbalanced ')' in scheme list {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if depth:
        raise SchemeError(f"unbalanced '(' in scheme list {text!r}")
    parts.append("".join(current).strip())
    return [part for part in parts if part]
