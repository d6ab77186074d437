"""prime-rl's rollout traces (verifiers v1 episodes) to the canonical table.

prime-rl's file monitor writes ``{output_dir}/rollouts/step_{N}/train/{all|effective}/traces.jsonl``: one line per
episode (``Episode.to_record()``), its traces (one per agent run) inside. ``all`` holds every completed episode in
arrival order, before scoring (step N = the orchestrator step when it arrived); ``effective`` holds, per shipped
batch, episode copies with only the traces shipped in it, each sampled node carrying its ``advantages``.
``{output_dir}/metrics.jsonl`` is the step metrics log, not a dump: never read.

Rows: one per group member of ``all`` (prime-rl's ``iter_trainable_traces``: the trace is trainable, ok, and has a
sampled token; the episode's own ``ok`` does not matter). ``prompt`` = ``group.id``, ``trajectory`` = the episode
``id``, ``reward`` = the sum of score x weight over the trace's ``rewards`` (none: 0), ``response_length`` = its
sampled tokens, ``recorded_advantage`` = its node advantages in ``effective`` (joined on the trace ``id``), null
where it was not shipped. A group is scored when its last episode arrives, so all its rows sit in the step of that
episode (``step``), in scoring order (groups in completion order, episodes in arrival order, traces in episode
order); ``arrival_step`` keeps each row's own directory. Passed through: ``env``, ``agent``, ``trace_id``, the
length-penalty token counts (``num_output_tokens``, ``num_input_tokens``, ``num_turns``) and ``scoring_order``
(the run's scoring sequence, null where the dumps do not start at step 1 without a gap).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._errors import InputError
from ..._table import (
    AGENT,
    ENV,
    LENGTH_COLUMNS,
    NOT_TRAINED,
    SCORING_ORDER,
    make_table,
    with_facts,
    with_found,
    with_trained_default,
)
from ..arrow import columns, json_lines, tables
from ..base import Format

if TYPE_CHECKING:
    from ..options import LoadOptions

_STEP_DIRECTORY = re.compile(r"^step_(\d+)$")
_KINDS = ("all", "effective")
# A trace's rewards object, {name: {score, weight}} (or null values), and the names in it. Every quantifier is
# possessive: each piece (blanks, a comma, a string, a brace-free object) ends where the next must begin, so nothing
# is ever given back, and a match that fails (blanks before a comma, then a value of another shape) fails in time
# linear in what it read, where backtracking took time quadratic in the blanks.
_REWARDS = re.compile(rb'"rewards"\s*+:\s*+\{\s*+((?:"(?:[^"\\]|\\.)*+"\s*+:\s*+(?:\{[^{}]*+\}|null)\s*+,?+\s*+)*+)\}')
# Every rewards object must match the pattern: one that does not (a nested value) is refused, never skipped.
_REWARDS_KEY_PATTERN = re.compile(rb'"rewards"\s*+:\s*+\{')
_REWARD_NAME = re.compile(rb'"((?:[^"\\]|\\.)*+)"\s*+:\s*+(?:\{[^{}]*+\}|null)')
_REWARD = pa.struct([pa.field("score", pa.float64()), pa.field("weight", pa.float64())])
_USAGE = pa.struct(
    [
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("cached_input_tokens", pa.int64()),
    ]
)
_NODE = pa.struct(
    [
        pa.field("parent", pa.int64()),
        pa.field("sampled", pa.bool_()),
        pa.field("mask", pa.list_(pa.bool_())),
        pa.field("advantages", pa.list_(pa.float64())),
    ]
)
_CALL = pa.struct([pa.field("node", pa.int64()), pa.field("usage", _USAGE)])
OUTPUT_TOKENS, INPUT_TOKENS, TURNS = LENGTH_COLUMNS
DEFAULT = (
    "prime-grpo",
    "prime-rl's default algorithm (grpo: r minus the group mean, float32); each env's algorithm is in the run's "
    "config, not the dump",
)
CANNOT_AUDIT = (
    "each env's algorithm config (type, length_penalty, episode_agents, decay): in the run's config, not the dump",
    "which groups were scored: group_size is config, so every group counts as scored when its last episode in the "
    "dump arrived (a group still short at the end of the dump never was upstream)",
    "the advantages of traces that were not shipped (exactly 0, pending at the end of the dump, or of groups never "
    "scored): effective holds only the shipped traces",
    "cancelled or stale-dropped groups (a cancellation leaves no line in the dump)",
    "rae's running baselines unless the dumps start at the run's first step (step_1) with no step missing",
)


def detect(path: Path) -> bool:
    """A JSON Lines file whose first line is a verifiers episode: its ``id``, ``env``, ``group`` and ``traces``."""
    first = tables.first_json_object(path)
    return (
        first is not None
        and isinstance(first.get("traces"), list)
        and isinstance(first.get("group"), dict)
        and all(key in first for key in ("id", "env"))
    )


def _train_files(train: Path) -> list[Path]:
    return [train / kind / "traces.jsonl" for kind in _KINDS if (train / kind / "traces.jsonl").is_file()]


def expand_directory(directory: Path) -> list[Path] | None:
    """The ``traces.jsonl`` files of a run: of its output directory (above ``rollouts``), of ``rollouts``, of one
    ``step_{N}`` directory, of its ``train`` directory or of one ``all``/``effective`` directory."""
    rollouts = directory / "rollouts" if (directory / "rollouts").is_dir() else directory
    files: list[Path] = []
    if rollouts.name == "rollouts":
        for step in rollouts.iterdir():
            if step.is_dir() and _STEP_DIRECTORY.match(step.name):
                files.extend(_train_files(step / "train"))
    elif _STEP_DIRECTORY.match(directory.name):
        files = _train_files(directory / "train")
    elif directory.name == "train" and _STEP_DIRECTORY.match(directory.parent.name):
        files = _train_files(directory)
    elif directory.name in _KINDS and directory.parent.name == "train":
        files = [directory / "traces.jsonl"] if (directory / "traces.jsonl").is_file() else []
    return files or None


def _place(path: Path) -> tuple[int, str]:
    """(step, ``all`` or ``effective``) from the file's place in the layout."""
    kind, train, step = path.parent.name, path.parent.parent.name, path.parent.parent.parent.name
    match = _STEP_DIRECTORY.match(step)
    if path.name != "traces.jsonl" or kind not in _KINDS or train != "train" or match is None:
        # A file taken out of the layout: the arrivals of one step whose number is unknown (step 0).
        return 0, "all"
    return int(match.group(1)), kind


