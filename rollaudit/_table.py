"""The canonical rollout table: the one shape every loader produces.

One row per training sample. Columns, in this order:

============================  ===============  ========  =====================================================
column                        type             nulls     meaning
============================  ===============  ========  =====================================================
``step``                      int64            no        training step; one step is one batch, never mixed
``position``                  int64            no        the sample's place in its step's batch order
``prompt``                    int64 or string  allowed   prompt key (slime ``group_index``, verl ``input``, ...)
``trajectory``                int64 or string  allowed   trajectory key; null = a trajectory of its own
``reward``                    float64          no        raw reward; NaN/inf allowed here, reported downstream
``status``                    string           allowed   sample status (``completed``, ``truncated``, ...)
``response_length``           int64            allowed   response tokens; weights the token-level metrics
``recorded_advantage``        float64          allowed   the advantage the trainer really used, when known
============================  ===============  ========  =====================================================

Any other column is passed through untouched (``index``, ``label``, a reward
function's own column, ...). Batch order inside a step is ``position``, then
row order; positional schemes and the ``first`` representative follow it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from ._errors import InputError

# pyarrow.compute is imported where it is used: the table reader's child starts without it (a tenth of a second).

STEP = "step"
POSITION = "position"
PROMPT = "prompt"
TRAJECTORY = "trajectory"
REWARD = "reward"
STATUS = "status"
RESPONSE_LENGTH = "response_length"
RECORDED_ADVANTAGE = "recorded_advantage"

CANONICAL_COLUMNS = (
    STEP,
    POSITION,
    PROMPT,
    TRAJECTORY,
    REWARD,
    STATUS,
    RESPONSE_LENGTH,
    RECORDED_ADVANTAGE,
)
KEY_COLUMNS = (PROMPT, TRAJECTORY)
AUDITED_COLUMNS = (STEP, POSITION, PROMPT, TRAJECTORY, REWARD, RESPONSE_LENGTH, RECORDED_ADVANTAGE)
"""The columns an audit reads as whole arrays (the others, a few values at a time)."""
# Passed-through columns some presets read (prime-rl's): the seat, the env, the scoring order, the length counts.
AGENT = "agent"
ENV = "env"
SCORING_ORDER = "scoring_order"
LENGTH_COLUMNS = ("num_output_tokens", "num_input_tokens", "num_turns")
NOT_TRAINED = "not_trained"
"""A passed-through string column: where the framework itself gave a row no advantage (a group never scored by the
end of the dump, a group dropped before training), the reason in a few words; null where the row was trained. The
audit leaves such rows out of every scheme and rate and counts them by reason."""
_FIXED_TYPES = {
    STEP: pa.int64(),
    POSITION: pa.int64(),
    REWARD: pa.float64(),
    STATUS: pa.string(),
    RESPONSE_LENGTH: pa.int64(),
    RECORDED_ADVANTAGE: pa.float64(),
}
_NOT_NULL = (STEP, POSITION, REWARD)


def nulls(length: int, kind: pa.DataType) -> pa.Array:
    """An all-null int64, float64 or string column whose buffers share one block of zeros that is never written.

    ``pa.nulls`` fills its buffers (200 MB for a 10M-row table's three unknown columns); zeros from ``np.zeros``
    are pages the system maps only when they are read, and a null column's data is never read.
    """
    import numpy as np

    if kind not in (pa.int64(), pa.float64(), pa.string()):
        return pa.nulls(length, kind)
    zeros = pa.py_buffer(np.zeros(8 * length + 8, dtype=np.uint8))
    # Validity all 0 (every value null); data all 0; a string's offsets all 0 (every value empty), no characters.
    buffers = [zeros, zeros, zeros] if kind == pa.string() else [zeros, zeros]
    return pa.Array.from_buffers(kind, length, buffers, null_count=length)


def _key_array(values: Any, name: str) -> pa.Array | pa.ChunkedArray:
    """A prompt or trajectory key column: int64 or string, nulls allowed (chunks cast one by one, never combined)."""
    if isinstance(values, pa.ChunkedArray) and values.num_chunks == 1:
        values = values.chunk(0)
    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        try:
            values = pa.array(_as_list(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as error:
            raise InputError(f"cannot make a key column: {error}", field=name, expected="ints or strings") from None
    kind = values.type
    if pa.types.is_null(kind):
        return nulls(len(values), pa.int64())
    if kind in (pa.int64(), pa.string()):
        return values
    if pa.types.is_integer(kind):
        try:
            return values.cast(pa.int64())
        except pa.ArrowInvalid:  # uint64 keys past int64: compared exactly as their decimal text
            return values.cast(pa.string())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return values.cast(pa.string())
    if pa.types.is_dictionary(kind):
        return _key_array(values.cast(kind.value_type), name)
    raise InputError(f"key column has type {kind}", field=name, expected="int64 or string keys")


def _as_list(values: Any) -> Any:
    """numpy arrays and torch tensors pass through pyarrow as they are; other iterables as lists."""
    if hasattr(values, "__array__") or isinstance(values, list):
        if type(values).__module__.startswith("torch"):
            return values.detach().cpu().numpy()
        return values
    return list(values)


def _typed_array(values: Any, name: str, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """``values`` as an Arrow array of ``kind`` (chunks cast one by one, never combined)."""
    try:
        array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(_as_list(values))
        return array.cast(kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InputError(f"cannot read as {kind}: {first}", field=name, expected=str(kind)) from None


PIECE_ROWS = 1 << 20
"""Rows per piece of a pass over a whole column, and of a Parquet read: temporaries stay small and are reused,
never a fresh buffer the size of the column (on the CPU a fresh buffer's first touch can cost more than the
arithmetic on it)."""


def numpy_view(array: pa.Array) -> Any:
    """The values of a fixed-width numeric Arrow array without nulls as a read-only numpy view of its buffer: no
    copy, and no pandas import (pyarrow's ``Array.to_numpy`` imports pandas, a fifth of a second)."""
    import numpy as np

    dtype = np.dtype(array.type.to_pandas_dtype())
    if len(array) == 0:
        return np.zeros(0, dtype=dtype)
    view = np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)
    view.flags.writeable = False  # Arrow's memory is never written
    return view


def dictionary_codes(column: pa.Array | pa.ChunkedArray, nulls: str) -> tuple[Any, int]:
    """Arrow's dictionary codes of ``column`` (first seen first) as int64 numpy, and how many values are distinct;
    ``nulls``: ``"encode"`` (a value of its own) or ``"mask"`` (coded 0, not counted). A column of many chunks is
    coded chunk by chunk against one dictionary (the whole column's codes), its values never copied into one."""
    import numpy as np
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column, null_encoding=nulls)
    chunks = [chunk for chunk in encoded.chunks if len(chunk)] if isinstance(encoded, pa.ChunkedArray) else [encoded]
    indices = [numpy_view(pc.fill_null(chunk.indices, 0) if chunk.null_count else chunk.indices) for chunk in chunks]
    return np.concatenate([np.zeros(0, np.int64), *indices], dtype=np.int64), len(chunks[0].dictionary) if chunks else 0


