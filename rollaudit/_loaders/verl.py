"""verl ``rollout_data_dir`` dumps to the canonical table.

``trainer.rollout_data_dir=DIR`` (and ``validation_data_dir``) writes
``DIR/{global_step}.jsonl``: one JSON object a line with ``input`` (the
decoded prompt), ``output`` (the decoded response), ``gts`` (ground truth,
since v0.6), ``score`` (the sequence reward), ``step``, and every
reward-extra-info key that has one value per sample. Lines come in the
trainer's balanced order, not grouped by prompt.

Columns: ``step`` = the ``step`` field (else the ``{step}`` of the file
name), ``position`` = the line's place in the file, ``prompt`` = the
``input`` text (verl keeps no uid in the dump: equal prompt texts are one
group), ``reward`` = ``score``; passed through: the numeric and boolean
reward-extra-info keys of the first line (``acc``, ...; a key named like a
canonical column gets a ``source_`` prefix). ``output``, ``gts`` and other
text are never read into memory: the file is parsed by pyarrow's JSON
reader with an explicit schema that ignores them. The column options
(``reward_col``, ``prompt_col``, ``step_col``, ``trajectory_col``,
``advantage_col``) replace these defaults.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from .._errors import InputError, RollauditWarning
from .._table import concat_tables, make_table
from . import columns, tables
from .base import Format

if TYPE_CHECKING:
    from .options import LoadOptions

PROMPT_FIELD = "input"
REWARD_FIELD = "score"
STEP_FIELD = "step"
TEXT_FIELDS = ("input", "output", "gts")
_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")


def detect(path: Path) -> bool:
    """A JSON Lines file whose first line has verl's ``input`` and ``output`` and a ``score`` or ``step``."""
    first = tables.first_json_object(path)
    return first is not None and {"input", "output"} <= first.keys() and bool({"score", "step"} & first.keys())


def expand_directory(directory: Path) -> list[Path] | None:
    """A ``rollout_data_dir``'s ``{step}.jsonl`` files, or None when it has none."""
    files = [path for path in directory.iterdir() if path.is_file() and _STEP_FILE.match(path.name)]
    return files or None


def _field_type(value: Any, role: str) -> pa.DataType | None:
    """The Arrow type a field is read as, from its value on the first line (None: not read)."""
    if role == "key":
        if isinstance(value, str):
            return pa.string()
        if type(value) is int:
            return pa.int64()
        # verl's input is text; a prompt_col holding chat messages keeps its nested type (keyed by its JSON text)
        if value is None:
            return pa.string()
        try:
            return pa.array([value]).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            return pa.string()  # values no Arrow type holds ([1, "a"]): the JSON reader then names the line
    if role == "list" and isinstance(value, list):
        return pa.list_(pa.float64())
    if type(value) is bool:
        return pa.bool_()
    if isinstance(value, (int, float)) or role in ("number", "list"):
        return pa.float64()  # numbers as doubles: an int on line 1 and a float later are one column
    return None


class _Fields:
    """Which field plays which role in one file."""

    def __init__(self, first: dict, options: LoadOptions, path: Path) -> None:
        names = list(first)
        self.reward = options.reward_col or REWARD_FIELD
        self.prompt = options.prompt_col or PROMPT_FIELD
        self.step = options.step_col or STEP_FIELD
        self.trajectory = options.trajectory_col
        self.advantage = options.advantage_col
        for role, name in (("reward", self.reward), ("prompt key", self.prompt)):
            if name not in first:
                raise InputError(
                    f"the first line has no {name!r} field; fields found: {columns.columns_found(names)}",
                    file=str(path),
                    field=name,
                    expected=f"verl's rollout lines with the {role} field",
                )
        for name in (self.trajectory, self.advantage):
            if name is not None and name not in first:
                raise InputError(
                    f"the first line has no {name!r} field; fields found: {columns.columns_found(names)}",
                    file=str(path),
                    field=name,
                    expected="the field named by the column option",
                )
        roles = {self.prompt: "key", self.reward: "number", self.step: "number"}
        if self.trajectory is not None:
            roles[self.trajectory] = "key"
        if self.advantage is not None:
            roles[self.advantage] = "list"
        fields = []
        for name, role in roles.items():
            kind = _field_type(first.get(name), role)
            if kind is not None:
                fields.append(pa.field(name, kind))
        self.needed = pa.schema(fields)
        extras = []
        for name, value in first.items():
            if name in roles or name in TEXT_FIELDS:
                continue
            kind = _field_type(value, "extra")
            if kind is not None:
                extras.append(pa.field(name, kind))
        self.extras = pa.schema(extras)


