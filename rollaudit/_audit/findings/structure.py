"""The codes about groups: how the run's groups cut the true (step, prompt) groups.

Where a preset reproduces the run's advantages (or the run's scheme is given or assumed), its grouping is compared
with the true groups. Where none does, each grouping defect's signature is refit on the rows: one group per step,
consecutive slices of n over the rows left (and what the rows after the last full slice got), groups keyed by the
trajectory.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from ..._errors import SchemeError
from ..._table import PROMPT, TRAJECTORY
from ..schemes import Scheme, key_column
from .laws import per_code

if TYPE_CHECKING:
    from .context import Rows

ALMOST_ALL = 0.999
"""The share of rows a refit signature must reproduce: all of them, but for a row a framework rounded otherwise."""


class Hit(NamedTuple):
    """What one check found: its code, the rows that show it, one line, and the code's own numbers."""

    code: str
    flagged: torch.Tensor
    summary: str
    detail: dict


def _mixed(major: torch.Tensor, minor: torch.Tensor, majors: int) -> torch.Tensor:
    """Per code of ``major``: whether its rows hold more than one ``minor`` code (a least and a greatest that
    differ: two passes over the rows, no sort)."""
    return per_code(minor, major, majors, "amax") > per_code(minor, major, majors, "amin")


def _distinct(codes: torch.Tensor, count: int) -> int:
    """How many distinct codes (of ``count``) occur."""
    return int((torch.bincount(codes, minlength=count) > 0).sum()) if codes.numel() else 0


def _contiguous(rows: Rows, codes: torch.Tensor, count: int) -> bool:
    """Whether the groups are slices, not keys: each a run of consecutive rows in batch order, all of one size n
    but for at most one per step (the last)."""
    low, high = per_code(rows.batch_rank, codes, count, "amin"), per_code(rows.batch_rank, codes, count, "amax")
    sizes = torch.bincount(codes, minlength=count)
    used = sizes > 0
    if not bool(((high - low + 1)[used] == sizes[used]).all()):
        return False
    _, counts = torch.unique(sizes[used], return_counts=True)
    return int(counts.sum() - counts.max()) <= int(rows.enc.steps)


def compare_groupings(
    rows: Rows, scheme: Scheme, codes: torch.Tensor, count: int, left_out: torch.Tensor | None = None
) -> list[Hit]:
    """The run's groups (``codes``: each row's group, ``count`` codes) against the true groups, but for the rows
    ``left_out`` (a tail another code names, the steps a signature did not fit)."""
    keyed = rows.group >= 0 if left_out is None else (rows.group >= 0) & ~left_out
    if not bool(keyed.any()):
        return []
    run, true = codes[keyed], rows.group[keyed]
    at = torch.nonzero(keyed).flatten()
    merged = _mixed(run, true, count).index_select(0, run)  # a run group holding several true groups
    split = _mixed(true, run, rows.groups).index_select(0, true)  # a true group cut into several run groups
    if not bool((merged | split).any()):
        return []
    flagged = torch.zeros(rows.rows, dtype=torch.bool)
    sizes = torch.bincount(codes, minlength=count)
    step_sizes = rows.step_sizes.index_select(0, rows.step)
    whole_step = merged & (sizes.index_select(0, run) == step_sizes[keyed])
    hits = []
    if bool(whole_step.any()):
        flagged[at[whole_step]] = True
        steps = rows.steps_of(flagged)
        hits.append(
            Hit(
                "batch-as-group",
                flagged.clone(),
                f"{len(steps):,} step{'s' if len(steps) != 1 else ''} centred as one group over "
                f"{_distinct(true[whole_step], rows.groups):,} prompts ({int(whole_step.sum()):,} rows)",
                {"steps": list(steps)},
            )
        )
        merged, split = merged & ~whole_step, split & ~whole_step
    rest = merged | split
    if not bool(rest.any()):
        return hits
    flagged = torch.zeros(rows.rows, dtype=torch.bool)
    flagged[at[rest]] = True
    by_trajectory = scheme.groups == "prompt" and scheme.group_by == TRAJECTORY
    sliced = scheme.groups in ("positional", "legacy") or _contiguous(rows, codes, count)
    prompts = _distinct(true[rest], rows.groups)
    if by_trajectory:
        hits.append(
            Hit(
                "per-trajectory-key",
                flagged,
                f"grouped by the trajectory: {prompts:,} prompts' samples cut into "
                f"{_distinct(run[rest], count):,} one-trajectory groups ({int(rest.sum()):,} rows)",
                {},
            )
        )
    elif sliced:
        hits.append(
            Hit(
                "straddling-slices",
                flagged,
                f"{_distinct(run[rest], count):,} slices of consecutive rows straddle {prompts:,} prompts "
                f"({int(rest.sum()):,} rows)",
                {"n": scheme.n} if scheme.n else {},
            )
        )
    else:
        hits.append(
            Hit(
                "key-splits-prompts",
                flagged,
                f"the group key cuts {prompts:,} prompts: {_distinct(true[split], rows.groups):,} split over "
                f"several groups, {_distinct(run[merged], count):,} groups holding several prompts "
                f"({int(rest.sum()):,} rows)",
                {"key": scheme.framework_key or scheme.group_by},
            )
        )
    return hits


