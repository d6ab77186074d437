"""torchtitan's rollout_samples.jsonl: groups, segments, validation lines, older writers, not_trained, facts.

Runs are written by ``sample_dumps/generate_torchtitan.py``'s writer, torchtitan's reproduced; where its source is
given (``TORCHTITAN_SOURCE``), the same runs go through torchtitan's own recorder, estimator and filter and the
bytes must agree. The loaded tables are checked against a plain-Python oracle built from what the recorder was
given (every sibling of every group).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rollaudit
from rollaudit import InputError
from rollaudit._loaders.formats.torchtitan import LABEL, NO_ADVANTAGE, NO_STEP, UNTRAINABLE, ZERO_STD
from rollaudit._table import NOT_TRAINED, facts_in, found_in, notes_in
from tests.torchtitan_upstream import upstream

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_dumps"))
import generate_torchtitan as gen  # noqa: E402


def _processes(configs: list[gen.RunConfig]) -> list[list[gen.Event]]:
    return [gen.run_events(config) for config in configs]


def _write(dump: Path, processes: list[list[gen.Event]], k: int = 1, log_tensors: bool = False) -> Path:
    for events in processes:
        path = gen.write_run(dump, events, k=k, log_tensors=log_tensors)
    return path


def _oracle(processes: list[list[gen.Event]], k: int, log_tensors: bool) -> dict:
    """What the loader should give, from the groups the recorder was handed: the picked rows in file order, each
    with its key, recorded advantage and the reason the dump shows for not training it."""
    rows, validation = [], 0
    # A process that recorded no training group (every group lost) leaves validation lines only: no segment.
    trained = [events for events in processes if any(not event.is_validation for event in events)]
    for process, events in enumerate(trained):
        for event in events:
            picked = gen.keep_extremes(event.groups, k)
            if event.is_validation:
                validation += len(picked)
                continue
            lacking = any(
                not rollout["turns"] or (log_tensors and not any(t["completion_token_ids"] for t in rollout["turns"]))
                for rollout in picked
            )
            rewards = [rollout["reward"] for rollout in picked]
            reason = UNTRAINABLE if lacking else ZERO_STD if len(picked) > 1 and len(set(rewards)) == 1 else None
            for rollout in picked:
                newest = [turn["max_policy_version"] for turn in rollout["turns"]]
                rows.append(
                    {
                        "prompt": f"{process}:{rollout['group_id']}",
                        "trajectory": f"{process}:{rollout['group_id']}/{rollout['rollout_id']}",
                        "reward": rollout["reward"],
                        "recorded_advantage": rollout["advantage"],
                        "segment": process,
                        NOT_TRAINED: reason,
                        "newest": max(newest) if newest else None,
                    }
                )
    validation += sum(
        len(gen.keep_extremes(event.groups, k))
        for events in processes
        if events not in trained
        for event in events
        if event.is_validation
    )
    return {"rows": rows, "validation": validation, "segments": len(trained)}


def _check_against_oracle(table, oracle: dict, processes: int) -> None:
    frame = table.to_pandas().sort_values("line", kind="stable")
    rows = oracle["rows"]
    assert len(frame) == len(rows)
    for column in ("prompt", "trajectory", "segment", NOT_TRAINED):
        got = [None if value != value else value for value in frame[column].tolist()]  # NaN: none
        assert got == [row[column] for row in rows], column
    assert np.array_equal(frame["reward"].to_numpy(), [row["reward"] for row in rows])
    assert np.array_equal(frame["recorded_advantage"].to_numpy(), [row["recorded_advantage"] for row in rows])
    counts = found_in(table)[LABEL]
    assert counts.get("validation lines left out", 0) == oracle["validation"]
    segments = oracle["segments"]
    assert counts.get("segments (process lifetimes)", 0) == (segments if segments > 1 else 0)
    assert counts["training groups"] == len({row["prompt"] for row in rows})
    # One step per group; within a segment the step is the bound from the newest policy version (a later segment
    # may be moved later by one offset), and a later segment's steps come after an earlier one's.
    newest = [row["newest"] for row in rows]
    frame["newest"] = newest
    bound = frame.groupby("prompt")["newest"].transform("max") + 1
    assert (frame.groupby("prompt")["step"].nunique() == 1).all()
    highest = -1
    for segment in range(segments):
        inside = frame["segment"] == segment
        known = inside & bound.notna()
        offsets = set((frame["step"][known] - bound[known]).astype(int).tolist())
        assert len(offsets) <= 1 and (segment > 0 or offsets <= {0})
        assert frame["step"][inside].min() > highest
        highest = frame["step"][inside].max()


RUNS = st.builds(
    gen.RunConfig,
    seed=st.integers(0, 10_000),
    groups=st.integers(1, 14),
    group_size=st.sampled_from([1, 2, 3, 4, 8]),
    prompts_per_step=st.integers(1, 5),
    validation=st.integers(1, 3),
    should_std_normalize=st.booleans(),
    constant_groups=st.sets(st.integers(0, 13), max_size=3).map(tuple),
    untrainable_groups=st.sets(st.integers(0, 13), max_size=3).map(tuple),
    lost_groups=st.sets(st.integers(0, 13), max_size=2).map(tuple),
)


@settings(max_examples=40, deadline=None)
@given(
    configs=st.lists(RUNS, min_size=1, max_size=3),
    k=st.integers(1, 4),
    log_tensors=st.booleans(),
    resume_from=st.integers(0, 3),
)
def test_loaded_rows_keys_and_reasons_equal_the_oracle(tmp_path_factory, configs, k, log_tensors, resume_from):
    configs = [configs[0], *(replace(config, start_version=resume_from) for config in configs[1:])]
    processes = _processes(configs)
    if not any(not event.is_validation for events in processes for event in events):
        return  # every group lost: nothing to train (refused, tested below)
    dump = tmp_path_factory.mktemp("run")
    path = _write(dump, processes, k, log_tensors)
    table = rollaudit.load(path)
    _check_against_oracle(table, _oracle(processes, k, log_tensors), len(processes))
    group_size = configs[0].group_size if len({config.group_size for config in configs}) == 1 else None
    kept = facts_in(table)["partial_groups"]["kept"]
    if group_size is not None:
        assert kept == min(group_size, 2 * k)
    assert facts_in(table)["trained_default"]["scheme"] == "torchtitan-drgrpo"


@pytest.mark.parametrize("should_std_normalize", [False, True])
def test_groups_kept_whole_reproduce_the_recorded_values_elementwise(tmp_path, should_std_normalize):
    config = replace(gen.WHOLE_RUN, should_std_normalize=should_std_normalize, groups=12)
    path = _write(tmp_path, _processes([config]), k=2, log_tensors=True)
    table = rollaudit.load(path)
    assert facts_in(table)["partial_groups"]["kept"] == 4 == config.group_size
    preset = "torchtitan-grpo" if should_std_normalize else "torchtitan-drgrpo"
    other = "torchtitan-drgrpo" if should_std_normalize else "torchtitan-grpo"
    values = rollaudit.recompute(
        table, [preset, f"torchtitan-drgrpo(scale={'std' if should_std_normalize else 'none'})", other]
    )
    recorded = table.column("recorded_advantage").to_numpy()
    # Groups torchtitan did not train (constant, untrainable) get no advantage from a preset either.
    trained = np.array([reason is None for reason in table.column(NOT_TRAINED).to_pylist()])
    assert 0 < trained.sum() < len(trained)
    assert np.isnan(values.column(0).to_numpy()[~trained]).all()
    assert np.abs(values.column(0).to_numpy() - recorded)[trained].max() <= 4.5e-16
    assert np.abs(values.column(1).to_numpy() - recorded)[trained].max() <= 4.5e-16
    assert np.abs(values.column(2).to_numpy() - recorded)[trained].max() > 1e-3  # the other option does not fit
    # Tokens are logged: the response length is the rollout's completion tokens, summed over its turns.
    assert table.column("response_length").null_count == 0


def test_a_resumed_run_in_one_file_never_merges_groups_across_segments(tmp_path):
    first, resumed = gen.DEFAULT_RUN
    processes = [gen.run_events(first, end_version=2), gen.run_events(resumed)]
    path = _write(tmp_path, processes)
    table = rollaudit.load(tmp_path)
    frame = table.to_pandas()
    assert frame.groupby("prompt")["segment"].nunique().max() == 1
    assert set(frame["segment"]) == {0, 1}
    # group_id restarts at 0: the same ids in both segments, as different groups.
    ids = frame.groupby("segment")["group_id"].apply(set)
    assert ids[0] & ids[1]
    assert found_in(table)[LABEL]["segments (process lifetimes)"] == 2
    (note,) = [note for note in notes_in(table) if note.startswith("the file holds 2 segments")]
    assert "a validation pass after training" in note
    # The resumed run samples under version 2 again: its steps are moved after the first segment's.
    assert any(note.startswith("segment 1's steps reach back") for note in notes_in(table))
    assert frame[frame["segment"] == 1]["step"].min() > frame[frame["segment"] == 0]["step"].max()
    _check_against_oracle(table, _oracle(processes, 1, False), 2)
    assert path.name == "rollout_samples.jsonl"


def test_a_restart_without_validation_is_told_apart_by_a_group_id_coming_back(tmp_path):
    configs = [gen.RunConfig(seed=3, groups=9, validation=0), gen.RunConfig(seed=4, groups=5, validation=0)]
    processes = _processes(configs)
    table = rollaudit.load(_write(tmp_path, processes))
    _check_against_oracle(table, _oracle(processes, 1, False), 2)
    (note,) = [note for note in notes_in(table) if note.startswith("the file holds 2 segments")]
    assert "group_id" in note and "again" in note


def test_one_group_id_on_both_sides_of_a_restart_is_two_groups(tmp_path):
    """The last group of one process and the first of the next share an id with no line between: the rewards
    fall (the filter writes ascending rewards) or a rollout_id comes back, so the run is split."""
    rng_group = gen.run_events(gen.RunConfig(seed=5, groups=1, validation=0))[0].groups[0]
    rising = json.loads(json.dumps(rng_group))
    for rollout, reward in zip(rising["rollouts"], [0.0, 0.1, 0.2, 0.9, 1.0, 1.0, 0.9, 0.2], strict=True):
        rollout["reward"] = reward
    for _ in range(2):  # two processes, each recording the group first
        gen.write_run(tmp_path, [gen.Event(False, [rising])])
    table = rollaudit.load(tmp_path / gen.FILE_NAME)
    assert table.column("prompt").to_pylist() == ["0:0", "0:0", "1:0", "1:0"]


def test_validation_lines_are_left_out_and_counted(tmp_path):
    processes = _processes([gen.RunConfig(seed=8, groups=4, validation=3)])
    table = rollaudit.load(_write(tmp_path, processes))
    assert found_in(table)[LABEL]["validation lines left out"] == 6
    assert not any(key.split(":")[1].startswith("-") for key in table.column("prompt").to_pylist())
    assert any(note.startswith("6 validation lines (2 passes") for note in notes_in(table))


def test_a_file_of_validation_lines_only_is_refused(tmp_path):
    events = gen.run_events(gen.RunConfig(seed=1, groups=0, validation=3))
    path = gen.write_run(tmp_path, events)
    with pytest.raises(InputError, match="holds no training line"):
        rollaudit.load(path)


def test_untrainable_groups_from_empty_completions_where_tokens_are_logged(tmp_path):
    events = gen.run_events(gen.RunConfig(seed=2, groups=3, group_size=2, validation=0))
    target = events[0].groups[0]
    for turn in target["rollouts"][0]["turns"]:
        turn["completion_token_ids"] = []
    path = gen.write_run(tmp_path, events, log_tensors=True)
    table = rollaudit.load(path)
    frame = table.to_pandas()
    marked = frame[frame["prompt"] == f"0:{target['group_id']}"][NOT_TRAINED]
    assert set(marked) == {UNTRAINABLE}


def test_no_policy_version_anywhere_leaves_the_step_unbounded(tmp_path):
    events = gen.run_events(gen.RunConfig(seed=6, groups=3, validation=0))
    for event in events:
        for rollout in event.groups[0]["rollouts"]:
            rollout["turns"] = []
    table = rollaudit.load(gen.write_run(tmp_path, events))
    assert facts_in(table)["no_step"] == NO_STEP
    assert set(table.column("step").to_pylist()) == {0}
    assert set(table.column(NOT_TRAINED).to_pylist()) == {UNTRAINABLE}


# ---------------------------------------------------------------------------------------------------------------------
# Older writers: step first, string group ids, sample_id, one policy_version per turn.


def _older_run(path: Path, *, steps: int = 2, first_step: int = 1, null_untrainable: bool = True) -> list[dict]:
    """A synchronous run as the older recorder wrote it: validation at step 0, each step's groups together."""
    written = []
    validation = gen.run_events(gen.RunConfig(seed=30, groups=0, validation=2))[0].groups
    for group in validation:
        group["group_id"] = f"val/step=0/group={-group['group_id'] - 1}"
        for rollout in group["rollouts"]:
            rollout["group_id"] = group["group_id"]
    gen.record_older(path, step=0, is_validation=True, rollout_groups=validation)
    for step in range(first_step, first_step + steps):
        events = gen.run_events(gen.RunConfig(seed=step, groups=3, validation=0, untrainable_groups=(1,)))
        groups = [event.groups[0] for event in events]
        for index, group in enumerate(groups):
            group["group_id"] = f"step={step}/group={index}"
            lacking = any(not rollout["turns"] for rollout in group["rollouts"])
            for rollout in group["rollouts"]:
                rollout["group_id"] = group["group_id"]
                if lacking and null_untrainable:
                    rollout["advantage"] = None  # the first writer's builder left it unset
        gen.record_older(path, step=step, is_validation=False, rollout_groups=groups)
        written += groups
    return written


