"""What a loaded dump holds, without recomputing any advantage: counts, fields, rewards, identity coverage.

Arrow compute only (no torch), so ``rollaudit inspect`` stays quick on any dump.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from .._table import (
    CANONICAL_COLUMNS,
    PROMPT,
    RECORDED_ADVANTAGE,
    RESPONSE_LENGTH,
    REWARD,
    STATUS,
    STEP,
    TRAJECTORY,
    validate_table,
)
from .engine.chunks import few_chunks

if TYPE_CHECKING:
    from .._errors import OpenChoice

# More distinct reward values than this and the reward reads as continuous.
_DISCRETE_LIMIT = 10
# The keys counted with a group-by, which costs the most per chunk (see ``few_chunks``).
_KEY_COLUMNS = (STEP, PROMPT, TRAJECTORY)


def _distinct_rows(table: pa.Table, keys: list[str]) -> int:
    """Distinct combinations of ``keys`` (a null is a value of its own). The hash table's memory is given back as soon
    as they are counted (Arrow's pool would keep it, beside the sorted copy of the rewards that follows)."""
    if table.num_rows == 0:
        return 0
    distinct: int = table.group_by(keys, use_threads=False).aggregate([]).num_rows
    pa.default_memory_pool().release_unused()
    return distinct


def _distinct(values: pa.ChunkedArray) -> tuple[int, list[float]]:
    """How many distinct values (finite floats, no nulls) there are, and all of them in ascending order where there
    are at most ``_DISCRETE_LIMIT + 1``: counted on one sorted copy (8 bytes a value), where a hash of every value
    (``pc.unique``) holds several times that for continuous rewards."""
    import numpy as np

    ordered = values.to_numpy()  # one chunk's buffer, read-only; several chunks joined into a copy
    if ordered.flags.writeable:
        ordered.sort()
    else:
        ordered = np.sort(ordered)
    if not len(ordered):
        return 0, []
    changes = ordered[1:] != ordered[:-1]
    count = int(np.count_nonzero(changes)) + 1
    if count > _DISCRETE_LIMIT + 1:
        return count, []
    return count, ordered[np.r_[0, np.flatnonzero(changes) + 1]].tolist()


def _reward_summary(rewards: pa.ChunkedArray) -> dict[str, Any]:
    nonfinite = int(pc.sum(pc.invert(pc.is_finite(rewards))).as_py() or 0)
    values = rewards.filter(pc.is_finite(rewards)) if nonfinite else rewards
    summary: dict[str, Any] = {"kind": "none", "min": None, "mean": None, "max": None, "nonfinite": nonfinite}
    if len(values) == 0:
        summary["kind"] = "no finite reward" if len(rewards) else "none"
        return summary
    extremes = pc.min_max(values)
    summary.update(min=extremes["min"].as_py(), max=extremes["max"].as_py(), mean=pc.mean(values).as_py())
    count, first = _distinct(values)
    whole = all(float(value).is_integer() for value in first)
    if count == 1:
        summary["kind"] = "constant"
    elif count == 2 and set(first) == {0.0, 1.0}:
        summary["kind"] = "binary (0/1)"
    elif count <= _DISCRETE_LIMIT:
        values_text = ", ".join(f"{value:g}" for value in first)
        summary["kind"] = f"{'integer' if whole else 'discrete'} ({count} values: {values_text})"
    else:
        summary["kind"] = "continuous"
    summary["distinct"] = count
    return summary


def describe(table: pa.Table) -> dict[str, Any]:
    """A JSON-ready description of a canonical table.

    Keys: ``samples``; ``steps`` (``count``, ``values``, ``samples_per_step``);
    ``prompts`` (distinct (step, prompt) keys, keyless samples not counted);
    ``trajectories`` (distinct (step, prompt, trajectory), a sample without a
    trajectory key counted as its own; None when no sample has one: then
    nothing can be counted); ``identity`` (samples with a prompt
    key, with a trajectory key); ``reward`` (``kind``: binary, integer,
    discrete, continuous or constant; min, mean, max over finite rewards;
    ``nonfinite``); ``response_tokens`` (sum of known response lengths, or
    None); ``recorded_advantages`` (samples with one); ``status`` (value
    counts); ``fields`` (every column: name, Arrow type, non-null count,
    canonical or passed through).

    >>> import rollaudit
    >>> describe(rollaudit.make_table(reward=[1.0, 0.0, 1.0], prompt=[4, 4, None]))["identity"]
    {'samples': 3, 'with_prompt_key': 2, 'with_trajectory_key': 0}
    """
    table = few_chunks(validate_table(table), _KEY_COLUMNS)
    samples = table.num_rows
    steps = table.column(STEP)
    samples_per_step: dict[int, int] = {}
    if samples:
        # Sorted as arrays, then one dict: no Python object per step beyond the dict's own (a run may have as many
        # steps as samples).
        step_counts = pc.value_counts(steps)
        order = pc.sort_indices(step_counts.field("values"))
        values, counts = step_counts.field("values").take(order), step_counts.field("counts").take(order)
        samples_per_step = dict(zip(values.to_pylist(), counts.to_pylist(), strict=True))

    with_prompt = samples - table.column(PROMPT).null_count
    with_trajectory = samples - table.column(TRAJECTORY).null_count
    keyed = table.filter(pc.is_valid(table.column(PROMPT))) if with_prompt < samples else table
    prompts = _distinct_rows(keyed.select([STEP, PROMPT]), [STEP, PROMPT])
    has_trajectory = pc.is_valid(table.column(TRAJECTORY))
    trajectories = (
        None
        if samples and not with_trajectory
        else (samples - with_trajectory)
        + _distinct_rows(table.filter(has_trajectory).select([STEP, PROMPT, TRAJECTORY]), [STEP, PROMPT, TRAJECTORY])
    )

    lengths = table.column(RESPONSE_LENGTH)
    response_tokens = None if lengths.null_count == samples else int(pc.sum(lengths).as_py() or 0)
    status = table.column(STATUS)
    status_counts = (
        {}
        if status.null_count == samples
        else {
            str(item["values"]): int(item["counts"])
            for item in sorted(pc.value_counts(status.drop_null()).to_pylist(), key=lambda item: -item["counts"])
        }
    )
    fields = [
        {
            "name": name,
            "type": str(table.schema.field(name).type),
            "non_null": samples - table.column(name).null_count,
            "canonical": name in CANONICAL_COLUMNS,
        }
        for name in table.column_names
    ]
    reward = _reward_summary(table.column(REWARD))
    for key in ("min", "mean", "max"):
        if reward[key] is not None and not math.isfinite(reward[key]):
            reward[key] = None
    return {
        "samples": samples,
        "steps": {
            "count": len(samples_per_step),
            "values": list(samples_per_step),
            "samples_per_step": samples_per_step,
        },
        "prompts": prompts,
        "trajectories": trajectories,
        "identity": {"samples": samples, "with_prompt_key": with_prompt, "with_trajectory_key": with_trajectory},
        "reward": reward,
        "response_tokens": response_tokens,
        "recorded_advantages": samples - table.column(RECORDED_ADVANTAGE).null_count,
        "status": status_counts,
        "fields": fields,
    }


def with_choices_left_open(description: dict[str, Any], choices: Sequence[OpenChoice]) -> dict[str, Any]:
    """``description`` of a table read with choices left open (``rollaudit inspect`` on a dump that ``compare``
    refuses until the user picks, e.g., a reward dict's key): the entry a choice leaves open says what there is to
    choose from and the option that picks it, not the NaN the loader put in its place.

    >>> from rollaudit._errors import OpenChoice
    >>> choice = OpenChoice("reward", "a dict with keys {}", "--reward-key KEY", {"'acc'": None})
    >>> with_choices_left_open({"reward": {"kind": "no finite reward"}}, [choice])["reward"]["kind"]
    "a dict with keys 'acc'; compare needs --reward-key KEY"
    """
    for choice in choices:
        if choice.about == REWARD:
            description["reward"] = {"kind": choice.line(), "min": None, "mean": None, "max": None, "nonfinite": 0}
            for column in description.get("fields", ()):
                if column["name"] == REWARD:
                    column["non_null"] = 0  # none was read
    return description


__all__ = ["describe"]
