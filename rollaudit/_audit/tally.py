"""The metric pass: one sweep over a scheme's advantages that counts and sums what every metric needs.

Per sample, a code for its pair of signs (the scheme's and the reference's,
or undefined where either is NaN) is counted per prompt group; the counts per
step and per run are sums of those. Per step, a few float sums (absolute
differences, their largest, the products of the cosine). The sweep goes a
piece of rows at a time through buffers made once, so that no step of it
writes fresh memory (on the CPU a fresh 8 MB temporary costs ten times the
arithmetic on it), and a piece inside one step reduces with plain sums.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from .encode import F64, Encoded, fresh
from .groups import Piece, Segments, step_segments

# Sign pair codes: 3 * (sign of the scheme + 1) + (sign of the reference + 1), 9 for a sample left out (undefined).
CODES = 10
UNDEFINED = CODES - 1
_PAIRS = [(scheme, reference) for scheme in (-1, 0, 1) for reference in (-1, 0, 1)]


def _codes_where(condition: Callable[[int, int], bool]) -> list[int]:
    return [code for code, (scheme, reference) in enumerate(_PAIRS) if condition(scheme, reference)]


COMPARED = list(range(UNDEFINED))
FLIPPED = _codes_where(lambda scheme, reference: scheme != reference)
STRICT = _codes_where(lambda scheme, reference: scheme * reference == -1)
NONZERO = _codes_where(lambda scheme, reference: scheme != 0)
NONZERO_REFERENCE = _codes_where(lambda scheme, reference: reference != 0)
SPURIOUS = _codes_where(lambda scheme, reference: scheme != 0 and reference == 0)
LOST = _codes_where(lambda scheme, reference: reference != 0 and scheme == 0)
# Per group, the categories a prompt's row shows, as sums of pair codes: one matrix product of the counts.
_CATEGORIES = torch.tensor(
    [[code in chosen for chosen in (COMPARED, FLIPPED, SPURIOUS, NONZERO_REFERENCE)] for code in range(CODES)],
    dtype=torch.float64,
)
FLOATS = ("abs_diff", "cross", "scheme_square", "reference_square", "token_flips", "token_compared")

# Rows per piece on the CPU: its buffers (8 MB of float64) stay warm from piece to piece.
PIECE = 1 << 20


def sign(values: torch.Tensor, tol: float) -> torch.Tensor:
    """-1, 0 or +1 with a zero band: ``|x| <= tol`` is 0 (NaN is 0)."""
    return (values > tol).to(torch.int8) - (values < -tol).to(torch.int8)


@dataclass
class Layout:
    """Where each sample is counted, and how much: its group (a prompt group, or its step where the table has
    none), its step, its token weight; with the buffers every scheme's pass reuses."""

    group: torch.Tensor
    group_count: int
    group_step: torch.Tensor  # per group code: its step code
    by_step: Segments  # the rows' steps: what per-step sums add into
    steps: int
    groups_per_step: torch.Tensor | None  # group codes per step, when codes are in step order (pair codes are)
    weight: torch.Tensor | None  # per row: its response length, 1 where unknown; None without lengths
    known_length: torch.Tensor | None  # per row: its response length, 0 where unknown
    token_lengths: bool  # whether any response length is known
    _buffers: dict = field(default_factory=dict, repr=False)
    _known_tokens: torch.Tensor | None = field(default=None, repr=False)

    @classmethod
    def of(
        cls,
        enc: Encoded,
        group: torch.Tensor | None = None,
        group_count: int = 0,
        present: torch.Tensor | None = None,
        present_step: torch.Tensor | None = None,
    ) -> Layout:
        """The layout of prompt groups (``group`` codes, ``present``: the codes with rows, each with its step code
        in ``present_step``), or of steps alone where ``group`` is None."""
        by_step = step_segments(enc)
        lengths = enc.response_length
        weight = known_length = None
        if lengths is not None:
            known = ~torch.isnan(lengths)
            weight, known_length = torch.where(known, lengths, 1.0), torch.where(known, lengths, 0.0)
        tokens = weight, known_length, lengths is not None and bool(known.any())
        if group is None:
            group_step = torch.arange(enc.steps, device=enc.device)
            return cls(enc.step, enc.steps, group_step, by_step, enc.steps, None, *tokens)
        assert present is not None and present_step is not None
        group_step = torch.zeros(group_count, dtype=torch.int64, device=enc.device)
        in_order = True
        if not enc.single_step:
            in_order = bool((present_step[1:] >= present_step[:-1]).all())
            group_step[present] = present_step
            if in_order:  # a code without rows takes the step of the code before it: codes stay in step order
                group_step = torch.cummax(group_step, 0).values
        per_step = torch.bincount(group_step, minlength=enc.steps) if in_order else None
        return cls(group, group_count, group_step, by_step, enc.steps, per_step, *tokens)

    def buffer(self, name: str, rows: int, dtype: torch.dtype) -> torch.Tensor:
        """A buffer of at least ``rows`` elements, made once per layout, name and thread (passes run side by side)."""
        key = (threading.get_ident(), name)
        held = self._buffers.get(key)
        if held is None or held.numel() < rows:
            held = self._buffers[key] = fresh(rows, dtype, self.group.device)
        return held[:rows]

    def pieces(self, rows: int) -> Iterator[Piece]:
        """Slices of ``PIECE`` rows on the CPU (all at once on a GPU), with the steps each holds."""
        return self.by_step.pieces(rows, min(PIECE, rows) if self.group.device.type == "cpu" else rows)

    def per_step(self, per_group: torch.Tensor) -> torch.Tensor:
        """Per-group rows (float64) summed per step."""
        if self.groups_per_step is None:
            total = torch.zeros(self.steps, *per_group.shape[1:], dtype=per_group.dtype, device=per_group.device)
            return total.index_add_(0, self.group_step, per_group)
        return torch.segment_reduce(per_group, "sum", lengths=self.groups_per_step, axis=0)

    def known_tokens(self) -> torch.Tensor:
        """The tokens of known response length per step, summed once."""
        assert self.known_length is not None
        if self._known_tokens is None:
            total = torch.zeros(self.steps, dtype=F64, device=self.known_length.device)
            for piece in self.pieces(self.known_length.numel()):
                self.by_step.add_sums(total, self.known_length[piece.rows], piece)
            self._known_tokens = total
        return self._known_tokens.clone()


