"""A scheme per part: where no one preset fits a run's recorded advantages, each step range (and each environment
where the framework sets its estimator per environment) is fitted on its own."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import rollaudit
from rollaudit._audit.trained_with.trained import parts_phrase
from rollaudit._cli import app
from rollaudit._table import with_facts
from tests.oracle import oracle_advantages

PROMPTS, SAMPLES = 8, 6


def _rows(step: int, rewards: np.ndarray) -> list[dict]:
    return [
        {"step": step, "position": place, "prompt": place // SAMPLES, "trajectory": place, "reward": float(reward)}
        for place, reward in enumerate(rewards.ravel())
    ]


def _run(schemes_by_step: list[str], seed: int = 0, prompts: int = PROMPTS) -> pa.Table:
    """A run whose step ``i + 1`` recorded ``schemes_by_step[i]``'s advantages, computed by the plain-Python
    oracle on random rewards (integer ones: groups of one reward, as real verifiers give, occur)."""
    rng = np.random.default_rng(seed)
    rows, recorded = [], []
    for step, scheme in enumerate(schemes_by_step, start=1):
        step_rows = _rows(step, rng.integers(0, 5, size=(prompts, SAMPLES)))
        recorded += oracle_advantages(step_rows, rollaudit.get_scheme(scheme))
        rows += step_rows
    return rollaudit.make_table(
        reward=[row["reward"] for row in rows],
        prompt=[row["prompt"] for row in rows],
        trajectory=[row["trajectory"] for row in rows],
        step=[row["step"] for row in rows],
        recorded_advantage=recorded,
    )


def _parts(report: rollaudit.Report) -> list[tuple[tuple[int, int], str | None, str | None]]:
    return [(part.steps, part.where, part.scheme) for part in report.trained_with.parts]


def test_a_mid_run_upgrade_is_two_parts_and_the_change_is_named():
    report = rollaudit.audit(_run(["batch"] * 3 + ["prompt"] * 3), device="cpu")
    trained = report.trained_with
    assert _parts(report) == [((1, 3), None, "batch"), ((4, 6), None, "prompt")]
    assert [part.evidence for part in trained.parts] == ["recorded", "recorded"]
    assert [part.samples for part in trained.parts] == [144, 144]
    assert trained.scheme is None and trained.evidence == "recorded" and trained.row == "recorded" and trained.changed
    assert parts_phrase(trained.parts) == "batch on steps 1-3, prompt from step 4 (changed at step 4)"
    assert trained.to_dict()["parts"][0] == {
        "steps": [1, 3],
        "where": None,
        "scheme": "batch",
        "evidence": "recorded",
        "why": trained.parts[0].why,
        "samples": 144,
    }


def test_a_run_one_preset_fits_is_never_split():
    report = rollaudit.audit(_run(["prompt"] * 5), device="cpu")
    assert _parts(report) == [((1, 5), None, report.trained_with.scheme)]
    assert report.trained_with.scheme is not None and not report.trained_with.changed


def test_steps_that_fit_both_sides_are_undetermined_never_given_to_one():
    # Step 3 has one prompt: batch-wide and per-prompt normalisation give it the same numbers, so the recorded
    # values cannot say whether the run changed at step 3 or at step 4.
    table = pa.concat_tables(
        [
            _run(["batch"] * 2).filter(pa.compute.less_equal(pa.compute.field("step"), 2)),
            _run(["batch"], seed=5, prompts=1).set_column(0, "step", pa.array([3] * SAMPLES, pa.int64())),
            _run(["prompt"] * 2, seed=9).set_column(0, "step", pa.array([4] * 48 + [5] * 48, pa.int64())),
        ]
    )
    report = rollaudit.audit(table, device="cpu")
    assert _parts(report) == [((1, 2), None, "batch"), ((3, 3), None, None), ((4, 5), None, "prompt")]
    middle = report.trained_with.parts[1]
    assert middle.undetermined and "fit batch and prompt alike" in middle.why
    phrase = parts_phrase(report.trained_with.parts)
    assert phrase == "batch on steps 1-2, undetermined on step 3, prompt from step 4 (changed at one of steps 3-4)"


def test_steps_no_preset_fits_are_one_part_with_the_closest():
    table = _run(["prompt"] * 4)
    recorded = table.column("recorded_advantage").to_numpy().copy()
    steps = table.column("step").to_numpy()
    recorded[steps >= 3] *= 3.7  # what no preset computes
    table = table.set_column(
        table.schema.get_field_index("recorded_advantage"), "recorded_advantage", pa.array(recorded)
    )
    report = rollaudit.audit(table, device="cpu")
    assert _parts(report) == [((1, 2), None, "prompt"), ((3, 4), None, None)]
    assert report.trained_with.parts[1].why.startswith("the recorded advantages match no preset; closest: ")
    assert not report.trained_with.parts[1].undetermined


def test_an_estimator_per_environment_is_a_part_per_environment():
    first, second = _run(["prompt"] * 2, seed=1), _run(["prompt(scale=none)"] * 2, seed=2)
    second = second.set_column(2, "prompt", pa.compute.add(second.column("prompt"), 100))
    table = pa.concat_tables([first, second]).append_column(
        "env", pa.array(["math"] * first.num_rows + ["code"] * second.num_rows)
    )
    # Without the framework saying it sets its estimator per environment, the env is no part of the fit.
    unsaid = rollaudit.audit(table, device="cpu")
    assert all(part.where is None for part in unsaid.trained_with.parts)
    report = rollaudit.audit(with_facts(table, estimator_per="env"), device="cpu")
    parts = {part.where: part.scheme for part in report.trained_with.parts}
    assert set(parts) == {"env=math", "env=code"}
    assert (
        rollaudit.get_scheme(parts["env=code"]).scale == "none"
        and rollaudit.get_scheme(parts["env=math"]).scale != "none"
    )


def test_the_parts_in_every_output(tmp_path):
    path = tmp_path / "run.parquet"
    pq.write_table(_run(["batch"] * 3 + ["prompt"] * 3), path)
    runner = CliRunner()
    terminal = runner.invoke(app, ["compare", str(path), "--no-cache"])
    assert terminal.exit_code == 0, terminal.output
    flat = " ".join(terminal.output.split())
    assert "Verdict: trained with batch on steps 1-3, prompt from step 4 (changed at step 4). Against prompt:" in flat
    assert "- steps 1-3: batch (the recorded advantages of its 144 samples match it: max err " in flat
    assert "- steps 4-6: prompt (the recorded advantages of its 144 samples match it: max err " in flat
    markdown = runner.invoke(app, ["compare", str(path), "--no-cache", "--markdown"]).output
    assert "**Verdict: trained with `batch` on steps 1-3, `prompt` from step 4 (changed at step 4). Against" in markdown
    assert "- steps 1-3: batch (the recorded advantages of its 144 samples" in markdown
    document = json.loads(runner.invoke(app, ["compare", str(path), "--no-cache", "--json"]).output)
    assert [(part["steps"], part["scheme"]) for part in document["trained_with"]["parts"]] == [
        ([1, 3], "batch"),
        ([4, 6], "prompt"),
    ]
    html = tmp_path / "report.html"
    assert runner.invoke(app, ["compare", str(path), "--no-cache", "--html", str(html)]).exit_code == 0
    page = html.read_text()
    assert "<ul class='parts'><li>steps 1-3: batch (the recorded advantages of its 144 samples" in page


# The presets a run's parts are drawn from: different numbers on every step of random integer rewards.
MIXED = ("batch", "prompt", "prompt(scale=none)", "verl-rloo")


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 3), min_size=1, max_size=4),
    picks=st.lists(st.integers(0, len(MIXED) - 1), min_size=4, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_a_random_mix_of_presets_by_step_is_recovered_exactly(lengths, picks, seed):
    schemes = []
    for length, pick in zip(lengths, picks, strict=False):
        if schemes and MIXED[pick] == schemes[-1]:
            pick = (pick + 1) % len(MIXED)  # neighbouring parts differ, or they are one part
        schemes += [MIXED[pick]] * length
    table = _run(schemes, seed=seed)
    report = rollaudit.audit(table, device="cpu")
    runs, start = [], 1
    for step in range(2, len(schemes) + 2):
        if step > len(schemes) or schemes[step - 1] != schemes[step - 2]:
            runs.append(((start, step - 1), schemes[start - 1]))
            start = step
    parts = report.trained_with.parts
    assert [part.steps for part in parts] == [steps for steps, _ in runs]
    recorded = table.column("recorded_advantage").to_numpy()
    step_of = table.column("step").to_numpy()
    for part, (_, scheme) in zip(parts, runs, strict=True):
        # The part names the generating preset, or one giving the same numbers on its rows.
        assert part.scheme is not None and part.evidence == "recorded"
        rows = (step_of >= part.steps[0]) & (step_of <= part.steps[1])
        named = rollaudit.recompute(table, [part.scheme], device="cpu").column(0).to_numpy()
        assert np.allclose(named[rows], recorded[rows], atol=1e-9), (part.scheme, scheme)
    if len(runs) == 1:
        assert report.trained_with.scheme is not None and not report.trained_with.changed


def test_a_run_without_recorded_advantages_has_one_part():
    table = rollaudit.make_table(reward=[0.0, 1.0, 1.0, 1.0], prompt=[0, 0, 1, 1], step=[1, 1, 2, 2])
    report = rollaudit.audit(table, device="cpu", trained_with="prompt")
    assert _parts(report) == [((1, 2), None, "prompt")]
    assert report.trained_with.parts[0].evidence == "given"
