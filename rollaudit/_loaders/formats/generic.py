"""Generic rollout tables to the canonical table: Parquet, Arrow IPC/Feather, JSON Lines, CSV.

For agent-lightning exports, NeMo-RL's ``train_data_step{N}.jsonl``, AReaL's
per-task jsonl, ROLL, or any table with one row per training sample. The
user names the columns (``reward_col``, ``prompt_col``, ``trajectory_col``,
``step_col``, ``advantage_col``, ``mask_col``) or the common names are found:

=============  ====================================================================================
role           names looked for, in this order
=============  ====================================================================================
reward         ``reward``, ``score``, ``rewards``
prompt key     ``group_index``, ``uid``, ``data_id``, ``prompt_id``, ``task_id``, ``prompt``, ``input``
trajectory     ``rollout_id``, ``traj_uid``, ``trajectory_id``, ``trajectory``
advantage      ``advantage``, ``advantages``, ``recorded_advantage``
step           ``step``, ``global_step``
token mask     ``token_loss_mask``, ``loss_mask``, ``token_mask``, ``response_mask``, ``loss_masks``, ``mask``
=============  ====================================================================================

A prompt key found as a text column (``prompt``, ``input``) is checked: it
verifies where every distinct text of a step occurs a multiple of one count
n >= 2 (as a trainer that repeats each prompt n times writes it; k x n: one
text drawn for k prompts, grouped as one, and a note says so). An ``input``
column that does not verify is refused naming the key columns looked for: it
is verl's decoded prompt, which multi-step forks fill with each environment
step's observation. A ``prompt`` column that does not verify is kept as the
key (a table's own prompt column, partial groups and all) with a note saying
it was not verified. ``prompt_col`` naming the text column takes it as given.

Reduction rules (one value per sample):

- A per-token **advantage** list becomes the value of its first masked-in
  token (mask value != 0) when a mask column exists, else its first element
  (``token_reduce`` picks ``last`` or ``mean`` instead). A row whose
  masked-in values differ is not an outcome scheme (KL in the reward, GAE):
  one warning per file says how many rows do. No masked-in token: null.
- A per-token **reward** list becomes its sum (over the masked-in tokens
  when a mask column exists): the sequence reward of a token-level reward.
- ``response_length``: the column of that name, else the count of masked-in
  tokens when a mask column exists, else unknown.
- A missing reward (null, blank CSV cell) is kept as NaN and reported once
  per file, like slime's None rewards.
- ``status`` (strings) is the canonical status. Other scalar columns pass
  through (a name taken by a canonical column gets a ``source_`` prefix);
  list, struct and binary columns (tokens, log-probs, chat messages) are
  dropped.
- The step is the step column; without one, the ``step<N>`` of the file
  name (NeMo-RL's ``train_data_step{N}.jsonl``), else 0. Files of one step
  form one batch, in the order given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..._errors import ChoiceNeeded, InputError, RollauditWarning, leave_open, warn
from ..._table import PROMPT, STEP, make_table, with_found
from ..arrow import capped, columns, json_lines, tables
from ..base import Format

if TYPE_CHECKING:
    from ..options import LoadOptions

REWARD_NAMES = ("reward", "score", "rewards")
PROMPT_NAMES = ("group_index", "uid", "data_id", "prompt_id", "task_id", "prompt", "input")
TEXT_PROMPT_NAMES = ("prompt", "input")  # texts, not keys: their counts are checked
REFUSED_TEXT_KEYS = ("input",)  # verl's decoded prompt: per-step observations in multi-step forks
TRAJECTORY_NAMES = ("rollout_id", "traj_uid", "trajectory_id", "trajectory")
ADVANTAGE_NAMES = ("advantage", "advantages", "recorded_advantage")
STEP_NAMES = ("step", "global_step")
MASK_NAMES = ("token_loss_mask", "loss_mask", "token_mask", "response_mask", "loss_masks", "mask")
TABLE_SUFFIXES = (".parquet", ".pq", ".arrow", ".feather", ".ipc", ".jsonl", ".ndjson", ".json", ".csv", ".tsv")
"""Only for picking a directory's tables; a file's format is always told by its content."""


def detect(path: Path) -> bool:
    """Any table rollaudit reads, by content (an empty file too, so that the error says it is empty)."""
    return tables.sniff(path) is not None


def expand_directory(directory: Path) -> list[Path] | None:
    """A directory's tables (by suffix: README files and the like are not dumps), or None when it has none."""
    files = [
        path
        for path in directory.iterdir()
        if path.is_file() and not path.name.startswith(".") and path.suffix.lower() in TABLE_SUFFIXES
    ]
    return files or None


