"""Audit metrics against the oracle, the Report, the canonical table, and the cheap import."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rollaudit
import rollaudit._audit.engine.tally
from rollaudit import InputError
from tests.audit.test_kernel import batches, table_of
from tests.oracle import oracle_advantages, oracle_metrics, oracle_sign

# Random trajectories' rows may carry different rewards: the trajectory scheme names its representative.
TRAJECTORY = "trajectory(representative=first)"
METRIC_SCHEMES = ["batch", TRAJECTORY, "slime-legacy(n=2)", "dr-grpo", "nemo-loo(dtype=float64)"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=batches(), lengths=st.lists(st.one_of(st.none(), st.integers(0, 50)), min_size=200, max_size=200))
def test_metrics_match_oracle(rows, lengths):
    for row, length in zip(rows, lengths, strict=False):
        row["response_length"] = length
    lengths_known = any(row["response_length"] is not None for row in rows)
    report = rollaudit.audit(table_of(rows), schemes=METRIC_SCHEMES, reference="prompt", device="cpu")
    reference = oracle_advantages([dict(row) for row in rows], rollaudit.get_scheme("prompt"))
    keyless = all(row["trajectory"] is None for row in rows)
    assert (TRAJECTORY in report.not_auditable) == keyless
    for scheme in METRIC_SCHEMES:
        if keyless and scheme == TRAJECTORY:
            continue
        values = oracle_advantages([dict(row) for row in rows], rollaudit.get_scheme(scheme))
        expected = oracle_metrics(
            values, reference, [row["response_length"] for row in rows] if lengths_known else None
        )
        got = report.summary.loc[scheme]
        for metric, value in expected.items():
            if value is None:
                assert math.isnan(got[metric]), (scheme, metric, got[metric])
            else:
                assert got[metric] == pytest.approx(value, abs=1e-9), (scheme, metric)


def _oracle_per_step_and_prompt(rows, schemes, reference_name="prompt"):
    """Per step: the oracle's metrics of every scheme; per (step, prompt): size, trajectories, mean reward and
    each scheme's mean advantage, flips and spurious advantages, one sample at a time."""
    values = {name: oracle_advantages([dict(row) for row in rows], rollaudit.get_scheme(name)) for name in schemes}
    reference = values[reference_name]
    per_step, per_prompt = {}, {}
    for step in sorted({row["step"] for row in rows}):
        indices = [index for index, row in enumerate(rows) if row["step"] == step]
        lengths = [rows[index]["response_length"] for index in indices]
        for name, scheme_values in values.items():
            per_step[(step, name)] = oracle_metrics(
                [scheme_values[i] for i in indices], [reference[i] for i in indices], lengths
            )
        for prompt in {rows[index]["prompt"] for index in indices}:
            members = [index for index in indices if rows[index]["prompt"] == prompt]
            finite = [rows[i]["reward"] for i in members if math.isfinite(rows[i]["reward"])]
            keys = [rows[i]["trajectory"] for i in members]
            entry = {
                "samples": len(members),
                "trajectories": len({key for key in keys if key is not None}) + keys.count(None),
                "mean_reward": math.fsum(finite) / len(finite) if finite else None,
            }
            for name, scheme_values in values.items():
                pairs = [(scheme_values[i], reference[i]) for i in members]
                pairs = [(a, b) for a, b in pairs if not (math.isnan(a) or math.isnan(b))]
                entry[f"mean_advantage:{name}"] = math.fsum(a for a, _ in pairs) / len(pairs) if pairs else None
                if name != reference_name:
                    signs = [(oracle_sign(a), oracle_sign(b)) for a, b in pairs]
                    entry[f"flips:{name}"] = sum(a != b for a, b in signs) if pairs else None
                    entry[f"spurious:{name}"] = sum(a != 0 and b == 0 for a, b in signs) if pairs else None
            per_prompt[(step, prompt)] = entry
    return per_step, per_prompt


