"""Recorded advantages: which preset produced them, and how they compare with the reference."""

from __future__ import annotations

import io
import json
import math
import random
import statistics
import warnings
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

import rollaudit
from rollaudit._audit.trained_with.fit import DEFAULT_RECORDED_TOLERANCE, candidate_schemes, rounding_error
from rollaudit._cli import app
from rollaudit._render.markdown import render_markdown
from rollaudit._render.terminal import render_compare
from rollaudit._render.text import recorded_sentence

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
TRL = SAMPLES / "trl" / "completions" / "completions_00010.parquet"
NEMO = SAMPLES / "nemo" / "train_data_step3.jsonl"
DUMP_DETAILS = SAMPLES / "dump_details"
LOAD = {"format": "generic", "files": ["table.parquet"], "bytes": 1000, "seconds": 0.1}
TOL = 1e-6


def load_quietly(path: Path) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rollaudit.RollauditWarning)  # the TRL sample's unscorable row 18
        return rollaudit.load(path)


def text_of(renderable: object, width: int = 100) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False).print(renderable)
    return buffer.getvalue()


def one_line(text: str) -> str:
    return " ".join(text.split())


def column(table: object, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)


# ---------------------------------------------------------------------------------------------------------------------
# The sample dumps: each framework's recorded advantages are detected as that framework's preset.


@pytest.mark.parametrize(
    ("path", "expected", "rows", "samples"),
    [(TRL, "trl-group(n=4)", 24, 24), (NEMO, "nemo-loo", 12, 12), (DUMP_DETAILS, "batch", 24, 26)],
    ids=["trl", "nemo", "slime-dump-details"],
)
def test_sample_dumps_are_detected_as_their_framework(path, expected, rows, samples):
    table = load_quietly(path)
    detection = rollaudit.detect_scheme(table, device="cpu")
    assert (detection.best_match, detection.matched) == (expected, True)
    assert detection.fits[0].scheme == expected and detection.fits[0].share_within_tolerance == 1.0
    assert detection.fits[0].max_error < 1e-6  # float32 rounding, far inside the tolerance
    # Nothing else fits, but the schemes that give the very same numbers on this table (named as ties) and, on
    # the slime dump, areal-batch: batch-wide with eps 1e-5, within 3.7e-5 of batch's 1e-6, inside the tolerance.
    others = [fit.scheme for fit in detection.fits[1:] if fit.share_within_tolerance == 1.0]
    assert set(others) - set(detection.equivalent) <= ({"areal-batch"} if expected == "batch" else set())
    assert (detection.rows, table.num_rows) == (rows, samples)
    assert detection.fits == tuple(rollaudit.fit_presets(table, device="cpu"))  # the gate's measurement, unchanged


def test_trl_sample_recorded_advantages_follow_trls_formula():
    """Independently of the kernel: TRL divides by (unbiased std + 1e-4), the unscorable row left out, given 0."""
    table = load_quietly(TRL)
    rewards, recorded = column(table, "reward"), column(table, "recorded_advantage")
    expected = []
    for start in range(0, len(rewards), 4):
        group = [value for value in rewards[start : start + 4] if not math.isnan(value)]
        mean, std = statistics.fmean(group), statistics.stdev(group)
        expected += [0.0 if math.isnan(r) else (r - mean) / (std + 1e-4) for r in rewards[start : start + 4]]
    assert np.abs(recorded - np.array(expected)).max() < 1e-6
    assert rollaudit.detect_scheme(table, device="cpu").best_match == "trl-group(n=4)"


def test_dump_details_is_slime_legacy_on_an_uneven_step():
    # 26 samples != 4 x 6 prompts: slime-legacy(n=4) normalised batch-wide, the very numbers of ``batch``.
    table = load_quietly(DUMP_DETAILS)
    report = rollaudit.audit(table, schemes=["slime-legacy(n=4)"], device="cpu")
    assert report.recorded["best_match"] == "batch"
    # roll-grpo-batch gives 0 where the batch's std is at most 1e-6, batch's very numbers elsewhere.
    assert report.recorded["equivalent"] == ["slime-legacy(n=4)", "roll-grpo-batch"]  # another framework's preset last
    assert "the same numbers: slime-legacy(n=4), roll-grpo-batch" in recorded_sentence(report)


# ---------------------------------------------------------------------------------------------------------------------
# Synthetic tables: advantages recorded under each preset are detected as that preset, or a tie with its numbers.


