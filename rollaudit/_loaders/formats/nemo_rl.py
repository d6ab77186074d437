"""NeMo-RL's training-data logs (``train_data_step{N}.jsonl``) to the canonical table.

NeMo-RL's ``Logger.log_batched_dict_as_jsonl`` writes one JSON object per training row, every value a batch of
one (scalars as ``[x]``, sequences as ``[[...]]``): ``content``, ``rewards``, ``filtered_rewards`` (with dynamic
sampling), ``input_lengths``, ``token_ids`` (right-padded), ``token_loss_mask`` (1 on generated tokens),
``sample_loss_mask``, ``advantages`` (per token, one value repeated), ``generation_logprobs``, ``prev_logprobs``,
``idx``.

Columns: ``step`` = the ``N`` of the file name, ``position`` = the line's place, ``prompt`` = the token ids before
the first loss-masked token (NeMo-RL groups by the prompt's token row: rows group together exactly when these are
equal), ``reward`` = ``filtered_rewards`` when present (with dynamic sampling ``rewards`` is the unfiltered
batch, not aligned with the rows: a note says on how many rows it differs), else ``rewards``,
``recorded_advantage`` = ``advantages`` (its value on the first loss-masked token), ``response_length`` = the
loss-masked tokens; passed through: ``sample_loss_mask``, ``idx``. No trajectory key: single turn.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError
from ..._table import PROMPT, make_table, with_facts, with_found, with_trained_default
from ..arrow import columns, json_lines, tables
from ..base import Format

if TYPE_CHECKING:
    from ..options import LoadOptions

KEYS = frozenset({"content", "rewards", "token_ids", "token_loss_mask", "advantages"})
_FILE = re.compile(r"^(train|val)_data_step(\d+)\.jsonl$")
DEFAULT = (
    "nemo-loo",
    "NeMo-RL's default GRPO (use_leave_one_out_baseline=true, normalize_rewards=true), before PR #4158; the "
    "recorded advantages say what the run did",
)
NO_TRAJECTORY = "every NeMo-RL row is a whole conversation: counting trajectories once is the per-prompt scheme here"
_SEQUENCES = ("token_ids", "token_loss_mask", "advantages")
_SCHEMA = pa.schema(
    [
        pa.field("rewards", pa.list_(pa.float64())),
        pa.field("filtered_rewards", pa.list_(pa.float64())),
        pa.field("sample_loss_mask", pa.list_(pa.float64())),
        pa.field("input_lengths", pa.list_(pa.int64())),
        pa.field("token_ids", pa.list_(pa.list_(pa.int64()))),
        pa.field("token_loss_mask", pa.list_(pa.list_(pa.int64()))),
        pa.field("advantages", pa.list_(pa.list_(pa.float64()))),
        pa.field("idx", pa.int64()),
    ]
)


def detect(path: Path) -> bool:
    """A JSON Lines file whose first object holds NeMo-RL's keys as batches of one (``"rewards": [x]``)."""
    if path.suffix != ".jsonl":
        return False
    first = tables.first_json_object(path)
    return first is not None and first.keys() >= KEYS and isinstance(first["rewards"], list)


def expand_directory(directory: Path) -> list[Path] | None:
    """A log directory's ``train_data_step{N}.jsonl`` (validation logs only when there is no training one)."""
    files = [path for path in directory.iterdir() if path.is_file() and _FILE.match(path.name)]
    train = [path for path in files if path.name.startswith("train_")]
    return (train or files) or None


def _unwrapped(table: pa.Table, name: str, path: Path) -> pa.Array:
    """A batch-of-one column's single value per line (null where a line lacks the key); a batch of other than one
    value is an error naming the line."""
    column = columns.plain(table.column(name))
    lengths = pc.list_value_length(column)
    bad = pc.and_(pc.is_valid(column), pc.not_equal(lengths, 1))
    if pc.any(bad).as_py():
        row = int(pc.index(bad, True).as_py())
        raise InputError(
            f"holds a batch of {lengths[row].as_py()} values",
            file=str(path),
            field=name,
            row=row,
            expected="NeMo-RL's batch of one ([x]) on every line",
        )
    return pc.list_element(column, 0)


