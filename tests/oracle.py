"""A slow, plain-Python reading of shared/spec/schemes.md: the oracle the torch kernel is checked against.

Written from the spec's words, one sample and one group at a time, sharing no
code with rollaudit's kernel or metrics.
"""

from __future__ import annotations

import math
import struct
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


def round_to(value, dtype):
    """A float rounded to float32 or bfloat16 (to nearest, ties to even), written from the formats' bits."""
    if dtype == "float64" or not math.isfinite(value):
        return value
    single = struct.unpack("<f", struct.pack("<f", value))[0]
    if dtype == "float32":
        return single
    bits = struct.unpack("<I", struct.pack("<f", single))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round the low 16 bits away, ties to even
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _batch_groups(batch, scheme):
    """(rows, grouped) pairs of one batch: lists of rows (dicts, in batch order) forming its groups, and whether the
    rows form a group at all (False: the rows after the last full slice, left unnormalized)."""
    n = scheme.n
    size = len(batch)

    def slices():
        if n is None or size % n:
            raise OracleError("slices of n do not fit")
        return [(batch[start : start + n], True) for start in range(0, size, n)]

    def legacy():
        if scheme.batch_size is not None:
            prompts = scheme.batch_size
        elif any(key is None for key in keys):
            raise OracleError("legacy without keys needs batch_size")
        else:
            prompts = len(set(keys))
        if n is None:
            raise OracleError("legacy needs n")
        return slices() if size == n * prompts else [(batch, True)]

    if scheme.groups == "batch":
        return [(batch, True)]
    if scheme.groups == "positional":
        if scheme.remainder == "unnormalized" and n is not None:
            full = size // n * n
            return [(batch[start : start + n], True) for start in range(0, full, n)] + (
                [(batch[full:], False)] if full < size else []
            )
        return slices()
    column = "prompt" if scheme.groups == "legacy" else scheme.group_by
    keys = [row.get(column) for row in batch]
    if scheme.groups == "legacy":
        return legacy()
    if any(key is None for key in keys) and scheme.missing_keys == "legacy":
        return legacy()
    if all(key is None for key in keys):
        if n is None or size % n:
            raise OracleError("prompt keys are required when groups are not uniformly sized")
        return slices()
    if any(key is None for key in keys):
        raise OracleError(f"position {keys.index(None)} has no prompt key")
    grouped = OrderedDict()
    for row in batch:
        grouped.setdefault(row[column], []).append(row)
    return [(rows, True) for rows in grouped.values()]


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
        rewards = [row["reward"] for row in rows]
        if scheme.siblings == "equal" and any(not reward == rewards[0] for reward in rewards[1:]):
            raise OracleError("siblings with different rewards")
        finite = [reward for reward in rewards if math.isfinite(reward)]
        if scheme.representative is None and len(set(finite)) > 1:
            raise OracleError("no representative named, and the trajectory's rows have different rewards")
        if not finite:
            value = None
        elif scheme.representative in ("first", None):
            value = finite[0]
        elif scheme.representative == "last":
            value = finite[-1]
        elif scheme.representative == "max":
            value = max(finite)
        else:
            value = _mean(finite)
        units.append((rows, value))
    return units


def _guarded(centred, std, scheme):
    """A centred value divided as the scheme's std guard says."""
    if scheme.std_guard in ("positive", "varied"):
        return centred / (std + scheme.eps) if std > 0 else centred
    if scheme.std_guard == "cutoff":
        return centred / (std + scheme.eps) if std > scheme.eps else 0.0
    if std + scheme.eps == 0:
        return 0.0
    return centred / (std + scheme.eps)


def _advantage(value, number, units, members, batch_finite, scheme):
    """One unit's advantage, from the spec's words (dtype: rounding where the framework's tensors round)."""
    dtype = scheme.dtype
    if len(members) == 1:
        if scheme.singleton == "zero":
            return 0.0
        if scheme.singleton == "nan":
            return math.nan
        if scheme.scale == "std":
            if dtype == "float64":
                return value / (1 + scheme.eps)
            return round_to(round_to(value, "float32") / round_to(1 + scheme.eps, "float32"), dtype)
        return value
    if scheme.baseline == "leave-one-out":
        others = [v for k, (_, v) in enumerate(units) if k != number and v is not None]
        spread_set = others
    else:
        others = members
        spread_set = members
    centred = round_to(value - round_to(_mean(others), dtype), dtype)
    if scheme.scale == "none":
        return centred
    if scheme.std_over == "batch":
        spread_set = batch_finite
    if scheme.std_guard == "varied" and len(set(spread_set)) <= 1:
        return centred  # NeMo-RL PR #4158: rewards all of one value are never divided by their std
    std = round_to(_std(spread_set, scheme.std) or 0.0, dtype)
    if dtype != "float64":
        denominator = round_to(std + scheme.eps, dtype)
        if scheme.std_guard in ("positive", "varied") and not std > 0:
            return centred
        if scheme.std_guard == "cutoff" and not std > scheme.eps:
            return 0.0
        return round_to(centred / denominator, dtype)
    return _guarded(centred, std, scheme)


def _whiten(batch, values):
    """verl's masked_whiten over one batch, each row weighted by its response length."""
    weights = [row["response_length"] if math.isfinite(values[row["_row"]]) else 0 for row in batch]
    tokens = math.fsum(weights)
    mean = math.fsum(w * values[row["_row"]] for w, row in zip(weights, batch, strict=True) if w) / (tokens + 1e-8)
    variance = math.fsum(w * (values[row["_row"]] - mean) ** 2 for w, row in zip(weights, batch, strict=True) if w)
    for w, row in zip(weights, batch, strict=True):
        if not math.isfinite(values[row["_row"]]):
            continue
        if w == 0:
            values[row["_row"]] = 0.0
        elif tokens < 2:  # no variance to correct
            values[row["_row"]] = math.nan
        else:
            corrected = variance / (tokens + 1e-8) * tokens / (tokens - 1)
            values[row["_row"]] = (values[row["_row"]] - mean) / math.sqrt(corrected + 1e-8)


