"""Rebuilds the verl RLOO fixtures of ``tests/findings/test_upstream_verl.py`` with verl's own code.

Upstream: verl-project/verl, main at 1dda039b9c6311889a9c9a26040677e1254814f9 (2026-08-22, the commit the
verl corpus README pins). Functions run: ``verl/trainer/ppo/ray_trainer.py::compute_advantage`` with
``adv_estimator`` ``rloo`` (-> ``verl/trainer/ppo/core_algos.py::compute_rloo_outcome_advantage``) and
``rloo_vectorized`` (-> ``core_algos.compute_rloo_vectorized_outcome_advantage``), on a ``verl.DataProto`` whose
``uid`` is the prompt key, as verl's trainer calls it. The two treat a one-sample group differently: ``rloo`` leaves
its score unchanged (the raw reward), ``rloo_vectorized`` multiplies it by ``(c > 1)`` (0). verl #7150 is the
report of that difference.

The batches are ours: 3 steps of 8 prompts, 1 to 6 samples each (two one-sample prompts per step, one of them with
reward 0 in step 1), rewards 0/1 or continuous (float32, as verl holds them), each on the last response token of a
random-length response. Both estimators see the same batch; the advantage written is the row's value at its first
response token (float32 as float64).

Run from the repository root, outside the project's environment (the tests import nothing of this)::

    git -C VERL_MIRROR archive --prefix=verl/ 1dda039b9c6311889a9c9a26040677e1254814f9 | tar x -C /tmp
    python -m tests.findings.upstream_verl --verl /tmp/verl [--out tests/fixtures/findings]

in a Python with torch, numpy, pyarrow, tensordict, omegaconf, codetiming, tqdm, cachetools and ray installed (the
heavy optional imports of verl's trainer modules are replaced by inert stubs, see ``install_stubs``; none of them is
called by the code run).

Writes ``verl_rloo.parquet`` (``rloo``) and ``verl_rloo_vectorized.parquet`` (``rloo_vectorized``), columns
``step``, ``prompt_id``, ``reward``, ``advantage``.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import sys
import types
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

COMMIT = "1dda039b9c6311889a9c9a26040677e1254814f9"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "findings"
RLOO, RLOO_VECTORIZED = "verl_rloo.parquet", "verl_rloo_vectorized.parquet"
STEPS = (0, 1, 2)
RESPONSE_LENGTH = 16

# ---------------------------------------------------------------------------------------------------------------------
# Importing upstream trainer modules outside their environment.

STUBBED = frozenset(
    {
        "transformers", "torchdata", "datasets", "peft", "accelerate", "vllm", "sglang", "flash_attn",
        "liger_kernel", "megatron", "mbridge", "mindspeed", "torchtitan", "veomni", "PIL", "wandb", "tensorboard",
        "torchvision", "qwen_vl_utils", "mathruler", "pylatexenc", "math_verify", "word2number", "nvtx", "zmq",
        "triton", "torch_npu", "huggingface_hub", "dill", "cupy", "nixl", "mooncake", "transfer_queue", "agentops",
        "litellm", "openai", "opentelemetry", "fastapi", "uvicorn", "aiohttp", "portpicker",
    }
)  # fmt: skip
"""Top-level packages replaced by inert modules: only so that upstream modules import."""


class _Anything(type):
    """Any attribute of a stub module: a class whose attributes, items and instances are again such classes."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (object,), {})

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return _Anything("instance", (object,), {})

    def __getitem__(cls, item: Any) -> Any:
        return cls


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (object,), {})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None) -> Any:
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "99.0.0"  # type: ignore[attr-defined]  # version gates of verl's optional backends
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install_stubs(extra: Iterable[str] = ()) -> None:
    """Put the inert stubs (``STUBBED`` and ``extra``) first on the import path, once."""
    if not any(isinstance(finder, _StubFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder(STUBBED | set(extra)))


def import_from(checkout: Path, module: str, *, fresh: Sequence[str] = ()) -> Any:
    """``module`` imported from ``checkout`` (put first on ``sys.path``); the packages named in ``fresh`` are
    dropped from ``sys.modules`` first, so that a second checkout of the same package is imported anew."""
    import importlib

    install_stubs()
    for name in list(sys.modules):
        if name.split(".")[0] in fresh:
            del sys.modules[name]
    sys.path.insert(0, str(checkout.resolve()))
    importlib.invalidate_caches()
    return importlib.import_module(module)


# ---------------------------------------------------------------------------------------------------------------------
# Batches as verl holds them.


def seeded_uuids(rng: np.random.Generator, count: int) -> list[str]:
    """uuid4-format strings from ``rng`` (verl and agent-lightning draw their keys with ``uuid.uuid4``)."""
    return [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(count)]


def as_float32(values: Sequence[float]) -> np.ndarray:
    """The rewards as verl holds them (float32), widened back to float64 exactly."""
    return np.asarray(values, dtype=np.float32).astype(np.float64)


def token_tensors(reward: np.ndarray, rng: np.random.Generator) -> tuple[Any, Any]:
    """(token_level_rewards, response_mask), float32 / int64 of shape (rows, RESPONSE_LENGTH): responses of 3 to
    RESPONSE_LENGTH tokens, the reward on each response's last token."""
    import torch

    lengths = rng.integers(3, RESPONSE_LENGTH + 1, len(reward))
    mask = torch.zeros((len(reward), RESPONSE_LENGTH), dtype=torch.int64)
    scores = torch.zeros((len(reward), RESPONSE_LENGTH), dtype=torch.float32)
    for row, length in enumerate(lengths):
        mask[row, : int(length)] = 1
        scores[row, int(length) - 1] = float(reward[row])
    return scores, mask


def first_token_values(advantages: Any, mask: Any) -> np.ndarray:
    """Each row's advantage at its first response token (float32 widened to float64)."""
    first = mask.argmax(dim=-1)
    values = advantages.gather(1, first.unsqueeze(-1)).squeeze(-1)
    return np.asarray(values.double().numpy(), dtype=np.float64)


def write_table(columns: dict[str, Any], path: Path) -> Path:
    """``columns`` as a Parquet file (int64 ``step``, string keys, float64 values)."""
    types_ = {"step": pa.int64(), "reward": pa.float64(), "advantage": pa.float64()}
    table = pa.table({name: pa.array(values, type=types_.get(name, pa.string())) for name, values in columns.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


# ---------------------------------------------------------------------------------------------------------------------
# The RLOO batches.

SIZES = ((4, 1, 3, 6, 2, 5, 1, 4), (1, 5, 3, 1, 6, 2, 4, 3), (3, 6, 1, 2, 4, 1, 5, 3))
"""Samples per prompt, per step: two one-sample prompts in each."""


def rloo_batch(seed: int = 7150) -> dict[str, Any]:
    """step, prompt_id (uuid strings) and rewards (float32 values): even prompts 0/1, odd prompts continuous in
    steps of 0.05; the one-sample prompt of step 1 at place 3 has reward 0 (where both estimators give 0)."""
    rng = np.random.default_rng(seed)
    steps: list[int] = []
    prompts: list[str] = []
    rewards: list[float] = []
    for step, sizes in zip(STEPS, SIZES, strict=True):
        for place, (size, key) in enumerate(zip(sizes, seeded_uuids(rng, len(sizes)), strict=True)):
            if place % 2 == 0:
                values = rng.integers(0, 2, size).astype(float)
            else:
                values = np.round(rng.integers(1, 20, size) * 0.05, 2)
            if size == 1:
                values = np.array([0.0 if (step, place) == (1, 3) else float(np.round(rng.uniform(0.2, 1.0), 2))])
            steps += [step] * size
            prompts += [key] * size
            rewards += [float(value) for value in values]
    return {"step": np.asarray(steps), "prompt_id": prompts, "reward": as_float32(rewards)}


def run_verl(verl: Path, batch: dict[str, Any], estimator: str) -> np.ndarray:
    """verl's ``compute_advantage`` with ``adv_estimator=estimator`` on the batch, step by step (one call per
    training step, as the trainer makes it)."""
    ray_trainer = import_from(verl, "verl.trainer.ppo.ray_trainer")
    protocol = import_from(verl, "verl.protocol")
    config = import_from(verl, "verl.trainer.config").AlgoConfig()
    scores, mask = token_tensors(batch["reward"], np.random.default_rng(1))
    uid = np.asarray(batch["prompt_id"], dtype=object)
    out = np.zeros(len(uid))
    for step in STEPS:
        at = np.flatnonzero(batch["step"] == step)
        data = protocol.DataProto.from_dict(
            tensors={"token_level_rewards": scores[at].clone(), "response_mask": mask[at].clone()},
            non_tensors={"uid": uid[at]},
        )
        data = ray_trainer.compute_advantage(data, adv_estimator=estimator, config=config)
        out[at] = first_token_values(data.batch["advantages"], data.batch["response_mask"])
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--verl", type=Path, required=True, help=f"a verl-project/verl checkout at {COMMIT}")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args(argv)
    batch = rloo_batch()
    for name, estimator in ((RLOO, "rloo"), (RLOO_VECTORIZED, "rloo_vectorized")):
        advantage = run_verl(args.verl, batch, estimator)
        columns = {key: batch[key] for key in ("step", "prompt_id", "reward")} | {"advantage": advantage}
        path = write_table(columns, args.out / name)
        print(f"{path}: {len(advantage)} rows ({estimator})")


if __name__ == "__main__":
    main()