def test_the_older_layout_reads_step_and_string_group_ids(tmp_path):
    path = tmp_path / gen.FILE_NAME
    groups = _older_run(path)
    table = rollaudit.load(path)
    frame = table.to_pandas()
    assert set(frame["step"]) == {1, 2}
    assert set(frame["prompt"]) == {f"0:{group['group_id']}" for group in groups}
    assert frame["trajectory"].str.match(r"^0:step=\d/group=\d/\d$").all()
    assert found_in(table)[LABEL]["validation lines left out"] == 2
    unset = frame["recorded_advantage"].isna()
    assert (frame[NOT_TRAINED][unset] == NO_ADVANTAGE).all() and frame[NOT_TRAINED][~unset].isna().all()
    assert any(note.startswith("step = the step field") for note in notes_in(table))


def test_the_older_layout_restarting_at_step_1_is_a_second_segment(tmp_path):
    path = tmp_path / gen.FILE_NAME
    _older_run(path, steps=2)
    _older_run(path, steps=2)
    table = rollaudit.load(path)
    frame = table.to_pandas()
    assert set(frame["segment"]) == {0, 1}
    assert frame.groupby("prompt")["segment"].nunique().max() == 1
    assert sorted(set(frame["step"])) == [1, 2, 3, 4]  # the second run's steps 1-2 moved after the first's


