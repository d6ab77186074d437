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
loss-masked tokens, ``nemo_prompt_ids`` = the key NeMo-RL itself grouped by (below); passed through:
``sample_loss_mask``, ``idx``. No trajectory key: single turn.

NeMo-RL's estimator groups by ``prompt_ids_for_adv``: the token rows of the messages ``extract_initial_prompt_messages``
takes, padded with the pad id, so rows group together exactly when those tokens are equal once trailing pad ids are
dropped (the pad id is read off the rows' padding past ``input_lengths``). That is the prompt, except where the data
processor truncated it (its length reached ``max_seq_length``: the tokens are cut, ``loss_multiplier`` = 0, but
``length`` keeps the original count): messages are then taken until that length is reached, so the key holds the
response and the observation too, and each such row is a group of its own (advantage 0). Such a row is recognised by
``sample_loss_mask`` 0 and a first message whose text (``content``, the whole prompt) has more words than the row
has prompt tokens (a tokenizer gives each word at least one token); its key is its whole row up to
``input_lengths``, which is NeMo-RL's wherever the row fits the original prompt length (it always does when
``data.max_input_seq_length`` is the policy's ``max_total_sequence_length``, the default). The ``nemo-*`` presets
group by ``nemo_prompt_ids``; the reference (``prompt``) keeps the true prompt, so those rows are measured against it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError
from ..._table import PROMPT, arrow_array, make_table, with_facts, with_found, with_trained_default
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
NEMO_KEY = "nemo_prompt_ids"
"""The column of NeMo-RL's own group key (the ``nemo-*`` presets' ``framework_key``)."""
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


def _joined(flat: pa.Array, offsets: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Each row's token ids (``flat``, rows at ``offsets``) from its start up to the flat offset ``ends``,
    comma-joined."""
    keep = np.arange(int(offsets[-1])) < np.repeat(ends, np.diff(offsets))
    prefix = flat.filter(pa.array(keep)).cast(pa.string())
    prefix_offsets = np.concatenate(([0], np.cumsum(ends - offsets[:-1]))).astype(np.int32)
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(prefix_offsets), prefix), ",")


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
    return _joined(pc.list_flatten(tokens), offsets, ends), counts, first


def _content_lines(path: Path, rows: np.ndarray) -> list[object]:
    """The ``content`` of the lines ``rows`` (places among the file's non-blank lines), None where a line has none."""
    lines = [line for line in path.read_bytes().removeprefix(tables.BOM).split(b"\n") if line.strip()]
    found: list[object] = []
    for row in rows.tolist():
        value = (
            json_lines.object_fields(lines[row].decode("utf-8", "replace"), ("content",)) if row < len(lines) else {}
        )
        found.append(value.get("content") if isinstance(value, dict) else None)
    return found


def _cut_prompts(path: Path, loss_mask: pa.Array | None, prompt_tokens: np.ndarray, has: np.ndarray) -> np.ndarray:
    """Which rows hold a prompt NeMo-RL's data processor truncated: ``sample_loss_mask`` 0 (its loss_multiplier), a
    response, and a first message whose text (the whole prompt: ``content[0][0]``) has more words than the row has
    prompt tokens, which no tokenizer makes of a prompt it kept whole."""
    cut = np.zeros(len(prompt_tokens), dtype=bool)
    if loss_mask is None or loss_mask.null_count == len(loss_mask):
        return cut
    zero = pc.fill_null(pc.equal(columns.float_values(loss_mask, path, "sample_loss_mask"), 0), False)
    rows = np.flatnonzero(zero.to_numpy(zero_copy_only=False) & has)
    for row, content in zip(rows.tolist(), _content_lines(path, rows), strict=True):
        messages = content[0] if isinstance(content, list) and len(content) == 1 else None
        if isinstance(messages, list) and messages and isinstance(messages[0], str):
            cut[row] = len(messages[0].split()) > prompt_tokens[row]
    return cut


def _input_lengths(table: pa.Table) -> np.ndarray | None:
    """Each row's ``input_lengths`` (its unpadded length), or None unless every line holds one as a batch of one."""
    column = columns.plain(table.column("input_lengths"))
    if column.null_count or not pc.all(pc.equal(pc.list_value_length(column), 1)).as_py():
        return None
    values = pc.list_flatten(column)
    return None if values.null_count else values.to_numpy(zero_copy_only=False).astype(np.int64)


def _pad_id(flat: np.ndarray, offsets: np.ndarray, input_lengths: np.ndarray | None) -> int | None:
    """The pad id: the one value on the rows' first positions past ``input_lengths``; None where no row is padded,
    or the padding holds several values."""
    if input_lengths is None:
        return None
    lengths = np.diff(offsets)
    padded = np.flatnonzero((input_lengths >= 0) & (input_lengths < lengths))
    values = np.unique(flat[offsets[padded] + input_lengths[padded]])
    return int(values[0]) if len(values) == 1 else None


def _nemo_keys(
    tokens: pa.Array, prompt: pa.Array, prompt_ends: np.ndarray, cut: np.ndarray, input_lengths: np.ndarray | None
) -> pa.Array:
    """NeMo-RL's own group key per row (``NEMO_KEY``): the prompt key, the whole row up to ``input_lengths`` where
    the data processor cut the prompt (``cut``), trailing pad ids dropped (rows padded alike compare equal)."""
    lengths = columns.list_lengths(tokens)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    flat_tokens = pc.list_flatten(tokens)
    ends = prompt_ends.copy()
    if cut.any():
        whole = (
            lengths
            if input_lengths is None
            else np.where(input_lengths >= 0, np.minimum(input_lengths, lengths), lengths)
        )
        ends[cut] = offsets[:-1][cut] + whole[cut]
    if not flat_tokens.null_count:
        flat = flat_tokens.to_numpy(zero_copy_only=False)
        pad = _pad_id(flat, offsets, input_lengths)
        if pad is not None and len(flat):
            at = np.flatnonzero((ends > offsets[:-1]) & (flat[np.maximum(ends - 1, 0)] == pad))
            while at.size:
                ends[at] -= 1
                at = at[(ends[at] > offsets[:-1][at]) & (flat[np.maximum(ends[at] - 1, 0)] == pad)]
    changed = np.flatnonzero(ends != prompt_ends)
    if not changed.size:
        return prompt
    rows = tokens.take(arrow_array(changed))
    row_offsets = np.concatenate(([0], np.cumsum(lengths[changed]))).astype(np.int64)
    keys = _joined(pc.list_flatten(rows), row_offsets, row_offsets[:-1] + ends[changed] - offsets[:-1][changed])
    mask = np.zeros(len(prompt_ends), dtype=bool)
    mask[changed] = True
    return pc.replace_with_mask(prompt, pa.array(mask), keys)


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
    token_lengths = columns.list_lengths(tokens)
    token_starts = np.concatenate(([0], np.cumsum(token_lengths)))[:-1].astype(np.int64)
    prompt_ends = np.where(first >= 0, first, token_starts + token_lengths)
    loss_mask = _unwrapped(table, "sample_loss_mask", path)
    cut = _cut_prompts(path, loss_mask, prompt_ends - token_starts, first >= 0)
    nemo_key = _nemo_keys(tokens, prompt, prompt_ends, cut, _input_lengths(table))
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
    aligned = advantage_lengths == token_lengths
    at = np.where(aligned & (first >= 0), starts + (first - token_starts), starts)
    present = advantage_lengths > 0
    recorded = np.full(len(at), np.nan)
    recorded[present] = flat[at[present]]
    extra = {"sample_loss_mask": loss_mask, "idx": table.column("idx").combine_chunks()}
    canonical = make_table(
        reward=rewards,
        prompt=prompt,
        step=pa.array(np.full(table.num_rows, step, dtype=np.int64)),
        recorded_advantage=pa.array(recorded, mask=~present),
        response_length=pa.array(loss_tokens),
        **{NEMO_KEY: nemo_key},
        **{name: values for name, values in extra.items() if values.null_count < len(values)},
    )
    notes = []
    if cut.any():
        notes.append(
            f"NeMo-RL truncated prompts ({path.name}): on {int(cut.sum())} rows the data processor cut the prompt "
            "(sample_loss_mask 0, its text longer than its tokens), so NeMo-RL keyed each by its whole row "
            "(extract_initial_prompt_messages takes messages up to the original prompt length) and trained it as a "
            "group of its own, with advantage 0; the nemo-* presets group as NeMo-RL did, the reference by the "
            "true prompt"
        )
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
    if cut.any():
        found["samples whose prompt the data processor truncated (each its own group in NeMo-RL)"] = int(cut.sum())
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
    framework_groups="nemo_prompt_ids: NeMo-RL's padded prompt-token rows, which hold the response too where the data "
    "processor truncated the prompt (each such row its own group); the nemo-* presets group by it",
    reward="filtered_rewards, else rewards",
    advantage="advantages",
    trained_with=(DEFAULT,),
    cannot_audit=(NO_TRAJECTORY,),
)