def preset_table(seed: int, shuffled: bool) -> dict[str, list]:
    """Uniform groups of 4 (so the slicing presets are candidates), multi-sample trajectories, a solved prompt."""
    rng = random.Random(seed)
    prompts, trajectories, rewards = [], [], []
    for prompt in range(rng.randint(3, 6)):
        solved_all = prompt == 0
        for sample in range(4):
            prompts.append(prompt)
            trajectories.append(prompt * 10 + sample // rng.choice([1, 2]))
            rewards.append(1.0 if solved_all else rng.choice([0.0, 0.5, 1.0, 2.0]))
    order = list(range(len(rewards)))
    if shuffled:
        rng.shuffle(order)
    return {
        "reward": [rewards[i] for i in order],
        "prompt": [prompts[i] for i in order],
        "trajectory": [trajectories[i] for i in order],
    }


# Every candidate preset of a table with uniform groups of 4: the slicing ones as NAME(n=4).
# ``trajectory`` names no representative, and these trajectories' rows differ: not a candidate on every seed.
PRESETS_N4 = [
    name for name in candidate_schemes(rollaudit.make_table(**preset_table(0, shuffled=False))) if name != "trajectory"
]


@pytest.mark.parametrize("preset", PRESETS_N4)
@pytest.mark.parametrize(("seed", "shuffled"), [(1, False), (2, True), (3, False)])
def test_a_presets_own_advantages_are_detected_as_it_or_an_identical_scheme(preset, seed, shuffled):
    columns = preset_table(seed, shuffled)
    plain = rollaudit.make_table(**columns)
    truth = column(rollaudit.recompute(plain, [preset], device="cpu"), f"advantage:{preset}")
    table = rollaudit.make_table(**columns, recorded_advantage=truth)
    detection = rollaudit.detect_scheme(table, device="cpu")
    assert detection.matched and detection.fits[0].max_error == 0.0
    # A tie is honest: the recorded values cannot tell apart schemes that give the very same numbers here, to the
    # rounding of their dtype (two float32 copies of one formula may sum in another order on another CPU).
    assert preset in (detection.best_match, *detection.equivalent)
    within = rounding_error(rollaudit.get_scheme(preset).dtype, detection.scale)
    for name in (detection.best_match, *detection.equivalent):
        values = column(rollaudit.recompute(plain, [name], device="cpu"), f"advantage:{name}")
        np.testing.assert_allclose(values, truth, rtol=0, atol=within, err_msg=name)


@pytest.mark.parametrize("preset", ["trl-group(n=4)", "nemo-loo", "verl-rloo", "batch", "agl-dedup"])
def test_float32_recorded_advantages_still_match_within_tolerance(preset):
    columns = preset_table(7, shuffled=False)
    plain = rollaudit.make_table(**columns)
    truth = column(rollaudit.recompute(plain, [preset], device="cpu"), f"advantage:{preset}")
    table = rollaudit.make_table(**columns, recorded_advantage=truth.astype(np.float32).astype(np.float64))
    detection = rollaudit.detect_scheme(table, device="cpu")
    assert detection.matched
    # Within tolerance only schemes that agree with the preset to that tolerance can be named.
    best = column(rollaudit.recompute(plain, [detection.best_match], device="cpu"), f"advantage:{detection.best_match}")
    assert np.abs(best - truth).max() <= 2 * detection.allowed_error


def test_no_preset_matching_is_said_not_hidden():
    rng = np.random.default_rng(0)
    table = rollaudit.make_table(
        reward=[0, 1, 1, 0, 1, 1, 0, 0],
        prompt=[0, 0, 0, 0, 1, 1, 1, 1],
        recorded_advantage=rng.uniform(-0.9, 0.9, size=8),
    )
    detection = rollaudit.detect_scheme(table, device="cpu")
    assert detection.best_match is None and not detection.matched
    assert detection.closest is detection.fits[0] and detection.closest.share_within_tolerance < 1.0
    document = detection.to_dict()
    assert document["best_match"] is None and document["fits"][0]["scheme"] == detection.closest.scheme
    report = rollaudit.audit(table, device="cpu")
    assert report.recorded["best_match"] is None
    sentence = recorded_sentence(report)
    # The audit fits no preset over trajectories on a table without trajectory keys: its closest is its own.
    closest = report.detection.closest.scheme
    assert rollaudit.get_scheme(closest).members != "trajectories"
    assert sentence.startswith(f"recorded advantages match no preset within 1e-04; closest: {closest}")


def test_without_recorded_advantages_nothing_is_fitted(monkeypatch):
    table = rollaudit.make_table(reward=[0, 1, 1, 1], prompt=[0, 0, 1, 1])
    detection = rollaudit.detect_scheme(table)
    assert (detection.best_match, detection.matched, detection.fits, detection.rows) == (None, False, (), 0)

    def fail(*args, **kwargs):
        raise AssertionError("audit fitted presets to a table without recorded advantages")

    monkeypatch.setattr("rollaudit._audit.api.detect_by_cells", fail)
    report = rollaudit.audit(table, device="cpu")
    assert report.recorded is None and "recorded" not in report.to_dict()
    assert "recorded" not in report.summary.index
    assert not any(name.endswith(":recorded") for name in report.per_prompt.columns)
    assert "recorded advantages" not in text_of(render_compare(report, LOAD))


def test_detection_to_dict_is_json_ready():
    detection = rollaudit.detect_scheme(load_quietly(TRL), device="cpu")
    document = json.loads(json.dumps(detection.to_dict(), allow_nan=False))
    assert document["best_match"] == "trl-group(n=4)" and document["matched"] is True
    assert document["tolerance"] == DEFAULT_RECORDED_TOLERANCE and document["rows"] == 24
    assert set(document["fits"][0]) == {
        "scheme", "max_error", "mean_error", "share_within_tolerance", "undefined", "allowed_error"
    }  # fmt: skip
    prompt_fit = next(fit for fit in document["fits"] if fit["scheme"] == "prompt")
    # prompt leaves the unscorable row undefined where TRL recorded 0: an unbounded error, counted.
    assert prompt_fit["max_error"] is None and prompt_fit["undefined"] == 1


# ---------------------------------------------------------------------------------------------------------------------
# audit(): the recorded advantages are one more row of the report.


def plain_prompt_advantages(rewards: list[float], prompts: list[int]) -> list[float]:
    advantages = []
    for reward, prompt in zip(rewards, prompts, strict=True):
        group = [r for r, p in zip(rewards, prompts, strict=True) if p == prompt]
        if len(group) == 1:
            advantages.append(0.0)
            continue
        advantages.append((reward - statistics.fmean(group)) / (statistics.stdev(group) + 1e-6))
    return advantages


def sgn(value: float) -> int:
    return 0 if abs(value) <= TOL else (1 if value > 0 else -1)


def test_audit_has_a_recorded_row_counted_like_any_scheme():
    rewards = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.5, 1.0]
    prompts = [0, 0, 0, 1, 1, 1, 2, 2, 2, 2]
    # Batch-wide normalisation (slime's legacy path), with two rows whose value was not recorded.
    mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
    recorded: list[float | None] = [(r - mean) / (std + 1e-6) for r in rewards]
    recorded[3] = recorded[8] = None
    table = rollaudit.make_table(reward=rewards, prompt=prompts, recorded_advantage=recorded, response_length=[3] * 10)
    report = rollaudit.audit(table, device="cpu")

    reference = plain_prompt_advantages(rewards, prompts)
    compared = [(value, ref) for value, ref in zip(recorded, reference, strict=True) if value is not None]
    flips = sum(sgn(value) != sgn(ref) for value, ref in compared)
    row = report.summary.loc["recorded"]
    assert row["sign_flip_rate"] == pytest.approx(flips / len(compared))
    assert (row["compared"], row["undefined"]) == (8, 2)
    assert row["spurious_nonzero"] == sum(sgn(ref) == 0 and sgn(value) != 0 for value, ref in compared)
    assert row["max_abs_diff"] == pytest.approx(max(abs(value - ref) for value, ref in compared))

    # No trajectory key: the trajectory scheme is not auditable; the recorded row is the run's own.
    assert list(report.summary.index) == ["batch", "prompt", "recorded"]
    assert "trajectory" in report.not_auditable and report.trained_row == "recorded"
    assert "recorded" not in report.schemes  # not a scheme one can recompute
    assert (0, "recorded") in report.per_step.index
    assert report.per_step.loc[(0, "recorded"), "sign_flip_rate"] == pytest.approx(flips / len(compared))
    per_prompt = report.per_prompt.set_index("prompt")
    assert per_prompt.loc[0, "flips:recorded"] == 3  # the unsolved prompt: all three pushed below the mean
    assert per_prompt.loc[1, "mean_advantage:recorded"] == pytest.approx(statistics.fmean(recorded[4:6]))
    assert report.recorded["best_match"] == "batch"


