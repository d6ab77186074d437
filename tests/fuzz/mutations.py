"""Hypothesis strategies for hostile and broken inputs: byte mutations, pickle opcodes, JSON lines, Arrow tables.

Mutations are drawn as data (a list of operations with positions) and applied
to the seed bytes afterwards, so hypothesis shrinks a failing case to a few
operations on one seed.
"""

from __future__ import annotations

import contextlib
import json
import math
import pickletools
import struct
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

# ---------------------------------------------------------------------------------------------------------------------
# Byte mutations.

INTERESTING_NUMBERS = (
    0,
    1,
    2,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0x7FFF,
    0xFFFF,
    0x10000,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
    1 << 40,
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
)
_POSITION = st.integers(0, (1 << 32) - 1)


def byte_operation() -> st.SearchStrategy[tuple]:
    return st.one_of(
        st.tuples(st.just("flip"), _POSITION, st.integers(0, 7)),
        st.tuples(st.just("set"), _POSITION, st.integers(0, 255)),
        st.tuples(st.just("insert"), _POSITION, st.binary(min_size=1, max_size=16)),
        st.tuples(st.just("delete"), _POSITION, st.integers(1, 64)),
        st.tuples(st.just("truncate"), _POSITION),
        st.tuples(st.just("copy"), _POSITION, _POSITION, st.integers(1, 256)),
        st.tuples(st.just("number"), _POSITION, st.sampled_from((1, 2, 4, 8)), st.sampled_from(INTERESTING_NUMBERS)),
    )


def byte_operations(max_size: int = 6) -> st.SearchStrategy[list[tuple]]:
    return st.lists(byte_operation(), min_size=1, max_size=max_size)


