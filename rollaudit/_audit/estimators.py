"""Estimators beyond a group's mean and std (prime-rl's algorithm classes), vectorised on torch.

``scale="mean"`` (MaxRL: ``(r - m) / m``, 0 where the group mean m <= 0), ``length_penalty="linear"`` (GRPO with
the linear length penalty), ``subgroups="agent"`` (hierarchical GRPO: the baseline of an agent's sub-group inside
the group) and ``baseline="decayed"`` (RAE: one running baseline per (env, agent) over the whole run, in scoring
order). The kernel hands a scheme using any of them here (``advantages``). Semantics: ``shared/spec/schemes.md``.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from .._errors import NotAuditable
from .._table import AGENT, ENV, LENGTH_COLUMNS, SCORING_ORDER, TRAJECTORY
from .engine.encode import F64, Encoded
from .engine.groups import Segments, grouping_of
from .schemes import Scheme

# prime-rl's LinearLengthPenaltyConfig defaults: weights of the output tokens, input tokens and turns.
LENGTH_WEIGHTS = (0.25, 0.1, 0.1)
# Rows per block of the decayed sums: decay**-(block - 1) stays far inside float64 (see _exclusive_decayed_sums).
_MOST_BLOCK = 64
_LARGEST_EXPONENT = 600.0


def _rounded(values: torch.Tensor, scheme: Scheme) -> torch.Tensor:
    """As the framework's tensors of the scheme's dtype hold ``values`` (float64 back)."""
    if scheme.dtype == "float64":
        return values
    kind = torch.float32 if scheme.dtype == "float32" else torch.bfloat16
    return values.to(kind).to(F64)


def _column(enc: Encoded, name: str, scheme: Scheme, why: str) -> np.ndarray:
    """A column of the table as numpy, or NotAuditable naming it (absent, or null on some row)."""
    table = enc.table
    label = scheme.name or "scheme"
    if name not in table.column_names:
        raise NotAuditable(f"{label} needs the column {name!r} ({why}); this table has none")
    column = table.column(name)
    if column.null_count:
        raise NotAuditable(f"{label} needs {name!r} on every row ({why}); {column.null_count:,} rows have none")
    combined = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return combined.to_numpy(zero_copy_only=False)


def _tensor(values: np.ndarray, enc: Encoded) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(values), device=enc.device)


def _member_mean(groups: Segments, value: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Each group's mean over its valid members (float64 sums)."""
    count = groups.sizes if valid is None else groups.sum(valid.to(F64))
    return groups.sum(value) / count.clamp(min=1)


def advantages(enc: Encoded, scheme: Scheme) -> torch.Tensor:
    """Advantage of every row under a scheme ``uses_estimator`` covers, float64, in row order; NaN where the
    reward is not finite (left out of every statistic)."""
    enc = enc.with_reward(scheme.reward)
    valid = None if enc.all_finite else enc.finite
    reward = enc.reward if valid is None else torch.where(valid, enc.reward, 0.0)
    if scheme.baseline == "decayed":
        result = _decayed(enc, scheme, reward, valid)
    else:
        groups = grouping_of(enc, scheme).segments
        if scheme.subgroups != "none":
            result = _subgroup_centred(enc, scheme, groups, reward, valid)
        elif scheme.length_penalty != "none":
            result = _length_penalised(enc, scheme, groups, reward, valid)
        else:
            result = _mean_scaled(scheme, groups, reward, valid)
    return result if valid is None else result.masked_fill(~valid, torch.nan)