def _reward_names(path: Path) -> list[str]:
    """The reward names the file's traces use (rewards are keyed by the env's reward functions: read, not assumed)."""
    data = path.read_bytes()  # read, not mapped: a file rewritten while it is read cannot kill the process
    objects = _REWARDS.findall(data)
    if len(objects) != len(_REWARDS_KEY_PATTERN.findall(data)):
        raise InputError(
            "has a rewards object that is not {name: {score, weight}}",
            file=str(path),
            field="traces[].rewards",
            expected="verifiers' rewards: {name: {score, weight}}",
        )
    names = set(_REWARD_NAME.findall(b"\n".join(objects)))
    try:
        return sorted({json.loads(b'"' + name + b'"') for name in names})
    except ValueError:  # a name that is no JSON string (a bad escape, bytes that are not UTF-8)
        raise InputError(
            "has a reward name that is not a JSON string", file=str(path), field="traces[].rewards"
        ) from None


def _schema(reward_names: list[str]) -> pa.Schema:
    trace = pa.struct(
        [
            pa.field("id", pa.string()),
            pa.field("agent", pa.struct([pa.field("name", pa.string()), pa.field("trainable", pa.bool_())])),
            pa.field("ok", pa.bool_()),
            pa.field("nodes", pa.list_(_NODE)),
            pa.field("calls", pa.list_(_CALL)),
            pa.field("rewards", pa.struct([pa.field(name, _REWARD) for name in reward_names])),
        ]
    )
    return pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("env", pa.struct([pa.field("name", pa.string())])),
            pa.field("group", pa.struct([pa.field("id", pa.string())])),
            pa.field("traces", pa.list_(trace)),
        ]
    )