def apply_operations(data: bytes, operations: Sequence[tuple], start: int = 0, stop: int | None = None) -> bytes:
    """Apply byte operations; positions fall in ``[start, stop)`` of the current data (the whole data by default)."""
    buffer = bytearray(data)
    for operation in operations:
        end = len(buffer) if stop is None else min(stop, len(buffer))
        low = min(start, end)
        span = max(end - low, 1)

        def at(raw: int, low: int = low, span: int = span) -> int:
            return low + raw % span

        kind = operation[0]
        if not buffer and kind not in ("insert",):
            continue
        if kind == "flip":
            position = min(at(operation[1]), len(buffer) - 1)
            buffer[position] ^= 1 << operation[2]
        elif kind == "set":
            buffer[min(at(operation[1]), len(buffer) - 1)] = operation[2]
        elif kind == "insert":
            position = at(operation[1]) if buffer else 0
            buffer[position:position] = operation[2]
        elif kind == "delete":
            position = at(operation[1])
            del buffer[position : position + operation[2]]
        elif kind == "truncate":
            del buffer[at(operation[1]) :]
        elif kind == "copy":
            source, target, length = operation[1] % len(buffer), at(operation[2]), operation[3]
            buffer[target : target + length] = buffer[source : source + length]
        elif kind == "number":
            position, width, value = at(operation[1]), operation[2], operation[3]
            buffer[position : position + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return bytes(buffer)


# ---------------------------------------------------------------------------------------------------------------------
# Pickle opcodes, with arguments that are sometimes right and sometimes hostile.

_OPCODES = tuple(sorted(pickletools.opcodes, key=lambda opcode: opcode.code))
GLOBAL_NAMES = (
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch._tensor", "_rebuild_from_type_v2"),
    ("torch", "FloatStorage"),
    ("torch", "LongStorage"),
    ("torch", "IntStorage"),
    ("torch", "BFloat16Storage"),
    ("torch", "BoolStorage"),
    ("torch", "Tensor"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "bytearray"),
    ("_codecs", "encode"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("os", "system"),
    ("builtins", "eval"),
    ("builtins", "getattr"),
    ("copy_reg", "_reconstructor"),
    ("__builtin__", "object"),
    ("slime.utils.types", "Sample"),
)
_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=12)  # lone surrogates included
_KEYS = st.sampled_from(
    ("rollout_id", "samples", "reward", "group_index", "index", "status", "response_length", "storage", "0", "cpu")
)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # what pickle itself writes for a lone surrogate


def _count(width: int, actual: int) -> st.SearchStrategy[int]:
    """A length field: usually the true length, sometimes hostile."""
    limit = (1 << (8 * width)) - 1
    return st.one_of(
        st.just(actual),
        st.just(actual),
        st.just(actual),
        st.sampled_from([value & limit for value in INTERESTING_NUMBERS]),
    )


@st.composite
def _argument(draw: st.DrawFn, name: str) -> bytes:
    if name in ("uint1", "uint2", "uint4", "uint8"):
        width = {"uint1": 1, "uint2": 2, "uint4": 4, "uint8": 8}[name]
        small = draw(st.booleans())
        value = draw(st.integers(0, 8)) if small else draw(st.integers(0, (1 << (8 * width)) - 1))
        return value.to_bytes(width, "little")
    if name == "int4":
        return struct.pack("<i", draw(st.integers(-(1 << 31), (1 << 31) - 1)))
    if name == "float8":
        return struct.pack(">d", draw(st.floats(allow_nan=True, allow_infinity=True)))
    if name in ("long1", "string1", "bytes1", "unicodestring1"):
        body = _utf8(draw(_TEXT)) if "unicode" in name or "string" in name else draw(st.binary(max_size=12))
        return bytes([draw(_count(1, len(body)))]) + body
    if name in ("long4", "string4"):
        body = draw(st.binary(max_size=12))
        count = draw(_count(4, len(body)))
        return struct.pack("<I", count & 0xFFFFFFFF) + body
    if name in ("bytes4", "unicodestring4"):
        body = _utf8(draw(_TEXT)) if "unicode" in name else draw(st.binary(max_size=12))
        return struct.pack("<I", draw(_count(4, len(body)))) + body
    if name in ("bytes8", "unicodestring8", "bytearray8"):
        body = _utf8(draw(_TEXT)) if "unicode" in name else draw(st.binary(max_size=12))
        return struct.pack("<Q", draw(_count(8, len(body)))) + body
    if name == "decimalnl_short":
        return str(draw(st.sampled_from((0, 1, -1, 7, 1 << 40, 99999999999)))).encode() + b"\n"
    if name == "decimalnl_long":
        return str(draw(st.integers(-(1 << 70), 1 << 70))).encode() + b"L\n"
    if name == "floatnl":
        return repr(draw(st.floats())).encode() + b"\n"
    if name == "stringnl":
        return repr(draw(_TEXT)).encode("ascii", "backslashreplace") + b"\n"
    if name == "stringnl_noescape":
        return draw(st.sampled_from(("0", "1", "storage", "x"))).encode() + b"\n"
    if name == "stringnl_noescape_pair":
        module, attribute = draw(st.sampled_from(GLOBAL_NAMES))
        return module.encode() + b"\n" + attribute.encode() + b"\n"
    if name == "unicodestringnl":
        return draw(_TEXT).replace("\n", " ").encode("raw-unicode-escape", "surrogatepass") + b"\n"
    raise AssertionError(f"no strategy for pickle argument {name}")


@st.composite
def opcode(draw: st.DrawFn) -> bytes:
    """One pickle opcode with an argument of its kind."""
    chosen = draw(st.sampled_from(_OPCODES))
    code = chosen.code.encode("latin1")
    if chosen.arg is None:
        return code
    return code + draw(_argument(chosen.arg.name))


@st.composite
def fragment(draw: st.DrawFn) -> bytes:
    """A few opcodes that do something meaningful together: a call, a storage, a tensor, a keyed value."""
    kind = draw(
        st.sampled_from(("call", "storage", "tensor", "keyed", "stack_global", "memo", "dag", "shared", "collide"))
    )
    if kind in ("dag", "shared", "collide"):
        return _shaped(draw, kind)
    if kind == "call":
        module, name = draw(st.sampled_from(GLOBAL_NAMES))
        arguments = b"".join(draw(st.lists(opcode(), max_size=3)))
        return b"c" + module.encode() + b"\n" + name.encode() + b"\n(" + arguments + b"tR"
    if kind == "storage":
        return _storage(draw)
    if kind == "tensor":
        numbers = st.sampled_from((0, 1, 2, 3, 4, 255, 1 << 20, 1 << 40, (1 << 62) + 1, -1))

        def integer(value: int) -> bytes:
            return (
                b"J" + struct.pack("<i", value)
                if -(1 << 31) <= value < 1 << 31
                else b"\x8a\x09" + value.to_bytes(9, "little", signed=True)
            )

        size = b"".join(integer(draw(numbers)) for _ in range(draw(st.integers(0, 3))))
        stride = b"".join(integer(draw(numbers)) for _ in range(draw(st.integers(0, 3))))
        return (
            b"ctorch._utils\n_rebuild_tensor_v2\n("
            + _storage(draw)
            + integer(draw(numbers))
            + b"("
            + size
            + b"t("
            + stride
            + b"t\x89ccollections\nOrderedDict\n)RtR"
        )
    if kind == "keyed":
        key = draw(_KEYS).encode()
        return b"X" + struct.pack("<I", len(key)) + key + draw(opcode())
    if kind == "stack_global":
        module, name = draw(st.sampled_from(GLOBAL_NAMES))
        return b"\x8c" + bytes([len(module)]) + module.encode() + b"\x8c" + bytes([len(name)]) + name.encode() + b"\x93"
    index = draw(st.sampled_from((0, 1, 2, 255, 1 << 20, 0xFFFFFFFF)))
    return draw(st.sampled_from((b"\x94", b"q" + bytes([index & 0xFF]), b"h" + bytes([index & 0xFF]))))


def _shaped(draw: st.DrawFn, kind: str) -> bytes:
    """Hostile shapes, small and at the bounds: a tuple DAG (``t = (t, t)`` by DUP), one list referenced
    many times, big integers that share one hash residue; sometimes as a dict key, where they are hashed."""
    if kind == "dag":
        body = b")" + b"2\x86" * draw(st.sampled_from((1, 2, 8, 19, 20, 21, 40, 64)))
    elif kind == "shared":
        body = b"(]K\x01a" + b"2" * draw(st.sampled_from((1, 2, 100, 10_000))) + b"l"
    else:
        modulus = (1 << 61) - 1
        count = draw(st.sampled_from((2, 63, 64, 65, 200)))
        keys = b"".join(b"\x8a\x10" + (5 + index * modulus).to_bytes(16, "little") + b"N" for index in range(count))
        body = b"}(" + keys + b"u"
    if draw(st.booleans()):
        body = b"}" + body + b"K\x01s"  # as a dict key: hashed
    return body


def _storage(draw: st.DrawFn) -> bytes:
    """A persistent id for a storage: ``("storage", torch.XStorage, key, "cpu", numel)`` + BINPERSID."""
    kind = draw(st.sampled_from(("FloatStorage", "LongStorage", "IntStorage", "BFloat16Storage", "BoolStorage", "X")))
    key = draw(st.sampled_from(("0", "1", "2", "9", "../0", "")))
    numel = draw(st.sampled_from((0, 1, 2, 4, 8, 16, 1 << 20, 1 << 40)))
    return (
        b"(X\x07\x00\x00\x00storagectorch\n"
        + kind.encode()
        + b"\nX"
        + struct.pack("<I", len(key))
        + key.encode()
        + b"X\x03\x00\x00\x00cpu\x8a\x08"
        + numel.to_bytes(8, "little")
        + b"tQ"
    )


def opcode_soup(max_size: int = 12) -> st.SearchStrategy[bytes]:
    """A run of random opcodes and meaningful fragments."""
    return st.lists(st.one_of(opcode(), fragment()), min_size=1, max_size=max_size).map(b"".join)


# ---------------------------------------------------------------------------------------------------------------------
# JSON lines.

_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 70), 1 << 70),
    st.sampled_from((0, 1, -1, 2, 3, (1 << 63) - 1, 1 << 63, -(1 << 63))),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from((0.0, 0.5, 1.0, -1.0, 1e308, 5e-324)),
    st.text(max_size=10),
    st.sampled_from(("1", "nan", "inf", "0.5", "", "x")),
)
JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