def _mean_scaled(scheme: Scheme, groups: Segments, reward: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """MaxRL: ``(r - m) / m`` with m the group mean, every member 0 where m <= 0."""
    value = _rounded(reward, scheme)
    mean = groups.spread(_rounded(_member_mean(groups, value, valid), scheme))
    quotient = _rounded(_rounded(value - mean, scheme) / torch.where(mean > 0, mean, 1.0), scheme)
    return torch.where(mean > 0, quotient, 0.0)


def _length_penalised(
    enc: Encoded, scheme: Scheme, groups: Segments, reward: torch.Tensor, valid: torch.Tensor | None
) -> torch.Tensor:
    """GRPO with the linear length penalty: ``frac`` = the weighted shares of the group's largest output tokens,
    input tokens and turns (each maximum at least 1), ``s = r - mean(r) * frac``, ``A = s - mean(s)``."""
    why = "the token counts of the length penalty: calls' usage and sampled turns"
    value = _rounded(reward, scheme)
    frac = torch.zeros_like(value)
    for name, weight in zip(LENGTH_COLUMNS, LENGTH_WEIGHTS, strict=True):
        counts = _rounded(_tensor(_column(enc, name, scheme, why).astype(np.float64), enc), scheme)
        member_counts = counts if valid is None else torch.where(valid, counts, 0.0)
        largest = torch.zeros(groups.count, dtype=F64, device=enc.device)
        codes = groups.codes if not groups.single else torch.zeros(enc.rows, dtype=torch.int64, device=enc.device)
        largest.scatter_reduce_(0, codes, member_counts, "amax")
        share = _rounded(_rounded(weight * counts, scheme) / groups.spread(largest.clamp(min=1.0)), scheme)
        frac = _rounded(frac + share, scheme)
    mean = groups.spread(_rounded(_member_mean(groups, value, valid), scheme))
    shaped = _rounded(value - _rounded(mean * frac, scheme), scheme)
    shaped_mean = groups.spread(_rounded(_member_mean(groups, shaped, valid), scheme))
    return _rounded(shaped - shaped_mean, scheme)


def _subgroup_centred(
    enc: Encoded, scheme: Scheme, groups: Segments, reward: torch.Tensor, valid: torch.Tensor | None
) -> torch.Tensor:
    """Hierarchical GRPO: ``r`` minus the mean of its sub-group inside the group, keyed by (agent, episode) for
    the agents ``episode_agents`` names and by the agent alone otherwise; a one-member sub-group gives 0."""
    agents = _column(enc, AGENT, scheme, "the agent each row's trace ran as")
    agent_codes, _ = enc.key_codes(AGENT)
    named = [name for name in scheme.episode_agents.split("|") if name]
    per_episode = np.asarray(pc.is_in(pa.array(agents), value_set=pa.array(named, pa.string()))) if named else None
    episode = torch.full_like(agent_codes, -1)
    if per_episode is not None and per_episode.any():
        episodes, _ = enc.key_codes(TRAJECTORY)
        if bool((episodes[_tensor(per_episode, enc)] < 0).any()):
            label = scheme.name or "scheme"
            raise NotAuditable(f"{label} needs the episode (trajectory key) of every row of {', '.join(named)}")
        episode = torch.where(_tensor(per_episode, enc), episodes, episode)
    codes = groups.codes if not groups.single else torch.zeros(enc.rows, dtype=torch.int64, device=enc.device)
    keys = torch.stack([codes, agent_codes, episode], dim=1)
    _, sub_codes = torch.unique(keys, dim=0, return_inverse=True)
    subgroups = Segments(sub_codes, int(sub_codes.max()) + 1 if enc.rows else 0, enc.rows, enc.device)
    value = _rounded(reward, scheme)
    return _rounded(value - subgroups.spread(_rounded(_member_mean(subgroups, value, valid), scheme)), scheme)


def _decayed(enc: Encoded, scheme: Scheme, reward: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """RAE: one baseline per (env, agent), from 0, over the rows in ``scoring_order``: ``A = r - b``, then
    ``b = decay * b + (1 - decay) * r``. In closed form ``b_k = (1 - decay) * sum_{j<k} decay^(k-1-j) r_j``,
    summed per sequence in float64 (``_exclusive_decayed_sums``); rows whose reward is not finite are left out."""
    why = "the run's scoring sequence, recoverable only from dumps that start at the run's first step with no gap"
    order = _tensor(_column(enc, SCORING_ORDER, scheme, why).astype(np.int64), enc)
    _column(enc, ENV, scheme, "each row's environment")
    _column(enc, AGENT, scheme, "the agent each row's trace ran as")
    env_codes, env_count = enc.key_codes(ENV)
    agent_codes, agent_count = enc.key_codes(AGENT)
    sequence = env_codes * max(agent_count, 1) + agent_codes
    if valid is not None:  # rows without a finite reward never reach a baseline
        sequence = torch.where(valid, sequence, env_count * max(agent_count, 1))
    span = int(order.max()) + 1 if enc.rows else 1
    rows = torch.argsort(sequence * span + order, stable=True)
    lengths = torch.bincount(sequence, minlength=int(sequence.max()) + 1 if enc.rows else 0)
    lengths = lengths[lengths > 0]
    decay = float(scheme.decay)
    sums = _exclusive_decayed_sums(reward.index_select(0, rows), lengths, decay)
    baseline = torch.empty_like(reward).index_copy_(0, rows, sums.mul_(1.0 - decay))
    return _rounded(reward - baseline, scheme)


def _exclusive_decayed_sums(values: torch.Tensor, lengths: torch.Tensor, decay: float) -> torch.Tensor:
    """``y_k = sum_{j<k} decay^(k-1-j) x_j`` within each sequence (``lengths``, laid out one after another).

    Each sequence is cut into blocks of at most ``_MOST_BLOCK`` rows, short enough that ``decay^-i`` cannot
    overflow: inside a block, ``y`` is ``decay^(i-1)`` times a cumulative sum of ``decay^-i x_i``; what earlier
    blocks carry in is the same recurrence over the blocks' decayed totals with decay ``decay^block``, solved the
    same way (a level per factor of ``_MOST_BLOCK`` rows)."""
    count = values.numel()
    if count == 0 or decay == 1.0:
        return torch.zeros_like(values)  # decay 1: the baseline never moves from 0
    device = values.device
    if decay == 0.0:  # decay^0 = 1 for the previous row, 0 for all others
        shifted = torch.cat([torch.zeros(1, dtype=F64, device=device), values[:-1]])
        starts = torch.cumsum(lengths, 0) - lengths
        return shifted.index_fill_(0, starts[lengths > 0], 0.0)
    block = max(2, min(_MOST_BLOCK, int(_LARGEST_EXPONENT / -math.log(decay))))
    sequences = lengths.numel()
    starts = torch.cumsum(lengths, 0) - lengths
    sequence = torch.repeat_interleave(torch.arange(sequences, device=device), lengths)
    place = torch.arange(count, device=device) - starts.index_select(0, sequence)
    inner = place % block
    blocks_per_sequence = (lengths + block - 1) // block
    block_start = torch.cumsum(blocks_per_sequence, 0) - blocks_per_sequence
    block_of = block_start.index_select(0, sequence) + place // block
    blocks = int(blocks_per_sequence.sum())
    powers = torch.pow(torch.tensor(decay, dtype=F64, device=device), torch.arange(block, dtype=F64, device=device))
    grid = torch.zeros(blocks, block, dtype=F64, device=device)
    grid[block_of, inner] = values / powers.index_select(0, inner)
    running = torch.cumsum(grid, dim=1)
    # Exclusive: the sum up to the row before, decayed to this row (0 for a block's first row).
    before = torch.where(inner > 0, running[block_of, (inner - 1).clamp(min=0)], 0.0)
    local = before * torch.where(inner > 0, powers.index_select(0, (inner - 1).clamp(min=0)), 0.0)
    if bool((blocks_per_sequence <= 1).all()):
        return local
    block_length = torch.bincount(block_of, minlength=blocks)
    total = running[torch.arange(blocks, device=device), block_length - 1] * powers.index_select(0, block_length - 1)
    carried = _exclusive_decayed_sums(total, blocks_per_sequence, decay**block)
    return local + carried.index_select(0, block_of) * powers.index_select(0, inner)
