"""The metric pass: one sweep over a scheme's advantages that counts and sums what every metric needs.

Per sample, a code for its pair of signs (the scheme's and the reference's,
or undefined where either is NaN) adds to five counts of its prompt group,
packed into one int64 word (one scatter for all five); the counts per step
and per run are sums of those. Per step, a few float sums (absolute
differences, their largest, the products of the cosine). The sweep goes a
piece of rows at a time through buffers made once a pass, so that no step of it
writes fresh memory (on the CPU a fresh 8 MB temporary costs ten times the
arithmetic on it), and a piece inside one step reduces with plain sums.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

import torch

from .encode import F64, Encoded, any_nan
from .groups import Piece, Segments, step_segments
from .sizing import piece_size
from .threads import SideBySide

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
# The counts every metric is made of, per group: each a sum over pair codes (the first four are a prompt's row).
# The others follow: lost = flipped - spurious - strict, nonzero = nonzero_reference + spurious - lost, undefined =
# samples - compared.
CLASSES = ("compared", "flipped", "spurious", "nonzero_reference", "strict")
_CLASS_CODES = (COMPARED, FLIPPED, SPURIOUS, NONZERO_REFERENCE, STRICT)
FLOATS = ("abs_diff", "cross", "scheme_square", "reference_square", "token_flips", "token_compared")


def sign(values: torch.Tensor, tol: float) -> torch.Tensor:
    """-1, 0 or +1 with a zero band: ``|x| <= tol`` is 0 (NaN is 0)."""
    return torch.gt(values, tol).view(torch.int8) - torch.lt(values, -tol).view(torch.int8)


def named_counts(counts: torch.Tensor) -> dict[str, torch.Tensor]:
    """Counts by class along the first axis, by name, with the two they imply: ``lost`` and ``nonzero``."""
    named = dict(zip(CLASSES, counts, strict=True))
    named["lost"] = named["flipped"] - named["spurious"] - named["strict"]
    named["nonzero"] = named["nonzero_reference"] + named["spurious"] - named["lost"]
    return named


@dataclass(frozen=True)
class Packing:
    """A group's class counts packed into int64 words, ``bits`` apiece: no group has 2^bits samples, so no count
    carries into the next, and one scatter per word adds all of a sample's counts (one word for groups under
    4096 samples)."""

    bits: int
    per_word: int
    table: torch.Tensor  # (words, pair codes) int64: what a sample of each pair code adds to each word

    @classmethod
    def of(cls, largest_group: int, device: torch.device) -> Packing:
        bits = max(1, int(largest_group).bit_length())
        per_word = 63 // bits
        table = torch.zeros(-(-len(CLASSES) // per_word), CODES, dtype=torch.int64)
        for index, codes in enumerate(_CLASS_CODES):
            word, place = divmod(index, per_word)
            table[word, codes] += 1 << (bits * place)
        return cls(bits, per_word, table.to(device))

    def unpack(self, words: torch.Tensor, name: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """One class's int64 counts per group from packed sums ``(words, groups)``."""
        word, place = divmod(CLASSES.index(name), self.per_word)
        shifted = torch.bitwise_right_shift(words[word], self.bits * place, out=out)
        return shifted.bitwise_and_((1 << self.bits) - 1)


