"""The dashboards are optional extras: without their package, ``--tensorboard`` or ``--wandb`` is one line saying
what to install (exit 2, before anything is loaded or written), and nothing else imports them: ``import rollaudit``
and every command without these options run as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERL = ROOT / "sample_dumps" / "verl" / "rollout_data"


def python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=180)


@pytest.mark.parametrize(
    ("package", "option", "extra"), [("tensorboard", "--tensorboard", "tensorboard"), ("wandb", "--wandb", "wandb")]
)
def test_without_the_package_the_option_is_one_line_saying_what_to_install(
    tmp_path: Path, package: str, option: str, extra: str
) -> None:
    # A None entry in sys.modules makes ``import package`` fail as it does where the package is not installed.
    code = (
        f"import sys; sys.modules[{package!r}] = None\n"
        "from rollaudit._cli import main\n"
        f"main(['compare', {str(VERL)!r}, '--no-cache', {option!r}, 'target'])\n"
    )
    result = python(code, tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: {option} needs the {package} package")
    assert f"pip install 'rollaudit[{extra}]'" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_nothing_else_imports_tensorboard_or_wandb(tmp_path: Path) -> None:
    dump = str(VERL)
    commands = [
        ["compare", dump, "--json", "--no-cache"],
        ["gate", dump, "--no-cache", "--max", "trained:strict_flip_rate=0"],
        ["watch", dump, "--until-idle", "0", "--no-cache"],
        ["compare", "--help"],
    ]
    code = (
        "import sys, contextlib, io\n"
        "import rollaudit\n"
        "assert not {'tensorboard', 'wandb'} & set(sys.modules), 'import rollaudit'\n"
        "from rollaudit._cli import main\n"
        f"for argv in {commands!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n"
        "            main(argv)\n"
        "        except SystemExit as exit:\n"
        "            assert exit.code == 0, (argv, exit.code)\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('tensorboard', 'wandb')))\n"
    )
    result = python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"
