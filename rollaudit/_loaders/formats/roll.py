"""ROLL's agentic rollout dumps (``dump_rollout_trajectories``) to the canonical table.

ROLL writes ``rollout_dump_data.step_{N}.jsonl``: ONE line, a JSON object of columns, each a list with one entry
per trajectory: ``trajectory_data`` (a JSON string), ``messages``, ``tools``, ``exp_name``, ``global_step``.
ROLL trains on one row per environment step, so a trajectory expands to ``len(step_rewards)`` rows.

Columns: ``step`` = ``global_step``, ``position`` = the row's place (trajectories in dump order, then their
steps), ``prompt`` = ``traj_group_id`` = ``{tag}_{group_id}_{episode_id}_{seed}`` of ``env_info`` (ROLL's group
key), ``trajectory`` = ``traj_id`` = ``{traj_group_id}_{env_id}``, ``reward`` = ``step_rewards[k]``; passed
through: ``tag`` (the environment type, which ``roll-grpo-tags`` groups by), ``env_step`` (k) and
``episode_reward``. ``messages`` and ``tools`` are never read.
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
from ..._table import PROMPT, TRAJECTORY, make_table, with_found, with_trained_default
from ..arrow import columns, json_lines, tables
from ..base import Format

if TYPE_CHECKING:
    from ..options import LoadOptions

_FILE = re.compile(r"^rollout_dump_data\.step_(\d+)\.jsonl$")
_HEAD = re.compile(rb'^\s*\{\s*"trajectory_data"\s*:\s*\[')
_SCHEMA = pa.schema([pa.field("trajectory_data", pa.list_(pa.string())), pa.field("global_step", pa.list_(pa.int64()))])
_ENV_KEYS = ("tag", "group_id", "episode_id", "seed", "env_id")
_TRAJECTORY_FIELDS = ("env_info", "reward_info")  # of a trajectory_data entry: the only ones read
WEIGHTING = (
    "ROLL counts every environment step as a row of its statistics: a 5-step trajectory weighs 5 times in "
    "roll-grpo (the trajectory scheme counts it once)"
)
DEFAULT = (
    "roll-grpo",
    "ROLL agentic's GRPO as its example configs set it (adv_estimator=grpo, reward_normalization grouping="
    "traj_group_id, mean and std per group; the default normalises nothing) over every environment-step row; no "
    "recorded advantages to confirm it",
)


def detect(path: Path) -> bool:
    """A JSON Lines file whose one object opens with ROLL's ``trajectory_data`` column."""
    if path.suffix != ".jsonl":
        return False
    head = tables.read_head(path, 4096)
    return head is not None and bool(_HEAD.match(head))


def expand_directory(directory: Path) -> list[Path] | None:
    """A dump directory's ``rollout_dump_data.step_{N}.jsonl`` files."""
    files = [path for path in directory.iterdir() if path.is_file() and _FILE.match(path.name)]
    return files or None


