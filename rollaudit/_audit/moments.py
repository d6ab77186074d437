"""Group statistics from moments in a reduced dtype, summed in the order the framework's matrix product sums them.

NeMo-RL forms each member's baseline and std from float32 moments: a 0/1 mask matrix times the rewards and times
their squares (``torch.matmul``), then ``sqrt((mean of r^2 - mean^2) * n/(n-1))``. Mean of squares minus squared
mean cancels: for a group of equal rewards that float32 cannot hold exactly (0.3, 0.7) the difference can be a
few units in the last place instead of 0, a std of ~1e-4 that turns a zero advantage into ~3e-4, and for a member
whose leave-one-out peers share one reward while it does not, a std of rounding noise that blows its advantage up
to thousands. Whether it does, and by how much, depends on the order of the float32 sums, so the sums here follow
that order.

PyTorch's CPU build computes the ``N x N`` matrix times a vector with MKL's ``sgemv``, which sums the matrix's rows
with two kernels (read off this build by probing which terms each output adds first; the order does not depend on
the values, the group's place in the batch or the thread count):

* the rows of the leading blocks of 4 (all rows where ``N`` is a multiple of 4): a sequential head of
  ``(N - 1) % 4 + 1`` terms that continues as lane 0, then four lanes taking every fourth term (lane ``k`` the
  terms ``h + k, h + k + 4, ...``), combined as ``(lane0 + lane2) + (lane1 + lane3)``;
* the last ``N % 4`` rows (1 to 3): a sequential head of the first 4 terms that continues as lane 0, then
  ``(N - 4) // 8`` passes of 8 terms where ``N >= 12`` (none below), and the terms left after the passes added
  one by one at the end. The second of three or of two such rows spreads each pass over four lanes (the pass's
  terms ``k`` and ``k + 4`` to lane ``k``), combined as ``(lane0 + lane2) + (lane1 + lane3)``; the others over
  eight lanes (the pass's term ``k`` to lane ``k``), combined as
  ``((lane0 + lane4) + (lane2 + lane6)) + ((lane1 + lane5) + (lane3 + lane7))``.

That is bit for bit this build's order (MKL 2024.2 on x86-64); another MKL version or CPU dispatch, another BLAS,
or a GPU run (cuBLAS) can sum in another order, where the values here are within a few units in the last place
except where a std of rounding noise divides (a blow-up's size follows the noise).

The masked-out term of a leave-one-out row is a 0 in the same place (adding 0 is exact), so in the leading
blocks a member's own lane is summed again without it and the other lanes are the group's; each of the last
rows is summed on its own with its own term 0. Everything else is the framework's own elementwise arithmetic
on tensors of its dtype.
"""

from __future__ import annotations

import torch

from .engine.encode import F64
from .engine.groups import Segments
from .schemes import Scheme

LANES = 4
# The kernel of a matrix's last N % 4 rows: a head of 4 terms, then passes of 8.
LAST_HEAD = 4
LAST_PASS = 8


