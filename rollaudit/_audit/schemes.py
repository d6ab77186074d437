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

from .._errors import SchemeError, did_you_mean

Groups = Literal["batch", "prompt", "positional", "legacy"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "groups": ("batch", "prompt", "positional", "legacy"),
    "members": ("samples", "trajectories"),
    "representative": ("first", "last", "max", "mean", None),
    "baseline": ("mean", "leave-one-out"),
    "scale": ("std", "none"),
    "std": ("unbiased", "population"),
    "std_over": ("group", "batch"),
    "std_guard": ("eps", "positive", "cutoff"),
    "std_from": ("deviations", "moments"),
    "singleton": ("zero", "raw", "nan"),
    "nonfinite": ("nan", "zero"),
    "dtype": ("float64", "float32", "bfloat16"),
    "siblings": ("any", "equal"),
    "missing_keys": ("slices", "legacy"),
    "remainder": ("error", "unnormalized"),
    "whiten": ("none", "tokens"),
}


@dataclass(frozen=True)
class Scheme:
    """How advantages are made from rewards.

    groups
        ``batch`` (one group per step), ``prompt`` (one per key of the
        ``group_by`` column, the prompt key by default), ``positional``
        (consecutive slices of ``n`` in batch order), ``legacy`` (slime before
        PR #2204: slices of ``n`` when the step has exactly ``n * batch_size``
        samples, else the whole step).
    group_by
        the column whose keys are the groups of ``groups="prompt"``: ``prompt``,
        or any key column of the table (``trajectory``, an environment ``tag``).
    missing_keys
        a step where keys are missing, under ``groups="prompt"``: ``slices``
        (slime PR #2204: all missing, consecutive slices of ``n``; some missing,
        an error) or ``legacy`` (slime PR #2062: any missing, the ``legacy`` rule).
    remainder
        rows after the last full slice of ``n`` (``positional``): ``error``, or
        ``unnormalized`` (AReaL: mean 0 and std 0, so ``r / eps``; issue #1673).
    members
        ``samples``, or ``trajectories``: one ``representative`` reward
        (``first`` or ``last`` in batch order, ``max`` or ``mean``) per distinct
        (group, trajectory); its advantage goes to all of the trajectory's samples.
        ``representative=None`` (the ``trajectory`` scheme) names no choice: it
        holds where every trajectory's rows share one reward, and a dump whose
        rows of one trajectory differ (per-step rewards) cannot be audited
        under it until a representative is named.
    siblings
        under ``members="trajectories"``: ``any``, or ``equal`` (a trajectory
        whose samples carry different rewards is an error naming it).
    baseline
        ``mean`` of the group, or ``leave-one-out`` (mean of the other members).
    scale, std, std_over, std_guard, eps
        ``scale="std"`` divides by the group's (``std_over="group"``) or the
        whole step's (``"batch"``) standard deviation, ``unbiased`` (n-1) or
        ``population`` (n); ``std_guard="eps"`` divides by ``std + eps``,
        ``"positive"`` by ``std + eps`` only where std > 0 (NeMo-RL), ``"cutoff"``
        by ``std + eps`` where std > eps and gives 0 elsewhere (ROLL).
        ``scale="none"`` is Dr.GRPO.
    std_from
        how rounded arithmetic (``dtype`` other than float64) forms the std: ``deviations`` from the mean
        (``torch.std``), or ``moments``, mean of squares minus squared mean (NeMo-RL, summed in the order of its
        float32 matrix product: ``rollaudit._audit.moments``), where a group of equal rewards that the dtype
        cannot hold exactly can keep a rounding residue for a std. Exact arithmetic gives one std either way.
    singleton
        a group with one member: ``zero``; ``raw`` (mean 0, std 1: ``r / (1 + eps)``);
        or ``nan`` (undefined: what slime's legacy path produced, or a group
        rllm drops from training; flagged by the audit).
    whiten
        ``tokens``: after the group step, one whitening over each step weighted
        by response lengths (verl's ``masked_whiten``: REINFORCE++ with baseline).
    reward
        the column of the rewards the framework trained on: ``reward``, or another numeric column (rllm's legacy
        verl path trains on the logged reward, which a loader keeps as ``legacy_reward``).
    dtype
        the arithmetic the framework did: ``float64`` (exact), or ``float32`` /
        ``bfloat16``, which round the rewards, the group means and stds, the
        centred values, ``std + eps`` and the advantages as that framework's
        tensors of that dtype do.
    nonfinite
        advantage of a sample whose reward is NaN or inf (always left out of
        every statistic): ``nan`` (undefined, counted by the audit) or ``zero`` (TRL).
    """

    groups: Groups = "prompt"
    group_by: str = "prompt"
    missing_keys: Literal["slices", "legacy"] = "slices"
    remainder: Literal["error", "unnormalized"] = "error"
    members: Literal["samples", "trajectories"] = "samples"
    representative: Literal["first", "last", "max", "mean"] | None = "first"
    siblings: Literal["any", "equal"] = "any"
    baseline: Literal["mean", "leave-one-out"] = "mean"
    scale: Literal["std", "none"] = "std"
    std: Literal["unbiased", "population"] = "unbiased"
    std_over: Literal["group", "batch"] = "group"
    std_guard: Literal["eps", "positive", "cutoff"] = "eps"
    std_from: Literal["deviations", "moments"] = "deviations"
    singleton: Literal["zero", "raw", "nan"] = "zero"
    whiten: Literal["none", "tokens"] = "none"
    dtype: Literal["float64", "float32", "bfloat16"] = "float64"
    reward: str = "reward"
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
        for key in ("group_by", "reward"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value:
                raise SchemeError(f"{label}: {key}={value!r} must name a column")
        if self.whiten == "tokens" and (self.scale != "none" or self.baseline != "mean" or self.std_over != "group"):
            raise SchemeError(f"{label}: whiten=tokens whitens a centred advantage: it needs scale=none")
        if self.std_from == "moments" and self.std_over != "group":
            raise SchemeError(f"{label}: std_from=moments takes each group's own moments: it needs std_over=group")

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
    "trajectory": Scheme(groups="prompt", members="trajectories", representative=None, name="trajectory"),
    "positional": Scheme(groups="positional", name="positional"),
    # Framework presets: exact reproductions of what a run did (shared/spec/schemes.md).
    "slime-legacy": Scheme(groups="legacy", singleton="nan", name="slime-legacy"),
    "slime-2204": Scheme(groups="prompt", singleton="zero", name="slime-2204"),
    "slime-2062": Scheme(
        groups="prompt", missing_keys="legacy", members="trajectories", siblings="equal", name="slime-2062"
    ),
    "verl-grpo": Scheme(groups="prompt", singleton="raw", name="verl-grpo"),
    "verl-grpo-v1": Scheme(
        groups="prompt", members="trajectories", representative="last", singleton="raw", name="verl-grpo-v1"
    ),
    "verl-rloo": Scheme(groups="prompt", baseline="leave-one-out", scale="none", singleton="raw", name="verl-rloo"),
    "verl-rloo-vectorized": Scheme(
        groups="prompt", baseline="leave-one-out", scale="none", singleton="zero", name="verl-rloo-vectorized"
    ),
    "verl-rpp-baseline": Scheme(
        groups="prompt", scale="none", singleton="raw", whiten="tokens", name="verl-rpp-baseline"
    ),
    "dr-grpo": Scheme(groups="prompt", scale="none", name="dr-grpo"),
    "trl-group": Scheme(groups="positional", eps=1e-4, nonfinite="zero", name="trl-group"),
    "trl-batch": Scheme(groups="positional", std_over="batch", eps=1e-4, nonfinite="zero", name="trl-batch"),
    # NeMo-RL trains in float32 and takes the std from moments: dtype=float64 is its exact arithmetic.
    "nemo-loo": Scheme(
        groups="prompt",
        baseline="leave-one-out",
        std_guard="positive",
        std_from="moments",
        dtype="float32",
        name="nemo-loo",
    ),
    "nemo-grpo": Scheme(groups="prompt", std_guard="positive", std_from="moments", dtype="float32", name="nemo-grpo"),
    "agl-dedup": Scheme(
        groups="prompt", members="trajectories", representative="first", singleton="raw", name="agl-dedup"
    ),
    "agl-rollout": Scheme(
        groups="prompt",
        members="trajectories",
        representative="first",
        siblings="equal",
        singleton="raw",
        dtype="bfloat16",
        name="agl-rollout",
    ),
    "areal-group": Scheme(groups="prompt", eps=1e-5, name="areal-group"),
    "areal-stride": Scheme(groups="positional", remainder="unnormalized", eps=1e-5, name="areal-stride"),
    "areal-batch": Scheme(groups="batch", eps=1e-5, name="areal-batch"),
    "areal-loo": Scheme(groups="prompt", baseline="leave-one-out", scale="none", name="areal-loo"),
    "rllm-grpo": Scheme(groups="prompt", members="trajectories", std="population", singleton="nan", name="rllm-grpo"),
    "rllm-rloo": Scheme(
        groups="prompt",
        members="trajectories",
        baseline="leave-one-out",
        scale="none",
        singleton="nan",
        name="rllm-rloo",
    ),
    "rllm-verl-legacy": Scheme(
        groups="prompt", group_by="trajectory", singleton="raw", reward="legacy_reward", name="rllm-verl-legacy"
    ),
    "roll-grpo": Scheme(groups="prompt", std_guard="cutoff", name="roll-grpo"),
    "roll-grpo-tags": Scheme(groups="prompt", group_by="tag", std_guard="cutoff", name="roll-grpo-tags"),
    "roll-grpo-batch": Scheme(groups="batch", std_guard="cutoff", name="roll-grpo-batch"),
    # A blank description for fully custom strings: custom(groups=prompt, scale=none, ...).
    "custom": Scheme(name="custom"),
}

ROUNDING_FIXES: dict[str, str] = {
    # Both estimators pass through calculate_baseline_and_std_per_prompt, whose trivial-set check the PR adds.
    "nemo-loo": "the defect NeMo-RL PR #4158 fixes",
    "nemo-grpo": "the defect NeMo-RL PR #4158 fixes",
}
"""Per preset whose rounded arithmetic can give an advantage where exact arithmetic gives none: the upstream
change that removes it, as a phrase (``... from float32 rounding (the defect NeMo-RL PR #4158 fixes)``)."""


def rounding_fix(scheme: Scheme) -> str | None:
    """The upstream change that removes the rounding residues of a scheme's preset, or None when none is known."""
    return ROUNDING_FIXES.get(str(scheme).split("(")[0].strip())


_SPEC_KEYS = ("eps", "scale", "std", "singleton", "representative", "n", "batch_size", "dtype")
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
    options: dict[str, object] = {}
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
