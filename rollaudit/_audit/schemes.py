"""Advantage schemes as data: a frozen description of how advantages are made, and the notes a preset carries.

Semantics: ``shared/spec/schemes.md``. A scheme says which samples form a
group, which members feed the group's statistics, and how an advantage is
made from them; ``rollaudit._audit.kernel`` turns any description into numbers, so
a new preset is one entry in ``presets.PRESETS``, never a new code path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from .._errors import SchemeError
from .._table import AGENT, ENV, LENGTH_COLUMNS, SCORING_ORDER

Groups = Literal["batch", "prompt", "positional", "legacy"]


@dataclass(frozen=True)
class PresetNotes:
    """What a preset is, for a reader: the reference ``rollaudit schemes`` prints, and the words the audit's notes
    use for it.

    description
        the definition in plain words (``shared/spec/schemes.md``).
    source
        where the arithmetic was read: framework, file or function, PR.
    undefined
        why the preset leaves one-member groups undefined (``singleton="nan"``), or None.
    rounding_fix
        the upstream change that removes the residues its rounded arithmetic leaves where exact arithmetic gives no
        advantage, as a phrase (``the defect NeMo-RL PR #4158 fixes``), or None.
    not_auditable
        why no dump can carry the preset yet (a field its upstream version needs that today's dumps lack), or None:
        the audit lists it as not auditable with this reason and never computes it.
    """

    description: str
    source: str
    undefined: str | None = None
    rounding_fix: str | None = None
    not_auditable: str | None = None


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
    framework_key
        a key column that a framework's own dump lets its loader rebuild, holding the key that framework itself
        grouped by where it is not the true prompt (NeMo-RL's padded prompt-token rows, ``nemo_prompt_ids``):
        ``groups="prompt"`` groups by it on a table that has it, by ``group_by`` on one that does not (a table
        that states its prompt key itself); empty (``none`` in a scheme string): always ``group_by``.
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
        ``mean`` of the group, ``leave-one-out`` (mean of the other members), or ``decayed``: a running
        baseline per (``env``, ``agent``) over the run in ``scoring_order``, ``A = r - b`` then
        ``b = decay * b + (1 - decay) * r`` from b = 0 (prime-rl ``rae``; ``rollaudit._audit.estimators``).
    scale, std, std_over, std_guard, eps
        ``scale="std"`` divides by the group's (``std_over="group"``) or the
        whole step's (``"batch"``) standard deviation, ``unbiased`` (n-1) or
        ``population`` (n); ``std_guard="eps"`` divides by ``std + eps``,
        ``"positive"`` by ``std + eps`` only where std > 0 (NeMo-RL), ``"cutoff"``
        by ``std + eps`` where std > eps and gives 0 elsewhere (ROLL), ``"varied"`` as ``positive``, and never
        where the rewards feeding the std are all one value, whatever std the rounded arithmetic made of them
        (NeMo-RL PR #4158; the same as ``positive`` in exact arithmetic).
        ``scale="none"`` is Dr.GRPO; ``scale="mean"`` divides by the group mean, 0 where it is <= 0 (MaxRL).
    std_of
        what the std is taken of: ``members``, the values the baseline is taken over (the group's rewards; a
        leave-one-out member's peers, NeMo-RL); ``rewards``, the rewards of the whole group (or step), every member
        included (ms-swift's rloo); ``centred``, the centred values (ms-swift's reinforce_plus_plus: over a step,
        the std of the group-centred values, not of the rewards).
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
        by response lengths (verl's ``masked_whiten``: REINFORCE++ with baseline, Bessel-corrected, 1e-8 terms);
        ``tokens-population``: the same with the population variance clamped at 1e-8 (Molt's
        ``normalize_advantages``).
    drop
        ``constant``: groups whose finite rewards are all equal are not trained (NaN, counted as undefined); a
        one-member group is constant; a step whose groups are all constant keeps its first group (batch order)
        with its advantages (tinker-cookbook's ``remove_constant_reward_groups``, DAPO-style filtering).
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
    subgroups, episode_agents
        ``agent``: the baseline is the mean of a sub-group inside the group, keyed by the ``agent`` column, and by
        the episode (``trajectory``) too for the agents ``episode_agents`` names (``|``-separated) (prime-rl
        ``hierarchical_grpo``).
    length_penalty
        ``linear``: prime-rl's linear length penalty before centring (``rollaudit._audit.estimators``).
    decay
        the running baseline's decay under ``baseline="decayed"``.
    """

    groups: Groups = "prompt"
    group_by: str = "prompt"
    framework_key: str = ""
    missing_keys: Literal["slices", "legacy"] = "slices"
    remainder: Literal["error", "unnormalized"] = "error"
    members: Literal["samples", "trajectories"] = "samples"
    representative: Literal["first", "last", "max", "mean"] | None = "first"
    siblings: Literal["any", "equal"] = "any"
    baseline: Literal["mean", "leave-one-out", "decayed"] = "mean"
    scale: Literal["std", "none", "mean"] = "std"
    std: Literal["unbiased", "population"] = "unbiased"
    std_over: Literal["group", "batch"] = "group"
    std_guard: Literal["eps", "positive", "cutoff", "varied"] = "eps"
    std_of: Literal["members", "rewards", "centred"] = "members"
    std_from: Literal["deviations", "moments"] = "deviations"
    singleton: Literal["zero", "raw", "nan"] = "zero"
    whiten: Literal["none", "tokens", "tokens-population"] = "none"
    drop: Literal["none", "constant"] = "none"
    dtype: Literal["float64", "float32", "bfloat16"] = "float64"
    reward: str = "reward"
    nonfinite: Literal["nan", "zero"] = "nan"
    eps: float = 1e-6
    n: int | None = None
    batch_size: int | None = None
    subgroups: Literal["none", "agent"] = "none"
    episode_agents: str = ""
    length_penalty: Literal["none", "linear"] = "none"
    decay: float = 0.95
    name: str = field(default="", compare=False)
    notes: PresetNotes | None = field(default=None, compare=False)
    """The preset's reference text (carried by every scheme parsed from that preset's name); None when custom."""

    def __post_init__(self) -> None:
        label = self.name or "custom scheme"
        for key, choices in _CHOICES.items():
            value = getattr(self, key)
            if value not in choices:
                raise SchemeError(f"{label}: {key}={value!r} is not one of {', '.join(map(str, choices))}")
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
        if not isinstance(self.framework_key, str):
            raise SchemeError(f"{label}: framework_key={self.framework_key!r} must name a column, or be empty")
        if self.whiten != "none" and (self.scale != "none" or self.baseline != "mean" or self.std_over != "group"):
            raise SchemeError(f"{label}: whiten=tokens whitens a centred advantage: it needs scale=none")
        if self.std_from == "moments" and self.std_over != "group":
            raise SchemeError(f"{label}: std_from=moments takes each group's own moments: it needs std_over=group")
        if not (isinstance(self.decay, (int, float)) and 0 < self.decay <= 1):
            raise SchemeError(f"{label}: decay={self.decay!r} must be a number in (0, 1]")
        check_estimator(self, label)

    def require_n(self) -> int:
        """``n`` for the slicing schemes, or an error that says how to give it."""
        if self.n is None:
            label = self.name or "this scheme"
            raise SchemeError(f"{label} needs n (samples per prompt), e.g. {label.split('(')[0]}(n=8)")
        return self.n

    def with_options(self, **options: Any) -> Scheme:
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
            if f.name not in _NOT_PARAMETERS and getattr(self, f.name) != getattr(defaults, f.name)
        ]
        return f"custom({', '.join(changed)})" if changed else "prompt"


_NOT_PARAMETERS = ("name", "notes")


def _literal_choices(annotation: object) -> tuple[object, ...] | None:
    """The values a ``Literal[...]`` (or ``Literal[...] | None``) annotation allows; None for any other type."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    if get_origin(annotation) is Union:
        parts = [_literal_choices(arm) for arm in get_args(annotation) if arm is not type(None)]
        literal_parts = [part for part in parts if part is not None]
        if parts and len(literal_parts) == len(parts):
            nullable = (None,) if type(None) in get_args(annotation) else ()
            return tuple(value for part in literal_parts for value in part) + nullable
    return None


# The allowed values of every choice field, read from Scheme's own annotations (one spelling of each choice).
_CHOICES: dict[str, tuple[object, ...]] = {
    key: choices
    for key, annotation in get_type_hints(Scheme).items()
    if key not in _NOT_PARAMETERS and (choices := _literal_choices(annotation)) is not None
}


def key_column(scheme: Scheme, columns: Collection[str]) -> str:
    """The column whose keys are a ``groups="prompt"`` scheme's groups on a table of ``columns``: its
    ``framework_key`` where the table has that column, else its ``group_by``."""
    return scheme.framework_key if scheme.framework_key and scheme.framework_key in columns else scheme.group_by


def uses_estimator(scheme: Scheme) -> bool:
    """Whether a scheme needs prime-rl's estimators (``estimators``: the kernel's affine and leave-one-out paths do
    not cover it)."""
    return (
        scheme.scale == "mean"
        or scheme.length_penalty != "none"
        or scheme.subgroups != "none"
        or scheme.baseline == "decayed"
    )


def check_estimator(scheme: Scheme, label: str) -> None:
    """SchemeError for a combination these estimators do not define (each is one upstream class, no mixture)."""
    if not uses_estimator(scheme):
        return
    named = [
        name
        for name, used in (
            ("scale=mean", scheme.scale == "mean"),
            ("length_penalty=linear", scheme.length_penalty != "none"),
            ("subgroups=agent", scheme.subgroups != "none"),
            ("baseline=decayed", scheme.baseline == "decayed"),
        )
        if used
    ]
    if len(named) > 1:
        raise SchemeError(f"{label}: {' and '.join(named)} are separate estimators: name one")
    if (
        scheme.baseline == "leave-one-out"
        or scheme.members != "samples"
        or scheme.whiten != "none"
        or scheme.std_of != "members"
    ):
        raise SchemeError(f"{label}: {named[0]} takes every sample as a member of a plain mean baseline")
    if scheme.drop != "none" or scheme.std_over != "group":
        raise SchemeError(f"{label}: {named[0]} takes no drop or batch std")
    if scheme.scale == "std":
        raise SchemeError(f"{label}: {named[0]} divides by no std: it needs scale=none")


def columns_needed(scheme: Scheme) -> tuple[str, ...]:
    """The columns beyond the canonical ones that a scheme reads (those of prime-rl's estimators): a table
    without them cannot carry the scheme."""
    needed: list[str] = []
    if scheme.length_penalty != "none":
        needed += LENGTH_COLUMNS
    if scheme.subgroups != "none":
        needed.append(AGENT)
    if scheme.baseline == "decayed":
        needed += [SCORING_ORDER, ENV, AGENT]
    return tuple(dict.fromkeys(needed))