# ---------------------------------------------------------------------------------------------------------------------
# The generic reader.


@dataclass
class _Roles:
    reward: str | None  # None: no reward column, in a load that leaves that choice open (``rollaudit inspect``)
    prompt: str | None
    trajectory: str | None
    step: str | None
    advantage: str | None
    mask: str | None
    status: str | None
    response_length: str | None


def _roles(names: list[str], schema: pa.Schema | None, options: LoadOptions, path: Path) -> _Roles:
    reward = columns.pick_column(names, options.reward_col, REWARD_NAMES, "reward", path)
    if reward is None and not leave_open(
        "reward", "no reward column (numeric columns: {})", "--reward-col COLUMN", _reward_candidates(schema, options)
    ):
        raise ChoiceNeeded(
            f"no reward column; columns found: {columns.columns_found(names)}",
            file=str(path),
            expected=f"a column named {', '.join(REWARD_NAMES)}, or --reward-col naming one",
        )
    roles = _Roles(
        reward=reward,
        prompt=columns.pick_column(names, options.prompt_col, PROMPT_NAMES, "prompt key", path),
        trajectory=columns.pick_column(names, options.trajectory_col, TRAJECTORY_NAMES, "trajectory key", path),
        step=columns.pick_column(names, options.step_col, STEP_NAMES, "step", path),
        advantage=columns.pick_column(names, options.advantage_col, ADVANTAGE_NAMES, "advantage", path),
        mask=columns.pick_column(names, options.mask_col, MASK_NAMES, "token mask", path),
        status="status" if "status" in names else None,
        response_length="response_length" if "response_length" in names else None,
    )
    if schema is not None:
        # Found by name only when the type fits; a column the user named must fit (checked when read).
        if roles.status is not None and not columns.string_like(schema.field("status").type):
            roles.status = None
        if roles.response_length is not None and not columns.is_number(schema.field("response_length").type):
            roles.response_length = None
        if roles.mask is not None and options.mask_col is None and not columns.is_list(schema.field(roles.mask).type):
            roles.mask = None
    return roles


def _reward_candidates(schema: pa.Schema | None, options: LoadOptions) -> list[str]:
    """The numeric columns no other role takes by name (as shown): what ``--reward-col`` may name."""
    given = (options.prompt_col, options.trajectory_col, options.step_col, options.advantage_col, options.mask_col)
    roles = {*given, *PROMPT_NAMES, *TRAJECTORY_NAMES, *STEP_NAMES, *ADVANTAGE_NAMES, *MASK_NAMES, "response_length"}
    return [repr(field.name) for field in schema or () if field.name not in roles and columns.is_number(field.type)]


def _used(roles: _Roles) -> set[str]:
    return {name for name in vars(roles).values() if name is not None}


def _read_table(path: Path, kind: str, options: LoadOptions) -> tuple[pa.Table, _Roles]:
    if kind in ("parquet", "arrow", "arrow-stream"):
        schema = capped.arrow_schema(path, kind)
        roles = _roles(schema.names, schema, options, path)
        used = _used(roles)
        # Token ids, log-probs and messages are never read: only the role columns and scalar extras.
        wanted = [field.name for field in schema if field.name in used or columns.is_scalar(field.type)]
        return capped.read_arrow(path, kind, wanted), roles
    if kind == "jsonl":
        table = json_lines.read_json_lines(path)
    else:
        with open(path, "rb") as stream:
            delimiter = tables.csv_delimiter(stream.read(tables.HEAD_BYTES).removeprefix(tables.BOM)) or ","
        table = tables.read_csv(path, delimiter)
    roles = _roles(table.column_names, table.schema, options, path)
    return table, roles


