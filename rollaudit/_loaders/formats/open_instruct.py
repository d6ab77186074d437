"""open-instruct's ``--save_traces`` rollout dumps to the canonical table.

With ``--save_traces``, open-instruct's data-preparation loop appends each step's batch to
``{rollouts_save_path}/{run_name}_rollouts_{shard:06d}.jsonl`` (``rl_utils._save_rollouts``): one JSON object per
batch row (one sampled response), every step of the run in one file until 10000 rows were written, then the next
shard; a step never straddles two shards. ``{run_name}_metadata.jsonl`` lies beside it. The directory is shared by
runs (the upstream default path is), told apart by run name: one run is read at a time, never two merged.

Columns: ``step`` = ``step``, ``position`` = ``sample_idx`` (the row's place in its step's batch), ``prompt`` =
``prompt_tokens`` (the true prompt, comma-joined token ids, grouped within a step), ``trajectory`` = ``sample_idx``
(a row is one whole episode: open-instruct samples n independent responses per prompt and concatenates the turns of
a tool or environment episode into one response), ``reward`` = ``reward``, ``recorded_advantage`` = ``advantage``
(the float64 value the loop computed), ``response_length`` = the length of ``response_tokens`` (tool and
environment tokens included). Passed through: ``prompt_idx`` (the grouping open-instruct itself normalised by,
which its presets read), ``finish_reason``, ``dataset``.

open-instruct normalises consecutive slices of n rows of the step's batch (``prompt_idx = sample_idx // n``). They
are the prompts, except under ``mask_truncated_completions``: truncated rows are removed after grouping, so the
slices of the surviving rows straddle prompts. The reference groups by the true prompt; the presets reproduce the
slices, so the audit measures what that defect did. ``n`` is recorded nowhere: it is the rows per ``prompt_idx``,
which must be the same for every group of a run and give ``prompt_idx == sample_idx // n``, else the file is
refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError
from ..._table import (
    POSITION,
    PROMPT,
    STEP,
    arrow_array,
    concat_tables,
    dictionary_codes,
    make_table,
    with_found,
    with_trained_default,
)
from ..arrow import columns, json_lines, tables
from ..base import Format, SeveralRuns

if TYPE_CHECKING:
    from ..options import LoadOptions

_FILE = re.compile(r"^(?P<run>.+)_rollouts_(?P<shard>\d{6})\.jsonl$")
_KEYS = ("step", "sample_idx", "prompt_idx", "prompt_tokens", "response_tokens", "reward", "advantage")
_INDEX = "open-instruct's index: an int from 0 on every line"
_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64()),
        pa.field("sample_idx", pa.int64()),
        pa.field("prompt_idx", pa.int64()),
        pa.field("prompt_tokens", pa.list_(pa.int64())),
        pa.field("response_tokens", pa.list_(pa.int64())),
        pa.field("reward", pa.float64()),
        pa.field("advantage", pa.float64()),
        pa.field("finish_reason", pa.string()),
        pa.field("dataset", pa.string()),
    ]
)
# A column of the read table that combine() turns into counts and a note, then leaves out.
_DIFFERS = "prompt_tokens_differ"
PROMPT_IDX = "prompt_idx"
_LABEL = "open-instruct (prompt = prompt_tokens, trajectory = the row; normalised by prompt_idx)"
DEFAULT = (
    "oi-centered",
    "open-instruct's default advantage_normalization_type (centered: the reward minus its prompt_idx slice's "
    "mean, float64); the dump records the advantages, which outrank it",
)
FILTERED_GROUPS = (
    "groups that filter_zero_std_samples (on by default) dropped: they are absent from the dump, and their count "
    "is not recorded"
)
CANNOT_AUDIT = (
    FILTERED_GROUPS,
    "the dataset prompt id (batch.indices is not dumped): prompts are told apart by their token ids",
    "which rows were trained: packs dropped to fit the data-parallel world size are dropped after the dump",
    "tool statistics under mask_truncated_completions (request_info is not realigned when rows are removed)",
)


def detect(path: Path) -> bool:
    """A JSON Lines file whose first line holds open-instruct's trace keys, whatever its name."""
    first = tables.first_json_object(path)
    return first is not None and all(key in first for key in (*_KEYS, "finish_reason"))


