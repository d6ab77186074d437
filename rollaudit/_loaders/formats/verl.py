"""verl ``rollout_data_dir`` dumps to the canonical table: the V1 trainer's and the legacy (v0) trainer's.

``trainer.rollout_data_dir=DIR`` (and ``validation_data_dir``) writes
``DIR/{global_step}.jsonl``: one JSON object a line with ``input`` (the
decoded prompt), ``output`` (the decoded response), ``gts`` (ground truth),
``score`` (the sequence reward) and ``step``.

V1 (the default trainer since 2026-06) adds ``uid`` =
``{prompt_uid}_{session_id}_{output_index}`` (split from the right): the
prompt key is the prompt uid, the trajectory key ``{prompt_uid}_{session_id}``
(one agent session, which may emit several outputs), and ``session_id`` and
``output_index`` are kept as columns. ``input`` differs within a V1 prompt
group, so it is never a key. Padding rows (``pad<32 hex>`` prompt uids, added
to fill the batch to a multiple) are no samples: they are counted and left
out of the table.

v0 (``RayPPOTrainer``) has no uid: the prompt key is the ``input`` text (its
rows share it exactly, and verl's groups are its rows' uuids, which the dump
does not keep), but only where the text verifies as a key: verl repeats each
prompt ``rollout.n`` times, so every distinct input of a step occurs a
multiple of one n >= 2 times (k x n: one text drawn for k prompts, grouped as
one, and a note says so). Multi-step forks (verl-agent and its descendants)
write this layout with one row per environment step, the step's observation
as ``input``: their inputs do not verify, and the file is refused naming
``uid`` (and ``traj_uid``). Then come the reward-extra-info keys with one
value per sample (the numeric and boolean ones pass through; a key named like
a canonical column gets a ``source_`` prefix). Lines come in the trainer's
balanced order, not grouped.

``step`` = the ``step`` field (else the ``{step}`` of the file name),
``position`` = the line's place in the file, ``reward`` = ``score``.
``output``, ``gts`` and other text are never read into memory: the file is
parsed by pyarrow's JSON reader with an explicit schema that ignores them.
The column options (``reward_col``, ``prompt_col``, ``step_col``,
``trajectory_col``, ``advantage_col``) replace these defaults.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError, RollauditWarning, warn
from ..._table import (
    POSITION,
    PROMPT,
    STEP,
    TRAJECTORY,
    make_table,
    positions_in_row_order,
    with_facts,
    with_found,
    with_trained_default,
)
from ..arrow import columns, json_lines, tables
from ..base import Format
from ..config import RunConfig, Setting

if TYPE_CHECKING:
    from ..options import LoadOptions

PROMPT_FIELD = "input"
REWARD_FIELD = "score"
STEP_FIELD = "step"
UID_FIELD = "uid"
TRAJECTORY_UID_FIELD = "traj_uid"  # verl-agent's per-trajectory key beside uid
TEXT_FIELDS = ("input", "output", "gts")
_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
# verl's upsample_batch_to_divisible_size: uid f"pad{uuid.uuid4().hex}_{i}_0".
_PADDING_PROMPT = r"^pad[0-9a-f]{32}$"
V0_DEFAULT = (
    "verl-grpo",
    "verl's legacy v0 trainer (trainer.use_v1=false, rollout_data_dir layout without uid) with "
    "algorithm.adv_estimator=grpo; no recorded advantages to confirm it",
)
V1_DEFAULT = (
    "verl-grpo-v1",
    "verl's V1 trainer (trainer.use_v1=true, the default since PR #6823) with algorithm.adv_estimator=grpo, as "
    "verl's GRPO recipes set it (the default estimator, gae, needs a critic): GRPO over each session's last output; "
    "no recorded advantages to confirm it",
)
V0_NO_TRAJECTORY = (
    "every verl v0 row is a whole sample (one output per prompt repeat, no uid or session): counting "
    "trajectories once is the per-prompt scheme here"
)


def detect(path: Path) -> bool:
    """A JSON Lines file whose first line has verl's ``input`` and ``output`` and a ``score`` or ``step``."""
    first = tables.first_json_object(path)
    return first is not None and {"input", "output"} <= first.keys() and bool({"score", "step"} & first.keys())


