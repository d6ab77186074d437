"""Hostile inputs around the dumps: formulas for spreadsheets, configs that are devices, globs over link loops,
crafted temporary names, and agentic dumps whose values have the wrong type or are not text.

Each case runs the way a user runs it (``python -m rollaudit`` in a child process) and is measured as
tests/loaders/test_hostile.py measures its cases: exit 0 or 2, one line on error, no traceback, under 30 s and
1.5 GB.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.loaders.test_hostile import _measurement_table, check, run_measured, size_of  # noqa: F401 (the table)
from tests.loaders.test_unpickle import generate

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


# ---------------------------------------------------------------------------------------------------------------------
# A CSV file opened in a spreadsheet.


def test_convert_to_csv_neutralises_formulas(tmp_path: Path):
    """Keys and text starting with = + - @ tab or CR become literal text (a leading '); numbers stay numbers."""
    formulas = ['=HYPERLINK("https://example.com/x","open")', "@SUM(A1:A9)", "+1+1", "-2+3", "\tx", "\r=1+1"]
    path = tmp_path / "formulas.jsonl"
    rows = [
        {"prompt": formulas[index % len(formulas)], "reward": -1.5 if index % 2 else 2, "note": f"=cmd|{index}"}
        for index in range(24)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "table.csv"
    result = run_measured("convert", path, "-o", out, "--no-cache", cwd=tmp_path)
    check("convert: formulas in keys and text", result, size_of(path), codes=(0,))
    with out.open(newline="", encoding="utf-8") as stream:
        header, *cells = list(csv.reader(stream))
    assert cells, out.read_text()[:500]
    for row in cells:
        record = dict(zip(header, row, strict=True))
        for name, value in record.items():
            if name != "reward":
                assert not value.startswith(_FORMULA_STARTS), (name, value)
        assert float(record["reward"]) in (-1.5, 2.0)  # a number, not text
    prompts = {dict(zip(header, row, strict=True))["prompt"] for row in cells}
    assert {"'" + formula for formula in formulas} == prompts
    assert any(row[header.index("reward")] == "-1.5" for row in cells)


# ---------------------------------------------------------------------------------------------------------------------
# A config or baseline that is not a regular file.


@pytest.mark.parametrize(
    "case",
    ["baseline linked to /dev/zero", "config linked to /dev/zero", "baseline FIFO", "config FIFO", "huge config"],
)
def test_a_config_or_baseline_that_is_a_device_a_fifo_or_huge(tmp_path: Path, case: str):
    """A symlink committed in a pull request points the baseline at /dev/zero (a MemoryError after 2.7 GB), or a
    FIFO nobody writes (a hang): one line, exit 2, before anything is read."""
    name = "baseline.json" if case.startswith("baseline") else "gate.toml"
    config = tmp_path / name
    if "/dev/zero" in case:
        config.symlink_to("/dev/zero")
    elif "FIFO" in case:
        os.mkfifo(config)
    else:
        with config.open("wb") as stream:  # sparse: 4 GiB that costs nothing to make
            stream.truncate(4 << 30)
    dump = generate.save_rollout_dump(tmp_path / "0.pt", 0, generate.spec_4_3_4_step())
    option = "--baseline" if name.endswith(".json") else "--gate-config"
    result = run_measured("gate", dump, option, config, "--no-cache", cwd=tmp_path)
    check(case, result, "4 GiB" if case == "huge config" else "(endless)", codes=(2,), said=name)


# ---------------------------------------------------------------------------------------------------------------------
# A recursive glob over symbolic links that loop.


def test_a_recursive_glob_over_symlink_loops(tmp_path: Path):
    """``run/**/*.jsonl`` over a directory holding three links to itself grew exponentially."""
    run = tmp_path / "run"
    (run / "deeper").mkdir(parents=True)
    rows = [{"prompt": f"p{index % 4}", "reward": index % 3 == 0} for index in range(32)]
    (run / "deeper" / "a.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    for name in ("loop1", "loop2", "loop3"):
        (run / name).symlink_to(".")
    (run / "deeper" / "up").symlink_to("..")
    result = run_measured("compare", "run/**/*.jsonl", "--json", "--no-cache", cwd=tmp_path)
    check("glob run/**/*.jsonl over three links to .", result, size_of(run / "deeper"), codes=(0,))
    assert len(json.loads(result["stdout"])["load"]["files"]) == 1


# ---------------------------------------------------------------------------------------------------------------------
# A temporary name beside an output that rollaudit did not write.


def test_a_crafted_temporary_name_beside_the_output(tmp_path: Path):
    """``.report.md.<20 digits>.x.tmp`` made the stale-temporary sweep raise OverflowError; names rollaudit never
    writes (a PID past any PID, another shape) are left alone."""
    crafted = [f".report.md.{'9' * 20}.x.tmp", ".report.md.4194305.abcdefgh.tmp", ".report.md.77777.backup.tmp"]
    for name in crafted:
        (tmp_path / name).write_text("not rollaudit's")
    dump = generate.save_rollout_dump(tmp_path / "0.pt", 0, generate.spec_4_3_4_step())
    result = run_measured("compare", dump, "--markdown", "-o", tmp_path / "report.md", "--no-cache", cwd=tmp_path)
    check("a crafted temporary name beside the output", result, "20-digit PID", codes=(0,))
    assert (tmp_path / "report.md").read_text().startswith("### rollaudit")
    assert all((tmp_path / name).read_text() == "not rollaudit's" for name in crafted)


# ---------------------------------------------------------------------------------------------------------------------
# Agentic dumps: ROLL's reward_info of any JSON type, lone surrogates in keys.


def _roll_dump(directory: Path, trajectories: list[dict]) -> Path:
    path = directory / "rollout_dump_data.step_2.jsonl"
    document = {"trajectory_data": [json.dumps(item) for item in trajectories], "global_step": [2] * len(trajectories)}
    path.write_text(json.dumps(document) + "\n")
    return path


def _roll_trajectory(index: int, tag: str = "SWEEnv", reward_info: object = None) -> dict:
    env = {"env_id": index, "group_id": index % 3, "tag": tag, "seed": 7, "episode_id": 1}
    info = {"episode_reward": 0.5, "step_rewards": [float(index % 2), 0.5]} if reward_info is None else reward_info
    return {"trajectory_id": f"t{index}", "env_info": env, "reward_info": info}


def _rllm_run(directory: Path, name: str) -> Path:
    run = directory / "rllm"
    shutil.copytree(SAMPLES / "rllm", run)
    episode = next(path for path in sorted(run.rglob("episode_*.json")))
    document = json.loads(episode.read_text())
    document["trajectories"][0]["name"] = name
    episode.write_text(json.dumps(document))  # ensure_ascii: a lone surrogate is written as its \ud800 escape
    return run


AGENTIC = {
    "ROLL reward_info a number": lambda tmp: _roll_dump(tmp, [_roll_trajectory(i, reward_info=3) for i in range(6)]),
    "ROLL reward_info a list": lambda tmp: _roll_dump(tmp, [_roll_trajectory(i, reward_info=[1]) for i in range(6)]),
    "ROLL reward_info a string": lambda tmp: _roll_dump(tmp, [_roll_trajectory(i, reward_info="x") for i in range(6)]),
    "ROLL tag a lone surrogate": lambda tmp: _roll_dump(tmp, [_roll_trajectory(i, tag="\ud800") for i in range(6)]),
    "rllm trajectory name a lone surrogate": lambda tmp: _rllm_run(tmp, "solver\udfff"),
}


@pytest.mark.parametrize("case", sorted(AGENTIC))
def test_agentic_values_of_the_wrong_type_or_not_text(tmp_path: Path, case: str):
    """reward_info that is not an object gave AttributeError; a lone surrogate in a key gave UnicodeEncodeError."""
    path = AGENTIC[case](tmp_path)
    for command in ("compare", "inspect"):
        result = run_measured(command, path, "--no-cache", cwd=tmp_path)
        wrong_type = "reward_info a" in case
        check(f"{case} ({command})", result, size_of(path), codes=(2,) if wrong_type else (0,))
        if wrong_type:
            assert "reward_info" in result["stderr"], result["stderr"]
    if "surrogate" in case:  # read as text: the surrogate's escape, so that distinct keys stay distinct
        out = tmp_path / "table.jsonl"
        result = run_measured("convert", path, "-o", out, "--no-cache", cwd=tmp_path)
        check(f"{case} (convert)", result, size_of(path), codes=(0,))
        keys = {json.loads(line)["prompt"] for line in out.read_text().splitlines()}
        assert any("\\ud800" in key or "\\udfff" in key for key in keys), keys
