"""The slime loader: sample dumps, identity rules, dict rewards, eval dumps, train dumps, bad files."""

from __future__ import annotations

import importlib.util
import math
import pickle
import random
import warnings
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
import torch

import rollaudit
from rollaudit import InputError, RollauditWarning, UsageError
from rollaudit._errors import ChoiceNeeded
from rollaudit._table import CANONICAL_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
DUMPS = ROOT / "sample_dumps"
_spec = importlib.util.spec_from_file_location("sample_dumps_generate", DUMPS / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)


def samples(rewards, group_index=None, *, trajectory=None, index="position", seed=0, **extra):
    """Small slime sample dicts: one per reward; ``group_index`` a list, or None for no keys at all."""
    rng = random.Random(seed)
    made = []
    for position, reward in enumerate(rewards):
        made.append(
            generate.rollout_sample(
                rng,
                group_index=None if group_index is None else group_index[position],
                index=position if index == "position" else index,
                reward=reward,
                rollout_id=trajectory,
                response_length=3,
                prompt_length=2,
                extra=extra or None,
            )
        )
    return made


def dump(path: Path, step: int, rewards, group_index=None, **options) -> Path:
    return generate.save_rollout_dump(path, step, samples(rewards, group_index, **options))


def column(table: pa.Table, name: str) -> list:
    return table.column(name).to_pylist()


def one_line(error: InputError) -> str:
    message = str(error)
    assert "\n" not in message and "Traceback" not in message
    return message


# ---------------------------------------------------------------------------------------------------------------------
# The committed sample dumps.


def test_committed_dumps_match_the_generator():
    assert generate.main(["--check"]) == 0


def test_fanout_step():
    table = rollaudit.load(DUMPS / "fanout" / "rollout_data" / "3.pt")
    assert table.column_names[: len(CANONICAL_COLUMNS)] == list(CANONICAL_COLUMNS)
    assert {"index", "remove_sample", "split"} <= set(table.column_names)
    assert set(column(table, "step")) == {3}
    assert column(table, "position") == list(range(table.num_rows))
    sizes = Counter(column(table, "prompt"))
    assert sorted(sizes.values()) == [5, 8, 8, 8, 9, 10, 12, 28]
    rewards_of: dict[int, set] = {}
    trajectories_of: dict[int, set] = {}
    for prompt, trajectory, reward in zip(
        column(table, "prompt"), column(table, "trajectory"), column(table, "reward"), strict=True
    ):
        rewards_of.setdefault(prompt, set()).add(reward)
        trajectories_of.setdefault(prompt, set()).add(trajectory)
    assert {1.0} in rewards_of.values() and {0.0} in rewards_of.values()
    assert any(len(trajectories) == 1 and sizes[prompt] > 1 for prompt, trajectories in trajectories_of.items())
    assert "truncated" in column(table, "status")
    assert all(length > 0 for length in column(table, "response_length"))
    assert column(table, "recorded_advantage") == [None] * table.num_rows
    assert set(column(table, "split")) == {"train"}


def test_uniform_step_trajectory_is_the_sample_index():
    table = rollaudit.load(DUMPS / "uniform.pt")
    assert table.num_rows == 64 and set(Counter(column(table, "prompt")).values()) == {8}
    assert column(table, "trajectory") == column(table, "index")


def test_spec_4_3_4():
    table = rollaudit.load(DUMPS / "spec_4_3_4.pt")
    assert column(table, "reward") == generate.SPEC_REWARDS
    assert column(table, "prompt") == generate.SPEC_PROMPTS


def test_a_reward_dict_left_open_reads_on_and_records_its_keys():
    """What ``rollaudit inspect`` reads where compare needs --reward-key: the keys, no reward, no NaN warning."""
    from rollaudit._errors import choices_left_open

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with choices_left_open() as left_open:
            table = rollaudit.load(DUMPS / "reward_key.pt", jobs=1, cache=False)
    assert table.num_rows == 16 and all(math.isnan(reward) for reward in column(table, "reward"))
    assert [choice.line() for choice in left_open] == [
        "a dict with keys 'score', 'acc', 'format'; compare needs --reward-key KEY"
    ]
    with pytest.raises(ChoiceNeeded):  # only within the block
        rollaudit.load(DUMPS / "reward_key.pt", jobs=1, cache=False)