def _assert_value(got, expected, where):
    if expected is None:
        assert got is pd.NA or math.isnan(got), (where, got)
    else:
        assert got == pytest.approx(expected, abs=1e-9), (where, got, expected)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.booleans().flatmap(lambda repeat: batches(allow_missing_trajectory=False, repeat_prompts=repeat)),
    piece=st.sampled_from([1, 2, 5, 1 << 20]),
    most_spans=st.sampled_from([0, 8]),
    in_step_order=st.booleans(),
)
def test_per_step_and_per_prompt_match_oracle(rows, piece, most_spans, in_step_order):
    """Every step's metrics and every prompt's row, with prompt and trajectory keys repeating from step to step
    or not, rows in step order or shuffled, and the metric pass cut into pieces of 1, 2, 5 rows or whole, each
    reduced step by step or in one segment reduction."""
    if in_step_order:
        rows = sorted(rows, key=lambda row: (row["step"], row["position"]))
    schemes = ["batch", "prompt", TRAJECTORY]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rollaudit._audit.engine.sizing, "PIECE_ROWS", piece)
        patch.setattr(rollaudit._audit.engine.groups, "_MOST_SPANS", most_spans)
        report = rollaudit.audit(table_of(rows), schemes=schemes, reference="prompt", device="cpu")
    per_step, per_prompt = _oracle_per_step_and_prompt(rows, schemes)
    assert len(report.per_step) == len(per_step)
    for (step, name), expected in per_step.items():
        for metric, value in expected.items():
            _assert_value(report.per_step.loc[(step, name), metric], value, (step, name, metric))
    table = report.per_prompt.set_index(["step", "prompt"])
    assert len(table) == len(per_prompt) and table.index.is_unique
    for key, expected in per_prompt.items():
        for column, value in expected.items():
            _assert_value(table.loc[key, column], value, (key, column))
    sizes = sorted(entry["samples"] for entry in per_prompt.values())
    assert report.histograms["samples_per_prompt"] == {size: sizes.count(size) for size in sorted(set(sizes))}
    trajectories = sorted(entry["trajectories"] for entry in per_prompt.values())
    assert report.histograms["trajectories_per_prompt"] == {n: trajectories.count(n) for n in sorted(set(trajectories))}
    members = Counter((row["step"], row["prompt"], row["trajectory"]) for row in rows)
    per_trajectory = Counter(members.values())
    assert report.histograms["samples_per_trajectory"] == dict(sorted(per_trajectory.items()))
    # Per step, the prompt groups' sizes, one step at a time.
    assert list(report.step_groups.index) == sorted({step for step, _ in per_prompt})
    for step, got in report.step_groups.iterrows():
        step_sizes = [entry["samples"] for (at, _), entry in per_prompt.items() if at == step]
        expected = {
            "prompts": len(step_sizes),
            "samples": sum(step_sizes),
            "trajectories": sum(entry["trajectories"] for (at, _), entry in per_prompt.items() if at == step),
            "smallest_group": min(step_sizes),
            "median_group": statistics.median(step_sizes),
            "largest_group": max(step_sizes),
            "group_size_std": statistics.pstdev(step_sizes),
        }
        for column, value in expected.items():
            assert got[column] == pytest.approx(value, rel=1e-12, abs=1e-12), (step, column)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.booleans().flatmap(lambda repeat: batches(repeat_prompts=repeat)), shuffled=st.booleans())
def test_audit_is_the_same_in_threads_or_one_after_another(rows, shuffled):
    """The audit's schedule (schemes, passes and prompt columns side by side in threads, or one after another
    with one torch thread) changes no number, not even a last digit."""
    if not shuffled:
        rows = sorted(rows, key=lambda row: (row["step"], row["position"]))
    schemes = ["batch", "prompt", TRAJECTORY, "verl-grpo"]
    before = torch.get_num_threads()
    reports = {}
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            reports[threads] = rollaudit.audit(table_of(rows), schemes=schemes, reference="prompt", device="cpu")
    finally:
        torch.set_num_threads(before)
    for frame in ("summary", "per_step", "per_prompt", "step_groups"):
        pd.testing.assert_frame_equal(getattr(reports[2], frame), getattr(reports[1], frame), check_exact=True)
    assert reports[2].histograms == reports[1].histograms
    assert reports[2].info.keys() - {"seconds"} == reports[1].info.keys() - {"seconds"}


