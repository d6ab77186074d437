"""The rollaudit command on the bundled sample dumps: every command and output format, numbers checked."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import rollaudit
from rollaudit._cli import app

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
FANOUT = SAMPLES / "fanout"
FANOUT_FILE = FANOUT / "rollout_data" / "3.pt"
UNIFORM = SAMPLES / "uniform.pt"
DUMP_DETAILS = SAMPLES / "dump_details"
REWARD_KEY = SAMPLES / "reward_key.pt"
TRL = SAMPLES / "trl"
AGL = SAMPLES / "agl" / "rollouts.parquet"
NEMO = SAMPLES / "nemo" / "train_data_step3.jsonl"
GENERIC_CSV = SAMPLES / "generic" / "rollouts.csv"
VERL = SAMPLES / "verl" / "rollout_data"
TOL = 1e-6
EPS = 1e-6


def run(*args: object, columns: int = 100):
    """Invoke the CLI in-process; an unexpected exception propagates (it is a bug)."""
    runner = CliRunner(env={"COLUMNS": str(columns)})
    return runner.invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def assert_one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    assert result.stdout == ""
    return lines[0]


# ---------------------------------------------------------------------------------------------------------------------
# An independent recomputation of batch and prompt GRPO (plain Python, from the spec), for the fan-out numbers.


def _normalized(values: list[float]) -> list[float]:
    if len(values) == 1:
        return [0.0]
    mean = statistics.fmean(values)
    std = statistics.stdev(values)
    return [(value - mean) / (std + EPS) for value in values]


def _sign(value: float) -> int:
    return 0 if abs(value) <= TOL else (1 if value > 0 else -1)


def independent_batch_vs_prompt(path: Path) -> dict[str, float]:
    table = rollaudit.load(path)
    rewards = table.column("reward").to_pylist()
    prompts = table.column("prompt").to_pylist()
    assert len(set(table.column("step").to_pylist())) == 1  # one batch
    batch = _normalized(rewards)
    prompt = [0.0] * len(rewards)
    for key in set(prompts):
        rows = [row for row, value in enumerate(prompts) if value == key]
        for row, advantage in zip(rows, _normalized([rewards[row] for row in rows]), strict=True):
            prompt[row] = advantage
    flips = sum(_sign(b) != _sign(p) for b, p in zip(batch, prompt, strict=True))
    nonzero_batch = sum(_sign(b) != 0 for b in batch)
    nonzero_prompt = sum(_sign(p) != 0 for p in prompt)
    spurious = sum(_sign(b) != 0 and _sign(p) == 0 for b, p in zip(batch, prompt, strict=True))
    return {
        "sign_flip_rate": flips / len(rewards),
        "nonzero": nonzero_batch,
        "nonzero_reference": nonzero_prompt,
        "nonzero_inflation": nonzero_batch / nonzero_prompt,
        "spurious_nonzero": spurious,
    }


# ---------------------------------------------------------------------------------------------------------------------
# compare


def test_compare_fanout_terminal_shows_header_histograms_metrics_and_worst_prompts():
    result = run("compare", FANOUT)
    assert result.exit_code == 0, result.output
    out = result.stdout
    lines = out.splitlines()
    # header
    assert str(FANOUT_FILE.relative_to(ROOT)) in lines[0] or str(FANOUT_FILE) in lines[0]
    assert "slime" in lines[0] and "loaded in" in lines[0]
    assert lines[1].startswith("step 3 · 88 samples · 8 prompts · 32 trajectories")
    # histograms: samples per prompt 28 -> one prompt, 8 -> three prompts
    assert "samples / prompt" in out and "trajectories / prompt" in out and "samples / trajectory" in out
    histogram_rows = [line.split() for line in lines if line.lstrip().startswith(("28 ", " 8 ", "8 "))]
    assert any(row[0] == "28" and row[2] == "1" for row in histogram_rows), histogram_rows
    assert any(row[0] == "8" and row[2] == "3" for row in histogram_rows), histogram_rows
    # metrics: one row per scheme, batch vs prompt numbers as the independent recomputation gives them
    expected = independent_batch_vs_prompt(FANOUT_FILE)
    batch_row = next(line for line in lines if line.startswith("batch "))
    cells = batch_row.split()
    assert cells[1] == f"{expected['sign_flip_rate'] * 100:.1f}%"
    assert cells[4] == str(expected["nonzero"])
    assert cells[5] == f"{expected['nonzero_inflation']:.2f}×"
    assert cells[6] == str(expected["spurious_nonzero"])
    assert any(line.startswith("prompt (ref)") for line in lines)
    assert any(line.startswith("trajectory ") for line in lines)
    # worst prompts and prompts with no signal: the all-zero (30), all-one (31) and one-trajectory (29) prompts
    assert "Worst prompts: 3 of 8 prompts" in out
    worst_rows = out.split("Worst prompts")[1].split("Prompts with no learning signal")[0].splitlines()
    assert [row.split()[0] for row in worst_rows if row[:2] in ("29", "30", "31")] == ["30", "31", "29"]
    # the silent prompts are the same three with the same counts: said in one line, not a second table
    silent = out.split("Prompts with no learning signal that got advantages: ")[1]
    assert silent.startswith("the 3 prompts above, with the same counts")
    assert not any(row[:2] in ("29", "30", "31") for row in silent.splitlines())
    # fits a 100-column terminal
    assert max(len(line) for line in lines) <= 100


def test_compare_json_matches_report_and_independent_recomputation():
    result = run("compare", FANOUT, "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)  # stdout holds the document and nothing else
    assert document["schema_version"] == rollaudit.SCHEMA_VERSION == 1
    assert document["reference"] == "prompt"
    assert list(document["summary"]) == ["batch", "prompt", "trajectory"]
    for scheme in document["summary"].values():
        assert list(scheme) == list(rollaudit.METRICS)
    batch = document["summary"]["batch"]
    expected = independent_batch_vs_prompt(FANOUT_FILE)
    assert batch["sign_flip_rate"] == pytest.approx(expected["sign_flip_rate"], abs=1e-12)
    assert batch["nonzero_inflation"] == pytest.approx(expected["nonzero_inflation"], abs=1e-12)
    assert batch["nonzero_inflation"] > 1
    assert batch["sign_flip_rate"] > 0
    assert batch["nonzero"] == expected["nonzero"] and isinstance(batch["nonzero"], int)
    assert batch["spurious_nonzero"] == expected["spurious_nonzero"]
    # the same numbers as Report.to_dict()
    report = rollaudit.audit(rollaudit.load(FANOUT), device="cpu").to_dict()
    assert document["summary"] == report["summary"]
    assert document["per_step"] == report["per_step"]
    assert document["histograms"] == report["histograms"]
    assert document["worst_prompts"] == report["worst_prompts"]
    assert document["load"]["format"] == "slime"
    assert document["load"]["files"] == [str(FANOUT_FILE)]
    assert document["load"]["bytes"] == FANOUT_FILE.stat().st_size
    assert document["load"]["seconds"] >= 0


def test_compare_json_undefined_metrics_are_null_and_n_a_on_the_terminal():
    # positional(n=1) makes every sample a group of its own: every advantage is 0 under the reference,
    # so inflation and cosine are undefined.
    args = ("compare", SAMPLES / "spec_4_3_4.pt", "-s", "batch", "--reference", "positional(n=1)")
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)["summary"]
    assert summary["positional(n=1)"]["nonzero"] == 0
    assert summary["batch"]["nonzero_inflation"] is None
    assert summary["batch"]["advantage_cosine"] is None
    batch_row = next(line for line in run(*args).stdout.splitlines() if line.startswith("batch "))
    assert batch_row.split()[5] == "n/a" and batch_row.split()[8] == "n/a"


def test_compare_markdown():
    result = run("compare", FANOUT, "--markdown")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    expected = independent_batch_vs_prompt(FANOUT_FILE)
    assert text.startswith("### rollaudit: advantages against `prompt`")
    assert "| scheme | sign changed | reversed | tokens changed | nonzero | inflation |" in text
    flips = f"{expected['sign_flip_rate'] * 100:.1f}%"
    batch_row = next(line for line in text.splitlines() if line.startswith("| `batch` |"))
    cells = [cell.strip() for cell in batch_row.strip("|").split("|")]
    assert cells[1] == f"**{flips}**"
    assert cells[4] == str(expected["nonzero"])
    assert cells[5] == f"{expected['nonzero_inflation']:.2f}×"
    assert "| `prompt` (reference) |" in text
    assert "**Worst prompts: 3 of 8 prompts" in text
    assert "| 30 | 8 | 4 | 0 |" in text
    assert "<details><summary>Group sizes</summary>" in text and "| 28 | 1 |" in text


def test_compare_schemes_repeated_with_commas_in_parentheses_and_reference():
    result = run(
        "compare",
        UNIFORM,
        "--json",
        "--schemes",
        "batch,prompt(scale=none, singleton=raw)",
        "-s",
        "trajectory(representative=max),dr-grpo",
        "--reference",
        "dr-grpo",
    )
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["reference"] == "dr-grpo"
    assert list(document["summary"]) == [
        "batch",
        "prompt(scale=none, singleton=raw)",
        "trajectory(representative=max)",
        "dr-grpo",
    ]
    # prompt without std scaling is dr-grpo exactly (uniform groups of 8: no singletons for raw to touch)
    same = document["summary"]["prompt(scale=none, singleton=raw)"]
    assert same["max_abs_diff"] == 0 and same["sign_flip_rate"] == 0


def test_compare_top_limits_prompt_rows():
    result = run("compare", FANOUT, "--top", "1")
    assert result.exit_code == 0
    assert "Worst prompts: 3 of 8 prompts have samples whose sign differs from prompt (top 1)" in result.stdout
    worst = result.stdout.split("Worst prompts")[1].split("Prompts with no learning")[0]
    assert [line.split()[0] for line in worst.splitlines() if line[:2].isdigit()] == ["30"]


def test_compare_several_inputs_and_globs():
    result = run("compare", FANOUT, UNIFORM, str(DUMP_DETAILS / "*_data"), "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["info"]["step_values"] == [0, 3, 5]
    assert document["info"]["samples"] == 88 + 64 + 26
    assert len(document["load"]["files"]) == 4
    assert sorted(document["per_step"]) == ["0", "3", "5"]
    text = run("compare", FANOUT, UNIFORM, DUMP_DETAILS).stdout
    assert "steps 0, 3, 5 · 178 samples" in text
    assert "4 files" in text.splitlines()[0]


def test_compare_output_file_is_written_and_stdout_stays_empty(tmp_path):
    target = tmp_path / "report.json"
    result = run("compare", FANOUT, "--json", "-o", target)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert f"wrote {target}" in result.stderr
    assert json.loads(target.read_text())["summary"]["batch"]["nonzero"] == 88
    text_target = tmp_path / "report.txt"
    assert run("compare", FANOUT, "-o", text_target, "-q").stderr == ""
    assert "Worst prompts" in text_target.read_text()
    assert [path.name for path in tmp_path.iterdir()] != []
    assert not [path for path in tmp_path.iterdir() if path.name.endswith(".tmp")]


def test_compare_reward_key_passes_through():
    error = assert_one_line_error(run("compare", REWARD_KEY))
    assert error == (
        f"error: {REWARD_KEY}: field 'reward': reward is a dict with keys 'score', 'acc', 'format', and no train dump "
        "of its step holds the raw_reward that would say which (expected --reward-key naming the key slime trained "
        "on (slime's own --reward-key))"
    )
    result = run("compare", REWARD_KEY, "--reward-key", "score", "--json")
    assert result.exit_code == 0, result.stderr
    table = rollaudit.load(REWARD_KEY, reward_key="score")
    assert json.loads(result.stdout)["summary"] == rollaudit.audit(table, device="cpu").to_dict()["summary"]


def test_compare_n_samples_per_prompt_passes_through(spy_on_load):
    seen = spy_on_load()
    result = run("compare", UNIFORM, "--n-samples-per-prompt", "8", "--json", "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    assert seen["n_samples_per_prompt"] == 8 and "reward_key" not in seen  # only the options given
    assert json.loads(result.stdout)["info"]["device"] == "cpu"


# ---------------------------------------------------------------------------------------------------------------------
# inspect


def test_inspect_fanout_terminal():
    result = run("inspect", FANOUT)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "slime" in out
    assert "step 3 · 88 samples" in out
    assert "8 prompts · 32 trajectories" in out
    assert "prompt key on 88 of 88 (100.0%) · trajectory key on 88 of 88 (100.0%)" in out
    assert "binary (0/1)" in out
    for field in rollaudit.CANONICAL_COLUMNS:
        assert field in out
    assert "passed through" in out


def test_inspect_json_counts_match_the_table():
    result = run("inspect", DUMP_DETAILS, UNIFORM, "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    table = rollaudit.load([DUMP_DETAILS, UNIFORM])
    assert document["samples"] == table.num_rows == 26 + 64
    assert document["steps"]["values"] == [0, 5]
    assert document["steps"]["samples_per_step"] == {"0": 26, "5": 64}
    pairs = set(zip(table.column("step").to_pylist(), table.column("prompt").to_pylist(), strict=True))
    assert document["prompts"] == len(pairs)
    recorded = table.column("recorded_advantage").to_pylist()
    assert document["recorded_advantages"] == sum(value is not None for value in recorded) == 24
    assert document["identity"] == {"samples": 90, "with_prompt_key": 90, "with_trajectory_key": 90}
    assert document["response_tokens"] == sum(table.column("response_length").to_pylist())
    fields = {field["name"]: field for field in document["fields"]}
    assert fields["recorded_advantage"]["non_null"] == 24 and fields["recorded_advantage"]["canonical"]
    assert fields["index"]["canonical"] is False
    assert document["reward"]["kind"] == "binary (0/1)"
    assert document["load"]["files"][-1] == str(UNIFORM)


def test_inspect_lists_the_keys_of_a_reward_dict_that_compare_needs_a_choice_of():
    result = run("inspect", REWARD_KEY, "--no-cache")
    assert result.exit_code == 0, result.stderr
    assert "reward    a dict with keys 'score', 'acc', 'format'; compare needs --reward-key KEY" in result.stdout
    assert "Fields" in result.stdout and "passed through" in result.stdout
    document = json.loads(run("inspect", REWARD_KEY, "--json").stdout)
    assert document["reward"]["kind"] == "a dict with keys 'score', 'acc', 'format'; compare needs --reward-key KEY"
    assert document["samples"] == 16 and document["reward"]["nonfinite"] == 0
    assert {field["name"]: field["non_null"] for field in document["fields"]}["reward"] == 0
    assert json.loads(run("inspect", REWARD_KEY, "--reward-key", "acc", "--json").stdout)["reward"]["min"] is not None
    # The choice is left open for inspect's own read only: compare still stops, cached or not.
    assert_one_line_error(run("compare", REWARD_KEY))


def test_inspect_reward_key():
    result = run("inspect", REWARD_KEY, "--reward-key", "score", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    rewards = rollaudit.load(REWARD_KEY, reward_key="score").column("reward").to_pylist()
    assert document["reward"]["min"] == min(rewards) and document["reward"]["max"] == max(rewards)
    assert document["reward"]["mean"] == pytest.approx(statistics.fmean(rewards))


# ---------------------------------------------------------------------------------------------------------------------
# convert


def _read(path: Path) -> pa.Table:
    suffix = path.suffix
    if suffix == ".parquet":
        return pq.read_table(path)
    if suffix in (".feather", ".arrow"):
        return feather.read_table(path)
    if suffix == ".csv":
        return pa_csv.read_csv(path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return pa.Table.from_pylist(rows)


@pytest.mark.parametrize("suffix", [".parquet", ".feather", ".arrow", ".csv", ".jsonl"])
def test_convert_every_format_with_advantage_columns(tmp_path, suffix):
    target = tmp_path / f"fanout{suffix}"
    result = run("convert", FANOUT, "-o", target, "-s", "batch,prompt(scale=none, singleton=raw)", "-s", "prompt")
    assert result.exit_code == 0, result.stderr
    assert f"wrote {target}: 88 rows" in result.stderr
    written = _read(target)
    table = rollaudit.load(FANOUT)
    expected = rollaudit.recompute(table, ["batch", "prompt(scale=none, singleton=raw)", "prompt"], device="cpu")
    names = ["advantage:batch", "advantage:prompt(scale=none, singleton=raw)", "advantage:prompt"]
    assert written.column_names == table.column_names + names
    assert written.num_rows == 88
    for name, scheme in zip(names, expected.column_names, strict=True):
        got = written.column(name).to_pylist()
        want = expected.column(scheme).to_pylist()
        assert got == pytest.approx(want, abs=1e-12)
    assert written.column("reward").to_pylist() == table.column("reward").to_pylist()
    assert written.column("prompt").to_pylist() == table.column("prompt").to_pylist()


def test_convert_without_schemes_writes_the_canonical_table(tmp_path):
    target = tmp_path / "details.parquet"
    result = run("convert", DUMP_DETAILS, "-o", target, "-q")
    assert result.exit_code == 0 and result.stderr == ""
    assert pq.read_table(target).equals(rollaudit.load(DUMP_DETAILS))


def test_convert_checks_the_output_before_loading(tmp_path, monkeypatch):
    def must_not_load(*args, **kwargs):
        raise AssertionError("loaded before the output was checked")

    monkeypatch.setattr(rollaudit, "load", must_not_load)
    assert "unknown output extension '.txt'" in assert_one_line_error(run("convert", FANOUT, "-o", tmp_path / "x.txt"))
    missing = tmp_path / "missing" / "x.parquet"
    assert "directory does not exist" in assert_one_line_error(run("convert", FANOUT, "-o", missing))
    assert "is a directory" in assert_one_line_error(run("convert", FANOUT, "-o", tmp_path))
    assert "unknown scheme" in assert_one_line_error(run("convert", FANOUT, "-o", tmp_path / "a.csv", "-s", "nope"))
    assert list(tmp_path.iterdir()) == []


def test_convert_failed_load_leaves_nothing(tmp_path):
    target = tmp_path / "out.parquet"
    assert_one_line_error(run("convert", REWARD_KEY, "-o", target))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------------
# errors, warnings, progress


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["compare", "no/such/dump.pt"], "no such file or directory"),
        (["compare", "PYPROJECT"], "not a dump rollaudit reads"),
        (["compare", FANOUT, "--format", "csv"], "unknown format 'csv'"),
        (["compare", FANOUT, "-s", "batch,wrong"], "unknown scheme 'wrong'"),
        (["compare", FANOUT, "-s", "prompt(scale=nope)"], "scale"),
        (["compare", FANOUT, "-s", "prompt(n=2"], "unbalanced"),
        (["compare", FANOUT, "--reference", "wrong"], "unknown scheme 'wrong'"),
        (["compare", FANOUT, "--bogus"], "No such option: --bogus"),
        (["compare", FANOUT, "--device", "gpu"], "--device"),
        (["compare", FANOUT, "--top", "-1"], "--top"),
        (["compare", FANOUT, "--n-samples-per-prompt", "0"], "--n-samples-per-prompt"),
        (["compare", FANOUT, "--json", "--markdown"], "--json and --markdown"),
        (["compare"], "Missing argument"),
        (["convert", FANOUT], "Missing option '--output'"),
        (["frobnicate"], "No such command"),
        (["inspect", "no/such/*.pt"], "no file matches"),
    ],
)
def test_errors_are_one_line_with_exit_2(args, fragment):
    args = [str(ROOT / "pyproject.toml") if arg == "PYPROJECT" else arg for arg in args]
    line = assert_one_line_error(run(*args))
    assert fragment in line


def test_scheme_errors_come_before_loading(monkeypatch):
    monkeypatch.setattr(rollaudit, "load", lambda *a, **k: pytest.fail("loaded"))
    assert_one_line_error(run("compare", FANOUT, "-s", "slime-legacy"))  # needs n: fails at parse time


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_a_one_line_error():
    assert "CUDA" in assert_one_line_error(run("compare", FANOUT, "--device", "cuda"))


def test_bare_rollaudit_shows_help():
    result = run()
    assert result.exit_code == 0
    assert "compare" in result.stdout and "inspect" in result.stdout and "convert" in result.stdout


def test_warnings_are_one_line_each_time(tmp_path):
    # An eval dump beside the training dumps of a directory is left out, with a warning.
    shutil.copy(FANOUT_FILE, tmp_path / "3.pt")
    shutil.copy(FANOUT_FILE, tmp_path / "eval_3.pt")
    for _ in range(2):  # the same warning in the same process shows again
        result = run("compare", tmp_path, "--json")
        assert result.exit_code == 0, result.stderr
        warnings_shown = [line for line in result.stderr.splitlines() if line]
        assert len(warnings_shown) == 1 and warnings_shown[0].startswith("warning: "), result.stderr
        assert "eval" in warnings_shown[0]
        assert json.loads(result.stdout)["info"]["samples"] == 88


def test_progress_bar_only_on_a_terminal(tmp_path):
    from rich.console import Console

    from rollaudit._cli.io import progress as _progress

    files = [FANOUT_FILE, UNIFORM]
    sizes = [path.stat().st_size for path in files]
    terminal = io.StringIO()
    with _progress(files, sizes, False, Console(file=terminal, force_terminal=True, width=100)) as on_file:
        assert on_file is not None
        table = rollaudit.load(files, on_file=on_file)
    assert table.num_rows == 88 + 64
    assert "2/2 files" in terminal.getvalue() and "uniform.pt" in terminal.getvalue()
    for quiet, console in [
        (True, Console(file=io.StringIO(), force_terminal=True)),
        (False, Console(file=io.StringIO())),
    ]:
        with _progress(files, sizes, quiet, console) as on_file:
            assert on_file is None
    with _progress(files[:1], sizes[:1], False, Console(file=io.StringIO(), force_terminal=True)) as on_file:
        assert on_file is None  # one small file: no bar
    # Through the CLI (not a terminal): nothing on stderr.
    assert run("compare", FANOUT, UNIFORM, "--json").stderr == ""


# ---------------------------------------------------------------------------------------------------------------------
# Table loader options (verl, TRL, generic): shared by every command that reads dumps.

TABLE_OPTIONS = (
    "--reward-col",
    "--prompt-col",
    "--trajectory-col",
    "--step-col",
    "--advantage-col",
    "--mask-col",
    "--token-reduce",
    "--reward-columns",
    "--reward-weights",
    "--num-generations",
)


@pytest.mark.parametrize("command", ["compare", "inspect", "convert", "gate"])
def test_every_command_that_reads_dumps_takes_the_table_options(command):
    result = run(command, "--help", columns=200)
    assert result.exit_code == 0
    for option in TABLE_OPTIONS:
        assert option in result.stdout, option


def test_table_options_reach_load_with_their_types_and_only_when_given(spy_on_load):
    seen = spy_on_load(forward=("format", "on_file"))
    given = ["--reward-col", "score", "--prompt-col", "uid", "--trajectory-col", "traj_uid", "--step-col", "step"]
    given += ["--advantage-col", "adv", "--mask-col", "mask", "--token-reduce", "mean", "--num-generations", "2"]
    given += ["--reward-columns", " a, b ", "--reward-weights", "1,0.5"]
    assert run("inspect", GENERIC_CSV, *given, "--json").exit_code == 0
    assert {name: value for name, value in seen.items() if name not in ("format", "on_file", *RUN_KEYWORDS)} == {
        "reward_col": "score",
        "prompt_col": "uid",
        "trajectory_col": "traj_uid",
        "step_col": "step",
        "advantage_col": "adv",
        "mask_col": "mask",
        "token_reduce": "mean",
        "num_generations": 2,
        "reward_columns": ["a", "b"],
        "reward_weights": [1.0, 0.5],
    }
    assert run("compare", GENERIC_CSV, "--reward-weights", "acc=1, fmt=-0.5", "--json").exit_code == 0
    assert seen["reward_weights"] == {"acc": 1.0, "fmt": -0.5}
    assert run("compare", GENERIC_CSV, "--json").exit_code == 0
    assert set(seen) == {"format", "on_file", *RUN_KEYWORDS}  # no loader option given: load keeps its defaults
    # The run options: the command line caches by default, reads in this process or in workers by run size.
    assert {name: seen[name] for name in RUN_KEYWORDS} == {
        "jobs": None,
        "cache": True,
        "engine": "local",
        "ray_address": None,
    }


RUN_KEYWORDS = ("jobs", "cache", "engine", "ray_address")


def test_run_options_reach_load(spy_on_load, tmp_path):
    seen = spy_on_load(forward=("format", "on_file"))
    assert run("compare", FANOUT, "--json", "--jobs", "2", "--cache", str(tmp_path)).exit_code == 0
    assert (seen["jobs"], seen["cache"], seen["engine"]) == (2, tmp_path, "local")
    assert run("inspect", FANOUT, "--json", "--no-cache").exit_code == 0
    assert seen["cache"] is False


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--cache", "somewhere", "--no-cache"], "--cache and --no-cache exclude each other"),
        (["--ray-address", "auto"], "--ray-address needs --engine ray"),
        (["--jobs", "0"], "--jobs"),
    ],
)
def test_bad_run_options_are_one_line_and_exit_2(arguments, message):
    result = run("compare", FANOUT, *arguments)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_second_compare_reads_the_cache_not_the_dump(monkeypatch, tmp_path):
    first = run("compare", FANOUT, "--json", "--cache", str(tmp_path))
    assert first.exit_code == 0
    import dataclasses

    from rollaudit._loaders.registry import FORMATS

    def no_dump_reading(*args, **kwargs):
        raise AssertionError("a dump was opened although the cache holds it")

    for name, entry in list(FORMATS.items()):
        monkeypatch.setitem(FORMATS, name, dataclasses.replace(entry, detect=no_dump_reading, read=no_dump_reading))
    second = run("compare", FANOUT, "--json", "--cache", str(tmp_path))
    assert second.exit_code == 0, second.stderr
    assert json.loads(second.stdout)["summary"] == json.loads(first.stdout)["summary"]
    assert json.loads(second.stdout)["load"]["format"] == "slime"


def _nan_as_text(rows: list[dict]) -> list[dict]:
    return [{key: "NaN" if value != value else value for key, value in row.items()} for row in rows]


@pytest.mark.filterwarnings("ignore::rollaudit.RollauditWarning")  # the TRL sample's unscorable row 18
@pytest.mark.parametrize(
    ("dump", "args", "options"),
    [
        (
            AGL,
            ["--prompt-col", "rollout_id", "--trajectory-col", "sequence_id"],
            {"prompt_col": "rollout_id", "trajectory_col": "sequence_id"},
        ),
        (AGL, ["--step-col", "attempt"], {"step_col": "attempt"}),
        (GENERIC_CSV, ["--reward-col", "response_length"], {"reward_col": "response_length"}),
        (VERL, ["--reward-col", "acc"], {"reward_col": "acc"}),
        (
            NEMO,
            ["--advantage-col", "generation_logprobs", "--token-reduce", "mean"],
            {"advantage_col": "generation_logprobs", "token_reduce": "mean"},
        ),
        (
            NEMO,
            ["--mask-col", "token_loss_mask", "--token-reduce", "last"],
            {"mask_col": "token_loss_mask", "token_reduce": "last"},
        ),
        (TRL, ["--reward-columns", "accuracy_reward"], {"reward_columns": ["accuracy_reward"]}),
        (TRL, ["--reward-weights", "1,0.5"], {"reward_weights": [1, 0.5]}),
        (
            TRL,
            ["--reward-weights", "format_reward=0.5,accuracy_reward=1"],
            {"reward_weights": {"format_reward": 0.5, "accuracy_reward": 1}},
        ),
        (TRL, ["--num-generations", "2"], {"num_generations": 2}),
    ],
)
def test_table_options_load_what_the_library_loads(tmp_path, dump, args, options):
    target = tmp_path / "table.parquet"
    result = run("convert", dump, "-o", target, "-q", *args)
    assert result.exit_code == 0, result.stderr
    written, loaded = pq.read_table(target), rollaudit.load(dump, **options)
    assert written.schema == loaded.schema
    assert _nan_as_text(written.to_pylist()) == _nan_as_text(loaded.to_pylist())  # NaN rewards: NaN != NaN


@pytest.mark.filterwarnings("ignore::rollaudit.RollauditWarning")
def test_table_options_change_the_audit():
    # Two reward functions weighted 1 and 0.5 instead of 1 and 1: the JSON report is the library's on that load.
    result = run("compare", TRL, "--reward-weights", "1,0.5", "--json")
    assert result.exit_code == 0, result.stderr
    table = rollaudit.load(TRL, reward_weights=[1, 0.5])
    assert json.loads(result.stdout)["summary"] == rollaudit.audit(table, device="cpu").to_dict()["summary"]
    # agent-lightning: each attempt a prompt of its own instead of each task.
    default = json.loads(run("inspect", AGL, "--json").stdout)
    by_attempt = json.loads(run("inspect", AGL, "--prompt-col", "rollout_id", "--json").stdout)
    assert (default["prompts"], by_attempt["prompts"]) == (4, 9)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["inspect", TRL, "--reward-weights", "1,x"], "--reward-weights '1,x': 'x' is not a finite number"),
        (["inspect", TRL, "--reward-weights", "1,nan"], "'nan' is not a finite number"),
        (["compare", TRL, "--reward-weights", "accuracy_reward=1,2"], "mixes weights by name and by position"),
        (["compare", TRL, "--reward-weights", "=1"], "has no column name"),
        (["compare", TRL, "--reward-weights", "a=1,a=2"], "names 'a' twice"),
        (["inspect", TRL, "--reward-weights", "1,0.5,2"], "--reward-weights gives 3 weights for 2 reward columns"),
        (["inspect", TRL, "--reward-weights", "accuracy_reward=1,nope=2"], "--reward-weights names 'nope'"),
        (["convert", TRL, "-o", "x.parquet", "--reward-columns", "a,,b"], "has an empty column name"),
        (["inspect", TRL, "--reward-columns", "nope"], "nope"),
        (["inspect", AGL, "--prompt-col", ""], "--prompt-col is empty"),
        (["inspect", AGL, "--prompt-col", "nope"], "no column 'nope' for the prompt key"),
        (["inspect", NEMO, "--token-reduce", "median"], "'median' is not one of 'first', 'last', 'mean'"),
        (["inspect", TRL, "--num-generations", "0"], "--num-generations"),
        (["inspect", TRL, "--num-generations", "5"], "--num-generations 5 does not divide"),
        (["gate", TRL, "--require", "prompt-key", "--reward-col", "nope"], "nope"),
    ],
)
def test_bad_table_options_are_one_line_with_exit_2(args, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run(*args)
    assert result.exit_code == 2 and result.stdout == "", (result.stdout, result.stderr)
    # The TRL sample's load warns (one line) about its unscorable row before the error can come.
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0]


# ---------------------------------------------------------------------------------------------------------------------
# The installed entry point, in real subprocesses.


def _entry_point() -> str:
    path = shutil.which("rollaudit")
    if path is None:
        pytest.skip("the rollaudit console script is not installed")
    return path


def test_help_imports_neither_torch_nor_matplotlib_nor_pandas():
    code = (
        "import sys\n"
        "from rollaudit._cli import main\n"
        "for argv in (['--help'], ['compare', '--help'], ['inspect', '--help'], ['convert', '--help'],\n"
        "             ['gate', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code == 0, exit.code\n"
        "heavy = sorted(name for name in ('torch', 'matplotlib', 'pandas') if name in sys.modules)\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stderr
    assert "compare" in result.stdout and "--schemes" in result.stdout


def test_entry_point_compare_json_inspect_and_error():
    executable = _entry_point()
    environment = {**os.environ, "COLUMNS": "100"}
    compare = subprocess.run(
        [executable, "compare", str(FANOUT), "--json"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert compare.returncode == 0, compare.stderr
    batch = json.loads(compare.stdout)["summary"]["batch"]
    expected = independent_batch_vs_prompt(FANOUT_FILE)
    assert math.isclose(batch["sign_flip_rate"], expected["sign_flip_rate"])
    assert math.isclose(batch["nonzero_inflation"], expected["nonzero_inflation"])
    terminal = subprocess.run(
        [executable, "compare", "sample_dumps/fanout"], capture_output=True, text=True, cwd=ROOT, env=environment
    )
    assert terminal.returncode == 0 and "Worst prompts" in terminal.stdout
    assert max(len(line) for line in terminal.stdout.splitlines()) <= 100
    missing = subprocess.run([executable, "inspect", "missing.pt"], capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr == "error: missing.pt: no such file or directory\n"
    bad_option = subprocess.run([executable, "compare", "x.pt", "--nope"], capture_output=True, text=True)
    assert bad_option.returncode == 2 and len(bad_option.stderr.splitlines()) == 1
    assert "Traceback" not in bad_option.stderr


def test_version_from_the_console_script_and_python_dash_m():
    version = subprocess.run([_entry_point(), "--version"], capture_output=True, text=True, timeout=60)
    module = subprocess.run([sys.executable, "-m", "rollaudit", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert version.returncode == module.returncode == 0, (version.stderr, module.stderr)
    assert version.stdout == module.stdout == f"rollaudit {rollaudit.__version__}\n"
    assert run("--version").stdout == version.stdout
    help_text = subprocess.run([sys.executable, "-m", "rollaudit", "compare", "--help"], capture_output=True, text=True)
    assert help_text.returncode == 0 and "--schemes" in help_text.stdout


def test_markdown_escapes_html_in_prompt_keys(tmp_path):
    """A prompt key is text a dump chooses: in a pull request's Markdown it must stay text, never become HTML."""
    hostile = "<img src=x onerror=1>"
    table = pa.table({"reward": [0.0, 0.0, 0.0, 1.0], "prompt": [hostile, hostile, "b", "b"]})
    path = tmp_path / "rollouts.parquet"
    pq.write_table(table, path)
    result = run("compare", path, "--markdown", "--top", "5", "-s", "batch")
    assert result.exit_code == 0, result.stderr
    assert hostile not in result.stdout and "&lt;img src=x onerror=1&gt;" in result.stdout