def test_an_older_sample_id_that_is_not_its_group_ids_is_refused(tmp_path):
    path = tmp_path / gen.FILE_NAME
    _older_run(path, steps=1)
    lines = path.read_text().splitlines()
    record = json.loads(lines[-1])
    record["sample_id"] = "step=9/group=0/sample=1"
    path.write_text("\n".join([*lines[:-1], json.dumps(record)]) + "\n")
    with pytest.raises(InputError, match=r"field 'sample_id'.*not its group_id"):
        rollaudit.load(path)


def test_a_file_mixing_writer_versions_is_one_line_naming_group_id(tmp_path):
    path = tmp_path / gen.FILE_NAME
    gen.write_run(tmp_path, gen.run_events(gen.RunConfig(seed=1, groups=2)))
    _older_run(path, steps=1)
    with pytest.raises(InputError) as error:
        rollaudit.load(path)
    assert "'group_id'" in error.value.line()


# ---------------------------------------------------------------------------------------------------------------------
# Bad input, discovery.


@pytest.mark.parametrize("field", ["reward", "group_id", "rollout_id", "turns", "is_validation"])
def test_a_missing_field_is_one_line_naming_it(tmp_path, field):
    path = gen.write_run(tmp_path, gen.run_events(gen.RunConfig(seed=1, groups=2)))
    lines = path.read_text().splitlines()
    record = json.loads(lines[4])
    record[field] = None
    lines[4] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as error:
        rollaudit.load(path)
    assert f"field '{field}'" in error.value.line() and "row 5" in error.value.line()


