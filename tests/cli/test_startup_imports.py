"""Each command imports only what its path needs: no pandas and no matplotlib for compare, gate, inspect and watch
on a small dump, in the command's process and in any Python process it starts (a capped reader, a pool worker);
the library's tables are pandas DataFrames still."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_dumps" / "dump_details"
HEAVY = ("pandas", "matplotlib")

# Loaded by every Python process through PYTHONPATH: at exit, each process writes the heavy modules it imported.
HOOK = """
import atexit, os, sys

def _write_heavy():
    found = sorted(name for name in {heavy!r} if name in sys.modules)
    path = os.path.join(os.environ["ROLLAUDIT_TEST_MODULES"], str(os.getpid()))
    with open(path, "w") as out:
        out.write(" ".join(found))

atexit.register(_write_heavy)
"""


def _heavy_imports(tmp_path: Path, name: str, *args: str) -> dict[str, str]:
    """``{pid: the heavy modules it imported}`` of each Python process of ``rollaudit ARGS``."""
    hook, seen = tmp_path / name / "hook", tmp_path / name / "seen"
    hook.mkdir(parents=True)
    seen.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK.format(heavy=HEAVY), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "ROLLAUDIT_TEST_MODULES": str(seen),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "rollaudit", *args], capture_output=True, text=True, env=env, cwd=tmp_path, check=False
    )
    assert done.returncode in (0, 1), done.stderr  # a gate's failed rule is exit 1
    written = {path.name: path.read_text(encoding="utf-8") for path in seen.iterdir()}
    assert written, "the hook ran in no process"
    return written


@pytest.mark.parametrize(
    "args",
    [
        ["compare", "--no-cache"],
        ["compare"],  # the cache filled first, then read
        ["compare", "--json", "--no-cache"],
        ["compare", "--markdown", "--no-cache"],
        ["gate", "--no-cache", "--max", "trained:strict_flip_rate=0"],
        ["inspect"],
        ["watch", "--until-idle", "0"],
    ],
    ids=["compare", "compare-cached", "compare-json", "compare-markdown", "gate", "inspect", "watch"],
)
def test_commands_import_neither_pandas_nor_matplotlib(tmp_path, args):
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    command, *options = args
    if args == ["compare"]:
        _heavy_imports(tmp_path, "fill", command, str(run))
    written = _heavy_imports(tmp_path, "measured", command, str(run), *options)
    assert {pid: modules for pid, modules in written.items() if modules} == {}


def test_library_tables_are_still_dataframes():
    import pandas as pd

    import rollaudit

    report = rollaudit.audit(rollaudit.load(SAMPLE, cache=False), keep_advantages=True)
    frames = [report.summary, report.per_step, report.per_prompt, report.step_groups]
    frames += [report.worst_steps(), report.worst_prompts(), report.silent_prompts()]
    assert all(isinstance(frame, pd.DataFrame) for frame in frames)
    assert report.summary.index.name == "scheme" and list(report.per_step.index.names) == ["step", "scheme"]
    assert str(report.summary["compared"].dtype) == "int64"
    assert any(str(dtype) == "Int64" for dtype in report.per_prompt.dtypes)
    key = report.per_prompt["prompt"].iloc[0]
    assert isinstance(report.prompt(key), pd.DataFrame)
    assert isinstance(rollaudit.recompute(rollaudit.load(SAMPLE, cache=False)).to_pandas(), pd.DataFrame)


def test_what_compare_checks_before_its_load_imports_no_torch():
    """compare checks its schemes and steps before it loads; torch is imported while the files are read, not
    before (a 1.1-1.4 s import that a load of worker processes overlaps)."""
    script = (
        "import sys, rollaudit\n"
        "rollaudit.DEFAULT_SCHEMES, rollaudit.get_scheme('verl-grpo'), rollaudit.parse_steps('1-3')\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "False"
