"""SkyRL's training-input dumps: recognised without running them and refused in one line naming what is missing.

The pickles are written here with SkyRL's class layout, module by module as SkyRL names them (its code is not
imported or copied): ``TrainingInputBatch(TensorBatch)`` where ``TensorBatch`` is a ``dict`` subclass with a
``metadata`` attribute. Three layouts, by SkyRL version: ``__getstate__`` storing ``torch.save`` bytes per key and
the dict items pickled too (skyrl-train, 2025-06 to 2026-01); the same with ``{"format": "numpy", ...}`` records
(2026-01 to 2026-03); and ``__reduce__`` returning ``_rebuild_tensor_batch(cls, state)`` (2026-03 on). The trainer
pops ``rewards`` (``custom_rewards`` / ``rm_rewards`` at first) and ``metadata["uids"]`` before it dumps.
"""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import rollaudit
from rollaudit import InputError
from rollaudit._loaders.registry import FORMATS

ROOT = Path(__file__).resolve().parents[2]
CURRENT = "skyrl.backends.skyrl_train.training_batch"
FIRST = "skyrl_train.training_batch"


def _module(name: str, layout: str) -> types.ModuleType:
    """A throwaway module named as SkyRL's, holding a batch class pickled the way ``layout`` says."""
    module = types.ModuleType(name)

    def rebuild(cls, state):
        batch = dict.__new__(cls)
        batch.__setstate__(state)
        return batch

    def encode(value: torch.Tensor):
        if layout == "torch_bytes":
            buffer = io.BytesIO()
            torch.save(value, buffer)
            return buffer.getvalue()
        array = value.numpy()
        return {"format": "numpy", "data": array.tobytes(), "shape": array.shape, "dtype": str(array.dtype)}

    class TensorBatch(dict):
        metadata = None

        def __getstate__(self):
            return {
                "batch_dict": {key: encode(value) for key, value in self.items()},
                "batch_size": len(next(iter(self.values()))),
                "device": torch.device("cpu"),
                "metadata": self.metadata,
            }

        def __setstate__(self, state):
            self.metadata = state["metadata"]

        if layout == "reduce":

            def __reduce__(self):
                return (rebuild, (type(self), self.__getstate__()))

    class TrainingInputBatch(TensorBatch):
        pass

    rebuild.__module__ = name
    rebuild.__name__ = rebuild.__qualname__ = "_rebuild_tensor_batch"
    for cls in (TensorBatch, TrainingInputBatch):
        cls.__module__ = name
        cls.__qualname__ = cls.__name__
        setattr(module, cls.__name__, cls)
    module._rebuild_tensor_batch = rebuild
    return module


def write_dump(
    directory: Path, step: int, module: str, layout: str, keep: tuple[str, ...] = (), metadata_keep: tuple = ()
) -> Path:
    """``{directory}/dumped_data/global_step_{step}_training_input.pkl`` as SkyRL's trainer writes it: the batch
    after compute_advantages_and_returns, with the keys in ``keep`` not popped."""
    made = _module(module, layout)
    parents = module.split(".")
    saved = {name: sys.modules.get(name) for name in [".".join(parents[: i + 1]) for i in range(len(parents))]}
    try:
        for index in range(len(parents) - 1):
            sys.modules.setdefault(".".join(parents[: index + 1]), types.ModuleType(".".join(parents[: index + 1])))
        sys.modules[module] = made
        rows, width = 4, 6
        values = {
            "sequences": torch.arange(rows * width).reshape(rows, width),
            "attention_mask": torch.ones(rows, width, dtype=torch.int64),
            "response_mask": torch.ones(rows, 3, dtype=torch.int64),
            "loss_mask": torch.ones(rows, 3),
            "action_log_probs": torch.zeros(rows, 3),
            "advantages": torch.tensor([[0.5] * 3, [-0.5] * 3, [1.0] * 3, [-1.0] * 3]),
            "returns": torch.zeros(rows, 3),
            "rewards": torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]] * 2),
        }
        reward_key = "custom_rewards" if module == FIRST else "rewards"
        values[reward_key] = values.pop("rewards")
        batch = made.TrainingInputBatch(values)
        batch.metadata = {"uids": ["p0", "p0", "p1", "p1"], "response_length": 3, "avg_response_length": 3.0}
        # What the trainer pops before dump_data (unless kept here).
        if reward_key not in keep:
            batch.pop(reward_key)
        if "uids" not in metadata_keep:
            batch.metadata.pop("uids")
        path = directory / "dumped_data" / f"global_step_{step}_training_input.pkl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as stream:
            pickle.dump(batch, stream)  # TensorBatch.save
        return path
    finally:
        for name, module_before in saved.items():
            if module_before is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module_before