@dataclass
class Reference:
    """The reference's advantages with what every scheme's pass reads of them, made once."""

    values: torch.Tensor
    sign: torch.Tensor  # int8 per row
    code: torch.Tensor  # int8 per row: its sign + 4, the reference's share of the pair code
    any_nan: bool
    _squares: tuple[Layout, torch.Tensor] | None = None

    @classmethod
    def of(cls, values: torch.Tensor, tol: float) -> Reference:
        signs = sign(values, tol)
        return cls(values, signs, signs + 4, bool(torch.isnan(values).any()))

    def squares(self, layout: Layout) -> torch.Tensor:
        """Token-weighted sum of the squared values per step (every sample compared), made once per layout."""
        if self._squares is None or self._squares[0] is not layout:
            total = torch.zeros(layout.steps, dtype=F64, device=self.values.device)
            for piece in layout.pieces(self.values.numel()):
                values = self.values[piece.rows]
                squares = torch.mul(values, values, out=layout.buffer("product", values.numel(), F64))
                layout.by_step.add_sums(
                    total, squares if layout.weight is None else squares.mul_(layout.weight[piece.rows]), piece
                )
            self._squares = layout, total
        return self._squares[1].clone()


@dataclass(frozen=True)
class Sums:
    """What every metric is made of, per segment (a step, or the whole run): samples by sign pair, sums of floats."""

    counts: torch.Tensor  # (segments, 10) samples per sign pair code
    floats: dict[str, torch.Tensor]  # per segment: abs_diff, cross, scheme_square, reference_square, tokens...
    max_abs: torch.Tensor
    token_lengths: bool  # whether any response length is known

    def whole(self) -> Sums:
        """The same sums for all segments as one (the whole run)."""
        return Sums(
            self.counts.sum(0, keepdim=True),
            {name: values.sum(0, keepdim=True) for name, values in self.floats.items()},
            self.max_abs.amax(0, keepdim=True) if self.max_abs.numel() else torch.zeros(1, dtype=F64),
            self.token_lengths,
        )


@dataclass(frozen=True)
class Tally:
    """One scheme's pass: its sums per step, and per group code the samples in each category and the sum of the
    advantages compared."""

    per_step: Sums
    group_categories: torch.Tensor  # (4, group codes): samples compared, flipped, spurious, non-zero reference
    group_advantage: torch.Tensor  # per group code


