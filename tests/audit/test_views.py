"""Views of part of a run: some of its steps (``select_steps``) and one prompt's samples (``Report.prompt``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import rollaudit
from rollaudit._render.html import prompt_section
from rollaudit._render.prompt_view import (
    prompt_json,
    prompt_markdown,
    prompt_renderable,
    view_rows,
)

ROOT = Path(__file__).resolve().parents[2]
VERL = ROOT / "sample_dumps" / "verl" / "rollout_data"
DUMP_DETAILS = ROOT / "sample_dumps" / "dump_details"
FANOUT = ROOT / "sample_dumps" / "fanout"


def run_of_steps(steps=(0, 1, 2, 3, 5, 10, 11, 12)):
    rewards, prompts, step_of = [], [], []
    for step in steps:
        for prompt in range(3):
            for sample in range(4):
                rewards.append(float((step + prompt + sample) % 3 == 0))
                prompts.append(prompt)
                step_of.append(step)
    return rollaudit.make_table(reward=rewards, prompt=prompts, step=step_of)


# ---------------------------------------------------------------------------------------------------------------------
# Steps


@pytest.mark.parametrize(
    "spec, steps",
    [
        ("10-20,30", [(10, 20), (30, 30)]),
        (" 3 ", [(3, 3)]),
        ("1-1, 4 - 6", [(1, 1), (4, 6)]),
        ("-2--1", [(-2, -1)]),
        (7, [(7, 7)]),
        ([2, 5], [(2, 2), (5, 5)]),
    ],
)
def test_parse_steps(spec, steps):
    assert rollaudit.parse_steps(spec) == steps


@pytest.mark.parametrize(
    "spec, message",
    [
        ("10-x", "steps '10-x': '10-x' is not a step or a range"),
        ("3,,4", "steps '3,,4': '' is not a step or a range"),
        ("9-2", "steps '9-2': '9-2' runs backwards"),
        ([1.5], "steps [1.5] are not whole numbers"),
    ],
)
def test_a_bad_step_list_is_one_usage_line(spec, message):
    with pytest.raises(rollaudit.UsageError) as raised:
        rollaudit.parse_steps(spec)
    assert raised.value.line().startswith(message)
    assert "expected steps and inclusive ranges, comma-separated, e.g. 10-20,30" in raised.value.line()


def test_select_steps_keeps_the_steps_named_in_order():
    table = run_of_steps()
    chosen = rollaudit.select_steps(table, "1-3,11")
    assert sorted(set(chosen.column("step").to_pylist())) == [1, 2, 3, 11]
    assert chosen.num_rows == 4 * 12
    # A range need only overlap the dump: 4-10 holds 5 and 10.
    assert sorted(set(rollaudit.select_steps(table, "4-10").column("step").to_pylist())) == [5, 10]


@pytest.mark.parametrize(
    "spec, line",
    [
        ("40-45", "steps 40-45 are not in the dump (it holds 0-3, 5, 10-12)"),
        ("4", "step 4 is not in the dump (it holds 0-3, 5, 10-12)"),
        ("0-3,6-9,99", "steps 6-9, 99 are not in the dump (it holds 0-3, 5, 10-12)"),
    ],
)
def test_a_step_the_dump_lacks_is_one_line_naming_what_it_holds(spec, line):
    with pytest.raises(rollaudit.UsageError) as raised:
        rollaudit.select_steps(run_of_steps(), spec)
    assert raised.value.line() == line


def test_many_steps_are_named_as_ranges_cut_short():
    table = run_of_steps(steps=range(0, 40, 2))
    with pytest.raises(rollaudit.UsageError, match=r"\(it holds 0, 2, 4, 6, 8, \.\.\., 38\)"):
        rollaudit.select_steps(table, "1")


def test_an_audit_of_selected_steps_is_the_audit_of_those_steps_alone():
    table = rollaudit.load(VERL)
    assert sorted(set(table.column("step").to_pylist())) == [1, 2]
    chosen = rollaudit.select_steps(table, "2")
    assert rollaudit.loaded_formats(chosen) == ["verl"]  # the table's metadata travels with the rows
    alone = rollaudit.load(VERL / "2.jsonl")
    selected, single = (rollaudit.audit(t, device="cpu") for t in (chosen, alone))
    assert selected.info["step_values"] == [2] and selected.info["samples"] == alone.num_rows == 16
    assert selected.summary.equals(single.summary)


# ---------------------------------------------------------------------------------------------------------------------
# One prompt


@pytest.fixture(scope="module")
def recorded_report():
    return rollaudit.audit(rollaudit.load(DUMP_DETAILS), device="cpu", keep_advantages=True)


def test_selected_steps_say_the_loaders_counts_are_the_whole_dumps():
    """The line of what the loader found counts every step it read; after a selection, a note says so (the same
    line once read as if it described the selected steps)."""
    table = rollaudit.load(VERL)
    report = rollaudit.audit(rollaudit.select_steps(table, "2"))
    assert report.info["found"] == {"verl v0 (prompt = the input text)": {"prompts": 10, "samples": 40}}
    assert report.info["samples"] == 16
    assert report.info["loader_notes"] == [
        "1 of the dump's 2 steps selected (2): the counts the loader found are the whole dump's"
    ]
    assert "loader_notes" not in rollaudit.audit(rollaudit.select_steps(table, "1-2")).info


def test_a_prompts_view_has_each_samples_step_trajectory_reward_and_advantages(recorded_report):
    view = recorded_report.prompt(2)
    assert list(view.columns) == [
        "step",
        "trajectory",
        "reward",
        "advantage:prompt",
        "advantage:batch",
        "advantage:trajectory",
        "advantage:recorded",
    ]
    kept = recorded_report.advantages.to_pandas()
    rows = kept[kept["prompt"] == 2]
    assert len(view) == len(rows) == 3
    np.testing.assert_array_equal(view["reward"], rows["reward"])
    np.testing.assert_array_equal(view["advantage:batch"], rows["advantage:batch"])
    # The dump's legacy slime centred the whole batch: its recorded advantages are the batch scheme's.
    np.testing.assert_allclose(view["advantage:recorded"], view["advantage:batch"], atol=1e-6)
    assert view.attrs == {"prompt": 2, "reference": "prompt"}


@pytest.mark.parametrize("key", [2, "2", np.int64(2)])
def test_an_int_key_is_named_as_the_report_prints_it(recorded_report, key):
    assert len(recorded_report.prompt(key)) == 3


def test_a_key_the_dump_lacks_is_one_line_naming_some_it_has(recorded_report):
    with pytest.raises(rollaudit.UsageError) as raised:
        recorded_report.prompt("22")
    assert raised.value.line() == "prompt '22' is not in the dump (did you mean '2'?) (it has 6: 0, 1, 2, 3, 4, 5)"


def test_a_string_key_matches_as_written_as_printed_or_cut_short():
    table = rollaudit.make_table(
        reward=[1.0, 0.0, 1.0, 0.0, 1.0],
        prompt=["solve  x\n+1", "solve  x\n+1", "solve y", "solve y", "other"],
        step=[0, 0, 0, 0, 1],
    )
    report = rollaudit.audit(table, device="cpu", keep_advantages=True)
    assert len(report.prompt("solve  x\n+1")) == 2  # as written
    assert len(report.prompt("solve x +1")) == 2  # as the report prints it, on one line
    assert len(report.prompt("solve x…")) == 2  # as a narrow table cuts it
    with pytest.raises(rollaudit.UsageError, match="'solve…' is the start of 2 keys"):
        report.prompt("solve…")
    assert report.prompt("other")["step"].tolist() == [1]


def test_one_prompt_over_several_steps_shows_each_samples_step():
    table = rollaudit.load(VERL)
    report = rollaudit.audit(table, device="cpu", keep_advantages=True)
    repeated = next(
        key for key in set(table.column("prompt").to_pylist()) if key.startswith("<|im_start|>user\nWhat is 12 + 30?")
    )
    view = report.prompt(repeated)
    assert sorted(set(view["step"])) == [1, 2] and len(view) == 8
    # Each step is its own batch: the same text in two steps is two groups, each centred on its own.
    for _, samples in view.groupby("step"):
        assert abs(samples["advantage:prompt"].sum()) < 1e-9


def test_the_prompt_view_renders_in_every_output(recorded_report):
    view = recorded_report.prompt(2)
    rows = view_rows(view)
    assert rows[0][:3] == ["0", "10", "1"]
    assert rows[0][3] == f"{view['advantage:prompt'][0]:+.4f}"
    markdown = prompt_markdown(view)
    assert markdown.startswith("#### Prompt 2: 3 samples, 3 trajectories, step 0\n")
    assert "| step | traj. key | reward | prompt (ref) | batch | trajectory | recorded |" in markdown
    document = prompt_json(view)
    text = json.dumps(document, allow_nan=False)
    assert json.loads(text)["samples"][2]["advantages"]["recorded"] == pytest.approx(view["advantage:recorded"][2])
    assert document["key"] == 2 and document["reference"] == "prompt"
    html = prompt_section(view)
    assert html.startswith("<h2>Prompt 2: 3 samples") and html.count("<tr>") == 4 and "sortable" in html
    from rollaudit._cli.io import terminal_text

    terminal = terminal_text(prompt_renderable(view), width=100)
    assert "Prompt 2: 3 samples, 3 trajectories, step 0" in terminal
    assert terminal.splitlines()[1].split() == [
        "step",
        "traj.",
        "key",
        "reward",
        "prompt",
        "(ref)",
        "batch",
        "trajectory",
        "recorded",
    ]


def test_undefined_and_tiny_advantages_are_shown_as_such():
    table = rollaudit.make_table(
        reward=[1.0, float("nan"), 0.1, 0.1 + 1e-9, 5.0], prompt=[0, 0, 1, 1, 2], trajectory=[0, 1, 2, 3, 4]
    )
    report = rollaudit.audit(table, schemes=["prompt(scale=none)"], device="cpu", keep_advantages=True)
    nan_rows = view_rows(report.prompt(0))
    assert [row[2] for row in nan_rows] == ["1", "n/a"]
    tiny = view_rows(report.prompt(1))
    assert tiny[0][-1].startswith("-5.0e-10") and tiny[1][-1].startswith("+5.0e-10")
    assert view_rows(report.prompt(2))[0][3] == "0"
    document = prompt_json(report.prompt(0))
    assert document["samples"][1]["reward"] is None  # JSON has no NaN
    assert document["samples"][1]["advantages"]["prompt(scale=none)"] is None


def test_a_sample_without_a_trajectory_key_is_its_own_trajectory_and_int_keys_stay_ints():
    table = rollaudit.make_table(reward=[1.0, 0.0, 1.0], prompt=[0, 0, 0], trajectory=[None, 5, 6])
    view = rollaudit.audit(table, device="cpu", keep_advantages=True).prompt(0)
    assert [row[1] for row in view_rows(view)] == ["∅", "5", "6"]
    assert prompt_markdown(view).startswith("#### Prompt 0: 3 samples, 3 trajectories, step 0")
    assert [sample["trajectory"] for sample in prompt_json(view)["samples"]] == [None, 5, 6]
