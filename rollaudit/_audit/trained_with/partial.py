"""Groups a dump holds only in part, while their recorded advantages cover the whole group.

torchtitan's recorder writes its filter's pick of each prompt group (the lowest- and highest-reward siblings by
default) with the advantage computed over every sibling; the loader says so with the ``partial_groups`` fact. A
scheme recomputed from the dumped rows of such a group gives numbers the run never trained on, so the recorded
values decide, group by group, what can be said:

- under a centred estimator without a scale (Dr.GRPO), ``r - A`` is the whole group's mean on every sibling;
  with a scale, ``r = m + s * A`` for one mean ``m`` and one scale ``s > 0`` (recovered from two distinct
  rewards). Recorded values that hold so on every group are *consistent* with the preset: that is the verdict's
  evidence, never a reproduction.
- a group is *whole* where the dumped rows give back that mean (and scale): the preset recomputed from them is
  the recorded value, and no sibling's place in its group (the fact's ``sibling`` column: torchtitan's
  ``rollout_id``) lies past the rows dumped. Where every group is, the dump is audited as any dump is. Where
  some group is shown to be a part of its group, the recorder cut groups, and a group that passes can do so by
  chance (the extremes of ``0, 0, 1, 1`` have its mean): no group is audited, every scheme is not auditable.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._table import PROMPT, RECORDED_ADVANTAGE, REWARD, STEP, facts_in, loaded_formats
from ..presets import PRESETS, get_scheme
from .fit import preset_framework

RELATIVE_TOLERANCE = 1e-6
"""How far a recorded value may be from a group's mean and scale, relative to max(1, |value|): far above float64
rounding of a mean, far below any difference between two groups' means on real rewards."""


class PartialGroups(NamedTuple):
    """What the recorded values say of each group of a dump the recorder may have cut.

    scheme
        the preset the recorded values are consistent with on every group (the loader's default first), None
        where none is.
    whole
        every group is whole in the dump (the preset recomputed from its rows is the recorded value).
    groups, partial_groups
        the groups, and those shown to be a part of their group.
    why
        the loader's sentence: what the recorder keeps.
    """

    scheme: str | None
    whole: bool
    groups: int
    partial_groups: int
    why: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: ``scheme``, ``whole``, ``groups``, ``partial_groups`` and ``why``."""
        return {
            "scheme": self.scheme,
            "whole": self.whole,
            "groups": self.groups,
            "partial_groups": self.partial_groups,
            "why": self.why,
        }

    def reason(self) -> str:
        """Why no scheme recomputed from the dumped rows can be audited (where not every group is whole)."""
        if self.scheme is None:
            return (
                f"{self.why}; the recorded advantages are consistent with no preset on every group, so no group "
                "can be shown whole"
            )
        every = self.partial_groups == self.groups
        shown = "every group" if every else f"{self.partial_groups:,} of {self.groups:,} groups"
        return (
            f"{self.why}: {shown} of the dump {'is' if every or self.partial_groups == 1 else 'are'} shown to be "
            "part of a larger group (its recorded advantages are not what its dumped rows give, or a sibling's place "
            "lies past them), so no scheme recomputed from the dumped rows is what the run trained on"
        )


def _candidates(table: pa.Table) -> list[str]:
    """The presets whose consistency the recorded values can show: the loader's default first, then its
    framework's other centred presets (a mean over the group's samples, with or without a scale)."""
    default = (facts_in(table).get("trained_default") or {}).get("scheme")
    formats = set(loaded_formats(table))
    names = [default] if isinstance(default, str) else []
    names += [
        name
        for name, preset in PRESETS.items()
        if preset_framework(name) in formats
        and (preset.groups, preset.baseline, preset.members, preset.whiten) == ("prompt", "mean", "samples", "none")
        and preset.scale in ("none", "std")
    ]
    return list(dict.fromkeys(names))


def _group_codes(table: pa.Table) -> tuple[np.ndarray, int]:
    keys = pc.binary_join_element_wise(
        pc.cast(table.column(STEP), pa.string()), pc.cast(table.column(PROMPT), pa.string()), "\x00"
    )
    encoded = pc.dictionary_encode(keys.combine_chunks())
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(encoded.dictionary)


def _reduce(codes: np.ndarray, values: np.ndarray, groups: int, how: str) -> np.ndarray:
    out = np.full(groups, -np.inf if how == "max" else np.inf)
    (np.maximum if how == "max" else np.minimum).at(out, codes, values)
    return out


def _consistency(
    codes: np.ndarray, groups: int, reward: np.ndarray, recorded: np.ndarray, scaled: bool, eps: float, std: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per group: whether the recorded values are consistent with a centred estimator (``scaled``: with a scale
    std + eps), and whether the dumped rows are the whole group under it."""
    tolerance = RELATIVE_TOLERANCE * np.maximum(1.0, np.abs(reward))
    count = np.bincount(codes, minlength=groups).astype(np.float64)
    dumped_mean = np.bincount(codes, weights=reward, minlength=groups) / np.maximum(count, 1)
    if not scaled:
        implied = reward - recorded  # the whole group's mean, on every sibling
        spread = _reduce(codes, implied, groups, "max") - _reduce(codes, implied, groups, "min")
        consistent = spread <= RELATIVE_TOLERANCE * np.maximum(1.0, np.abs(_reduce(codes, implied, groups, "max")))
        off = np.abs(dumped_mean[codes] - implied) > tolerance
        whole = consistent & (np.bincount(codes, weights=off, minlength=groups) == 0)
        return consistent, whole
    # The scale from the group's two extreme rewards: s = (r_high - r_low) / (A_high - A_low), m = r - s * A.
    high = _reduce(codes, reward, groups, "max")
    low = _reduce(codes, reward, groups, "min")
    at_high = np.full(groups, np.nan)
    at_low = np.full(groups, np.nan)
    at_high[codes[reward == high[codes]]] = recorded[reward == high[codes]]
    at_low[codes[reward == low[codes]]] = recorded[reward == low[codes]]
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(high > low, (high - low) / (at_high - at_low), np.nan)
    mean = np.where(high > low, high - scale * at_high, high)
    flat = high == low  # one reward: every recorded value one value (the whole group may differ)
    fitted = np.where(flat[codes], recorded, (reward - mean[codes]) / np.where(flat, 1.0, scale)[codes])
    miss = np.abs(fitted - np.where(flat[codes], _reduce(codes, recorded, groups, "max")[codes], recorded))
    consistent = (flat | (scale > 0)) & (np.bincount(codes, weights=miss > tolerance, minlength=groups) == 0)
    deviation = reward - dumped_mean[codes]
    ddof = 1 if std == "unbiased" else 0
    spread = np.sqrt(np.bincount(codes, weights=deviation**2, minlength=groups) / np.maximum(count - ddof, 1))
    whole = (
        consistent
        & ~flat
        & (np.abs(dumped_mean - mean) <= RELATIVE_TOLERANCE * np.maximum(1.0, np.abs(mean)))
        & (np.abs(spread + eps - scale) <= RELATIVE_TOLERANCE * np.maximum(1.0, np.abs(scale)))
    )
    return consistent, whole