def test_two_runs_are_never_merged(tmp_path):
    for name in ("a", "b"):
        gen.write_run(tmp_path / name, gen.run_events(gen.RunConfig(seed=1, groups=2)))
    with pytest.raises(InputError, match=r"holds 2 runs|2 torchtitan dumps"):
        rollaudit.load(tmp_path)
    with pytest.raises(InputError, match="2 torchtitan dumps given together"):
        rollaudit.load([tmp_path / "a" / gen.FILE_NAME, tmp_path / "b" / gen.FILE_NAME])


def test_found_from_the_run_directory_the_dump_folder_and_a_renamed_file(tmp_path):
    dump = tmp_path / "outputs" / "rl"
    path = gen.write_run(dump, gen.run_events(gen.RunConfig(seed=1, groups=3)))
    for place in (tmp_path, tmp_path / "outputs", dump, path):
        table = rollaudit.load(place)
        assert rollaudit.loaded_formats(table) == ["torchtitan"]
    renamed = tmp_path / "elsewhere" / "samples.log.jsonl"
    renamed.parent.mkdir()
    shutil.copy(path, renamed)
    assert rollaudit.detect_format(renamed) == "torchtitan"
    assert rollaudit.load(renamed).num_rows == rollaudit.load(path).num_rows


# ---------------------------------------------------------------------------------------------------------------------
# The writer reproduced against torchtitan's own (skipped without its source).

