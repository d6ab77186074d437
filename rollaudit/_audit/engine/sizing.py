"""How big the engine's pieces and buffers are, and when keys are counted in bins rather than sorted.

On the CPU, fresh memory is a cost of its own: the first touch of a new page can cost as much as the arithmetic
on it. So two-step passes (square then sum, gather then multiply) run a piece of rows at a time through one small
buffer that stays in cache. On a GPU a piece costs a kernel launch, so the whole tensor is one piece.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

PIECE_ROWS = 1 << 18
"""Rows per piece on the CPU: 2 MB of float64, warm from piece to piece; a pass's buffers in all (~20 MB a
thread) are few fresh pages."""


def piece_size(rows: int, device: torch.device) -> int:
    """Rows per piece: at most :data:`PIECE_ROWS` on the CPU, all of them on a GPU.

    >>> piece_size(10, torch.device("cpu")), piece_size(10**7, torch.device("cpu"))
    (10, 262144)
    """
    return max(min(PIECE_ROWS, rows) if device.type == "cpu" else rows, 1)


def pieces(rows: int, dtype: torch.dtype, device: torch.device) -> Iterator[tuple[slice, torch.Tensor]]:
    """Slices of :func:`piece_size` rows, each with a buffer of its length: one buffer, reused from piece to
    piece."""
    step = piece_size(rows, device)
    buffer = torch.empty(step, dtype=dtype, device=device)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        yield slice(start, stop), buffer[: stop - start]


def counted_in_bins(span: int, rows: int) -> bool:
    """Whether ``rows`` keys lying in ``[0, span)`` are counted in ``span`` bins (one pass, an empty bin costs
    little) rather than hashed or sorted: where the bins are not many more than the keys.

    >>> counted_in_bins(1000, 10), counted_in_bins(10**6, 10)
    (True, False)
    """
    return span <= 4 * rows + 1024
