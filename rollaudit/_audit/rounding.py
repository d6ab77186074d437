"""Advantages that only a framework's rounding made: where its float32 or bfloat16 arithmetic gives a sample a
non-zero advantage that exact arithmetic gives none (NeMo-RL's float32 moments on a group of equal rewards)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from .engine.groups import grouping_of
from .presets import get_scheme, rounding_fix
from .schemes import Scheme

if TYPE_CHECKING:
    from .engine.encode import Encoded


class Residues(NamedTuple):
    """Samples a scheme's rounded arithmetic gave ``|A| > tol`` where exact arithmetic gives ``|A| <= tol``.

    samples
        how many such samples.
    in_constant_groups
        how many of them sit in a group whose finite rewards are all equal (no learning signal at all).
    largest
        the largest ``|A|`` among them.
    dtype
        the arithmetic that made them (``float32``, ``bfloat16``).
    fix
        the upstream change that removes them, as a phrase (``the defect NeMo-RL PR #4158 fixes``), or None.
    """

    samples: int
    in_constant_groups: int
    largest: float
    dtype: str
    fix: str | None


def _constant_group_rows(encoded: Encoded, scheme: Scheme) -> torch.Tensor:
    """True on the rows of a group whose finite rewards are all one value (NaN and inf left out)."""
    from .kernel import finite_extremes

    grouping = grouping_of(encoded, scheme)
    low, high = finite_extremes(encoded, grouping.codes, grouping.count)
    return (low == high).index_select(0, grouping.codes)


def rounding_residues(
    encoded: Encoded, scheme: str | Scheme, tol: float = 1e-6, computed: torch.Tensor | None = None
) -> Residues | None:
    """What a scheme's reduced-precision arithmetic (``dtype`` other than float64) made non-zero that exact
    arithmetic leaves zero, on every row of ``encoded``; None when nothing, or when the scheme is exact.

    ``tol``: the zero band of the audit's signs (``|A| <= tol`` is 0). Undefined (NaN) advantages are never
    counted. ``computed``: the scheme's advantages on ``encoded`` where the caller has them (not made again).
    """
    from .kernel import advantages

    scheme = get_scheme(scheme)
    if scheme.dtype == "float64":
        return None
    rounded = (advantages(encoded, scheme) if computed is None else computed).abs()
    exact = advantages(encoded, scheme.with_options(dtype="float64")).abs()
    made = (rounded > tol) & (exact <= tol)  # NaN on either side compares False
    samples = int(made.sum())
    if not samples:
        return None
    reward_encoded = encoded.with_reward(scheme.reward)
    constant = _constant_group_rows(reward_encoded, scheme)
    return Residues(
        samples=samples,
        in_constant_groups=int((made & constant).sum()),
        largest=float(rounded[made].max()),
        dtype=scheme.dtype,
        fix=rounding_fix(scheme),
    )
