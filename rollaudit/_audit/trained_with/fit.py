"""Which advantage scheme did a run really use? Fit the presets to the recorded advantages.

A dump that holds the advantages the trainer used (``recorded_advantage``:
slime train dumps, TRL parquet, generic tables with an advantage column) can
be checked against every preset: the one whose recomputed advantages match the
recorded ones is what the run did. ``fit_presets`` is the measurement (the
gate's ``--expect-recorded`` rule uses it); ``detect_scheme`` names the
answer, or says that no preset matches.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import SchemeError
from ..._table import (
    AGENT,
    PROMPT,
    RECORDED_ADVANTAGE,
    RESPONSE_LENGTH,
    REWARD,
    STEP,
    TRAJECTORY,
    facts_in,
    group_codes,
    loaded_formats,
    numpy_view,
    validate_table,
)
from ..presets import PRESETS, get_scheme
from ..schemes import Scheme, columns_needed
from .cells import CellFits, Cells

if TYPE_CHECKING:
    import torch

    from ..engine.encode import Encoded

DEFAULT_RECORDED_TOLERANCE = 1e-4
"""Recorded advantages are often stored as float32 (TRL parquet, bf16-free slime dumps): 1e-4 is far above
their rounding and far below any difference between two schemes on real rewards."""

ROUNDING_UNITS = 2
"""Units in the last place of a scheme's dtype that a row of the fit may be off by (see ``rounding_error``)."""
_MACHINE_EPSILON = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-7}


def rounding_error(dtype: str = "float64", scale: float = 1.0) -> float:
    """The rounding of a scheme computed in ``dtype``: ``ROUNDING_UNITS`` units in the last place at the largest
    recorded magnitude, ``ROUNDING_UNITS * eps(dtype) * scale`` (``scale``: :func:`error_scale`).

    The same arithmetic summed in another order (another CPU's kernels, another instruction set) moves a value
    by about this much: 2.4e-7 for float32 at ``|A| ~ 1``, 4.4e-16 for float64, 0.016 for bfloat16. A row of a
    fit whose error is within it is a match at that rounding, and its error counts as 0
    (:class:`PresetFit`), so that the same dump fits the same way on every machine.
    """
    return ROUNDING_UNITS * _MACHINE_EPSILON.get(dtype, 0.0) * scale


def allowed_error(tolerance: float, scale: float, dtype: str = "float64") -> float:
    """The largest error at which a row still matches a scheme computed in ``dtype``.

    ``tolerance * scale`` for exact (float64) schemes, ``scale`` being :func:`error_scale`. A scheme that
    reproduces a framework's float32 or bfloat16 arithmetic is off where that arithmetic is not reproduced
    bit for bit (another order of a sum): by a rounding of the dtype, :func:`rounding_error`, when that is the
    larger. So float32 schemes keep the tolerance (2 * 1.2e-7 < 1e-4), bfloat16 ones get 2 * 2^-7 = 0.016 (times
    scale); a tolerance below a float64 rounding (4.4e-16) is that rounding.
    """
    return max(tolerance * scale, rounding_error(dtype, scale))


class PresetFit(NamedTuple):
    """How well one scheme reproduces the recorded advantages (errors over the rows that have one).

    ``max_error`` and ``mean_error``: a row's error within the rounding of the scheme's dtype
    (:func:`rounding_error`: 2 units in the last place at its group's recorded magnitude) counts as 0, a match at
    that rounding. Whether a float32 scheme reproduces the trainer's float32 values bit for bit, or 1 unit in the
    last place off, depends on the order the CPU's kernels sum in: the fit says the same of both, on any machine.
    ``undefined``: rows where exactly one side is NaN (the scheme leaves undefined what the trainer recorded,
    or the reverse); such a row is never within tolerance and makes ``max_error`` and ``mean_error`` inf.
    ``allowed_error``: the error at which a row of this scheme is within tolerance (:func:`allowed_error`: it
    follows the scheme's dtype), at a recorded magnitude of at most 1; a larger row is allowed that much times its
    group's magnitude (:func:`row_magnitudes`); NaN where it was not given.
    """

    scheme: str
    max_error: float
    mean_error: float
    share_within_tolerance: float
    undefined: int = 0
    allowed_error: float = math.nan


