"""The miles loader: the bundled --dump-details sample, the join on (index, tokens), rank-file copies, refusals."""

from __future__ import annotations

import importlib.util
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import rollaudit
from rollaudit import InputError, RollauditWarning
from rollaudit._loaders.registry import FORMATS
from rollaudit._loaders.run.load import detect_format

ROOT = Path(__file__).resolve().parents[2]
DUMPS = ROOT / "sample_dumps"
_spec = importlib.util.spec_from_file_location("sample_dumps_generate", DUMPS / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)
LABEL = "miles (prompt = group_index, trajectory = rollout_id, else index)"


def load_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RollauditWarning)
        return rollaudit.load(*args, **kwargs)


def _edit_train(path: Path, edit) -> None:
    dump = torch.load(path, weights_only=True)
    edit(dump["rollout_data"])
    torch.save(dump, path)


def test_the_bundled_sample_is_generated_as_committed(tmp_path: Path):
    written = generate.write_miles_run(tmp_path)
    for path in written:
        assert path.read_bytes() == (DUMPS / "miles" / path.relative_to(tmp_path)).read_bytes(), path


def test_the_bundled_sample_loads_as_miles_with_its_recorded_advantages():
    table = rollaudit.load(DUMPS / "miles")
    assert rollaudit.loaded_formats(table) == ["miles"]
    assert table.num_rows == sum(map(sum, generate.MILES_SESSIONS)) == 34
    assert "tokens_digest" not in table.column_names
    recorded = table.column("recorded_advantage").to_numpy(zero_copy_only=False)
    recomputed = rollaudit.recompute(table, ["miles-grpo"], device="cpu").column(0).to_numpy()
    trained = ~np.isnan(recorded)
    assert float(np.abs(recorded[trained] - recomputed[trained]).max()) == 0.0  # both float32, same arithmetic
    # 20 rollouts: two whole steps of 8 trained, the last 4 dropped (with their 9 samples).
    assert int(trained.sum()) == 25 and np.flatnonzero(~trained).tolist() == list(range(25, 34))
    found = rollaudit.audit(table, device="cpu").info["found"][LABEL]
    assert found["trajectories"] == 20 and found["fan-out trajectories (several samples)"] == 10
    assert found["train rank files"] == 2


def test_byte_identical_siblings_each_take_a_row():
    """Positions 0 and 1 are siblings with the same index and tokens: both trained, with the same advantage."""
    table = rollaudit.load(DUMPS / "miles")
    recorded = table.column("recorded_advantage").to_pylist()
    assert table.column("index").to_pylist()[:2] == [2800, 2800]
    assert recorded[0] is not None and recorded[0] == recorded[1]


def test_tensor_parallel_copies_count_once(tmp_path: Path):
    generate.write_miles_run(tmp_path, tensor_parallel=2)
    assert len(list((tmp_path / "train_data").iterdir())) == 4
    table = rollaudit.load(tmp_path)
    single = rollaudit.load(DUMPS / "miles")
    assert table.column("recorded_advantage").equals(single.column("recorded_advantage"))
    found = rollaudit.audit(table, device="cpu").info["found"][LABEL]
    assert found["train rank files"] == 4 and found["rank files copying another's DP shard (TP/PP)"] == 2


def test_copies_of_a_shard_that_disagree_are_refused(tmp_path: Path):
    generate.write_miles_run(tmp_path, tensor_parallel=2)
    _edit_train(tmp_path / "train_data" / "7_1.pt", lambda data: data["rewards"].__setitem__(0, 5.0))
    with pytest.raises(InputError, match="the same DP shard") as raised:
        load_quietly(tmp_path)  # its per-token advantages no longer equal the edited reward: warned first
    assert "7_1.pt" in raised.value.line()


def test_a_train_row_with_a_siblings_index_but_other_tokens_is_refused(tmp_path: Path):
    generate.write_miles_run(tmp_path)

    def edit(data):
        data["tokens"][3] = torch.cat([data["tokens"][3], torch.tensor([1], dtype=torch.int64)])

    _edit_train(tmp_path / "train_data" / "7_0.pt", edit)
    with pytest.raises(InputError, match=r"has this row's tokens") as raised:
        rollaudit.load(tmp_path)
    assert "7_0.pt" in raised.value.line() and "row 4" in raised.value.line()


