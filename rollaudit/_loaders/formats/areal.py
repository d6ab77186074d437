"""AReaL's rollout dumps (``rollout.dump_to_file``) to the canonical table.

AReaL writes ``{fileroot}/logs/{user}/{experiment}/{trial}/rollout/{version}/{task_id}.jsonl``: one file per task
(one dataset prompt, every attempt at it), one JSON object per row, and a row is one LLM call of an attempt (a
multi-turn attempt gives several rows, each carrying the attempt's reward). A version directory is one training
batch: its tasks in ascending ``task_id``, rows in file order.

Columns: ``step`` = the version (the directory's name), ``position`` = the row's place in the batch, ``prompt`` =
``task_id`` (AReaL's group key), ``reward`` = ``reward`` (the value the trainer receives), ``response_length`` =
the row's generated tokens (``seqlen - prompt_len``, or the ``gen`` segments' lengths); passed through:
``sample_idx``, ``head_version``, ``tail_version``, ``original_reward`` (before rollout-time normalization).
``reward_col="original_reward"`` (``--reward-col original_reward``) reads the raw reward instead, the dump's
``reward`` then passing through as ``rollout_normalized_reward``; where the two differ, a note says the rewards
were normalized before the advantage.
There is no trajectory key: ``sample_idx`` is a row index, and nothing in the dump says which rows came from one
attempt, so trajectory deduplication cannot be audited from it (the report says so). Prompt and completion texts
are never read.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError
from ..._table import POSITION, REWARD, STEP, concat_tables, make_table, with_facts, with_found, with_trained_default
from ..arrow import columns, json_lines, tables
from ..base import Format, folder_step

if TYPE_CHECKING:
    from ..options import LoadOptions

RECORD_KEYS = frozenset({"task_id", "sample_idx", "seqlen", "prompt_len", "head_version", "tail_version", "reward"})
_TASK_FILE = re.compile(r"^\d+\.jsonl$")
_VERSION = re.compile(r"^\d{1,18}$")
_SCHEMA = pa.schema(
    [
        pa.field("task_id", pa.int64()),
        pa.field("sample_idx", pa.int64()),
        pa.field("seqlen", pa.int64()),
        pa.field("prompt_len", pa.int64()),
        pa.field("head_version", pa.int64()),
        pa.field("tail_version", pa.int64()),
        pa.field("reward", pa.float64()),
        pa.field("original_reward", pa.float64()),
        pa.field("segments", pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("len", pa.int64())]))),
    ]
)
NO_ATTEMPT_ID = (
    "AReaL dumps have no attempt id (sample_idx numbers rows): the LLM calls of one rollout cannot be grouped"
)
DEFAULT = (
    "areal-group",
    "AReaL's group reward normalization as its GRPO examples set it (actor.reward_norm mean_level=group, "
    "std_level=group, unbiased std since v0.3.4; unset, AReaL does not normalise) over each task's rows; no "
    "recorded advantages to confirm it",
)
REWARD_FIELDS = ("reward", "original_reward")
RAW_REWARD = "original_reward"
NORMALIZED_REWARD = "rollout_normalized_reward"  # the dump's reward when the raw one is read
NORMALIZED_NOTE = (
    "AReaL normalized rewards at rollout time (gconfig.reward_normalization): reward differs from original_reward, "
    "and the audit reads reward, what the trainer received; --reward-col original_reward audits the raw rewards"
)
RAW_NOTE = (
    "AReaL normalized rewards at rollout time (gconfig.reward_normalization): the audit reads original_reward, the "
    "raw rewards, as --reward-col asks; the trainer received the normalized ones (rollout_normalized_reward)"
)


def detect(path: Path) -> bool:
    """A JSON Lines file whose first record has AReaL's dump keys (``task_id``, ``sample_idx``, ``seqlen``, ...)."""
    if path.suffix != ".jsonl":
        return False
    first = tables.first_json_object(path)
    return first is not None and first.keys() >= RECORD_KEYS


def _task_files(directory: Path) -> list[Path]:
    return [path for path in directory.iterdir() if path.is_file() and _TASK_FILE.match(path.name)]


def expand_directory(directory: Path) -> list[Path] | None:
    """By AReaL's layout (names only: a cached load opens no dump): a version directory (``rollout/{version}``)'s
    task files; a ``rollout/`` directory's versions; a trial directory's ``rollout/``."""
    if directory.name != "rollout" and (directory / "rollout").is_dir():
        directory = directory / "rollout"
    if _VERSION.match(directory.name) and directory.parent.name in ("rollout", "eval-rollout"):
        return _task_files(directory) or None
    if directory.name not in ("rollout", "eval-rollout"):
        return None
    files = [
        path
        for version in directory.iterdir()
        if version.is_dir() and _VERSION.match(version.name)
        for path in _task_files(version)
    ]
    return files or None