def group_codes(table: pa.Table, names: Iterable[str]) -> Any:
    """A code per row of a non-empty ``table`` per distinct combination of ``names`` (a null a value), int64 numpy."""
    import numpy as np

    codes = np.zeros(table.num_rows, dtype=np.int64)
    for name in names:
        values = dictionary_codes(table.column(name), "encode")[0]
        _, inverse = np.unique(codes * (int(values.max()) + 1) + values, return_inverse=True)
        codes = inverse.reshape(-1).astype(np.int64, copy=False)
    return codes


def arrow_array(values: Any) -> pa.Array:
    """A 1-D numeric numpy array as an Arrow array sharing its memory, without the pandas import of ``pa.array``."""
    import numpy as np

    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def int64_pieces(values: Any) -> Iterator[Any]:
    """Consecutive int64 numpy views of at most ``PIECE_ROWS`` rows of an int64 numpy array, Arrow array or
    chunked array without nulls (zero-copy: no chunk is combined)."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    for chunk in chunks:
        array = numpy_view(chunk) if isinstance(chunk, pa.Array) else chunk
        for start in range(0, len(array), PIECE_ROWS):
            yield array[start : start + PIECE_ROWS]


def contiguous_runs(steps: Any) -> tuple[Any, Any] | None:
    """When every step is one contiguous run of rows (sorted, or written step after step): the row where each
    run starts plus the row count at the end, and each run's step; None when some step comes back later.
    ``steps``: int64 values without nulls (numpy, Arrow array or chunked array), read piece by piece."""
    import numpy as np

    starts: list[Any] = []
    values: list[Any] = []
    offset, last = 0, None
    for piece in int64_pieces(steps):
        if len(piece) == 0:
            continue
        if last is None or piece[0] != last:
            starts.append(np.array([offset], dtype=np.int64))
            values.append(piece[:1].copy())
        changes = np.flatnonzero(piece[1:] != piece[:-1]) + 1
        starts.append(changes + offset)
        values.append(piece[changes])
        offset, last = offset + len(piece), piece[-1]
    if not starts:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    bounds = np.concatenate([*starts, [offset]]).astype(np.int64)
    run_values = np.concatenate(values)
    return (bounds, run_values) if len(np.unique(run_values)) == len(run_values) else None


def positions_in_row_order(step: pa.Array | pa.ChunkedArray) -> pa.Array:
    """0, 1, 2, ... within each step, in row order (a cumulative count per step)."""
    import numpy as np

    rows = len(step)
    if rows == 0:
        return pa.array([], pa.int64())
    runs = contiguous_runs(step)
    if runs is not None:  # no sort needed: each row's place minus where its run starts
        bounds, _ = runs
        positions = np.arange(rows, dtype=np.int64)
        if len(bounds) <= _MOST_RUNS_IN_PLACE:
            for start, end in itertools.pairwise(bounds[1:]):
                positions[start:end] -= start
        else:
            positions -= np.repeat(bounds[:-1], np.diff(bounds))
        return arrow_array(positions)
    if isinstance(step, pa.ChunkedArray):
        step = step.combine_chunks()
    steps = numpy_view(step)
    order = np.argsort(steps, kind="stable")
    sorted_steps = steps[order]
    starts = np.flatnonzero(np.r_[True, sorted_steps[1:] != sorted_steps[:-1]])
    run_start = np.repeat(starts, np.diff(np.r_[starts, len(steps)]))
    positions = np.empty(len(steps), dtype=np.int64)
    positions[order] = np.arange(len(steps)) - run_start
    return arrow_array(positions)


# Up to this many steps, positions are counted off run by run, in place (no row-sized array of run starts).
_MOST_RUNS_IN_PLACE = 4096


def make_table(
    reward: Any,
    prompt: Any = None,
    trajectory: Any = None,
    step: Any = None,
    **columns: Any,
) -> pa.Table:
    """A canonical rollout table from Python lists, numpy arrays, tensors or Arrow arrays.

    ``prompt=None`` means no sample has a prompt key (positional schemes still
    apply). ``step`` defaults to 0 for every row and ``position`` to the row's
    place within its step. Other keyword arguments become columns: the
    canonical ones (``status``, ``response_length``, ``recorded_advantage``,
    ``position``) are typed, anything else passes through.

    >>> make_table(reward=[1.0, 0.0], prompt=[7, 7]).num_rows
    2
    """
    rewards = _typed_array(reward, REWARD, pa.float64())
    length = len(rewards)

    def column(values: Any, name: str) -> Any:
        if values is None:
            return None
        if not isinstance(values, (pa.Array, pa.ChunkedArray, Mapping)) and not hasattr(values, "__len__"):
            values = list(values)
        if len(values) != length:
            raise InputError(
                f"has {len(values)} values but reward has {length}",
                field=name,
                expected="one value per sample",
            )
        return values

    data: dict[str, pa.Array] = {}
    data[STEP] = (
        pa.array([0] * length, pa.int64()) if step is None else _typed_array(column(step, STEP), STEP, pa.int64())
    )
    position = columns.pop(POSITION, None)
    data[POSITION] = (
        positions_in_row_order(data[STEP])
        if position is None
        else _typed_array(column(position, POSITION), POSITION, pa.int64())
    )
    data[PROMPT] = nulls(length, pa.int64()) if prompt is None else _key_array(column(prompt, PROMPT), PROMPT)
    data[TRAJECTORY] = (
        nulls(length, pa.int64()) if trajectory is None else _key_array(column(trajectory, TRAJECTORY), TRAJECTORY)
    )
    data[REWARD] = rewards
    for name in (STATUS, RESPONSE_LENGTH, RECORDED_ADVANTAGE):
        values = columns.pop(name, None)
        data[name] = (
            nulls(length, _FIXED_TYPES[name])
            if values is None
            else _typed_array(column(values, name), name, _FIXED_TYPES[name])
        )
    for name, values in columns.items():
        values = column(values, name)
        try:
            data[name] = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(_as_list(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as error:
            raise InputError(f"cannot make a column: {error}", field=name) from None
    return validate_table(pa.table(data))


def _first_true(mask: pa.Array | pa.ChunkedArray) -> int:
    """Row index of the first true value (mask has no nulls)."""
    import pyarrow.compute as pc

    return int(pc.index(mask, True).as_py())


def _first_past_int64(column: pa.Array | pa.ChunkedArray) -> int | None:
    """The first row of an unsigned integer column past int64 (the one a cast to int64 refused), else None."""
    import pyarrow.compute as pc

    if not pa.types.is_unsigned_integer(column.type):
        return None
    row = int(pc.index(pc.fill_null(pc.greater(column, pa.scalar((1 << 63) - 1, pa.uint64())), False), True).as_py())
    return row if row >= 0 else None


def validate_table(table: pa.Table, *, source: str | None = None) -> pa.Table:
    """Check ``table`` against the canonical schema; return it with canonical types.

    Integer columns narrower than int64 are widened and large strings
    narrowed; anything that cannot be cast, a missing column, or a null where
    none is allowed raises :class:`InputError` naming the column and the first
    bad row.
    """
    import pyarrow.compute as pc

    if not isinstance(table, pa.Table):
        raise InputError(f"expected a pyarrow.Table, got {type(table).__name__}", file=source)
    missing = [name for name in (STEP, POSITION, REWARD) if name not in table.column_names]
    if missing:
        raise InputError(
            "missing canonical column",
            file=source,
            field=missing[0],
            expected="the columns of rollaudit's canonical table (see rollaudit._table)",
        )
    for name in CANONICAL_COLUMNS:
        if name not in table.column_names:
            kind = _FIXED_TYPES.get(name, pa.int64())
            table = table.append_column(name, nulls(table.num_rows, kind))
            continue
        column = table.column(name)
        if name in KEY_COLUMNS:
            fixed = _key_array(column, name)
        else:
            try:
                fixed = column.cast(_FIXED_TYPES[name]) if column.type != _FIXED_TYPES[name] else column
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise InputError(
                    f"has type {column.type}: {str(error).splitlines()[0]}",
                    file=source,
                    field=name,
                    row=_first_past_int64(column) if _FIXED_TYPES[name] == pa.int64() else None,
                    expected=str(_FIXED_TYPES[name]),
                ) from None
        if name in _NOT_NULL and fixed.null_count:
            raise InputError(
                "is null", file=source, field=name, row=_first_true(pc.is_null(fixed)), expected="a value on every row"
            )
        if fixed is not column:
            table = table.set_column(table.column_names.index(name), name, fixed)
    lengths = table.column(RESPONSE_LENGTH)
    if lengths.null_count < len(lengths):
        negative = pc.fill_null(pc.less(lengths, 0), False)
        if pc.any(negative).as_py():
            raise InputError(
                "is negative", file=source, field=RESPONSE_LENGTH, row=_first_true(negative), expected=">= 0"
            )
    order = list(CANONICAL_COLUMNS) + [name for name in table.column_names if name not in CANONICAL_COLUMNS]
    return table.select(order)


def concat_tables(tables: Iterable[pa.Table]) -> pa.Table:
    """Tables of several files into one, keys unified (int keys become strings if another file has strings)."""
    tables = list(tables)
    if not tables:
        raise InputError("no rollouts to concatenate", expected="at least one table")
    for name in KEY_COLUMNS:
        kinds = {table.schema.field(name).type for table in tables}
        if len(kinds) > 1:
            tables = [
                table.set_column(table.column_names.index(name), name, table.column(name).cast(pa.string()))
                for table in tables
            ]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        pass
    # A passed-through column whose type changes between files (an int here, text there): left out, with a word.
    drifting = sorted(
        {
            name
            for table in tables
            for name in table.column_names
            if name not in CANONICAL_COLUMNS
            and len({other.schema.field(name).type for other in tables if name in other.column_names}) > 1
        }
    )
    if drifting:
        from ._errors import RollauditWarning, warn

        names = ", ".join(map(repr, drifting))
        subject = f"columns {names} change" if len(drifting) > 1 else f"column {names} changes"
        warn(
            f"{subject} type between files: left out of the table",
            RollauditWarning,
        )
        tables = [table.drop_columns([name for name in drifting if name in table.column_names]) for table in tables]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as error:
        raise InputError(f"the files' tables do not fit together ({' '.join(str(error).split())[:200]})") from None


# ---------------------------------------------------------------------------------------------------------------------
# What a loader found in a dump, in the framework's own words, so that a report can say how it grouped: counts
# ({label: {what: count}}: V1 sessions, fan-out trajectories, padding rows left out) and notes (what the dump
# cannot tell), in the table's metadata.

FORMATS_METADATA = b"rollaudit.formats"
FOUND_METADATA = b"rollaudit.found"
NOTES_METADATA = b"rollaudit.notes"


def found_in(table: pa.Table) -> dict[str, dict[str, int]]:
    """What the loader of ``table`` counted in its dump: ``{label: {what: count}}`` (empty when it said nothing)."""
    import json

    text = (table.schema.metadata or {}).get(FOUND_METADATA)
    return json.loads(text) if text else {}


def notes_in(table: pa.Table) -> list[str]:
    """What the loader of ``table`` said its dump cannot tell (one sentence each)."""
    import json

    text = (table.schema.metadata or {}).get(NOTES_METADATA)
    return json.loads(text) if text else []


def with_found(table: pa.Table, found: Mapping[str, Mapping[str, int]], notes: Iterable[str] = ()) -> pa.Table:
    """``table`` carrying ``found`` (counts that are 0 left out) and ``notes`` in its metadata."""
    import json

    kept = {label: {what: int(n) for what, n in counts.items() if n} for label, counts in found.items()}
    metadata = dict(table.schema.metadata or {})
    metadata[FOUND_METADATA] = json.dumps({label: counts for label, counts in kept.items() if counts}).encode()
    notes = list(dict.fromkeys(notes))
    if notes:
        metadata[NOTES_METADATA] = json.dumps(notes).encode()
    return table.replace_schema_metadata(metadata)


# What a loader knows of the run beyond its rows (``{fact: value}``, JSON-ready):
#   ``trained_default``: ``{"scheme": str | None, "why": str}``, the framework's default preset for this layout and
#       version (None: cannot tell; ``why`` says why), an assumption, or with ``"config": file`` the config's word;
#   ``no_trajectory``: why the dump cannot tie a sample to its trajectory (no scheme over trajectories is auditable);
#   ``rewards_not_trained``: why its rewards are not those the run trained on (no finding compares with them).
FACTS_METADATA = b"rollaudit.facts"


def facts_in(table: pa.Table) -> dict[str, Any]:
    """What the loader of ``table`` knows of its run (see ``FACTS_METADATA``); empty when it said nothing."""
    import json

    text = (table.schema.metadata or {}).get(FACTS_METADATA)
    return json.loads(text) if text else {}


def with_facts(table: pa.Table, **facts: Any) -> pa.Table:
    """``table`` carrying ``facts`` (JSON-ready values; None leaves a fact out) beside those it has."""
    import json

    merged = {**facts_in(table), **{name: value for name, value in facts.items() if value is not None}}
    metadata = dict(table.schema.metadata or {})
    metadata[FACTS_METADATA] = json.dumps(merged).encode()
    return table.replace_schema_metadata(metadata)


def with_trained_default(table: pa.Table, scheme: str | None, why: str, config: str | None = None) -> pa.Table:
    """``table`` naming its framework's default (None: cannot tell which), or what its ``config`` file names."""
    return with_facts(table, trained_default={"scheme": scheme, "why": why, **({"config": config} if config else {})})