def test_report_to_dict_best_match_is_a_scheme_recompute_accepts():
    table = load_quietly(TRL)
    report = rollaudit.audit(table, device="cpu")
    document = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    best = document["recorded"]["best_match"]
    assert best == "trl-group(n=4)"
    recomputed = column(rollaudit.recompute(table, [best], device="cpu"), f"advantage:{best}")
    recorded = column(table, "recorded_advantage")
    assert np.abs(recomputed - recorded).max() <= document["recorded"]["allowed_error"]
    assert {fit["scheme"] for fit in document["recorded"]["fits"]} >= {"prompt", "batch", "nemo-loo", best}
    assert "recorded" in document["summary"] and "recorded" in document["per_step"]["10"]
    assert "Recorded advantages match trl-group(n=4)" in report._repr_html_()


def test_a_scheme_named_recorded_is_refused():
    table = rollaudit.make_table(reward=[0, 1], prompt=[0, 0])
    named = rollaudit.Scheme(groups="batch", name="recorded")
    with pytest.raises(rollaudit.SchemeError, match="cannot be named 'recorded'"):
        rollaudit.audit(table, schemes=[named])
    with pytest.raises(rollaudit.SchemeError, match="cannot be named 'recorded'"):
        rollaudit.audit(table, reference=named)
    with pytest.raises(rollaudit.SchemeError):
        rollaudit.audit(table, schemes="recorded")  # not a preset either