def json_line(fields: Sequence[str], values: st.SearchStrategy[Any] = JSON_VALUES) -> st.SearchStrategy[str]:
    """One line: usually a JSON object over some of ``fields``, sometimes something that is not one."""
    objects = st.dictionaries(st.sampled_from(list(fields)), values, max_size=len(fields)).map(
        lambda value: json.dumps(value, ensure_ascii=False)
    )
    broken = st.one_of(
        st.just(""),
        st.just("   "),
        st.text(max_size=20),
        JSON_VALUES.map(json.dumps),
        objects.map(lambda line: line[: len(line) // 2]),
        st.just('{"score": NaN, "input": "a", "output": "b"}'),
        st.just('{"score": 1, "score": "x", "input": "a"}'),
        # deep nesting around the depth bound (512) and far past it, inside and outside strings
        st.sampled_from((511, 512, 513, 5_000, 50_000)).map(lambda depth: '{"x": ' + "[" * depth + "]" * depth + "}"),
        st.sampled_from((513, 50_000)).map(lambda depth: '{"x": "' + "[" * depth + '"}'),
    )
    return st.one_of(objects, objects, objects, objects, broken)


# ---------------------------------------------------------------------------------------------------------------------
# Arrow tables of many types, with nulls, NaN and extremes.


def _column_values(kind: str, rows: int, nulls: bool = True) -> st.SearchStrategy[list]:
    def values(element: st.SearchStrategy[Any]) -> st.SearchStrategy[list]:
        item = st.one_of(st.none(), element, element, element) if nulls else element
        return st.lists(item, min_size=rows, max_size=rows)

    floats = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True, width=64),
        st.sampled_from((0.0, 1.0, 0.5, -1.0, 2.0, 3.0, math.nan)),
    )
    ints = st.one_of(
        st.integers(-3, 10),
        st.sampled_from((-(1 << 63), (1 << 63) - 1, 1 << 31)),
        st.integers(-(1 << 63), (1 << 63) - 1),
    )
    strings = st.one_of(st.sampled_from(("a", "b", "p0", "p1", "", "1", "2.5", "nan", "x y")), st.text(max_size=6))
    if kind == "float":
        return values(floats)
    if kind == "int":
        return values(ints)
    if kind == "bool":
        return values(st.booleans())
    if kind == "string":
        return values(strings)
    if kind == "float-list":
        return values(st.lists(st.one_of(st.none(), floats), max_size=4))
    if kind == "int-list":
        return values(st.lists(st.one_of(st.none(), st.integers(-2, 3)), max_size=4))
    if kind == "bool-list":
        return values(st.lists(st.booleans(), max_size=4))
    if kind == "string-list":
        return values(st.lists(strings, max_size=3))
    if kind == "struct":
        return values(st.fixed_dictionaries({"role": strings, "content": strings}))
    if kind == "messages":
        return values(st.lists(st.fixed_dictionaries({"role": strings, "content": strings}), max_size=2))
    if kind == "binary":
        return values(st.binary(max_size=6))
    if kind == "null":
        return st.just([None] * rows)
    raise AssertionError(kind)


