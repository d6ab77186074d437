"""``rollaudit findings`` and the gate's finding rules (``--fail-on``, ``--ignore``, their config keys), run as a user
runs them: the installed command in a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollaudit._audit.findings.codes import BY_CODE, CODES
from rollaudit._render.registry import json_schema

ALL_CODES = [entry.code for entry in CODES]


def rollaudit(
    *args: object, cwd: Path, env: dict[str, str] | None = None, timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    """``rollaudit ARGS`` in a new process, in ``cwd`` (no gate table found there unless a test writes one)."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("GITHUB_")}
    environment.update({"COLUMNS": "200", "XDG_CACHE_HOME": str(cwd / ".cache"), **(env or {})})
    for key in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR"):
        if env is None or key not in env:
            environment.pop(key, None)
    command = [sys.executable, "-m", "rollaudit", *(str(arg) for arg in args)]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=environment, timeout=timeout)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def piped_names(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("  ")]


def registry_entry(code: str) -> dict:
    entry = BY_CODE[code]
    return {
        "code": entry.code,
        "severity": entry.severity,
        "shows": entry.shows,
        "reference": entry.reference or None,
        "signature": entry.signature,
        "fix": entry.fix,
    }


# ---------------------------------------------------------------------------------------------------------------------
# rollaudit findings