def has_recorded(table: pa.Table) -> bool:
    """Whether any row of a canonical table holds a recorded advantage (a metadata check: reads no values)."""
    column = table.column(RECORDED_ADVANTAGE)
    null_count: int = column.null_count
    return null_count < len(column)


def recorded_values(table: pa.Table) -> np.ndarray:
    """The recorded advantage of every row as float64, NaN where none was recorded (the audit's ``recorded`` row)."""
    column = table.column(RECORDED_ADVANTAGE).cast(pa.float64())
    # A writable copy: torch.from_numpy warns on Arrow's read-only buffers.
    values: np.ndarray = pc.fill_null(column, np.nan).to_numpy(zero_copy_only=False).astype(np.float64)
    return values


def _recorded_on(table: pa.Table, present: np.ndarray) -> np.ndarray:
    """The recorded values of the ``present`` rows, float64 (a recorded NaN stays NaN)."""
    values = table.column(RECORDED_ADVANTAGE).to_numpy(zero_copy_only=False).astype(np.float64)
    present_values: np.ndarray = values[present]
    return present_values


def recorded_mask(table: pa.Table) -> np.ndarray:
    """True on the rows that hold a recorded advantage (null means the trainer's value is unknown)."""
    mask: np.ndarray = pc.is_valid(table.column(RECORDED_ADVANTAGE)).to_numpy(zero_copy_only=False)
    return mask


def error_scale(recorded: np.ndarray) -> float:
    """What a tolerance is relative to: 1, or the largest recorded magnitude when that is larger.

    Normalized advantages are O(1), so the tolerance is absolute there; unscaled ones (Dr.GRPO on rewards
    in the hundreds) would fail an absolute 1e-4 on float32 rounding alone.
    """
    finite = recorded[np.isfinite(recorded)]
    return max(1.0, float(np.abs(finite).max())) if finite.size else 1.0