def merge_facts(tables: Iterable[pa.Table]) -> dict[str, Any]:
    """The facts of several tables (the steps of a run): a fact the tables state differently is left out."""
    merged: dict[str, Any] = {}
    conflicting: set[str] = set()
    for facts, _ in _distinct_metadata(tables, FACTS_METADATA, facts_in):
        for name, value in facts.items():
            if name in merged and merged[name] != value:
                conflicting.add(name)
            merged.setdefault(name, value)
    return {name: value for name, value in merged.items() if name not in conflicting}


def merge_found(tables: Iterable[pa.Table]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """The counts and notes of several tables (the steps of a run): counts summed, notes once each, in order."""
    merged: dict[str, dict[str, int]] = {}
    tables = list(tables)
    for found, times in _distinct_metadata(tables, FOUND_METADATA, found_in):
        for label, counts in found.items():
            into = merged.setdefault(label, {})
            for what, count in counts.items():
                into[what] = into.get(what, 0) + count * times
    notes: dict[str, None] = {}
    for said, _ in _distinct_metadata(tables, NOTES_METADATA, notes_in):
        notes.update(dict.fromkeys(said))
    return merged, list(notes)


def _distinct_metadata(tables: Iterable[pa.Table], key: bytes, parse: Any) -> list[tuple[Any, int]]:
    """``parse`` of the tables, once per distinct value of their ``key`` metadata (a run's steps mostly say the
    same), in the order of first appearance, with how many tables carry it."""
    first: dict[bytes | None, pa.Table] = {}
    times: dict[bytes | None, int] = {}
    for table in tables:
        text = (table.schema.metadata or {}).get(key)
        first.setdefault(text, table)
        times[text] = times.get(text, 0) + 1
    return [(parse(table), times[text]) for text, table in first.items()]


def loaded_formats(table: pa.Table) -> list[str]:
    """The formats ``rollaudit.load`` read to make ``table`` (empty for a table made another way)."""
    text = (table.schema.metadata or {}).get(FORMATS_METADATA, b"").decode()
    return text.split("+") if text else []


# ---------------------------------------------------------------------------------------------------------------------
# Advantage columns beside the table's own, and a run's steps chosen by the text a user types (``10-20,30``).

ADVANTAGE_PREFIX = "advantage:"
"""What names an advantage column (``advantage:prompt``): never a canonical column, so that recomputed advantages
join the table they come from without a clash."""


def advantage_column(scheme: str) -> str:
    """The name of the column of ``scheme``'s advantages: ``advantage:`` and the scheme string as given."""
    return f"{ADVANTAGE_PREFIX}{scheme}"


# A step (``30``, ``-1``) or an inclusive range (``10-20``, ``-3--1``).
_STEP_RANGE = re.compile(r"(-?\d+)(?:\s*-\s*(-?\d+))?")


def parse_steps(spec: str | int | Iterable[int]) -> list[tuple[int, int]]:
    """``"10-20,30"`` (ranges inclusive, comma-separated), one step, or steps, as inclusive ``(first, last)`` ranges.

    >>> parse_steps("10-20, 30")
    [(10, 20), (30, 30)]
    """
    from ._errors import UsageError

    expected = "steps and inclusive ranges, comma-separated, e.g. 10-20,30"
    if isinstance(spec, int):
        return [(spec, spec)]
    if not isinstance(spec, str):
        steps = list(spec)
        if not steps or not all(isinstance(step, int) and not isinstance(step, bool) for step in steps):
            raise UsageError(f"steps {steps!r} are not whole numbers", expected=expected)
        return [(step, step) for step in steps]
    ranges = []
    for part in spec.split(","):
        match = _STEP_RANGE.fullmatch(part.strip())
        if match is None:
            raise UsageError(f"steps {spec!r}: {part.strip()!r} is not a step or a range", expected=expected)
        first = int(match.group(1))
        last = first if match.group(2) is None else int(match.group(2))
        if first > last:
            raise UsageError(f"steps {spec!r}: {part.strip()!r} runs backwards", expected=expected)
        ranges.append((first, last))
    return ranges


def steps_text(steps: Iterable[int], most: int = 6) -> str:
    """Steps as the ranges a user types: ``0-30``, ``0-3, 5, 7-9``; past ``most`` ranges, the first ones, ``...``
    and the last."""
    values = sorted(set(steps))
    runs: list[list[int]] = []
    for step in values:
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    texts = [str(first) if first == last else f"{first}-{last}" for first, last in runs]
    return ", ".join(texts if len(texts) <= most else [*texts[: most - 1], "...", texts[-1]])


def select_steps(table: pa.Table, steps: str | int | Iterable[int]) -> pa.Table:
    """The rows of ``table`` whose step is among ``steps`` (``"10-20,30"``: ranges inclusive, comma-separated; or
    one step, or steps), in the table's order, its metadata kept. A step the table does not hold is a
    :class:`~rollaudit.UsageError` that names the steps it holds; a range need only overlap them.

    >>> t = make_table(reward=[1.0, 2.0, 3.0], prompt=[0, 0, 0], step=[1, 2, 3])
    >>> select_steps(t, "2-3").column("reward").to_pylist()
    [2.0, 3.0]
    """
    import pyarrow.compute as pc

    from ._errors import UsageError

    ranges = parse_steps(steps)
    held = pc.unique(table.column(STEP)).to_pylist()
    absent = [(first, last) for first, last in ranges if not any(first <= step <= last for step in held)]
    if absent:
        holds = f"it holds {steps_text(held)}" if held else "it holds no step"
        many = len(absent) > 1 or absent[0][0] != absent[0][1]
        named = ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in absent)
        raise UsageError(f"{'steps' if many else 'step'} {named} {'are' if many else 'is'} not in the dump ({holds})")
    column = table.column(STEP)
    keep = None
    for first, last in ranges:
        inside = pc.and_(pc.greater_equal(column, first), pc.less_equal(column, last))
        keep = inside if keep is None else pc.or_(keep, inside)
    selected = table.filter(keep)
    kept = pc.unique(selected.column(STEP)).to_pylist()
    if len(kept) == len(held) or not found_in(table):
        return selected
    # What the loader found (a line of every report) was counted over the whole dump: say so beside it.
    note = (
        f"{len(kept):,} of the dump's {len(held):,} steps selected ({steps_text(kept)}): the counts the loader "
        "found are the whole dump's"
    )
    return with_found(selected, found_in(table), [*notes_in(table), note])


