"""Fuzzing the table loaders (verl JSON Lines, TRL Parquet, generic Parquet/Feather/Arrow/JSONL/CSV).

Two kinds of case per loader: the bundled samples with their bytes mutated,
and well-formed files of random content (random fields, types, nulls,
extremes, options). Each is loaded with its format detected and with
``format=`` forced (its own, or another one); every case ends in a valid
canonical table or a RollauditError (harness.run_case).
"""

from __future__ import annotations

import functools
import io
import json

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from rollaudit._loaders.formats import generic as _generic
from tests.fuzz import harness, mutations
from tests.fuzz.harness import read_sample, run_case

FORMATS = ("slime", "verl", "trl", "art", "generic")
SEEDS = {
    "verl": {"1.jsonl": "verl/rollout_data/1.jsonl", "2.jsonl": "verl/rollout_data/2.jsonl"},
    "trl": {"completions_00010.parquet": "trl/completions/completions_00010.parquet"},
    "art": {"0001.parquet": "art/.art/demo/models/agent/trajectories/train/0001.parquet"},
    "generic": {
        "rollouts.parquet": "agl/rollouts.parquet",
        "rollouts.csv": "generic/rollouts.csv",
        "rollouts.jsonl": "generic/rollouts.jsonl",
        "rollouts.feather": "generic/rollouts.feather",
        "train_data_step3.jsonl": "nemo/train_data_step3.jsonl",
    },
}


@functools.cache
def seed_bytes(relative: str) -> bytes:
    return read_sample(relative)


def _format_choice(loader: str) -> st.SearchStrategy[str | None]:
    """Detected (None) half the time, else the loader's own format, sometimes another one."""
    return st.one_of(st.none(), st.just(loader), st.none(), st.just(loader), st.sampled_from(FORMATS))


def _load(loader: str, name: str, data: bytes, format: str | None, description: str, **options) -> None:
    if format is not None:
        options["format"] = format
    run_case(loader, {name: data}, description=description, **options)


def _byte_test(loader: str):
    seeds = SEEDS[loader]

    @harness.fuzz_settings()
    @given(
        name=st.sampled_from(sorted(seeds)),
        operations=mutations.byte_operations(),
        format=_format_choice(loader),
        head=st.booleans(),
    )
    def test(name: str, operations: list, format: str | None, head: bool):
        data = seed_bytes(seeds[name])
        # Half the cases mutate the first 512 bytes only: headers, magic numbers, the first JSON line.
        mutated = mutations.apply_operations(data, operations, 0, 512 if head else None)
        _load(loader, name, mutated, format, f"{name} {operations}")

    test.__name__ = f"test_{loader}_mutated_bytes"
    test.__doc__ = f"The bundled {loader} samples with bit flips, truncations and insertions."
    return test


test_verl_mutated_bytes = _byte_test("verl")
test_trl_mutated_bytes = _byte_test("trl")
test_art_mutated_bytes = _byte_test("art")
test_generic_mutated_bytes = _byte_test("generic")


# ---------------------------------------------------------------------------------------------------------------------
# verl: JSON lines of random content.

VERL_FIELDS = ("input", "output", "gts", "score", "step", "acc", "pred", "uid", "advantages", "reward")


@st.composite
def verl_lines(draw: st.DrawFn) -> bytes:
    """Mostly verl-shaped objects (input/output/score/step), with random values, broken lines and odd line ends."""
    plausible = st.fixed_dictionaries(
        {
            "input": st.one_of(st.sampled_from(("p0", "p1", "p2")), mutations.JSON_VALUES),
            "output": st.text(max_size=8),
            "score": st.one_of(st.sampled_from((0, 1, 0.5, -1.0)), mutations.JSON_VALUES),
        },
        optional={
            "step": st.one_of(st.integers(0, 5), mutations.JSON_VALUES),
            "acc": st.one_of(st.booleans(), mutations.JSON_VALUES),
            "pred": mutations.JSON_VALUES,
            "advantages": st.lists(st.floats(-3, 3), max_size=4),
        },
    ).map(lambda value: json.dumps(value, ensure_ascii=False))
    any_line = st.one_of(plausible, plausible, plausible, mutations.json_line(VERL_FIELDS))
    first = draw(st.one_of(plausible, plausible, plausible, any_line, st.just("")))
    lines = [first, *draw(st.lists(any_line, max_size=11))]
    separator = draw(st.sampled_from(("\n", "\n", "\r\n", "\n\n")))
    text = separator.join(lines) + draw(st.sampled_from(("", "\n")))
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:
        data = draw(st.sampled_from((b"\xef\xbb\xbf", b"\xff\xfe", b"\x00"))) + data
    return data


@harness.fuzz_settings()
@given(
    data=verl_lines(),
    name=st.sampled_from(("1.jsonl", "7.jsonl", "rollout.jsonl", "0001.jsonl")),
    format=_format_choice("verl"),
    options=mutations.table_load_options(VERL_FIELDS, FORMATS),
)
def test_verl_random_lines(data: bytes, name: str, format: str | None, options: dict):
    """JSON lines of random content: verl's fields with random values, broken lines, odd line ends and options."""
    options.pop("format", None)
    _load("verl", name, data, format, f"{name} {data[:200]!r}", **options)


