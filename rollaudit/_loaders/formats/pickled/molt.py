"""Molt's rollout dumps (``--train.rollout_dump_dir``) to the canonical table, read without running anything.

Molt's generator (``GenerateSamplesActor.fit``, rl_trainer.py, 2d62608) writes each generation batch with
``torch.save(samples, {rollout_dump_dir}/rollout_step{global_step}.pt)``: a list of ``Experience`` dataclasses of
B samples each. The safe reader (:mod:`...torchsave`) keeps an Experience's fields (a
:class:`~...torchsave.unpickle.Record`); its heavy tensors sit behind a ``ray.ObjectRef`` that names a Ray session
long gone, read as an inert placeholder and never resolved.

Columns: ``step`` = N of the file name, ``position`` = the sample's place in the file, ``prompt`` = ``group_ids``
(a uuid per prompt group), ``trajectory`` = ``rollout_ids`` (a uuid per rollout: the segments of a multi-turn
rollout share it), ``reward`` = ``rewards`` as stored (unclipped), ``clipped_reward`` = the same clipped to the run's
``--reward.clip_range`` (default -10, 10; float32, as Molt clamps it before every estimator), ``response_length`` =
the action tokens (``action_mask``), over which Molt whitens. No advantages are written: Molt computes them after
the dump, in the trainer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ...._errors import InputError, RollauditWarning, warn
from ...._table import NOT_TRAINED, found_in, make_table, notes_in, with_found, with_trained_default
from ...arrow import columns
from ...base import Format
from ...config import Setting
from ...torchsave.torch_zip import TorchArchive
from ...torchsave.unpickle import Record
from .miles import pickle_ends

if TYPE_CHECKING:
    from ...config import RunConfig
    from ...options import LoadOptions

_FILE = re.compile(r"^rollout_step(\d+)\.pt$")
_EXPERIENCE = "molt.trainer.algorithm.experience.Experience"
_OPAQUE = frozenset({"ray.ObjectRef"})  # the heavy tensors' handle: an id in a Ray session long gone
CLIPPED = "clipped_reward"
DEFAULT_CLIP = (-10.0, 10.0)
ESTIMATORS = ("reinforce", "grpo", "dr_grpo", "rloo", "reinforce_baseline", "gae", "on_policy_distill")
PRESET_OF = {
    "grpo": "molt-grpo",
    "dr_grpo": "molt-dr-grpo",
    "rloo": "molt-rloo",
    "reinforce_baseline": "molt-reinforce-baseline",
}
DEFAULT_KL = 0.01
REINFORCE = (
    "Molt's default estimator reinforce (REINFORCE++) is token-level: each sample's clipped reward on its last "
    "action token plus -kl_coef x a per-token KL whose log-probs the dump does not hold (--algo.kl.init_coef, "
    "0.01 by default), whitened over the batch's action tokens: not reproducible from the dump"
)
# Molt's own argument names (its CLI's dotted flags, hierarchized), as a config named with --config spells them.
SETTINGS = (
    Setting("estimator", ("algo.advantage.estimator",), "str", ESTIMATORS),
    Setting("clip_range", ("reward.clip_range",), "range"),
    Setting("kl_coef", ("algo.kl.init_coef",), "float"),
    Setting("kl_use_loss", ("algo.kl.use_loss",), "bool"),
    Setting("gamma", ("algo.advantage.gamma",), "float"),
    Setting("no_whiten", ("algo.advantage.no_whiten",), "bool"),
    Setting("actor_nodes", ("actor.num_nodes",), "int"),
    Setting("actor_gpus", ("actor.num_gpus_per_node",), "int"),
    Setting("cp_size", ("fsdp.cp_size",), "int"),
    Setting("tp_size", ("fsdp.tp_size",), "int"),
)
CANNOT_AUDIT = (
    "the first generation batch: Molt's async loop hands the writer the step before it is incremented, so two "
    "batches are written as rollout_step0.pt and the first (trained) is overwritten (not with force_sync_mode)",
    "the rows that balance_experiences drops after the dump (the trailing remainder over the data-parallel "
    "ranks), unless the config states the actor's GPUs: otherwise they are audited as trained",
    "the default estimator reinforce: its per-token KL is not in the dump",
)


def detect(path: Path) -> bool:
    """A torch.save zip whose pickle starts with Molt's ``Experience`` class, whatever the file's name."""
    ends = pickle_ends(path)
    return ends is not None and b"molt.trainer.algorithm.experience" in ends[0] and b"Experience" in ends[0]


def expand_directory(directory: Path) -> list[Path] | None:
    """A ``rollout_dump_dir``'s ``rollout_step{N}.pt`` files (or those of a ``rollout_dump`` folder below)."""
    for folder in (directory, directory / "rollout_dump"):
        if folder.is_dir():
            files = [path for path in folder.iterdir() if _FILE.match(path.name) and path.is_file()]
            if files:
                return files
    return None