COLUMN_KINDS = (
    "float",
    "int",
    "bool",
    "string",
    "float-list",
    "int-list",
    "bool-list",
    "string-list",
    "struct",
    "messages",
    "binary",
    "null",
)
FLAT_KINDS = ("float", "int", "bool", "string", "null")
# Arrow types a column is cast to after it is built (dictionary, large, narrow, decimal, timestamps...).
_CASTS = {
    "float": ("float32", "float16", "decimal128(20, 4)", "large_string"),
    "int": ("int8", "uint64", "int32", "float32", "dictionary", "timestamp", "decimal128(38, 0)", "duration"),
    "string": ("large_string", "dictionary", "string_view", "binary"),
    "float-list": ("large_list", "fixed_size_list", "list_view"),
    "bool": ("int8", "string"),
}


def _cast(array: Any, target: str) -> Any:
    import pyarrow as pa

    if target == "dictionary":
        return array.dictionary_encode()
    if target == "large_list":
        return array.cast(pa.large_list(pa.float64()))
    if target == "list_view":
        return array.cast(pa.list_view(pa.float64()))
    if target == "fixed_size_list":
        lengths = {len(value) for value in array.to_pylist() if value is not None}
        if len(lengths) != 1:
            return array
        return array.cast(pa.list_(pa.float64(), lengths.pop()))
    types = {
        "float32": pa.float32(),
        "float16": pa.float16(),
        "decimal128(20, 4)": pa.decimal128(20, 4),
        "decimal128(38, 0)": pa.decimal128(38, 0),
        "large_string": pa.large_string(),
        "string_view": pa.string_view(),
        "binary": pa.binary(),
        "int8": pa.int8(),
        "uint64": pa.uint64(),
        "int32": pa.int32(),
        "timestamp": pa.timestamp("s"),
        "duration": pa.duration("s"),
        "string": pa.string(),
    }
    return array.cast(types[target], safe=False)


