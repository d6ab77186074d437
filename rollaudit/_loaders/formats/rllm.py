"""rllm's episode logs (``EpisodeLogger``) to the canonical table.

rllm writes ``.../episodes/train_step_{N}_epoch_{E}/episode_hash{h}_id{episode}.json``, one JSON document per
episode (a task's rollout: one or several named trajectories, each a list of steps), and ``batch_summary.json``,
which lists the step's episode files in order. They are logged right after generation: before rllm imputes
names, propagates rewards and computes advantages.

Rows, as rllm's verl backend trains them: one per trajectory segment. A trajectory's steps merge into one row
while each step's ``chat_completions`` extends the previous one's; a step that does not (a context reset) starts
a new row. Trajectories without steps (errored episodes) give no row.

Columns: ``step`` = ``training_step``, ``position`` = the row's place in the step (episode order, as
``batch_summary.json`` lists them), ``prompt`` = ``{task_id}:{trajectory name}`` (rllm's group key, an unnamed
trajectory renamed ``default_traj_name_{position}`` as rllm does), ``trajectory`` = the trajectory's ``uid``,
``reward`` = its reward (when every trajectory of a group logged none, each takes its last step's reward, as
rllm propagates it); passed through: ``segment`` (the row's index in its trajectory), ``episode_id``,
``legacy_reward`` (the logged reward, 0.0 where none: what rllm's legacy verl path trains on, which
``rllm-verl-legacy`` reads).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError
from ..._table import PROMPT, REWARD, STEP, TRAJECTORY, make_table, with_found, with_trained_default
from ..arrow import columns, tables
from ..base import Format, folder_step

if TYPE_CHECKING:
    from ..options import LoadOptions

UNNAMED = "default_traj_name"
SUMMARY = "batch_summary.json"
_EPISODE_FILE = re.compile(r"^episode_.*\.json$")
_STEP_DIRECTORY = re.compile(r"^train_step_(\d+)_epoch_(\d+)$")
_HEAD = re.compile(rb'^\s*\{\s*"training_step"\s*:')
_LAST_REWARD = "last_step_reward"
DEFAULT = (
    "rllm-grpo",
    "rllm's default (algorithm.adv_estimator=grpo: one member per trajectory, groups of fewer than "
    "min_trajs_per_group=2 trajectories dropped); no recorded advantages to confirm it",
)


def detect(path: Path) -> bool:
    """An rllm episode file or batch summary: a JSON document that starts with ``"training_step"``."""
    if path.suffix != ".json":
        return False
    head = tables.read_head(path, 4096)
    return head is not None and bool(_HEAD.match(head)) and (b'"episode_id"' in head or b'"episode_files"' in head)


def _episode_files(directory: Path) -> list[Path]:
    """A step directory's episode files, in ``batch_summary.json``'s order when it lists them."""
    summary = directory / SUMMARY
    if summary.is_file():
        return _listed(summary)
    return [path for path in directory.iterdir() if path.is_file() and _EPISODE_FILE.match(path.name)]


def _listed(summary: Path) -> list[Path]:
    document = tables.read_json_document(summary)
    names = document.get("episode_files") if isinstance(document, dict) else None
    if not isinstance(names, list) or not all(isinstance(name, str) and "/" not in name for name in names):
        raise InputError("has no list of episode file names", file=str(summary), field="episode_files")
    if not names:
        raise InputError(
            "lists no episode files", file=str(summary), field="episode_files", expected="a step's episodes"
        )
    files = [summary.parent / name for name in names]
    missing = [path for path in files if not path.is_file()]
    if missing:
        raise InputError(
            f"lists {len(missing)} episode files that are not there (first: {missing[0].name})",
            file=str(summary),
            expected="the step directory as rllm wrote it",
        )
    return files


def expand_directory(directory: Path) -> list[Path] | None:
    """A step directory's episodes; an ``episodes/`` directory's steps; a run directory's ``episodes/``."""
    if (directory / "episodes").is_dir():
        directory = directory / "episodes"
    if _STEP_DIRECTORY.match(directory.name) or (directory / SUMMARY).is_file():
        return _episode_files(directory) or None
    step_numbers = {
        path: tuple(int(part) for part in match.groups())
        for path in directory.iterdir()
        if path.is_dir() and (match := _STEP_DIRECTORY.match(path.name))
    }
    steps = sorted(step_numbers, key=step_numbers.__getitem__)
    files = [file for step in steps for file in _episode_files(step)]
    return files or None


