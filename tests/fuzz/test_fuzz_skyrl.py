"""Fuzzing SkyRL's recogniser: its training-input pickles (every layout) with bit flips, truncations, insertions and
opcode fragments spliced in. Every case ends in one RollauditError (SkyRL's dumps are always refused) and nothing
the pickle names is run (harness.run_case checks both)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import harness, mutations
from tests.fuzz.harness import run_case
from tests.loaders.test_skyrl import LAYOUTS, write_dump

NAME = "dumped_data/global_step_1_training_input.pkl"


@functools.cache
def seed(layout: int) -> bytes:
    module, kind = LAYOUTS[layout]
    with tempfile.TemporaryDirectory() as scratch:
        return write_dump(Path(scratch), 1, module, kind).read_bytes()


@harness.fuzz_settings()
@given(layout=st.integers(0, len(LAYOUTS) - 1), operations=mutations.byte_operations(), head=st.booleans())
def test_skyrl_mutated_bytes(layout: int, operations: list, head: bool):
    data = mutations.apply_operations(seed(layout), operations, 0, 256 if head else None)
    outcome = run_case("skyrl", {NAME: data}, target=".", description=f"layout {layout} {operations}")
    assert outcome == "error"


@harness.fuzz_settings()
@given(layout=st.integers(0, len(LAYOUTS) - 1), fragment=mutations.opcode_soup(), at=st.integers(2, 400))
def test_skyrl_with_opcodes_spliced_in(layout: int, fragment: bytes, at: int):
    data = seed(layout)
    outcome = run_case("skyrl", {NAME: data[:at] + fragment + data[at:]}, target=".", description=repr(fragment))
    assert outcome == "error"
