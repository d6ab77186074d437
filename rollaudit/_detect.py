"""Which advantage scheme did a run really use? Fit the presets to the recorded advantages.

A dump that holds the advantages the trainer used (``recorded_advantage``:
slime train dumps, TRL parquet, generic tables with an advantage column) can
be checked against every preset: the one whose recomputed advantages match the
recorded ones is what the run did. ``fit_presets`` is the measurement; the
gate's ``--expect-recorded`` rule and (later) scheme detection build on it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._errors import SchemeError
from ._schemes import PRESETS, Scheme, get_scheme
from ._table import PROMPT, RECORDED_ADVANTAGE, STEP, validate_table

DEFAULT_RECORDED_TOLERANCE = 1e-4
"""Recorded advantages are often stored as float32 (TRL parquet, bf16-free slime dumps): 1e-4 is far above
their rounding and far below any difference between two schemes on real rewards."""


class PresetFit(NamedTuple):
    """How well one scheme reproduces the recorded advantages (errors over the rows that have one)."""

    scheme: str
    max_error: float
    mean_error: float
    share_within_tolerance: float


def recorded_mask(table: pa.Table) -> np.ndarray:
    """True on the rows that hold a recorded advantage (null means the trainer's value is unknown)."""
    return pc.is_valid(table.column(RECORDED_ADVANTAGE)).to_numpy(zero_copy_only=False)


def error_scale(recorded: np.ndarray) -> float:
    """What a tolerance is relative to: 1, or the largest recorded magnitude when that is larger.

    Normalized advantages are O(1), so the tolerance is absolute there; unscaled ones (Dr.GRPO on rewards
    in the hundreds) would fail an absolute 1e-4 on float32 rounding alone.
    """
    finite = recorded[np.isfinite(recorded)]
    return max(1.0, float(np.abs(finite).max())) if finite.size else 1.0


def advantage_errors(recorded: np.ndarray, recomputed: np.ndarray) -> np.ndarray:
    """``|recorded - recomputed|`` per row; both NaN counts as a match (0), exactly one NaN as inf."""
    both_nan = np.isnan(recorded) & np.isnan(recomputed)
    errors = np.abs(recorded - recomputed)
    errors[both_nan] = 0.0
    errors[np.isnan(errors)] = np.inf  # one side NaN (or inf against inf of the other sign)
    return errors


def uniform_prompt_size(table: pa.Table) -> int | None:
    """Samples per (step, prompt) when every prompt group has the same size and every sample a key, else None.

    That is ``n`` (n_samples_per_prompt, num_generations) for the presets that slice the batch by position.
    """
    if table.num_rows == 0 or table.column(PROMPT).null_count:
        return None
    sizes = table.select([STEP, PROMPT]).group_by([STEP, PROMPT]).aggregate([([], "count_all")])
    counts = sizes.column("count_all")
    smallest, largest = pc.min(counts).as_py(), pc.max(counts).as_py()
    return int(smallest) if smallest == largest else None


def candidate_schemes(table: pa.Table) -> list[str]:
    """The presets that can run on ``table`` without the user's parameters.

    Every preset that needs no ``n``; the slicing presets (``positional``, ``slime-legacy``, ``trl-group``,
    ``trl-batch``) only when ``n`` can be inferred from uniform prompt sizes, as ``NAME(n=N)``.
    """
    n = uniform_prompt_size(table)
    names = []
    for name, scheme in PRESETS.items():
        if name == "custom":
            continue  # a blank description: the same numbers as ``prompt``
        if scheme.groups in ("positional", "legacy"):
            if n is not None:
                names.append(f"{name}(n={n})")
        else:
            names.append(name)
    return names


def fit_presets(
    table: pa.Table,
    tolerance: float = DEFAULT_RECORDED_TOLERANCE,
    schemes: list[str | Scheme] | None = None,
    device: str = "auto",
) -> list[PresetFit]:
    """Fit each candidate scheme to the table's recorded advantages, best first.

    ``schemes`` defaults to :func:`candidate_schemes`. Only rows with a
    recorded advantage count; a scheme that cannot run on the table (missing
    prompt keys, uneven slices) is left out. A row is within tolerance when
    its error is at most ``tolerance * error_scale(recorded)``. Ranked by the
    share within tolerance (descending), then mean and max error; ties keep
    the order of ``rollaudit.PRESETS``. No recorded advantage at all: ``[]``.

    >>> import rollaudit
    >>> t = rollaudit.make_table(reward=[1.0, 3.0], prompt=[0, 0], recorded_advantage=[-1.0, 1.0])
    >>> fit_presets(t)[0].scheme
    'dr-grpo'
    """
    from ._kernel import advantages, encode

    table = validate_table(table)
    present = recorded_mask(table)
    if not present.any():
        return []
    recorded = table.column(RECORDED_ADVANTAGE).to_numpy(zero_copy_only=False).astype(np.float64)[present]
    allowed = tolerance * error_scale(recorded)
    encoded = encode(table, device)  # once: every scheme reuses its codes
    fits = []
    for spec in candidate_schemes(table) if schemes is None else schemes:
        scheme = get_scheme(spec)
        try:
            values = advantages(encoded, scheme).cpu().numpy()
        except SchemeError:
            continue
        errors = advantage_errors(recorded, values[present])
        fits.append(
            PresetFit(
                scheme=str(scheme),
                max_error=float(errors.max()),
                mean_error=float(errors.mean()),
                share_within_tolerance=float((errors <= allowed).mean()),
            )
        )
    return sorted(fits, key=lambda fit: (-fit.share_within_tolerance, fit.mean_error, fit.max_error))


__all__ = ["DEFAULT_RECORDED_TOLERANCE", "PresetFit", "candidate_schemes", "fit_presets", "uniform_prompt_size"]