def _messages(step: Any) -> list[tuple[Any, Any]]:
    chat = step.get("chat_completions") if isinstance(step, dict) else None
    if not isinstance(chat, list):
        return []
    return [
        (message.get("role"), message.get("content")) if isinstance(message, dict) else (None, None) for message in chat
    ]


def _segments(steps: list) -> int:
    """Rows of a trajectory: a step whose messages do not begin with the previous step's starts a new one."""
    rows, previous = 1, None
    for step in steps:
        messages = _messages(step)
        if previous is not None and messages[: len(previous)] != previous:
            rows += 1
        previous = messages
    return rows


def _number(value: Any, path: Path, field: str) -> float | None:
    if value is None:
        return None
    if type(value) in (int, float):
        try:
            return float(value)
        except OverflowError:  # an int past the doubles
            return math.inf if value > 0 else -math.inf
    raise InputError(f"is a {type(value).__name__}", file=str(path), field=field, expected="a number or null")


def _episode_rows(path: Path, document: Any) -> dict[str, list]:
    if not isinstance(document, dict) or not isinstance(document.get("trajectories"), list):
        raise InputError("has no trajectories", file=str(path), field="trajectories", expected="an rllm episode")
    step, episode = document.get("training_step"), document.get("episode_id")
    if type(step) is not int or not 0 <= step < 1 << 63 or not isinstance(episode, str):
        raise InputError("has no training_step or episode_id", file=str(path), expected="an rllm episode")
    episode = columns.surrogate_safe(episode)
    task = episode.rsplit(":", 1)[0]  # episode.id = f"{task_id}:{rollout_idx}"
    rows: dict[str, list] = {"prompt": [], "uid": [], "reward": [], _LAST_REWARD: [], "segment": [], "step": []}
    for position, trajectory in enumerate(document["trajectories"]):
        if not isinstance(trajectory, dict):
            raise InputError("a trajectory is not an object", file=str(path), field="trajectories")
        steps = trajectory.get("steps")
        if not isinstance(steps, list) or not steps:
            continue  # no step, no training row (an errored episode)
        name = trajectory.get("name")
        name = f"{UNNAMED}_{position}" if name in (None, UNNAMED) else columns.surrogate_safe(str(name))
        uid = trajectory.get("uid")
        if not isinstance(uid, str):
            raise InputError("a trajectory has no uid", file=str(path), field="uid", expected="rllm's trajectory uid")
        uid = columns.surrogate_safe(uid)
        reward = _number(trajectory.get("reward"), path, "reward")
        last = _number(steps[-1].get("reward") if isinstance(steps[-1], dict) else None, path, "steps[-1].reward")
        for segment in range(_segments(steps)):
            rows["prompt"].append(f"{task}:{name}")
            rows["uid"].append(uid)
            rows["reward"].append(reward)
            rows[_LAST_REWARD].append(last)
            rows["segment"].append(segment)
            rows["step"].append(step)
    rows["episode_id"] = [episode] * len(rows["uid"])
    return rows


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One episode file to its rows (rewards as logged; ``combine`` propagates them per group), or, for
    ``batch_summary.json``, the rows of every episode it lists."""
    if path.name == SUMMARY:
        return pa.concat_tables([read(file, options) for file in _listed(path)])
    rows = _episode_rows(path, tables.read_json_document(path))
    schema = pa.schema(
        [
            pa.field("step", pa.int64()),
            pa.field("prompt", pa.string()),
            pa.field("uid", pa.string()),
            pa.field("reward", pa.float64()),
            pa.field(_LAST_REWARD, pa.float64()),
            pa.field("segment", pa.int64()),
            pa.field("episode_id", pa.string()),
        ]
    )
    return pa.table({name: rows[name] for name in schema.names}, schema=schema)


def _propagated(table: pa.Table, path: Path) -> pa.Array:
    """rllm's rewards: a group whose trajectories all logged none takes each one's last step reward; a group that
    mixes logged and missing rewards fails rllm's own assertion, and is an error here."""
    logged = table.column(REWARD).combine_chunks()
    if not logged.null_count:
        return logged
    missing = pc.is_null(logged)
    by_group = (
        pa.table({"key": table.column(PROMPT), "missing": missing})
        .group_by("key")
        .aggregate([("missing", "all"), ("missing", "any")])
    )
    mixed = pc.and_(by_group.column("missing_any"), pc.invert(by_group.column("missing_all")))
    if pc.any(mixed).as_py():
        group = by_group.column("key")[int(pc.index(mixed, True).as_py())].as_py()
        raise InputError(
            f"group {group!r} mixes trajectories with and without a reward, which rllm refuses",
            file=str(path),
            field="reward",
            expected="a reward on every trajectory of a group, or on none (then the last step's counts)",
        )
    return pc.if_else(missing, table.column(_LAST_REWARD).combine_chunks(), logged)


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The episode files of each step as one batch, in the order given; rewards propagated per group."""
    per_step: dict[int, list[pa.Table]] = {}
    where: dict[int, Path] = {}
    for path, table in zip(paths, reduced, strict=True):
        if table.num_rows:
            step = table.column("step")[0].as_py()
            per_step.setdefault(step, []).append(table)
            where.setdefault(step, path.parent)
    if not per_step:
        raise InputError("no episode has a trajectory with steps", file=str(paths[0]), expected="rllm episodes")
    combined = []
    for step in sorted(per_step):
        raw = pa.concat_tables(per_step[step])
        rewards = _propagated(raw, where[step])
        logged = raw.column(REWARD).combine_chunks()
        table = make_table(
            reward=rewards,
            prompt=raw.column(PROMPT),
            trajectory=raw.column("uid"),
            step=raw.column(STEP),
            position=pa.array(np.arange(raw.num_rows, dtype=np.int64)),
            segment=raw.column("segment").combine_chunks(),
            episode_id=raw.column("episode_id").combine_chunks(),
            legacy_reward=pc.fill_null(logged, 0.0),
        )
        table = with_found(table, {"rllm (prompt = task_id:trajectory name, trajectory = uid)": _found(table, logged)})
        combined.append(with_trained_default(table, *DEFAULT))
    return combined


def _found(table: pa.Table, logged: pa.Array) -> dict[str, int]:
    trajectories = table.group_by([PROMPT, TRAJECTORY]).aggregate([([], "count_all")])
    per_group = trajectories.group_by([PROMPT]).aggregate([([], "count_all")])
    unnamed = pc.match_substring(pc.unique(table.column(PROMPT)), f":{UNNAMED}_")
    return {
        "groups": per_group.num_rows,
        "trajectories": trajectories.num_rows,
        "rows (trajectory segments)": table.num_rows,
        "trajectories split by a context reset": int(
            pc.sum(pc.greater(trajectories.column("count_all"), 1)).as_py() or 0
        ),
        "groups of unnamed trajectories, renamed by position": int(pc.sum(unnamed).as_py() or 0),
        "groups of one trajectory (rllm drops them from training)": int(
            pc.sum(pc.equal(per_group.column("count_all"), 1)).as_py() or 0
        ),
        "rows whose reward rllm propagates from their last step": logged.null_count,
    }


LOADER = Format(
    name="rllm",
    description="rllm episodes/train_step_{N}_epoch_{E}/episode_*.json logs (and batch_summary.json)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    reads="rllm's own keys (prompt = task_id:trajectory name, trajectory = uid, reward = the trajectory's reward)",
    prompt="task_id:trajectory name",
    framework_groups="the prompt above, except rllm's legacy verl path, which groups by the trajectory uid (rllm "
    "issues #605, #924): the rllm-verl-legacy preset",
    trajectory="uid",
    reward="the trajectory's reward",
    trained_with=(DEFAULT,),
    step_of=folder_step,
    step_grows=True,
)