@dataclass
class Layout:
    """Where each sample is counted, and how much: its group (a prompt group, or its step where the table has
    none), its step, its token weight."""

    group: torch.Tensor
    group_count: int
    group_step: torch.Tensor  # per group code: its step code
    by_step: Segments  # the rows' steps: what per-step sums add into
    steps: int
    groups_per_step: torch.Tensor | None  # group codes per step, when codes are in step order (pair codes are)
    weight: torch.Tensor | None  # per row: its response length, 1 where unknown; None without lengths
    known_length: torch.Tensor | None  # per row: its response length, 0 where unknown
    token_lengths: bool  # whether any response length is known
    packing: Packing
    step_samples: torch.Tensor  # float64 per step: its samples
    _known_tokens: torch.Tensor | None = field(default=None, repr=False)

    @classmethod
    def of(
        cls,
        enc: Encoded,
        group: torch.Tensor | None = None,
        group_count: int = 0,
        present: torch.Tensor | None = None,
        present_step: torch.Tensor | None = None,
        largest_group: int | None = None,
    ) -> Layout:
        """The layout of prompt groups (``group`` codes, ``present``: the codes with rows (None: every code), each
        with its step code in ``present_step``; no group has more than ``largest_group`` samples), or of steps alone
        where ``group`` is None."""
        by_step = step_segments(enc)
        lengths = enc.response_length
        weight = known_length = None
        if lengths is not None:
            known = ~torch.isnan(lengths)
            weight, known_length = torch.where(known, lengths, 1.0), torch.where(known, lengths, 0.0)
        if group is None:
            largest_group = int(enc.step_sizes.max()) if enc.rows else 0
        assert largest_group is not None, "prompt groups need their largest size (the counts' field width)"
        shared = (
            weight,
            known_length,
            lengths is not None and bool(known.any()),
            Packing.of(largest_group, enc.device),
            enc.step_sizes.to(F64),
        )
        if group is None:
            group_step = torch.arange(enc.steps, device=enc.device)
            return cls(enc.step, enc.steps, group_step, by_step, enc.steps, None, *shared)
        assert present_step is not None
        in_order = enc.single_step or bool((present_step[1:] >= present_step[:-1]).all())
        if present is None or present.numel() == group_count:  # every code has rows: their steps are the present ones'
            group_step = present_step
        else:
            group_step = torch.zeros(group_count, dtype=torch.int64, device=enc.device)
            if not enc.single_step:
                group_step[present] = present_step
                if in_order:  # a code without rows takes the step of the code before it: codes stay in step order
                    group_step = torch.cummax(group_step, 0).values
        per_step = torch.bincount(group_step, minlength=enc.steps) if in_order else None
        return cls(group, group_count, group_step, by_step, enc.steps, per_step, *shared)

    def pieces(self, rows: int) -> Iterator[Piece]:
        """Slices of :func:`~.sizing.piece_size` rows, with the steps each holds."""
        return self.by_step.pieces(rows)

    def count_per_step(self, per_group: torch.Tensor) -> torch.Tensor:
        """Int64 counts per group code summed per step, exactly (``per_group`` is used up: summed in place)."""
        if self.groups_per_step is None:
            total = torch.zeros(self.steps, dtype=torch.int64, device=per_group.device)
            return total.index_add_(0, self.group_step, per_group)
        # Codes in step order: each step's total is a difference of two running sums (an int64 running sum is
        # exact, and costs a third of a float64 segment reduction).
        running = torch.cumsum(per_group, 0, out=per_group)
        ends = torch.cumsum(self.groups_per_step, 0)
        before = ends - self.groups_per_step

        def running_at(groups: torch.Tensor) -> torch.Tensor:
            return torch.where(groups > 0, running.index_select(0, (groups - 1).clamp_(min=0)), 0)

        return running_at(ends) - running_at(before)

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
    any_nan: bool
    _squares: tuple[Layout, torch.Tensor] | None = None

    @classmethod
    def of(cls, values: torch.Tensor, tol: float) -> Reference:
        return cls(values, sign(values, tol), any_nan(values))

    def with_squares(self, layout: Layout) -> Reference:
        """This reference, its squares per step of ``layout`` made (see :meth:`squares`)."""
        self.squares(layout)
        return self

    def squares(self, layout: Layout) -> torch.Tensor:
        """Token-weighted sum of the squared values per step (every sample compared), made once per layout."""
        if self._squares is None or self._squares[0] is not layout:
            rows, device = self.values.numel(), self.values.device
            total = torch.zeros(layout.steps, dtype=F64, device=device)
            product = torch.empty(piece_size(rows, device), dtype=F64, device=device)
            for piece in layout.pieces(rows):
                values = self.values[piece.rows]
                squares = torch.mul(values, values, out=product[: values.numel()])
                layout.by_step.add_sums(
                    total, squares if layout.weight is None else squares.mul_(layout.weight[piece.rows]), piece
                )
            self._squares = layout, total
        return self._squares[1].clone()


