"""miles dumps (a fork of slime) to the canonical table: rollout dumps, per-rank train dumps, and their join.

miles' ``--dump-details D`` writes ``D/rollout_data/{id}.pt``, one ``D/train_data/{id}_{rank}.pt`` per global rank
and ``D/trajectory/{id}.jsonl`` (the conversations, moved out of each sample's metadata: never read here).

Rollout dump ``{"rollout_id": int, "metadata": dict, "samples": [Sample.to_dict(), ...]}``
  slime's sample dicts, read by slime's reader: ``step`` = ``rollout_id``, ``position`` = the place in
  ``samples``, ``prompt`` = ``group_index``, ``trajectory`` = the sample's ``rollout_id``, else its ``index`` (a
  one-sample agent session keeps rollout_id None), ``reward``, ``status``, ``response_length``; passed through:
  ``index``, ``remove_sample``, ``split``. Each sample's ``tokens`` are kept as a digest, for the join.

Train dump ``{"rollout_id", "rank", "rollout_data": {column: [one value a row]}, "cp_rank", "cp_size", "qkv_format"}``
  the rank's training batch after the step, in micro-batch order: no prompt key and no rollout position.
  ``sample_indices`` is ``Sample.index``, which fan-out siblings share (a dashboard that joins on it alone gives
  every sibling one row), so a row joins the rollout sample with the same ``index`` **and** the same ``tokens``.
  The join is checked: the row's ``rollout_ids`` must be that sample's trajectory key. ``rewards`` (the normalized
  reward every token's advantage equals) becomes ``recorded_advantage``. Siblings with byte-identical tokens
  share a reward and an advantage: whichever row each takes, the audit is the same. Rank files holding a copy of
  one DP shard (TP or PP > 1) count once. Rollout samples in no rank file are those the schedule dropped.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ...._errors import InputError
from ...._table import RECORDED_ADVANTAGE, TRAJECTORY, with_found, with_trained_default
from ...base import Format
from ...torchsave.torch_zip import TorchArchive, open_zip
from ...torchsave.unpickle import StoredTensor
from . import slime
from . import slime_fields as fields

if TYPE_CHECKING:
    from ...options import LoadOptions

LAYOUT = "miles' {'rollout_id', 'rank', 'rollout_data': {column: [a value per row]}, 'cp_rank', 'cp_size', ...}"
DEFAULT = (
    "miles-grpo",
    "miles' _normalize_rewards_by_rollout, its reward normalization for grpo, gspo and reinforce_plus_plus_baseline "
    "(rewards_normalization, on by default); the estimator and grpo_std_normalization (scale=none when off) are run "
    "settings the dumps do not hold: the train dumps' recorded advantages say which",
)
CANNOT_AUDIT = (
    "which of two fan-out siblings with byte-identical tokens a train row is: they share a reward and an advantage, "
    "so the audit is the same either way",
    "what a rollout trained with when its train dumps (train_data/{id}_{rank}.pt) are absent; a train dump without "
    "its rollout dump holds no group_index and is refused",
    "the samples the train schedule dropped (whole trailing rollouts of a step): no recorded advantage",
)
LABEL = "miles (prompt = group_index, trajectory = rollout_id, else index)"

_DIGEST_BYTES = 16
_TOKENS = "tokens_digest"
_SAMPLE_INDEX, _TRAIN_TRAJECTORY = "sample_index", "train_rollout_id"
_KIND, _STEP, _SPLIT, _RANK, _RAW_REWARD = (
    b"rollaudit.miles." + name for name in (b"kind", b"step", b"split", b"rank", b"raw_reward")
)
# The rollout dump's tokens are the join key: read them; the other per-token lists are never built.
_SKIPPED = slime.PER_TOKEN_FIELDS - {"tokens"}
_HEAD_BYTES, _TAIL_BYTES = 4096, 1024
_LOCAL_HEADER = struct.Struct("<4s22xHH")


# ---------------------------------------------------------------------------------------------------------------------
# Which files are miles'.


def _key(name: bytes) -> re.Pattern[bytes]:
    """A dict key as pickled: BINUNICODE (protocol 2, torch.save's) or SHORT_BINUNICODE (protocol 4)."""
    size = len(name)
    return re.compile(b"(?:X" + re.escape(struct.pack("<I", size)) + b"|\x8c" + re.escape(bytes([size])) + b")" + name)


_METADATA, _SAMPLES, _ROLLOUT_DATA = _key(b"metadata"), _key(b"samples"), _key(b"rollout_data")
_TRAIN_TAIL = (_key(b"cp_rank"), _key(b"cp_size"), _key(b"qkv_format"))


def pickle_ends(path: Path) -> tuple[bytes, bytes] | None:
    """The first and last bytes of a torch.save zip's data.pkl (the last only where it is stored, as torch
    stores it), read without unpickling; None when the file is no torch.save zip."""
    try:
        with open(path, "rb") as file:
            if not file.read(4).startswith(b"PK\x03\x04"):  # not a zip: no central directory to look for
                return None
            file.seek(0)
            with open_zip(file) as archive:  # its entries counted before zipfile parses them
                member = next(
                    (info for info in archive.infolist() if info.filename.endswith("/data.pkl")),
                    None,
                )
                if member is None or member.filename.count("/") != 1:
                    return None
                if member.compress_type != zipfile.ZIP_STORED:
                    with archive.open(member) as stream:
                        return stream.read(_HEAD_BYTES), b""
                file.seek(member.header_offset)
                _, name_length, extra_length = _LOCAL_HEADER.unpack(file.read(_LOCAL_HEADER.size))
                start = member.header_offset + _LOCAL_HEADER.size + name_length + extra_length
                file.seek(start)
                head = file.read(min(_HEAD_BYTES, member.file_size))
                file.seek(start + max(0, member.file_size - _TAIL_BYTES))
                return head, file.read(min(_TAIL_BYTES, member.file_size))
    except Exception:  # a damaged file is not detected here; the slime reader names what is wrong with it
        return None


def detect(path: Path) -> bool:
    """A torch.save zip holding miles' top level: a rollout dump whose ``metadata`` key comes before
    ``samples`` (slime's has no top-level metadata), or a train dump with ``rollout_data`` that ends with
    ``cp_rank`` / ``cp_size`` / ``qkv_format`` (slime's first layout has none of them)."""
    ends = pickle_ends(path)
    if ends is None:
        return False
    head, tail = ends
    metadata = _METADATA.search(head)
    if metadata is not None:
        samples = _SAMPLES.search(head)
        return samples is None or metadata.start() < samples.start()
    return _ROLLOUT_DATA.search(head) is not None and any(key.search(tail) for key in _TRAIN_TAIL)


def expand_directory(directory: Path) -> list[Path] | None:
    """None: a miles ``--dump-details`` directory has slime's layout, so slime's listing finds its files (by name,
    opening none, so that a cached load reads no dump), and each file's content then says it is miles'."""
    return None


# ---------------------------------------------------------------------------------------------------------------------
# One file.


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One dump to a table that outlives it: a rollout dump's canonical table with its samples' token digests, or
    a train dump's join keys and recorded advantages (step, rank and raw_reward in the schema metadata)."""
    with TorchArchive(path) as archive:
        top = archive.unpickle(lazy_tensors=True, skip=_SKIPPED - {options.reward_key})
        if type(top) is not dict:
            raise InputError(f"the pickle holds a {fields.type_name(top)}", file=str(path), expected=fields.LAYOUT)
        if "rollout_data" in top:
            return _train_table(path, top)
        return _rollout_table(path, top, options)


def _rollout_table(path: Path, top: dict, options: LoadOptions) -> pa.Table:
    step = slime.rollout_step(path, top, options)  # slime's sample reader: miles' samples are slime's fields
    budget = slime.ElementBudget(path)
    digests = [_digest(sample.get("tokens"), budget, path, row, "tokens") for row, sample in enumerate(top["samples"])]
    table = step.table.append_column(_TOKENS, pa.array(digests, pa.binary(_DIGEST_BYTES)))
    metadata = {_KIND: b"rollout", _STEP: str(step.step).encode(), _SPLIT: step.split.encode()}
    return table.replace_schema_metadata(metadata)


def _digest(tokens: Any, budget: slime.ElementBudget, path: Path, row: int, field: str) -> bytes | None:
    """A digest of a sample's token ids as int64 (a list of ints or an integer tensor); None without tokens."""
    if tokens is None:
        return None
    ids = None
    if isinstance(tokens, StoredTensor):
        budget.charge(tokens.numel, field)
        if tokens.dtype in ("int64", "int32", "int16", "int8", "uint8"):
            ids = np.ascontiguousarray(tokens.numpy().reshape(-1), dtype=np.int64)
    elif isinstance(tokens, (list, tuple)):
        budget.charge(len(tokens), field)
        try:
            ids = np.asarray(tokens, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):  # not ints, ragged, or past int64
            ids = None
        if ids is not None and ids.ndim != 1:
            ids = None
    if ids is None:
        raise InputError(
            f"{field} is a {fields.type_name(tokens)}"
            + (f" of {tokens.dtype}" if isinstance(tokens, StoredTensor) else ""),
            file=str(path),
            field=field,
            row=row,
            expected="token ids: a list of ints or an integer tensor",
        )
    return hashlib.blake2b(ids.tobytes(), digest_size=_DIGEST_BYTES).digest()


def _column(data: dict, name: str, rows: int, path: Path, *, required: bool = True) -> Any:
    values = data.get(name)
    if values is None and not required:
        return None
    if not isinstance(values, (list, tuple)) or len(values) != rows:
        found = "missing" if name not in data else f"a {fields.type_name(values)}"
        if isinstance(values, (list, tuple)):
            found = f"{len(values)} values for {rows} rows"
        raise InputError(
            f"rollout_data[{name!r}] is {found}",
            file=str(path),
            field=name,
            expected="one value per sample_indices row",
        )
    return values


def _train_table(path: Path, top: dict) -> pa.Table:
    step = fields.step_of(top, path)
    rank = top.get("rank")
    if type(rank) is not int or not 0 <= rank < 1 << 31:
        raise InputError(f"rank is a {fields.type_name(rank)}", file=str(path), field="rank", expected=LAYOUT)
    data = top["rollout_data"]
    if type(data) is not dict:
        raise InputError(
            f"rollout_data is a {fields.type_name(data)}", file=str(path), field="rollout_data", expected=LAYOUT
        )
    indices = data.get("sample_indices")
    if not isinstance(indices, (list, tuple)):
        raise InputError(
            "rollout_data has no sample_indices list",
            file=str(path),
            field="sample_indices",
            expected="Sample.index of every row (the join key, with tokens)",
        )
    rows = len(indices)
    if rows > path.stat().st_size // fields.MIN_SAMPLE_BYTES + 1:
        raise InputError(f"{rows:,} rows in {path.stat().st_size:,} bytes", file=str(path), field="sample_indices")
    tokens = _column(data, "tokens", rows, path)
    rewards = _column(data, "rewards", rows, path)
    trajectories = _column(data, "rollout_ids", rows, path, required=False)
    advantages = _column(data, "advantages", rows, path, required=False)
    loss_masks = _column(data, "loss_masks", rows, path, required=False)
    sample_index = [
        fields.optional_int({"sample_indices": value}, "sample_indices", path, row) for row, value in enumerate(indices)
    ]
    missing = next((row for row, value in enumerate(sample_index) if value is None), None)
    if missing is not None:
        raise InputError(
            "sample_indices is None", file=str(path), field="sample_indices", row=missing, expected="an int"
        )
    budget = slime.ElementBudget(path)
    digests = [_digest(value, budget, path, row, "tokens") for row, value in enumerate(tokens)]
    recorded, verdicts = [], {slime.VARIES: 0, slime.DIFFERS: 0}
    for row, value in enumerate(rewards):
        advantage = fields.number_of(value)
        if advantage is None:
            raise InputError(
                f"rewards is a {fields.type_name(value)}",
                file=str(path),
                field="rewards",
                row=row,
                expected="a float (the normalized reward)",
            )
        recorded.append(advantage)
        if advantages is not None:
            masks = loss_masks[row] if loss_masks is not None else None
            verdict = slime.compare_tokens(advantages[row], masks, advantage, budget)
            if verdict is not None:
                verdicts[verdict] += 1
    slime.warn_token_verdicts(path, verdicts)
    trajectory = (
        [
            fields.optional_int({"rollout_ids": value}, "rollout_ids", path, row)
            for row, value in enumerate(trajectories)
        ]
        if trajectories is not None
        else [None] * rows
    )
    raw = data.get("raw_reward")
    raw_reward = None
    if isinstance(raw, (list, tuple)):
        numbers = [fields.number_of(value) for value in raw]
        raw_reward = numbers if all(number is not None for number in numbers) else None
    table = pa.table(
        {
            _SAMPLE_INDEX: pa.array(sample_index, pa.int64()),
            _TOKENS: pa.array(digests, pa.binary(_DIGEST_BYTES)),
            RECORDED_ADVANTAGE: pa.array(recorded, pa.float64()),
            _TRAIN_TRAJECTORY: pa.array(trajectory, pa.int64()),
        }
    )
    metadata = {
        _KIND: b"train",
        _STEP: str(step).encode(),
        _RANK: str(rank).encode(),
        _RAW_REWARD: json.dumps(raw_reward).encode(),
    }
    return table.replace_schema_metadata(metadata)


# ---------------------------------------------------------------------------------------------------------------------
# Several files: one table per step, the rank files of a step joined to its rollout dump.


@dataclass
class RankFile:
    """A train dump reduced to numpy: one entry per row."""

    path: Path
    step: int
    rank: int
    sample_index: np.ndarray
    digest: np.ndarray  # (rows, 16) uint8
    advantage: np.ndarray
    trajectory: pa.Array
    raw_reward: list[float] | None

    def same_shard(self, other: RankFile) -> bool:
        return np.array_equal(self.sample_index, other.sample_index) and np.array_equal(self.digest, other.digest)


def _digests(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A fixed-size binary column as a (rows, 16) byte matrix; a null (a sample without tokens) is all zeros."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(array) == 0:
        return np.zeros((0, _DIGEST_BYTES), dtype=np.uint8)
    values = np.frombuffer(array.buffers()[1], dtype=np.uint8)
    matrix = values[array.offset * _DIGEST_BYTES : (array.offset + len(array)) * _DIGEST_BYTES]
    matrix = matrix.reshape(len(array), _DIGEST_BYTES).copy()
    if array.null_count:
        matrix[~array.is_valid().to_numpy(zero_copy_only=False)] = 0
    return matrix


def _rank_file(path: Path, table: pa.Table, metadata: dict) -> RankFile:
    return RankFile(
        path=path,
        step=int(metadata[_STEP]),
        rank=int(metadata[_RANK]),
        sample_index=table.column(_SAMPLE_INDEX).to_numpy(),
        digest=_digests(table.column(_TOKENS)),
        advantage=table.column(RECORDED_ADVANTAGE).to_numpy(),
        trajectory=table.column(_TRAIN_TRAJECTORY).combine_chunks(),
        raw_reward=json.loads(metadata[_RAW_REWARD]),
    )


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The reduced tables of miles dumps (any order) to one canonical table per step, train dumps joined."""
    rollouts: list[slime.RolloutStep] = []
    trains: dict[int, list[RankFile]] = {}
    for path, table in zip(paths, reduced, strict=True):
        metadata = table.schema.metadata or {}
        if metadata.get(_KIND) == b"train":
            part = _rank_file(path, table, metadata)
            trains.setdefault(part.step, []).append(part)
        else:
            step = int(metadata[_STEP])
            rollouts.append(slime.RolloutStep(path, step, metadata[_SPLIT].decode(), table.replace_schema_metadata()))
    slime.check_one_kind(rollouts)
    by_step = {rollout.step: rollout for rollout in rollouts if rollout.split == "train"}
    for step, parts in trains.items():
        if step not in by_step:
            raise InputError(
                f"train dump of step {step} has no rollout dump of the same step: "
                f"missing {slime.expected_rollout_path(parts[0].path, step)}",
                file=str(parts[0].path),
                expected="the rollout dump of every train dump's step (train dumps hold no prompt keys)",
            )
    steps = []
    for rollout in rollouts:
        found: dict[str, int] = {}
        if rollout.split == "train" and rollout.step in trains:
            table = _join(rollout, trains[rollout.step], found)
        else:
            table = rollout.table
        table = table.drop_columns([_TOKENS])
        counts = {**slime.found_counts(table), **found}
        steps.append(with_trained_default(with_found(table, {LABEL: counts}), *DEFAULT))
    return steps


def _unique_shards(parts: list[RankFile], found: dict[str, int]) -> list[RankFile]:
    """The rank files of a step, one per DP shard: with TP or PP > 1 several ranks write the same shard."""
    unique: list[RankFile] = []
    for part in sorted(parts, key=lambda part: (part.rank, str(part.path))):
        copy_of = next((kept for kept in unique if kept.same_shard(part)), None)
        if copy_of is None:
            unique.append(part)
        elif not np.array_equal(copy_of.advantage, part.advantage, equal_nan=True):
            raise InputError(
                f"holds the rows of {copy_of.path} (the same DP shard) with other rewards",
                file=str(part.path),
                field="rewards",
                expected="copies of one DP shard to agree",
            )
    found["train rank files"] = len(parts)
    found["rank files copying another's DP shard (TP/PP)"] = len(parts) - len(unique)
    return unique


def _occurrence(codes: np.ndarray) -> np.ndarray:
    """Each entry's count of earlier entries with the same code (0 for the first)."""
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    occurrence = np.empty(len(codes), dtype=np.int64)
    occurrence[order] = np.arange(len(codes)) - np.searchsorted(ordered, ordered, side="left")
    return occurrence


def _join(rollout: slime.RolloutStep, parts: list[RankFile], found: dict[str, int]) -> pa.Table:
    """The step's table with each trained sample's recorded advantage: a train row joins the rollout sample with
    its ``sample_indices`` as ``index`` and its tokens; siblings with equal keys are paired in order."""
    table = rollout.table
    shards = _unique_shards(parts, found)
    index = table.column("index").combine_chunks()
    keyed = np.flatnonzero(index.is_valid().to_numpy(zero_copy_only=False))  # a sample without index joins nothing
    rollout_index = index.to_numpy(zero_copy_only=False)[keyed].astype(np.int64)
    rollout_digest = _digests(table.column(_TOKENS))[keyed]
    train_index = np.concatenate([shard.sample_index for shard in shards]).astype(np.int64)
    train_digest = np.concatenate([shard.digest for shard in shards])
    keys = np.concatenate(
        [
            np.hstack([rollout_index.view(np.uint8).reshape(-1, 8), rollout_digest]),
            np.hstack([train_index.view(np.uint8).reshape(-1, 8), train_digest]),
        ]
    )
    _, codes = np.unique(keys.view(f"V{keys.shape[1]}").reshape(-1), return_inverse=True)
    codes = codes.reshape(-1)
    rollout_codes, train_codes = codes[: len(keyed)], codes[len(keyed) :]
    span = len(codes) + 1
    rollout_keys = rollout_codes * span + _occurrence(rollout_codes)
    train_keys = train_codes * span + _occurrence(train_codes)
    order = np.argsort(rollout_keys, kind="stable")
    place = np.searchsorted(rollout_keys[order], train_keys)
    place = np.minimum(place, max(len(order) - 1, 0))
    matched = (rollout_keys[order][place] == train_keys) if len(order) else np.zeros(len(train_keys), dtype=bool)
    if not matched.all():
        _refuse_row(rollout, shards, int(np.flatnonzero(~matched)[0]), train_codes, rollout_codes, rollout_index)
    rows = keyed[order[place]]
    _check_trajectories(rollout, shards, rows)
    values = np.full(table.num_rows, np.nan)
    values[rows] = np.concatenate([shard.advantage for shard in shards])
    trained = np.zeros(table.num_rows, dtype=bool)
    trained[rows] = True
    first = next((shard for shard in shards if shard.raw_reward is not None), None)
    if first is not None:
        slime.check_raw_rewards(slime.TrainStep(first.path, first.step, raw_reward=first.raw_reward), table)
    column = pa.array(values, pa.float64(), mask=~trained)
    return table.set_column(table.column_names.index(RECORDED_ADVANTAGE), RECORDED_ADVANTAGE, column)


def _where(shards: list[RankFile], flat: int) -> tuple[RankFile, int]:
    for shard in shards:
        if flat < len(shard.sample_index):
            return shard, flat
        flat -= len(shard.sample_index)
    raise AssertionError("a train row past every shard")


def _refuse_row(
    rollout: slime.RolloutStep,
    shards: list[RankFile],
    flat: int,
    train_codes: np.ndarray,
    rollout_codes: np.ndarray,
    rollout_index: np.ndarray,
) -> None:
    shard, row = _where(shards, flat)
    sample_index = int(shard.sample_index[row])
    if train_codes[flat] in rollout_codes:
        what = (
            f"more train rows than rollout samples of {rollout.path} have sample_index {sample_index} and these "
            "tokens (a sample trained twice)"
        )
    elif sample_index in rollout_index:
        what = (
            f"no sample of {rollout.path} with index {sample_index} has this row's tokens "
            f"({int(np.sum(rollout_index == sample_index))} have that index)"
        )
    else:
        what = f"sample_index {sample_index} is the index of no sample of {rollout.path}"
    raise InputError(what, file=str(shard.path), row=row, expected="train and rollout dumps of the same run and step")


def _check_trajectories(rollout: slime.RolloutStep, shards: list[RankFile], rows: np.ndarray) -> None:
    """A joined row's ``rollout_ids`` is the trajectory key of the sample it joins: the join verified."""
    trained = pa.concat_arrays([shard.trajectory for shard in shards])
    known = trained.is_valid().to_numpy(zero_copy_only=False)
    theirs = trained.fill_null(0).to_numpy()
    # Joined samples have an index, so a trajectory key.
    mine = rollout.table.column(TRAJECTORY).combine_chunks().take(pa.array(rows, pa.int64())).fill_null(0).to_numpy()
    differ = known & (mine != theirs)
    if differ.any():
        flat = int(np.flatnonzero(differ)[0])
        shard, row = _where(shards, flat)
        raise InputError(
            f"rollout_ids {int(theirs[flat])} is not the trajectory key (rollout_id, else index: {mine[flat]}) of "
            f"the sample it joins at position {int(rows[flat])} of {rollout.path}",
            file=str(shard.path),
            field="rollout_ids",
            row=row,
            expected="the trajectory key miles trained the sample under",
        )


LOADER = Format(
    name="miles",
    description="miles --dump-details: rollout_data/{id}.pt and per-rank train_data/{id}_{rank}.pt (torch.save zips)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    options=frozenset({"reward_key", "n_samples_per_prompt"}),
    reads="miles' own sample keys (prompt = group_index, trajectory = rollout_id, else index; reward = reward, "
    "or reward[KEY] with --reward-key KEY)",
    prompt="group_index",
    trajectory="rollout_id, else index",
    reward="reward, or reward[reward_key]",
    advantage="rewards (per-rank train dumps, joined on sample_indices and tokens)",
    trained_with=(DEFAULT,),
    cannot_audit=CANNOT_AUDIT,
    step_of=slime.step_of_dump,  # {id}.pt and its rank files {id}_{rank}.pt are one step
)
