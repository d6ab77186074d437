"""A slow, plain-Python reading of shared/spec/schemes.md: the oracle the torch kernel is checked against.

Written from the spec's words, one sample and one group at a time, sharing no
code with rollaudit's kernel or metrics.
"""

from __future__ import annotations

import math
from collections import OrderedDict


class OracleError(Exception):
    pass


def _mean(values):
    return math.fsum(values) / len(values)


def _std(values, estimator):
    """Standard deviation of ``values``; None where undefined (too few values)."""
    count = len(values)
    divisor = count - 1 if estimator == "unbiased" else count
    if divisor <= 0:
        return None
    centre = _mean(values)
    return math.sqrt(math.fsum((value - centre) ** 2 for value in values) / divisor)


def _batch_groups(batch, scheme):
    """Lists of rows (dicts, in batch order) forming the groups of one batch."""
    n = scheme.n
    size = len(batch)

    def slices():
        if n is None or size % n:
            raise OracleError("slices of n do not fit")
        return [batch[start : start + n] for start in range(0, size, n)]

    if scheme.groups == "batch":
        return [batch]
    if scheme.groups == "positional":
        return slices()
    keys = [row["prompt"] for row in batch]
    if scheme.groups == "legacy":
        if scheme.batch_size is not None:
            prompts = scheme.batch_size
        elif any(key is None for key in keys):
            raise OracleError("legacy without keys needs batch_size")
        else:
            prompts = len(set(keys))
        return slices() if size == n * prompts else [batch]
    if all(key is None for key in keys):
        if n is None or size % n:
            raise OracleError("prompt keys are required when groups are not uniformly sized")
        return slices()
    if any(key is None for key in keys):
        raise OracleError(f"position {keys.index(None)} has no prompt key")
    grouped = OrderedDict()
    for row in batch:
        grouped.setdefault(row["prompt"], []).append(row)
    return list(grouped.values())


def _units(group, scheme):
    """(rows, value or None) per member unit of a group."""
    if scheme.members == "samples":
        return [([row], row["reward"] if math.isfinite(row["reward"]) else None) for row in group]
    trajectories = OrderedDict()
    for number, row in enumerate(group):
        key = ("own", number) if row["trajectory"] is None else ("key", row["trajectory"])
        trajectories.setdefault(key, []).append(row)
    units = []
    for rows in trajectories.values():
        finite = [row["reward"] for row in rows if math.isfinite(row["reward"])]
        if not finite:
            value = None
        elif scheme.representative == "first":
            value = finite[0]
        elif scheme.representative == "max":
            value = max(finite)
        else:
            value = _mean(finite)
        units.append((rows, value))
    return units


def oracle_advantages(rows, scheme):
    """Advantages for ``rows`` (dicts with step, position, prompt, trajectory, reward), in input order."""
    result = [None] * len(rows)
    for index, row in enumerate(rows):
        row["_row"] = index
    steps = OrderedDict()
    for row in rows:
        steps.setdefault(row["step"], []).append(row)
    for batch in steps.values():
        batch = sorted(batch, key=lambda row: (row["position"], row["_row"]))
        batch_finite = [row["reward"] for row in batch if math.isfinite(row["reward"])]
        for group in _batch_groups(batch, scheme):
            units = _units(group, scheme)
            members = [value for _, value in units if value is not None]
            for number, (unit_rows, value) in enumerate(units):
                if value is None:
                    advantage = None
                elif len(members) == 1:
                    if scheme.singleton == "zero":
                        advantage = 0.0
                    elif scheme.singleton == "nan":
                        advantage = math.nan
                    elif scheme.scale == "std" and scheme.std_guard == "eps":
                        advantage = value / (1 + scheme.eps)
                    else:
                        advantage = value
                else:
                    if scheme.baseline == "leave-one-out":
                        others = [v for k, (_, v) in enumerate(units) if k != number and v is not None]
                        spread_set = others
                    else:
                        others = members
                        spread_set = members
                    centred = value - _mean(others)
                    if scheme.scale == "none":
                        advantage = centred
                    else:
                        if scheme.std_over == "batch":
                            spread_set = batch_finite
                        std = _std(spread_set, scheme.std) or 0.0
                        if scheme.std_guard == "positive":
                            advantage = centred / std if std > 0 else centred
                        else:
                            advantage = centred / (std + scheme.eps)
                for row in unit_rows:
                    if not math.isfinite(row["reward"]):
                        result[row["_row"]] = math.nan if scheme.nonfinite == "nan" else 0.0
                    else:
                        result[row["_row"]] = advantage
    for row in rows:
        del row["_row"]
    return result


def oracle_sign(value, tol=1e-6):
    return 0 if abs(value) <= tol else (1 if value > 0 else -1)


def oracle_metrics(scheme_values, reference_values, lengths=None, tol=1e-6):
    """The spec's audit metrics, one sample at a time."""
    pairs = [
        (s, r, None if lengths is None else lengths[i])
        for i, (s, r) in enumerate(zip(scheme_values, reference_values, strict=True))
        if not (math.isnan(s) or math.isnan(r))
    ]
    compared = len(pairs)
    sign_pairs = [(oracle_sign(s, tol), oracle_sign(r, tol)) for s, r, _ in pairs]
    nonzero_s = sum(1 for a, _ in sign_pairs if a != 0)
    nonzero_r = sum(1 for _, b in sign_pairs if b != 0)
    flips = [a != b for a, b in sign_pairs]
    out = {
        "compared": compared,
        "sign_flip_rate": sum(flips) / compared if compared else None,
        "strict_flip_rate": sum(1 for a, b in sign_pairs if a * b == -1) / compared if compared else None,
        "nonzero": nonzero_s,
        "nonzero_reference": nonzero_r,
        "nonzero_inflation": nonzero_s / nonzero_r if nonzero_r else None,
        "spurious_nonzero": sum(1 for a, b in sign_pairs if b == 0 and a != 0),
        "lost_signal": sum(1 for a, b in sign_pairs if b != 0 and a == 0),
        "max_abs_diff": max((abs(s - r) for s, r, _ in pairs), default=None),
        "mean_abs_diff": math.fsum(abs(s - r) for s, r, _ in pairs) / compared if compared else None,
    }
    known = [(flip, length) for flip, (_, _, length) in zip(flips, pairs, strict=True) if length is not None]
    total_length = sum(length for _, length in known)
    out["token_flip_rate"] = (
        sum(length for flip, length in known if flip) / total_length if known and total_length else None
    )
    weights = [1.0 if length is None else length for _, _, length in pairs]
    cross = math.fsum(w * s * r for w, (s, r, _) in zip(weights, pairs, strict=True))
    norm_s = math.fsum(w * s * s for w, (s, _, _) in zip(weights, pairs, strict=True))
    norm_r = math.fsum(w * r * r for w, (_, r, _) in zip(weights, pairs, strict=True))
    out["advantage_cosine"] = cross / math.sqrt(norm_s * norm_r) if norm_s > 0 and norm_r > 0 else None
    return out