def read_canonical(path: Path, options: LoadOptions) -> tuple[pa.Table, bool]:
    """One generic table: its canonical table (rows as in the file; ``combine`` splits it by step), and whether
    the file had its own steps."""
    kind = tables.sniff(path)
    if kind == "empty":
        raise InputError("empty file", file=str(path), expected="rollouts, one row per sample")
    if kind is None:
        raise InputError(
            "not a table rollaudit reads",
            file=str(path),
            expected="Parquet, Arrow IPC/Feather, JSON Lines (one object per line) or CSV with a header",
        )
    table, roles = _read_table(path, kind, options)
    if table.num_rows == 0:
        raise InputError("empty file: the table has no rows", file=str(path), expected="rollouts, one row per sample")
    rows = table.num_rows

    mask = table.column(roles.mask) if roles.mask is not None else None
    if roles.reward is None:  # left open (inspect): no reward read, none to report
        rewards = pa.array(np.full(rows, np.nan))
    else:
        reward_column = table.column(roles.reward)
        if columns.is_list(reward_column.type):
            rewards = pa.array(
                columns.sum_tokens(columns.token_lists(reward_column, mask, path, roles.reward, roles.mask or ""))
            )
            nulls = 0
        else:
            rewards, nulls = columns.missing_to_nan(columns.float_values(reward_column, path, roles.reward))
        columns.warn_missing_rewards(path, nulls, rewards)

    extra: dict[str, Any] = {}
    if roles.advantage is not None:
        advantage = table.column(roles.advantage)
        if columns.is_list(advantage.type):
            tokens = columns.token_lists(advantage, mask, path, roles.advantage, roles.mask or "")
            values, varying = columns.reduce_tokens(tokens, options.token_reduce)
            columns.warn_varying_tokens(path, roles.advantage, varying, options.token_reduce)
            # No token to read the advantage from: unknown, not NaN.
            extra["recorded_advantage"] = pa.array(values, pa.float64(), mask=tokens.counts == 0)
        else:
            extra["recorded_advantage"] = columns.float_values(advantage, path, roles.advantage)
    if roles.response_length is not None:
        extra["response_length"] = columns.whole_numbers(
            table.column(roles.response_length), path, roles.response_length
        )
    elif mask is not None:
        extra["response_length"] = pa.array(columns.masked_in_counts(mask, path, roles.mask or ""))
    if roles.status is not None:
        extra["status"] = columns.plain(table.column(roles.status)).cast(pa.string())

    if roles.step is not None:
        steps = columns.step_values(table.column(roles.step), path, roles.step)
        has_steps = True
    else:
        steps = pa.array(np.full(rows, columns.step_in_name(path) or 0, dtype=np.int64))
        has_steps = columns.step_in_name(path) is not None

    used = _used(roles)
    for field in table.schema:
        if field.name not in used and columns.is_scalar(field.type):
            passed = columns.passthrough(table.column(field.name))
            if passed is not None:
                extra[columns.passthrough_name(field.name)] = passed

    canonical = make_table(
        reward=rewards,
        prompt=columns.key_values(table.column(roles.prompt), path, roles.prompt) if roles.prompt is not None else None,
        trajectory=(
            columns.key_values(table.column(roles.trajectory), path, roles.trajectory)
            if roles.trajectory is not None
            else None
        ),
        step=steps,
        **extra,
    )
    shared, unverified = 0, ""
    text_key_name = roles.prompt if roles.prompt in TEXT_PROMPT_NAMES and options.prompt_col is None else None
    if text_key_name is not None and columns.string_like(canonical.column(PROMPT).type):  # numbers there are keys
        shared, unverified = _verified_text_key(canonical, text_key_name, path)
    if roles.prompt is None:
        if options.n_samples_per_prompt is not None:
            canonical = columns.slice_prompts(canonical, options.n_samples_per_prompt, path)
        else:
            warn(
                f"{path}: no prompt column (looked for {', '.join(PROMPT_NAMES)}); prompt keys left empty: "
                "name one with --prompt-col, or give --n-samples-per-prompt N for consecutive groups",
                RollauditWarning,
            )
    metadata = {_SHARED_TEXTS: str(shared).encode(), _UNVERIFIED: unverified.encode()}
    return canonical.replace_schema_metadata(metadata), has_steps


