"""OpenPipe ART's trajectory Parquet logs to the canonical table.

ART's ``Model.log`` writes each step's trajectory groups to
``{art_path}/{project}/models/{model}/trajectories/{split}/{step:04d}.parquet``, ``art_path`` being ``.art`` by
default: a hidden directory, reached from the directory above it. One row per trajectory, written group by group.

Columns: ``step`` = the file's ``{step:04d}``, ``position`` = the row, ``prompt`` = ``group_index`` (the group's
place in the step's list: a position, not a prompt id), ``trajectory`` = (``group_index``, ``trajectory_index``)
where the writer has that column (``format_version`` 2), else (``group_index``, the row's place among its group's
rows), ``reward`` = ``reward``. A version-2 empty group's sentinel row (no ``trajectory_index``, no reward) is left
out. Messages, tools and metadata are never read. No advantages are recorded.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError
from ..._table import make_table, with_found, with_trained_default
from ..arrow import capped, columns, tables
from ..base import Format, SeveralRuns

if TYPE_CHECKING:
    from ..options import LoadOptions

ART_PATH = ".art"
_INDEX = "ART's index: an int from 0 on every row"
_FILE = re.compile(r"^(\d+)\.parquet$")
_COLUMNS = ("group_index", "reward", "messages")
DEFAULT = (
    "art-grpo",
    "ART's tokenize_trajectory_groups with its defaults (scale_rewards=True: the group's mean and population std, "
    "eps 1e-6; trajectories with an advantage of exactly 0 are not trained); no recorded advantages to confirm it",
)
CANNOT_AUDIT = (
    "the group across steps: group_index is a place in its step's list",
    "the training rows and weights of a trajectory (no token ids, no additional histories in the log)",
    "whether scale_rewards was on (a run setting the log does not hold)",
)


def detect(path: Path) -> bool:
    """A Parquet file whose schema has ART's ``group_index``, ``reward`` and ``messages`` columns."""
    if not (tables.read_head(path, 4) or b"").startswith(b"PAR1"):  # Parquet's magic bytes, without a parse
        return False
    try:
        import pyarrow.parquet as pq

        names = pq.read_schema(path).names
    except (pa.ArrowException, OSError, UnicodeDecodeError):  # a damaged file is the generic reader's to report
        return False
    return all(name in names for name in _COLUMNS)


def _step_files(directory: Path) -> list[Path]:
    return [path for path in directory.iterdir() if path.is_file() and _FILE.match(path.name)]


def expand_directory(directory: Path) -> list[Path] | None:
    """The ``{step:04d}.parquet`` files of one run: of a ``trajectories/train`` directory, or found below the
    directory that holds ``.art`` (or is it); None where there are none, or several runs (then each is named)."""
    files = _step_files(directory)
    if files and directory.parent.name == "trajectories":
        return files
    root = (
        directory / ART_PATH if (directory / ART_PATH).is_dir() else directory if directory.name == ART_PATH else None
    )
    if root is None:
        return None
    runs = sorted(
        folder
        for folder in root.glob("*/models/*/trajectories/train")
        if folder.is_dir() and not folder.is_symlink() and _step_files(folder)
    )
    if len(runs) > 1:
        raise SeveralRuns(
            f"holds {len(runs)} ART runs: {', '.join(str(run.relative_to(directory)) for run in runs)}",
            # A run's name: {project}/models/{model}, below .art.
            runs={str(run.relative_to(root).parent.parent): _step_files(run) for run in runs},
            file=str(directory),
            expected="one run: name it with --run, or name its trajectories/train directory",
        )
    return _step_files(runs[0]) if runs else None


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One step's trajectory log: a row per trajectory."""
    match = _FILE.match(path.name)
    if match is None:
        raise InputError(
            "is not named {step:04d}.parquet", file=str(path), expected="ART's trajectories/{split}/{step:04d}.parquet"
        )
    schema = capped.arrow_schema(path, "parquet")
    wanted = ["group_index", "reward", *(["trajectory_index"] if "trajectory_index" in schema.names else [])]
    missing = [name for name in wanted if name not in schema.names]
    if missing:
        raise InputError("has no column", file=str(path), field=missing[0], expected="ART's trajectory log")
    table = capped.read_arrow(path, "parquet", wanted)
    if "trajectory_index" in wanted:
        # A version-2 empty group is one sentinel row: no trajectory, no reward.
        sentinel = pc.and_(pc.is_null(table.column("trajectory_index")), pc.is_null(table.column("reward")))
        table = table.filter(pc.invert(sentinel))
    group = columns.index_values(table.column("group_index"), path, "group_index", _INDEX)
    if "trajectory_index" in wanted:
        member = columns.index_values(table.column("trajectory_index"), path, "trajectory_index", _INDEX)
    else:
        # No trajectory id at this writer version: the row's place among its group's rows (rows come group by group).
        codes = group.to_numpy(zero_copy_only=False)
        order = np.argsort(codes, kind="stable")
        starts = np.searchsorted(codes[order], codes[order], side="left")
        places = np.empty(len(codes), dtype=np.int64)
        places[order] = np.arange(len(codes)) - starts
        member = pa.array(places)
    reward = columns.plain(table.column("reward"))
    if not pa.types.is_floating(reward.type) and not pa.types.is_integer(reward.type):
        raise InputError(f"has type {reward.type}", file=str(path), field="reward", expected="numbers")
    canonical = make_table(
        reward=reward.cast(pa.float64()),
        prompt=group,
        trajectory=columns.paired_key(group, member),
        step=pa.array(np.full(table.num_rows, int(match.group(1)), dtype=np.int64)),
    )
    found = {"groups": len(pc.unique(group)), "trajectories (a row each)": canonical.num_rows}
    return with_found(canonical, {"ART (prompt = group_index, trajectory = its place in the group)": found})


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """One file per step."""
    steps = columns.one_file_per_step(paths, reduced, "ART trajectory logs", "one {step:04d}.parquet per step")
    return [with_trained_default(table, *DEFAULT) for table in steps]


LOADER = Format(
    name="art",
    description="OpenPipe ART .art/{project}/models/{model}/trajectories/train/{step:04d}.parquet (a trajectory a row)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    reads="ART's own columns (prompt = group_index, trajectory = trajectory_index or the place in the group, "
    "reward = reward)",
    prompt="group_index (a place in the step's list)",
    trajectory="trajectory_index (format_version 2), else the row's place in its group",
    reward="reward",
    trained_with=(DEFAULT,),
    cannot_audit=CANNOT_AUDIT,
)
