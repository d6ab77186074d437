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
agent          ``agent``, ``role``, ``agent_id``, ``agent_name`` (text or integers; the ``agent`` column)
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
  through (a name taken by a canonical column, or an ``agent`` or
  ``not_trained`` of a type not read, gets a ``source_`` prefix); list,
  struct and binary columns (tokens, log-probs, chat messages) are dropped.
- The step is the step column; without one, the ``step<N>`` of the file
  name (NeMo-RL's ``train_data_step{N}.jsonl``), else 0. Files of one step
  form one batch, in the order given.

Rows not trained (``not_trained``: the audit leaves them out of every rate and
counts them per reason; a note says how many each column marked). A row's
reason is the first of these that marks it:

- ``not_trained`` text (a table rollaudit wrote): the reason as written.
- ``status`` one of ``rejected``, ``filtered``, ``dropped``, ``masked``,
  ``skipped``, ``discarded``, ``aborted``, ``removed``, ``excluded`` (any
  case): ``status=<value>``. Other statuses are trained: ``completed``,
  ``truncated`` (trained by most frameworks unless masked), ``failed``,
  ``error`` (most give a failed rollout a reward and train it).
- A true/false or 0/1 column ``trained``, ``is_trained`` (false: not
  trained), ``not_trained``, ``rejected``, ``filtered``, ``is_filtered``,
  ``dropped`` (true: not trained): ``<column>=<value>``.
- A per-row ``loss_mask`` or ``sample_mask`` (true/false or 0/1) that is 0
  or false: ``<column>=<value>`` (``loss_mask=0``).
- A token mask with entries, every one 0: ``<mask column> all 0`` (its
  advantage is null, as above).

A flag or mask column holding another value is refused; one of another type
is passed through unread. The agent column lands as ``agent`` (an integer id
as its text), read by the sub-group presets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import ChoiceNeeded, InputError, RollauditWarning, leave_open, warn
from ..._table import AGENT, NOT_TRAINED, PROMPT, STEP, make_table, with_found
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
AGENT_NAMES = ("agent", "role", "agent_id", "agent_name")
# Statuses that say the trainer left the row out (slime/miles requeue or remove aborted samples). Truncated,
# failed and error rows are trained by most frameworks (a failed rollout gets a reward): only a mask says otherwise.
NOT_TRAINED_STATUSES = (
    "rejected",
    "filtered",
    "dropped",
    "masked",
    "skipped",
    "discarded",
    "aborted",
    "removed",
    "excluded",
)
TRAINED_FLAGS = ("trained", "is_trained")  # false or 0: not trained
NOT_TRAINED_FLAGS = (NOT_TRAINED, "rejected", "filtered", "is_filtered", "dropped")  # true or 1: not trained
SAMPLE_MASK_NAMES = ("loss_mask", "sample_mask")  # per row (a list is the token mask): 0 is not trained
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
    agent: str | None
    not_trained: str | None  # the table's own reasons (text) or flag: read here, never passed through


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
        agent=next((name for name in AGENT_NAMES if name in names), None),
        not_trained=NOT_TRAINED if NOT_TRAINED in names else None,
    )
    if schema is not None:
        # Found by name only when the type fits; a column the user named must fit (checked when read).
        if roles.status is not None and not columns.string_like(schema.field("status").type):
            roles.status = None
        if roles.response_length is not None and not columns.is_number(schema.field("response_length").type):
            roles.response_length = None
        if roles.mask is not None and options.mask_col is None and not columns.is_list(schema.field(roles.mask).type):
            roles.mask = None
        roles.agent = next((name for name in AGENT_NAMES if name in names and _is_agent(schema.field(name).type)), None)
        if roles.not_trained is not None and not (
            columns.string_like(schema.field(NOT_TRAINED).type) or _is_flag(schema.field(NOT_TRAINED).type)
        ):
            roles.not_trained = None
    return roles


def _is_agent(kind: pa.DataType) -> bool:
    return columns.string_like(kind) or pa.types.is_integer(kind)


def _is_flag(kind: pa.DataType) -> bool:
    return pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind)


def _reward_candidates(schema: pa.Schema | None, options: LoadOptions) -> list[str]:
    """The numeric columns no other role takes by name (as shown): what ``--reward-col`` may name."""
    given = (options.prompt_col, options.trajectory_col, options.step_col, options.advantage_col, options.mask_col)
    roles = {*given, *PROMPT_NAMES, *TRAJECTORY_NAMES, *STEP_NAMES, *ADVANTAGE_NAMES, *MASK_NAMES, "response_length"}
    roles |= {*AGENT_NAMES, *TRAINED_FLAGS, *NOT_TRAINED_FLAGS, *SAMPLE_MASK_NAMES}
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
    kept = None  # masked-in tokens per row, counted once
    if roles.response_length is not None:
        extra["response_length"] = columns.whole_numbers(
            table.column(roles.response_length), path, roles.response_length
        )
    elif mask is not None:
        kept = columns.masked_in_counts(mask, path, roles.mask or "")
        extra["response_length"] = pa.array(kept)
    if roles.status is not None:
        extra["status"] = columns.plain(table.column(roles.status)).cast(pa.string())
    reasons, marked = _not_trained(table, roles, kept, path)
    if reasons is not None:
        extra[NOT_TRAINED] = reasons
    if roles.agent is not None:
        extra[AGENT] = columns.plain(table.column(roles.agent)).cast(pa.string())

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
                name = columns.passthrough_name(field.name)
                # A column this loader fills itself, of a type it does not read: kept apart, never read as it.
                extra[f"source_{name}" if name in (NOT_TRAINED, AGENT) else name] = passed

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
    metadata = {
        _SHARED_TEXTS: str(shared).encode(),
        _UNVERIFIED: unverified.encode(),
        _NOT_TRAINED_BY: json.dumps(marked).encode(),
    }
    return canonical.replace_schema_metadata(metadata), has_steps