def _required(values: pa.Array, path: Path, field: str, rows: np.ndarray, expected: str) -> pa.Array:
    """``values`` when none is null, else an error naming the first line without one."""
    if values.null_count:
        first = int(pc.index(pc.is_null(values), True).as_py())
        raise InputError("is missing", file=str(path), field=field, row=int(rows[first]), expected=expected)
    return values


def _per_trace_sum(owner: np.ndarray, values: np.ndarray, traces: int) -> np.ndarray:
    return np.bincount(owner, weights=values, minlength=traces)[:traces] if traces else np.zeros(0)


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One ``traces.jsonl``: a row per trace (and one per episode without traces, which still counts towards its
    group's completion), with what membership, the reward, the token counts and a recorded advantage need."""
    step, kind = _place(path)
    tables.check_not_empty(path)
    table = json_lines.read_json_lines(path, _schema(_reward_names(path)))
    lines = np.arange(table.num_rows)
    episode_id = _required(columns.plain(table.column("id")), path, "id", lines, "the episode id")
    group = _required(
        pc.struct_field(columns.plain(table.column("group")), "id"), path, "group.id", lines, "the group id (a uuid)"
    )
    env = _required(
        pc.struct_field(columns.plain(table.column("env")), "name"), path, "env.name", lines, "the env name"
    )
    episode_traces = _required(columns.plain(table.column("traces")), path, "traces", lines, "a list of traces")
    per_episode = pc.list_value_length(episode_traces).to_numpy(zero_copy_only=False).astype(np.int64)
    traces = pc.list_flatten(episode_traces)
    count = len(traces)
    line = np.repeat(lines, per_episode)
    trace_index = np.arange(count) - np.repeat(np.cumsum(per_episode) - per_episode, per_episode)

    def field(name: str, *, under: str | None = None) -> pa.Array:
        holder = traces if under is None else pc.struct_field(traces, under)
        return pc.struct_field(holder, name)

    trace_id = _required(field("id"), path, "traces[].id", line, "the trace id")
    agent = _required(field("name", under="agent"), path, "traces[].agent.name", line, "the agent's seat name")
    trainable = _required(field("trainable", under="agent"), path, "traces[].agent.trainable", line, "a bool")
    ok = _required(field("ok"), path, "traces[].ok", line, "a bool")
    nodes = _required(field("nodes"), path, "traces[].nodes", line, "a list of nodes")
    node_count = pc.list_value_length(nodes).to_numpy(zero_copy_only=False).astype(np.int64)
    flat_nodes = pc.list_flatten(nodes)
    node_trace = np.repeat(np.arange(count), node_count)
    node_place = np.arange(len(flat_nodes)) - np.repeat(np.cumsum(node_count) - node_count, node_count)
    # One branch per trace (a chain of nodes): a tree would train one sample per branch, which is not read.
    parent = pc.struct_field(flat_nodes, "parent").to_numpy(zero_copy_only=False)
    parent = np.where(np.isnan(parent.astype(np.float64)), -1, parent).astype(np.int64)
    if not np.array_equal(parent, node_place - 1):
        bad = int(np.flatnonzero(parent != node_place - 1)[0])
        raise InputError(
            "has a trace whose nodes branch (each node's parent must be the node before it)",
            file=str(path),
            field="traces[].nodes[].parent",
            row=int(line[node_trace[bad]]),
            expected="one branch per trace (a root-to-leaf chain of nodes)",
        )
    masks = pc.struct_field(flat_nodes, "mask")
    mask_count = pc.list_value_length(masks).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    mask_values = pc.list_flatten(masks).fill_null(False).to_numpy(zero_copy_only=False).astype(np.float64)
    mask_trace = np.repeat(node_trace, mask_count)
    sampled_tokens = _per_trace_sum(mask_trace, mask_values, count)
    sampled = pc.struct_field(flat_nodes, "sampled").fill_null(False).to_numpy(zero_copy_only=False)
    turns = _per_trace_sum(node_trace, sampled.astype(np.float64), count)
    # Token advantages: one per sampled token, all equal in a trace (the trace's scalar advantage).
    advantages = pc.struct_field(flat_nodes, "advantages")
    advantage_count = pc.list_value_length(advantages).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    advantage_values = pc.list_flatten(advantages).to_numpy(zero_copy_only=False).astype(np.float64)
    advantage_trace = np.repeat(node_trace, advantage_count)
    held = _per_trace_sum(advantage_trace, np.ones(len(advantage_values)), count)
    recorded = np.full(count, np.nan)
    if len(advantage_values):
        low = np.full(count, np.inf)
        high = np.full(count, -np.inf)
        np.minimum.at(low, advantage_trace, advantage_values)
        np.maximum.at(high, advantage_trace, advantage_values)
        differ = (held > 0) & ~(low == high)
        if differ.any():
            raise InputError(
                "has a trace whose token advantages differ",
                file=str(path),
                field="traces[].nodes[].advantages",
                row=int(line[int(np.flatnonzero(differ)[0])]),
                expected="one advantage per trace (prime-rl's scalar advantage on every sampled token)",
            )
        recorded = np.where(held > 0, low, np.nan)
    # Token counts of the length penalty (trace.py): calls on the branch (an errored call has no node).
    calls = pc.fill_null(field("calls"), pa.scalar([], pa.list_(_CALL)))
    call_count = pc.list_value_length(calls).to_numpy(zero_copy_only=False).astype(np.int64)
    flat_calls = pc.list_flatten(calls)
    call_trace = np.repeat(np.arange(count), call_count)
    on_branch = pc.is_valid(pc.struct_field(flat_calls, "node")).to_numpy(zero_copy_only=False)
    usage = pc.struct_field(flat_calls, "usage")

    def tokens(name: str, required: bool) -> np.ndarray:
        values = pc.struct_field(usage, name)
        if required and pc.any(pc.and_(pc.is_null(values), pa.array(on_branch))).as_py():
            first = int(np.flatnonzero(on_branch & pc.is_null(values).to_numpy(zero_copy_only=False))[0])
            raise InputError(
                "is missing", file=str(path), field=f"traces[].calls[].usage.{name}", row=int(line[call_trace[first]])
            )
        return values.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)

    completion = tokens("completion_tokens", True)
    output_tokens = _per_trace_sum(call_trace[on_branch], completion[on_branch], count)
    call_total = tokens("prompt_tokens", True) + tokens("cached_input_tokens", False) + completion
    last_call = np.full(count, -1)
    branch_calls = np.flatnonzero(on_branch)
    np.maximum.at(last_call, call_trace[branch_calls], branch_calls)
    total_tokens = np.where(last_call >= 0, call_total[np.maximum(last_call, 0)] if len(call_total) else 0, 0)
    # The reward: the sum of score x weight (an absent or null entry counts 0).
    rewards = field("rewards")
    reward = np.zeros(count)
    for index in range(rewards.type.num_fields if count else 0):
        entry = pc.struct_field(rewards, index)
        product = pc.multiply(pc.struct_field(entry, "score"), pc.struct_field(entry, "weight"))
        reward += pc.fill_null(product, 0.0).to_numpy(zero_copy_only=False)
    # Episodes without traces still arrive: a row each (no trace id), for the group's completion.
    empty = np.flatnonzero(per_episode == 0)
    at = np.concatenate([line, empty])
    order = np.argsort(at, kind="stable")

    def rows(values: np.ndarray | pa.Array, fill: object) -> pa.Array:
        filler = pa.array([fill] * len(empty), type=values.type) if isinstance(values, pa.Array) else None
        if isinstance(values, pa.Array):
            return pa.concat_arrays([values, filler]).take(pa.array(order))
        return pa.array(np.concatenate([values, np.full(len(empty), fill)])[order])

    episode_of = np.concatenate([line, empty])[order]
    return pa.table(
        {
            "kind": pa.array(np.full(len(order), kind)),
            "file_step": pa.array(np.full(len(order), step, dtype=np.int64)),
            "line": pa.array(episode_of.astype(np.int64)),
            "trace_index": rows(trace_index.astype(np.int64), -1),
            "episode": episode_id.take(pa.array(episode_of)),
            "group": group.take(pa.array(episode_of)),
            "env": env.take(pa.array(episode_of)),
            "trace_id": rows(trace_id, None),
            "agent": rows(agent, None),
            "member": rows(
                (trainable.to_numpy(zero_copy_only=False) & ok.to_numpy(zero_copy_only=False)) & (sampled_tokens > 0),
                False,
            ),
            "reward": rows(reward, 0.0),
            "sampled_tokens": rows(sampled_tokens.astype(np.int64), 0),
            "num_output_tokens": rows(output_tokens.astype(np.int64), 0),
            "num_total_tokens": rows(total_tokens.astype(np.int64), 0),
            "num_turns": rows(turns.astype(np.int64), 0),
            "advantage": rows(recorded, np.nan),
        }
    )