def seed_like_table():
    """Two prompts solved by nobody, one by half the samples: the seed's failure in miniature."""
    return rollaudit.make_table(
        reward=[0, 0, 0, 0, 0, 0, 1, 1, 0, 0],
        prompt=[0, 0, 0, 1, 1, 1, 2, 2, 2, 2],
        trajectory=[0, 1, 2, 3, 4, 5, 6, 6, 7, 8],
        response_length=[10, 20, 30, 10, 20, 30, 5, 5, 5, 5],
    )


def test_batch_centring_invents_signal_for_unsolved_prompts():
    report = rollaudit.audit(seed_like_table())
    batch = report.summary.loc["batch"]
    assert batch["nonzero"] == 10 and batch["nonzero_reference"] == 4
    assert batch["nonzero_inflation"] == pytest.approx(2.5)
    assert batch["spurious_nonzero"] == 6 and batch["lost_signal"] == 0
    assert batch["sign_flip_rate"] == pytest.approx(0.6)
    # Token-weighted: the 6 flipped samples of prompts 0 and 1 carry 120 of 140 tokens.
    assert batch["token_flip_rate"] == pytest.approx(120 / 140)
    silent = report.silent_prompts()
    assert sorted(silent["prompt"]) == [0, 1]
    assert report.worst_prompts().iloc[0]["prompt"] in (0, 1)


def test_reference_row_is_identity_and_inflation_undefined_without_signal():
    report = rollaudit.audit(rollaudit.make_table(reward=[1.0, 1.0], prompt=[0, 0]), schemes=["batch"])
    assert report.summary.loc["prompt", "sign_flip_rate"] == 0
    assert math.isnan(report.summary.loc["batch", "nonzero_inflation"])
    assert math.isnan(report.summary.loc["batch", "advantage_cosine"])
    assert report.to_dict()["summary"]["batch"]["nonzero_inflation"] is None


def test_histograms_and_per_prompt_table():
    report = rollaudit.audit(seed_like_table())
    assert report.histograms == {
        "samples_per_prompt": {3: 2, 4: 1},
        "trajectories_per_prompt": {3: 3},
        "samples_per_trajectory": {1: 8, 2: 1},
    }
    row = report.per_prompt.set_index("prompt").loc[2]
    assert (row["samples"], row["trajectories"], row["mean_reward"]) == (4, 3, 0.5)
    assert {"mean_advantage:batch", "flips:batch", "spurious:batch", "flips:trajectory"} <= set(report.per_prompt)


def test_per_step_metrics_and_nonfinite_rewards():
    table = rollaudit.make_table(reward=[0, 1, 0, 0, math.nan, 1], prompt=[0, 0, 1, 1, 2, 2], step=[3, 3, 3, 3, 4, 4])
    report = rollaudit.audit(table, schemes=["batch"])
    assert list(report.per_step.index.get_level_values("step").unique()) == [3, 4]
    assert report.per_step.loc[(3, "batch"), "spurious_nonzero"] == 2
    assert report.info["nonfinite_rewards"] == 1 and report.info["nonfinite_rows"] == [4]
    assert report.summary.loc["batch", "undefined"] == 1


def test_to_dict_is_versioned_json():
    document = rollaudit.audit(seed_like_table()).to_dict()
    text = json.dumps(document, allow_nan=False)
    assert json.loads(text)["schema_version"] == rollaudit.SCHEMA_VERSION
    assert set(document["summary"]) == {"batch", "prompt", "trajectory"}
    assert set(document["summary"]["batch"]) == set(rollaudit.METRICS)
    assert document["reference"] == "prompt"


