"""Columns of a read table turned into canonical values: rewards, keys, steps, per-token lists, step splits.

Every conversion names the file, the field and the first bad row when a value
does not fit, and never reads a value in Python where a vectorised pyarrow or
numpy pass does.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError, RollauditWarning, warn
from ..._table import (
    CANONICAL_COLUMNS,
    POSITION,
    PROMPT,
    STEP,
    arrow_array,
    concat_tables,
    contiguous_runs,
    dictionary_codes,
    numpy_view,
    positions_in_row_order,
)

# Per-token values stored as float32 copies of one float64 scalar agree to about 1e-7.
TOKEN_TOLERANCE = 1e-5
_COLUMNS_SHOWN = 20
_INT64_MAX = (1 << 63) - 1
_STEP_IN_NAME = re.compile(r"step[_-]?(\d+)", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------------------------------
# Columns: finding them, and turning them into canonical values.


def first_row(mask: pa.Array | pa.ChunkedArray) -> int:
    """The index of the first true value of a boolean column without nulls; there must be one (an error names a
    real row, never the -1 of "not found")."""
    row = int(pc.index(mask, True).as_py())
    if row < 0:
        raise ValueError("no row is true")
    return row


def columns_found(names: Sequence[str]) -> str:
    shown = ", ".join(repr(name) for name in list(names)[:_COLUMNS_SHOWN])
    more = len(names) - _COLUMNS_SHOWN
    return (shown + (f" and {more} more" if more > 0 else "")) if names else "none"


def pick_column(names: Sequence[str], given: str | None, common: Sequence[str], role: str, path: Path) -> str | None:
    """The user's column (which must exist) or the first common name present, or None."""
    if given is not None:
        if given not in names:
            raise InputError(
                f"no column {given!r} for the {role}; columns found: {columns_found(names)}",
                file=str(path),
                field=given,
                expected=f"the {role} column named by the option to exist",
            )
        return given
    return next((name for name in common if name in names), None)


def plain(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        return array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    return array


def is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def is_number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)


