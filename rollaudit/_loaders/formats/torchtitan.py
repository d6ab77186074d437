"""torchtitan's RL rollout dump (``rollout_samples.jsonl``) to the canonical table.

torchtitan's RL loop (``torchtitan/experiments/rl``, b5bcd76) records rollouts by default: its
``RolloutSampleRecorder`` appends one JSON object per recorded rollout to ``{dump_folder}/rollout_samples.jsonl``
(``outputs/rl`` by default), for the whole run and for any later run with the same dump folder. A line holds
``is_validation``, ``group_id``, ``rollout_id``, ``status``, ``reward``, ``reward_breakdown``, the recorded
``advantage`` and the ``turns`` (each with ``min_policy_version`` / ``max_policy_version``; ``completion_token_ids``
only with ``log_tensors``). No step, group size, filter or estimator setting is written.

What the recorder writes of a group is its filter's pick: ``KeepExtremeRewardsFilter`` (k=1 by default) keeps the
lowest- and the highest-reward sibling, in ascending reward order, and a group of at most 2k rollouts whole; the
recorded advantage was computed over every sibling before that. The rows of one group are one ``record`` call,
so they are consecutive:

* prompt group = a run of consecutive training lines with the same ``group_id`` inside one segment (a run also
  ends where the rewards fall or a ``rollout_id`` comes back: a second call for the same id). Key
  ``"{segment}:{group_id}"``. Trajectory = (group, ``rollout_id``): ``"{segment}:{group_id}/{rollout_id}"``.
* segment = one process's lifetime in the file: a resumed or restarted run appends and restarts ``group_id`` at 0.
  A segment starts at the first training line after a validation pass that follows training lines (each process
  validates before training) and at a group whose id its segment already holds (each process records a group
  once); groups are never merged across segments.
* validation lines (greedy singletons, ``group_id`` -1..-V at every pass) are left out, counted in a note.
* step = 1 + the largest ``max_policy_version`` of the group's dumped turns: the earliest step that can have
  trained it (a group sampled under version v trains from step v + 1 to v + 1 + max_offpolicy_steps, or never),
  a bound said in a note; a group without turns takes its segment's previous group's bound. Where no turn in the
  file carries a version, nothing bounds the step: every segment is one step and the table says ``no_step``.
  A segment whose bounds reach back into an earlier one's is moved after it (a note says by how much).
* ``not_trained``: groups the dump shows torchtitan's builder dropped: a dumped sibling without completion tokens
  (no turn, or empty ``completion_token_ids`` where logged), and groups whose dumped rewards are all equal
  (``drop_zero_std_reward_groups``, on by default; the filter keeps both extremes, so equal kept rewards mean a
  constant group).

Writers before 2026-06-25 (966983a7) wrote ``step`` first, a string ``group_id`` (``"step=1/group=0"``),
``sample_id`` (``"step=1/group=0/sample=7"``) for ``rollout_id`` and one ``policy_version`` per turn; validation lines
had ``advantage: null``, and so had the groups their builder dropped (a sibling without completion tokens). They
are read with ``step`` as the step; a step that goes back starts a segment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError
from ..._table import (
    NOT_TRAINED,
    STEP,
    make_table,
    with_facts,
    with_found,
    with_trained_default,
)
from ..arrow import columns, json_lines, tables
from ..base import Format
from ..config import RunConfig, Setting

if TYPE_CHECKING:
    from ..options import LoadOptions

FILE_NAME = "rollout_samples.jsonl"
_DEFAULT_FOLDER = ("outputs", "rl")
# Policy versions count optimizer steps: beyond this one they are no step (and past float64's exact integers).
_MOST_VERSIONS = 1 << 40
_TURN_FIELDS = [pa.field("completion_token_ids", pa.list_(pa.int64()))]
_CURRENT = pa.schema(
    [
        pa.field("is_validation", pa.bool_()),
        pa.field("group_id", pa.int64()),
        pa.field("rollout_id", pa.int64()),
        pa.field("status", pa.string()),
        pa.field("reward", pa.float64()),
        pa.field("advantage", pa.float64()),
        pa.field(
            "turns",
            pa.list_(
                pa.struct(
                    [
                        pa.field("min_policy_version", pa.int64()),
                        pa.field("max_policy_version", pa.int64()),
                        *_TURN_FIELDS,
                    ]
                )
            ),
        ),
    ]
)
_OLDER = pa.schema(
    [
        pa.field("step", pa.int64()),
        pa.field("is_validation", pa.bool_()),
        pa.field("group_id", pa.string()),
        pa.field("sample_id", pa.string()),
        pa.field("status", pa.string()),
        pa.field("reward", pa.float64()),
        pa.field("advantage", pa.float64()),
        pa.field("turns", pa.list_(pa.struct([pa.field("policy_version", pa.int64()), *_TURN_FIELDS]))),
    ]
)
LABEL = "torchtitan (prompt = a run of one group_id in a segment, trajectory = (group, rollout_id))"
UNTRAINABLE = "a sibling without completion tokens (untrainable group)"
ZERO_STD = "all rewards equal (drop_zero_std_reward_groups)"
NO_ADVANTAGE = "no advantage recorded (untrainable group)"
DEFAULT = (
    "torchtitan-drgrpo",
    "torchtitan's default AdvantageEstimator (should_std_normalize=False, Dr.GRPO: the reward minus the mean over "
    "every sibling, float64); the dump records the advantages, which outrank it",
)
PARTIAL_WHY = (
    "torchtitan's recorder writes only its filter's pick of each group (KeepExtremeRewardsFilter: the k lowest- "
    "and k highest-reward siblings, k=1 by default); the recorded advantages cover the whole group"
)
NO_STEP = "the dump has no step field and no policy version (no group has a recorded turn)"
STEP_BOUND = (
    "the dump has no step field: the turns' policy versions bound a group's step from below only, so the batch a "
    "group trained in is not known"
)
CANNOT_AUDIT = (
    "the group size and the recorder filter's k: KeepExtremeRewardsFilter (k=1 by default) writes each group's "
    "lowest- and highest-reward siblings, while the recorded advantages cover every sibling",
    "the step that trained a group, or whether it was trained: its policy versions bound the step from below "
    "only, and groups still queued when the run stopped look trained",
    "an untrainable group whose sibling without completion tokens was not dumped, and empty completions where "
    "completion_token_ids are not logged (log_tensors off)",
    "whether drop_zero_std_reward_groups was on (assumed: its default) and which estimator option ran, other "
    "than from the recorded values or a config named with --config",
)


def detect(path: Path) -> bool:
    """A JSON Lines file whose first line is a torchtitan rollout record, whatever its name."""
    first = tables.first_json_object(path)
    return (
        first is not None
        and isinstance(first.get("is_validation"), bool)
        and isinstance(first.get("turns"), list)
        and all(key in first for key in ("group_id", "status", "reward", "advantage"))
        and ("rollout_id" in first or "sample_id" in first)
    )


def expand_directory(directory: Path) -> list[Path] | None:
    """``rollout_samples.jsonl`` of a dump folder, or of the default ``outputs/rl`` below a run's working
    directory (a recorder configured with another file name: name the file)."""
    for folder in (directory, directory.joinpath(*_DEFAULT_FOLDER)):
        path = folder / FILE_NAME
        if path.is_file() and detect(path):
            return [path]
    return None


def _required(values: pa.Array, path: Path, field: str, expected: str) -> pa.Array:
    if values.null_count:
        row = int(pc.index(pc.is_null(values), True).as_py())
        raise InputError("is missing", file=str(path), field=field, row=row, expected=expected)
    return values


def _numpy(values: pa.Array) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False))


def _turn_summary(turns: pa.Array, older: bool, rows: int, path: Path) -> dict[str, np.ndarray]:
    """Per row: its turns, the oldest and newest policy version they were decoded under (NaN without one), its
    completion tokens (NaN where not logged) and whether it has any completion token (a turn, and a non-empty
    completion where logged)."""
    counts = pc.list_value_length(turns).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(turns)
    owner = np.repeat(np.arange(rows), counts)

    def per_row(name: str, reduce: Any, start: float) -> np.ndarray:
        values = pc.struct_field(flat, name).to_numpy(zero_copy_only=False).astype(np.float64)
        held = ~np.isnan(values)
        wrong = held & ~((values >= 0) & (values < _MOST_VERSIONS))
        if wrong.any():
            raise InputError(
                f"is {values[wrong][0]:.0f}",
                file=str(path),
                field=f"turns[].{name}",
                row=int(owner[np.flatnonzero(wrong)[0]]),
                expected=f"a policy version from 0 to {_MOST_VERSIONS:,}",
            )
        out = np.full(rows, start)
        reduce.at(out, owner[held], values[held])
        return np.where(np.isinf(out), np.nan, out)

    oldest = per_row("policy_version" if older else "min_policy_version", np.minimum, np.inf)
    newest = per_row("policy_version" if older else "max_policy_version", np.maximum, -np.inf)
    completions = pc.struct_field(flat, "completion_token_ids")
    logged = completions.null_count < len(completions)
    tokens = np.full(rows, np.nan)
    has_tokens = counts > 0
    if logged:
        lengths = pc.list_value_length(completions).fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        tokens = np.bincount(owner, weights=lengths, minlength=rows)[:rows] if rows else tokens
        has_tokens &= tokens > 0
    return {"turns": counts, "oldest": oldest, "newest": newest, "tokens": tokens, "has_tokens": has_tokens}


def _run_starts(training: np.ndarray, group: np.ndarray, reward: np.ndarray, rollout: np.ndarray) -> np.ndarray:
    """Where each group instance starts: a training line that does not continue the run of the line before it
    (another group_id, a validation line between, falling rewards: the filter writes a group in ascending reward
    order), or that repeats a rollout_id of its run (one record call writes a rollout once)."""
    rows = len(training)
    follows = np.zeros(rows, dtype=bool)
    if rows > 1:
        with np.errstate(invalid="ignore"):
            follows[1:] = training[1:] & training[:-1] & (group[1:] == group[:-1]) & ~(reward[1:] < reward[:-1])
    starts = training & ~follows
    while True:
        run = np.where(training, np.cumsum(starts) - 1, -1)  # validation lines belong to no run
        order = np.lexsort((np.arange(rows), rollout, run))
        again = np.zeros(rows, dtype=bool)
        same = (run[order][1:] == run[order][:-1]) & (rollout[order][1:] == rollout[order][:-1])
        again[order[1:][same & (run[order][1:] >= 0)]] = True
        if not again.any():
            return starts
        # The first repeat of each run starts a new instance; later ones are looked at again after the split.
        _, firsts = np.unique(run[again], return_index=True)
        starts[np.flatnonzero(again)[firsts]] = True


def _segments(
    starts: np.ndarray, validation: np.ndarray, group: np.ndarray, step: np.ndarray | None, names: list[str] | None
) -> tuple[np.ndarray, list[str]]:
    """The segment of each group instance (``starts``: their first rows), and what began each segment after the
    first (``names``: the older layout's group ids, by code)."""
    segment = np.zeros(len(starts), dtype=np.int64)
    reasons: list[str] = []
    current, last_step = 0, None
    seen: set[int] = set()
    for index, row in enumerate(starts.tolist()):
        key = int(group[row])
        why = None
        if step is None and seen and row > 0 and validation[row - 1]:
            why = "a validation pass after training"
        elif key in seen:
            why = f"group_id {names[key] if names is not None else key} again"
        elif step is not None and last_step is not None and step[row] < last_step:
            why = f"step {int(step[row])} after step {last_step}"
        if why is not None:
            current += 1
            seen = set()
            reasons.append(why)
        seen.add(key)
        last_step = None if step is None else int(step[row])
        segment[index] = current
    return segment, reasons


def _validation_passes(validation: np.ndarray, group_id: np.ndarray, step: np.ndarray | None) -> int:
    """Validation passes: runs of validation lines, a pass starting again where the ids stop falling (-1, -2, ...)
    or, in the older layout, where the step changes."""
    if not validation.any():
        return 0
    rows = len(validation)
    new = validation.copy()
    if rows > 1:
        follows = validation[1:] & validation[:-1]
        if step is None:
            follows &= group_id[1:] < group_id[:-1]
        else:
            follows &= step[1:] == step[:-1]
        new[1:] &= ~follows
    return int(new.sum())


def _older_rollouts(group_text: pa.Array, sample: pa.Array, path: Path) -> np.ndarray:
    """The sibling index in each older ``sample_id`` (``{group_id}/sample={index}``); another shape is refused."""
    indices = np.zeros(len(sample), dtype=np.int64)
    for row, (text, group) in enumerate(zip(sample.to_pylist(), group_text.to_pylist(), strict=True)):
        head = f"{group}/sample="
        tail = text[len(head) :]
        if not (text.startswith(head) and tail.isascii() and tail.isdigit() and len(tail) < 10):
            raise InputError(
                f"is {text[:80]!r}, not its group_id followed by /sample=<index>",
                file=str(path),
                field="sample_id",
                row=row,
                expected="torchtitan's sample id, {group_id}/sample={index}",
            )
        indices[row] = int(tail)
    return indices


def _instance_values(instance: np.ndarray, count: int, values: np.ndarray, reduce: Any, start: float) -> np.ndarray:
    out = np.full(count, start)
    held = ~np.isnan(values)
    reduce.at(out, instance[held], values[held])
    return out


def _steps(instance_segment: np.ndarray, bound: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """Each group instance's step: its bound (older layout: its step), a group without one taking its segment's
    previous (else next) group's; segments moved after the ones before them where their steps reach back. With no
    bound anywhere, each segment is one step."""
    count = len(bound)
    facts: dict[str, Any] = {"unbounded": int(np.isnan(bound).sum()), "offsets": {}}
    if count == 0:
        return np.zeros(0, dtype=np.int64), facts
    if np.isnan(bound).all():
        facts["no_step"] = True
        return instance_segment.copy(), facts
    filled = bound.copy()
    for segment in np.unique(instance_segment):
        inside = np.flatnonzero(instance_segment == segment)
        values = filled[inside]
        known = ~np.isnan(values)
        if not known.any():
            continue
        # Forward fill, then the leading ones from the first known value of the segment.
        place = np.where(known, np.arange(len(values)), -1)
        np.maximum.accumulate(place, out=place)
        values = np.where(place >= 0, values[np.maximum(place, 0)], values[np.flatnonzero(known)[0]])
        filled[inside] = values
    steps = np.zeros(count, dtype=np.int64)
    highest: int | None = None
    for segment in np.unique(instance_segment):
        inside = instance_segment == segment
        values = filled[inside]
        if np.isnan(values).all():  # a segment none of whose groups has a turn: after the one before it
            values = np.full(len(values), (highest + 1) if highest is not None else 0, dtype=np.float64)
        offset = 0
        if highest is not None and values.min() <= highest:
            offset = int(highest - values.min() + 1)
            facts["offsets"][str(int(segment))] = offset
        steps[inside] = values.astype(np.int64) + offset
        highest = int(steps[inside].max())
    return steps, facts


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One ``rollout_samples.jsonl``: a row per training line with its group instance, segment, step and why it
    was not trained; what the file says beyond its rows (validation lines, segments) in the table's metadata."""
    tables.check_not_empty(path)
    first = tables.first_json_object(path)
    older = first is not None and ("sample_id" in first or "step" in first)
    table = json_lines.read_json_lines(path, _OLDER if older else _CURRENT)
    rows = table.num_rows

    def column(name: str, expected: str) -> pa.Array:
        return _required(columns.plain(table.column(name)), path, name, expected)

    validation = _numpy(column("is_validation", "true or false")).astype(bool)
    rewards = column("reward", "a number (torchtitan's recorder skips unscored rollouts)")
    reward = _numpy(rewards).astype(np.float64)
    summary = _turn_summary(column("turns", "a list of turns"), older, rows, path)
    training = ~validation
    step_field: np.ndarray | None = None
    if older:
        step_field = _numpy(column("step", "an integer step")).astype(np.int64)
        group_key = column("group_id", 'a group id ("step=N/group=K")')
        sample = column("sample_id", 'a sample id ("step=N/group=K/sample=I")')
        rollout = _older_rollouts(group_key, sample, path)
        encoded = pc.dictionary_encode(group_key)
        group = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names = encoded.dictionary.to_pylist()
        sibling: pa.Array = sample
    else:
        group_key = column("group_id", "an integer group id")
        group = _numpy(group_key).astype(np.int64)
        names = None
        sibling = column("rollout_id", "an integer sibling index")
        rollout = _numpy(sibling).astype(np.int64)
    starts = _run_starts(training, group, reward, rollout)
    start_rows = np.flatnonzero(starts)
    instance_segment, reasons = _segments(start_rows, validation, group, step_field, names)
    kept_rows = np.flatnonzero(training)
    instance = (np.cumsum(starts) - 1)[kept_rows]
    count = len(start_rows)
    # The step: older writers recorded it; else the bound from the newest policy version of the group's turns.
    if older:
        assert step_field is not None
        first_step = step_field[start_rows]
        if np.any(step_field[kept_rows] != first_step[instance]):
            row = int(kept_rows[np.flatnonzero(step_field[kept_rows] != first_step[instance])[0]])
            raise InputError(
                "differs from the step of its group's first line",
                file=str(path),
                field="step",
                row=row,
                expected="one step per group (one record call)",
            )
        bound = first_step.astype(np.float64)
    else:
        newest = _instance_values(instance, count, summary["newest"][kept_rows], np.maximum, -np.inf)
        bound = np.where(np.isinf(newest), np.nan, newest + 1)
    instance_step, step_facts = _steps(instance_segment, bound)
    # Why a group was not trained, as far as the dump shows it (the builder's order: untrainable first).
    size = np.bincount(instance, minlength=count)
    lacking = np.bincount(instance, weights=~summary["has_tokens"][kept_rows], minlength=count) > 0
    kept_reward = reward[kept_rows]
    low = _instance_values(instance, count, kept_reward, np.minimum, np.inf)
    high = _instance_values(instance, count, kept_reward, np.maximum, -np.inf)
    advantage = columns.plain(table.column("advantage"))
    unrecorded = np.bincount(instance, weights=_numpy(pc.is_null(advantage))[kept_rows], minlength=count) > 0
    reason = np.full(count, None, dtype=object)
    if older:
        reason[unrecorded] = NO_ADVANTAGE
    else:
        reason[(size > 1) & (low == high)] = ZERO_STD
        reason[unrecorded] = NO_ADVANTAGE
        reason[lacking] = UNTRAINABLE
    segment = instance_segment[instance]
    group_text = pc.cast(group_key, pa.string()).take(pa.array(kept_rows))
    prefix = pc.binary_join_element_wise(pa.array(segment.astype(str)), group_text, ":")
    rollout_text = pa.array(rollout[kept_rows].astype(str))
    tokens = summary["tokens"][kept_rows]
    canonical = make_table(
        reward=reward[kept_rows],
        prompt=prefix,
        trajectory=pc.binary_join_element_wise(prefix, rollout_text, "/"),
        step=instance_step[instance],
        status=columns.plain(table.column("status")).take(pa.array(kept_rows)),
        response_length=pa.array(tokens, pa.float64(), from_pandas=True).cast(pa.int64()),
        recorded_advantage=advantage.take(pa.array(kept_rows)),
        group_id=group_key.take(pa.array(kept_rows)),
        **{"sample_id" if older else "rollout_id": sibling.take(pa.array(kept_rows))},
        segment=pa.array(segment),
        line=pa.array(kept_rows.astype(np.int64)),
        n_turns=pa.array(summary["turns"][kept_rows]),
        min_policy_version=pa.array(summary["oldest"][kept_rows], from_pandas=True).cast(pa.int64()),
        max_policy_version=pa.array(summary["newest"][kept_rows], from_pandas=True).cast(pa.int64()),
        **{NOT_TRAINED: pa.array(reason[instance].tolist(), pa.string())},
    )
    sizes = np.unique(size) if count else np.zeros(0, dtype=np.int64)
    file_facts = {
        "older": older,
        "validation_lines": int(validation.sum()),
        "validation_passes": _validation_passes(validation, group, step_field),
        "segments": int(instance_segment.max()) + 1 if count else 0,
        "segment_reasons": reasons,
        "kept": int(sizes[0]) if len(sizes) == 1 else None,
        "tokens_logged": bool(not np.isnan(summary["tokens"]).all()) if rows else False,
        **step_facts,
    }
    import json

    return canonical.replace_schema_metadata({_FILE_FACTS: json.dumps(file_facts).encode()})


_FILE_FACTS = b"torchtitan.file"


def _notes(facts: dict[str, Any], constant_groups: int, config: RunConfig | None) -> list[str]:
    notes = []
    lines, passes = facts["validation_lines"], facts["validation_passes"]
    if lines:
        notes.append(
            f"{lines} validation line{'s' if lines != 1 else ''} ({passes} pass{'es' if passes != 1 else ''}: greedy "
            "singletons that are never trained) left out of the audit"
        )
    kept = facts["kept"]
    notes.append(
        "torchtitan's recorder writes only its filter's pick of each group (KeepExtremeRewardsFilter, k=1 by "
        "default: the lowest- and the highest-reward sibling); the recorded advantages were computed over every "
        "sibling before it, and the file names neither the group size nor k"
        + (f": the dump holds {kept} row{'s' if kept != 1 else ''} of every group" if kept is not None else "")
    )
    if facts.get("no_step"):
        notes.append(f"no step: {NO_STEP}; each segment is audited as one batch")
    elif facts["older"]:
        notes.append("step = the step field (the synchronous loop trained each step's groups at that step)")
    else:
        notes.append(
            "step = 1 + the newest max_policy_version of each group's dumped turns: the earliest step that can have "
            "trained it (torchtitan writes no step; a group sampled under policy version v trains at a step from "
            "v + 1 to v + 1 + max_offpolicy_steps, or never): a lower bound, so a step here gathers the groups of "
            "one bound, not a trained batch"
        )
    if facts["unbounded"] and not facts.get("no_step"):
        unbounded = facts["unbounded"]
        notes.append(
            f"{unbounded} group{'s' if unbounded != 1 else ''} without a recorded turn (no policy version) placed in "
            "the step of the group written before them in their segment"
        )
    segments = facts["segments"]
    if segments > 1:
        notes.append(
            f"the file holds {segments} segments (process lifetimes: a resumed or restarted run appends to the same "
            "file and restarts group_id at 0), each begun by "
            + "; ".join(facts["segment_reasons"])
            + "; prompt keys are segment:group_id and no group spans two segments"
        )
    for segment, offset in facts["offsets"].items():
        notes.append(
            f"segment {segment}'s steps reach back into an earlier segment's (a restart, or a resume from an earlier "
            f"checkpoint): moved {offset} step{'s' if offset != 1 else ''} later, so that no batch mixes two processes"
        )
    if constant_groups and not facts["older"] and config is not None and "drop_zero_std" in config:
        plural = "s" if constant_groups != 1 else ""
        notes.append(
            f"{config.cite('drop_zero_std')}: {constant_groups} group{plural} whose dumped rewards are all equal "
            + ("counted as not trained" if config.get("drop_zero_std") else "audited as trained")
        )
    elif constant_groups and not facts["older"]:
        notes.append(
            "drop_zero_std_reward_groups assumed on (its default since torchtitan's async loop; debug configs turn "
            f"it off): {constant_groups} group{'s' if constant_groups != 1 else ''} whose dumped rewards are all equal "
            "counted as not trained (the filter keeps each group's lowest and highest reward, so equal kept rewards "
            "mean a constant group)"
        )
    return notes


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """One run's file as one table per step, each carrying the run's counts, notes and facts."""
    import json

    if len(paths) > 1:
        raise InputError(
            f"{len(paths)} torchtitan dumps given together: each {FILE_NAME} holds a whole run (a resumed run appends "
            "to it), and runs are never merged",
            file=str(paths[0]),
            expected="one rollout_samples.jsonl",
        )
    table = reduced[0]
    facts = json.loads((table.schema.metadata or {}).get(_FILE_FACTS, b"{}"))
    table = table.replace_schema_metadata(None)
    config = options.run_config
    cleared = 0
    if config is not None and config.get("drop_zero_std") is False:
        # The run trained its constant groups: they are in every rate.
        constant = pc.fill_null(pc.equal(table.column(NOT_TRAINED), ZERO_STD), False)
        cleared = len(pc.unique(columns.plain(table.column("prompt")).filter(columns.plain(constant))))
        index = table.column_names.index(NOT_TRAINED)
        kept = pc.if_else(constant, pa.scalar(None, pa.string()), table.column(NOT_TRAINED))
        table = table.set_column(index, NOT_TRAINED, kept)
    if table.num_rows == 0:
        raise InputError(
            f"holds no training line ({facts.get('validation_lines', 0)} validation lines): no group to audit",
            file=str(paths[0]),
            expected="the rollouts of a training run",
        )
    # Counts per step, from one pass over the groups (each group lies in one step): its step, why not trained.
    prompt = pc.dictionary_encode(columns.plain(table.column("prompt"))).indices.to_numpy(zero_copy_only=False)
    reason_codes = pc.dictionary_encode(columns.plain(table.column(NOT_TRAINED)))
    reasons = reason_codes.dictionary.to_pylist()
    reason = reason_codes.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    _, first = np.unique(prompt, return_index=True)
    group_step = table.column(STEP).to_numpy()[first]
    group_reason = reason[first]
    dropped = int(np.sum(group_reason == reasons.index(ZERO_STD))) if ZERO_STD in reasons else 0
    notes = _notes(facts, cleared if config is not None and config.get("drop_zero_std") is False else dropped, config)
    # What every step carries alike, once on the whole table (its steps are slices of it).
    table = with_trained_default(
        with_facts(
            table,
            partial_groups={"why": PARTIAL_WHY, "kept": facts["kept"], "sibling": "rollout_id"},
            # A bound gathers the groups of one bound, not a trained batch: batch-wide schemes are as unknown.
            no_step=NO_STEP if facts.get("no_step") else STEP_BOUND if not facts["older"] else None,
        ),
        *trained_default(config),
    )
    steps = columns.split_steps(table, paths[0])
    # Groups per step and reason (-1: trained), counted in one pass.
    step_index = np.searchsorted(np.array([step for step, _ in steps]), group_step)
    by_reason = np.bincount(
        step_index * (len(reasons) + 1) + group_reason + 1, minlength=len(steps) * (len(reasons) + 1)
    ).reshape(len(steps), len(reasons) + 1)
    result = []
    for index, (_, piece) in enumerate(steps):
        found = {"training groups": int(by_reason[index].sum()), "training rows (a rollout each)": piece.num_rows}
        for code, why in enumerate(reasons):
            found[f"groups not trained: {why}"] = int(by_reason[index, code + 1])
        if index == 0:  # the file's own counts, once
            found["validation lines left out"] = facts["validation_lines"]
            found["segments (process lifetimes)"] = facts["segments"] if facts["segments"] > 1 else 0
        result.append(with_found(piece, {LABEL: found}, notes))
    return result


def trained_default(config: RunConfig | None) -> tuple[str, str, str | None]:
    """The run's estimator option from its config (should_std_normalize), else torchtitan's default."""
    if config is None or not any(name in config for name in ("std_normalize", "drop_zero_std")):
        return (*DEFAULT, None)
    scheme = "torchtitan-grpo" if config.get("std_normalize") else "torchtitan-drgrpo"
    option = "" if "std_normalize" in config else " (should_std_normalize not in it: its default, False)"
    return (
        scheme,
        f"torchtitan AdvantageEstimator with {config.cite('std_normalize', 'drop_zero_std')}{option}",
        config.source,
    )


def config_files(paths: list[Path]) -> list[Path]:
    """torchtitan's RL controller saves no config; with metrics.enable_wandb, W&B keeps one in the dump folder."""
    return [paths[0].parent / "wandb" / "latest-run" / "files" / "config.yaml"]


SETTINGS = (
    Setting(
        "drop_zero_std",
        (
            "async_loop.training_sample_builder.drop_zero_std_reward_groups",
            "training_sample_builder.drop_zero_std_reward_groups",
            "drop_zero_std_reward_groups",
        ),
        "bool",
    ),
    Setting(
        "std_normalize",
        ("rollouter.advantage.should_std_normalize", "advantage.should_std_normalize", "should_std_normalize"),
        "bool",
    ),
)


LOADER = Format(
    name="torchtitan",
    description=f"torchtitan RL {{dump_folder}}/{FILE_NAME} (a line per recorded rollout, appended for the run)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    reads="torchtitan's own keys (prompt = a run of one group_id in a segment, trajectory = (group, rollout_id), "
    "reward = reward, advantage = advantage)",
    prompt="group_id, a run of consecutive training lines within a segment (ids restart in a resumed run)",
    trajectory="(group, rollout_id)",
    reward="reward",
    advantage="advantage (over the whole group; the dump holds the filter's pick of its siblings)",
    trained_with=(DEFAULT,),
    cannot_audit=CANNOT_AUDIT,
    steps_appended=True,
    settings=SETTINGS,
    config_files=config_files,
    config_where="none saved by the RL controller: --config (TOML, YAML, JSON), or W&B's "
    "wandb/latest-run/files/config.yaml in the dump folder",
)
