"""TRL ``GRPOTrainer`` completion logs to the canonical table.

With ``log_completions=True`` TRL writes
``{output_dir}/completions/completions_{global_step:05d}.parquet``: columns
``step``, ``prompt``, ``completion``, one column per reward function (NaN
where the function returned None), optional extra columns, and
``advantage``, the advantage TRL trained on.

Columns: ``step`` = the ``step`` column (else the file name's number),
``position`` = the row's place in the file, ``prompt`` = the **positional
group**: row ``i`` belongs to slice ``i // num_generations`` of its step.
TRL groups by position, not by text (one prompt text may fill two slices),
so the slice index is the key and the text only confirms it: every slice
must hold one prompt text. ``num_generations`` is inferred as the length of
the first run of equal prompt texts when not given, and must divide the
rows of each step; a slice whose text changes is an error naming its first
bad row, or a warning when the user gave ``num_generations`` (their word
wins). An inferred size of 1 (the first two prompts differ) is refused: TRL
needs ``num_generations >= 2``, and rows of distinct texts are no group.
``reward`` = TRL's reward: the nan-sum of the weighted reward-function
columns, NaN where every function is NaN (an unscorable row, which TRL
leaves out of its group's statistics and gives advantage 0).
``recorded_advantage`` = ``advantage``. Reward functions = the numeric
columns other than ``step``, ``advantage`` and the trajectory column, in
file order (TRL's ``reward_funcs`` order, which ``reward_weights`` as a list
follows), unless ``reward_columns`` (or ``reward_col``) names them. Numeric
and boolean columns pass through; ``prompt``, ``completion`` and other text
are not kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError, RollauditWarning, warn
from ..._table import (
    POSITION,
    PROMPT,
    STEP,
    TRAJECTORY,
    concat_tables,
    make_table,
    with_facts,
    with_trained_default,
)
from ..arrow import capped, columns, tables
from ..base import Format

if TYPE_CHECKING:
    from ..options import LoadOptions

PROMPT_COLUMN = "prompt"
COMPLETION_COLUMN = "completion"
STEP_COLUMN = "step"
ADVANTAGE_COLUMN = "advantage"
NOT_REWARDS = ("step", "advantage", "prompt", "completion", "mode", "image", "images")
_FILE_NAME = re.compile(r"^completions_(\d+)\.parquet$")
NO_TRAJECTORY = "every TRL row is a whole completion: counting trajectories once is the per-prompt scheme here"
# A read file's table says each step's num_generations (kept by the cache).
_GROUP_SIZES = b"rollaudit.trl.num_generations"


def detect(path: Path) -> bool:
    """A Parquet file (by its magic bytes) whose schema has TRL's ``prompt`` and ``completion`` columns."""
    if tables.sniff(path) != "parquet":
        return False
    try:
        import pyarrow.parquet as pq

        names = pq.read_schema(path).names
    except (pa.ArrowException, OSError, UnicodeDecodeError):  # a damaged file is the generic reader's to report
        return False
    return PROMPT_COLUMN in names and COMPLETION_COLUMN in names


def expand_directory(directory: Path) -> list[Path] | None:
    """An ``output_dir``'s ``completions/completions_*.parquet`` (or those of a ``completions`` directory)."""
    for folder in (directory / "completions", directory):
        if folder.is_dir():
            files = [path for path in folder.iterdir() if path.is_file() and _FILE_NAME.match(path.name)]
            if files:
                return files
    return None


def _reward_columns(schema: pa.Schema, options: LoadOptions, used: set[str], path: Path) -> list[str]:
    names = schema.names
    given = list(options.reward_columns) if options.reward_columns else None
    if given is None and options.reward_col is not None:
        given = [options.reward_col]
    if given is not None:
        for name in given:
            if name not in names:
                raise InputError(
                    f"no reward column {name!r}; columns found: {columns.columns_found(names)}",
                    file=str(path),
                    field=name,
                    expected="--reward-columns naming the file's reward-function columns",
                )
        return given
    found = [
        field.name
        for field in schema
        if field.name not in used and field.name not in NOT_REWARDS and columns.is_number(field.type)
    ]
    if not found:
        raise InputError(
            f"no reward-function column; columns found: {columns.columns_found(names)}",
            file=str(path),
            expected="TRL's numeric reward-function columns, or --reward-columns naming them",
        )
    return found


def _weights(names: list[str], options: LoadOptions, path: Path) -> np.ndarray:
    weights = options.reward_weights
    if weights is None:
        return np.ones(len(names))
    if isinstance(weights, Mapping):
        unknown = [name for name in weights if name not in names]
        if unknown:
            raise InputError(
                f"--reward-weights names {unknown[0]!r}, not a reward column; reward columns: "
                f"{columns.columns_found(names)}",
                file=str(path),
                expected="weights for the reward-function columns",
            )
        return np.array([float(weights.get(name, 1.0)) for name in names])
    if len(weights) != len(names):
        raise InputError(
            f"--reward-weights gives {len(weights)} weights for {len(names)} reward columns "
            f"({columns.columns_found(names)})",
            file=str(path),
            expected="one weight per reward function, in the columns' order (TRL's reward_weights)",
        )
    return np.asarray(weights, dtype=np.float64)