# ---------------------------------------------------------------------------------------------------------------------
# TRL and generic: random tables, written in each format.

TRL_NAMES = ("step", "prompt", "completion", "advantage", "accuracy_reward", "format_reward", "mode", "other")
GENERIC_NAMES = (
    *_generic.REWARD_NAMES,
    "group_index",
    "uid",
    "prompt",
    "rollout_id",
    "traj_uid",
    *_generic.ADVANTAGE_NAMES[:2],
    *_generic.STEP_NAMES,
    "token_loss_mask",
    "mask",
    "status",
    "response_length",
    "position",
    "extra",
)


def _write(table: pa.Table, kind: str) -> bytes | None:
    """The table's bytes in ``kind``; None when that format cannot hold its types."""
    buffer = io.BytesIO()
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, buffer)
        elif kind == "feather":
            import pyarrow.feather as feather

            feather.write_feather(table, buffer, compression="uncompressed")
        elif kind == "arrow-stream":
            with pa.ipc.new_stream(buffer, table.schema) as writer:
                writer.write_table(table)
        elif kind == "csv":
            import pyarrow.csv as csv

            csv.write_csv(table, buffer)
        else:
            for row in table.to_pylist():
                buffer.write(
                    (json.dumps(row, default=repr, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
                )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError, OverflowError):
        return None
    return buffer.getvalue()


def _describe(table: pa.Table) -> str:
    try:
        rows = repr(table.to_pylist())
    except (OverflowError, ValueError, pa.ArrowException):  # durations past Python's timedelta, ...
        rows = "<rows not printable>"
    return f"{table.schema} {rows:.400}"


_SUFFIX = {"parquet": ".parquet", "feather": ".feather", "arrow-stream": ".arrow", "csv": ".csv", "jsonl": ".jsonl"}


@harness.fuzz_settings()
@given(
    table=mutations.arrow_table(
        TRL_NAMES,
        likely={
            "step": ("int",),
            "prompt": ("string", "messages"),
            "completion": ("string",),
            "accuracy_reward": ("float", "int", "bool"),
            "format_reward": ("float",),
            "advantage": ("float",),
        },
    ),
    name=st.sampled_from(("completions_00010.parquet", "completions_3.parquet", "log.parquet")),
    format=_format_choice("trl"),
    options=mutations.table_load_options(TRL_NAMES, FORMATS),
    operations=st.one_of(st.just([]), st.just([]), st.just([]), st.lists(mutations.byte_operation(), max_size=2)),
)
def test_trl_random_tables(table: pa.Table, name: str, format: str | None, options: dict, operations: list):
    """Random tables with TRL's columns (and others) as Parquet, sometimes with a byte mutated."""
    options.pop("format", None)
    data = _write(table, "parquet")
    if data is None:
        return
    data = mutations.apply_operations(data, operations)
    _load("trl", name, data, format, f"{name} {_describe(table)} {operations}", **options)


@harness.fuzz_settings()
@given(
    table=mutations.arrow_table(
        GENERIC_NAMES,
        likely={
            "reward": ("float", "int", "bool", "float-list", "string"),
            "uid": ("string", "int", "float", "messages"),
            "rollout_id": ("string", "int"),
            "step": ("int", "float"),
            "advantages": ("float-list", "float"),
            "token_loss_mask": ("int-list", "bool-list"),
        },
    ),
    kind=st.sampled_from(("parquet", "feather", "arrow-stream", "csv", "jsonl")),
    stem=st.sampled_from(("rollouts", "train_data_step3", "step_99999999999999999999")),
    format=_format_choice("generic"),
    options=mutations.table_load_options(GENERIC_NAMES, FORMATS),
    operations=st.one_of(st.just([]), st.just([]), st.just([]), st.lists(mutations.byte_operation(), max_size=2)),
)
def test_generic_random_tables(
    table: pa.Table, kind: str, stem: str, format: str | None, options: dict, operations: list
):
    """Random tables with the common column names (and others) in every format, sometimes with a byte mutated."""
    options.pop("format", None)
    data = _write(table, kind)
    if data is None:
        return
    data = mutations.apply_operations(data, operations)
    name = stem + _SUFFIX[kind]
    _load("generic", name, data, format, f"{name} {_describe(table)} {operations}", **options)


_DRIFTING = {"reward": ("float", "int"), "prompt": ("string", "int", "messages"), "step": ("int",)}


@harness.fuzz_settings()
@given(
    first=mutations.arrow_table(GENERIC_NAMES, likely=_DRIFTING),
    second=mutations.arrow_table(GENERIC_NAMES, likely=_DRIFTING),
    kind=st.sampled_from(("parquet", "jsonl", "feather")),
)
def test_columns_that_change_type_between_files(first: pa.Table, second: pa.Table, kind: str):
    """Two files of one run whose shared columns were drawn independently: pass-through columns, keys and steps
    whose types drift from file to file (once an ArrowTypeError when the table was joined)."""
    files = {}
    for number, table in enumerate((first, second)):
        data = _write(table, kind)
        if data is None:
            return
        files[f"run/step{number}{_SUFFIX[kind]}"] = data
    description = f"{_describe(first)} then {_describe(second)}"
    run_case("generic", files, target="run", description=description)