def _version(path: Path) -> int:
    if not _VERSION.match(path.parent.name):
        raise InputError(
            f"an AReaL task file sits in {path.parent.name!r}, not in its version directory",
            file=str(path),
            expected="rollout/{version}/{task_id}.jsonl, as AReaL writes it (the version is the step)",
        )
    return int(path.parent.name)


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One task file to its rows (positions within the file; ``combine`` numbers them across the batch)."""
    tables.check_not_empty(path)
    step = _version(path)
    table = json_lines.read_json_lines(path, _SCHEMA)
    if table.num_rows == 0:
        raise InputError("empty file: no lines", file=str(path), expected="AReaL rollout records")
    reward = _reward_field(path, options)
    for name in ("task_id", reward):
        if table.column(name).null_count:
            row = int(pc.index(pc.is_null(table.column(name)), True).as_py())
            raise InputError("is missing", file=str(path), field=name, row=row, expected="a value on every record")
    rewards = columns.float_values(table.column(reward), path, reward)
    columns.warn_missing_rewards(path, 0, rewards)
    extra = {
        name: table.column(name).combine_chunks()
        for name in ("sample_idx", "head_version", "tail_version", RAW_REWARD)
        if table.column(name).null_count < table.num_rows and name != reward
    }
    if reward == RAW_REWARD:
        extra[NORMALIZED_REWARD] = table.column(REWARD).combine_chunks()
    return make_table(
        reward=rewards,
        prompt=table.column("task_id"),
        step=pa.array(np.full(table.num_rows, step, dtype=np.int64)),
        response_length=_generated_tokens(table, path),
        **extra,
    )


def _reward_field(path: Path, options: LoadOptions) -> str:
    """The record key read as the reward: ``reward``, or the one ``reward_col`` names (``original_reward``)."""
    name = options.reward_col or REWARD
    if name not in REWARD_FIELDS:
        first = tables.first_json_object(path) or {}
        raise InputError(
            f"AReaL records have no reward field {name!r}; fields found: {columns.columns_found(list(first))}",
            file=str(path),
            field=name,
            expected="--reward-col naming reward (what the trainer received) or original_reward (the "
            "raw reward, before rollout-time normalization)",
        )
    return name


def _generated_tokens(table: pa.Table, path: Path) -> pa.Array:
    """Loss-masked tokens of each row: the ``gen`` segments' lengths when the row has segments (a multi-turn
    concat row), else everything after the prompt (``seqlen - prompt_len``)."""
    segments = columns.plain(table.column("segments"))
    plain = pc.subtract(table.column("seqlen"), table.column("prompt_len")).combine_chunks()
    if segments.null_count == len(segments):
        return plain
    flat = pc.list_flatten(segments)
    generated = pc.if_else(pc.equal(pc.struct_field(flat, "role"), "gen"), pc.struct_field(flat, "len"), 0)
    lengths = columns.list_lengths(segments)
    starts = np.concatenate(([0], np.cumsum(lengths)))[:-1].astype(np.int64)
    values = pc.fill_null(generated, 0).to_numpy(zero_copy_only=False)
    sums = np.zeros(len(lengths), dtype=np.int64)
    present = lengths > 0
    if present.any():
        sums[present] = np.add.reduceat(values, starts[present]) if values.size else 0
    return pc.if_else(pc.is_valid(segments), pa.array(sums), plain)


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The task files of each version directory as one batch: tasks ascending by ``task_id``, rows in file order."""
    batches: dict[int, list[tuple[int, Path, pa.Table]]] = {}
    for path, table in zip(paths, reduced, strict=True):
        step = table.column(STEP)[0].as_py()
        batches.setdefault(step, []).append((table.column("prompt")[0].as_py(), path, table))
    combined = []
    for step in sorted(batches):
        files = sorted(batches[step], key=lambda item: item[0])
        for (task, path, _), (other, other_path, _) in itertools.pairwise(files):
            if task == other:
                raise InputError(
                    f"two AReaL files of task {task} in version {step}: {path} and {other_path}",
                    expected="one run's rollout directory at a time (two trials' versions would mix)",
                )
        batch = concat_tables([table for _, _, table in files])
        positions = pa.array(np.arange(batch.num_rows, dtype=np.int64))
        batch = batch.set_column(batch.column_names.index(POSITION), POSITION, positions)
        normalized = _normalized_rows(batch)
        found = {
            "tasks": len(files),
            "rows (one per LLM call)": batch.num_rows,
            "rows whose reward was normalized at rollout time (reward != original_reward)": normalized,
        }
        notes = []  # the missing attempt id is the audit's to say: it lists the trajectory scheme as not auditable
        if normalized:
            notes.append(RAW_NOTE if NORMALIZED_REWARD in batch.column_names else NORMALIZED_NOTE)
        batch = with_found(batch, {"AReaL (prompt = task_id)": found}, notes)
        combined.append(with_facts(with_trained_default(batch, *DEFAULT), no_trajectory=NO_ATTEMPT_ID))
    return combined


def _normalized_rows(batch: pa.Table) -> int:
    """Rows whose dump ``reward`` differs from their ``original_reward`` (0 when the dump has no raw rewards)."""
    if NORMALIZED_REWARD in batch.column_names:
        raw, normalized = batch.column(REWARD), batch.column(NORMALIZED_REWARD)
    elif RAW_REWARD in batch.column_names:
        raw, normalized = batch.column(RAW_REWARD), batch.column(REWARD)
    else:
        return 0
    return int(pc.sum(pc.fill_null(pc.not_equal(raw, normalized), False)).as_py() or 0)


LOADER = Format(
    name="areal",
    description="AReaL rollout/{version}/{task_id}.jsonl records (a version directory is one batch)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    options=frozenset({"reward_col"}),
    reads="AReaL's record keys (prompt = task_id, reward = reward, or original_reward with --reward-col)",
    prompt="task_id",
    reward=" or ".join(REWARD_FIELDS) + " (reward_col)",
    trained_with=(DEFAULT,),
    cannot_audit=(NO_ATTEMPT_ID,),
    step_of=folder_step,
    step_grows=True,
)
