"""SkyRL's training-input dumps: recognised, read without running anything, and refused, since they cannot be
audited.

With ``trainer.dump_data_batch=true``, SkyRL's ``RayPPOTrainer.train`` (``skyrl/train/trainer.py``, a9564572; the
fully-async trainer likewise) pickles each step's ``TrainingInputBatch`` to
``{export_path}/dumped_data/global_step_{N}_training_input.pkl`` (``TensorBatch.save``: ``pickle.dump``). Right
before, after ``compute_advantages_and_returns``, it pops the rewards (``training_input.pop("rewards")``) and the
prompt uids (``training_input.metadata.pop("uids")``), as every SkyRL version since the first public one
(skyrl-train, 2025-06-24, then ``custom_rewards`` and ``rm_rewards``) has. What is left (sequences, masks,
log-probs, per-token advantages and returns) holds no reward and no prompt key: no group can be formed.

The pickle goes through the scanner's checks and the restricted unpickler (:mod:`..torchsave`); SkyRL's batch
classes become inert records of the keys they hold, whatever the version's layout: a ``dict`` subclass whose
items and ``__getstate__`` are both pickled (to 2026-03), or ``_rebuild_tensor_batch(cls, state)`` after it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...._errors import InputError
from ...base import Format
from ...torchsave.pickle_scan import Malformed, call_with_stack, skim
from ...torchsave.torch_zip import MAX_PICKLE_BYTES
from ...torchsave.unpickle import RestrictedUnpickler, WholeBuffer, _Allowed

if TYPE_CHECKING:
    import pyarrow as pa

    from ...options import LoadOptions

_FILE = re.compile(r"^global_step_(\d+)_training_input\.pkl$")
_FOLDER = "dumped_data"
_HEAD_BYTES = 4096
_REWARD_KEYS = ("rewards", "custom_rewards")
WHERE = (
    "SkyRL's RayPPOTrainer.train (skyrl/train/trainer.py) pops training_input['rewards'] and "
    "training_input.metadata['uids'] after compute_advantages_and_returns, before dump_data writes the file"
)
CANNOT_AUDIT = ("any group or scheme: the rewards and the prompt uids are popped before the dump is written",)


def detect(path: Path) -> bool:
    """A pickle (protocol 2 or later) that names SkyRL's ``TrainingInputBatch`` of a ``training_batch`` module
    among its first opcodes, whatever the file's name."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(_HEAD_BYTES)
    except OSError:
        return False
    return head[:1] == b"\x80" and b"TrainingInputBatch" in head and b"training_batch" in head


def expand_directory(directory: Path) -> list[Path] | None:
    """The ``global_step_{N}_training_input.pkl`` files of a ``dumped_data`` folder, or of the one below an
    ``export_path``."""
    folder = directory if directory.name == _FOLDER else directory / _FOLDER
    if not folder.is_dir():
        return None
    files = [path for path in folder.iterdir() if _FILE.match(path.name) and path.is_file()]
    return files or None


class _Batch:
    """An inert record of a SkyRL batch: the keys of the items pickled into it and the state it was given."""

    __slots__ = ("keys", "state")
    keys: list[Any]
    state: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> _Batch:
        record = object.__new__(cls)
        record.keys = []
        record.state = None
        return record

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        self.keys.append(key)

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _rebuild(cls: Any = None, state: Any = None, *rest: Any) -> _Batch:
    """SkyRL's ``_rebuild_tensor_batch(cls, state)`` (2026-03 on), as a record."""
    record = _Batch()
    record.state = state
    return record


class _NoStorages:
    """A plain pickle (``pickle.dump``, not ``torch.save``) refers to no storage of an archive."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def storage_member(self, key: str) -> Any:
        raise Malformed("a persistent storage id in a plain pickle")

    def storage_bytes(self, storage: Any) -> bytearray:
        raise Malformed("a persistent storage id in a plain pickle")


class _Unpickler(RestrictedUnpickler):
    """The restricted unpickler, with SkyRL's batch classes and rebuild function as inert records."""

    def find_class(self, module: str, name: str) -> Any:
        if module.rpartition(".")[2] == "training_batch":
            if name == "_rebuild_tensor_batch":
                return _Allowed(_rebuild)
            if name.endswith("Batch"):
                return _Batch
        return super().find_class(module, name)


def _read_pickle(path: Path) -> Any:
    try:
        with open(path, "rb", buffering=0) as stream:
            size = os.fstat(stream.fileno()).st_size
            if size > MAX_PICKLE_BYTES:
                raise InputError(f"is {size:,} bytes, more than rollaudit reads of a pickle", file=str(path))
            data = stream.read(size + 1)
    except OSError as error:
        raise InputError(f"cannot read the file: {error.strerror or error}", file=str(path)) from None
    try:
        data, tuples = skim(data, frozenset())
        unpickler = _Unpickler(WholeBuffer(data), _NoStorages(path), lazy_tensors=True)
        try:
            return call_with_stack(unpickler.load, tuples)
        finally:
            unpickler.release()
    except InputError:
        raise
    except Exception as error:  # the C unpickler raises many types on damaged or hostile input
        text = " ".join(str(error).split())[:160]
        raise InputError(
            f"cannot unpickle ({type(error).__name__}: {text})",
            file=str(path),
            expected="a SkyRL TrainingInputBatch pickle",
        ) from None


def read(path: Path, options: LoadOptions) -> pa.Table:
    """Refuse the dump in one line naming what it lacks (rewards, uids) and where SkyRL drops them."""
    batch = _read_pickle(path)
    if not isinstance(batch, _Batch):
        raise InputError(
            "is a pickle naming SkyRL's TrainingInputBatch, but not one",
            file=str(path),
            expected="a SkyRL training-input dump (TensorBatch.save)",
        )
    state = batch.state if isinstance(batch.state, dict) else {}
    stored = state.get("batch_dict")
    keys = {str(key) for key in batch.keys} | ({str(key) for key in stored} if isinstance(stored, dict) else set())
    metadata = state.get("metadata")
    missing = []
    if not keys.intersection(_REWARD_KEYS):
        missing.append("rewards")
    if not (isinstance(metadata, dict) and "uids" in metadata):
        missing.append("uids (the prompt keys)")
    if missing:
        raise InputError(
            f"SkyRL training-input dump without {' and without '.join(missing)}: {WHERE}; it holds per-token "
            "advantages and returns only, so no group can be audited",
            file=str(path),
            expected="a dump that keeps each sample's reward and prompt uid",
        )
    raise InputError(
        "holds rewards and uids, which no SkyRL version dumps (its trainer pops both before dump_data): not read",
        file=str(path),
        expected="a SkyRL training-input dump",
    )


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    return reduced  # read refuses every file first


LOADER = Format(
    name="skyrl",
    description="SkyRL dumped_data/global_step_{N}_training_input.pkl: recognised and refused (rewards and uids "
    "are popped before the dump)",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    reads="SkyRL's TrainingInputBatch pickle, without running it; refused: no rewards, no uids",
    prompt="uids (popped before the dump: absent)",
    trajectory=None,
    reward="rewards (popped before the dump: absent)",
    advantage=None,
    cannot_audit=CANNOT_AUDIT,
)