def _float(value: float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int past the doubles
        return math.inf if value > 0 else -math.inf


def _trajectory(text: Any, path: Path, row: int) -> dict:
    """One ``trajectory_data`` entry: its env_info keys and step rewards, checked."""
    try:
        data = json_lines.object_fields(text, _TRAJECTORY_FIELDS)
    except (ValueError, RecursionError):
        raise InputError("is not a JSON object", file=str(path), field="trajectory_data", row=row) from None
    env = data.get("env_info") if isinstance(data, dict) else None
    info = data.get("reward_info") if isinstance(data, dict) else None
    info = info if isinstance(info, dict) else {}  # a number, list or string holds no step rewards either
    rewards = info.get("step_rewards")
    if not isinstance(env, dict) or any(key not in env for key in _ENV_KEYS):
        raise InputError(
            "has no env_info with tag, group_id, episode_id, seed and env_id",
            file=str(path),
            field="trajectory_data",
            row=row,
            expected="ROLL's trajectory_data (traj_group_id and traj_id come from its env_info)",
        )
    if not isinstance(rewards, list) or not rewards or not all(type(value) in (int, float) for value in rewards):
        raise InputError(
            "has no list of step rewards",
            file=str(path),
            field="reward_info.step_rewards",
            row=row,
            expected="one number per environment step",
        )
    episode = info.get("episode_reward")
    episode_reward = _float(episode) if isinstance(episode, (int, float)) and not isinstance(episode, bool) else None
    return {
        "group": columns.surrogate_safe("_".join(str(env[key]) for key in ("tag", "group_id", "episode_id", "seed"))),
        "env_id": columns.surrogate_safe(str(env["env_id"])),
        "tag": columns.surrogate_safe(str(env["tag"])),
        "rewards": [_float(value) for value in rewards],
        "episode_reward": episode_reward,
    }


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One dump file: every trajectory expanded to its step rows."""
    tables.check_not_empty(path)
    table = json_lines.read_json_lines(path, _SCHEMA)
    if table.num_rows != 1:
        raise InputError(
            f"holds {table.num_rows} lines", file=str(path), expected="ROLL's one line: a JSON object of columns"
        )
    data = columns.plain(table.column("trajectory_data"))[0].as_py() or []
    steps = columns.plain(table.column("global_step"))[0].as_py() or []
    if len(steps) != len(data):
        raise InputError(
            f"has {len(steps)} global_step values for {len(data)} trajectories",
            file=str(path),
            field="global_step",
            expected="one entry per trajectory in every column",
        )
    trajectories = [(steps[row], _trajectory(text, path, row)) for row, text in enumerate(data) if text is not None]
    if not trajectories:
        raise InputError("holds no trajectory", file=str(path), field="trajectory_data", expected="ROLL trajectories")
    counts = [len(trajectory["rewards"]) for _, trajectory in trajectories]
    repeat = lambda values: np.repeat(np.asarray(values, dtype=object), counts).tolist()  # noqa: E731
    groups = [trajectory["group"] for _, trajectory in trajectories]
    canonical = make_table(
        reward=pa.array([value for _, trajectory in trajectories for value in trajectory["rewards"]], pa.float64()),
        prompt=pa.array(repeat(groups), pa.string()),
        trajectory=pa.array(
            repeat([f"{group}_{t['env_id']}" for group, (_, t) in zip(groups, trajectories, strict=True)]), pa.string()
        ),
        step=pa.array(repeat([step for step, _ in trajectories]), pa.int64()),
        tag=pa.array(repeat([trajectory["tag"] for _, trajectory in trajectories]), pa.string()),
        env_step=pa.array(np.concatenate([np.arange(count) for count in counts]).astype(np.int64)),
        episode_reward=pa.array(repeat([trajectory["episode_reward"] for _, trajectory in trajectories]), pa.float64()),
    )
    found = {
        "trajectory groups": len(pc.unique(canonical.column(PROMPT))),
        "trajectories": len(pc.unique(canonical.column(TRAJECTORY))),
        "rows (one per environment step)": canonical.num_rows,
    }
    return with_found(canonical, {"ROLL (prompt = traj_group_id, trajectory = traj_id)": found}, [WEIGHTING])


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """One file per step."""
    steps = columns.one_file_per_step(paths, reduced, "ROLL dumps", "one rollout_dump_data.step_{N}.jsonl per step")
    return [with_trained_default(table, *DEFAULT) for table in steps]


LOADER = Format(
    name="roll",
    description="ROLL agentic rollout_dump_data.step_{N}.jsonl (one line of columns, trajectories to step rows)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    reads="ROLL's own keys (prompt = traj_group_id, trajectory = traj_id, reward = step_rewards)",
    prompt="traj_group_id (env_info)",
    trajectory="traj_id (env_info)",
    reward="step_rewards",
    trained_with=(DEFAULT,),
)