def tail_rows(rows: Rows, scheme: Scheme, tail: torch.Tensor) -> list[Hit]:
    """Rows after the last full slice of n that the run divided by eps (or left raw)."""
    if not bool(tail.any()):
        return []
    blown = tail & (rows.reward != 0) & torch.isfinite(rows.advantage)
    largest = float(rows.advantage[tail].abs().nan_to_num(0.0).max())
    return [
        Hit(
            "tail-rows-unnormalised",
            tail,
            f"{int(tail.sum()):,} rows after the last full slice of n={scheme.n} got mean 0 and std 0 "
            f"({int(blown.sum()):,} of them r / eps: |A| up to {largest:.3g})",
            {"n": scheme.n, "eps": scheme.eps},
        )
    ]


def known_grouping(rows: Rows, scheme: Scheme) -> list[Hit]:
    """The grouping defects of the run's own scheme on these rows."""
    from ..engine.groups import grouping_of, ungrouped_rows

    if scheme.groups == "prompt" and key_column(scheme, rows.table.column_names) == PROMPT and rows.keyed_everywhere:
        return []  # its groups are the true groups themselves
    try:
        grouping = grouping_of(rows.enc, scheme)
    except SchemeError:  # a scheme that cannot group these rows made no advantages either
        return []
    tail = torch.zeros(rows.rows, dtype=torch.bool)
    ungrouped = ungrouped_rows(rows.enc, scheme)
    if ungrouped is not None:
        tail[ungrouped.cpu()] = True
    codes = grouping.codes.cpu() if grouping.codes.numel() == rows.rows else torch.zeros(rows.rows, dtype=torch.int64)
    hits = tail_rows(rows, scheme, tail)
    return hits + compare_groupings(rows, scheme, codes, max(grouping.count, 1), tail)


def _batch_variants() -> list[Scheme]:
    from ..presets import get_scheme

    return [get_scheme(name) for name in ("batch", "areal-batch", "roll-grpo-batch")]


def _slice_variants(n: int) -> list[Scheme]:
    base = Scheme(groups="positional", n=n, remainder="unnormalized")
    return [
        base,
        replace(base, eps=1e-5),
        replace(base, scale="none"),
        replace(base, std="population", eps=1e-8),
        replace(base, std="population"),
    ]


def search_grouping(rows: Rows, candidates: list[Scheme]) -> list[Hit]:
    """Where no preset reproduces the recorded advantages: each grouping defect's signature, refit on the rows."""
    for search in (_batch_steps, _slice_fits, _by_trajectory):
        hits = search(rows)
        if hits:
            return hits
    return key_fits(rows, candidates)


def _batch_steps(rows: Rows) -> list[Hit]:
    for scheme in _batch_variants():
        values = rows.values_of(scheme)
        if values is None:
            continue
        if not rows.groups:
            return []
        missed = rows.present & ~rows.matches(values)
        step, steps = rows.step, rows.enc.steps
        missed_per_step = torch.bincount(step[missed], minlength=steps)
        keyed = rows.group >= 0
        several = _mixed(step[keyed], rows.group[keyed], steps)  # a step of several prompts
        fitted = (missed_per_step == 0) & several
        if bool(fitted.any()):
            return compare_groupings(rows, scheme, step, steps, ~fitted.index_select(0, step))
    return []