def test_an_unknown_sample_index_is_refused(tmp_path: Path):
    generate.write_miles_run(tmp_path)
    _edit_train(tmp_path / "train_data" / "7_1.pt", lambda data: data["sample_indices"].__setitem__(0, 123456))
    with pytest.raises(InputError, match="sample_index 123456 is the index of no sample"):
        rollaudit.load(tmp_path)


def test_a_sample_trained_twice_is_refused(tmp_path: Path):
    generate.write_miles_run(tmp_path)

    def edit(data):
        for name in ("tokens", "rewards", "sample_indices", "rollout_ids", "advantages", "loss_masks"):
            data[name].append(data[name][0])

    _edit_train(tmp_path / "train_data" / "7_0.pt", edit)
    with pytest.raises(InputError, match="more train rows than rollout samples"):
        rollaudit.load(tmp_path)


def test_a_rollout_id_that_is_not_the_trajectory_key_is_refused(tmp_path: Path):
    generate.write_miles_run(tmp_path)
    _edit_train(tmp_path / "train_data" / "7_0.pt", lambda data: data["rollout_ids"].__setitem__(2, -5))
    with pytest.raises(InputError, match=r"rollout_ids -5 is not the trajectory key") as raised:
        rollaudit.load(tmp_path)
    assert "field rollout_ids" in raised.value.line() or "rollout_ids" in raised.value.line()


def test_a_train_dump_without_its_rollout_dump_is_refused(tmp_path: Path):
    generate.write_miles_run(tmp_path)
    (tmp_path / "rollout_data" / "7.pt").unlink()
    with pytest.raises(InputError, match=r"no rollout dump of the same step: missing .*rollout_data/7\.pt"):
        rollaudit.load(tmp_path / "train_data")


@pytest.mark.parametrize("name", ["rewards", "tokens"])
def test_a_missing_column_names_file_and_field(tmp_path: Path, name: str):
    generate.write_miles_run(tmp_path)
    _edit_train(tmp_path / "train_data" / "7_0.pt", lambda data: data.pop(name))
    with pytest.raises(InputError, match=rf"rollout_data\['{name}'\] is missing") as raised:
        rollaudit.load(tmp_path)
    assert "7_0.pt" in raised.value.line()


def test_tokens_that_are_no_token_ids_are_refused(tmp_path: Path):
    generate.write_miles_run(tmp_path)
    _edit_train(tmp_path / "train_data" / "7_0.pt", lambda data: data["tokens"].__setitem__(1, "abc"))
    with pytest.raises(InputError, match="tokens is a str"):
        rollaudit.load(tmp_path)


def test_a_rollout_dump_alone_names_the_default_as_an_assumption(tmp_path: Path):
    generate.write_miles_run(tmp_path)
    path = tmp_path / "rollout_data" / "7.pt"
    assert detect_format(path) == "miles"
    table = rollaudit.load(path)
    assert table.column("recorded_advantage").null_count == table.num_rows
    report = rollaudit.audit(table, device="cpu")
    assert report.trained_with.scheme == "miles-grpo" and report.trained_with.evidence == "framework default"


def test_slime_dumps_stay_slime_and_slimes_first_layout_keeps_its_error(tmp_path: Path):
    for relative in ("uniform.pt", "dump_details/rollout_data/0.pt", "dump_details/train_data/0_0.pt"):
        assert detect_format(DUMPS / relative) == "slime"
    shutil.copytree(DUMPS / "dump_details", tmp_path / "run")
    old = tmp_path / "run" / "train_data" / "0_0.pt"
    torch.save({"rollout_id": 0, "rank": 0, "rollout_data": {"rewards": [0.0]}}, old)
    assert detect_format(old) == "slime"
    with pytest.raises(InputError, match="first layout"):
        rollaudit.load(tmp_path / "run")


def test_eval_dumps_beside_training_dumps_are_left_out(tmp_path: Path):
    generate.write_miles_run(tmp_path)
    shutil.copyfile(tmp_path / "rollout_data" / "7.pt", tmp_path / "rollout_data" / "eval_7.pt")
    table = load_quietly(tmp_path)
    assert table.num_rows == 34 and set(table.column("split").to_pylist()) == {"train"}


def test_the_format_says_what_it_assumes_and_cannot_audit():
    entry = FORMATS["miles"]
    assert entry.trained_with[0][0] == "miles-grpo"
    assert any("byte-identical" in line for line in entry.cannot_audit)
    assert list(FORMATS).index("miles") < list(FORMATS).index("slime")