def _verified_text_key(canonical: pa.Table, name: str, path: Path) -> tuple[int, str]:
    """How many texts of the column ``name``, found as the prompt key, occur k x n times (k > 1), and, where its
    counts do not verify it as a key, what they are (an InputError for ``input``)."""
    verified, failure = columns.repeated_keys(canonical.column(PROMPT), canonical.column(STEP))
    if failure is not None and name not in REFUSED_TEXT_KEYS:
        return 0, f"{path.name}: {failure}"
    if failure is not None:
        keys = [key for key in PROMPT_NAMES if key not in TEXT_PROMPT_NAMES]
        raise InputError(
            f"no prompt-key column ({', '.join(keys)}), and the {name!r} text does not verify as one: {failure} (a "
            "trainer repeats each prompt n >= 2 times)",
            file=str(path),
            field=keys[0],
            expected=f"a prompt-key column, or --prompt-col naming it; --prompt-col {name} takes the "
            "text as the key as it is",
        )
    return sum(count for _, count in verified.values()), ""


_HAS_STEPS = b"rollaudit.generic.has_steps"
_SHARED_TEXTS = b"rollaudit.generic.shared_texts"
_UNVERIFIED = b"rollaudit.generic.unverified_text_key"


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One table file to its canonical rows (all its steps in one table), whether it had steps in its metadata."""
    table, has_steps = read_canonical(path, options)
    metadata = dict(table.schema.metadata or {})
    metadata[_HAS_STEPS] = b"1" if has_steps else b"0"
    return table.replace_schema_metadata(metadata)


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The reduced tables of generic files, in file order, as one canonical table in step order (one small file
    may hold hundreds of thousands of steps: nothing here is done step by step)."""
    stepless: list[Path] = []
    shared, unverified = 0, []
    for path, file_table in zip(paths, reduced, strict=True):
        metadata = file_table.schema.metadata or {}
        if metadata.get(_HAS_STEPS) != b"1":
            stepless.append(path)
        shared += int(metadata.get(_SHARED_TEXTS, b"0"))
        if metadata.get(_UNVERIFIED):
            unverified.append(metadata[_UNVERIFIED].decode())
    if len(stepless) > 1:
        warn(
            f"{len(stepless)} files have no step column and no step<N> in their name ({stepless[0]}, ...): "
            "read as one batch of step 0; name the step column with --step-col if they are several steps",
            RollauditWarning,
        )
    combined = columns.in_step_order([file_table.replace_schema_metadata() for file_table in reduced])
    notes = []
    if shared:
        notes.append(
            f"{shared} prompt texts occur a multiple of their step's group size (one text drawn for several "
            "prompts): each is grouped as one prompt; a prompt-key column would tell them apart"
        )
    if unverified:
        notes.append(
            f"the prompt key is the 'prompt' text column, not verified as a key ({unverified[0]}, not a multiple of "
            "one group size n >= 2): a prompt-key column (group_index, uid, data_id) or --prompt-col prompt says it "
            "is one"
        )
    return [with_found(combined, {}, notes) if notes else combined]


LOADER = Format(
    name="generic",
    description="Parquet, Arrow IPC/Feather, JSON Lines or CSV tables with a reward column",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    options=frozenset(
        {
            "reward_col",
            "prompt_col",
            "trajectory_col",
            "step_col",
            "advantage_col",
            "mask_col",
            "token_reduce",
            "n_samples_per_prompt",
        }
    ),
    reads="the columns named by the column options, else the common names",
    prompt=", ".join(PROMPT_NAMES),
    trajectory=", ".join(TRAJECTORY_NAMES),
    reward=", ".join(REWARD_NAMES),
    advantage=", ".join(ADVANTAGE_NAMES),
)
