"""Rebuild the AReaL fixtures of ``tests/fixtures/findings/`` with AReaL's own reward normalisation.

Upstream: areal-project/AReaL, commit ``cbff54d645d2cd8ee1f1c358a82f3f473588433d`` (the commit of the project's
AReaL corpus). Functions run, unchanged, from that checkout:

* ``areal.utils.data.concat_batch``: concatenates the trajectories (one per prompt here, its rows = the prompt's
  samples) into the training batch and gives ``TrajBatchMeta.traj_group_sizes``;
* ``areal.utils.data.Normalization.__call__`` (and its ``_build_group_slices``), built from
  ``areal.api.cli_args.NormConfig(mean_level="group", std_level="group", std_unbiased=True, eps=1e-5,
  group_size=n)``: the actor's ``reward_norm``. ``PPOActor.compute_advantages`` calls it with
  ``group_sizes=meta.traj_group_sizes``, or ``None`` where the batch carries no metadata; with ``None`` it slices
  the batch into consecutive groups of ``group_size`` rows, and the rows after the last full slice keep mean 0
  and std 0, so they get ``r / eps`` (AReaL #1419, #1673).

Runtime dependencies of those modules that the called functions never use are inert import stubs (listed in
``STUBBED``). Each step is one training batch: its prompts' trajectories in prompt order, float32 rewards (what
the trainer receives), the output float32, stored as float64.

Fixtures (columns ``step``, ``prompt_id`` = the task id, ``reward``, ``advantage`` = AReaL's output per row):

* ``areal_stride_binary``: group_size 4, prompts of 4 rows and a partial last prompt (3, 1, 2 rows), 0/1 rewards,
  no group metadata: the tail rows are ``r / 1e-5``.
* ``areal_stride_continuous``: group_size 8, prompts of 8 rows and a partial last prompt (3, 7, 5 rows),
  continuous rewards, no group metadata.
* ``areal_group_binary``, ``areal_group_continuous``: the same batches with ``group_sizes=traj_group_sizes``
  (correct per-prompt values: the control).
* ``areal_stride_divisible``: group_size 4, every prompt 4 rows, no metadata: the slices are the prompts (control).

Usage (from the repository root)::

    python -m tests.findings.upstream_areal --upstream /path/to/AReaL          # rebuild and compare
    python -m tests.findings.upstream_areal --upstream /path/to/AReaL --write  # rebuild and write

``--upstream`` is a checkout (or ``git archive``) of the commit above: the folder that holds ``areal/``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.findings.upstream_stubs import note_commit, stub_packages

COMMIT = "cbff54d645d2cd8ee1f1c358a82f3f473588433d"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "findings"
EPS = 1e-5
STUBBED = (
    "uvloop", "hydra", "omegaconf", "einops", "torchdata", "transformers", "aiohttp", "requests", "datasets", "ray",
    "wandb", "swanlab", "tensorboardX", "trackio", "openai", "httpx", "flask", "werkzeug", "colorlog", "tenacity",
    "orjson", "pybase64", "psutil", "numba", "etcd3", "lark", "PIL", "torch_memory_saver", "tabulate", "aiofiles",
)  # fmt: skip


@dataclass(frozen=True)
class Design:
    """One fixture: ``sizes`` the rows of each prompt, per step (each step one batch); ``metadata`` whether the
    normalisation gets the batch's ``traj_group_sizes``."""

    name: str
    group_size: int
    sizes: tuple[tuple[int, ...], ...]
    rewards: str
    metadata: bool
    seed: int