def test_lazy_per_step_rows_are_the_eager_ones_and_a_step_is_looked_up_alone(monkeypatch: pytest.MonkeyPatch):
    rng = np.random.default_rng(5)
    steps = np.repeat(np.arange(9), 8)
    table = rollaudit.make_table(reward=rng.integers(0, 2, 72), prompt=np.arange(72) // 4, step=steps)
    report = rollaudit.audit(table)
    eager, lazy = report.to_dict()["per_step"], report.to_dict(lazy_steps=True)["per_step"]
    assert list(eager) == [str(step) for step in range(9)] == list(lazy)
    assert dict(lazy.items()) == eager and len(lazy) == 9
    monkeypatch.setattr(type(lazy), "CHUNK_STEPS", 2)  # chunks that end mid-run of steps: the same rows
    assert dict(lazy.items()) == eager
    built: list[int] = []
    chunk = type(lazy)._chunk
    monkeypatch.setattr(
        type(lazy), "_chunk", lambda self, first, last: built.append(last - first) or chunk(self, first, last)
    )
    assert lazy["3"] == eager["3"] and built == [1]  # one step made, not the whole run
    with pytest.raises(KeyError):
        lazy["99"]


def test_repr_html_renders_the_summary():
    html = rollaudit.audit(seed_like_table())._repr_html_()
    assert "<table" in html and "sign changed" in html and "batch" in html and "Verdict" in html


def test_recompute_names_columns_by_scheme_apart_from_the_tables_own():
    table = seed_like_table()
    out = rollaudit.recompute(table, "batch, prompt, trajectory, prompt(scale=none)")
    assert out.column_names == [
        "advantage:batch",
        "advantage:prompt",
        "advantage:trajectory",
        "advantage:prompt(scale=none)",
    ]
    assert out.schema.field(0).type == pa.float64() and out.num_rows == table.num_rows
    # No name of the table's own: the advantages join the rows they come from.
    joined = table.to_pandas().join(out.to_pandas())
    assert list(joined.columns) == [*table.column_names, *out.column_names]


def test_kept_advantages_carry_each_samples_keys_and_reward():
    table = rollaudit.make_table(
        reward=[1.0, 0.0, 1.0, 1.0, 0.0],
        prompt=["a", "a", "b", "b", "a"],
        trajectory=[0, 1, 2, 2, 3],
        step=[4, 4, 4, 4, 5],
    )
    report = rollaudit.audit(table, device="cpu", keep_advantages=True)
    kept = report.advantages
    assert kept.column_names == [
        "step",
        "prompt",
        "trajectory",
        "reward",
        "advantage:batch",
        "advantage:prompt",
        "advantage:trajectory",
    ]
    for name in ("step", "prompt", "trajectory", "reward"):
        assert kept.column(name).equals(table.column(name))
    expected = rollaudit.recompute(table, report.schemes, device="cpu")
    for name in expected.column_names:
        np.testing.assert_array_equal(kept.column(name).to_numpy(), expected.column(name).to_numpy())
    # Grouped by its own keys, with no table beside it.
    means = kept.to_pandas().groupby(["step", "prompt"])["advantage:prompt"].sum()
    assert means.abs().max() < 1e-12
    assert list(report.advantages_by_scheme()) == ["batch", "prompt", "trajectory"]


def test_a_report_without_kept_advantages_says_how_to_keep_them():
    report = rollaudit.audit(seed_like_table(), device="cpu")
    with pytest.raises(rollaudit.UsageError, match="keep_advantages=True"):
        report.prompt(0)


def test_a_misspelt_load_keyword_is_a_usage_error_naming_the_nearest():
    uniform = Path(__file__).resolve().parents[2] / "sample_dumps" / "uniform.pt"
    with pytest.raises(rollaudit.UsageError) as raised:
        rollaudit.load(uniform, prompt_coll="group_index")
    assert raised.value.line() == "load() takes no keyword 'prompt_coll' (did you mean 'prompt_col'?)"
    with pytest.raises(rollaudit.UsageError, match=r"takes no keyword 'zzz' \(expected one of options, on_file"):
        rollaudit.load(uniform, zzz=1)
    assert rollaudit.load(path_or_paths=uniform, reward_key=None).num_rows == 64


def test_unknown_device_is_an_error():
    with pytest.raises(rollaudit.SchemeError, match="unknown device"):
        rollaudit.recompute(seed_like_table(), device="tpu")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"reward": [1.0, None], "prompt": [0, 0]}, "field 'reward': row 2: is null"),
        ({"reward": [1.0, 2.0], "prompt": [0]}, "field 'prompt': has 1 values but reward has 2"),
        ({"reward": ["a", "b"], "prompt": [0, 0]}, "field 'reward': cannot read as double"),
        ({"reward": [1.0], "prompt": [1.5]}, "field 'prompt': key column has type double"),
        ({"reward": [1.0], "prompt": [0], "response_length": [-3]}, "field 'response_length': row 1: is negative"),
    ],
)
def test_make_table_names_the_bad_field(kwargs, message):
    with pytest.raises(InputError) as caught:
        rollaudit.make_table(**kwargs)
    assert message in caught.value.line()
    assert "\n" not in caught.value.line()