LAYOUTS = [(FIRST, "torch_bytes"), (FIRST, "numpy"), (CURRENT, "numpy"), (CURRENT, "reduce")]


@pytest.mark.parametrize(("module", "layout"), LAYOUTS)
def test_every_skyrl_layout_is_recognised_and_refused_naming_rewards_and_uids(tmp_path, module, layout):
    path = write_dump(tmp_path, 3, module, layout)
    assert rollaudit.detect_format(path) == "skyrl"
    for given in (path, tmp_path, tmp_path / "dumped_data"):
        with pytest.raises(InputError) as error:
            rollaudit.load(given)
        line = error.value.line()
        assert "\n" not in line
        assert "without rewards and without uids" in line
        assert "skyrl/train/trainer.py" in line and "metadata['uids']" in line


def test_a_dump_missing_only_one_of_them_names_that_one(tmp_path):
    path = write_dump(tmp_path, 1, CURRENT, "reduce", metadata_keep=("uids",))
    with pytest.raises(InputError, match=r"without rewards: SkyRL's") as error:
        rollaudit.load(path)
    assert "uids (the prompt keys)" not in error.value.line().split(":")[2]
    path = write_dump(tmp_path / "b", 1, CURRENT, "reduce", keep=("rewards",))
    with pytest.raises(InputError, match=r"without uids \(the prompt keys\): SkyRL's"):
        rollaudit.load(path)
    path = write_dump(tmp_path / "c", 1, CURRENT, "reduce", keep=("rewards",), metadata_keep=("uids",))
    with pytest.raises(InputError, match="which no SkyRL version dumps"):
        rollaudit.load(path)


def test_nothing_the_pickle_names_is_run(tmp_path):
    """A SkyRL-looking pickle whose state reaches for os.system: read as inert records, refused as any other."""
    marker = tmp_path / "ran"
    payload = (
        b"\x80\x02"
        + b"c" + CURRENT.encode() + b"\n_rebuild_tensor_batch\n"
        + b"c" + CURRENT.encode() + b"\nTrainingInputBatch\n"
        + b"cos\nsystem\n(V touch " + str(marker).encode() + b"\ntR"
        + b"\x86R."
    )  # fmt: skip
    path = tmp_path / "dumped_data" / "global_step_1_training_input.pkl"
    path.parent.mkdir()
    path.write_bytes(payload)
    assert rollaudit.detect_format(path) == "skyrl"
    with pytest.raises(InputError, match="without rewards and without uids"):
        rollaudit.load(path)
    assert not marker.exists()


def test_damaged_pickle_is_one_line(tmp_path):
    path = write_dump(tmp_path, 2, CURRENT, "reduce")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="cannot unpickle"):
        rollaudit.load(path)


def test_the_command_line_exits_2_with_one_line(tmp_path):
    write_dump(tmp_path, 3, CURRENT, "reduce")
    done = subprocess.run(
        [sys.executable, "-m", "rollaudit", "compare", str(tmp_path), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "SkyRL training-input dump without rewards and without uids" in lines[0]
    assert done.stdout == ""


def test_formats_lists_skyrl_as_refused():
    assert "refused" in FORMATS["skyrl"].description