@pytest.mark.parametrize(
    "dump, options",
    [(TRL, []), (NEMO, []), (DUMP_DETAILS, [])],
)
def test_compare_and_gate_name_the_same_scheme_from_one_fit(dump, options, monkeypatch):
    from rollaudit._audit.trained_with import fit

    calls = []
    real = fit._fit_schemes
    monkeypatch.setattr(fit, "_fit_schemes", lambda *a, **k: calls.append(1) or real(*a, **k))
    compare = run("compare", dump, "--json", *options)
    assert compare.exit_code == 0, compare.stderr
    recorded = json.loads(compare.stdout)["recorded"]
    assert calls == [1]
    calls.clear()
    gate = run("gate", dump, "--expect-recorded", "prompt", "--json", *options)
    assert calls == [1]  # the gate reads the audit's fit; it never fits again
    message = next(rule for rule in json.loads(gate.stdout)["rules"] if rule["kind"] == "recorded")["message"]
    named = recorded["best_match"] or recorded["fits"][0]["scheme"]
    assert f"they match {named}" in message or f"closest: {named}" in message or "match prompt" in message


# ---------------------------------------------------------------------------------------------------------------------
# Help and positions as a person reads them.


@pytest.mark.parametrize("columns", [80, 120])
def test_help_shows_each_commands_whole_description_and_plain_metavars(columns):
    top = run("--help", columns=columns)
    assert top.exit_code == 0
    commands = top.stdout.split("Commands:")[1]
    assert "..." not in commands
    described = " ".join(commands.split())
    assert "compare Recompute advantages under several schemes and show how far each is from the reference." in (
        described
    )
    compare = run("compare", "--help", columns=columns)
    assert compare.exit_code == 0
    assert "<list[str]>" not in compare.stdout and "{DUMP}" not in compare.stdout
    assert "Usage: rollaudit compare [OPTIONS] DUMP..." in compare.stdout
    assert compare.stdout.split("Arguments:")[1].split()[0] == "DUMP"


def test_error_positions_count_from_one(tmp_path):
    # The 5th data row is line 6 of a CSV (the header is line 1): both say so, counted from 1.
    table = tmp_path / "rows.csv"
    table.write_text("uid,reward\na,1\na,0\nb,1\nb,0\nc,high\nc,1\n")
    message = assert_one_line_error(run("compare", table, "--prompt-col", "uid"))
    assert "row 5" in message, message
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("uid,reward\na,1\na,0\nb,1\nb,0\nc,1,2\n")
    assert "line 6" in assert_one_line_error(run("compare", ragged, "--prompt-col", "uid"))
