"""Fuzzing the agentic frameworks' loaders (AReaL, rllm, NeMo-RL, ROLL, verl V1, tinker, open-instruct, torchtitan,
agent-lightning's export).

Two kinds of case per loader, each over the bundled samples in the framework's own layout: their bytes mutated,
and their JSON mutated by structure (a value at a random path replaced by a random JSON value, a key dropped, a
list emptied, a value nested deep). Every case ends in a valid canonical table or a RollauditError
(harness.run_case), at least 500 of each kind per loader in CI.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import harness, mutations
from tests.fuzz.harness import read_sample, run_case

_TINKER = "train_rollout_summaries.jsonl"
_OPEN_INSTRUCT = ("demo_rollouts_000000.jsonl", "demo_metadata.jsonl")
_TORCHTITAN = "outputs/rl/rollout_samples.jsonl"
# loader -> (files of one case: name in the case directory -> sample path, the path to load in the case directory)
CASES = {
    "areal": (
        {f"rollout/2/{task}.jsonl": f"areal/rollout/2/{task}.jsonl" for task in range(40, 44)},
        "rollout",
    ),
    "rllm": (None, "episodes/train_step_1_epoch_0"),  # every file of the sample's step directory, below
    "nemo_rl": ({"train_data_step3.jsonl": "nemo_rl/train_data_step3.jsonl"}, "train_data_step3.jsonl"),
    "roll": (
        {"rollout_dump_data.step_2.jsonl": "roll/rollout_dump_data.step_2.jsonl"},
        "rollout_dump_data.step_2.jsonl",
    ),
    "verl_v1": ({"rollout_data/3.jsonl": "verl_v1/rollout_data/3.jsonl"}, "rollout_data"),
    "tinker": (
        {f"iteration_00000{n}/{_TINKER}": f"tinker/iteration_00000{n}/{_TINKER}" for n in (1, 2)},
        ".",
    ),
    "prime_rl": (
        {
            f"rollouts/step_{n}/train/{kind}/traces.jsonl": f"prime_rl/rollouts/step_{n}/train/{kind}/traces.jsonl"
            for n in (1, 2)
            for kind in ("all", "effective")
        },
        ".",
    ),
    "open_instruct": (
        {f"rollouts/{name}": f"open_instruct/rollouts/{name}" for name in _OPEN_INSTRUCT},
        ".",
    ),
    "torchtitan": ({_TORCHTITAN: f"torchtitan/{_TORCHTITAN}"}, "."),
}


def _rllm_files() -> dict[str, str]:
    folder = harness.SAMPLES / "rllm" / "episodes" / "train_step_1_epoch_0"
    return {
        f"episodes/train_step_1_epoch_0/{path.name}": str(path.relative_to(harness.SAMPLES))
        for path in sorted(folder.iterdir())
    }


@functools.cache
def seed_files(loader: str) -> dict[str, bytes]:
    files = CASES[loader][0] or _rllm_files()
    return {name: read_sample(relative) for name, relative in files.items()}


def _json_documents(data: bytes) -> tuple[list[Any], bool]:
    """A file's JSON: its lines' objects (JSON Lines), or its one document; and whether it was lines."""
    text = data.decode("utf-8")
    try:
        return [json.loads(text)], False
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()], True


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into a JSON value (dict keys, list indexes), the value's own (empty) path included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:8]):
            found += _paths(item, (*prefix, index))
    return found


def _replace(value: Any, path: tuple, new: Any, drop: bool) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if drop and not rest:
            copy.pop(head, None)
        else:
            copy[head] = _replace(copy[head], rest, new, drop)
        return copy
    copy = list(value)
    if drop and not rest:
        del copy[head]
    else:
        copy[head] = _replace(copy[head], rest, new, drop)
    return copy


_NEW_VALUES = st.one_of(
    mutations.JSON_VALUES,
    st.just([]),
    st.just({}),
    # nested deep: up to three of these may stack, and json.dumps must still write them (deeper JSON: test_hostile)
    st.integers(1, 300).map(lambda depth: json.loads("[" * depth + "]" * depth)),
    st.sampled_from([1e308, -1e308, 2**63, -(2**63) - 1, 2**70, "", "pad" + "0" * 32, "a_b_c"]),
)


@st.composite
def structural(draw: st.DrawFn, loader: str) -> dict[str, bytes]:
    """The loader's sample files with one to three JSON values replaced, dropped or deepened."""
    files = dict(seed_files(loader))
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(files)))
        documents, lines = _json_documents(files[name])
        index = draw(st.integers(0, len(documents) - 1))
        path = draw(st.sampled_from(_paths(documents[index])))
        new, drop = draw(_NEW_VALUES), bool(path) and draw(st.integers(0, 4)) == 0
        documents[index] = _replace(documents[index], path, new, drop)
        text = "".join(json.dumps(document) + "\n" for document in documents) if lines else json.dumps(documents[0])
        files[name] = text.encode("utf-8", "surrogatepass")
    return files


def _byte_test(loader: str):
    @harness.fuzz_settings()
    @given(data=st.data(), operations=mutations.byte_operations(), head=st.booleans(), detected=st.booleans())
    def test(data, operations: list, head: bool, detected: bool):
        files = dict(seed_files(loader))
        name = data.draw(st.sampled_from(sorted(files)))
        files[name] = mutations.apply_operations(files[name], operations, 0, 512 if head else None)
        options = {} if detected else {"format": loader.split("_v1")[0]}
        run_case(loader, files, target=CASES[loader][1], description=f"{name} {operations}", **options)

    test.__name__ = f"test_{loader}_mutated_bytes"
    test.__doc__ = f"The bundled {loader} sample with bit flips, truncations and insertions."
    return test


def _structure_test(loader: str):
    @harness.fuzz_settings()
    @given(files=structural(loader))
    def test(files: dict[str, bytes]):
        changed = [name for name, data in files.items() if data != seed_files(loader).get(name)]
        run_case(loader, files, target=CASES[loader][1], description=f"structural mutation of {changed}")

    test.__name__ = f"test_{loader}_mutated_structure"
    test.__doc__ = f"The bundled {loader} sample with JSON values replaced, dropped or nested deep."
    return test


test_areal_mutated_bytes = _byte_test("areal")
test_areal_mutated_structure = _structure_test("areal")
test_rllm_mutated_bytes = _byte_test("rllm")
test_rllm_mutated_structure = _structure_test("rllm")
test_nemo_rl_mutated_bytes = _byte_test("nemo_rl")
test_nemo_rl_mutated_structure = _structure_test("nemo_rl")
test_roll_mutated_bytes = _byte_test("roll")
test_roll_mutated_structure = _structure_test("roll")
test_verl_v1_mutated_bytes = _byte_test("verl_v1")
test_verl_v1_mutated_structure = _structure_test("verl_v1")
test_tinker_mutated_bytes = _byte_test("tinker")
test_tinker_mutated_structure = _structure_test("tinker")
test_prime_rl_mutated_bytes = _byte_test("prime_rl")
test_prime_rl_mutated_structure = _structure_test("prime_rl")
test_open_instruct_mutated_bytes = _byte_test("open_instruct")
test_open_instruct_mutated_structure = _structure_test("open_instruct")
test_torchtitan_mutated_bytes = _byte_test("torchtitan")
test_torchtitan_mutated_structure = _structure_test("torchtitan")