def test_reward_key():
    path = DUMPS / "reward_key.pt"
    with pytest.raises(InputError, match=r"reward is a dict with keys 'score', 'acc', 'format'") as caught:
        rollaudit.load(path)
    assert isinstance(caught.value, ChoiceNeeded)
    # A rollout dump alone: no train dump's raw_reward says which key slime trained on, and none is guessed.
    assert "no train dump of its step holds the raw_reward that would say which" in caught.value.message
    assert caught.value.expected == "--reward-key naming the key slime trained on (slime's own --reward-key)"
    assert "reward_key" not in caught.value.message + caught.value.expected  # the option as typed, once
    with pytest.raises(InputError, match=r"no key 'accuracy'; its keys: 'score', 'acc', 'format'"):
        rollaudit.load(path, reward_key="accuracy")
    scores = column(rollaudit.load(path, reward_key="score"), "reward")
    accuracies = column(rollaudit.load(path, reward_key="acc"), "reward")
    assert len(scores) == 16 and all(
        0.0 <= score - accuracy <= 0.1 + 1e-12 for score, accuracy in zip(scores, accuracies, strict=True)
    )


def test_dump_details_pairs_rollout_and_train_dumps():
    table = rollaudit.load(DUMPS / "dump_details")
    rollout, _, extra = generate.dump_details_step(0)
    expected = generate.legacy_normalized(
        extra["raw_reward"], generate.DUMP_DETAILS_N, len(generate.DUMP_DETAILS_GROUPS)
    )
    recorded = column(table, "recorded_advantage")
    assert table.num_rows == len(rollout) == 26
    assert recorded[24:] == [None, None]  # the trainer dropped the samples that did not fill a global batch
    assert all(math.isclose(got, want, abs_tol=1e-12) for got, want in zip(recorded[:24], expected, strict=False))
    assert column(table, "reward") == extra["raw_reward"]


def test_train_dump_in_either_order_and_rollout_alone():
    details = DUMPS / "dump_details"
    paired = rollaudit.load([details / "train_data" / "0_0.pt", details / "rollout_data" / "0.pt"])
    assert paired.equals(rollaudit.load(details))
    alone = rollaudit.load(details / "rollout_data")
    assert column(alone, "recorded_advantage") == [None] * 26


def test_train_dump_alone_names_the_missing_rollout_dump():
    with pytest.raises(InputError, match=r"no rollout dump of the same step: missing .*rollout_data/0\.pt") as caught:
        rollaudit.load(DUMPS / "dump_details" / "train_data")
    one_line(caught.value)


# ---------------------------------------------------------------------------------------------------------------------
# Identity rules (slime PR #2204).


def test_no_group_index_with_n_gives_slices(tmp_path: Path):
    path = dump(tmp_path / "0.pt", 0, [1.0, 3.0, 10.0, 10.0])
    table = rollaudit.load(path, n_samples_per_prompt=2)
    assert column(table, "prompt") == [0, 0, 1, 1]


def test_no_group_index_without_n_is_an_error(tmp_path: Path):
    path = dump(tmp_path / "0.pt", 0, [1.0, 3.0, 10.0, 10.0])
    with pytest.raises(InputError, match="prompt keys are required when groups are not uniformly sized") as caught:
        rollaudit.load(path)
    one_line(caught.value)


def test_no_group_index_and_n_not_dividing_is_an_error(tmp_path: Path):
    path = dump(tmp_path / "0.pt", 0, [1.0, 2.0, 3.0])
    with pytest.raises(InputError, match="prompt keys are required when groups are not uniformly sized"):
        rollaudit.load(path, n_samples_per_prompt=2)


def test_some_group_index_missing_names_the_first_position(tmp_path: Path):
    path = dump(tmp_path / "0.pt", 0, [0.0, 1.0, 2.0, 3.0], [7, 7, None, None])
    with pytest.raises(InputError, match=r"field 'group_index': row 3: sample has no group_index"):
        rollaudit.load(path, n_samples_per_prompt=2)


def test_trajectory_keys(tmp_path: Path):
    fanned = dump(tmp_path / "a" / "0.pt", 0, [1.0, 1.0], [0, 0], trajectory=40)
    assert column(rollaudit.load(fanned), "trajectory") == [40, 40]
    plain = dump(tmp_path / "b" / "0.pt", 0, [1.0, 0.0], [0, 0])
    assert column(rollaudit.load(plain), "trajectory") == [0, 1]
    anonymous = dump(tmp_path / "c" / "0.pt", 0, [1.0, 0.0], [0, 0], index=None)
    assert column(rollaudit.load(anonymous), "trajectory") == [None, None]


# ---------------------------------------------------------------------------------------------------------------------
# Several files, directories, globs, eval dumps.