def _run_files(directory: Path) -> dict[str, list[Path]]:
    runs: dict[str, list[Path]] = {}
    for path in directory.iterdir():
        match = _FILE.match(path.name)
        if match and path.is_file():
            runs.setdefault(match.group("run"), []).append(path)
    return runs


def expand_directory(directory: Path) -> list[Path] | None:
    """The shards of the one run in a ``--rollouts_save_path`` directory (or in its ``rollouts/`` child); None
    where there are none; several runs are named, never merged."""
    runs = _run_files(directory)
    if not runs and (directory / "rollouts").is_dir():
        directory = directory / "rollouts"
        runs = _run_files(directory)
    if not runs:
        return None
    if len(runs) > 1:
        names = ", ".join(sorted(runs))
        raise SeveralRuns(
            f"holds {len(runs)} open-instruct runs ({names})",
            runs=dict(sorted(runs.items())),
            file=str(directory),
            expected="one run: name it with --run, or name its {run_name}_rollouts_*.jsonl file(s)",
        )
    return next(iter(runs.values()))


def _shard(path: Path) -> tuple[str, int]:
    match = _FILE.match(path.name)
    return (match.group("run"), int(match.group("shard"))) if match else (path.stem, 0)


def _offsets(array: pa.ChunkedArray, path: Path, field: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, flat values) of a list<int64> column without nulls."""
    combined = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    if combined.null_count:
        row = int(pc.index(pc.is_null(combined), True).as_py())
        raise InputError("is missing", file=str(path), field=field, row=row, expected="a list of token ids")
    offsets = combined.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    flat = combined.values.to_numpy(zero_copy_only=False)
    if len(flat) and np.isnan(np.asarray(flat, dtype=np.float64)).any():
        raise InputError("holds a null token id", file=str(path), field=field, expected="int token ids")
    return offsets - offsets[0], flat[offsets[0] : offsets[-1]]


def _differ_from_group_head(tokens: pa.ChunkedArray, head: np.ndarray, path: Path) -> np.ndarray:
    """Per row: its ``prompt_tokens`` differ from those of the first row of its group (``head``: that row)."""
    offsets, flat = _offsets(tokens, path, "prompt_tokens")
    lengths = np.diff(offsets)
    differ = lengths != lengths[head]
    # Compare token by token where the lengths agree: each token against the same place in the head's list.
    row_of_token = np.repeat(np.arange(len(lengths)), np.where(differ, 0, lengths))
    kept_offsets = np.concatenate([[0], np.cumsum(np.where(differ, 0, lengths))])
    place = np.arange(len(row_of_token)) - kept_offsets[row_of_token]
    mine = flat[offsets[row_of_token] + place]
    theirs = flat[offsets[head[row_of_token]] + place]
    differ |= np.bincount(row_of_token[mine != theirs], minlength=len(lengths)) > 0
    return differ


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One shard: a row per response, its groups checked against ``sample_idx`` and ``prompt_tokens``."""
    tables.check_not_empty(path)
    table = json_lines.read_json_lines(path, _SCHEMA, token_lists=True)  # prompt and response token ids
    step = columns.index_values(table.column("step"), path, "step", _INDEX)
    sample = columns.index_values(table.column("sample_idx"), path, "sample_idx", _INDEX)
    prompt = columns.index_values(table.column("prompt_idx"), path, "prompt_idx", _INDEX)
    steps, samples, prompts = (np.asarray(column.to_numpy()) for column in (step, sample, prompt))
    rows = len(steps)
    # Each step's rows in batch order: sample_idx 0, 1, 2, ... within each run of one step (file order).
    start = np.r_[True, steps[1:] != steps[:-1]] if rows else np.zeros(0, dtype=bool)
    run_start = np.maximum.accumulate(np.where(start, np.arange(rows), 0)) if rows else np.zeros(0, np.int64)
    bad = np.flatnonzero(samples != np.arange(rows) - run_start)
    if bad.size:
        raise InputError(
            f"is {int(samples[bad[0]])}, not the row's place in its step's batch ({int(bad[0] - run_start[bad[0]])})",
            file=str(path),
            field="sample_idx",
            row=int(bad[0]),
            expected="each step's rows written once, in batch order (sample_idx 0, 1, 2, ...)",
        )
    starts = np.flatnonzero(start)
    if len(np.unique(steps[starts])) != len(starts):
        repeated = int(steps[starts][np.flatnonzero(np.bincount(steps[starts]) > 1)[0]])
        raise InputError(
            f"holds step {repeated} twice", file=str(path), field="step", expected="each step's batch written once"
        )
    # n: the rows of the first prompt_idx group; every group has n rows and prompt_idx == sample_idx // n.
    n = int(np.sum((steps == steps[0]) & (prompts == prompts[0]))) if rows else 1
    step_rows = np.diff(np.r_[starts, rows])
    # Rows after a step's last full group of n (a short group) fail as well as a prompt_idx off sample_idx // n.
    bad = np.flatnonzero((prompts != samples // n) | (samples >= np.repeat(step_rows // n * n, step_rows)))
    if bad.size:
        raise InputError(
            f"is {int(prompts[bad[0]])} with {n} rows per prompt_idx, so prompt_idx groups are not all of one size "
            "n with prompt_idx = sample_idx // n",
            file=str(path),
            field="prompt_idx",
            row=int(bad[0]),
            expected="n rows per prompt_idx in every step (open-instruct samples each prompt n times)",
        )
    group_head = run_start + prompts * n
    differ = _differ_from_group_head(table.column("prompt_tokens"), group_head, path)
    # A row's key is its group head's unless its tokens differ: the keys of those rows alone are written.
    source = np.where(differ, np.arange(rows), group_head)
    written, place = np.unique(source, return_inverse=True)
    prompt_tokens = columns.plain(table.column("prompt_tokens")).take(arrow_array(written))
    true_prompt = pc.binary_join(prompt_tokens.cast(pa.list_(pa.string())), ",").take(arrow_array(place.reshape(-1)))
    response, _ = _offsets(table.column("response_tokens"), path, "response_tokens")
    reward = columns.plain(table.column("reward"))
    if reward.null_count:
        row = int(pc.index(pc.is_null(reward), True).as_py())
        raise InputError("is missing", file=str(path), field="reward", row=row, expected="a number")
    canonical = make_table(
        reward=reward,
        prompt=true_prompt,
        trajectory=sample,
        step=step,
        position=sample,
        response_length=arrow_array(np.diff(response)),
        recorded_advantage=columns.plain(table.column("advantage")),
        finish_reason=columns.plain(table.column("finish_reason")),
        dataset=columns.plain(table.column("dataset")),
        **{PROMPT_IDX: prompt, _DIFFERS: pa.array(differ)},
    )
    return canonical.replace_schema_metadata({b"open_instruct.n": str(n).encode()})


def _step_counts(whole: pa.Table, sizes: np.ndarray) -> dict[str, np.ndarray]:
    """Per step of ``whole`` (its steps one after the other, ``sizes`` rows each): its prompt_idx groups, those
    mixing prompts (prompt_tokens differ), its true prompts and its groups with all-equal rewards, from one pass
    over every row (prompt_idx groups are contiguous runs of each step's rows)."""
    step_index = np.repeat(np.arange(len(sizes)), sizes)
    prompts = whole.column(PROMPT_IDX).to_numpy()
    new_group = np.r_[True, (step_index[1:] != step_index[:-1]) | (prompts[1:] != prompts[:-1])]
    starts = np.flatnonzero(new_group)
    group_step = step_index[starts]
    rewards = whole.column("reward").to_numpy()
    differ = whole.column(_DIFFERS).to_numpy(zero_copy_only=False).astype(np.int64)
    constant = np.minimum.reduceat(rewards, starts) == np.maximum.reduceat(rewards, starts)
    mixing = np.maximum.reduceat(differ, starts) > 0
    codes = dictionary_codes(whole.column(PROMPT), "encode")[0]
    span = int(codes.max()) + 1
    pairs = np.unique(step_index * span + codes) // span  # the step of each distinct (step, prompt)

    def per_step(values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(values, weights=weights, minlength=len(sizes)).astype(np.int64)

    return {
        "groups": per_step(group_step),
        "mixing": per_step(group_step, mixing),
        "true_prompts": per_step(pairs),
        "constant": per_step(group_step, constant),
    }


def _with_counts(table: pa.Table, n: int, filtered: bool, counts: dict[str, int]) -> pa.Table:
    """One step's table carrying what the loader counted (``counts``: :func:`_step_counts` of the step) and noted
    (``filtered``: no group of the run has all-equal rewards)."""
    mixing, groups, true_prompts = counts["mixing"], counts["groups"], counts["true_prompts"]
    step = int(table.column(STEP)[0].as_py())
    notes = []
    if mixing:
        notes.append(
            f"step {step}: {mixing} of {groups} prompt_idx groups mix rows of different prompts (prompt_tokens "
            "differ): open-instruct's mask_truncated_completions removes truncated rows after the groups were "
            "formed, so its slices of n straddle prompts, and the recorded advantages centre on those slices (an "
            f"upstream defect); the reference groups by the {true_prompts} true prompts, the oi-* presets by the "
            "slices"
        )
    notes.append(f"n = {n} rows per prompt_idx (num_samples_per_prompt_rollout is not recorded: read off the groups)")
    if filtered:
        notes.append(
            "no group has all-equal rewards, as with filter_zero_std_samples (on by default): the groups it "
            "dropped are absent from the dump and never counted here"
        )
    found = {
        _LABEL: {
            "prompts (prompt_tokens)": true_prompts,
            "prompt_idx groups": groups,
            "rows (a response each)": table.num_rows,
            "prompt_idx groups mixing prompts (prompt_tokens differ)": mixing,
            "groups with all-equal rewards (kept: filter_zero_std_samples off)": counts["constant"],
        }
    }
    return with_found(table, found, notes)


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The shards of one run, in shard order, as one table per step."""
    shards = sorted(zip((_shard(path) for path in paths), paths, reduced, strict=True), key=lambda item: item[0])
    runs = sorted({run for (run, _), _, _ in shards})
    if len(runs) > 1:
        raise InputError(
            f"the files belong to {len(runs)} open-instruct runs ({', '.join(runs)})",
            expected="the shards of one run: runs are never merged",
        )
    sizes = {int((table.schema.metadata or {}).get(b"open_instruct.n", b"0")) for _, _, table in shards}
    if len(sizes) > 1:
        raise InputError(
            f"the shards of run {runs[0]} have different rows per prompt_idx ({', '.join(map(str, sorted(sizes)))})",
            expected="one n (num_samples_per_prompt_rollout) per run",
        )
    n = sizes.pop()
    whole = concat_tables(table.replace_schema_metadata(None) for _, _, table in shards)
    whole = with_trained_default(whole, *DEFAULT)
    steps = columns.split_steps(whole)  # each step a slice, carrying the run's default
    # The steps one after the other, in one pass over every row: each step's positions are 0, 1, 2, ...
    rows = np.array([table.num_rows for _, table in steps], dtype=np.int64)
    ordered = pa.concat_tables(table for _, table in steps)
    positions = ordered.column(POSITION).to_numpy()
    within = np.arange(len(positions)) - np.repeat(np.cumsum(rows) - rows, rows)
    wrong = np.flatnonzero(positions != within)
    if wrong.size:
        step = steps[int(np.searchsorted(np.cumsum(rows), wrong[0], side="right"))][0]
        raise InputError(
            f"step {step} is written in two shards or twice",
            field="step",
            expected="each step's batch written once, in one shard",
        )
    if not whole.num_rows:
        return [table.drop_columns([_DIFFERS]) for _, table in steps]
    counts = _step_counts(ordered, rows)
    # filter_zero_std_samples is a run setting: the note is the run's, once no step shows an all-equal group.
    filtered = not counts["constant"].any()
    return [
        _with_counts(table.drop_columns([_DIFFERS]), n, filtered, {
            name: int(values[index]) for name, values in counts.items()
        })
        for index, (_, table) in enumerate(steps)
    ]  # fmt: skip


LOADER = Format(
    name="open_instruct",
    description="open-instruct --save_traces {run_name}_rollouts_{shard:06d}.jsonl (a line per response, every step)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    reads="open-instruct's own keys (prompt = prompt_tokens, trajectory = the row, reward = reward, "
    "advantage = advantage; open-instruct's groups = prompt_idx)",
    prompt="prompt_tokens (the true prompt, within a step)",
    framework_groups="prompt_idx (sample_idx // n: consecutive slices of n rows of the surviving batch, which "
    "straddle prompts under mask_truncated_completions); the oi-* presets group by it",
    trajectory="the row (sample_idx): one response is one whole episode",
    reward="reward",
    advantage="advantage",
    trained_with=(DEFAULT,),
    cannot_audit=CANNOT_AUDIT,
    steps_appended=True,
)