def test_findings_lists_every_code_in_registry_order(tmp_path):
    listed = rollaudit("findings", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [registry_entry(code) for code in ALL_CODES]
    piped = rollaudit("findings", cwd=tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert piped_names(piped.stdout) == ALL_CODES  # defects, then laws: the registry's order, not alphabetical
    lines = piped.stdout.splitlines()
    assert "  severity: error" in lines and "  reference: slime #2204" in lines
    assert all(line.startswith("  ") and ": " in line for line in lines if line not in ALL_CODES)
    # A law has no field reference: the text leaves the line out (the JSON says null).
    law = lines[lines.index("law-order") + 1 : lines.index("law-finite")]
    assert [line.split(":")[0].strip() for line in law] == ["severity", "shows", "signature", "fix"]


def test_findings_in_a_terminal_is_a_table_in_registry_order(tmp_path):
    shown = rollaudit("findings", cwd=tmp_path, env={"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "COLUMNS": "120"})
    assert shown.returncode == 0, shown.stderr
    lines = re.sub(r"\x1b\[[0-9;]*m", "", shown.stdout).splitlines()
    names = [cell for line in lines if line.startswith("│") and (cell := line.split("│")[1].strip())]
    assert names == ALL_CODES
    assert lines[0].strip().startswith("findings")


def test_findings_code_shows_that_code_alone(tmp_path):
    one = rollaudit("findings", "rows-misaligned", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == [
        "rows-misaligned",
        "  severity: error",
        f"  shows: {BY_CODE['rows-misaligned'].shows}",
        f"  reference: {BY_CODE['rows-misaligned'].reference}",
        f"  signature: {BY_CODE['rows-misaligned'].signature}",
        f"  fix: {BY_CODE['rows-misaligned'].fix}",
    ]
    as_json = rollaudit("findings", "rows-misaligned", "--json", cwd=tmp_path)
    assert json.loads(as_json.stdout) == registry_entry("rows-misaligned")  # the object, not a list of one


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("rows-misalign", "error: unknown finding code 'rows-misalign' (did you mean 'rows-misaligned'?)"),
        ("LAW-ORDER", "error: unknown finding code 'LAW-ORDER' (did you mean 'law-order'?)"),
        ("zzz", "error: unknown finding code 'zzz' (expected a code `rollaudit findings` lists)"),
    ],
)
def test_an_unknown_code_exits_2_with_one_line_naming_the_nearest(tmp_path, code, line):
    assert one_line_error(rollaudit("findings", code, cwd=tmp_path)) == line


# ---------------------------------------------------------------------------------------------------------------------
# rollaudit gate --fail-on / --ignore, and the config keys.


def grpo_tables(directory: Path) -> tuple[Path, Path]:
    """Two generic parquet tables of 3 steps, prompt groups of 3 to 8 samples: ``control.parquet``, whose
    ``advantage`` is per-prompt GRPO (mean-centred, over the unbiased std + 1e-6), and ``shifted.parquet``, the
    same with the advantage column rolled down by one row over the whole table."""
    rng = np.random.default_rng(7)
    steps, prompts, rewards = [], [], []
    for step in range(3):
        for prompt, size in enumerate((3, 8, 5, 4, 7, 6)):
            group = rng.integers(0, 2, size).astype(float)
            group[0], group[1] = 0.0, 1.0  # every group has signal: a shift moves real advantages
            steps += [step] * size
            prompts += [f"p{prompt}"] * size
            rewards += list(group)
    step_column, prompt_column, reward = np.array(steps), np.array(prompts), np.array(rewards)
    advantage = np.zeros_like(reward)
    for step in range(3):
        for prompt in np.unique(prompt_column):
            group = (step_column == step) & (prompt_column == prompt)
            values = reward[group]
            advantage[group] = (values - values.mean()) / (values.std(ddof=1) + 1e-6)
    columns = {"step": step_column, "prompt_id": prompt_column, "reward": reward}
    control, shifted = directory / "control.parquet", directory / "shifted.parquet"
    pq.write_table(pa.table({**columns, "advantage": advantage}), control)
    pq.write_table(pa.table({**columns, "advantage": np.roll(advantage, 1)}), shifted)
    return control, shifted


def test_fail_on_rows_misaligned_fails_the_shifted_table_and_passes_its_control(tmp_path):
    control, shifted = grpo_tables(tmp_path)
    passed = rollaudit("gate", control, "--fail-on", "rows-misaligned", cwd=tmp_path)
    assert passed.returncode == 0, (passed.stdout, passed.stderr)
    assert "fail-on rows-misaligned" in passed.stdout and "PASS" in passed.stdout
    failed = rollaudit("gate", shifted, "--fail-on", "rows-misaligned", cwd=tmp_path)
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    assert failed.stderr == "error: gate failed: 1 of 1 rule (fail-on rows-misaligned)\n"
    assert "FAIL" in failed.stdout and "join advantages to rows by key" in failed.stdout


def test_the_shifted_table_s_gate_documents_match_the_schema(tmp_path):
    _, shifted = grpo_tables(tmp_path)
    done = rollaudit("gate", shifted, "--fail-on", "error", "--ignore", "batch-as-group", "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    jsonschema.Draft202012Validator(json.loads(json_schema("gate"))).validate(document)
    rule = next(rule for rule in document["rules"] if rule["name"] == "fail-on rows-misaligned")
    assert rule["kind"] == "finding" and rule["passed"] is False and rule["measured"] > 0
    assert rule["finding"]["code"] == "rows-misaligned" and rule["finding"]["rows"] == rule["measured"]
    assert "fail-on batch-as-group" not in [rule["name"] for rule in document["rules"]]
    compare = rollaudit("compare", shifted, "--json", cwd=tmp_path)
    assert compare.returncode == 0, compare.stderr
    report = json.loads(compare.stdout)
    jsonschema.Draft202012Validator(json.loads(json_schema("compare"))).validate(report)
    assert "rows-misaligned" in [finding["code"] for finding in report["findings"]]


def test_ignore_passes_what_fail_on_selects(tmp_path):
    _, shifted = grpo_tables(tmp_path)
    done = rollaudit(
        "gate", shifted, "--fail-on", "rows-misaligned,law-order", "--ignore", "rows-misaligned", cwd=tmp_path
    )
    assert "fail-on rows-misaligned" not in done.stdout and "fail-on law-order" in done.stdout
    assert done.returncode in (0, 1), done.stderr  # the shifted column may break the laws too: not this test's point


def test_fail_on_and_ignore_from_pyproject(tmp_path):
    _, shifted = grpo_tables(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.rollaudit.gate]\nfail-on = ["rows-misaligned"]\n')
    failed = rollaudit("gate", shifted, cwd=tmp_path)  # a gate with only finding rules has rules
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    assert failed.stderr == "error: gate failed: 1 of 1 rule (fail-on rows-misaligned)\n"
    (tmp_path / "pyproject.toml").write_text('[tool.rollaudit.gate]\nfail-on = "error"\nignore = ["error"]\n')
    line = one_line_error(rollaudit("gate", shifted, cwd=tmp_path))
    assert "pyproject.toml: field 'fail_on': fail-on error selects no code that ignore error leaves" in line
    (tmp_path / "pyproject.toml").write_text('[tool.rollaudit.gate]\nfail-on = ["rows-misalign"]\n')
    line = one_line_error(rollaudit("gate", shifted, cwd=tmp_path))
    assert (
        "field 'fail_on': 'rows-misalign': unknown finding code 'rows-misalign' (did you mean 'rows-misaligned'?)"
        in (line)
    )


@pytest.mark.parametrize("command", ["gate", "watch"])
def test_an_unknown_code_in_the_options_exits_2_naming_it_and_the_nearest(tmp_path, command):
    control, _ = grpo_tables(tmp_path)
    line = one_line_error(rollaudit(command, control, "--fail-on", "error,rows-misalign", cwd=tmp_path))
    assert line == (
        "error: --fail-on 'error,rows-misalign': unknown finding code 'rows-misalign' (did you mean 'rows-misaligned'?)"
    )
    line = one_line_error(rollaudit(command, control, "--fail-on", "all", "--ignore", "law-ordr", cwd=tmp_path))
    assert "--ignore 'law-ordr': unknown finding code 'law-ordr' (did you mean 'law-order'?)" in line


def test_watch_takes_the_gate_s_finding_rules(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    control, _ = grpo_tables(run)
    control.unlink()  # the run: the shifted table alone
    done = rollaudit("watch", run, "--until-idle", "0", "--fail-on", "rows-misaligned", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    steps = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert len(steps) == 3 and all(line.endswith("FAIL fail-on rows-misaligned") for line in steps)
    for command in ("gate", "watch"):
        shown = rollaudit(command, "--help", cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert "--fail-on" in shown.stdout and "--ignore" in shown.stdout