def _dense(values: pa.Array) -> np.ndarray:
    """Codes 0..K-1 of a string column (in first-seen order)."""
    return pc.dictionary_encode(values).indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _effective_advantages(effective: pa.Table, trace_id: pa.Array, paths: list[Path]) -> tuple[np.ndarray, int]:
    """Each ``all`` trace's advantage in ``effective`` (NaN where not shipped), and how many shipped traces are of
    episodes not in the files given (an earlier step not loaded)."""
    shipped = effective.filter(pc.is_valid(effective.column("trace_id")))
    shipped_id = columns.plain(shipped.column("trace_id"))
    if len(pc.unique(shipped_id)) != len(shipped_id):
        raise InputError(
            "ship a trace twice",
            file=str(paths[0].parent.parent.parent),
            field="traces[].id",
            expected="each trace in one effective file",
        )
    advantage = shipped.column("advantage").to_numpy()
    if np.isnan(advantage).any():
        first = int(np.flatnonzero(np.isnan(advantage))[0])
        raise InputError(
            "has a shipped trace without advantages",
            file=str(paths[0]),
            field="traces[].nodes[].advantages",
            row=int(shipped.column("line")[first].as_py()),
            expected="advantages on every sampled node of effective",
        )
    at = pc.index_in(trace_id, value_set=shipped_id).to_numpy(zero_copy_only=False)
    recorded = np.full(len(trace_id), np.nan)
    found = ~np.isnan(at.astype(np.float64))
    recorded[found] = advantage[at[found].astype(np.int64)]
    unmatched = len(shipped_id) - int(found.sum())
    return recorded, unmatched