def passthrough(array: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """A passed-through column in a type every table operation supports (the canonical table is sorted, split by
    step and concatenated): string views become strings, half floats floats; a type without ``take`` is left out."""
    array = plain(array)
    if pa.types.is_string_view(array.type):
        array = array.cast(pa.string())
    elif pa.types.is_float16(array.type):  # most compute kernels (sort, min_max, comparisons) lack half floats
        array = array.cast(pa.float32())
    try:
        array.take(pa.array([], pa.int64()))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return None
    return array


def is_scalar(kind: pa.DataType) -> bool:
    """Columns worth passing through: not token lists, chat messages or blobs."""
    return not (
        pa.types.is_nested(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or pa.types.is_binary_view(kind)
        or pa.types.is_null(kind)
    )


def string_like(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


_NUMBER_TEXT = r"^\s*[-+]?((\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?|inf|infinity|nan)\s*$"


def float_values(array: pa.Array | pa.ChunkedArray, path: Path, field: str) -> pa.Array | pa.ChunkedArray:
    """Numbers (ints, floats, bools, numeric strings) as float64, nulls kept, chunk by chunk (a float64 column is
    not copied); anything else names its first row."""
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    kind = array.type
    if is_number(kind) or pa.types.is_boolean(kind) or pa.types.is_null(kind):
        # Unsafe: an int beyond 2**53 (or a wide decimal) becomes the nearest double instead of an error.
        return array.cast(pa.float64(), safe=False)
    if string_like(kind):
        if pa.types.is_string_view(kind):
            array = array.cast(pa.string())  # the regular-expression kernel below has no string_view version
        try:
            return array.cast(pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad = pc.and_(
                pc.is_valid(array), pc.invert(pc.match_substring_regex(array, _NUMBER_TEXT, ignore_case=True))
            )
            row = int(pc.index(pc.fill_null(bad, False), True).as_py())
            value = array[row].as_py() if row >= 0 else None
            shown = repr(value[:40] + "..." if isinstance(value, str) and len(value) > 40 else value)
            raise InputError(
                f"is not a number: {shown}" if row >= 0 else "is not numeric",
                file=str(path),
                field=field,
                row=row if row >= 0 else None,
                expected="a numeric column",
            ) from None
    raise InputError(f"has type {kind}", file=str(path), field=field, expected="a numeric column")


def key_values(array: pa.Array | pa.ChunkedArray, path: Path, field: str) -> pa.Array | pa.ChunkedArray:
    """A prompt or trajectory key: int64 or string (integral floats become ints; nested values their JSON text),
    chunk by chunk (int64 and string keys are not copied)."""
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    kind = array.type
    if pa.types.is_integer(kind) or pa.types.is_null(kind):
        try:
            return array.cast(pa.int64())
        except pa.ArrowInvalid:  # uint64 keys past int64: still distinct keys, as text
            return array.cast(pa.string())
    if string_like(kind):
        return array.cast(pa.string())
    if pa.types.is_boolean(kind):
        return array.cast(pa.int64())
    if pa.types.is_floating(kind):
        if pa.types.is_float16(kind):  # pyarrow casts half floats to ints by their bits, and has no floor for them
            array, kind = array.cast(pa.float32()), pa.float32()
        # CSV and pandas store integer ids with a missing value as floats: NaN is a missing key.
        array = pc.if_else(pc.is_nan(array), pa.scalar(None, kind), array)
        try:
            return array.cast(pa.int64())
        except pa.ArrowInvalid:
            fractional = pc.fill_null(pc.not_equal(pc.floor(array), array), False)
            if pc.any(fractional).as_py():
                raise InputError(
                    "has non-integer keys",
                    file=str(path),
                    field=field,
                    row=first_row(fractional),
                    expected="int or string keys",
                ) from None
            # Whole numbers past int64, held as doubles: the digits past 2**53 are gone, so no key is exact.
            row = first_row(pc.fill_null(pc.greater_equal(pc.abs(array), 2.0**63), False))
            raise InputError(
                f"is {array[row].as_py()!r}, a key past 64 bits held as a float (not exact)",
                file=str(path),
                field=field,
                row=row,
                expected="int64 keys, or keys past 64 bits written as integers or text",
            ) from None
    if pa.types.is_nested(kind):
        # Chat-message prompts: their JSON text is the key (a Python pass, only for nested keys).
        texts = [
            None if value is None else json.dumps(value, sort_keys=True, default=_scalar_text)
            for value in array.to_pylist()
        ]
        return pa.array(texts, pa.string())
    try:
        return array.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise InputError(f"has type {kind}", file=str(path), field=field, expected="int or string keys") from None


def _scalar_text(value: Any) -> str:
    """Values JSON has no type for, as their text: readers infer ``"2024-01-01 00:00:00"`` as a timestamp."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "backslashreplace")
    return str(value)  # datetime, date, time, timedelta, Decimal: str() gives back the text they were read from


def step_values(array: pa.Array | pa.ChunkedArray, path: Path, field: str) -> pa.Array | pa.ChunkedArray:
    """Integer steps as int64 (chunks as they are); a null or fractional step names its row."""
    kind = array.type
    if array.null_count:
        raise InputError(
            "is missing",
            file=str(path),
            field=field,
            row=int(pc.index(pc.is_null(array), True).as_py()),
            expected="a step on every row",
        )
    if pa.types.is_integer(kind):
        return int64_values(array, path, field, "an integer step")
    values = float_values(array, path, field).to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        # 2**63 and beyond: no int64 step (numpy's cast would wrap them to -2**63 with a RuntimeWarning).
        bad = ~np.isfinite(values) | (values != np.floor(values)) | ~_in_int64(values)
    if bad.any():
        raise InputError(
            f"is {float(values[bad][0])!r}",
            file=str(path),
            field=field,
            row=int(np.flatnonzero(bad)[0]),
            expected="an integer step within int64",
        )
    return arrow_array(values.astype(np.int64))


def _in_int64(values: np.ndarray) -> np.ndarray:
    """Which doubles are surely integers of int64's range: -2**63 < x < 2**63 (NaN is not). The double -2**63 is
    also what -2**63 - 1 and its neighbours round to: not an int64 that can be trusted."""
    return np.abs(values) < 2.0**63


def int64_values(
    array: pa.Array | pa.ChunkedArray, path: Path, field: str, expected: str
) -> pa.Array | pa.ChunkedArray:
    """An integer column as int64; a uint64 value past int64 names its row."""
    try:
        return array.cast(pa.int64())
    except pa.ArrowInvalid:
        row = int(pc.index(pc.greater(array, pa.scalar(_INT64_MAX, pa.uint64())), True).as_py())
        raise InputError(f"is {array[row].as_py()}", file=str(path), field=field, row=row, expected=expected) from None


INDEX_LIMIT = 1 << 31
"""Indices below this pair into one int64 key: ``major * INDEX_LIMIT + minor``."""


def index_values(array: pa.Array | pa.ChunkedArray, path: Path, field: str, expected: str) -> pa.Array:
    """An int column of indices from 0 (below ``INDEX_LIMIT``) as int64; the first row without one is an error."""
    values = plain(array)
    if not pa.types.is_integer(values.type):
        raise InputError(f"has type {values.type}", file=str(path), field=field, expected=expected)
    bad = pc.fill_null(pc.or_(pc.less(values, 0), pc.greater_equal(values, INDEX_LIMIT)), True)
    if pc.any(bad).as_py():
        row = int(pc.index(bad, True).as_py())
        raise InputError(f"is {values[row].as_py()!r}", file=str(path), field=field, row=row, expected=expected)
    return values.cast(pa.int64())


def paired_key(major: pa.Array, minor: pa.Array) -> pa.Array:
    """One int64 key per (major, minor) pair of :func:`index_values` (a trajectory inside its group)."""
    return pc.add(pc.multiply(major, INDEX_LIMIT), minor)


def step_in_name(path: Path) -> int | None:
    """``train_data_step12.jsonl`` -> 12."""
    match = _STEP_IN_NAME.search(path.stem)
    return name_step(match.group(1), path) if match else None


def file_name_steps(
    path: Path, pattern: re.Pattern[str], rows: int, field: str, no_step: str, expected: str
) -> pa.Array:
    """Every one of ``rows`` rows at the step in the file name (``pattern``'s first group, matched against the
    whole name); ``no_step``: the error when the name has none."""
    match = pattern.match(path.name)
    if match is None:
        raise InputError(no_step, file=str(path), field=field, expected=expected)
    return pa.array(np.full(rows, name_step(match.group(1), path), dtype=np.int64))


def name_step(digits: str, path: Path) -> int:
    """A step written in a file name, as an int64 (InputError past int64: no step is that large)."""
    if len(digits) > 19 or int(digits) > _INT64_MAX:
        raise InputError(
            f"the step in the file name has {len(digits)} digits", file=str(path), expected="a step that fits int64"
        )
    return int(digits)


def missing_to_nan(rewards: pa.Array | pa.ChunkedArray) -> tuple[pa.Array | pa.ChunkedArray, int]:
    """Null rewards as NaN (the audit reports them), and how many there were."""
    missing = rewards.null_count
    return (pc.fill_null(rewards, math.nan) if missing else rewards), missing


def warn_missing_rewards(path: Path, nulls: int, rewards: pa.Array | pa.ChunkedArray) -> None:
    """One warning per file for rewards that are missing, NaN or infinite (kept; the audit reports them)."""
    # A finite sum proves every reward finite (NaN and infinities propagate), summed by numpy over views of the
    # chunks (Arrow's sum is slower, and Array.to_numpy imports pandas).
    chunks = rewards.chunks if isinstance(rewards, pa.ChunkedArray) else [rewards]
    with np.errstate(over="ignore"):  # rewards near 1e308 sum to inf: then the check below looks row by row
        total = sum(float(numpy_view(chunk).sum()) for chunk in chunks)
    if not nulls and rewards.null_count == 0 and math.isfinite(total):
        return
    # Arrow's kernels from here: bitmaps rather than a byte per row, and no pandas import.
    finite = pc.is_finite(rewards)
    bad = len(rewards) - int(pc.sum(finite).as_py() or 0)
    if not bad:
        return
    noun = "row has" if bad == 1 else "rows have"
    first = int(pc.index(finite, False).as_py())
    missing = f", {nulls} of them missing" if nulls else ""
    warn(
        f"{path}: {bad} {noun} a NaN, infinite or missing reward (first at row {first + 1}{missing}); "
        "kept as NaN and reported by the audit",
        RollauditWarning,
    )


def passthrough_name(name: str) -> str:
    """A passed-through column keeps its name unless a canonical column has it."""
    return f"source_{name}" if name in CANONICAL_COLUMNS else name


# ---------------------------------------------------------------------------------------------------------------------
# Per-token lists: one value per sample.


@dataclass
class TokenLists:
    """Flattened per-token values of one column, restricted to masked-in tokens: row ``i`` owns ``values[starts[i]:
    starts[i] + counts[i]]``."""

    values: np.ndarray
    starts: np.ndarray
    counts: np.ndarray


def list_lengths(array: pa.Array) -> np.ndarray:
    """Values per row of a list column (0 for a null list), matching ``pc.list_flatten``'s output."""
    return pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def nonzero_mask(flat: pa.Array, path: Path, field: str) -> np.ndarray:
    """Mask values that are set (nonzero, true) as a numpy bool array."""
    if not (is_number(flat.type) or pa.types.is_boolean(flat.type) or pa.types.is_null(flat.type)):
        raise InputError(f"has values of type {flat.type}", file=str(path), field=field, expected="0/1 mask values")
    if pa.types.is_boolean(flat.type):
        return pc.fill_null(flat, False).to_numpy(zero_copy_only=False)
    if pa.types.is_float16(flat.type):  # no comparison kernel for half floats
        flat = flat.cast(pa.float32())
    return pc.fill_null(pc.not_equal(flat, 0), False).to_numpy(zero_copy_only=False)


def token_lists(
    array: pa.Array | pa.ChunkedArray, mask: pa.Array | pa.ChunkedArray | None, path: Path, field: str, mask_field: str
) -> TokenLists:
    """A list column's values per row, masked-in tokens only when ``mask`` (a list column of the same lengths) is
    given."""
    array = plain(array)
    lengths = list_lengths(array)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    flat = float_values(pc.list_flatten(array), path, field).to_numpy(zero_copy_only=False)
    if mask is None:
        return TokenLists(values=flat, starts=offsets[:-1], counts=lengths)
    mask = plain(mask)
    if not is_list(mask.type):
        raise InputError(f"has type {mask.type}", file=str(path), field=mask_field, expected="a per-token list")
    mask_lengths = list_lengths(mask)
    differ = lengths != mask_lengths
    if differ.any():
        row = int(np.flatnonzero(differ)[0])
        raise InputError(
            f"has {mask_lengths[row]} mask values for {lengths[row]} values of {field!r}",
            file=str(path),
            field=mask_field,
            row=row,
            expected="one mask value per token",
        )
    keep = nonzero_mask(pc.list_flatten(mask), path, mask_field)
    # Kept tokens before each row's start: row i keeps kept[offsets[i]:offsets[i + 1]], contiguous after filtering.
    kept_before = np.concatenate(([0], np.cumsum(keep))).astype(np.int64)
    starts = kept_before[offsets[:-1]]
    return TokenLists(values=flat[keep], starts=starts, counts=kept_before[offsets[1:]] - starts)


def reduce_tokens(tokens: TokenLists, rule: str) -> tuple[np.ndarray, int]:
    """One value per row (``first``, ``last`` or ``mean`` of its tokens; NaN without tokens), and the number of rows
    whose values vary beyond float32 rounding."""
    counts, starts, values = tokens.counts, tokens.starts, tokens.values
    result = np.full(len(counts), np.nan)
    present = counts > 0
    if not present.any():
        return result, 0
    if rule == "first":
        result[present] = values[starts[present]]
    elif rule == "last":
        result[present] = values[starts[present] + counts[present] - 1]
    else:
        sums = np.add.reduceat(values, starts[present])
        result[present] = sums / counts[present]
    # Rows with tokens are contiguous in ``values``: reduceat over their starts covers each row's tokens exactly.
    low = np.minimum.reduceat(values, starts[present])
    high = np.maximum.reduceat(values, starts[present])
    scale = np.maximum(1.0, np.abs(result[present]))
    with np.errstate(invalid="ignore"):
        varying = int(np.count_nonzero((high - low) > TOKEN_TOLERANCE * scale))
    return result, varying


def sum_tokens(tokens: TokenLists) -> np.ndarray:
    """The sum of each row's tokens (NaN for a row without any)."""
    result = np.full(len(tokens.counts), np.nan)
    present = tokens.counts > 0
    if present.any():
        result[present] = np.add.reduceat(tokens.values, tokens.starts[present])
    return result


def warn_varying_tokens(path: Path, field: str, varying: int, rule: str) -> None:
    if varying:
        noun = "row" if varying == 1 else "rows"
        warn(
            f"{path}: per-token {field!r} values vary within {varying} {noun}: not an outcome scheme "
            f"(KL in the reward, GAE?); recorded_advantage takes each row's {rule} masked-in value",
            RollauditWarning,
        )


def repeated_keys(keys: Any, steps: Any, noun: str = "texts") -> tuple[dict[str, list[int]], str | None]:
    """Text read as a prompt key, checked the way a trainer that repeats each prompt n times would write it: per
    step, every distinct key occurs a multiple of one count n >= 2. Returns, per step, ``[n, keys occurring k x n
    times with k > 1]`` (one text drawn for several prompts), and, for the first step where the counts have no
    common n >= 2, a description of them, ``noun`` naming the keys (else None)."""
    codes = dictionary_codes(keys, "encode")[0]
    pairs, sizes_of = np.unique(np.stack([numpy_view(plain(steps)), codes]), axis=1, return_counts=True)
    step_of = pairs[0]
    verified: dict[str, list[int]] = {}
    for step in sorted(set(step_of.tolist())):
        sizes = sizes_of[step_of == step]
        common = math.gcd(*sizes.tolist())
        if common < 2:
            once = int((sizes == 1).sum())
            if once:
                return verified, f"in step {step}, {once} of its {len(sizes)} distinct {noun} occur once"
            shown = ", ".join(str(size) for size in sorted(set(sizes.tolist()))[:6])
            return verified, f"in step {step}, its {len(sizes)} distinct {noun} occur {shown} times: no common n"
        verified[str(step)] = [common, int((sizes > common).sum())]
    return verified, None


# ---------------------------------------------------------------------------------------------------------------------
# Steps: one canonical table per step.


MAX_STEPS_PER_FILE = 10_000
"""Most steps one file may hold in a format that writes a file per step (a TRL completions log, a verl or ROLL
dump): such a file holds one step's batch, and its checks (group sizes, slices) are made step by step."""


def surrogate_safe(value: str) -> str:
    """A key parsed from JSON as UTF-8 text: a lone surrogate (a ``\\ud800`` escape in the JSON), which Arrow
    cannot store, stays its escape, so that two such keys stay two."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def split_steps(table: pa.Table, path: Path | None = None) -> list[tuple[int, pa.Table]]:
    """A canonical table per distinct step, in step order (positions already count within each step); ``path``:
    the one file of a file-per-step format the table was read from, which may hold at most
    ``MAX_STEPS_PER_FILE`` steps."""
    runs = contiguous_runs(table.column(STEP))
    if path is not None:
        count = len(runs[1]) if runs is not None else len(np.unique(plain(table.column(STEP)).to_numpy()))
        if count > MAX_STEPS_PER_FILE:
            raise InputError(
                f"holds {count:,} steps",
                file=str(path),
                field=STEP,
                expected=f"at most {MAX_STEPS_PER_FILE:,} steps in one file: the format writes a file per step",
            )
    if runs is not None:
        bounds, values = runs
        if len(values) <= 1:
            return [(int(values[0]) if len(values) else 0, table)]
        # Each step one contiguous run: zero-copy slices, in step order.
        parts = [
            (int(step), table.slice(start, end - start))
            for step, (start, end) in zip(values, itertools.pairwise(bounds), strict=True)
        ]
        return sorted(parts, key=lambda part: part[0])
    steps = table.column(STEP).to_numpy()
    order = np.argsort(steps, kind="stable")
    sorted_steps = steps[order]
    ordered = table.take(pa.array(order))  # one take for the whole table, then slices of it
    bounds = np.flatnonzero(np.r_[True, sorted_steps[1:] != sorted_steps[:-1], True])
    return [(int(sorted_steps[start]), ordered.slice(start, end - start)) for start, end in itertools.pairwise(bounds)]


def one_file_per_step(paths: list[Path], reduced: list[pa.Table], dumps: str, expected: str) -> list[pa.Table]:
    """The reduced tables of per-step files, in file order, as one canonical table per step; two files
    holding the same step are an error (``dumps`` names them, e.g. "verl dumps")."""
    seen: dict[int, Path] = {}
    tables: list[tuple[int, pa.Table]] = []
    for path, file_table in zip(paths, reduced, strict=True):
        for step, table in split_steps(file_table, path):
            if step in seen:
                raise InputError(f"two {dumps} of step {step}: {seen[step]} and {path}", expected=expected)
            seen[step] = path
            tables.append((step, table))
    return [table for _, table in sorted(tables, key=lambda item: item[0])]


def in_step_order(tables: list[pa.Table]) -> pa.Table:
    """Tables of files read in order as one table in step order; a step several files hold is one batch, its
    positions 0, 1, 2, ... across them in file order. Vectorised: the cost is the rows', not the steps'."""
    table = concat_tables(tables) if len(tables) > 1 else tables[0]
    # Steps are never null; checked chunk by chunk (a row group each), nothing joined unless it must be sorted.
    chunks = [view for view in map(numpy_view, table.column(STEP).chunks) if len(view)]
    ascending = all(not np.any(view[1:] < view[:-1]) for view in chunks) and all(
        before[-1] <= after[0] for before, after in itertools.pairwise(chunks)
    )
    if not ascending:
        order = np.argsort(np.concatenate(chunks), kind="stable")  # stable: file order, then row order
        table = table.take(pa.array(order))
    if len(tables) > 1:
        table = table.set_column(table.column_names.index(POSITION), POSITION, positions_in_row_order(table[STEP]))
    return table


def renumber_positions(tables: list[pa.Table]) -> pa.Table:
    """Several parts of one step (files read in order) as one batch: positions 0, 1, 2, ... across the parts."""
    table = concat_tables(tables) if len(tables) > 1 else tables[0]
    if len(tables) > 1:
        table = table.set_column(
            table.column_names.index(POSITION), POSITION, pa.array(np.arange(table.num_rows, dtype=np.int64))
        )
    return table


def slice_prompts(table: pa.Table, n: int, path: Path) -> pa.Table:
    """Prompt keys as consecutive slices of ``n`` within each step (no prompt column, ``n_samples_per_prompt``)."""
    positions = table.column(POSITION).to_numpy()
    steps = table.column(STEP).to_numpy()
    for step in np.unique(steps):
        count = int((steps == step).sum())
        if count % n:
            raise InputError(
                f"no prompt column and the {count} rows of step {int(step)} are not slices of "
                f"--n-samples-per-prompt {n}: prompt keys are required when groups are not uniformly sized",
                file=str(path),
                expected="a prompt column (--prompt-col)",
            )
    return table.set_column(table.column_names.index(PROMPT), PROMPT, pa.array(positions // n, pa.int64()))


def whole_numbers(array: pa.Array | pa.ChunkedArray, path: Path, field: str) -> pa.Array:
    """Token counts as int64 (integral floats accepted, as CSV and pandas write them; nulls stay unknown)."""
    array = plain(array)
    if pa.types.is_integer(array.type):
        return int64_values(array, path, field, "a whole number of tokens")
    numbers = float_values(array, path, field).to_numpy(zero_copy_only=False)
    known = ~np.isnan(numbers)
    with np.errstate(invalid="ignore"):
        bad = known & (~np.isfinite(numbers) | (numbers != np.floor(numbers)) | ~_in_int64(numbers))
    if bad.any():
        raise InputError(
            f"is {float(numbers[bad][0])!r}",
            file=str(path),
            field=field,
            row=int(np.flatnonzero(bad)[0]),
            expected="a whole number of tokens",
        )
    return pa.array(np.nan_to_num(numbers).astype(np.int64), pa.int64(), mask=~known)


def masked_in_counts(mask: pa.Array | pa.ChunkedArray, path: Path, field: str) -> np.ndarray:
    """Tokens with a nonzero mask value, per row: the response tokens a per-token mask marks for training."""
    mask = plain(mask)
    if not is_list(mask.type):
        raise InputError(f"has type {mask.type}", file=str(path), field=field, expected="a per-token list")
    offsets = np.concatenate(([0], np.cumsum(list_lengths(mask)))).astype(np.int64)
    kept_before = np.concatenate(([0], np.cumsum(nonzero_mask(pc.list_flatten(mask), path, field)))).astype(np.int64)
    return kept_before[offsets[1:]] - kept_before[offsets[:-1]]
