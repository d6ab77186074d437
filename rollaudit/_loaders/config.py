"""The run's own config: the settings that decide a run's arithmetic, read from the file its framework saves beside
the dump (ms-swift's ``args.json``, torchtitan's TOML) or the one the user names with ``--config``.

A format declares the settings it reads (:class:`Setting`: a name, the dotted keys a file may spell it with, what
it must be) and where its framework saves the file (``Format.config_files``). Only those keys are looked up; every
other key is ignored unread, so a config is never walked whole (an alias bomb's values are never expanded). The
file is untrusted: a regular file under 16 MiB (a FIFO, a device or a larger file is refused before a byte is
read), YAML through the safe loader only (a tag that would construct an object is refused), TOML and JSON as their
standard parsers read them, nesting bounded by the parsers' recursion limit. A known key with a value of the wrong
kind is one line naming the file and the key.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._errors import InputError, UsageError

Kind = Literal["bool", "int", "float", "str", "floats", "range"]

_MOST = 1 << 31
_EXPECTED: dict[str, str] = {
    "bool": "true or false",
    "int": "a positive integer",
    "float": "a number",
    "str": "a string",
    "floats": "a list of numbers, or null",
    "range": "two numbers [low, high]",
}


@dataclass(frozen=True)
class Setting:
    """One setting a format reads from its run's config.

    name
        what the format calls it (the framework's own argument name).
    keys
        the dotted paths a config file may hold it at, tried in order (``algorithm.adv_estimator``).
    kind, choices
        what its value must be; ``choices`` (if any) the values allowed.
    """

    name: str
    keys: tuple[str, ...]
    kind: Kind
    choices: tuple[Any, ...] = ()


@dataclass(frozen=True)
class RunConfig:
    """The settings read from one config file: ``values`` by setting name (only those the file states), and where
    each was read (``keys``: the dotted key the file spells it with)."""

    source: str
    values: Mapping[str, Any] = field(default_factory=dict)
    keys: Mapping[str, str] = field(default_factory=dict)
    unresolved: tuple[str, ...] = ()
    """Keys whose value is an interpolation the file leaves to its launcher (hydra's ``${...}``): not stated."""

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def cite(self, *names: str) -> str:
        """``key=value, key=value (from FILE)`` for the named settings the file states."""
        said = [f"{self.keys[name]}={_shown(self.values[name])}" for name in names if name in self.values]
        return f"{', '.join(said)} (from {self.source})" if said else f"nothing of it in {self.source}"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    return "null" if value is None else str(value)


def read_config(path: Path, settings: Sequence[Setting], shown: str | None = None) -> RunConfig:
    """The ``settings`` that the config file at ``path`` states (JSON, YAML or TOML by its suffix), checked.

    Bad input (not a regular file, too large, not parseable, nested past the parser's limit, a YAML tag, a known
    key with a bad value) raises one InputError naming the file (and the key)."""
    from .._json import read_small_file

    where = shown or str(path)
    try:
        data = read_small_file(path)
    except UsageError as error:
        raise InputError(error.message, file=where, expected=error.expected) from None
    except OSError as error:
        raise InputError(f"cannot read the config: {error.strerror or error}", file=where) from None
    document = _parse(data, path, where)
    if _lookup(document, "tool.rollaudit.gate")[0] or (
        isinstance(document, Mapping) and {"max", "min", "require"} & set(document)
    ):
        raise UsageError(
            "holds the gate's rules, not a run's config", file=where, expected="the rules given with --gate-config FILE"
        )
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}
    unresolved: list[str] = []
    for setting in settings:
        for key in setting.keys:
            found, value = _lookup(document, key)
            if not found:
                continue
            if isinstance(value, str) and value.startswith("${"):
                unresolved.append(key)
                break
            if value is None and setting.kind != "floats":  # null: left to the framework to derive, not stated
                break
            values[setting.name] = _checked(value, setting, key, where)
            keys[setting.name] = key
            break
    return RunConfig(where, values, keys, tuple(unresolved))


def _parse(data: bytes, path: Path, where: str) -> Any:
    suffix = path.suffix.lower()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("is not UTF-8 text", file=where, expected="a JSON, YAML or TOML config") from None
    try:
        if suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # Python 3.10: the same parser under its PyPI name
                import tomli as tomllib
            return tomllib.loads(text)
        if suffix in (".yaml", ".yml"):
            import yaml

            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            return yaml.load(text, Loader=loader)
        return json.loads(text)
    except RecursionError:
        raise InputError("nests too deeply to read", file=where, expected="a config of ordinary depth") from None
    except ValueError as error:  # JSON's and TOML's decode errors
        raise InputError(f"cannot be parsed: {_first_line(error)}", file=where) from None
    except Exception as error:  # yaml.YAMLError, a tag the safe loader refuses included
        if type(error).__module__.startswith("yaml"):
            raise InputError(f"cannot be read safely as YAML: {_first_line(error)}", file=where) from None
        raise


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__


def _lookup(document: Any, key: str) -> tuple[bool, Any]:
    """``document``'s value at a dotted ``key`` (a key that itself holds dots is tried whole first). A value that
    W&B's saved config wraps as ``{value: ..., desc: ...}`` is unwrapped."""
    document = _unwrapped(document)
    if isinstance(document, Mapping) and key in document:
        return True, _unwrapped(document[key])
    head, dot, rest = key.partition(".")
    if not dot or not isinstance(document, Mapping) or head not in document:
        return False, None
    return _lookup(document[head], rest)


def _unwrapped(value: Any) -> Any:
    if isinstance(value, Mapping) and "value" in value and set(value) <= {"value", "desc"}:
        return value["value"]
    return value


def _checked(value: Any, setting: Setting, key: str, where: str) -> Any:
    kind = setting.kind
    ok = True
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "int":  # every int read is a count or a size
        ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= _MOST
    elif kind == "float":
        ok = _number(value)
        value = float(value) if ok else value
    elif kind == "str":
        ok = isinstance(value, str)
    elif kind == "floats":
        if value is not None:
            ok = isinstance(value, list) and len(value) <= 1024 and all(_number(item) for item in value)
            value = tuple(float(item) for item in value) if ok else value
    elif kind == "range":
        ok = isinstance(value, list) and len(value) == 2 and all(_number(item) for item in value)
        value = (float(value[0]), float(value[1])) if ok else value
    if ok and setting.choices and value not in setting.choices:
        ok = False
    if not ok:
        allowed = f"one of {', '.join(map(_shown, setting.choices))}" if setting.choices else _EXPECTED[kind]
        raise InputError(f"has {_described(value)}", file=where, field=key, expected=allowed)
    return value


def _number(value: Any) -> bool:
    """A JSON number that is a double (an integer past one is no setting's value)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not isinstance(value, int) or abs(value) <= 1 << 53


def _described(value: Any) -> str:
    if isinstance(value, (Mapping, list)):
        return f"a {'mapping' if isinstance(value, Mapping) else 'list'}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def find_config(candidates: Sequence[Path]) -> Path | None:
    """The first of ``candidates`` that exists (as anything: a FIFO found there is refused when read, not
    skipped)."""
    for candidate in candidates:
        if os.path.lexists(candidate):
            return candidate
    return None