def partial_groups(table: pa.Table) -> PartialGroups | None:
    """What the recorded values say of the groups of ``table`` (the rows the framework trained), where its loader
    says the recorder may have kept only part of each group; None where it does not say so."""
    fact = facts_in(table).get("partial_groups")
    if not isinstance(fact, dict):
        return None
    why = str(fact.get("why") or "the recorder may keep only part of each group")
    codes, groups = _group_codes(table)
    reward = table.column(REWARD).to_numpy(zero_copy_only=False).astype(np.float64)
    recorded = pc.fill_null(table.column(RECORDED_ADVANTAGE).cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False)
    unrecorded = np.bincount(codes, weights=np.isnan(recorded) | ~np.isfinite(reward), minlength=groups) > 0
    chosen, whole_groups = None, np.zeros(groups, dtype=bool)
    for name in _candidates(table):
        scheme = get_scheme(name)
        consistent, whole = _consistency(codes, groups, reward, recorded, scheme.scale == "std", scheme.eps, scheme.std)
        if groups and bool((consistent & ~unrecorded).all()):
            chosen, whole_groups = name, whole & ~unrecorded
            break
    sibling = fact.get("sibling")
    if (
        isinstance(sibling, str)
        and sibling in table.column_names
        and pa.types.is_integer(table.schema.field(sibling).type)
    ):
        # A sibling's place in its group (0..n-1) at or past the rows dumped of the group: there were more.
        ids = pc.fill_null(table.column(sibling), -1).to_numpy(zero_copy_only=False).astype(np.int64)
        count = np.bincount(codes, minlength=groups)
        whole_groups &= np.bincount(codes, weights=ids >= count[codes], minlength=groups) == 0
    partial = groups - int(whole_groups.sum())
    return PartialGroups(chosen, partial == 0, groups, partial, why)


__all__ = ["PartialGroups", "partial_groups"]