@st.composite
def arrow_table(
    draw: st.DrawFn,
    names: Sequence[str],
    likely: dict[str, Sequence[str]] | None = None,
    kinds: Sequence[str] = COLUMN_KINDS,
    max_rows: int = 10,
) -> Any:
    """A pyarrow table over some of ``names``: random types (cast to exotic ones sometimes), nulls and extremes.

    ``likely`` (name -> plausible kinds) names columns that are usually present with a plausible kind, so that
    many tables get past the column checks and reach the reduction code.
    """
    import pyarrow as pa

    rows = draw(st.integers(0, max_rows))
    chosen = draw(st.lists(st.sampled_from(list(names)), max_size=min(5, len(names)), unique=True))
    plausible: dict[str, Sequence[str]] = {}
    for name, usual in (likely or {}).items():
        if draw(st.integers(0, 4)) and name not in chosen:
            chosen.append(name)
            plausible[name] = usual
    if not chosen:
        chosen = [names[0]]
    columns = {}
    for name in draw(st.permutations(chosen)):
        kind = draw(st.sampled_from(list(plausible.get(name, kinds))))
        values = draw(_column_values(kind, rows, nulls=name not in plausible or draw(st.booleans())))
        try:
            array = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            array = pa.array([None] * rows)
        casts = _CASTS.get(kind, ())
        if casts and draw(st.integers(0, 3)) == 0:
            with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
                array = _cast(array, draw(st.sampled_from(casts)))
        columns[name] = array
    return pa.table(columns)


def table_load_options(names: Sequence[str], formats: Sequence[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Load options: mostly none, sometimes naming columns (present or not), a token rule, group sizes, a format."""
    column = st.one_of(st.none(), st.none(), st.none(), st.sampled_from([*names, "missing_column"]))
    return st.fixed_dictionaries(
        {},
        optional={
            "format": st.sampled_from(list(formats)),
            "reward_col": column,
            "prompt_col": column,
            "trajectory_col": column,
            "step_col": column,
            "advantage_col": column,
            "mask_col": column,
            "token_reduce": st.sampled_from(("first", "last", "mean")),
            "n_samples_per_prompt": st.one_of(st.none(), st.integers(1, 5)),
            "num_generations": st.one_of(st.none(), st.integers(1, 5)),
            "reward_columns": st.one_of(st.none(), st.lists(st.sampled_from(list(names)), min_size=1, max_size=3)),
            "reward_weights": st.one_of(
                st.none(),
                st.lists(st.floats(-2, 2), min_size=1, max_size=3),
                st.dictionaries(st.sampled_from(list(names)), st.floats(-2, 2), min_size=1, max_size=2),
            ),
        },
    )
