"""What the audit of a big table holds and makes: integer keys coded step by step where the steps are long runs, no
codes for keys no row has, the loaded table's audited columns in one chunk each (read in place, never copied), and
the advantages let go before the per-prompt rows are made. Each path gives the numbers of the general one."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rollaudit
import rollaudit._audit.engine.groups as groups_module
from rollaudit._audit.engine.encode import encode
from rollaudit._audit.engine.groups import grouping_of
from rollaudit._table import AUDITED_COLUMNS, PROMPT, TRAJECTORY, dictionary_codes

SAMPLES = rollaudit.__path__[0] + "/../sample_dumps"


def _wide_keys_table(steps: int, rows_per_step: int, distinct: int, seed: int) -> pa.Table:
    """Steps in order, each of ``rows_per_step`` rows, prompt keys drawn from ``distinct`` wide int64 ids (so that keys
    repeat within and across steps), rewards with ties."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(-(2**62), 2**62, distinct, dtype=np.int64)
    return rollaudit.make_table(
        reward=rng.integers(0, 3, steps * rows_per_step).astype(np.float64),
        prompt=rng.choice(ids, steps * rows_per_step),
        step=np.repeat(np.arange(steps) * 3 + 1, rows_per_step),
    )


def _report_text(table: pa.Table, schemes: list[str]) -> str:
    report = rollaudit.audit(table, schemes=schemes, device="cpu", keep_advantages=True)
    document = report.to_dict()
    document["info"].pop("seconds")
    advantages = report.advantages_by_scheme()
    return json.dumps(document, sort_keys=True, default=str) + repr({k: v.tolist() for k, v in advantages.items()})


@pytest.mark.parametrize(
    ("distinct", "dense_everywhere"),
    [(10**6, True), (40, False)],  # many keys: the pairs of the whole table are densified too; few: counted in bins
)
def test_wide_integer_keys_coded_step_by_step_group_as_over_the_whole_table(monkeypatch, distinct, dense_everywhere):
    table = _wide_keys_table(steps=6, rows_per_step=groups_module.STEP_BY_STEP_ROWS + 88, distinct=distinct, seed=7)
    prompt = rollaudit.get_scheme("prompt")
    by_step = grouping_of(encode(table, "cpu"), prompt)
    schemes = ["batch", "prompt", "dr-grpo", "prompt(scale=none)"]
    stepwise = _report_text(table, schemes)
    assert PROMPT not in encode(table, "cpu")._keys  # no code of the keys alone was made
    monkeypatch.setattr(groups_module, "STEP_BY_STEP_ROWS", 10**9)  # the general path: a hash of the whole table
    whole = grouping_of(encode(table, "cpu"), prompt)
    assert by_step.count == int(by_step.codes.max()) + 1  # dense
    if dense_everywhere:
        assert torch.equal(by_step.codes, whole.codes) and by_step.count == whole.count
    else:  # the general path leaves gaps: the same groups in the same order
        assert torch.equal(torch.unique(whole.codes, return_inverse=True)[1], by_step.codes)
    assert _report_text(table, schemes) == stepwise


@pytest.mark.parametrize("kind", ["text", "narrow int"])
def test_key_codes_paired_with_steps_a_step_at_a_time_group_as_over_the_whole_table(monkeypatch, kind):
    """Keys whose codes are few but whose (step, code) pairs are too many for bins: each step's codes are densified
    on their own rather than a sort of every pair; the same codes, and the same report."""
    steps, rows_per_step = 6, groups_module.STEP_BY_STEP_ROWS + 88
    rng = np.random.default_rng(3)
    # Integers in a range small enough to be their own codes; texts drawn from many more.
    keys = rng.integers(0, 3000 if kind == "narrow int" else 100_000, steps * rows_per_step)
    table = rollaudit.make_table(
        reward=rng.integers(0, 3, steps * rows_per_step).astype(np.float64),
        prompt=[f"prompt {key}" for key in keys] if kind == "text" else keys,
        step=np.repeat(np.arange(steps) * 2, rows_per_step),
    )
    prompt = rollaudit.get_scheme("prompt")
    codes, count = encode(table, "cpu").key_codes(PROMPT)
    assert not groups_module.counted_in_bins(steps * count, len(codes))  # the pairs are wide
    schemes = ["batch", "prompt", "dr-grpo"]
    coded, compact_codes = [], groups_module.compact_codes
    monkeypatch.setattr(
        groups_module,
        "compact_codes",
        lambda keys, owned=False: coded.append(keys.numel()) or compact_codes(keys, owned),
    )
    by_step, stepwise = grouping_of(encode(table, "cpu"), prompt), _report_text(table, schemes)
    assert coded == []  # no pair per row was made, nor coded
    monkeypatch.setattr(groups_module, "STEP_BY_STEP_ROWS", 10**9)  # the general path: a sort of every pair
    whole = grouping_of(encode(table, "cpu"), prompt)
    assert torch.equal(by_step.codes, whole.codes) and by_step.count == whole.count
    assert _report_text(table, schemes) == stepwise