def _candidate_sizes(rows: Rows) -> list[int]:
    sizes = rows.group_sizes[rows.group_sizes >= 2]
    if not sizes.numel():
        return []
    values, counts = torch.unique(sizes, return_counts=True)
    ranked = values[torch.argsort(-counts, stable=True)].tolist()
    return list(dict.fromkeys([*ranked[:2], int(sizes.max())]))


def _slice_fits(rows: Rows) -> list[Hit]:
    from ..engine.groups import grouping_of, ungrouped_rows

    for n in _candidate_sizes(rows):
        for scheme in _slice_variants(n):
            values = rows.values_of(scheme)
            if values is None:
                continue
            tail = torch.zeros(rows.rows, dtype=torch.bool)
            ungrouped = ungrouped_rows(rows.enc, scheme)
            if ungrouped is not None:
                tail[ungrouped.cpu()] = True
            matched = rows.matches(values)
            if rows.share(matched[~tail]) < ALMOST_ALL or rows.share(matched) < ALMOST_ALL:
                continue
            grouping = grouping_of(rows.enc, scheme)
            hits = tail_rows(rows, scheme, tail)
            hits += compare_groupings(rows, scheme, grouping.codes.cpu(), grouping.count, tail)
            if hits:
                return hits
    return []


def _by_trajectory(rows: Rows) -> list[Hit]:
    if rows.enc.trajectory_count == 0 or not rows.groups:
        return []
    keyed = (rows.group >= 0) & (rows.trajectory >= 0)
    if not bool(keyed.any()):
        return []
    if not bool(_mixed(rows.group[keyed], rows.trajectory[keyed], rows.groups).any()):
        return []  # no prompt holds several trajectories
    for singleton in ("zero", "raw", "nan"):
        for scale in ("std", "none"):
            scheme = Scheme(group_by=TRAJECTORY, singleton=singleton, scale=scale)
            values = rows.values_of(scheme)
            if values is None or rows.share(rows.matches(values)) < ALMOST_ALL:
                continue
            trajectory = rows.trajectory.clamp_min(0)
            return compare_groupings(rows, scheme, trajectory, max(rows.enc.trajectory_count, 1))
    return []


SPLIT_ROWS = 10
"""The largest group whose partitions into sub-groups are searched (every subset is recomputed: 2^n - 1 of them)."""
MERGED_PAIRS = 400
"""The most pairs of a step's groups whose unions are recomputed."""


def _keyed_schemes(candidates: list[Scheme]) -> list[Scheme]:
    """The candidates that group by a key of the prompt, every sample a member: what a key that cuts prompts feeds."""
    keyed = [
        scheme
        for scheme in candidates
        if scheme.groups == "prompt" and scheme.members == "samples" and scheme.std_over == "group"
    ]
    return list(dict.fromkeys(replace(scheme, group_by="prompt", framework_key="") for scheme in keyed))


def _recomputed(rows: Rows, scheme: Scheme, members: list[np.ndarray]) -> list[np.ndarray]:
    """``scheme``'s advantages over each list of rows taken as one group of its own (one kernel call for all)."""
    from ..._table import make_table
    from ..engine.encode import encode
    from ..kernel import advantages

    at = np.concatenate(members)
    keys = np.repeat(np.arange(len(members)), [len(rows_of) for rows_of in members])
    table = make_table(reward=rows.reward.numpy()[at], prompt=keys)
    values = advantages(encode(table, "cpu"), scheme).to(torch.float64).cpu().numpy()
    return np.split(values, np.cumsum([len(rows_of) for rows_of in members])[:-1])


def _reproduced(rows: Rows, rows_of: np.ndarray, values: np.ndarray) -> bool:
    recorded = rows.advantage.numpy()[rows_of]
    tolerance = rows.tolerance(torch.from_numpy(values)).numpy()
    both_nan = np.isnan(values) & np.isnan(recorded)
    return bool((both_nan | (np.abs(values - recorded) <= tolerance)).all())