def oracle_advantages(rows, scheme):
    """Advantages for ``rows`` (dicts with step, position, prompt, trajectory, reward), in input order."""
    result = [None] * len(rows)
    for index, row in enumerate(rows):
        row["_row"] = index
        row["_reward"] = row["reward"]
        row["_exact"] = row[scheme.reward]
        row["reward"] = round_to(row[scheme.reward], scheme.dtype)
    steps = OrderedDict()
    for row in rows:
        steps.setdefault(row["step"], []).append(row)
    try:
        for batch in steps.values():
            batch = sorted(batch, key=lambda row: (row["position"], row["_row"]))
            batch_finite = [row["reward"] for row in batch if math.isfinite(row["reward"])]
            groups = _batch_groups(batch, scheme)
            for group, grouped in groups:
                if not grouped:  # rows after the last full slice: mean 0 and std 0, each row on its own
                    for row in group:
                        reward = row["reward"]
                        result[row["_row"]] = reward if scheme.scale == "none" else _guarded(reward, 0.0, scheme)
                    continue
                units = _units(group, scheme)
                members = [value for _, value in units if value is not None]
                for number, (unit_rows, value) in enumerate(units):
                    if value is None:
                        advantage = None
                    else:
                        advantage = _advantage(value, number, units, members, batch_finite, scheme)
                    for row in unit_rows:
                        result[row["_row"]] = advantage if math.isfinite(row["reward"]) else math.nan
            if scheme.whiten == "tokens":
                _whiten(batch, result)
            if scheme.drop == "constant":
                _drop_constant(batch, [group for group, grouped in groups if grouped], result)
        for row in rows:
            if not math.isfinite(row["reward"]):
                result[row["_row"]] = math.nan if scheme.nonfinite == "nan" else 0.0
    finally:
        for row in rows:
            row["reward"] = row.pop("_reward")
            del row["_row"], row["_exact"]
    return result


def _drop_constant(batch, groups, result):
    """``drop=constant``: a group whose finite rewards (as given, before any rounding) are all one value is not
    trained (NaN); where every group of the batch is, the group of the batch's first row is kept."""

    def constant(group):
        values = {row["_exact"] for row in group if math.isfinite(row["_exact"])}
        return len(values) == 1

    dropped = [group for group in groups if constant(group)]
    if len(dropped) == len(groups):
        first = batch[0]["_row"]
        dropped = [group for group in dropped if all(row["_row"] != first for row in group)]
    for group in dropped:
        for row in group:
            result[row["_row"]] = math.nan


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


def oracle_prime_advantages(rows, scheme):
    """prime-rl's estimators one row at a time (``scale=mean``, ``length_penalty``, ``subgroups``,
    ``baseline=decayed``) over rows with finite rewards and ``agent``, ``env``, ``scoring_order`` and the token
    counts; groups are (step, prompt); in input order."""
    dtype = scheme.dtype
    result = [None] * len(rows)
    if scheme.baseline == "decayed":
        baselines = {}
        for index in sorted(range(len(rows)), key=lambda i: rows[i]["scoring_order"]):
            row = rows[index]
            key = (row["env"], row["agent"])
            baseline = baselines.get(key, 0.0)
            result[index] = round_to(row["reward"] - baseline, dtype)
            baselines[key] = scheme.decay * baseline + (1 - scheme.decay) * row["reward"]
        return result
    groups = OrderedDict()
    for index, row in enumerate(rows):
        groups.setdefault((row["step"], row["prompt"]), []).append(index)
    named = [name for name in scheme.episode_agents.split("|") if name]
    for members in groups.values():
        rewards = {i: round_to(rows[i]["reward"], dtype) for i in members}
        mean = round_to(_mean([rewards[i] for i in members]), dtype)
        if scheme.subgroups == "agent":
            for i in members:
                key = (rows[i]["agent"], rows[i]["trajectory"] if rows[i]["agent"] in named else None)
                peers = [j for j in members if (rows[j]["agent"], rows[j]["trajectory"] if rows[j]["agent"] in named
                                                else None) == key]  # fmt: skip
                result[i] = round_to(rewards[i] - round_to(_mean([rewards[j] for j in peers]), dtype), dtype)
        elif scheme.scale == "mean":
            for i in members:
                result[i] = round_to(round_to(rewards[i] - mean, dtype) / mean, dtype) if mean > 0 else 0.0
        else:  # the linear length penalty
            frac = dict.fromkeys(members, 0.0)
            weights = zip(("num_output_tokens", "num_input_tokens", "num_turns"), (0.25, 0.1, 0.1), strict=True)
            for column, weight in weights:
                largest = max(1.0, max(float(rows[i][column]) for i in members))
                for i in members:
                    share = round_to(round_to(weight * rows[i][column], dtype) / largest, dtype)
                    frac[i] = round_to(frac[i] + share, dtype)
            shaped = {i: round_to(rewards[i] - round_to(mean * frac[i], dtype), dtype) for i in members}
            shaped_mean = round_to(_mean(list(shaped.values())), dtype)
            for i in members:
                result[i] = round_to(shaped[i] - shaped_mean, dtype)
    return result