def key_matches(column: pa.Array | pa.ChunkedArray, key: str | int, what: str = "prompt") -> pa.Array | pa.ChunkedArray:
    """Which rows of a key column (``prompt``, ``trajectory``) hold ``key``, compared as the text a report prints:
    ``7`` and ``"7"`` both name the int key 7; a string key matches as written, or as printed (whitespace runs
    as one space, control characters as escapes), or cut short and ended with ``…`` as a table shows a long key,
    when it starts one key only. A key no row holds is a :class:`~rollaudit.UsageError` that
    names a few keys there are (``what``: the kind of key, as the line calls it)."""
    import pyarrow.compute as pc

    from ._errors import UsageError, did_you_mean, visible

    wanted = str(key)
    present = [value for value in pc.unique(column).to_pylist() if value is not None]
    matched = [value for value in present if str(value) == wanted]
    printed = {value: visible(" ".join(str(value).split())) for value in present} if not matched else {}
    if not matched:
        matched = [value for value, text in printed.items() if text == wanted]
    if not matched and wanted.endswith("…") and len(wanted) > 1:  # a long key as a table shows it, cut short
        matched = [value for value, text in printed.items() if text.startswith(wanted[:-1])]
        if len(matched) > 1:
            raise UsageError(
                f"{what} {visible(wanted)!r} is the start of {len(matched):,} keys",
                expected="more of the key, or all of it",
            )
    if not matched:
        texts = sorted((str(value) for value in present), key=lambda text: (len(text), text))
        few = texts if len(texts) <= 6 else [*texts[:5], "..."]
        named = f"it has {len(present):,}: {', '.join(_shortened(visible(' '.join(text.split()))) for text in few)}"
        raise UsageError(
            f"{what} {visible(wanted)!r} is not in the dump{did_you_mean(wanted, texts[:10_000])} "
            f"({named if present else 'it has none'})"
        )
    return pc.is_in(column, pa.array(matched, column.type))


def _shortened(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def select_prompt(table: pa.Table, key: str | int) -> pa.Table:
    """The rows of ``table`` whose prompt key is ``key`` (compared as the text the report prints: see
    :func:`key_matches`; a string key cut short and ended with ``…``, as a table shows it, names the one key it
    starts), in the table's order, its metadata kept.

    >>> t = make_table(reward=[1.0, 2.0, 3.0], prompt=["a", "b", "a"])
    >>> select_prompt(t, "a").column("reward").to_pylist()
    [1.0, 3.0]
    """
    return table.filter(key_matches(table.column(PROMPT), key))