def row_magnitudes(recorded: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """What each row's tolerance is relative to: 1, or the largest finite recorded magnitude of its true group
    (``groups``: a code per row, -1 for a row of no group, which is its own) where that is larger. A row computed by
    cancellation (``r - mean`` near 0 on rewards in the hundreds) carries its group's rounding, not its own; a
    blown-up group loosens no other group's tolerance."""
    magnitude: np.ndarray = np.abs(recorded)
    magnitude[~np.isfinite(magnitude)] = 1.0
    np.maximum(magnitude, 1.0, out=magnitude)
    if groups is None or not len(groups):
        return magnitude
    keyed = groups >= 0
    largest = np.zeros(int(groups.max()) + 1 if keyed.any() else 0)
    np.maximum.at(largest, groups[keyed], magnitude[keyed])
    magnitude[keyed] = largest[groups[keyed]]
    return magnitude


def _group_codes(encoded: Encoded, present: np.ndarray) -> np.ndarray:
    """Each recorded row's (step, prompt) group code, -1 without a prompt key."""
    prompt = encoded.prompt.cpu().numpy()[present]
    step = encoded.step.cpu().numpy()[present] if not encoded.single_step else np.zeros(len(prompt), np.int64)
    codes = np.full(len(prompt), -1, dtype=np.int64)
    keyed = prompt >= 0
    if keyed.any():
        codes[keyed] = np.unique(step[keyed] * (int(prompt.max()) + 1) + prompt[keyed], return_inverse=True)[1]
    return codes


def advantage_errors(recorded: np.ndarray, recomputed: np.ndarray) -> np.ndarray:
    """``|recorded - recomputed|`` per row; both NaN counts as a match (0), exactly one NaN as inf."""
    both_nan = np.isnan(recorded) & np.isnan(recomputed)
    errors: np.ndarray = np.abs(recorded - recomputed)
    errors[both_nan] = 0.0
    errors[np.isnan(errors)] = np.inf  # one side NaN (or inf against inf of the other sign)
    return errors


def uniform_prompt_size(table: pa.Table) -> int | None:
    """Samples per (step, prompt) when every prompt group has the same size and every sample a key, else None.

    That is ``n`` (n_samples_per_prompt, num_generations) for the presets that slice the batch by position.
    """
    if table.num_rows == 0 or table.column(PROMPT).null_count:
        return None
    _, counts = np.unique(group_codes(table, (STEP, PROMPT)), return_counts=True)
    return int(counts[0]) if counts.min() == counts.max() else None


def candidate_schemes(table: pa.Table) -> list[str]:
    """The presets that can run on ``table`` without the user's parameters.

    Every preset that needs no ``n``; the slicing presets (``positional``, ``slime-legacy``, ``trl-group``,
    ``trl-batch``, ``areal-stride``) only when ``n`` can be inferred from uniform prompt sizes, as ``NAME(n=N)``.
    Presets that cannot apply are left out: one grouping by a column the table lacks, one whitening by tokens
    without response lengths, one requiring siblings to share a reward (or naming no representative) when some
    trajectory's do not.
    """
    n = uniform_prompt_size(table)
    siblings_agree = legacy_ns = None
    names = []
    for name, scheme in PRESETS.items():
        if name == "custom":
            continue  # a blank description: the same numbers as ``prompt``
        if scheme.group_by not in table.column_names or scheme.reward not in table.column_names:
            continue
        if (scheme.notes is not None and scheme.notes.not_auditable) or not set(columns_needed(scheme)).issubset(
            table.column_names
        ):
            continue  # no dump rollaudit reads carries it, or this table lacks a column it reads
        if scheme.whiten != "none" and table.column(RESPONSE_LENGTH).null_count:
            continue
        if scheme.siblings == "equal" or (scheme.representative is None and scheme.members == "trajectories"):
            siblings_agree = _siblings_agree(table) if siblings_agree is None else siblings_agree
            if not siblings_agree:
                continue
        if scheme.subgroups == "agent":
            names += [name, *(f"{name}(episode_agents={agents})" for agents in _episode_agent_choices(table))]
        elif scheme.groups == "positional":
            if n is not None:
                names.append(f"{name}(n={n})")
        elif scheme.groups == "legacy":
            legacy_ns = legacy_ns if legacy_ns is not None else _legacy_sizes(table, n)
            names += [f"{name}(n={size})" for size in legacy_ns]
        else:
            names.append(name)
    return names


_AGENT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_MOST_AGENTS = 6
"""Agents (seats) beyond which the sub-group presets are fitted with no episode agents and with all of them only."""


def _episode_agent_choices(table: pa.Table) -> list[str]:
    """The ``episode_agents`` a sub-group preset may have run with: each agent of the table alone (prime-rl keys
    the agents its config names by episode, e.g. ``solver``), and all of them together."""
    if AGENT not in table.column_names:
        return []
    agents = sorted(name for name in pc.unique(table.column(AGENT)).to_pylist() if isinstance(name, str) and name)
    agents = [name for name in agents if _AGENT_NAME.fullmatch(name)]  # names a scheme string can carry
    if not agents:
        return []
    alone = agents if len(agents) <= _MOST_AGENTS else []
    return list(dict.fromkeys([*alone, "|".join(agents)]))


def _legacy_sizes(table: pa.Table, uniform: int | None) -> list[int]:
    """The ``n`` a slime-legacy run may have used: the uniform prompt size, and N / B of every step whose sample
    count N its number of prompts B divides (the slices legacy slime cut there), at most a few."""
    sizes = [] if uniform is None else [uniform]
    if table.num_rows and not table.column(PROMPT).null_count:
        pairs, steps = group_codes(table, (STEP, PROMPT)), group_codes(table, (STEP,))
        step_of_pair = np.zeros(int(pairs.max()) + 1, dtype=np.int64)
        step_of_pair[pairs] = steps
        samples_of, prompts_of = np.bincount(steps), np.bincount(step_of_pair)
        _, first_rows = np.unique(steps, return_index=True)
        for step in np.argsort(first_rows, kind="stable").tolist():  # steps in the order they first appear
            samples, prompts = int(samples_of[step]), int(prompts_of[step])
            if samples % prompts == 0:
                sizes.append(samples // prompts)
    return list(dict.fromkeys(sizes))[:4]


def _siblings_agree(table: pa.Table) -> bool:
    """Whether the samples of every (step, prompt, trajectory) share one reward (a keyless sample is alone)."""
    keyed = table.filter(pc.is_valid(table.column(TRAJECTORY))).select([STEP, PROMPT, TRAJECTORY, REWARD])
    if keyed.num_rows == 0:
        return True
    rewards = pc.fill_null(keyed.column(REWARD), math.nan)
    if pc.any(pc.is_nan(rewards)).as_py():
        return False  # NaN equals nothing: a NaN sibling never agrees
    codes = group_codes(keyed, (STEP, PROMPT, TRAJECTORY))
    order = np.argsort(codes, kind="stable")
    values = numpy_view(rewards.combine_chunks().cast(pa.float64()))[order]
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    return bool(np.array_equal(np.minimum.reduceat(values, starts), np.maximum.reduceat(values, starts)))


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
    its error is at most ``allowed_error(tolerance, 1, dtype)`` times ``max(1, |recorded|)`` over its true group
    (the scheme's dtype: a bfloat16 scheme is allowed a bfloat16 rounding). Ranked by the
    share within tolerance (descending), then mean and max error, two errors of
    schemes of one dtype within its rounding being a tie (:func:`rounding_error`);
    ties keep the order of ``rollaudit.PRESETS``. No recorded advantage at all: ``[]``.

    >>> import rollaudit
    >>> t = rollaudit.make_table(reward=[1.0, 3.0], prompt=[0, 0], recorded_advantage=[-1.0, 1.0])
    >>> fit_presets(t)[0].scheme
    'dr-grpo'
    """
    from ..engine.encode import encode

    table = validate_table(table)
    if not has_recorded(table):
        return []
    present = recorded_mask(table)
    names = [str(get_scheme(spec)) for spec in (candidate_schemes(table) if schemes is None else schemes)]
    tiers = preset_tiers(names, table)
    recorded = _recorded_on(table, present)
    fitted = _fit_schemes(encode(table, device), present, recorded, names, tolerance, tiers=tiers)
    return [fit for fit, _ in fitted]


def _digest(values: np.ndarray) -> bytes:
    """A fingerprint of exact values: equal digests, the same numbers (every NaN alike, -0.0 as 0.0)."""
    canonical = np.where(np.isnan(values), np.nan, values + 0.0)
    return hashlib.blake2b(canonical.tobytes(), digest_size=16).digest()


# The framework each preset family reproduces, by the preset's name: on a dump of one framework, another's preset
# that fits only as well (a float32 copy of the same formula fits by the same rounding) is named last.
_PRESET_FRAMEWORKS = {
    "slime": "slime",
    "miles": "miles",
    "verl": "verl",
    "trl": "trl",
    "nemo": "nemo_rl",
    "agl": "agent_lightning",
    "areal": "areal",
    "rllm": "rllm",
    "roll": "roll",
    "tinker": "tinker",
    "art": "art",
    "oi": "open_instruct",
    "prime": "prime_rl",
    "torchtitan": "torchtitan",
    "swift": "ms-swift",
    "molt": "molt",
}


def preset_framework(name: str) -> str | None:
    """The format name of the framework a preset (by its scheme string) reproduces; None for a generic scheme."""
    return _PRESET_FRAMEWORKS.get(name.split("(", 1)[0].split("-", 1)[0])


def preset_tiers(schemes: Iterable[str], table: pa.Table) -> dict[str, int]:
    """How each scheme string ranks among fits of one quality on ``table``: 0 the default preset its loader names
    (the framework's own arithmetic, dtype and eps, even where its rounding is not reproduced bit for bit), 1 any
    other scheme, 2 a preset of another framework than the one that wrote the dump."""
    formats = set(loaded_formats(table))
    default = (facts_in(table).get("trained_default") or {}).get("scheme")
    tiers = {}
    for name in schemes:
        framework = preset_framework(name)
        foreign = framework is not None and bool(formats) and framework not in formats
        tiers[name] = 0 if name == default else 2 if foreign else 1
    return tiers


def _fit_schemes(
    encoded: Encoded,
    present: np.ndarray,
    recorded: np.ndarray,
    specs: Iterable[str | Scheme],
    tolerance: float,
    computed: Mapping[str, torch.Tensor] | None = None,
    unavailable: dict[str, str] | None = None,
    cells: Cells | None = None,
    tiers: Mapping[str, int] | None = None,
    groups: np.ndarray | None = None,
) -> list[tuple[PresetFit, bytes]]:
    """(fit, digest of the recomputed values on the recorded rows) per scheme that runs, best first; the schemes
    that cannot run go into ``unavailable`` (scheme -> the error's line) when it is given.

    ``present``: the rows with a recorded advantage; ``recorded``: their values (float64, NaN allowed).
    ``computed``: advantages already recomputed on ``encoded``, by scheme string (``audit`` passes its own,
    so no scheme is recomputed twice). A digest, not the values, is kept per scheme: ties are told apart
    without holding every scheme's column at once. ``cells``: where each scheme's errors are also counted per
    cell of the recorded rows (:class:`CellFits`). ``tiers``: how schemes that fit as many rows rank
    (:func:`preset_tiers`; 1 where not given). ``groups``: each recorded row's (step, prompt) group code, -1
    without a prompt key, where the caller has them (made here otherwise).
    """
    from ..kernel import advantages

    scale = error_scale(recorded)
    magnitude = row_magnitudes(recorded, _group_codes(encoded, present) if groups is None else groups)
    fitted: dict[str, tuple[PresetFit, bytes]] = {}
    roundings: dict[str, float] = {}
    for spec in specs:
        scheme = get_scheme(spec)
        name = str(scheme)
        if name in fitted:
            continue
        try:
            values = computed[name] if computed is not None and name in computed else advantages(encoded, scheme)
        except SchemeError as error:
            # The scheme cannot run on this table, so it is not what the trainer did.
            if unavailable is not None:
                unavailable.setdefault(name, error.line())
            continue
        on_recorded = values.cpu().numpy()[present]
        errors = advantage_errors(recorded, on_recorded)
        roundings[name] = rounding_error(scheme.dtype, scale)
        # Each row is held to its group's magnitude: one blown-up group loosens no other group's tolerance.
        errors[errors <= rounding_error(scheme.dtype) * magnitude] = 0.0  # a match at the dtype's rounding
        allowed = allowed_error(tolerance, 1.0, scheme.dtype)
        fit = PresetFit(
            scheme=name,
            max_error=float(errors.max()) if errors.size else 0.0,
            mean_error=float(errors.mean()) if errors.size else 0.0,
            share_within_tolerance=float((errors <= allowed * magnitude).mean()) if errors.size else 1.0,
            undefined=int((np.isnan(recorded) != np.isnan(on_recorded)).sum()),
            allowed_error=allowed,
        )
        fitted[name] = (fit, _digest(on_recorded))
        if cells is not None:
            cells.add(name, errors, allowed * magnitude)
    return _ranked(list(fitted.values()), tiers or {}, roundings)


def _ranked(
    fitted: list[tuple[PresetFit, bytes]], tiers: Mapping[str, int], roundings: Mapping[str, float]
) -> list[tuple[PresetFit, bytes]]:
    """``fitted`` (in the order the schemes were given) best first: by the share of rows within tolerance, the
    tier (:func:`preset_tiers`), a dtype coarser than the tolerance (bfloat16) last, then the mean error and the
    max error, where two errors of schemes of one dtype within its rounding (:func:`rounding_error`) are a tie,
    kept in the given order (PRESETS order for the candidates): two float32 copies of one formula, apart by a unit
    in the last place on one CPU and by another on the next, rank the same on both. Schemes of two dtypes rank by
    their errors: a float32 scheme whose errors are within its rounding (0) ranks before a float64 one that misses
    float32 values by their rounding.

    Ties chain: errors sorted ascending are one tie while each is within the rounding of the one before.
    """
    given = {fit.scheme: index for index, (fit, _) in enumerate(fitted)}

    def near(left: float, right: float, schemes: tuple[str, str]) -> bool:
        rounding = roundings[schemes[0]]
        return left == right or (rounding == roundings[schemes[1]] and abs(right - left) <= rounding)

    def ties(items: list[tuple[PresetFit, bytes]], error: str) -> list[list[tuple[PresetFit, bytes]]]:
        ordered = sorted(items, key=lambda item: float(getattr(item[0], error)))
        chained = [[ordered[0]]]
        for item in ordered[1:]:
            last = chained[-1][-1][0]
            if near(getattr(last, error), getattr(item[0], error), (last.scheme, item[0].scheme)):
                chained[-1].append(item)
            else:
                chained.append([item])
        return chained

    # A scheme whose dtype's rounding exceeds the tolerance (bfloat16) fits, within that rounding, what any finer
    # scheme of a similar formula gives: it ranks after the schemes that fit as many rows at the tolerance itself.
    finest = min((fit.allowed_error for fit, _ in fitted if not math.isnan(fit.allowed_error)), default=math.nan)

    def rank(item: tuple[PresetFit, bytes]) -> tuple[float, int, bool]:
        fit = item[0]
        return -fit.share_within_tolerance, tiers.get(fit.scheme, 1), fit.allowed_error > finest

    ranked: list[tuple[PresetFit, bytes]] = []
    for _, same_rank in itertools.groupby(sorted(fitted, key=rank), key=rank):
        for same_mean in ties(list(same_rank), "mean_error"):
            for same_max in ties(same_mean, "max_error"):
                ranked += sorted(same_max, key=lambda item: given[item[0].scheme])
    return ranked


def _equivalent(
    fitted: list[tuple[PresetFit, bytes]], values_of: Callable[[str], np.ndarray], scale: float
) -> tuple[str, ...]:
    """The fitted schemes after the first whose values on the recorded rows are the first's: the same digest, or,
    for a scheme of the first's dtype, within that dtype's :func:`rounding_error` on every row (NaN where it is
    NaN). Two schemes of one dtype that reach one formula by different code are bit for bit the same on one CPU
    and a unit in the last place apart on the next: they are the same numbers on both. (A float32 scheme and a
    float64 one are apart by float32's rounding on every CPU: only the digest makes them the same.) Only a scheme
    whose fit is as close as that allows is compared value by value, its values and the best's made again where
    ``values_of`` does not hold them."""
    if not fitted:
        return ()
    best, best_digest = fitted[0]
    dtype = get_scheme(best.scheme).dtype
    rounding = rounding_error(dtype, scale)
    best_values: np.ndarray | None = None
    names = []
    for fit, digest in fitted[1:]:
        if digest == best_digest:
            names.append(fit.scheme)
            continue
        # Values within ``rounding`` have errors within it, each counted as 0 within ``rounding`` of 0: fits
        # further apart than twice that cannot be the same numbers.
        if (
            get_scheme(fit.scheme).dtype != dtype
            or fit.undefined != best.undefined
            or not all(
                mine == theirs or abs(mine - theirs) <= 2 * rounding
                for mine, theirs in ((fit.max_error, best.max_error), (fit.mean_error, best.mean_error))
            )
        ):
            continue
        best_values = values_of(best.scheme) if best_values is None else best_values
        values = values_of(fit.scheme)
        nan = np.isnan(best_values)
        if np.array_equal(nan, np.isnan(values)) and bool(np.all(np.abs(values[~nan] - best_values[~nan]) <= rounding)):
            names.append(fit.scheme)
    return tuple(names)


@dataclass(frozen=True)
class Detection:
    """Which scheme the recorded advantages come from, and how well every fitted scheme reproduces them.

    best_match
        the best-fitting scheme string (one ``rollaudit.recompute`` accepts) when it is within tolerance on
        every recorded row; ``None`` when no scheme is: the dump matches no preset, and nothing is guessed.
    matched
        ``best_match is not None``.
    fits
        every scheme that could run on the table, best first (:func:`fit_presets`' order); ``fits[0]`` is
        the closest scheme even when nothing matches.
    equivalent
        the other fitted schemes whose advantages equal the best fit's exactly on the recorded rows (e.g.
        ``prompt``, ``trajectory`` and ``slime-2204`` on a table without trajectory keys or singletons), or,
        of the best fit's dtype, within its rounding (:func:`rounding_error`: the same arithmetic summed in
        another order): the recorded values cannot tell them apart, so naming one of them is not a claim
        against the others.
    tolerance, allowed_error, scale
        a row matches an exact (float64) scheme when its error is at most ``allowed_error = tolerance`` times
        ``max(1, |recorded|)`` over its true group (:func:`row_magnitudes`: a blown-up group loosens no other); a scheme
        computed in a reduced dtype may be allowed more, its fit's own ``allowed_error`` (:meth:`allowed_for`),
        times the same magnitude. ``scale`` is 1: the tolerance is per row, never scaled to the largest value.
    rows
        rows with a recorded advantage (the others are not fitted).
    unavailable
        the schemes that could not run on the table, each with the one line saying why.
    """

    best_match: str | None
    matched: bool
    fits: tuple[PresetFit, ...]
    equivalent: tuple[str, ...]
    tolerance: float
    allowed_error: float
    rows: int
    unavailable: Mapping[str, str] = field(default_factory=dict)
    scale: float = 1.0

    @property
    def closest(self) -> PresetFit | None:
        """The best fit, whether or not it is within tolerance (None when no scheme could run)."""
        return self.fits[0] if self.fits else None

    def fit_of(self, scheme: str | Scheme) -> PresetFit | None:
        """The fit of one scheme (as a scheme string names it), or None when it was not fitted or could not run."""
        name = str(get_scheme(scheme))
        return next((fit for fit in self.fits if fit.scheme == name), None)

    def allowed_for(self, fit: PresetFit) -> float:
        """The error at which a row matches ``fit``'s scheme (its dtype's, at least ``allowed_error``)."""
        return self.allowed_error if math.isnan(fit.allowed_error) else fit.allowed_error

    def beyond_tolerance(self, fit: PresetFit) -> int:
        """How many recorded rows ``fit`` misses by more than the allowed error."""
        return self.rows - round(fit.share_within_tolerance * self.rows)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``best_match``, ``matched``, ``equivalent``, ``tolerance``, ``allowed_error``, ``rows``
        and ``fits`` (``scheme``, ``max_error``, ``mean_error``, ``share_within_tolerance``, ``undefined``,
        ``allowed_error``).

        An error that is inf (a row where one side is NaN, counted in ``undefined``) becomes null.
        """
        from ..._json import json_object

        return json_object(
            {
                "best_match": self.best_match,
                "matched": self.matched,
                "equivalent": list(self.equivalent),
                "tolerance": self.tolerance,
                "allowed_error": self.allowed_error,
                "rows": self.rows,
                "fits": [fit._asdict() for fit in self.fits],
            }
        )


def detect_scheme(
    table: pa.Table,
    tolerance: float = DEFAULT_RECORDED_TOLERANCE,
    schemes: Iterable[str | Scheme] | None = None,
    device: str = "auto",
) -> Detection:
    """Which scheme produced the table's recorded advantages: every candidate fitted, the best named.

    ``schemes`` defaults to :func:`candidate_schemes` (every preset that runs without parameters, and the
    slicing presets with ``n`` inferred from uniform prompt sizes). A table without recorded advantages
    gives ``best_match=None`` and no fits.

    >>> import rollaudit
    >>> t = rollaudit.make_table(reward=[1.0, 3.0, 0.0, 0.0], prompt=[0, 0, 1, 1],
    ...                          recorded_advantage=[-1.0, 1.0, 0.0, 0.0])
    >>> rollaudit.detect_scheme(t).best_match
    'dr-grpo'
    """
    from ..engine.encode import encode

    table = validate_table(table)
    if not has_recorded(table):
        return Detection(None, False, (), (), tolerance, tolerance, 0)
    specs = candidate_schemes(table) if schemes is None else list(schemes)
    return detect_encoded(encode(table, device), table, specs, tolerance)


def detect_encoded(
    encoded: Encoded,
    table: pa.Table,
    schemes: Iterable[str | Scheme],
    tolerance: float = DEFAULT_RECORDED_TOLERANCE,
    computed: Mapping[str, torch.Tensor] | None = None,
) -> Detection:
    """:func:`detect_scheme` on a validated table already encoded (``audit`` reuses its encoding and its
    recomputed advantages, ``computed``, by scheme string)."""
    return detect_by_cells(encoded, table, schemes, tolerance, computed)[0]


def detect_by_cells(
    encoded: Encoded,
    table: pa.Table,
    schemes: Iterable[str | Scheme],
    tolerance: float = DEFAULT_RECORDED_TOLERANCE,
    computed: Mapping[str, torch.Tensor] | None = None,
    cell_codes: np.ndarray | None = None,
    group_codes: np.ndarray | None = None,
) -> tuple[Detection, CellFits | None]:
    """:func:`detect_encoded`, and where ``cell_codes`` (an int64 code per row of the table) is given, how each
    scheme does on each cell of the recorded rows, from the same pass. ``group_codes``: each row's (step, prompt)
    group code (-1 without a prompt key), where the caller has made them (``audit``: its prompt groups)."""
    present = recorded_mask(table)
    recorded = _recorded_on(table, present)
    unavailable: dict[str, str] = {}
    names = [str(get_scheme(spec)) for spec in schemes]
    tiers = preset_tiers(names, table)
    cells = None if cell_codes is None else Cells(np.asarray(cell_codes, dtype=np.int64)[present], tiers)
    groups = None if group_codes is None else np.asarray(group_codes, dtype=np.int64)[present]
    fitted = _fit_schemes(encoded, present, recorded, names, tolerance, computed, unavailable, cells, tiers, groups)
    fits = tuple(fit for fit, _ in fitted)
    matched = bool(fits) and fits[0].share_within_tolerance == 1.0
    scale = error_scale(recorded)

    def values_of(name: str) -> np.ndarray:
        from ..kernel import advantages

        values = computed[name] if computed is not None and name in computed else advantages(encoded, get_scheme(name))
        on_recorded: np.ndarray = values.cpu().numpy()[present]
        return on_recorded

    equivalent = _equivalent(fitted, values_of, scale)
    detection = Detection(
        best_match=fits[0].scheme if matched else None,
        matched=matched,
        fits=fits,
        equivalent=equivalent,
        tolerance=tolerance,
        allowed_error=tolerance,
        rows=int(present.sum()),
        unavailable=unavailable,
    )
    return detection, None if cells is None else cells.fits


__all__ = [
    "DEFAULT_RECORDED_TOLERANCE",
    "Detection",
    "PresetFit",
    "allowed_error",
    "candidate_schemes",
    "detect_scheme",
    "fit_presets",
    "has_recorded",
    "recorded_values",
    "uniform_prompt_size",
]
