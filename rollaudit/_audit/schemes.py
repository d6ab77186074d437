"""Advantage schemes as data: a frozen description, named presets, and the scheme-string parser.

Semantics: ``shared/spec/schemes.md``. A scheme says which samples form a
group, which members feed the group's statistics, and how an advantage is
made from them; ``rollaudit._audit.kernel`` turns any description into numbers, so
a new preset is one entry in ``PRESETS``, never a new code path.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Literal

from .._errors import SchemeError

Groups = Literal["batch", "prompt", "positional", "legacy"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "groups": ("batch", "prompt", "positional", "legacy"),
    "members": ("samples", "trajectories"),
    "representative": ("first", "max", "mean"),
    "baseline": ("mean", "leave-one-out"),
    "scale": ("std", "none"),
    "std": ("unbiased", "population"),
    "std_over": ("group", "batch"),
    "std_guard": ("eps", "positive"),
    "singleton": ("zero", "raw", "nan"),
    "nonfinite": ("nan", "zero"),
}


@dataclass(frozen=True)
class Scheme:
    """How advantages are made from rewards.

    groups
        ``batch`` (one group per step), ``prompt`` (one per prompt key; all
        keys missing: consecutive slices of ``n``), ``positional``
        (consecutive slices of ``n`` in batch order), ``legacy`` (slime before
        PR #2204: slices of ``n`` when the step has exactly ``n * batch_size``
        samples, else the whole step).
    members
        ``samples``, or ``trajectories``: one ``representative`` reward
        (``first`` in batch order, ``max`` or ``mean``) per distinct
        (prompt, trajectory); its advantage goes to all of the trajectory's samples.
    baseline
        ``mean`` of the group, or ``leave-one-out`` (mean of the other members).
    scale, std, std_over, std_guard, eps
        ``scale="std"`` divides by the group's (``std_over="group"``) or the
        whole step's (``"batch"``) standard deviation, ``unbiased`` (n-1) or
        ``population`` (n); ``std_guard="eps"`` divides by ``std + eps``,
        ``"positive"`` only where std > 0 (NeMo-RL). ``scale="none"`` is Dr.GRPO.
    singleton
        a group with one member: ``zero``; ``raw`` (mean 0, std 1: ``r / (1 + eps)``);
        or ``nan`` (what slime's legacy path produced, flagged by the audit).
    nonfinite
        advantage of a sample whose reward is NaN or inf (always left out of
        every statistic): ``nan`` (undefined, counted by the audit) or ``zero`` (TRL).
    """

    groups: Groups = "prompt"
    members: Literal["samples", "trajectories"] = "samples"
    representative: Literal["first", "max", "mean"] = "first"
    baseline: Literal["mean", "leave-one-out"] = "mean"
    scale: Literal["std", "none"] = "std"
    std: Literal["unbiased", "population"] = "unbiased"
    std_over: Literal["group", "batch"] = "group"
    std_guard: Literal["eps", "positive"] = "eps"
    singleton: Literal["zero", "raw", "nan"] = "zero"
    nonfinite: Literal["nan", "zero"] = "nan"
    eps: float = 1e-6
    n: int | None = None
    batch_size: int | None = None
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        label = self.name or "custom scheme"
        for key, choices in _CHOICES.items():
            value = getattr(self, key)
            if value not in choices:
                raise SchemeError(f"{label}: {key}={value!r} is not one of {', '.join(choices)}")
        if not (isinstance(self.eps, (int, float)) and self.eps >= 0):
            raise SchemeError(f"{label}: eps={self.eps!r} must be a number >= 0")
        for key in ("n", "batch_size"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise SchemeError(f"{label}: {key}={value!r} must be a positive integer")

    def require_n(self) -> int:
        """``n`` for the slicing schemes, or an error that says how to give it."""
        if self.n is None:
            label = self.name or "this scheme"
            raise SchemeError(f"{label} needs n (samples per prompt), e.g. {label.split('(')[0]}(n=8)")
        return self.n

    def with_options(self, **options: object) -> Scheme:
        """A copy with some fields changed (validated like a new scheme)."""
        return dataclasses.replace(self, **options)

    def __str__(self) -> str:
        return self.name or self.spec_string()

    def spec_string(self) -> str:
        """A scheme string that ``get_scheme`` turns back into this scheme."""
        defaults = Scheme()
        changed = [
            f"{f.name}={getattr(self, f.name)}"
            for f in dataclasses.fields(self)
            if f.name != "name" and getattr(self, f.name) != getattr(defaults, f.name)
        ]
        return f"custom({', '.join(changed)})" if changed else "prompt"


PRESETS: dict[str, Scheme] = {
    # The three schemes of the mission.
    "batch": Scheme(groups="batch", name="batch"),
    "prompt": Scheme(groups="prompt", name="prompt"),
    "trajectory": Scheme(groups="prompt", members="trajectories", name="trajectory"),
    "positional": Scheme(groups="positional", name="positional"),
    # Framework presets: exact reproductions of what a run did.
    "slime-legacy": Scheme(groups="legacy", singleton="nan", name="slime-legacy"),
    "slime-2204": Scheme(groups="prompt", singleton="zero", name="slime-2204"),
    "verl-grpo": Scheme(groups="prompt", singleton="raw", name="verl-grpo"),
    "verl-rloo": Scheme(groups="prompt", baseline="leave-one-out", scale="none", singleton="raw", name="verl-rloo"),
    "dr-grpo": Scheme(groups="prompt", scale="none", name="dr-grpo"),
    "trl-group": Scheme(groups="positional", eps=1e-4, nonfinite="zero", name="trl-group"),
    "trl-batch": Scheme(groups="positional", std_over="batch", eps=1e-4, nonfinite="zero", name="trl-batch"),
    "nemo-loo": Scheme(groups="prompt", baseline="leave-one-out", std_guard="positive", eps=0.0, name="nemo-loo"),
    "agl-dedup": Scheme(
        groups="prompt", members="trajectories", representative="first", singleton="raw", name="agl-dedup"
    ),
    # A blank description for fully custom strings: custom(groups=prompt, scale=none, ...).
    "custom": Scheme(name="custom"),
}

_SPEC_KEYS = ("eps", "scale", "std", "singleton", "representative", "n", "batch_size")
_ALL_KEYS = tuple(f.name for f in dataclasses.fields(Scheme) if f.name != "name")
_STRING = re.compile(r"^\s*([A-Za-z][\w.-]*)\s*(?:\((.*)\))?\s*$", re.DOTALL)


def _parse_value(key: str, text: str, label: str) -> object:
    if key in ("n", "batch_size"):
        try:
            return int(text)
        except ValueError:
            raise SchemeError(f"{label}: {key}={text!r} must be a positive integer") from None
    if key == "eps":
        try:
            return float(text)
        except ValueError:
            raise SchemeError(f"{label}: eps={text!r} must be a number") from None
    return text.strip("'\"")


def get_scheme(spec: str | Scheme) -> Scheme:
    """The scheme a string names: ``NAME`` or ``NAME(key=value, ...)``.

    ``NAME`` is a preset (``rollaudit.PRESETS``); keys are those of the spec
    (eps, scale, std, singleton, representative, n, batch_size) plus any other
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
        raise SchemeError(f"unknown scheme {name!r}; known: {', '.join(PRESETS)}")
    options: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in (arguments or "").split(","))):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not value:
            raise SchemeError(f"{label}: {item!r} is not key=value")
        if key not in _ALL_KEYS:
            others = ", ".join(k for k in _ALL_KEYS if k not in _SPEC_KEYS)
            raise SchemeError(f"{label}: unknown key {key!r}; keys: {', '.join(_SPEC_KEYS)} (and {others})")
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
    current = []
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