def _partitioned(valid: list[int], size: int) -> bool:
    """Whether the ``valid`` subsets (bit masks over ``size`` rows) cover the rows exactly, in two parts or more."""
    full = (1 << size) - 1
    subsets = [mask for mask in valid if mask != full]
    reachable = {0}
    frontier = [0]
    while frontier:
        mask = frontier.pop()
        low = (~mask) & (mask + 1)  # the lowest row not yet covered
        for subset in subsets:
            if subset & low and not subset & mask:
                grown = mask | subset
                if grown == full:
                    return True
                if grown not in reachable:
                    reachable.add(grown)
                    frontier.append(grown)
    return False


def _split_groups(rows: Rows, scheme: Scheme, groups: list[np.ndarray]) -> list[int]:
    """The groups (their index in ``groups``) whose rows split into sub-groups that ``scheme`` reproduces alone."""
    small = [index for index, rows_of in enumerate(groups) if 2 <= len(rows_of) <= SPLIT_ROWS]
    if not small:
        return []
    members, owners = [], []
    for index in small:
        rows_of = groups[index]
        for mask in range(1, 1 << len(rows_of)):
            members.append(rows_of[[bit for bit in range(len(rows_of)) if mask >> bit & 1]])
            owners.append((index, mask))
    try:
        values = _recomputed(rows, scheme, members)
    except SchemeError:
        return []
    valid: dict[int, list[int]] = {}
    for (index, mask), rows_of, recomputed in zip(owners, members, values, strict=True):
        if _reproduced(rows, rows_of, recomputed):
            valid.setdefault(index, []).append(mask)
    return [index for index in small if _partitioned(valid.get(index, []), len(groups[index]))]


def _merged_groups(rows: Rows, scheme: Scheme, groups: list[np.ndarray], steps: list[int]) -> list[int]:
    """The groups (their index) that ``scheme`` reproduces as one group with another group of their step."""
    pairs = [
        (first, second)
        for first in range(len(groups))
        for second in range(first + 1, len(groups))
        if steps[first] == steps[second]
    ][:MERGED_PAIRS]
    if not pairs:
        return []
    members = [np.concatenate([groups[first], groups[second]]) for first, second in pairs]
    try:
        values = _recomputed(rows, scheme, members)
    except SchemeError:
        return []
    found: set[int] = set()
    for pair, rows_of, recomputed in zip(pairs, members, values, strict=True):
        if _reproduced(rows, rows_of, recomputed):
            found.update(pair)
    return sorted(found)


def key_fits(rows: Rows, candidates: list[Scheme]) -> list[Hit]:
    """Groups the candidates miss that they reproduce once cut into sub-groups, or joined with another group of
    their step: a key that split or merged the prompts."""
    for scheme in _keyed_schemes(candidates):
        values = rows.values_of(scheme)
        if values is None:
            continue
        missed = rows.present & ~rows.matches(values) & (rows.group >= 0)
        if not bool(missed.any()) or rows.share(rows.matches(values)) < 0.5:
            continue
        codes = torch.unique(rows.group[missed])
        member = rows.present & torch.isfinite(rows.reward)
        groups = [torch.nonzero(member & (rows.group == code)).flatten().numpy() for code in codes.tolist()]
        steps = [int(rows.step[int(rows_of[0])]) if len(rows_of) else -1 for rows_of in groups]
        split = _split_groups(rows, scheme, groups)
        rest = [index for index in range(len(groups)) if index not in set(split)]
        merged = [
            rest[index] for index in _merged_groups(rows, scheme, [groups[i] for i in rest], [steps[i] for i in rest])
        ]
        if not split and not merged:
            continue
        flagged = torch.zeros(rows.rows, dtype=torch.bool)
        for index in (*split, *merged):
            flagged[torch.from_numpy(groups[index])] = True
        return [
            Hit(
                "key-splits-prompts",
                flagged,
                f"the advantages are {scheme} over a key that cuts prompts: {len(split):,} prompts split into "
                f"sub-groups, {len(merged):,} merged with another prompt ({int(flagged.sum()):,} rows)",
                {"scheme": str(scheme), "split": len(split), "merged": len(merged)},
            )
        ]
    return []