@dataclass(frozen=True)
class Sums:
    """What every metric is made of, per segment (a step, or the whole run): samples, counts by class, sums of
    floats."""

    samples: torch.Tensor  # per segment
    counts: torch.Tensor  # (classes, segments): float64 counts in ``CLASSES`` order
    floats: dict[str, torch.Tensor]  # per segment: abs_diff, cross, scheme_square, reference_square, tokens...
    max_abs: torch.Tensor
    token_lengths: bool  # whether any response length is known

    def whole(self) -> Sums:
        """The same sums for all segments as one (the whole run)."""
        return Sums(
            self.samples.sum(0, keepdim=True),
            self.counts.sum(1, keepdim=True),
            {name: values.sum(0, keepdim=True) for name, values in self.floats.items()},
            self.max_abs.amax(0, keepdim=True) if self.max_abs.numel() else torch.zeros(1, dtype=F64),
            self.token_lengths,
        )


@dataclass(frozen=True)
class Tally:
    """One scheme's pass: its sums per step, and per group code its counts by class (packed) and the sum of the
    advantages compared."""

    per_step: Sums
    group_words: torch.Tensor  # (words, group codes) int64: the class counts, packed
    packing: Packing
    group_advantage: torch.Tensor  # per group code
    everywhere: bool  # whether every sample was compared (no NaN on either side)

    def group_count(self, name: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """Int64 per group code: its samples of one of ``CLASSES`` (into ``out``, if given)."""
        return self.packing.unpack(self.group_words, name, out)


def tally(scheme: torch.Tensor, reference: Reference, layout: Layout, tol: float) -> Tally:
    """Count and sum ``scheme`` against ``reference``, a piece of rows at a time."""
    rows, device = scheme.numel(), scheme.device
    token_lengths = layout.token_lengths
    # Without a NaN on either side every sample is compared: no mask, and the reference's squares are shared.
    everywhere = not reference.any_nan and not any_nan(scheme)
    size = piece_size(rows, device)

    # The pass's buffers, one piece long, reused from piece to piece.
    def buffer(dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(size, dtype=dtype, device=device)

    product, weighted = buffer(F64), buffer(F64)
    signs_buffer, pair_buffer = buffer(torch.int8), buffer(torch.int8)
    index, packed = buffer(torch.int32), buffer(torch.int64)
    above, below, flipped_rows = buffer(torch.bool), buffer(torch.bool), buffer(torch.bool)
    packing = layout.packing
    # The packed counts are the Tally's own (the per-prompt rows read them later): not a shared buffer.
    words = torch.zeros(packing.table.shape[0], layout.group_count, dtype=torch.int64, device=device)
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
        # The pair code, 3 x (the scheme's sign + 1) + the reference's sign + 1, in int8 (a pass over int8
        # costs a tenth of one over int64); the scheme's sign is above minus below the zero band.
        if itself:
            pair = torch.mul(reference.sign[piece.rows], 4, out=pair_buffer[:n]).add_(4)
        else:
            is_above = torch.gt(s, tol, out=above[:n]).view(torch.int8)
            is_below = torch.lt(s, -tol, out=below[:n]).view(torch.int8)
            signs = torch.sub(is_above, is_below, out=signs_buffer[:n])
            pair = torch.add(reference.sign[piece.rows], signs, alpha=3, out=pair_buffer[:n]).add_(4)
            if defined is not None:  # left out: pair code 9
                pair.masked_fill_(~defined, UNDEFINED)
        group, pair_index = layout.group[piece.rows], index[:n].copy_(pair)
        for word, table in zip(words, packing.table, strict=True):
            word.scatter_add_(0, group, torch.index_select(table, 0, pair_index, out=packed[:n]))
        group_advantage.scatter_add_(0, group, s)
        if itself:
            continue
        if token_lengths:
            flipped = torch.ne(signs, reference.sign[piece.rows], out=flipped_rows[:n])
            if defined is not None:
                flipped &= defined
            assert layout.known_length is not None  # token lengths known: so are the lengths
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
            assert weight is not None  # some sample left out: weighted by ``defined``
            scaled = torch.mul(weight, r, out=weighted[:n])
            steps.add_sums(floats["reference_square"], torch.mul(scaled, r, out=product[:n]), piece)
    if itself:
        floats, max_abs = _itself_floats(reference, layout)
    else:
        if everywhere:
            floats["reference_square"] = reference.squares(layout)
            if token_lengths:
                floats["token_compared"] = layout.known_tokens()
        if not token_lengths:
            del floats["token_flips"], floats["token_compared"]
    # Per step, class by class through one buffer of one group count.
    shifted = torch.empty(layout.group_count, dtype=torch.int64, device=device)
    step_counts = torch.stack([layout.count_per_step(packing.unpack(words, name, shifted)) for name in CLASSES])
    step_counts = step_counts.to(F64)
    per_step = Sums(layout.step_samples, step_counts, floats, max_abs, token_lengths)
    return Tally(per_step, words, packing, group_advantage, everywhere)


def _itself_floats(reference: Reference, layout: Layout) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The float sums per step, and the largest differences, of the reference against itself where every sample is
    compared: its squares for every product, every difference and flip 0."""
    device = reference.values.device
    floats = {name: torch.zeros(layout.steps, dtype=F64, device=device) for name in ("abs_diff", "token_flips")}
    for name in ("cross", "scheme_square", "reference_square"):
        floats[name] = reference.squares(layout)
    if layout.token_lengths:
        floats["token_compared"] = layout.known_tokens()
    else:
        del floats["token_flips"]
    return floats, torch.zeros(layout.steps, dtype=F64, device=device)


def reference_tally(reference: Reference, layout: Layout, other: Tally) -> Tally:
    """The reference against itself, from another scheme's pass that compared every sample: the same samples
    compared and the same reference signs (its classes ``compared`` and ``nonzero_reference``), no flip, every
    difference 0; only the advantages per group are summed (a third of a pass)."""
    assert other.everywhere and not reference.any_nan
    packing, device = layout.packing, reference.values.device
    kept = [CLASSES.index(name) for name in ("compared", "nonzero_reference")]
    field_masks = [0] * packing.table.shape[0]
    for index in kept:
        word, place = divmod(index, packing.per_word)
        field_masks[word] |= ((1 << packing.bits) - 1) << (packing.bits * place)
    words = other.group_words & torch.tensor(field_masks, dtype=torch.int64, device=device)[:, None]
    class_mask = torch.zeros(len(CLASSES), 1, dtype=F64, device=device)
    class_mask[kept] = 1.0
    group_advantage = torch.zeros(layout.group_count, dtype=F64, device=device)
    group_advantage.scatter_add_(0, layout.group, reference.values)
    floats, max_abs = _itself_floats(reference, layout)
    per_step = Sums(layout.step_samples, other.per_step.counts * class_mask, floats, max_abs, layout.token_lengths)
    return Tally(per_step, words, packing, group_advantage, True)


def _reference_pass(
    work: SideBySide, first_other: str | None, values: torch.Tensor, reference: Reference, layout: Layout, tol: float
) -> Tally:
    """The reference's own tally: from the first other scheme's pass where that one compared every sample."""
    other = None if first_other is None else work.result(first_other)
    if other is not None and other.everywhere and not reference.any_nan:
        return reference_tally(reference, layout, other)
    return tally(values, reference, layout, tol)


def start_tallies(
    work: SideBySide, values: dict[str, torch.Tensor], reference: Reference, layout: Layout, tol: float
) -> None:
    """Start ``tally`` of every scheme on ``work``, each named by its scheme (their scatters use one core each);
    the reference's own pass last, taken from the first other scheme's where that one compared every sample."""
    reference.squares(layout)  # shared: made once, before the threads
    if layout.token_lengths:
        layout.known_tokens()
    others = [name for name, tensor in values.items() if tensor is not reference.values]
    for name in others:
        work.start(name, partial(tally, values[name], reference, layout, tol))
    first_other = others[0] if others else None
    for name, tensor in values.items():
        if tensor is reference.values:
            work.start(name, partial(_reference_pass, work, first_other, tensor, reference, layout, tol))


__all__ = [
    "CLASSES", "CODES", "COMPARED", "NONZERO", "NONZERO_REFERENCE", "SPURIOUS", "STRICT", "UNDEFINED",
    "Layout", "Packing", "Reference", "Sums", "Tally", "named_counts", "reference_tally", "sign", "start_tallies",
    "tally",
]  # fmt: skip
