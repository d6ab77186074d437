"""tinker-cookbook's RL rollout summaries to the canonical table.

tinker-cookbook's training loop exports each iteration's trajectory groups (``rollout_json_export``, on by
default) to ``{log_path}/iteration_{NNNNNN}/train_rollout_summaries.jsonl``; older versions wrote the same records
to ``{log_path}/train_iteration_{NNNNNN}_rollout_summaries.jsonl``. One line per trajectory, in batch order.

Columns: ``step`` = ``iteration``, ``position`` = the line, ``prompt`` = ``group_idx`` (the group's place in this
file's batch: a position, not a prompt id), ``trajectory`` = (``group_idx``, ``traj_idx``), ``reward`` =
``total_reward`` (the step rewards plus the group's final reward: what ``compute_advantages`` centres). Each
trajectory is one row: tinker trains a trajectory as one or more datums with the same advantage, and how many
cannot be told from the dump. The steps, tags and metrics are never read. No advantages are recorded.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError
from ..._table import make_table, with_found, with_trained_default
from ..arrow import columns, json_lines, tables
from ..base import Format
from ..config import RunConfig, Setting

if TYPE_CHECKING:
    from ..options import LoadOptions

_FILE = re.compile(r"^(train_rollout_summaries|train_iteration_\d+_rollout_summaries)\.jsonl$")
_ITERATION_DIRECTORY = re.compile(r"^iteration_\d+$")
_INDEX = "tinker's index: an int from 0 on every line"
_KEYS = ("schema_version", "iteration", "group_idx", "traj_idx", "total_reward")
_SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int64()),
        pa.field("iteration", pa.int64()),
        pa.field("group_idx", pa.int64()),
        pa.field("traj_idx", pa.int64()),
        pa.field("total_reward", pa.float64()),
    ]
)
DEFAULT = (
    "tinker-center",
    "tinker-cookbook's compute_advantages, the one estimator of its RL loop (the total reward minus its group's "
    "mean, float32); whether remove_constant_reward_groups was on is in the run's config.json, not the dump (read "
    "where it sits in log_path); no recorded advantages to confirm it",
)
CANNOT_AUDIT = (
    "the prompt across iterations: group_idx is a place in its file's batch",
    "how many training datums a trajectory became (only token counts are logged): each trajectory is one row",
)


def detect(path: Path) -> bool:
    """A JSON Lines file whose first line holds tinker's keys (a trajectory's ``group_idx``, ``traj_idx``,
    ``total_reward`` and its ``steps``), whatever its name."""
    first = tables.first_json_object(path)
    return first is not None and all(key in first for key in (*_KEYS, "steps"))


def expand_directory(directory: Path) -> list[Path] | None:
    """A run directory's ``iteration_*/train_rollout_summaries.jsonl`` and flat ``train_iteration_*`` files, or
    an iteration directory's own file."""
    files = [path for path in directory.iterdir() if path.is_file() and _FILE.match(path.name)]
    for child in directory.iterdir():
        if child.is_dir() and _ITERATION_DIRECTORY.match(child.name):
            nested = child / "train_rollout_summaries.jsonl"
            if nested.is_file():
                files.append(nested)
    return files or None


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One rollout-summaries file: a row per trajectory."""
    tables.check_not_empty(path)
    table = json_lines.read_json_lines(path, _SCHEMA)
    versions = pc.unique(columns.plain(table.column("schema_version"))).to_pylist()
    if versions != [1]:
        raise InputError(
            f"has schema_version {', '.join(map(str, versions))}",
            file=str(path),
            field="schema_version",
            expected="tinker-cookbook's rollout summaries, schema_version 1",
        )
    group = columns.index_values(table.column("group_idx"), path, "group_idx", _INDEX)
    trajectory = columns.index_values(table.column("traj_idx"), path, "traj_idx", _INDEX)
    step = columns.plain(table.column("iteration"))
    if step.null_count:
        row = int(pc.index(pc.is_null(step), True).as_py())
        raise InputError("has no iteration", file=str(path), field="iteration", row=row, expected="an int")
    canonical = make_table(
        reward=columns.plain(table.column("total_reward")),
        prompt=group,
        trajectory=columns.paired_key(group, trajectory),
        step=step,
    )
    found = {
        "groups": len(pc.unique(group)),
        "trajectories (a row each)": canonical.num_rows,
    }
    return with_found(canonical, {"tinker (prompt = group_idx, trajectory = (group_idx, traj_idx))": found})


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """One file per iteration; the run's preset from its config.json where it states the filter."""
    steps = columns.one_file_per_step(
        paths, reduced, "tinker rollout summaries", "one train_rollout_summaries.jsonl per iteration"
    )
    said = trained_default(options.run_config)
    return [with_trained_default(table, *said) for table in steps]


def trained_default(config: RunConfig | None) -> tuple[str, str, str | None]:
    """tinker-center, with its constant groups dropped where the run's config turned remove_constant_reward_groups
    on; the default, an assumption, where no config states it."""
    if config is None or "remove_constant" not in config:
        return (*DEFAULT, None)
    dropped = bool(config.get("remove_constant"))
    scheme = "tinker-center(drop=constant)" if dropped else "tinker-center"
    return scheme, f"tinker-cookbook compute_advantages with {config.cite('remove_constant')}", config.source


def config_files(paths: list[Path]) -> list[Path]:
    """tinker-cookbook dumps its config as config.json in log_path, above the iteration_* folders."""
    folder = paths[0].parent
    return [folder.parent / "config.json" if _ITERATION_DIRECTORY.match(folder.name) else folder / "config.json"]


LOADER = Format(
    name="tinker",
    description="tinker-cookbook iteration_{N}/train_rollout_summaries.jsonl (a line per trajectory)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    reads="tinker-cookbook's own keys (prompt = group_idx, trajectory = (group_idx, traj_idx), reward = total_reward)",
    prompt="group_idx (a place in the file's batch)",
    trajectory="(group_idx, traj_idx)",
    reward="total_reward",
    trained_with=(DEFAULT,),
    cannot_audit=CANNOT_AUDIT,
    settings=(Setting("remove_constant", ("remove_constant_reward_groups",), "bool"),),
    config_files=config_files,
    config_where="config.json in log_path (tinker-cookbook's setup_logging dumps the run's config there)",
)
