"""Fuzzing the miles loader: the bundled --dump-details sample (rollout dump, two rank files, the sidecar) with its
bytes mutated, and with values of its torch.save payloads replaced or dropped by structure (a column of the
train batch, one row of it, a sample's field, a top-level key), written back by torch.save.

Every case ends in a valid canonical table or a RollauditError within CASE_SECONDS (harness.run_case).
"""

from __future__ import annotations

import copy
import functools
import io
from typing import Any

import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import harness, mutations
from tests.fuzz.harness import TorchZip, read_sample, run_case

FILES = ("rollout_data/7.pt", "train_data/7_0.pt", "train_data/7_1.pt", "trajectory/7.jsonl")
DUMPS = FILES[:3]


@functools.cache
def seed_files() -> dict[str, bytes]:
    return {name: read_sample(f"miles/{name}") for name in FILES}


@functools.cache
def _payload(name: str) -> Any:
    return torch.load(io.BytesIO(seed_files()[name]), weights_only=True)


def _paths(name: str) -> list[tuple]:
    """Where a value can be replaced: top-level keys, the train batch's columns and their first rows, the first
    samples' fields."""
    top = _payload(name)
    found: list[tuple] = [(key,) for key in top]
    if "rollout_data" in top:
        for column, values in top["rollout_data"].items():
            found.append(("rollout_data", column))
            found += [("rollout_data", column, row) for row in range(min(3, len(values)))]
    else:
        for row, sample in enumerate(top["samples"][:3]):
            found.append(("samples", row))
            found += [("samples", row, key) for key in sample]
    return found


_VALUES = st.sampled_from(
    [
        None, -1, 0, 2**63, 2**70, 1.5, float("nan"), float("inf"), True, "", "abc", [], {}, [[1, 2], [3]],
        ["a", "b"], [1.5, 2.5], [-1, 2**62], "drop",
    ]
)  # fmt: skip
_TENSORS = st.sampled_from(
    [
        lambda: torch.zeros(3, dtype=torch.float32),
        lambda: torch.tensor([1, 2, 3], dtype=torch.int32),
        lambda: torch.zeros((2, 2), dtype=torch.int64),
        lambda: torch.tensor([], dtype=torch.int64),
        lambda: torch.tensor([0.5], dtype=torch.bfloat16),
        lambda: torch.arange(5, dtype=torch.int64),
    ]
)


def _replace(value: Any, path: tuple, new: Any) -> None:
    for key in path[:-1]:
        value = value[key]
    if not isinstance(value, (dict, list)):
        raise TypeError("an earlier edit put a value of another kind there")
    if new == "drop" and isinstance(value, dict):
        value.pop(path[-1], None)
    elif new == "drop":
        del value[path[-1]]
    else:
        value[path[-1]] = new


@st.composite
def structural(draw: st.DrawFn) -> dict[str, bytes]:
    """The sample with one to three values of its dumps replaced or dropped, saved again by torch.save."""
    files = dict(seed_files())
    payloads: dict[str, Any] = {}
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(DUMPS))
        payload = payloads.setdefault(name, copy.deepcopy(_payload(name)))
        path = draw(st.sampled_from(_paths(name)))
        new = draw(st.one_of(_VALUES, _TENSORS.map(lambda make: make())))
        try:
            _replace(payload, path, new)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed what the path reached
    for name, payload in payloads.items():
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        files[name] = buffer.getvalue()
    return files


@harness.fuzz_settings()
@given(
    name=st.sampled_from(DUMPS),
    operations=mutations.byte_operations(),
    pickle_only=st.booleans(),
    forced=st.booleans(),
)
def test_miles_mutated_bytes(name: str, operations: list, pickle_only: bool, forced: bool):
    """Bit flips, truncations and insertions in one dump of the run (its data.pkl, or anywhere in the zip)."""
    files = dict(seed_files())
    if pickle_only:
        archive = TorchZip.read(files[name])
        files[name] = archive.with_pickle(mutations.apply_operations(archive.pickle, operations)).write()
    else:
        files[name] = mutations.apply_operations(files[name], operations)
    options = {"format": "miles"} if forced else {}
    run_case("miles", files, target=".", description=f"{name} {operations}", **options)


@harness.fuzz_settings()
@given(files=structural())
def test_miles_mutated_structure(files: dict[str, bytes]):
    """Columns, rows, sample fields and top-level keys replaced by values of other types, or dropped."""
    changed = [name for name, data in files.items() if data != seed_files()[name]]
    run_case("miles", files, target=".", description=f"structural mutation of {changed}")