UPSTREAM_RUNS = {
    "default": (list(gen.DEFAULT_RUN), 1, False),
    "whole_log_tensors": ([gen.WHOLE_RUN], 2, True),
    "grpo": ([replace(gen.WHOLE_RUN, should_std_normalize=True, seed=40)], 1, False),
    "singletons_and_pairs": ([gen.RunConfig(seed=41, group_size=1), gen.RunConfig(seed=42, group_size=2)], 1, False),
    "seed_size": ([gen.RunConfig(seed=43, groups=30, group_size=16, constant_groups=(0, 9))], 3, True),
}


@pytest.mark.parametrize("name", sorted(UPSTREAM_RUNS))
def test_the_reproduced_writer_writes_torchtitans_own_bytes(tmp_path, name):
    own = upstream()
    configs, k, log_tensors = UPSTREAM_RUNS[name]
    processes = _processes(configs)
    ours = _write(tmp_path / "ours", processes, k, log_tensors)
    for events, config in zip(processes, configs, strict=True):
        theirs = own.write_run(
            tmp_path / "theirs", events, k=k, log_tensors=log_tensors, std=config.should_std_normalize
        )
    assert ours.read_bytes() == theirs.read_bytes()
    _check_against_oracle(rollaudit.load(theirs), _oracle(processes, k, log_tensors), len(processes))


def test_the_samples_are_what_the_generator_writes():
    assert gen.main(["--check"]) == 0


@pytest.mark.parametrize("version", [-1, 2**62])
def test_a_policy_version_that_is_no_step_count_is_refused(tmp_path, version):
    path = gen.write_run(tmp_path, gen.run_events(gen.RunConfig(seed=1, groups=2, validation=0)))
    lines = path.read_text().splitlines()
    record = json.loads(lines[1])
    record["turns"][0]["max_policy_version"] = version
    lines[1] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as error:
        rollaudit.load(path)
    assert "field 'turns[].max_policy_version': row 2" in error.value.line()


# ---------------------------------------------------------------------------------------------------------------------
# The run's config: drop_zero_std_reward_groups off trains the constant groups.


def _torchtitan_run(tmp_path):
    from tests.conformance.conftest import corpus

    folder = tmp_path / "outputs" / "rl"
    folder.mkdir(parents=True)
    source = corpus("torchtitan") / "drgrpo_default" / "outputs" / "rl" / "rollout_samples.jsonl"
    (folder / "rollout_samples.jsonl").write_bytes(source.read_bytes())
    return folder


def test_a_config_with_drop_zero_std_off_audits_the_constant_groups_as_trained(tmp_path):
    folder = _torchtitan_run(tmp_path)
    assumed = rollaudit.audit(rollaudit.load(folder), device="cpu")
    config = tmp_path / "run.toml"
    config.write_text("[async_loop.training_sample_builder]\ndrop_zero_std_reward_groups = false\n")
    report = rollaudit.audit(rollaudit.load(folder, config=config), device="cpu")
    counts = next(iter(report.info["found"].values()))
    assert "groups not trained: all rewards equal (drop_zero_std_reward_groups)" not in counts
    assert report.info["samples"] == assumed.info["samples"] + 10  # 5 constant groups of 2 dumped rows
    assert "drop_zero_std_reward_groups=false (from " in report.trained_with.why
    assert any(
        "5 groups whose dumped rewards are all equal audited as trained" in note for note in report.info["loader_notes"]
    )


def test_the_wandb_copy_of_the_config_in_the_dump_folder_is_read_unnamed(tmp_path):
    folder = _torchtitan_run(tmp_path)
    files = folder / "wandb" / "latest-run" / "files"
    files.mkdir(parents=True)
    (files / "config.yaml").write_text(
        "async_loop:\n  desc: null\n  value:\n    training_sample_builder:\n      drop_zero_std_reward_groups: false\n"
        "rollouter:\n  value:\n    advantage:\n      should_std_normalize: false\n"
    )
    report = rollaudit.audit(rollaudit.load(folder), device="cpu")
    assert "config.yaml" in report.trained_with.why and "should_std_normalize=false" in report.trained_with.why