def test_several_files_one_table_in_step_order(tmp_path: Path):
    for step in (10, 2, 1):
        dump(tmp_path / "rollout_data" / f"{step}.pt", step, [float(step), 0.0, 1.0], [0, 0, 1])
    seen = []
    table = rollaudit.load(tmp_path / "rollout_data", on_file=lambda path, size: seen.append((Path(path).name, size)))
    assert column(table, "step") == [1] * 3 + [2] * 3 + [10] * 3
    assert column(table, "position") == [0, 1, 2] * 3
    assert [name for name, _ in seen] == ["1.pt", "2.pt", "10.pt"] and all(size > 0 for _, size in seen)
    by_glob = rollaudit.load(str(tmp_path / "rollout_data" / "*.pt"))
    by_list = rollaudit.load([tmp_path / "rollout_data" / "10.pt", str(tmp_path / "rollout_data" / "1.pt")])
    assert by_glob.equals(table) and column(by_list, "step") == [1] * 3 + [10] * 3


def test_memory_does_not_grow_with_the_number_of_files(tmp_path: Path):
    import tracemalloc

    rng = random.Random(5)
    rows = [
        generate.rollout_sample(rng, group_index=position // 4, index=position, reward=1.0, response_length=2000)
        for position in range(40)
    ]
    for step in range(6):
        generate.save_rollout_dump(tmp_path / "rollout_data" / f"{step}.pt", step, rows)
    del rows
    tracemalloc.start()
    try:
        rollaudit.load(tmp_path / "rollout_data" / "0.pt")
        one_file = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        table = rollaudit.load(tmp_path / "rollout_data")
        six_files = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert table.num_rows == 240
    assert six_files < 1.5 * one_file, (one_file, six_files)


def test_template_file_names(tmp_path: Path):
    dump(tmp_path / "rollout_7.pt", 7, [1.0], [0])
    assert column(rollaudit.load(tmp_path / "rollout_7.pt"), "step") == [7]


def test_eval_dumps(tmp_path: Path):
    for name in ("eval_4.pt", "rollout_eval_5.pt"):
        dump(tmp_path / "evals" / name, int(name[-4]), [1.0, 0.0], [0, 0])
    table = rollaudit.load(tmp_path / "evals")
    assert set(column(table, "split")) == {"eval"} and column(table, "step") == [4, 4, 5, 5]


def test_eval_and_training_dumps_do_not_mix(tmp_path: Path):
    train = dump(tmp_path / "rollout_data" / "4.pt", 4, [1.0, 0.0], [0, 0])
    evaluation = dump(tmp_path / "rollout_data" / "eval_4.pt", 4, [0.5, 0.5], [0, 0])
    with pytest.raises(InputError, match=r"mixes training dumps .* and eval dumps") as caught:
        rollaudit.load([train, evaluation])
    one_line(caught.value)
    with pytest.warns(RollauditWarning, match="left out 1 eval dumps"):
        table = rollaudit.load(tmp_path / "rollout_data")
    assert column(table, "reward") == [1.0, 0.0] and set(column(table, "split")) == {"train"}


def test_two_dumps_of_one_step(tmp_path: Path):
    first = dump(tmp_path / "a.pt", 4, [1.0], [0])
    second = dump(tmp_path / "b.pt", 4, [0.0], [0])
    with pytest.raises(InputError, match="two rollout dumps of step 4"):
        rollaudit.load([first, second])


def test_missing_paths_and_unknown_formats(tmp_path: Path):
    with pytest.raises(InputError, match="no such file or directory"):
        rollaudit.load(tmp_path / "nope.pt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"holds no dump files"):
        rollaudit.load(tmp_path / "empty")
    with pytest.raises(InputError, match="no file matches"):
        rollaudit.load(str(tmp_path / "*.pt"))
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InputError, match=r"notes.txt: not a dump rollaudit reads"):
        rollaudit.load(tmp_path / "notes.txt")
    with pytest.raises(InputError, match="unknown format 'nope'"):
        rollaudit.load(tmp_path / "notes.txt", format="nope")
    with pytest.raises(UsageError, match="n_samples_per_prompt"):
        rollaudit.load(tmp_path / "notes.txt", n_samples_per_prompt=0)


# ---------------------------------------------------------------------------------------------------------------------
# Bad files: one clear line, never a traceback.


def test_bad_files_give_one_line(tmp_path: Path):
    valid = dump(tmp_path / "valid.pt", 0, [1.0, 0.0], [0, 0]).read_bytes()
    (tmp_path / "text.pt").write_bytes(b"not a zip at all")
    (tmp_path / "truncated.pt").write_bytes(valid[: len(valid) // 3])
    generate.write_torch_zip(tmp_path / "no_samples.pt", pickle.dumps({"rollout_id": 0}, protocol=2))
    generate.write_torch_zip(tmp_path / "not_a_dict.pt", pickle.dumps([1, 2], protocol=2))
    generate.write_torch_zip(tmp_path / "no_step.pt", pickle.dumps({"samples": []}, protocol=2))
    generate.write_torch_zip(
        tmp_path / "no_reward.pt", pickle.dumps({"rollout_id": 0, "samples": [{"group_index": 0}]}, protocol=2)
    )
    generate.write_torch_zip(
        tmp_path / "string_reward.pt",
        pickle.dumps({"rollout_id": 0, "samples": [{"group_index": 0, "reward": "high"}]}, protocol=2),
    )
    generate.write_torch_zip(tmp_path / "sample_list.pt", pickle.dumps({"rollout_id": 0, "samples": [[1]]}, protocol=2))
    import zipfile

    with zipfile.ZipFile(tmp_path / "no_pickle.pt", "w") as archive:
        archive.writestr("archive/version", "3")
    expected = {
        "text.pt": "not a zip file",
        "truncated.pt": "truncated or damaged zip",
        "no_pickle.pt": "zip without a data.pkl",
        "no_samples.pt": "field 'samples': the dump has no 'samples'",
        "not_a_dict.pt": "the pickle holds a list",
        "no_step.pt": "field 'rollout_id': rollout_id is missing",
        "no_reward.pt": "field 'reward': row 1: sample has no reward",
        "string_reward.pt": "field 'reward': row 1: reward is a str",
        "sample_list.pt": "row 1: sample is a list",
    }
    for name, message in expected.items():
        with pytest.raises(InputError) as caught:
            rollaudit.load(tmp_path / name)
        assert message in one_line(caught.value), (name, str(caught.value))
        assert name in str(caught.value)


def test_non_finite_rewards_are_kept_and_reported_once(tmp_path: Path):
    path = dump(tmp_path / "0.pt", 0, [1.0, math.nan, math.inf, None, -math.inf, 0.0, math.nan, math.nan], [0] * 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = rollaudit.load(path)
    messages = [str(warning.message) for warning in caught if issubclass(warning.category, RollauditWarning)]
    assert len(messages) == 1
    assert "6 samples have a NaN, infinite or None reward (positions 1, 2, 3, 4, 6, ...)" in messages[0]
    rewards = column(table, "reward")
    assert rewards[0] == 1.0 and math.isnan(rewards[1]) and rewards[2] == math.inf and math.isnan(rewards[3])


# ---------------------------------------------------------------------------------------------------------------------
# Unknown classes and hostile content in real sample fields.


class UserMetadata:
    def __init__(self) -> None:
        self.note = "kept by slime, unknown to rollaudit"


def test_unknown_classes_in_metadata_become_placeholders(tmp_path: Path):
    import numpy as np

    rows = samples([1.0, 0.0], [0, 0])
    rows[0]["metadata"] = {"user": UserMetadata(), "image": np.zeros((2, 2))}
    rows[1]["multimodal_inputs"] = {"pixels": np.ones(3)}
    path = generate.save_rollout_dump(tmp_path / "0.pt", 0, rows)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = rollaudit.load(path)
    messages = [str(warning.message) for warning in caught if issubclass(warning.category, RollauditWarning)]
    assert len(messages) == 1 and "placeholders for" in messages[0]
    assert "tests.loaders.test_slime.UserMetadata" in messages[0] and "numpy" in messages[0]
    assert column(table, "reward") == [1.0, 0.0]


def test_numpy_and_tensor_rewards_are_numbers(tmp_path: Path):
    import numpy as np

    rows = samples([0.0] * 5, [0] * 5)
    rewards = [np.float64(0.25), np.float32(0.5), np.int64(2), np.bool_(True), torch.tensor(3.5)]
    for row, reward in zip(rows, rewards, strict=True):
        row["reward"] = reward
    path = generate.save_rollout_dump(tmp_path / "0.pt", 0, rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert column(rollaudit.load(path), "reward") == [0.25, 0.5, 2.0, 1.0, 3.5]


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_dump_that_names_os_system_never_runs_it(tmp_path: Path):
    marker = tmp_path / "marker"
    rows = samples([1.0, 0.0], [0, 0])
    rows[1]["metadata"] = {"x": Payload(marker)}
    rows[0]["trace"] = [Payload(marker)]
    path = generate.save_rollout_dump(tmp_path / "0.pt", 0, rows)
    with pytest.warns(RollauditWarning, match=r"placeholders for 1 unknown class: posix\.system"):
        table = rollaudit.load(path)
    assert not marker.exists()
    assert column(table, "reward") == [1.0, 0.0]


# ---------------------------------------------------------------------------------------------------------------------
# Train dumps.


def _train_pair(tmp_path: Path, advantages=None, *, drop=0, ranks=1, raw_offset=0.0):
    rewards = [0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    rollout = samples(rewards, [0, 0, 0, 1, 1, 1])
    generate.save_rollout_dump(tmp_path / "rollout_data" / "2.pt", 2, rollout)
    normalized = [-1.0, 0.5, 0.5, -1.0, 0.5, 0.5]
    kept = len(rollout) - drop
    train = [
        generate.train_sample(
            rollout[position],
            position=position,
            normalized=normalized[position],
            data_parallel_rank=0,
            raw_reward=rewards[position],
            advantages=None if advantages is None else advantages(position),
        )
        for position in range(kept)
    ]
    raw = [reward + raw_offset for reward in rewards]
    for rank in range(ranks):
        generate.save_train_dump(
            tmp_path / "train_data" / f"2_{rank}.pt", 2, train[rank::ranks], raw_reward=raw, rank=rank
        )
    return normalized


def test_train_dump_join_with_dropped_samples_and_ranks(tmp_path: Path):
    normalized = _train_pair(tmp_path, drop=2, ranks=2)
    table = rollaudit.load(tmp_path)
    assert column(table, "recorded_advantage") == [*normalized[:4], None, None]


def test_per_token_advantages_that_vary_are_flagged(tmp_path: Path):
    _train_pair(tmp_path, advantages=lambda position: torch.linspace(-1, 1, 3))
    with pytest.warns(RollauditWarning, match=r"recorded advantages vary within a sample: not an outcome scheme"):
        table = rollaudit.load(tmp_path)
    assert column(table, "recorded_advantage")[0] == -1.0


def test_per_token_advantages_that_differ_from_rewards_are_flagged(tmp_path: Path):
    _train_pair(tmp_path, advantages=lambda position: torch.full((3,), 7.0))
    with pytest.warns(RollauditWarning, match=r"per-token advantages differ from the normalized reward"):
        rollaudit.load(tmp_path)


def test_masked_tokens_are_not_compared(tmp_path: Path):
    rewards = [0.0, 1.0]
    rollout = samples(rewards, [0, 0])
    rollout[0]["loss_mask"] = [1, 0, 1]
    generate.save_rollout_dump(tmp_path / "rollout_data" / "0.pt", 0, rollout)
    train = [
        generate.train_sample(
            rollout[position],
            position=position,
            normalized=[-0.7, 0.7][position],
            data_parallel_rank=0,
            raw_reward=rewards[position],
            advantages=torch.tensor([[-0.7, 99.0, -0.7], [0.7, 0.7, 0.7]][position]),
        )
        for position in range(2)
    ]
    generate.save_train_dump(tmp_path / "train_data" / "0_0.pt", 0, train, raw_reward=rewards)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = rollaudit.load(tmp_path)
    assert column(table, "recorded_advantage") == pytest.approx([-0.7, 0.7])


def test_raw_reward_mismatch_is_flagged(tmp_path: Path):
    _train_pair(tmp_path, raw_offset=0.5)
    with pytest.warns(RollauditWarning, match="raw_reward differs from the rollout dump's rewards on 6 samples"):
        rollaudit.load(tmp_path)


def test_train_dump_of_another_run_is_an_error(tmp_path: Path):
    _train_pair(tmp_path)
    generate.save_rollout_dump(tmp_path / "rollout_data" / "2.pt", 2, samples([1.0] * 6, [0] * 6, index=None))
    # Joined on rollout_position: sample_index is the check, and it names the mismatch.
    mismatch = r"sample_index 0 is not the index \(None\) of the rollout sample at rollout_position 0"
    with pytest.raises(InputError, match=mismatch):
        rollaudit.load(tmp_path)


def test_train_dump_versions(tmp_path: Path):
    _train_pair(tmp_path)
    old = tmp_path / "train_data" / "2_0.pt"
    torch.save({"rollout_id": 2, "rank": 0, "rollout_data": {"rewards": [0.0]}}, old)
    with pytest.raises(InputError, match="first layout"):
        rollaudit.load(tmp_path)
    torch.save({"format_version": 3, "rollout_id": 2, "samples": []}, old)
    with pytest.raises(InputError, match=r"format_version is 3 \(expected 2\)"):
        rollaudit.load(tmp_path)
