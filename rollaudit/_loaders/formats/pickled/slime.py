"""slime dumps to the canonical table: rollout dumps, train dumps, and the join of the two.

One file is one step. Each file is unpickled safely (:mod:`rollaudit._loaders.torchsave.unpickle`),
reduced to its audit columns at once, and dropped: token lists never outlive
the file they came from, so memory does not grow with the number of files.

Rollout dump (``--save-debug-rollout-data``, ``D/rollout_data/<id>.pt``)
  ``{"rollout_id": int, "samples": [dict, ...]}``. Columns: ``step`` = the
  file's ``rollout_id``, ``position`` = the sample's place in ``samples``,
  ``prompt`` = ``group_index``, ``trajectory`` = the sample's ``rollout_id``
  (else its own ``index``), ``reward`` (``reward[reward_key]`` for dict
  rewards), ``status``, ``response_length``; passed through: ``index``,
  ``remove_sample`` and ``split`` (``eval`` for ``eval_<id>`` file names).

Train dump (``--save-debug-train-data``, ``D/train_data/<id>_<rank>.pt``)
  format_version 2. Its samples join the rollout dump of the same step on
  ``rollout_position`` (the sample's place in the rollout dump), checked
  against ``sample_index`` = the rollout sample's ``index``; on slime's agent
  path every sample a trajectory emits copies its base sample's index, so the
  index alone is a join key only in a dump without ``rollout_position`` and
  with unique indexes. The trainer's normalized reward (``rewards``) becomes
  ``recorded_advantage``. Rollout samples the trainer dropped (a step's
  remainder that filled no micro-batch) keep a null recorded advantage.

Whole runs: ``reduce_file`` reads one dump into a small table (a rollout
dump's canonical table, or a train dump's join keys and recorded
advantages), which worker processes, Ray tasks and the cache pass around;
``combine`` pairs the train dumps with the rollout dumps of their step from
those tables alone. Pairing after the reduction needs no file read twice:
the step lives inside each file, not in its name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ...._errors import ChoiceNeeded, InputError, RollauditWarning, leave_open, warn
from ...._table import (
    PROMPT,
    RECORDED_ADVANTAGE,
    REWARD,
    TRAJECTORY,
    group_codes,
    make_table,
    with_found,
    with_trained_default,
)
from ...base import Format
from ...torchsave.torch_zip import TorchArchive, is_torch_zip
from ...torchsave.unpickle import StoredTensor
from . import slime_fields as fields

if TYPE_CHECKING:
    from ...options import LoadOptions

SUFFIXES = (".pt", ".pth")
TRAIN_DUMP_VERSION = 2
# Recorded per-token advantages are float32 copies of a float64 scalar: they agree to about 1e-7.
ADVANTAGE_TOLERANCE = 1e-5
_EVAL_NAME = re.compile(r"(?:^|_)eval_\d+$")
DEFAULT_WHY = (
    "slime's rollout dumps record no advantages, and slime main normalises as slime-legacy(n=N) with N its "
    "n_samples_per_prompt, which the dump does not hold (PRs #2204 and #2062 change it, not merged); a train dump "
    "would say which"
)


def is_eval_dump(path: str | os.PathLike) -> bool:
    """slime names evaluation dumps with ``eval_`` before the id (``eval_3.pt``, ``rollout_eval_3.pt``)."""
    return bool(_EVAL_NAME.search(Path(path).stem))


_DUMP_ID = re.compile(r"^(\d+)(?:_\d+)?$")


def step_of_dump(path: Path) -> str:
    """The step a dump file belongs to, by its name: ``<id>.pt`` (rollout) and ``<id>_<rank>.pt`` (train) share
    ``<id>``; any other name is a step of its own."""
    match = _DUMP_ID.match(path.stem)
    return match.group(1) if match else str(path)


def detect(path: Path) -> bool:
    """A torch.save zip, or a ``.pt`` file (so that a damaged one gets the slime reader's precise error)."""
    return path.suffix in SUFFIXES or is_torch_zip(path)


def expand_directory(directory: Path) -> list[Path] | None:
    """The dumps of a slime directory (any order; the caller sorts them), or None when it holds none.

    A ``--dump-details D`` directory gives ``D/rollout_data/*.pt`` and
    ``D/train_data/*.pt`` (the rest of D is tokenizer files, dashboards, ...).
    Any other directory gives its own ``.pt`` files. Eval dumps beside
    training dumps are left out with a warning: their steps would collide.
    """
    folders = [directory / "rollout_data", directory / "train_data"]
    if not any(folder.is_dir() for folder in folders):
        folders = [directory]
    files = [
        path
        for folder in folders
        if folder.is_dir()
        for path in folder.iterdir()
        if path.suffix in SUFFIXES and path.is_file() and not path.name.startswith(".")
    ]
    if not files:
        return None
    evals = [path for path in files if is_eval_dump(path)]
    if evals and len(evals) < len(files):
        warn(
            f"{directory}: left out {len(evals)} eval dumps (eval_<id>.pt) beside the training dumps; "
            "load them on their own to audit evaluation",
            RollauditWarning,
        )
        files = [path for path in files if not is_eval_dump(path)]
    return files


# ---------------------------------------------------------------------------------------------------------------------
# One file.


@dataclass
class RolloutStep:
    """A rollout dump reduced to its canonical table."""

    path: Path
    step: int
    split: str
    table: pa.Table
    reward_keys: str | None = None
    """The keys of its dict rewards, where no --reward-key picked one (the table holds each key's values)."""

    @cached_property
    def index(self) -> list[int | None]:
        """Each sample's ``index``, by position (what a train sample's ``sample_index`` must equal)."""
        return self.table.column("index").to_pylist()


@dataclass
class TrainStep:
    """A train dump reduced to its join keys and recorded advantages."""

    path: Path
    step: int
    sample_index: list[int | None] = field(default_factory=list)
    rollout_position: list[int | None] = field(default_factory=list)
    advantage: list[float] = field(default_factory=list)
    raw_reward: list[float] | None = None


# Per-token lists of a sample that no reader here looks at: never built (they are most of a dump's bytes).
# A train dump's loss_masks and advantages are read (their tokens agree with the scalar?), and so is raw_reward.
PER_TOKEN_FIELDS = frozenset(
    {
        "tokens", "loss_mask", "rollout_log_probs", "teacher_log_probs", "rollout_top_p_token_ids",
        "rollout_top_p_token_offsets", "log_probs", "ref_log_probs", "values", "returns", "kl",
        "rollout_routed_experts", "multimodal_inputs", "multimodal_train_inputs",
    }
)  # fmt: skip


def read_dump(path: Path, options: LoadOptions) -> RolloutStep | TrainStep:
    """Read one slime dump: a rollout dump or a train dump, told apart by content."""
    skip = PER_TOKEN_FIELDS - {options.reward_key}  # a reward dict may name its reward like a per-token field
    with TorchArchive(path) as archive:
        top = archive.unpickle(lazy_tensors=True, skip=skip)
        if type(top) is not dict:
            raise InputError(f"the pickle holds a {fields.type_name(top)}", file=str(path), expected=fields.LAYOUT)
        if "format_version" in top or "rollout_data" in top:
            return _train_step(path, top)
        return rollout_step(path, top, options)


def rollout_step(path: Path, top: dict, options: LoadOptions) -> RolloutStep:
    step = fields.step_of(top, path)
    samples = fields.samples_of(top, path)
    group_index, index, trajectory, rewards, status, response_length, remove_sample = [], [], [], [], [], [], []
    non_finite = []
    open_rewards: dict[int, dict] = {}  # dict rewards no --reward-key picks a key of: the train dump may tell
    for position, sample in enumerate(samples):
        group_index.append(fields.optional_int(sample, "group_index", path, position))
        own_index = fields.optional_int(sample, "index", path, position)
        index.append(own_index)
        rollout_id = fields.optional_int(sample, "rollout_id", path, position)
        trajectory.append(own_index if rollout_id is None else rollout_id)
        reward: float | None = None  # None: no reward read, none to report (chosen in combine, or left open)
        if options.reward_key is None and type(sample.get("reward")) is dict:
            open_rewards[position] = sample["reward"]
        else:
            reward = fields.reward_of(sample, options.reward_key, path, position)
        if reward is None:  # a reward dict whose key is left open (inspect): no reward read, none to report
            reward = math.nan
        elif not math.isfinite(reward):
            non_finite.append(position)
        rewards.append(reward)
        # An enum from an old slime arrives as a placeholder: no status.
        status.append(fields.text_of(sample.get("status")))
        response_length.append(fields.optional_int(sample, "response_length", path, position))
        removed = sample.get("remove_sample")
        remove_sample.append(bool(removed) if type(removed) in (bool, int) else None)
    prompts = fields.prompt_keys(group_index, options.n_samples_per_prompt, path)
    fields.warn_non_finite(path, non_finite)
    split = "eval" if is_eval_dump(path) else "train"
    count = len(samples)
    table = make_table(
        reward=pa.array(rewards, pa.float64()),
        prompt=pa.array(prompts, pa.int64()),
        trajectory=pa.array(trajectory, pa.int64()),
        step=pa.array([step] * count, pa.int64()),
        position=pa.array(range(count), pa.int64()),
        status=pa.array(status, pa.string()),
        response_length=pa.array(response_length, pa.int64()),
        index=pa.array(index, pa.int64()),
        remove_sample=pa.array(remove_sample, pa.bool_()),
        split=pa.array([split] * count, pa.string()),
    )
    reward_keys = None
    if open_rewards:
        reward_keys = fields.key_list(next(iter(open_rewards.values())))
        for key, values in fields.reward_candidates(open_rewards, rewards).items():
            table = table.append_column(fields.REWARD_CANDIDATE + key, pa.array(values, pa.float64()))
    return RolloutStep(path=path, step=step, split=split, table=table, reward_keys=reward_keys)


class ElementBudget:
    """How many per-token values a file's readers may turn into arrays: about one per byte of the file. Honest
    values each cost their own bytes (two at least); values shared through the pickle's memo (one list or storage
    named by every sample) would cost nothing in the file and gigabytes in memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.left = path.stat().st_size + (1 << 20)

    def charge(self, elements: int, field: str) -> None:
        self.left -= elements
        if self.left < 0:
            raise InputError(
                "per-token values add up to more than the file holds (values shared across samples?)",
                file=str(self.path),
                field=field,
                expected="each sample's own values",
            )


def _as_array(value: Any, budget: ElementBudget, field: str) -> Any:
    """Per-token values as a flat numpy array (tensors read from the zip now), or None when not numbers; every
    element charged to ``budget`` before it is allocated."""
    import numpy as np

    if isinstance(value, StoredTensor):
        budget.charge(value.numel, field)
        if value.dtype == "bfloat16":
            return value.torch().float().numpy()
        return value.numpy()
    if isinstance(value, (list, tuple)):
        if value and isinstance(value[0], (list, tuple)):
            return None  # per-token values are one list of numbers, never nested
        budget.charge(len(value), field)
        try:
            return np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):  # not numbers, ragged or too deep, an int past float
            return None
    return None


VARIES, DIFFERS = "varies", "differs"


def compare_tokens(advantages: Any, loss_masks: Any, advantage: float, budget: ElementBudget) -> str | None:
    """Check a sample's per-token advantages against its scalar: None when they agree."""
    if not math.isfinite(advantage):
        return None
    values = _as_array(advantages, budget, "advantages")
    if values is None:
        return None
    values = values.reshape(-1)
    masks = _as_array(loss_masks, budget, "loss_masks")
    if masks is not None and masks.size == values.size:
        values = values[masks.reshape(-1) != 0]
    if values.size == 0:
        return None
    low, high = float(values.min()), float(values.max())
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    tolerance = ADVANTAGE_TOLERANCE * max(1.0, abs(advantage))
    if high - low > tolerance:
        return VARIES
    if abs(low - advantage) > tolerance:
        return DIFFERS
    return None


def _train_step(path: Path, top: dict) -> TrainStep:
    if "samples" not in top and "rollout_data" in top:
        raise InputError(
            "a train dump of slime's first layout (rollout_data, no samples)",
            file=str(path),
            expected=f"format_version {TRAIN_DUMP_VERSION} (current --save-debug-train-data)",
        )
    version = top.get("format_version")
    if version != TRAIN_DUMP_VERSION or type(version) is not int:
        raise InputError(
            f"train dump format_version is {fields.type_name(version) if type(version) is not int else version}",
            file=str(path),
            field="format_version",
            expected=str(TRAIN_DUMP_VERSION),
        )
    train = TrainStep(path=path, step=fields.step_of(top, path))
    verdicts = {VARIES: 0, DIFFERS: 0}
    budget = ElementBudget(path)
    for position, sample in enumerate(fields.samples_of(top, path)):
        sample_index = fields.optional_int(sample, "sample_index", path, position)
        rollout_position = fields.optional_int(sample, "rollout_position", path, position)
        if sample_index is None and rollout_position is None:
            raise InputError(
                "train sample has neither sample_index nor rollout_position",
                file=str(path),
                field="sample_index",
                row=position,
                expected="the key that joins it to the rollout dump",
            )
        if "rewards" not in sample:
            raise InputError(
                "train sample has no rewards",
                file=str(path),
                field="rewards",
                row=position,
                expected="the normalized reward the trainer used",
            )
        advantage = fields.number_of(sample["rewards"])
        if advantage is None:
            raise InputError(
                f"rewards is a {fields.type_name(sample['rewards'])}",
                file=str(path),
                field="rewards",
                row=position,
                expected="a float (the normalized reward)",
            )
        verdict = compare_tokens(sample.get("advantages"), sample.get("loss_masks"), advantage, budget)
        if verdict is not None:
            verdicts[verdict] += 1
        train.sample_index.append(sample_index)
        train.rollout_position.append(rollout_position)
        train.advantage.append(advantage)
    raw = top.get("raw_reward")
    if isinstance(raw, (list, tuple)):
        numbers = [fields.number_of(value) for value in raw]
        known = [number for number in numbers if number is not None]
        train.raw_reward = known if len(known) == len(numbers) else None
    warn_token_verdicts(path, verdicts)
    return train


def warn_token_verdicts(path: Path, verdicts: dict[str, int]) -> None:
    if verdicts[VARIES]:
        warn(
            f"{path}: recorded advantages vary within a sample: not an outcome scheme (KL in reward or GAE) "
            f"({verdicts[VARIES]} samples); recorded_advantage carries the normalized reward 'rewards'",
            RollauditWarning,
        )
    if verdicts[DIFFERS]:
        warn(
            f"{path}: per-token advantages differ from the normalized reward 'rewards' on {verdicts[DIFFERS]} "
            "samples (advantages whitened after normalization?); recorded_advantage carries 'rewards'",
            RollauditWarning,
        )


# ---------------------------------------------------------------------------------------------------------------------
# Several files: one table per step, train dumps joined to their rollout dumps.


def expected_rollout_path(train_path: Path, step: int) -> str:
    if train_path.parent.name == "train_data":
        return str(train_path.parent.parent / "rollout_data" / f"{step}.pt")
    return f"the rollout dump of step {step} (--save-debug-rollout-data)"


def _join(rollout: RolloutStep, trains: list[TrainStep]) -> pa.Table:
    table = rollout.table
    rows = table.num_rows
    row_of_index: dict[int, int] = {}
    repeated: set[int] = set()
    for row, value in enumerate(rollout.index):
        if value is not None:
            if value in row_of_index:
                repeated.add(value)
            row_of_index[value] = row
    recorded: list[float | None] = [None] * rows
    for train in trains:
        for position, (sample_index, rollout_position, advantage) in enumerate(
            zip(train.sample_index, train.rollout_position, train.advantage, strict=True)
        ):
            row = _join_row(train, position, sample_index, rollout_position, row_of_index, repeated, rows, rollout)
            if recorded[row] is not None:
                raise InputError(
                    f"two train samples join rollout sample {row} of {rollout.path}",
                    file=str(train.path),
                    row=position,
                    expected="each rollout sample trained at most once per step",
                )
            recorded[row] = advantage
        check_raw_rewards(train, table)
    return table.set_column(
        table.column_names.index(RECORDED_ADVANTAGE), RECORDED_ADVANTAGE, pa.array(recorded, pa.float64())
    )


def _join_row(
    train: TrainStep,
    position: int,
    sample_index: int | None,
    rollout_position: int | None,
    row_of_index: dict[int, int],
    repeated: set[int],
    rows: int,
    rollout: RolloutStep,
) -> int:
    """The rollout row a train sample joins: its ``rollout_position`` (checked against ``sample_index``, which must
    be the rollout sample's ``index`` there), else its ``sample_index`` when that index is unique in the rollout
    dump (agent fan-out siblings share one ``index``, so it is no key there)."""
    if rollout_position is not None:
        if not 0 <= rollout_position < rows:
            raise InputError(
                f"rollout_position {rollout_position} is outside the {rows} samples of {rollout.path}",
                file=str(train.path),
                row=position,
                expected="train and rollout dumps of the same run and step",
            )
        if sample_index is not None:
            index = rollout.index[rollout_position]
            if index != sample_index:
                raise InputError(
                    f"sample_index {sample_index} is not the index ({index}) of the rollout sample at "
                    f"rollout_position {rollout_position} of {rollout.path}",
                    file=str(train.path),
                    row=position,
                    expected="train and rollout dumps of the same run and step",
                )
        return rollout_position
    assert sample_index is not None  # _train_step refuses a sample with neither
    if sample_index in repeated:
        raise InputError(
            f"sample_index {sample_index} is the index of several samples of {rollout.path} "
            "(agent fan-out siblings share one index) and the train sample has no rollout_position to join on",
            file=str(train.path),
            row=position,
            expected="train dumps with rollout_position (slime's current --save-debug-train-data)",
        )
    row = row_of_index.get(sample_index)
    if row is None:
        raise InputError(
            f"sample_index {sample_index} is the index of no sample of {rollout.path}",
            file=str(train.path),
            row=position,
            expected="train and rollout dumps of the same run and step",
        )
    return row


def check_raw_rewards(train: TrainStep, table: pa.Table) -> None:
    """raw_reward covers the whole rollout batch: a mismatch usually means the wrong reward_key."""
    raw = train.raw_reward
    if raw is None or len(raw) != table.num_rows:
        return
    rewards = table.column(REWARD).to_pylist()
    differ = sum(
        1
        for ours, theirs in zip(rewards, raw, strict=True)
        if math.isfinite(ours) and math.isfinite(theirs) and not fields.same_reward(ours, theirs)
    )
    if differ:
        warn(
            f"{train.path}: raw_reward differs from the rollout dump's rewards on {differ} samples "
            "(a different --reward-key, or rewards changed after the rollout?)",
            RollauditWarning,
        )


def check_one_kind(rollouts: list[RolloutStep]) -> None:
    splits = {rollout.split: rollout.path for rollout in rollouts}
    if len(splits) > 1:
        raise InputError(
            f"the load mixes training dumps ({splits['train']}) and eval dumps ({splits['eval']}), "
            "whose steps would collide",
            expected="one kind per load: the eval_<id>.pt files on their own",
        )
    seen: dict[int, Path] = {}
    for rollout in rollouts:
        if rollout.step in seen:
            raise InputError(
                f"two rollout dumps of step {rollout.step}: {seen[rollout.step]} and {rollout.path}",
                expected="one rollout dump per step",
            )
        seen[rollout.step] = rollout.path


# A reduced file's table says what it is in its schema metadata (kept by Parquet, so by the cache).
_KIND, _STEP, _SPLIT, _RAW_REWARD, _REWARD_KEYS = (
    b"rollaudit.slime." + name for name in (b"kind", b"step", b"split", b"raw_reward", b"reward_keys")
)
_SAMPLE_INDEX, _ROLLOUT_POSITION = "sample_index", "rollout_position"


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One dump to a table that outlives it: a rollout dump's canonical table, or a train dump's ``sample_index``,
    ``rollout_position`` and ``recorded_advantage`` columns (``raw_reward`` in the metadata)."""
    part = read_dump(path, options)
    if isinstance(part, RolloutStep):
        metadata = {_KIND: b"rollout", _STEP: str(part.step).encode(), _SPLIT: part.split.encode()}
        if part.reward_keys is not None:
            metadata[_REWARD_KEYS] = part.reward_keys.encode()
        return part.table.replace_schema_metadata(metadata)
    table = pa.table(
        {
            _SAMPLE_INDEX: pa.array(part.sample_index, pa.int64()),
            _ROLLOUT_POSITION: pa.array(part.rollout_position, pa.int64()),
            RECORDED_ADVANTAGE: pa.array(part.advantage, pa.float64()),
        }
    )
    metadata = {_KIND: b"train", _STEP: str(part.step).encode(), _RAW_REWARD: json.dumps(part.raw_reward).encode()}
    return table.replace_schema_metadata(metadata)


def _from_reduced(path: Path, table: pa.Table) -> RolloutStep | TrainStep:
    metadata = table.schema.metadata or {}
    step = int(metadata[_STEP])
    if metadata[_KIND] == b"rollout":
        split = metadata[_SPLIT].decode()
        keys = metadata[_REWARD_KEYS].decode() if _REWARD_KEYS in metadata else None
        return RolloutStep(path=path, step=step, split=split, table=table.replace_schema_metadata(), reward_keys=keys)
    return TrainStep(
        path=path,
        step=step,
        sample_index=table.column(_SAMPLE_INDEX).to_pylist(),
        rollout_position=table.column(_ROLLOUT_POSITION).to_pylist(),
        advantage=table.column(RECORDED_ADVANTAGE).to_pylist(),
        raw_reward=json.loads(metadata[_RAW_REWARD]),
    )


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The reduced tables of slime dumps (any order) to one canonical table per step, train dumps joined."""
    rollouts: list[RolloutStep] = []
    trains: dict[int, list[TrainStep]] = {}
    for path, table in zip(paths, reduced, strict=True):
        part = _from_reduced(path, table)
        if isinstance(part, TrainStep):
            trains.setdefault(part.step, []).append(part)
        else:
            rollouts.append(part)
    check_one_kind(rollouts)
    by_step = {rollout.step: rollout for rollout in rollouts if rollout.split == "train"}
    for step, parts in trains.items():
        if step not in by_step:
            raise InputError(
                f"train dump of step {step} has no rollout dump of the same step: "
                f"missing {expected_rollout_path(parts[0].path, step)}",
                file=str(parts[0].path),
                expected="the rollout dump of every train dump's step (train dumps hold no prompt keys)",
            )
    chosen: dict[str, int] = {}
    for number, rollout in enumerate(rollouts):
        if rollout.reward_keys is not None:
            key, rollouts[number] = verified_reward_key(rollout, trains.get(rollout.step, []))
            if key is not None:
                chosen.setdefault(key, rollout.step)
    if len(chosen) > 1:
        steps = ", ".join(f"{key!r} on step {step}" for key, step in chosen.items())
        raise ChoiceNeeded(
            f"the train dumps' raw_reward verifies different reward keys: {steps}",
            expected="--reward-key naming the key slime trained on (slime's own --reward-key)",
        )
    notes = [
        f"reward = reward[{key!r}] (no --reward-key given): on step {step} the train dump's raw_reward equals that "
        "key's values, and no other key's"
        for key, step in chosen.items()
    ]
    joined = [
        _join(rollout, trains[rollout.step]) if rollout.split == "train" and rollout.step in trains else rollout.table
        for rollout in rollouts
    ]
    label = "slime (prompt = group_index, trajectory = rollout_id, else index)"
    return [
        with_trained_default(with_found(table, {label: found_counts(table)}, notes), None, DEFAULT_WHY)
        for table in joined
    ]


def verified_reward_key(rollout: RolloutStep, trains: list[TrainStep]) -> tuple[str | None, RolloutStep]:
    """A rollout dump whose rewards are dicts, with no --reward-key: the key whose values equal the raw_reward its
    train dump holds (the scalar slime trained on), and the step with that key's values as its reward. Never a
    guess: where no train dump holds raw_reward, or none or several keys equal it, ChoiceNeeded names the keys
    (``rollaudit inspect`` leaves the choice open and reads on with no reward)."""
    table = rollout.table
    columns = [name for name in table.column_names if name.startswith(fields.REWARD_CANDIDATE)]
    raws = [train.raw_reward for train in trains if train.raw_reward is not None]
    raws = [raw for raw in raws if len(raw) == table.num_rows]
    matching = [
        name
        for name in columns
        if raws and all(fields.same_rewards(table.column(name).to_pylist(), raw) for raw in raws)
    ]
    rest = table.drop_columns(columns)
    if len(matching) == 1:
        key = matching[0].removeprefix(fields.REWARD_CANDIDATE)
        reward = rest.set_column(rest.column_names.index(REWARD), REWARD, table.column(matching[0]))
        return key, dataclasses.replace(rollout, table=reward, reward_keys=None)
    if not raws:
        why = "no train dump of its step holds the raw_reward that would say which"
    elif not matching:
        why = "its train dump's raw_reward equals none of them"
    else:
        why = "its train dump's raw_reward equals several of them: " + ", ".join(
            repr(name.removeprefix(fields.REWARD_CANDIDATE)) for name in matching
        )
    keys = rollout.reward_keys or "none"
    if leave_open("reward", "a dict with keys {}", "--reward-key KEY", keys.split(", ")):
        return None, dataclasses.replace(rollout, table=rest)
    raise ChoiceNeeded(
        f"reward is a dict with keys {keys}, and {why}",
        file=str(rollout.path),
        field="reward",
        expected="--reward-key naming the key slime trained on (slime's own --reward-key)",
    )


def _pair_sizes(table: pa.Table) -> Any:
    """How many rows each distinct (prompt, trajectory) pair has, a null prompt a key of its own."""
    import numpy as np

    if not table.num_rows:
        return np.zeros(0, dtype=np.int64)
    return np.unique(group_codes(table, (PROMPT, TRAJECTORY)), return_counts=True)[1]


def found_counts(table: pa.Table) -> dict[str, int]:
    """A step in slime's words: prompts, trajectories (fan-out siblings share ``rollout_id``), aborted samples,
    and, with a train dump, the samples it trained and those its schedule dropped."""
    keyed = table.filter(pc.is_valid(table.column(PROMPT)))
    own = table.num_rows - table.column(TRAJECTORY).null_count  # samples with a trajectory key
    sizes = _pair_sizes(table.filter(pc.is_valid(table.column(TRAJECTORY))))
    fanned = int((sizes > 1).sum())
    removed = table.column("remove_sample")
    recorded = table.column(RECORDED_ADVANTAGE)
    found = {
        "prompts": len(pc.unique(keyed.column(PROMPT))) if keyed.num_rows else 0,
        "trajectories": len(sizes) + (table.num_rows - own),
        "fan-out trajectories (several samples)": fanned,
        "samples": table.num_rows,
        "aborted samples (remove_sample)": int(pc.sum(pc.fill_null(removed, False)).as_py() or 0),
    }
    if recorded.null_count < len(recorded):
        found["trained samples (train dump)"] = len(recorded) - recorded.null_count
        found["samples the train schedule dropped"] = recorded.null_count
    return found


LOADER = Format(
    name="slime",
    description="torch.save .pt zips of rollout and train dumps",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    options=frozenset({"reward_key", "n_samples_per_prompt"}),
    reads="slime's own sample keys (prompt = group_index, trajectory = rollout_id, else index; reward = reward, "
    "or reward[KEY] with --reward-key KEY, else the key its train dump's raw_reward verifies)",
    prompt="group_index",
    framework_groups="slime main: consecutive slices of n_samples_per_prompt samples, or the whole batch where "
    "the count is not n x B (the slime-legacy preset); PRs #2204 and #2062 group by group_index",
    trajectory="rollout_id, else index",
    reward="reward, or reward[KEY]: --reward-key KEY, else the one key the train dump's raw_reward verifies",
    advantage="advantages (train dumps)",
    trained_with=((None, DEFAULT_WHY),),
    step_of=step_of_dump,
)