def _not_trained(
    table: pa.Table, roles: _Roles, kept: np.ndarray | None, path: Path
) -> tuple[pa.Array | None, dict[str, int]]:
    """Why each row was not trained (null: trained; None: every row was), the reason of the first column that
    marks it, and how many rows each column marked first (by label, in the order looked at). ``kept``: the
    masked-in tokens per row, where already counted."""
    reasons: pa.Array | None = None
    marked: dict[str, int] = {}
    for label, said in _reasons_by_column(table, roles, kept, path):
        fresh = pc.is_valid(said) if reasons is None else pc.and_(pc.is_valid(said), pc.is_null(reasons))
        count = int(pc.sum(fresh).as_py() or 0)
        if count:
            marked[label] = count
            reasons = said if reasons is None else pc.coalesce(reasons, said)
    return reasons, marked


def _reasons_by_column(
    table: pa.Table, roles: _Roles, kept: np.ndarray | None, path: Path
) -> list[tuple[str, pa.Array]]:
    """``(label, reasons)`` per column that can mark rows as not trained, in the order their reasons win; the
    label is the column as a note names it."""
    found: list[tuple[str, pa.Array]] = []
    if roles.not_trained is not None and columns.string_like(table.schema.field(NOT_TRAINED).type):
        written = columns.plain(table.column(NOT_TRAINED)).cast(pa.string())
        blank = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(written), ""), False)
        found.append((repr(NOT_TRAINED), pc.if_else(blank, pa.scalar(None, pa.string()), written)))
    if roles.status is not None:
        status = columns.plain(table.column(roles.status)).cast(pa.string())
        word = pc.utf8_lower(pc.utf8_trim_whitespace(status))
        left_out = pc.is_in(word, value_set=pa.array(NOT_TRAINED_STATUSES, pa.string()))
        found.append(("'status'", _reason_where(left_out, pc.binary_join_element_wise("status=", status, ""))))
    flags = [(name, 0) for name in TRAINED_FLAGS] + [(name, 1) for name in NOT_TRAINED_FLAGS]
    flags += [(name, 0) for name in SAMPLE_MASK_NAMES]
    for name, marks in flags:
        if name in table.column_names and _is_flag(table.schema.field(name).type):
            found.append((repr(name), _flag_reasons(table.column(name), name, marks, path)))
    mask = table.column(roles.mask) if roles.mask is not None else None
    if mask is not None and columns.is_list(mask.type) and _is_flag(mask.type.value_type):
        kept = kept if kept is not None else columns.masked_in_counts(mask, path, roles.mask or "")
        none_in = (columns.list_lengths(columns.plain(mask)) > 0) & (kept == 0)
        found.append((f"{roles.mask!r} all 0", _reason_where(pa.array(none_in), f"{roles.mask} all 0")))
    return found


def _flag_reasons(column: pa.Array | pa.ChunkedArray, name: str, marks: int, path: Path) -> pa.Array:
    """``<name>=<value>`` where a true/false or 0/1 column holds ``marks`` (null where not, or missing); any other
    value is refused."""
    values = columns.plain(column)
    numbers = values.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)  # nulls (and NaN): unknown
    with np.errstate(invalid="ignore"):
        bad = ~np.isnan(numbers) & (numbers != 0) & (numbers != 1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"is {values[row].as_py()!r}",
            file=str(path),
            field=name,
            row=row,
            expected="true/false or 0/1 per row: whether the row was trained",
        )
    written = ("true" if marks else "false") if pa.types.is_boolean(values.type) else str(marks)
    return _reason_where(pa.array(numbers == marks), f"{name}={written}")


def _reason_where(marked: pa.Array, reason: str | pa.Array) -> pa.Array:
    """``reason`` where ``marked``, null elsewhere (made only where a column is read: a Python value converted to
    Arrow imports pandas, which a plain table's load never needs)."""
    return pc.if_else(marked, reason, pa.scalar(None, pa.string()))


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
_NOT_TRAINED_BY = b"rollaudit.generic.not_trained_by"


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
    marked: dict[str, int] = {}
    for path, file_table in zip(paths, reduced, strict=True):
        metadata = file_table.schema.metadata or {}
        if metadata.get(_HAS_STEPS) != b"1":
            stepless.append(path)
        shared += int(metadata.get(_SHARED_TEXTS, b"0"))
        if metadata.get(_UNVERIFIED):
            unverified.append(metadata[_UNVERIFIED].decode())
        for label, count in json.loads(metadata.get(_NOT_TRAINED_BY, b"{}")).items():
            marked[label] = marked.get(label, 0) + count
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
    if marked:
        total = sum(marked.values())
        by = ", ".join(f"{count:,} by {label}" for label, count in marked.items())
        notes.append(f"{total:,} {'row' if total == 1 else 'rows'} read as not trained, left out of the audit: {by}")
    return [with_found(combined, {}, notes) if notes else combined]


LOADER = Format(
    name="generic",
    description="Parquet, Arrow IPC/Feather, JSON Lines or CSV tables with a reward column; rows not trained from a "
    "status (rejected, filtered, dropped, masked, skipped, discarded, aborted, removed, excluded), a true/false column "
    "trained, is_trained, not_trained, rejected, filtered, is_filtered or dropped, a per-row loss_mask or sample_mask "
    "0, or a token mask all 0; agent from agent, role, agent_id or agent_name",
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