def _step_files(directory: Path) -> list[Path]:
    return [path for path in directory.iterdir() if path.is_file() and _STEP_FILE.match(path.name)]


def expand_directory(directory: Path) -> list[Path] | None:
    """A ``rollout_data_dir``'s ``{step}.jsonl`` files; for a run directory above one, its files (a validation
    directory, ``*val*``, only when there is no other: its steps would collide). None above two or more: each is a
    run of its own, and a search below finds them all. Names only: a cached load opens no dump."""
    files = _step_files(directory)
    if files:
        return files
    folders = [path for path in sorted(directory.iterdir()) if path.is_dir() and _step_files(path)]
    training = [path for path in folders if "val" not in path.name.lower()] or folders
    return _step_files(training[0]) if len(training) == 1 else None


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
        # V1 lines carry the uid their prompt and session keys come from; the column options still win.
        self.uid = UID_FIELD if UID_FIELD in first and options.prompt_col is None else None
        self.prompt = options.prompt_col or (UID_FIELD if self.uid else PROMPT_FIELD)
        self.step = options.step_col or STEP_FIELD
        self.trajectory = options.trajectory_col
        self.advantage = options.advantage_col
        # The input text is a key only where its counts verify (see read); a prompt_col is the user's word.
        self.verify_inputs = self.uid is None and options.prompt_col is None
        for role, name in (("reward", self.reward), ("prompt key", self.prompt)):
            if name not in first:
                raise InputError(
                    f"the first line has no {name!r} field; fields found: {columns.columns_found(names)}",
                    file=str(path),
                    field=name,
                    expected=f"verl's rollout lines with the {role} field",
                )
        for optional_field in (self.trajectory, self.advantage, options.step_col):
            if optional_field is not None and optional_field not in first:
                raise InputError(
                    f"the first line has no {optional_field!r} field; fields found: {columns.columns_found(names)}",
                    file=str(path),
                    field=optional_field,
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
        table = json_lines.read_json_lines(path)
        if table.num_rows == 0:
            raise InputError("empty file: no lines", file=str(path), expected="verl rollout lines")
        fields = _Fields(table.slice(0, 1).to_pylist()[0], options, path)
        names = list(fields.needed.names) + list(fields.extras.names)
        return table.select([name for name in names if name in table.column_names]), fields
    fields = _Fields(first, options, path)
    try:
        return json_lines.read_json_lines(path, pa.schema(list(fields.needed) + list(fields.extras))), fields
    except InputError as error:
        if error.field is None or error.field not in fields.extras.names:
            raise
        # A reward-extra-info key whose type changes between lines: the audit does not need it.
        warn(f"{path}: reward-extra-info fields left out ({error.message})", RollauditWarning)
        fields.extras = pa.schema([])
        return json_lines.read_json_lines(path, fields.needed), fields


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One ``{step}.jsonl`` to its canonical rows (all its steps in one table; ``combine`` splits them), V1's
    padding rows left out and counted in the table's metadata."""
    tables.check_not_empty(path)
    table, fields = _read_lines(path, options)
    canonical, padding, inputs = _canonical(table, fields, path, options)
    padded = 0 if padding is None else int(pc.sum(padding).as_py() or 0)
    if padded:
        canonical = canonical.filter(pc.invert(padding))
        if canonical.num_rows == 0:
            raise InputError("every line is a padding row", file=str(path), expected="verl rollout lines")
    return _file_table(canonical, padded, fields, inputs, batched=False)


def read_files(paths: list[Path], options: LoadOptions) -> list[pa.Table]:
    """``read`` of each of ``paths``, their lines keyed and checked in one pass: a step file's fixed costs (a dozen
    Arrow calls, the canonical table's checks, a millisecond) are paid once for the lot. Where the files' fields
    differ, or a file is v0 (its input texts are verified file by file), each is read on its own. (What the pass
    raises or warns, the engine has each file read on its own say, naming its file and row.)"""
    together = _read_together(paths, options)
    return together if together is not None else [read(path, options) for path in paths]


def _read_together(paths: list[Path], options: LoadOptions) -> list[pa.Table] | None:
    parts = []
    for path in paths:
        tables.check_not_empty(path)
        parts.append(_read_lines(path, options))
    first = parts[0][1]
    if first.uid is None or any(
        fields.needed != first.needed or fields.extras != first.extras or table.num_rows == 0 for table, fields in parts
    ):
        return None
    if any(first.step not in table.column_names or table.column(first.step).null_count for table, _ in parts):
        return None  # a file whose steps come from its name
    canonical, padding, _ = _canonical(pa.concat_tables([table for table, _ in parts]), first, paths[0], options)
    rows = np.array([table.num_rows for table, _ in parts])
    padded = np.zeros(len(parts), dtype=np.int64)
    if padding is not None:
        padded = np.add.reduceat(columns.plain(padding).to_numpy(zero_copy_only=False), np.cumsum(rows) - rows)
        canonical = canonical.filter(pc.invert(padding))
    if (rows == padded).any():
        return None  # a file of padding rows alone: its own read says so
    read, start = [], 0
    for kept, count in zip((rows - padded).tolist(), padded.tolist(), strict=True):
        read.append(_file_table(canonical.slice(start, kept), count, first, {}, batched=True))
        start += kept
    return read


def _canonical(
    table: pa.Table, fields: _Fields, path: Path, options: LoadOptions
) -> tuple[pa.Table, Any, dict[str, list[int]]]:
    """The canonical rows of the lines ``table`` (padding rows in), which rows pad (V1), and v0's verified inputs."""
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
    extra: dict[str, Any] = {}
    padding = None
    if fields.uid is not None:
        keys = _v1_keys(table.column(fields.uid), path)
        prompt, padding = keys.pop("prompt"), keys.pop("padding")
        extra.update(keys)
    else:
        prompt = columns.key_values(table.column(fields.prompt), path, fields.prompt)
    inputs = _verified_inputs(prompt, steps, path) if fields.verify_inputs else {}
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
    return canonical, padding, inputs


def _file_table(
    canonical: pa.Table, padded: int, fields: _Fields, inputs: dict[str, list[int]], *, batched: bool
) -> pa.Table:
    """One file's read table (its ``padded`` padding rows left out) with its metadata; ``batched``: its rows were
    made with other files' (their positions are counted again within the file; the table is a slice of the batch's,
    of which a worker's IPC stream and a cache entry write only the slice's rows)."""
    if padded or batched:
        positions = positions_in_row_order(canonical.column(STEP))
        canonical = canonical.set_column(canonical.column_names.index(POSITION), POSITION, positions)
    metadata = {_LAYOUT: b"v1" if fields.uid is not None else b"v0", _PADDED: str(padded).encode()}
    shared = {step: count for step, (_, count) in inputs.items() if count}
    if shared:
        metadata[_INPUTS] = json.dumps(shared).encode()
    return canonical.replace_schema_metadata(metadata)


def _verified_inputs(prompt: Any, steps: Any, path: Path) -> dict[str, list[int]]:
    """A v0 file's input texts checked as prompt keys: per step, the common count n >= 2 (rollout.n, or a multiple
    of it) of which every distinct input occurs a multiple, and how many inputs occur k x n times (k > 1: one text
    drawn for k prompts); an InputError naming the missing uid when they do not verify."""
    verified, failure = columns.repeated_keys(prompt, steps, "inputs")
    if failure is not None:
        raise InputError(
            f"no {UID_FIELD!r} (or {TRAJECTORY_UID_FIELD!r}) field, and the input text does not verify as the "
            f"prompt key: {failure} (verl repeats each prompt rollout.n >= 2 times; "
            "multi-step forks write one row per environment step, its observation as input)",
            file=str(path),
            field=UID_FIELD,
            expected=f"verl's {UID_FIELD} field (multi-step forks: {UID_FIELD} and {TRAJECTORY_UID_FIELD}), "
            "or --prompt-col and --trajectory-col naming the group keys",
        )
    return verified


def _v1_keys(uid: pa.ChunkedArray, path: Path) -> dict[str, pa.Array]:
    """A V1 uid ``{prompt_uid}_{session_id}_{output_index}`` split from the right: the prompt key, the
    trajectory key ``{prompt_uid}_{session_id}``, ``session_id`` and ``output_index``, and which rows pad."""
    uid = columns.plain(uid)
    if not columns.string_like(uid.type):
        raise InputError(f"has type {uid.type}", file=str(path), field=UID_FIELD, expected="V1 uid strings")
    parts = pc.split_pattern(uid, "_", max_splits=2, reverse=True)
    bad = pc.fill_null(pc.not_equal(pc.list_value_length(parts), 3), True)
    if pc.any(bad).as_py():
        row = int(pc.index(bad, True).as_py())
        shown = uid[row].as_py()
        raise InputError(
            f"uid {shown[:60]!r} is not prompt_session_output" if shown is not None else "line without a uid",
            file=str(path),
            field=UID_FIELD,
            row=row,
            expected="verl V1's uid {prompt_uid}_{session_id}_{output_index}",
        )
    prompt = pc.list_element(parts, 0)
    session_text, output_text = pc.list_element(parts, 1), pc.list_element(parts, 2)
    numbers = {}
    for name, text in (("session_id", session_text), ("output_index", output_text)):
        whole = pc.match_substring_regex(text, r"^\d{1,18}$")
        if not pc.all(whole).as_py():
            row = int(pc.index(pc.invert(whole), True).as_py())
            raise InputError(
                f"uid {uid[row].as_py()[:60]!r}: its {name} is not a number",
                file=str(path),
                field=UID_FIELD,
                row=row,
                expected="verl V1's uid {prompt_uid}_{session_id}_{output_index}",
            )
        numbers[name] = text.cast(pa.int64())
    return {
        "prompt": prompt,
        "trajectory": pc.binary_join_element_wise(prompt, session_text, "_"),
        "session_id": numbers["session_id"],
        "output_index": numbers["output_index"],
        "padding": pc.match_substring_regex(prompt, _PADDING_PROMPT),
    }


def _steps(table: pa.Table, field: str, path: Path) -> pa.Array:
    """The step field, or the file name's step when no line has one."""
    if field in table.column_names and table.column(field).null_count < table.num_rows:
        return columns.step_values(table.column(field), path, field)
    return columns.file_name_steps(
        path,
        _STEP_FILE,
        table.num_rows,
        field=field,
        no_step=f"no {field!r} field and the file name is not {{step}}.jsonl",
        expected="verl's step field, or a file named by its step",
    )


# A read file's table says which layout it was, how many padding rows it left out and, for v0, how many input texts
# of each step were drawn for several prompts, where any were (kept by the cache).
_LAYOUT, _PADDED, _INPUTS = b"rollaudit.verl.layout", b"rollaudit.verl.padded", b"rollaudit.verl.inputs"


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The read tables of verl dumps, in file order: one canonical table per step, each saying what it holds in
    verl's words (V1: prompts, sessions, outputs, padding rows left out; v0: prompts by their text)."""
    padded: dict[int, int] = {}  # step -> padding rows left out of its file (a file's first step)
    v1: dict[int, bool] = {}
    shared: dict[int, int] = {}  # step -> v0 input texts drawn for several prompts
    for table in reduced:
        metadata = table.schema.metadata or {}
        for step in pc.unique(table.column(STEP)).to_pylist():
            v1[step] = metadata.get(_LAYOUT) == b"v1"
        if _INPUTS in metadata:
            shared.update((int(step), count) for step, count in json.loads(metadata[_INPUTS]).items())
        first = table.column(STEP)[0].as_py()
        padded[first] = padded.get(first, 0) + int(metadata.get(_PADDED, b"0"))
    per_step = columns.one_file_per_step(
        paths,
        [table.replace_schema_metadata() for table in reduced],
        "verl dumps",
        "one file per step (rollout_data_dir and validation_data_dir loaded apart)",
    )
    steps = [table.column(STEP)[0].as_py() for table in per_step]
    notes = []
    if sum(shared.values()):
        notes.append(
            f"verl v0: {sum(shared.values())} input texts occur a multiple of rollout.n times (one text drawn for "
            "several prompts): each is grouped as one prompt, where verl grouped every draw apart by its uid, so "
            "their advantages may differ from verl's"
        )
    return [
        _with_found(table, padded.get(step, 0), v1[step], shared.get(step, 0), notes, options.run_config)
        for table, step in zip(per_step, steps, strict=True)
    ]


def trained_default(v1: bool, config: RunConfig | None) -> tuple[str | None, str, str | None]:
    """The preset the run's config names (algorithm.adv_estimator, algorithm.norm_adv_by_std_in_grpo), else verl's
    default for the layout."""
    default = V1_DEFAULT if v1 else V0_DEFAULT
    if config is None or not any(name in config for name in ("adv_estimator", "norm_adv_by_std")):
        return (*default, None)
    estimator = config.get("adv_estimator", "gae")
    cited = config.cite("adv_estimator", "norm_adv_by_std")
    base = _CONFIG_PRESETS.get(estimator)
    if base is None:
        return (
            None,
            f"verl adv_estimator={estimator} is not a group estimator rollaudit reproduces: {cited}",
            config.source,
        )
    if estimator == "grpo":
        base = default[0] or base  # V1 dedups each session's outputs, v0 groups every row
    if estimator in ("grpo", "grpo_vectorized") and config.get("norm_adv_by_std") is False:
        base += "(scale=none)"
    return base, f"verl {cited}", config.source


_CONFIG_PRESETS = {
    "grpo": "verl-grpo",
    "grpo_vectorized": "verl-grpo",
    "rloo": "verl-rloo",
    "rloo_vectorized": "verl-rloo-vectorized",
    "reinforce_plus_plus_baseline": "verl-rpp-baseline",
}
SETTINGS = (
    Setting("adv_estimator", ("algorithm.adv_estimator",), "str"),
    Setting("norm_adv_by_std", ("algorithm.norm_adv_by_std_in_grpo",), "bool"),
)


def _with_found(
    table: pa.Table, padded: int, v1: bool, shared: int, notes: list[str], config: RunConfig | None = None
) -> pa.Table:
    prompts = len(pc.unique(table.column(PROMPT)))
    if not v1:
        counts = {"prompts": prompts, "samples": table.num_rows, "input texts drawn for several prompts": shared}
        table = with_found(table, {"verl v0 (prompt = the input text)": counts}, notes)
        keyed = table.column(TRAJECTORY).null_count < table.num_rows  # a trajectory_col the user named
        scheme, why, source = trained_default(False, config)
        said = {"scheme": scheme, "why": why, **({"config": source} if source else {})}
        return with_facts(table, trained_default=said, no_trajectory=None if keyed else V0_NO_TRAJECTORY)
    counts = {
        "prompts": prompts,
        "sessions": len(pc.unique(table.column(TRAJECTORY))),
        "outputs": table.num_rows,
        "padding rows left out": padded,
    }
    table = with_found(table, {"verl V1 (uid = prompt_session_output)": counts})
    return with_trained_default(table, *trained_default(True, config))


LOADER = Format(
    name="verl",
    description="rollout_data_dir {step}.jsonl lines with input, output, score, step",
    detect=detect,
    read=read,
    read_files=read_files,
    combine=combine,
    expand_directory=expand_directory,
    options=frozenset({"reward_col", "prompt_col", "step_col", "trajectory_col", "advantage_col", "token_reduce"}),
    reads="verl's own fields (prompt = uid, else the verified input text; reward = score; step = step)",
    prompt="uid, else the verified input text",
    trajectory="traj_uid (verl-agent forks), else none",
    reward=REWARD_FIELD,
    trained_with=(V0_DEFAULT, V1_DEFAULT),
    cannot_audit=(V0_NO_TRAJECTORY,),
    settings=SETTINGS,
    config_where="hydra's outputs/{date}/{time}/.hydra/config.yaml, tied to the dumps only by the launch directory: "
    "--config",
)