def _member_positions(codes: torch.Tensor, order: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(place of each member in its group in batch ``order``, members per group): the column of the mask matrix
    each member's reward sits in."""
    by_order = torch.argsort(order)
    by_group = by_order[torch.sort(codes[by_order], stable=True).indices]
    sizes = torch.bincount(codes, minlength=count)
    starts = torch.cumsum(sizes, 0) - sizes
    place = torch.empty_like(codes)
    place[by_group] = torch.arange(codes.numel(), device=codes.device) - starts[codes[by_group]]
    return place, sizes


def _lane_sums(
    terms: torch.Tensor, group: torch.Tensor, place: torch.Tensor, sizes: torch.Tensor, leave_one_out: bool
) -> torch.Tensor:
    """Each member's sum of its group's ``terms`` (one column per quantity), every term but its own under
    ``leave_one_out``, added in the lane order of the module's docstring in ``terms``' dtype."""
    members, columns = terms.shape
    size = sizes[group]
    head = (size - 1).remainder(LANES) + 1
    beyond = place - head
    in_head = beyond < 0
    lane = torch.where(in_head, 0, beyond.remainder(LANES))
    slot = torch.where(in_head, place, beyond.div(LANES, rounding_mode="floor") + torch.where(lane == 0, head, 0))
    lane_code = group * LANES + lane
    lane_count = sizes.numel() * LANES
    lane_length = torch.zeros(lane_count, dtype=torch.int64, device=terms.device)
    lane_length.scatter_reduce_(0, lane_code, slot + 1, "amax")
    lane_total = torch.zeros(lane_count, columns, dtype=terms.dtype, device=terms.device)
    without_own = torch.zeros_like(terms) if leave_one_out else None
    # Lanes of similar length side by side as dense rows (lengths up to a power of two; the padding adds
    # exact zeros at the end), so that a lane of length m costs m steps and each step is a slice.
    bucket = torch.ceil(torch.log2(lane_length.clamp(min=1).to(torch.float64))).to(torch.int64)
    member_bucket = bucket[lane_code]
    for level in torch.unique(bucket[lane_length > 0]).tolist():
        lanes = torch.nonzero((bucket == level) & (lane_length > 0)).squeeze(1)
        row_of_lane = torch.full((lane_count,), -1, dtype=torch.int64, device=terms.device)
        row_of_lane[lanes] = torch.arange(lanes.numel(), device=terms.device)
        held = torch.nonzero(member_bucket == level).squeeze(1)
        rows, slots = row_of_lane[lane_code[held]], slot[held]
        width = 1 << level
        dense = torch.zeros(lanes.numel(), width, columns, dtype=terms.dtype, device=terms.device)
        dense[rows, slots] = terms[held]
        total = torch.zeros(lanes.numel(), columns, dtype=terms.dtype, device=terms.device)
        before = torch.zeros_like(dense) if leave_one_out else None
        for at in range(width):
            if before is not None:
                # Every member before this slot adds the slot's term; the member at it starts from the lane so far.
                before[:, :at] += dense[:, at : at + 1]
                before[:, at] = total
            total = total + dense[:, at]
        lane_total[lanes] = total
        if without_own is not None and before is not None:
            without_own[held] = before[rows, slots]
    lanes_of_member = lane_total.view(-1, LANES, columns)[group]
    if without_own is not None:
        lanes_of_member[torch.arange(members, device=terms.device), lane] = without_own
    return (lanes_of_member[:, 0] + lanes_of_member[:, 2]) + (lanes_of_member[:, 1] + lanes_of_member[:, 3])


def _last_rows_sums(
    terms: torch.Tensor, group: torch.Tensor, place: torch.Tensor, sizes: torch.Tensor, leave_one_out: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(members, their sums) for the members in the last ``N % 4`` places of their group (the matrix's last rows),
    each sum of its group's ``terms`` (its own a 0 under ``leave_one_out``) in the second kernel's order of the
    module's docstring, in ``terms``' dtype."""
    columns = terms.shape[1]
    device = terms.device
    size = sizes[group]
    last = torch.nonzero(place >= size - size.remainder(LANES)).squeeze(1)
    sums = torch.zeros(last.numel(), columns, dtype=terms.dtype, device=device)
    if last.numel() == 0:
        return last, sums
    has_last = sizes.remainder(LANES) > 0
    passes = torch.where(sizes >= LAST_HEAD + LAST_PASS, (sizes - LAST_HEAD).div(LAST_PASS, rounding_mode="floor"), 0)
    passes_end = LAST_HEAD + LAST_PASS * passes
    last_group, last_place = group[last], place[last]
    last_left = sizes[last_group].remainder(LANES)
    four_lanes = (last_left >= 2) & (last_place == sizes[last_group] - last_left + 1)
    # Groups with a similar number of passes side by side as dense rows, one per group (up to a power of two
    # passes; the padding adds exact zeros at the end of each lane), so that a row of m passes costs about m steps.
    bucket = torch.ceil(torch.log2((passes + 1).to(torch.float64))).to(torch.int64)
    last_bucket = bucket[last_group]
    for level in torch.unique(bucket[has_last]).tolist():
        most = (1 << level) - 1
        body_end = LAST_HEAD + LAST_PASS * most
        width = body_end + LAST_PASS - 1  # the terms after the passes are fewer than a pass
        held = torch.nonzero(has_last & (bucket == level)).squeeze(1)
        slot_of_group = torch.full_like(sizes, -1)
        slot_of_group[held] = torch.arange(held.numel(), device=device)
        members = torch.nonzero(slot_of_group[group] >= 0).squeeze(1)
        member_group = group[members]
        column = _last_rows_column(place[members], passes_end[member_group], body_end)
        by_group = torch.zeros(held.numel(), width, columns, dtype=terms.dtype, device=device)
        by_group.view(-1, columns)[slot_of_group[member_group] * width + column] = terms[members]
        rows = torch.nonzero(last_bucket == level).squeeze(1)
        row_group = last_group[rows]
        dense = by_group.index_select(0, slot_of_group[row_group])
        if leave_one_out:
            own = _last_rows_column(last_place[rows], passes_end[row_group], body_end)
            dense[torch.arange(rows.numel(), device=device), own] = 0.0
        total = dense[:, 0]
        for at in range(1, LAST_HEAD):
            total = total + dense[:, at]
        if most:
            body = dense[:, LAST_HEAD:body_end].reshape(rows.numel(), most, LAST_PASS, columns)
            eight = torch.zeros(rows.numel(), LAST_PASS, columns, dtype=terms.dtype, device=device)
            eight[:, 0] = total
            four = eight[:, :LANES].clone()
            for at in range(most):
                eight = eight + body[:, at]
                four = four + body[:, at, :LANES]
                four = four + body[:, at, LANES:]
            by_eight = ((eight[:, 0] + eight[:, 4]) + (eight[:, 2] + eight[:, 6])) + (
                (eight[:, 1] + eight[:, 5]) + (eight[:, 3] + eight[:, 7])
            )
            by_four = (four[:, 0] + four[:, 2]) + (four[:, 1] + four[:, 3])
            total = torch.where(four_lanes[rows].unsqueeze(1), by_four, by_eight)
        for at in range(body_end, width):
            total = total + dense[:, at]
        sums[rows] = total
    return last, sums


def _last_rows_column(place: torch.Tensor, passes_end: torch.Tensor, body_end: int) -> torch.Tensor:
    """The column of the term in ``place`` in a dense row of the last rows' kernel: the head and the passes in
    place order, the terms after a group's passes from ``body_end`` on (after the bucket's longest passes)."""
    return torch.where(place < passes_end, place, place - passes_end + body_end)


def moment_advantages(
    scheme: Scheme,
    groups: Segments,
    value: torch.Tensor,
    count: torch.Tensor,
    order: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Each member's advantage with its baseline and std from moments in ``dtype`` (float64 values out).

    ``value``: the members' rewards (0 for a member left out, which ``count``, the members per group that
    count, does not include); ``order``: the members' batch order, which places them in their group's sums.
    A group of at most one counted member gives 0 (NeMo-RL sets the baseline to the reward); the caller patches
    ``singleton`` where it says otherwise.
    """
    members = value.numel()
    codes = groups.codes if not groups.single else torch.zeros(members, dtype=torch.int64, device=value.device)
    place, sizes = _member_positions(codes, order, groups.count)
    reward = value.to(dtype)
    terms = torch.stack([reward, reward.pow(2)], dim=1)
    leave_one_out = scheme.baseline == "leave-one-out"
    sums = _lane_sums(terms, codes, place, sizes, leave_one_out)
    last, last_sums = _last_rows_sums(terms, codes, place, sizes, leave_one_out)
    sums[last] = last_sums
    counted = count.to(dtype)[codes] - int(leave_one_out)
    baseline = sums[:, 0] / counted
    variance = sums[:, 1] / counted - baseline.square()
    if scheme.std == "unbiased":
        variance = variance * (counted / (counted - 1))
    std = variance.sqrt().nan_to_num(0)  # a negative radicand or 0 * inf (one other member): no spread
    centred = reward - baseline
    if scheme.std_guard == "positive":
        advantage = torch.where(std > 0, centred / (std + scheme.eps), centred)
    elif scheme.std_guard == "cutoff":
        advantage = torch.where(std > scheme.eps, centred / (std + scheme.eps), torch.zeros_like(centred))
    else:
        advantage = centred / (std + scheme.eps)
    lone = count[codes] <= 1
    return torch.where(lone, 0.0, advantage.to(F64))