NOT_SCORED = "group not scored by the end of the dump"


def _unscored_groups(episodes: pa.Table, group_code: np.ndarray, recorded: np.ndarray) -> np.ndarray:
    """Per group code: whether prime-rl had not scored the group by the end of the dump, so gave none of its traces
    an advantage. A group is scored when its ``group_size``-th episode arrives; ``group_size`` is the env's config,
    not dumped, so it is read as the most episodes a group of the env holds: a group with fewer, none of whose
    traces was shipped, was still waiting (a cancelled group is scored short, and ships its non-zero advantages)."""
    groups = int(group_code.max()) + 1 if len(group_code) else 0
    episode_rows = episodes.column("trace_index").to_numpy() <= 0  # a row per episode: its first trace, or none
    held = np.bincount(group_code[episode_rows], minlength=groups)
    env = _dense(columns.plain(episodes.column("env")))
    group_env = np.zeros(groups, dtype=np.int64)
    group_env[group_code] = env
    fullest = np.zeros(int(env.max()) + 1 if len(env) else 0, dtype=np.int64)
    np.maximum.at(fullest, group_env, held)
    shipped = np.zeros(groups, dtype=bool)
    shipped[group_code[~np.isnan(recorded)]] = True
    unscored: np.ndarray = (held < fullest[group_env]) & ~shipped
    return unscored


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """The ``all`` files pooled over the run (a group can span two step directories), each group's members in the
    step where its last episode arrived, advantages joined from ``effective`` by trace id; one table per step."""
    kinds = [_place(path)[1] for path in paths]
    arrived = [table for table, kind in zip(reduced, kinds, strict=True) if kind == "all"]
    if not arrived:
        raise InputError(
            "holds effective files only: they carry only the shipped traces of each group, so no group's baseline "
            "can be recomputed from them",
            file=str(paths[0]),
            expected="the run's all files too (give the run's output directory)",
        )
    episodes = pa.concat_tables(arrived)
    steps = np.unique(episodes.column("file_step").to_numpy())
    if len(np.unique(steps)) != sum(kind == "all" for kind in kinds):
        raise InputError("holds a step twice", file=str(paths[0]), expected="one all/traces.jsonl per step")
    # Arrival order over the run: (step, line); a group is scored when its last episode arrives.
    arrival = episodes.column("file_step").to_numpy() * (1 << 32) + episodes.column("line").to_numpy()
    group_code = _dense(columns.plain(episodes.column("group")))
    done = np.zeros(int(group_code.max()) + 1 if len(group_code) else 0, dtype=np.int64)
    np.maximum.at(done, group_code, arrival)
    row_done = done[group_code]
    traced = episodes.column("trace_index").to_numpy() >= 0
    ids = columns.plain(episodes.column("trace_id")).filter(pa.array(traced))
    if len(pc.unique(ids)) != len(ids):
        raise InputError("has a trace id twice", file=str(paths[0]), field="traces[].id", expected="unique trace ids")
    member = episodes.column("member").to_numpy(zero_copy_only=False)
    effective = [table for table, kind in zip(reduced, kinds, strict=True) if kind == "effective"]
    recorded, unmatched = (
        _effective_advantages(pa.concat_tables(effective), columns.plain(episodes.column("trace_id")), paths)
        if effective
        else (np.full(episodes.num_rows, np.nan), 0)
    )
    shipped_outsider = ~np.isnan(recorded) & ~member
    if shipped_outsider.any():
        first = int(np.flatnonzero(shipped_outsider)[0])
        raise InputError(
            "ships a trace that is no group member (not trainable, not ok, or without a sampled token)",
            file=str(paths[0]),
            field="traces[].ok",
            row=int(episodes.column("line")[first].as_py()),
            expected="only trainable, ok traces with sampled tokens in effective",
        )
    unscored = _unscored_groups(episodes, group_code, recorded)
    # Scoring order: groups in completion order, episodes in arrival order, traces in episode order.
    order = np.lexsort((episodes.column("trace_index").to_numpy(), arrival, row_done))
    order = order[member[order]]
    rows = episodes.take(pa.array(order))
    group_step = (row_done[order] >> 32).astype(np.int64)
    from_start = len(steps) > 0 and steps[0] == 1 and np.array_equal(steps, np.arange(1, len(steps) + 1))
    output = rows.column("num_output_tokens").to_numpy()
    canonical_rows = {
        "reward": rows.column("reward"),
        "prompt": rows.column("group"),
        "trajectory": rows.column("episode"),
        "step": pa.array(group_step),
        "response_length": rows.column("sampled_tokens"),
        "recorded_advantage": pa.array(recorded[order], from_pandas=True),
        ENV: rows.column("env"),
        AGENT: rows.column("agent"),
        # The length penalty's inputs (trace.py's token properties), named as the presets read them.
        OUTPUT_TOKENS: rows.column("num_output_tokens"),
        INPUT_TOKENS: pa.array(rows.column("num_total_tokens").to_numpy() - output),
        TURNS: rows.column("num_turns"),
        SCORING_ORDER: pa.array(np.arange(len(order)) if from_start else np.full(len(order), None)).cast(pa.int64()),
        "arrival_step": rows.column("file_step"),
        "trace_id": rows.column("trace_id"),
        NOT_TRAINED: pc.if_else(pa.array(unscored[group_code[order]]), NOT_SCORED, pa.scalar(None, pa.string())),
    }
    table = pa.table(canonical_rows)
    # Groups whose episodes arrived in more than one step directory (audited whole, in their completion step).
    group_rows = _dense(columns.plain(rows.column("group")))
    first_step = np.full(int(group_rows.max()) + 1 if len(group_rows) else 0, np.iinfo(np.int64).max)
    np.minimum.at(first_step, group_rows, rows.column("file_step").to_numpy())
    spanning = np.flatnonzero(first_step[group_rows] != group_step)
    notes = []
    if len(spanning):
        spans = sorted({(int(first_step[group_rows[i]]), int(group_step[i])) for i in spanning})
        count = len(np.unique(group_rows[spanning]))
        notes.append(
            f"{count} group{'s' if count != 1 else ''} arrived over two step directories "
            f"({', '.join(f'step_{a} to step_{b}' for a, b in spans)}): prime-rl scores a group when its last "
            "episode arrives, so each is audited whole in that step"
        )
    if not from_start:
        notes.append(
            f"the dumps hold steps {', '.join(map(str, steps))}, not every step from step_1: groups begun before "
            "the first step given may be partial, and rae's running baselines cannot be recovered"
        )
    if unmatched:
        notes.append(f"{unmatched} shipped traces belong to episodes of steps not given; their advantages are not read")
    result = []
    for step in np.unique(group_step):
        piece = table.filter(pc.equal(table.column("step"), int(step)))
        canonical = make_table(
            **{name: piece.column(name) for name in piece.column_names},
        )
        in_step = episodes.column("file_step").to_numpy() == step
        found = {
            "episodes (lines of all)": int((in_step & (episodes.column("trace_index").to_numpy() <= 0)).sum()),
            "traces": int((in_step & traced).sum()),
            "group members (a row each)": piece.num_rows,
            "traces left out (not trainable, not ok, or no sampled token)": int((in_step & traced & ~member).sum()),
            "groups": len(pc.unique(piece.column("prompt"))),
            "shipped traces with recorded advantages": int(
                pc.sum(pc.is_valid(piece.column("recorded_advantage"))).as_py() or 0
            ),
            "groups not scored by the end of the dump": len(
                pc.unique(piece.filter(pc.is_valid(piece.column(NOT_TRAINED))).column("prompt"))
            ),
        }
        label = "prime-rl (prompt = group.id, trajectory = episode id, a row per member trace)"
        stamped = with_trained_default(with_found(canonical, {label: found}, notes), *DEFAULT)
        result.append(with_facts(stamped, estimator_per=ENV))
    return result


LOADER = Format(
    name="prime_rl",
    description="prime-rl rollouts/step_{N}/train/{all,effective}/traces.jsonl (verifiers episodes, a row per trace)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    reads="prime-rl's own keys (prompt = group.id, trajectory = episode id, reward = sum of score x weight, "
    "advantages from effective by trace id)",
    prompt="group.id",
    trajectory="episode id",
    reward="sum of rewards' score x weight",
    advantage="effective traces' node advantages (joined on the trace id)",
    trained_with=(DEFAULT,),
    cannot_audit=CANNOT_AUDIT,
)