def _numbers(value: Any, path: Path, field: str, index: int, rows: int, dtype: Any) -> np.ndarray:
    """An Experience field as ``rows`` values (a tensor of shape (B,) or (B, 1))."""
    array = value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else value
    if not isinstance(array, np.ndarray) or array.size != rows:
        raise InputError(
            f"experience {index}: {field} is not {rows} values",
            file=str(path),
            field=field,
            expected="a tensor of one value per sample",
        )
    return array.reshape(rows).astype(dtype)


def _ids(value: Any, path: Path, field: str, index: int) -> list[str]:
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(item, str) and item for item in value):
        raise InputError(
            f"experience {index}: {field} is not a list of ids",
            file=str(path),
            field=field,
            expected="Molt's uuid hex strings, one per sample",
        )
    return list(value)


def read(path: Path, options: LoadOptions) -> pa.Table:
    """One ``rollout_step{N}.pt``: a row per sample (an Experience holds B of them)."""
    match = _FILE.match(path.name)
    with TorchArchive(path) as archive:
        top = archive.unpickle(lazy_tensors=True, warn=False, records=frozenset({_EXPERIENCE}))
        others = [name for name in archive.unknown_globals if name not in _OPAQUE]
        if others:
            warn(f"{path}: classes read as inert placeholders: {', '.join(others[:8])}", RollauditWarning)
        if not isinstance(top, list) or not all(isinstance(item, Record) for item in top):
            raise InputError(
                "is not a list of Molt Experience objects", file=str(path), expected="Molt's rollout_step{N}.pt"
            )
        groups: list[str] = []
        rollouts: list[str] = []
        rewards, tokens, experiences = [], [], []
        for index, experience in enumerate(top):
            fields = experience.fields
            group = _ids(fields.get("group_ids"), path, "group_ids", index)
            rollout = _ids(fields.get("rollout_ids"), path, "rollout_ids", index)
            if len(rollout) != len(group):
                raise InputError(
                    f"experience {index}: {len(group)} group_ids but {len(rollout)} rollout_ids",
                    file=str(path),
                    field="rollout_ids",
                    expected="one rollout id per sample",
                )
            rows = len(group)
            rewards.append(_numbers(fields.get("rewards"), path, "rewards", index, rows, np.float32))
            mask = fields.get("action_mask")
            mask = mask.numpy() if hasattr(mask, "numpy") else mask
            if not isinstance(mask, np.ndarray) or mask.ndim != 2 or mask.shape[0] != rows:
                raise InputError(
                    f"experience {index}: action_mask is not one row per sample",
                    file=str(path),
                    field="action_mask",
                    expected="a (B, T) mask",
                )
            tokens.append(mask.astype(bool).sum(axis=1))
            experiences.append(np.full(rows, index, dtype=np.int64))
            groups += group
            rollouts += rollout
    if not groups:
        raise InputError("holds no sample", file=str(path), expected="Molt's rollout_step{N}.pt")
    step = columns.name_step(match.group(1), path) if match else 0
    reward = np.concatenate(rewards)
    table = make_table(
        reward=reward.astype(np.float64),
        prompt=groups,
        trajectory=rollouts,
        step=np.full(len(reward), step, dtype=np.int64),
        response_length=np.concatenate(tokens).astype(np.float64),
        experience=np.concatenate(experiences),
    )
    found = {
        "samples": table.num_rows,
        "groups": len(set(groups)),
        "rollouts": len(set(rollouts)),
        "rollouts of several segments": len(rollouts) - len(set(rollouts)),
    }
    return with_found(table, {"molt (prompt = group_ids, trajectory = rollout_ids)": found})


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """One file per step; the clipped reward and the run's estimator from its config (or Molt's defaults)."""
    config = options.run_config
    low, high = config.get("clip_range", DEFAULT_CLIP) if config is not None else DEFAULT_CLIP
    scheme, why = trained_default(config)
    source = config.source if config is not None and "estimator" in config else None
    notes = []
    if any(path.name == "rollout_step0.pt" for path in paths):
        notes.append(
            "rollout_step0.pt holds Molt's second generation batch unless the run set force_sync_mode: its async "
            "loop writes the first two under step 0, and the first, trained, is lost"
        )
    steps = columns.one_file_per_step(paths, reduced, "Molt rollout dumps", "one rollout_step{N}.pt per step")
    ranks = data_parallel_ranks(config)
    if ranks is not None:
        assert config is not None
        notes.append(
            f"{ranks} data-parallel ranks ({config.cite('actor_nodes', 'actor_gpus', 'cp_size', 'tp_size')}): "
            "balance_experiences drops each step's trailing experiences past a multiple of them, before the "
            "advantages; those rows are not trained"
        )
    combined = []
    for table in steps:
        stored = table.column("reward").to_numpy().astype(np.float32)
        clipped = np.clip(stored, np.float32(low), np.float32(high)).astype(np.float64)
        table = table.append_column(CLIPPED, pa.array(clipped))
        if ranks is not None:
            table = table.append_column(NOT_TRAINED, _balanced_out(table.column("experience").to_numpy(), ranks))
        if notes:
            table = with_found(table, found_in(table), [*notes_in(table), *notes])
        combined.append(with_trained_default(table, scheme, why, source))
    return combined