@pytest.mark.parametrize(
    ("keys", "reused"),
    [
        ("uids", True),  # text keys unique to their step, each step's shuffled: codes in order of first appearance
        ("ascending ints with gaps", True),
        ("one key in two steps", False),  # the same key in two steps is two groups: pairs are coded
        ("keys restart each step", False),
    ],
)
def test_key_codes_already_in_step_order_are_the_group_codes(monkeypatch, keys, reused):
    """Keys unique to their step, in step order: their codes are the groups' codes (no code per row is made), and
    the audit is the one the pairs' own codes give."""
    rng = np.random.default_rng(5)
    steps, groups_per_step, size = 5, 40, 6
    per_step = [rng.permutation(np.repeat(np.arange(groups_per_step), size)) for _ in range(steps)]
    if keys == "uids":
        prompt = [f"{step:02d}{key:04d}" for step, row in enumerate(per_step) for key in row]
    elif keys == "ascending ints with gaps":
        prompt = np.concatenate([row * 3 + step * 1000 for step, row in enumerate(per_step)])
    elif keys == "one key in two steps":
        prompt = np.concatenate([row + step * groups_per_step for step, row in enumerate(per_step)])
        prompt[-1] = prompt[0]
    else:
        prompt = np.concatenate(per_step)
    table = rollaudit.make_table(
        reward=rng.integers(0, 3, steps * groups_per_step * size).astype(np.float64),
        prompt=prompt,
        step=np.repeat(np.arange(steps) + 10, groups_per_step * size),
    )
    enc = encode(table, "cpu")
    grouping = grouping_of(enc, rollaudit.get_scheme("prompt"))
    key_codes, _ = enc.key_codes(PROMPT)
    assert (grouping.codes.data_ptr() == key_codes.data_ptr()) is reused
    schemes = ["batch", "prompt", "dr-grpo", "verl-rloo"]
    in_step_order = _report_text(table, schemes)
    monkeypatch.setattr(groups_module, "_highest_in_step_order", lambda enc, minor: None)
    paired = grouping_of(encode(table, "cpu"), rollaudit.get_scheme("prompt"))
    assert torch.equal(
        torch.unique(paired.codes, return_inverse=True)[1], torch.unique(grouping.codes, return_inverse=True)[1]
    )
    assert _report_text(table, schemes) == in_step_order


def test_keys_with_a_small_range_or_short_steps_take_the_general_path():
    short = _wide_keys_table(steps=6, rows_per_step=groups_module.STEP_BY_STEP_ROWS - 1, distinct=50, seed=1)
    assert groups_module._wide_keys_by_step(encode(short, "cpu"), PROMPT) is None
    narrow = rollaudit.make_table(reward=np.zeros(4096), prompt=np.arange(4096) // 8, step=np.repeat([0, 1], 2048))
    assert groups_module._wide_keys_by_step(encode(narrow, "cpu"), PROMPT) is None


def test_no_code_is_made_for_trajectory_keys_no_row_has():
    table = rollaudit.make_table(reward=[0.0, 1.0, 1.0, 0.0], prompt=[0, 0, 1, 1], step=[0, 0, 1, 1])
    enc = encode(table, "cpu")
    report = rollaudit.audit(table, device="cpu")
    assert enc.trajectory_count == 0 and TRAJECTORY not in enc._keys
    assert "trajectory" in report.not_auditable


def test_load_joins_each_audited_number_column_into_one_chunk_and_leaves_text_keys_in_the_files_chunks():
    run = rollaudit.load(SAMPLES + "/verl/rollout_data")
    files = rollaudit.expand_paths(SAMPLES + "/verl/rollout_data")
    assert len(files) > 1
    for name in AUDITED_COLUMNS:
        column = run.column(name)
        if pa.types.is_string(column.type):
            assert column.num_chunks == len(files), name
        else:
            assert column.num_chunks == 1 or column.null_count == len(column), name
    by_file = pa.concat_tables(rollaudit.load(path) for path in files)
    assert run.column("reward").to_pylist() == by_file.column("reward").to_pylist()
    assert run.column(PROMPT).to_pylist() == by_file.column(PROMPT).to_pylist()


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "cc", "", "é"])), max_size=6), max_size=5),
    nulls=st.sampled_from(["encode", "mask"]),
)
def test_text_keys_coded_chunk_by_chunk_get_the_codes_of_the_whole_column(chunks, nulls):
    column = pa.chunked_array([pa.array(chunk, pa.string()) for chunk in chunks], pa.string())
    codes, count = dictionary_codes(column, nulls)
    whole = pa.compute.dictionary_encode(column.combine_chunks(), null_encoding=nulls)
    assert codes.dtype == np.int64
    assert codes.tolist() == whole.indices.fill_null(0).to_pylist()
    assert count == len(whole.dictionary)
    # And as the audit codes its keys: a null is -1, equal texts equal codes.
    table = rollaudit.make_table(reward=np.zeros(len(column)), prompt=column, step=np.zeros(len(column), dtype=int))
    if len(column):
        audit_codes, audit_count = encode(table, "cpu").key_codes(PROMPT)
        values = column.to_pylist()
        assert [code == -1 for code in audit_codes.tolist()] == [value is None for value in values]
        firsts = list(dict.fromkeys(value for value in values if value is not None))
        assert audit_codes.tolist() == [-1 if value is None else firsts.index(value) for value in values]
        assert audit_count == len(firsts)


def test_the_advantages_are_kept_only_where_asked_for():
    table = _wide_keys_table(steps=2, rows_per_step=64, distinct=20, seed=3)
    kept = rollaudit.audit(table, device="cpu", keep_advantages=True)
    assert kept.advantages is not None and kept.distributions is not None
    assert rollaudit.audit(table, device="cpu").advantages is None
    assert rollaudit.audit(table, device="cpu").distributions == kept.distributions