def _prompt_keys(tokens: pa.Array, mask: pa.Array, path: Path) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Each row's prompt key (the token ids before its first loss-masked token, comma-joined; the whole row when
    none is masked), its loss-masked token count, and the flat offset of that first token (-1 for none)."""
    lengths = columns.list_lengths(tokens)
    mask_lengths = columns.list_lengths(mask)
    if not np.array_equal(lengths, mask_lengths):
        row = int(np.flatnonzero(lengths != mask_lengths)[0])
        raise InputError(
            "has a mask of another length than its token ids",
            file=str(path),
            field="token_loss_mask",
            row=row,
            expected="one mask value per token",
        )
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    masked = columns.nonzero_mask(pc.list_flatten(mask), path, "token_loss_mask")
    before = np.concatenate(([0], np.cumsum(masked))).astype(np.int64)
    counts = before[offsets[1:]] - before[offsets[:-1]]
    positions = np.flatnonzero(masked)
    first = np.full(len(lengths), -1, dtype=np.int64)
    has = counts > 0
    if has.any():
        first[has] = positions[np.searchsorted(positions, offsets[:-1][has])]
    ends = np.where(has, first, offsets[1:])
    keep = np.arange(int(offsets[-1])) < np.repeat(ends, lengths)
    prefix = pc.list_flatten(tokens).filter(pa.array(keep)).cast(pa.string())
    prefix_offsets = np.concatenate(([0], np.cumsum(ends - offsets[:-1]))).astype(np.int32)
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(prefix_offsets), prefix), ","), counts, first


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One ``train_data_step{N}.jsonl``: its rows, the step from the file name."""
    tables.check_not_empty(path)
    match = _FILE.match(path.name)
    if match is None:
        raise InputError(
            "a NeMo-RL log whose name is not train_data_step{N}.jsonl",
            file=str(path),
            expected="the file name NeMo-RL gives it (its step is in the name)",
        )
    step = columns.name_step(match.group(2), path)
    table = json_lines.read_json_lines(path, _SCHEMA)
    if table.num_rows == 0:
        raise InputError("empty file: no lines", file=str(path), expected="NeMo-RL training rows")
    for name in _SEQUENCES:
        if table.column(name).null_count:
            row = int(pc.index(pc.is_null(table.column(name)), True).as_py())
            raise InputError("is missing", file=str(path), field=name, row=row, expected="a value on every line")
    tokens, mask = _unwrapped(table, "token_ids", path), _unwrapped(table, "token_loss_mask", path)
    prompt, loss_tokens, first = _prompt_keys(tokens, mask, path)
    filtered = table.column("filtered_rewards").null_count < table.num_rows
    reward_name = "filtered_rewards" if filtered else "rewards"
    rewards = columns.float_values(_unwrapped(table, reward_name, path), path, reward_name)
    columns.warn_missing_rewards(path, 0, rewards)
    advantages = _unwrapped(table, "advantages", path)
    advantage_lengths = columns.list_lengths(advantages)
    flat = columns.float_values(pc.list_flatten(advantages), path, "advantages").to_numpy(zero_copy_only=False)
    starts = np.concatenate(([0], np.cumsum(advantage_lengths)))[:-1].astype(np.int64)
    # The value on the first loss-masked token (NeMo-RL repeats one value over the row), where the row's
    # advantages line up with its tokens; else its first value.
    token_lengths = columns.list_lengths(tokens)
    token_starts = np.concatenate(([0], np.cumsum(token_lengths)))[:-1].astype(np.int64)
    aligned = advantage_lengths == token_lengths
    at = np.where(aligned & (first >= 0), starts + (first - token_starts), starts)
    present = advantage_lengths > 0
    recorded = np.full(len(at), np.nan)
    recorded[present] = flat[at[present]]
    extra = {
        "sample_loss_mask": _unwrapped(table, "sample_loss_mask", path),
        "idx": table.column("idx").combine_chunks(),
    }
    canonical = make_table(
        reward=rewards,
        prompt=prompt,
        step=pa.array(np.full(table.num_rows, step, dtype=np.int64)),
        recorded_advantage=pa.array(recorded, mask=~present),
        response_length=pa.array(loss_tokens),
        **{name: values for name, values in extra.items() if values.null_count < len(values)},
    )
    notes = []
    if filtered:
        unfiltered = _unwrapped(table, "rewards", path)
        differ = int(pc.sum(pc.fill_null(pc.not_equal(unfiltered, rewards), True)).as_py() or 0)
        if differ:
            notes.append(
                f"NeMo-RL dynamic sampling ({path.name}): reward = filtered_rewards; the dump's rewards is the "
                f"unfiltered batch, not aligned with the rows ({differ} rows differ)"
            )
    found = {
        "prompts (token ids before the first loss-masked token)": len(pc.unique(canonical.column(PROMPT))),
        "samples": canonical.num_rows,
        "samples with sample_loss_mask 0": int(pc.sum(pc.equal(canonical.column("sample_loss_mask"), 0)).as_py() or 0)
        if "sample_loss_mask" in canonical.column_names
        else 0,
    }
    return with_found(canonical, {"NeMo-RL (prompt = prompt token ids)": found}, notes)


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """One file per step."""
    steps = columns.one_file_per_step(
        paths, reduced, "NeMo-RL logs", "one train_data_step{N}.jsonl per step (validation logs loaded apart)"
    )
    return [with_facts(with_trained_default(table, *DEFAULT), no_trajectory=NO_TRAJECTORY) for table in steps]


LOADER = Format(
    name="nemo_rl",
    description="NeMo-RL train_data_step{N}.jsonl logs (every value a batch of one)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    reads="NeMo-RL's own keys (prompt = the prompt token ids, reward = filtered_rewards or rewards, advantage = "
    "advantages)",
    prompt="the prompt token ids",
    reward="filtered_rewards, else rewards",
    advantage="advantages",
    trained_with=(DEFAULT,),
    cannot_audit=(NO_TRAJECTORY,),
)