# ---------------------------------------------------------------------------------------------------------------------
# Rendering and the CLI.


def test_terminal_and_markdown_show_the_match_and_the_fit_table():
    report = rollaudit.audit(load_quietly(TRL), device="cpu")
    text = text_of(render_compare(report, LOAD))
    assert max(len(line) for line in text.splitlines()) <= 100
    flat = one_line(text)
    assert "recorded advantages match trl-group(n=4) (max err 1.4e-07); they have the same signs as prompt" in flat
    fitted = len(report.recorded["fits"])  # every preset that runs on the table, and the audited schemes
    assert fitted >= 13 and f"Fit of each preset to the recorded advantages (best 5 of {fitted})" in flat
    recorded_row = next(line for line in text.splitlines() if line.startswith("recorded ") and "(trained)" not in line)
    assert recorded_row.split()[1] == "0.0%"  # sign flips against prompt
    fit_row = next(line for line in text.splitlines() if line.startswith("trl-group(n=4) "))
    assert fit_row.split()[1:4] == ["1.4e-07", "4.2e-08", "100.0%"]

    markdown = render_markdown(report, LOAD)
    assert "Recorded advantages match `trl-group(n=4)` (max err 1.4e-07)" in markdown
    assert "| `trl-group(n=4)` | 1.4e-07 | 4.2e-08 | 100.0% | 0 |" in markdown
    assert "| `recorded` | 0.0% |" in markdown
    header_cells = {len(line.split(" | ")) for line in markdown.splitlines() if line.startswith("| `trl-group")}
    assert len(header_cells) == 1


def test_sign_differences_are_quoted_from_the_recorded_row():
    report = rollaudit.audit(load_quietly(DUMP_DETAILS), device="cpu")
    flips = report.summary.loc["recorded", "sign_flip_rate"]
    sentence = recorded_sentence(report)
    # roll-grpo-batch: batch's very numbers wherever the batch's std exceeds 1e-6, as here (a tie, named).
    assert sentence == (
        f"recorded advantages (24 of 26 samples) match batch (max err 0; the same numbers: roll-grpo-batch); they "
        f"differ in sign from prompt on {flips * 100:.1f}% of samples"
    )
    # The two rows without a recorded value are not "undefined advantages" of a scheme: no such note.
    assert not any("not compared" in line for line in text_of(render_compare(report, LOAD)).splitlines())


def run_cli(*args: object):
    return CliRunner(env={"COLUMNS": "100"}).invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def test_cli_compare_prints_the_match_and_json_holds_it():
    result = run_cli("compare", TRL, "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    assert "recorded advantages match trl-group(n=4) (max err 1.4e-07)" in one_line(result.stdout)

    result = run_cli("compare", TRL, "--json", "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["recorded"]["best_match"] == "trl-group(n=4)" and document["recorded"]["matched"] is True
    assert document["recorded"]["fits"][0]["scheme"] == "trl-group(n=4)"
    assert document["schemes"] == ["batch", "prompt"] and "trajectory" in document["not_auditable"]
    assert document["summary"]["recorded"]["sign_flip_rate"] == 0.0
    assert document["trained_with"]["scheme"] == "trl-group(n=4)"
    assert document["trained_with"]["evidence"] == "recorded"

    result = run_cli("compare", SAMPLES / "uniform.pt", "--json", "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    assert "recorded" not in json.loads(result.stdout)