def data_parallel_ranks(config: RunConfig | None) -> int | None:
    """Molt's data-parallel ranks (actor nodes x GPUs per node over context x tensor parallelism), where the run's
    config states the actor's GPUs; None otherwise (nothing is known to be dropped)."""
    if config is None or "actor_gpus" not in config:
        return None
    world = int(config.get("actor_nodes", 1)) * int(config.get("actor_gpus"))
    return max(1, world // max(1, int(config.get("cp_size", 1)) * int(config.get("tp_size", 1))))


def _balanced_out(experience: np.ndarray, ranks: int) -> pa.Array:
    """``balance_experiences``' reason for the rows of the trailing experiences past a multiple of ``ranks``."""
    count = int(experience.max()) + 1 if len(experience) else 0
    kept = count - count % ranks
    reason = f"dropped by balance_experiences (the remainder over {ranks} data-parallel ranks)"
    return pa.array([reason if index >= kept else None for index in experience.tolist()], pa.string())


def trained_default(config: RunConfig | None) -> tuple[str | None, str]:
    """The run's preset from its config, else Molt's default (reinforce: not reproducible), and why."""
    if config is None or "estimator" not in config:
        return None, REINFORCE + " (no config names the estimator: Molt's CLI default assumed)"
    estimator = config.get("estimator")
    cited = config.cite("estimator", "clip_range", "kl_coef", "kl_use_loss", "gamma", "no_whiten")
    if estimator in PRESET_OF:
        unwhitened = estimator == "reinforce_baseline" and config.get("no_whiten")
        return PRESET_OF[estimator] + ("(whiten=none)" if unwhitened else ""), f"Molt {estimator}: {cited}"
    if estimator == "reinforce":
        no_kl = config.get("kl_coef", DEFAULT_KL) == 0.0 or bool(config.get("kl_use_loss"))
        if not no_kl:
            return None, f"{REINFORCE} ({cited})"
        if config.get("gamma", 1.0) != 1.0:
            return None, f"Molt reinforce discounts its returns token by token (gamma != 1): no preset ({cited})"
        if config.get("no_whiten"):
            return None, f"Molt reinforce without whitening trains on the raw rewards: no group scheme ({cited})"
        return "molt-reinforce-nokl", f"Molt reinforce with no KL in its returns: {cited}"
    return None, f"Molt {estimator} needs what the dump does not hold (a critic or a teacher): {cited}"


LOADER = Format(
    name="molt",
    description="Molt rollout_dump_dir/rollout_step{N}.pt (torch.save of Experience objects)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    reads="Molt's Experience fields (prompt = group_ids, trajectory = rollout_ids, reward = rewards), without "
    "running the pickle",
    prompt="group_ids",
    trajectory="rollout_ids",
    reward="rewards (unclipped; clipped_reward as the estimators see it)",
    trained_with=(
        (None, REINFORCE),
        (
            "molt-grpo",
            "with --algo.advantage.estimator grpo in the run's config (likewise dr_grpo, rloo, reinforce_baseline)",
        ),
    ),
    cannot_audit=CANNOT_AUDIT,
    settings=SETTINGS,
    config_where="none saved by Molt (its CLI arguments reach W&B only): --config, spelled as its flags "
    "(algo.advantage.estimator, reward.clip_range, ...)",
)