def _read_lines(path: Path, options: LoadOptions) -> tuple[pa.Table, _Fields]:
    first = tables.first_json_object(path)
    if first is None:
        # A first line longer than the sniff limit (or a bad one): pyarrow infers the fields, or names the bad line.
        table = tables.read_json_lines(path)
        if table.num_rows == 0:
            raise InputError("empty file: no lines", file=str(path), expected="verl rollout lines")
        fields = _Fields(table.slice(0, 1).to_pylist()[0], options, path)
        names = list(fields.needed.names) + list(fields.extras.names)
        return table.select([name for name in names if name in table.column_names]), fields
    fields = _Fields(first, options, path)
    try:
        return tables.read_json_lines(path, pa.schema(list(fields.needed) + list(fields.extras))), fields
    except InputError as error:
        if error.field is None or error.field not in fields.extras.names:
            raise
        # A reward-extra-info key whose type changes between lines: the audit does not need it.
        warnings.warn(f"{path}: reward-extra-info fields left out ({error.message})", RollauditWarning, stacklevel=5)
        fields.extras = pa.schema([])
        return tables.read_json_lines(path, fields.needed), fields


def read_steps(path: Path, options: LoadOptions) -> list[tuple[int, pa.Table]]:
    """One ``{step}.jsonl``: a canonical table per step (one, in a real verl dump)."""
    tables.check_not_empty(path)
    table, fields = _read_lines(path, options)
    if table.num_rows == 0:
        raise InputError("empty file: no lines", file=str(path), expected="verl rollout lines")

    rewards = table.column(fields.reward)
    if rewards.null_count:
        row = int(pc.index(pc.is_null(rewards), True).as_py())
        raise InputError(
            f"line without a {fields.reward!r} value",
            file=str(path),
            field=fields.reward,
            row=row,
            expected="verl's score on every line",
        )
    rewards = columns.float_values(rewards, path, fields.reward)
    columns.warn_missing_rewards(path, 0, rewards)

    steps = _steps(table, fields.step, path)
    prompt = columns.key_values(table.column(fields.prompt), path, fields.prompt)
    extra: dict[str, Any] = {}
    if fields.trajectory is not None:
        extra["trajectory"] = columns.key_values(table.column(fields.trajectory), path, fields.trajectory)
    if fields.advantage is not None:
        advantage = table.column(fields.advantage)
        if pa.types.is_list(advantage.type):
            tokens = columns.token_lists(advantage, None, path, fields.advantage, "")
            values, varying = columns.reduce_tokens(tokens, options.token_reduce)
            columns.warn_varying_tokens(path, fields.advantage, varying, options.token_reduce)
            extra["recorded_advantage"] = pa.array(values, pa.float64(), mask=tokens.counts == 0)
        else:
            extra["recorded_advantage"] = columns.float_values(advantage, path, fields.advantage)
    for name in fields.extras.names:
        extra[columns.passthrough_name(name)] = table.column(name).combine_chunks()
    canonical = make_table(reward=rewards, prompt=prompt, step=steps, **extra)
    return columns.split_steps(canonical)


def _steps(table: pa.Table, field: str, path: Path) -> pa.Array:
    """The step field, or the file name's step when no line has one."""
    if field in table.column_names and table.column(field).null_count < table.num_rows:
        return pa.array(columns.step_values(table.column(field), path, field))
    return columns.file_name_steps(
        path,
        _STEP_FILE,
        table.num_rows,
        field=field,
        no_step=f"no {field!r} field and the file name is not {{step}}.jsonl",
        expected="verl's step field, or a file named by its step",
    )


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One file to its canonical rows (all its steps in one table; ``combine`` splits them again)."""
    return concat_tables([table for _, table in read_steps(path, options)])


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The reduced tables of verl dumps, in file order: one canonical table per step."""
    return columns.one_file_per_step(
        paths, reduced, "verl dumps", "one file per step (rollout_data_dir and validation_data_dir loaded apart)"
    )


LOADER = Format(
    name="verl",
    description="rollout_data_dir {step}.jsonl lines with input, output, score, step",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
)