def tally(scheme: torch.Tensor, reference: Reference, layout: Layout, tol: float) -> Tally:
    """Count and sum ``scheme`` against ``reference``, a piece of rows at a time."""
    rows, device = scheme.numel(), scheme.device
    token_lengths = layout.token_lengths
    # Without a NaN on either side every sample is compared: no mask, and the reference's squares are shared.
    everywhere = not reference.any_nan and not bool(torch.isnan(scheme).any())
    size = min(PIECE, rows) if device.type == "cpu" else rows
    product, weighted = layout.buffer("product", size, F64), layout.buffer("weighted", size, F64)
    index, pair = layout.buffer("index", size, torch.int64), layout.buffer("pair", size, torch.int8)
    above, below = layout.buffer("above", size, torch.bool), layout.buffer("below", size, torch.bool)
    flipped_rows = layout.buffer("flipped", size, torch.bool)
    ones = layout.buffer("ones", size, F64).fill_(1.0)
    # Counts in float64 (exact below 2^53), in one buffer zeroed for each scheme.
    counts = layout.buffer("counts", layout.group_count * CODES, F64).zero_()
    group_advantage = torch.zeros(layout.group_count, dtype=F64, device=device)
    floats = {name: torch.zeros(layout.steps, dtype=F64, device=device) for name in FLOATS}
    max_abs = torch.zeros(layout.steps, dtype=F64, device=device)
    steps = layout.by_step
    # The reference against itself (the usual audit has it among the schemes): every pair of signs is equal and
    # every difference 0, so only the counts and the advantages per group are summed.
    itself = everywhere and scheme is reference.values
    for piece in layout.pieces(rows):
        n = piece.rows.stop - piece.rows.start
        s, r = scheme[piece.rows], reference.values[piece.rows]
        defined = None
        if not everywhere:
            defined = ~(torch.isnan(s) | torch.isnan(r))
            s, r = torch.where(defined, s, 0.0), torch.where(defined, r, 0.0)
        # The row's place in the counts: 10 x its group + the pair code, 3 x (the scheme's sign + 1) + the
        # reference's sign + 1, the scheme's sign being above minus below the zero band.
        place = torch.add(reference.code[piece.rows], layout.group[piece.rows], alpha=CODES, out=index[:n])
        if itself:
            place.add_(reference.sign[piece.rows], alpha=3)
        else:
            is_above = torch.gt(s, tol, out=above[:n]).view(torch.int8)
            is_below = torch.lt(s, -tol, out=below[:n]).view(torch.int8)
            place.add_(is_above, alpha=3).sub_(is_below, alpha=3)
            if defined is not None:  # left out: pair code 9 of its group
                torch.where(defined, place, layout.group[piece.rows] * CODES + UNDEFINED, out=place)
        counts.scatter_add_(0, place, ones[:n])
        group_advantage.scatter_add_(0, layout.group[piece.rows], s)
        if itself:
            continue
        if token_lengths:
            signs = torch.sub(is_above, is_below, out=pair[:n])
            flipped = torch.ne(signs, reference.sign[piece.rows], out=flipped_rows[:n])
            if defined is not None:
                flipped &= defined
            known_length = layout.known_length[piece.rows]
            steps.add_sums(floats["token_flips"], torch.mul(known_length, flipped, out=product[:n]), piece)
            if defined is not None:
                steps.add_sums(floats["token_compared"], torch.mul(known_length, defined, out=product[:n]), piece)
        difference = torch.sub(s, r, out=product[:n]).abs_()
        steps.add_sums(floats["abs_diff"], difference, piece)
        steps.raise_maxima(max_abs, difference, piece)
        # Token-weighted products (weight 1 without lengths, 0 for a sample left out).
        weight = layout.weight[piece.rows] if layout.weight is not None else None
        if defined is not None:
            weight = defined.to(F64) if weight is None else weight * defined
        scaled = s if weight is None else torch.mul(weight, s, out=weighted[:n])
        steps.add_sums(floats["cross"], torch.mul(scaled, r, out=product[:n]), piece)
        steps.add_sums(floats["scheme_square"], torch.mul(scaled, s, out=product[:n]), piece)
        if not everywhere:
            scaled = torch.mul(weight, r, out=weighted[:n])
            steps.add_sums(floats["reference_square"], torch.mul(scaled, r, out=product[:n]), piece)
    if itself:
        floats["cross"], floats["scheme_square"] = reference.squares(layout), reference.squares(layout)
    if everywhere:
        floats["reference_square"] = reference.squares(layout)
        if token_lengths:
            floats["token_compared"] = layout.known_tokens()
    if not token_lengths:
        del floats["token_flips"], floats["token_compared"]
    group_counts = counts.view(layout.group_count, CODES)
    per_step = Sums(layout.per_step(group_counts), floats, max_abs, token_lengths)
    return Tally(per_step, (group_counts @ _CATEGORIES.to(device)).T, group_advantage)


def tallies(values: dict[str, torch.Tensor], reference: Reference, layout: Layout, tol: float) -> dict[str, Tally]:
    """``tally`` of every scheme, by name; on the CPU side by side in threads (their scatters use one core each)."""
    workers = min(len(values), torch.get_num_threads())
    if layout.group.device.type != "cpu" or workers < 2:
        return {name: tally(tensor, reference, layout, tol) for name, tensor in values.items()}
    reference.squares(layout)  # shared: made once, before the threads
    if layout.token_lengths:
        layout.known_tokens()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollaudit") as pool:
        futures = {name: pool.submit(tally, tensor, reference, layout, tol) for name, tensor in values.items()}
        return {name: future.result() for name, future in futures.items()}


__all__ = [
    "CODES", "COMPARED", "FLIPPED", "LOST", "NONZERO", "NONZERO_REFERENCE", "SPURIOUS", "STRICT", "UNDEFINED",
    "Layout", "Reference", "Sums", "Tally", "sign", "tallies", "tally",
]  # fmt: skip