def trl_rewards(matrix: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """TRL's reward: nan-sum of the weighted per-function rewards; NaN where every function is NaN (unscorable)."""
    unscorable = np.isnan(matrix).all(axis=1)
    rewards = np.nansum(matrix * weights, axis=1)
    rewards[unscorable] = np.nan
    return rewards


def _texts(array: pa.Array | pa.ChunkedArray, path: Path, field: str) -> pa.Array:
    """Prompt texts as one comparable column (chat-message prompts compare by their JSON text)."""
    return columns.key_values(array, path, field)


def _differs(texts: pa.Array, other: pa.Array) -> np.ndarray:
    """True where two text columns differ (two nulls are equal)."""
    unequal = pc.fill_null(pc.not_equal(texts, other), True)
    both_null = pc.and_(pc.is_null(texts), pc.is_null(other))
    return pc.and_not(unequal, both_null).to_numpy(zero_copy_only=False)


def group_size(texts: pa.Array, given: int | None, step: int, path: Path, field: str) -> tuple[int, bool]:
    """``num_generations``: given, or the length of the first run of equal prompt texts; checked to divide the rows."""
    rows = len(texts)
    if given is not None:
        n, inferred = given, False
    else:
        changes = np.flatnonzero(_differs(texts, pc.take(texts, pa.array(np.zeros(rows, dtype=np.int64)))))
        n, inferred = (int(changes[0]) if len(changes) else rows), True
        if n == 1 and rows > 1:
            raise InputError(
                f"the first two rows of step {step} have different prompt texts: no group size can be read from "
                "them (TRL needs num_generations >= 2 consecutive rows per prompt)",
                file=str(path),
                field=field,
                row=1,
                expected="--num-generations giving the group size",
            )
    if rows % n:
        how = f"inferred num_generations={n} (the first run of equal prompts)" if inferred else f"--num-generations {n}"
        raise InputError(
            f"{how} does not divide the {rows} rows of step {step}",
            file=str(path),
            field=field,
            expected="rows in consecutive groups of num_generations (give --num-generations if the inference is wrong)",
        )
    return n, inferred


def _check_slices(texts: pa.Array, n: int, inferred: bool, path: Path, field: str) -> None:
    """Every slice of ``n`` rows holds one prompt text."""
    rows = len(texts)
    firsts = pc.take(texts, pa.array((np.arange(rows, dtype=np.int64) // n) * n))
    bad = np.flatnonzero(_differs(texts, firsts))
    if not len(bad):
        return
    row = int(bad[0])
    start = row // n * n
    message = f"the prompt text changes inside the group of rows {start + 1}-{start + n} (num_generations={n})"
    if inferred:
        raise InputError(
            message,
            file=str(path),
            field=field,
            row=row,
            expected="num_generations consecutive rows per prompt (give --num-generations if it is not "
            f"{n}; the groups are then taken as given)",
        )
    warn(
        f"{path}: row {row + 1}: {message}; {len(bad)} {'row differs' if len(bad) == 1 else 'rows differ'} from "
        "their group's first prompt; "
        "groups kept as given by --num-generations",
        RollauditWarning,
    )


def read_steps(path: Path, options: LoadOptions) -> list[tuple[int, pa.Table]]:
    """One TRL completions parquet: a canonical table per step (one, in a real TRL log)."""
    tables.check_not_empty(path)
    if tables.sniff(path) != "parquet":
        raise InputError("not a Parquet file", file=str(path), expected="TRL's completions_*.parquet")
    schema = capped.arrow_schema(path, "parquet")
    names = schema.names
    prompt = columns.pick_column(names, options.prompt_col, (PROMPT_COLUMN,), "prompt text", path)
    if prompt is None:
        raise InputError(
            f"no prompt column; columns found: {columns.columns_found(names)}",
            file=str(path),
            field=PROMPT_COLUMN,
            expected="TRL's prompt column (its text confirms the groups)",
        )
    step = columns.pick_column(names, options.step_col, (STEP_COLUMN,), "step", path)
    advantage = columns.pick_column(names, options.advantage_col, (ADVANTAGE_COLUMN,), "advantage", path)
    trajectory = columns.pick_column(names, options.trajectory_col, (), "trajectory key", path)
    used = {name for name in (prompt, step, advantage, trajectory) if name is not None}
    reward_columns = _reward_columns(schema, options, used, path)
    weights = _weights(reward_columns, options, path)
    extras = [
        field.name
        for field in schema
        if field.name not in used
        and field.name not in reward_columns
        and field.name not in NOT_REWARDS
        and (columns.is_number(field.type) or pa.types.is_boolean(field.type))
    ]
    table = capped.read_arrow(path, "parquet", [*used, *reward_columns, *extras])
    if table.num_rows == 0:
        raise InputError("empty file: the table has no rows", file=str(path), expected="TRL completion rows")

    matrix = np.column_stack(
        [columns.float_values(table.column(name), path, name).to_numpy(zero_copy_only=False) for name in reward_columns]
    )
    rewards = pa.array(trl_rewards(matrix, weights))
    columns.warn_missing_rewards(path, 0, rewards)

    extra: dict[str, Any] = {}
    if advantage is not None:
        extra["recorded_advantage"] = columns.float_values(table.column(advantage), path, advantage)
    if trajectory is not None:
        extra["trajectory"] = columns.key_values(table.column(trajectory), path, trajectory)
    for name in [*reward_columns, *extras]:
        extra[columns.passthrough_name(name)] = table.column(name).combine_chunks()
    steps = _steps(table, step, path)
    texts = _texts(table.column(prompt), path, prompt)
    canonical = make_table(reward=rewards, step=steps, **extra)

    keyed: list[tuple[int, pa.Table]] = []
    for step_value, part in columns.split_steps(canonical, path):
        positions = part.column(POSITION).to_numpy()
        part_texts = texts if part.num_rows == len(texts) else pc.take(texts, _rows_of(canonical, step_value))
        n, inferred = group_size(
            part_texts, options.num_generations or options.n_samples_per_prompt, step_value, path, prompt
        )
        _check_slices(part_texts, n, inferred, path, prompt)
        part = part.set_column(part.column_names.index(PROMPT), PROMPT, pa.array(positions // n))
        keyed.append((step_value, part.replace_schema_metadata({_GROUP_SIZES: json.dumps({step_value: n}).encode()})))
    return keyed


def _rows_of(table: pa.Table, step: int) -> pa.Array:
    """Row numbers of one step, in row order (matches the split's order: positions count in row order)."""
    return pa.array(np.flatnonzero(table.column(STEP).to_numpy() == step))


def _steps(table: pa.Table, field: str | None, path: Path) -> pa.Array:
    if field is not None:
        return columns.step_values(table.column(field), path, field)
    return columns.file_name_steps(
        path,
        _FILE_NAME,
        table.num_rows,
        field=STEP_COLUMN,
        no_step="no step column and the file name is not completions_{step}.parquet",
        expected="TRL's step column, or --step-col naming one",
    )


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One file to its canonical rows (all its steps in one table; ``combine`` splits them again), each step's
    num_generations in the metadata."""
    steps = read_steps(path, options)
    sizes = {key: n for _, table in steps for key, n in json.loads(table.schema.metadata[_GROUP_SIZES]).items()}
    table = concat_tables([table.replace_schema_metadata() for _, table in steps])
    return table.replace_schema_metadata({_GROUP_SIZES: json.dumps(sizes).encode()})


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The reduced tables of TRL completion logs, in file order: one canonical table per step, naming TRL's default
    (``scale_rewards="group"``) with the step's num_generations."""
    sizes = {
        int(step): n
        for table in reduced
        for step, n in json.loads((table.schema.metadata or {}).get(_GROUP_SIZES, b"{}")).items()
    }
    steps = columns.one_file_per_step(
        paths,
        [table.replace_schema_metadata() for table in reduced],
        "TRL completion logs",
        "one completions_*.parquet per step",
    )
    return [_with_facts(table, sizes.get(table.column(STEP)[0].as_py())) for table in steps]


def _with_facts(table: pa.Table, n: int | None) -> pa.Table:
    scheme = f"trl-group(n={n})" if n is not None else "trl-group"
    why = (
        "TRL GRPOTrainer's default scale_rewards='group' over consecutive groups of num_generations"
        + (f"={n}" if n is not None else "")
        + "; the recorded advantage column says what the run trained on"
    )
    table = with_trained_default(table, scheme, why)
    keyed = table.column(TRAJECTORY).null_count < table.num_rows  # a trajectory_col the user named
    return table if keyed else with_facts(table, no_trajectory=NO_TRAJECTORY)


LOADER = Format(
    name="trl",
    description="GRPOTrainer completions/completions_*.parquet with prompt, completion, reward columns, advantage",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    options=frozenset(
        {
            "reward_col",
            "reward_columns",
            "reward_weights",
            "num_generations",
            "n_samples_per_prompt",
            "prompt_col",
            "step_col",
            "advantage_col",
            "trajectory_col",
        }
    ),
    reads="TRL's completion columns (groups = consecutive num_generations rows, reward = the reward-function "
    "columns, advantage = advantage)",
    prompt=f"consecutive slices of num_generations rows ({PROMPT_COLUMN} column)",
    reward="the reward-function columns (weighted sum)",
    advantage=ADVANTAGE_COLUMN,
    trained_with=(
        (
            "trl-group(n=N)",
            "TRL GRPOTrainer's default scale_rewards='group' over consecutive groups of "
            "num_generations=N, the dump's group size",
        ),
    ),
    cannot_audit=(NO_TRAJECTORY,),
)