def test_validate_table_reports_missing_columns_and_keeps_pass_through():
    with pytest.raises(InputError, match="missing canonical column"):
        rollaudit.validate_table(pa.table({"reward": [1.0]}))
    table = rollaudit.make_table(reward=[1.0], prompt=["q"], label=["yes"])
    assert table.column_names[: len(rollaudit.CANONICAL_COLUMNS)] == list(rollaudit.CANONICAL_COLUMNS)
    assert table.column("label").to_pylist() == ["yes"]
    narrow = table.set_column(0, "step", table.column("step").cast(pa.int32()))
    assert rollaudit.validate_table(narrow).schema.field("step").type == pa.int64()


def test_import_is_cheap():
    code = (
        "import sys, rollaudit; rollaudit.Scheme; rollaudit.PRESETS;"
        "print('torch' in sys.modules, 'matplotlib' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


def test_tally_counts_each_step_whatever_the_order_of_the_group_codes():
    """Group codes are step-major wherever they come from; codes in another order count per step all the same
    (by an index add rather than a segment sum)."""
    from rollaudit._audit.engine.encode import encode
    from rollaudit._audit.engine.tally import Layout, Reference, tally
    from rollaudit._audit.kernel import advantages_of
    from rollaudit._audit.metrics import group_rows, with_trajectories

    table = rollaudit.make_table(
        reward=[0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 2, 5],
        prompt=[0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 3, 3],
        step=[0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2],
    )
    enc = encode(table, "cpu")
    values = advantages_of(enc, {name: rollaudit.get_scheme(name) for name in ("batch", "prompt")})
    groups = with_trajectories(enc, group_rows(enc))
    reversed_codes = groups.count - 1 - groups.group
    ordered = Layout.of(enc, groups.group, groups.count, groups.present, groups.step, groups.largest)
    unordered = Layout.of(
        enc,
        reversed_codes,
        groups.count,
        None if groups.present is None else (groups.count - 1 - groups.present).flip(0),
        groups.step.flip(0),
        groups.largest,
    )
    assert ordered.groups_per_step is not None and unordered.groups_per_step is None
    reference = Reference.of(values["prompt"], 1e-6)
    for name in ("batch", "prompt"):
        expected, got = tally(values[name], reference, ordered, 1e-6), tally(values[name], reference, unordered, 1e-6)
        assert torch.equal(expected.per_step.counts, got.per_step.counts)
        assert expected.per_step.counts[0].tolist() == [6, 4, 2]  # compared, per step
        assert torch.equal(expected.group_words, got.group_words.flip(1))


@pytest.mark.parametrize("largest", [1, 3, 4095, 4096, 2**21 - 1, 2**21, 2**31, 2**62])
def test_packed_class_counts_are_exact_at_every_field_width(largest):
    """A group's class counts packed into int64 words (one word below 4096 samples a group, more above) unpack to
    the plain counts, also for a group of the largest size whose every sample is of one pair code (each field
    full, no carry into the next)."""
    from rollaudit._audit.engine.tally import _CLASS_CODES, CLASSES, CODES, Packing

    packing = Packing.of(largest, torch.device("cpu"))
    assert packing.table.shape[0] == (1 if largest < 4096 else -(-len(CLASSES) // (63 // largest.bit_length())))
    generator = torch.Generator().manual_seed(largest % 1000)
    # Samples per pair code of each group: random groups of at most ``largest`` samples, then one full group per code.
    shares = torch.rand(64, CODES, generator=generator, dtype=torch.float64)
    sizes = torch.randint(0, min(largest, 2**52) + 1, (64, 1), generator=generator, dtype=torch.int64)
    histogram = (shares / shares.sum(1, keepdim=True) * sizes).floor().to(torch.int64)
    histogram = torch.cat([histogram, torch.eye(CODES, dtype=torch.int64) * largest])
    # What the scatters add up: per word, each sample's table entry, summed over the group (exact in int64).
    words = torch.stack([(histogram * table).sum(1) for table in packing.table])
    for name, codes in zip(CLASSES, _CLASS_CODES, strict=True):
        assert torch.equal(packing.unpack(words, name), histogram[:, codes].sum(1)), name


def test_a_group_of_more_than_4095_samples_is_counted_exactly():
    """Past 4095 samples a group's counts take two packed words: every metric and prompt row still match the
    oracle, with NaN rewards left out. Long trajectories of reward 1 pull the sample mean above the trajectory
    mean, so rewards of 0.5 between them flip strictly (a class in the second word)."""
    import random

    generator = random.Random(7)
    rows = []
    for prompt, size in enumerate([4100, 3, 1, 40]):
        start = len(rows)
        while len(rows) - start < size:
            reward = generator.choice([0.0, 0.5, 1.0] if prompt == 0 else [0.0, 1.0, 0.5, math.nan])
            trajectory = len(rows)
            for _ in range(min(5 if reward == 1.0 else 1, size - (len(rows) - start))):
                rows.append(
                    {"reward": reward, "prompt": prompt, "trajectory": trajectory, "step": 0, "response_length": None}
                )
    for position, row in enumerate(rows):
        row["position"] = position
    schemes = ["batch", "prompt", "trajectory"]
    report = rollaudit.audit(table_of(rows), schemes=schemes, reference="prompt", device="cpu")
    assert report.histograms["samples_per_prompt"] == {1: 1, 3: 1, 40: 1, 4100: 1}
    assert report.summary.loc["trajectory", "strict_flip_rate"] > 0
    per_step, per_prompt = _oracle_per_step_and_prompt(rows, schemes)
    for (step, name), expected in per_step.items():
        for metric, value in expected.items():
            _assert_value(report.per_step.loc[(step, name), metric], value, (step, name, metric))
            _assert_value(report.summary.loc[name, metric], value, (name, metric))
    table = report.per_prompt.set_index(["step", "prompt"])
    for key, expected in per_prompt.items():
        for column, value in expected.items():
            _assert_value(table.loc[key, column], value, (key, column))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    steps=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_step_group_statistics_are_the_same_counted_in_bins_or_sorted(sizes, steps, seed):
    """Per-step group statistics count groups by (step, size) in bins where those are few, else by a sort: the two
    give the same frame, and it matches plain Python."""
    from unittest import mock

    from rollaudit._audit import metrics

    rng = np.random.default_rng(seed)
    prompt = np.repeat(np.arange(len(sizes)), sizes)
    step = rng.integers(0, steps, size=len(sizes))[prompt]
    table = rollaudit.make_table(reward=rng.random(len(prompt)), prompt=prompt, step=step)
    binned = rollaudit.audit(table, ["prompt"], device="cpu").step_groups
    original = metrics._distinct_counts
    with mock.patch.object(metrics, "_distinct_counts", lambda keys, span: original(keys, 1 << 62)):
        sorted_ = rollaudit.audit(table, ["prompt"], device="cpu").step_groups
    pd.testing.assert_frame_equal(binned, sorted_)
    for value, row in binned.iterrows():
        group_sizes = [
            size for size, group_step in zip(sizes, step[np.cumsum(sizes) - 1], strict=True) if group_step == value
        ]
        assert row["prompts"] == len(group_sizes) and row["samples"] == sum(group_sizes)
        assert row["smallest_group"] == min(group_sizes) and row["largest_group"] == max(group_sizes)
        assert row["median_group"] == statistics.median(group_sizes)
        assert row["group_size_std"] == pytest.approx(statistics.pstdev(group_sizes), abs=1e-12)