def _steps(group_size: int, full: Sequence[int], tails: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    return tuple((group_size,) * count + ((tail,) if tail else ()) for count, tail in zip(full, tails, strict=True))


BINARY = _steps(4, (9, 10, 9), (3, 1, 2))
CONTINUOUS = _steps(8, (5, 4, 5), (3, 7, 5))
DESIGNS = (
    Design("areal_stride_binary", 4, BINARY, "binary", metadata=False, seed=1419),
    Design("areal_stride_continuous", 8, CONTINUOUS, "continuous", metadata=False, seed=1673),
    Design("areal_group_binary", 4, BINARY, "binary", metadata=True, seed=1419),
    Design("areal_group_continuous", 8, CONTINUOUS, "continuous", metadata=True, seed=1673),
    Design("areal_stride_divisible", 4, _steps(4, (10, 10, 10), (0, 0, 0)), "binary", metadata=False, seed=1454),
)


# ---------------------------------------------------------------------------------------------------------------------
# Inputs.


def rewards(design: Design) -> list[list[np.ndarray]]:
    """Per step, per prompt, the rewards (float32). A partial last prompt never has only zeros: its rows would be
    0 under every grouping, so nothing would tell the tail apart."""
    rng = np.random.default_rng(design.seed)
    out: list[list[np.ndarray]] = []
    for sizes in design.sizes:
        step: list[np.ndarray] = []
        for size in sizes:
            if design.rewards == "binary":
                values = rng.integers(0, 2, size).astype(np.float32)
            else:
                values = np.round(rng.uniform(0.05, 1.0, size), 3).astype(np.float32)
            step.append(values)
        last = step[-1]
        if len(last) % design.group_size and not last.any():
            last[int(rng.integers(0, len(last)))] = 1.0
        out.append(step)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Upstream.


def load_upstream(upstream: Path) -> tuple[Any, Any, Any]:
    """(NormConfig, Normalization, concat_batch) from the checkout."""
    if not (upstream / "areal" / "utils" / "data.py").is_file():
        raise SystemExit(f"{upstream}: no areal/utils/data.py (pass the folder that holds areal/)")
    note_commit(upstream, COMMIT)
    stub_packages(STUBBED)
    sys.path.insert(0, str(upstream))
    cli_args = importlib.import_module("areal.api.cli_args")
    data = importlib.import_module("areal.utils.data")
    return cli_args.NormConfig, data.Normalization, data.concat_batch


def build(design: Design, upstream: tuple[Any, Any, Any]) -> pa.Table:
    """The fixture's table: AReaL's reward normalisation of each step's batch."""
    import torch

    norm_config, normalization, concat_batch = upstream
    norm = normalization(
        norm_config(mean_level="group", std_level="group", std_unbiased=True, eps=EPS, group_size=design.group_size)
    )
    steps: list[int] = []
    prompts: list[int] = []
    reward_column: list[np.ndarray] = []
    advantage_column: list[np.ndarray] = []
    task_id = 0
    for step, per_prompt in enumerate(rewards(design)):
        trajectories = [
            {"rewards": torch.from_numpy(values), "attention_mask": torch.ones((len(values), 6), dtype=torch.bool)}
            for values in per_prompt
        ]
        batch, meta = concat_batch(trajectories)
        assert meta.traj_group_sizes == [len(values) for values in per_prompt]
        group_sizes = meta.traj_group_sizes if design.metadata else None
        out = norm(batch["rewards"], group_sizes=group_sizes)
        assert out.dtype == torch.float32
        for values in per_prompt:
            steps += [step] * len(values)
            prompts += [task_id] * len(values)
            task_id += 1
        reward_column.append(batch["rewards"].numpy().astype(np.float64))
        advantage_column.append(out.numpy().astype(np.float64))
    return pa.table(
        {
            "step": pa.array(steps, pa.int64()),
            "prompt_id": pa.array(prompts, pa.int64()),
            "reward": pa.array(np.concatenate(reward_column), pa.float64()),
            "advantage": pa.array(np.concatenate(advantage_column), pa.float64()),
        }
    )


# ---------------------------------------------------------------------------------------------------------------------
# What the tables must show, checked before writing (numpy, not AReaL).


def tail(step: np.ndarray, group_size: int) -> np.ndarray:
    """Rows after the last full slice of ``group_size`` in their step."""
    mask = np.zeros(len(step), dtype=bool)
    for at_step in np.unique(step):
        rows = np.flatnonzero(step == at_step)
        mask[rows[len(rows) - len(rows) % group_size :]] = True
    return mask


def per_prompt(reward: np.ndarray, key: np.ndarray) -> np.ndarray:
    """(r - mean) / (unbiased std + eps) per key; a one-row group 0."""
    out = np.zeros(len(reward))
    for value in np.unique(key):
        rows = key == value
        group = reward[rows]
        std = group.std(ddof=1) if len(group) > 1 else 1.0
        out[rows] = (group - group.mean()) / (std + EPS)
    return out


def check(design: Design, table: pa.Table) -> None:
    step = table.column("step").to_numpy()
    prompt = table.column("prompt_id").to_numpy()
    reward = table.column("reward").to_numpy()
    advantage = table.column("advantage").to_numpy()
    correct = per_prompt(reward, prompt)
    differ = ~np.isclose(advantage, correct, rtol=1e-5, atol=1e-5)
    rows = tail(step, design.group_size)
    if design.metadata or not rows.any():
        assert not differ.any(), f"{design.name}: a control that is not per prompt"
        return
    np.testing.assert_array_equal(differ, rows, err_msg=f"{design.name}: rows that differ are not the tail")
    np.testing.assert_allclose(advantage[rows], (reward[rows] / EPS).astype(np.float32), rtol=1e-6)
    assert table.num_rows and reward[rows].any()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", type=Path, required=True, help="AReaL checkout (the folder holding areal/)")
    parser.add_argument("--write", action="store_true", help="write the fixtures (default: compare with them)")
    parser.add_argument("--out", type=Path, default=FIXTURES, help="fixture folder")
    args = parser.parse_args(argv)
    upstream = load_upstream(args.upstream.resolve())
    failed = 0
    for design in DESIGNS:
        table = build(design, upstream)
        check(design, table)
        path = args.out / f"{design.name}.parquet"
        if args.write:
            args.out.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            print(f"wrote {path} ({table.num_rows} rows, {path.stat().st_size} bytes)")
        elif not path.is_file() or not pq.read_table(path).equals(table):
            print(f"{path}: differs from the rebuilt table")
            failed += 1
        else:
            print(f"{path}: same")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
