"""A dump naming a dangerous global never runs it: one test per global, wherever the payload sits.

Each payload (tests/fuzz/payloads.py) creates a marker file when unpickled
the unsafe way (``shutil.rmtree`` deletes a canary directory instead);
``test_payloads_are_live`` proves that in a child process, so a payload that
silently stopped working cannot make the safety tests pass.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import rollaudit
from rollaudit import InputError, RollauditWarning
from rollaudit._loaders.torchsave.torch_zip import TorchArchive
from rollaudit._loaders.torchsave.unpickle import Placeholder
from tests.fuzz import payloads
from tests.fuzz.harness import ROOT, generate
from tests.torch_files import load_torch_file

# Where a payload goes: a sample's metadata (ignored: the dump loads), its reward, a sample itself, the whole pickle.
PLACEMENTS = ("metadata", "reward", "sample", "top")


def _workspace(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    marker = tmp_path / "marker"
    workspace = tmp_path / "workspace"
    return marker, workspace, payloads.payloads(marker, workspace, generate.write_torch_zip)


def _dump(payload: bytes, placement: str) -> bytes:
    if placement == "top":
        return payloads.PROTO4 + payload + payloads.STOP
    if placement == "sample":
        return payloads.rollout_dump([payloads.plain_sample(0, 1.0), payload, payloads.plain_sample(1, 0.0)])
    return payloads.dump_with(placement, payload)


@functools.cache
def _live() -> dict[str, bool]:
    """Which payloads do their harm under plain ``pickle.loads`` (run in a child process)."""
    script = textwrap.dedent(
        """
        import json, pickle, sys, tempfile, time
        from pathlib import Path
        sys.path.insert(0, sys.argv[1])
        from tests.fuzz import payloads
        from tests.fuzz.harness import generate
        root = Path(tempfile.mkdtemp())
        live = {}
        for name in payloads.DANGEROUS_GLOBALS:
            marker, workspace = root / f"marker-{name}", root / f"workspace-{name}"
            payload = payloads.payloads(marker, workspace, generate.write_torch_zip)[name]
            try:
                pickle.loads(payloads.PROTO4 + payload + payloads.STOP)
            except Exception:
                pass
            for _ in range(100):  # subprocess.Popen runs in the background
                if marker.exists() or not (workspace / "canary").exists():
                    break
                time.sleep(0.02)
            live[name] = marker.exists() or not (workspace / "canary").exists()
        print(json.dumps(live))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(ROOT)], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", payloads.DANGEROUS_GLOBALS)
def test_payloads_are_live(name: str):
    assert _live()[name], f"the {name} payload does nothing even when unpickled unsafely"


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("name", payloads.DANGEROUS_GLOBALS)
def test_dangerous_global_never_runs(tmp_path: Path, name: str, placement: str):
    marker, workspace, made = _workspace(tmp_path)
    path = generate.write_torch_zip(tmp_path / "evil.pt", _dump(made[name], placement))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            table = rollaudit.load(path)
        except InputError as error:
            assert placement != "metadata", error
            assert "\n" not in str(error)
        else:
            assert placement == "metadata"
            rollaudit.validate_table(table)
            assert table.column("reward").to_pylist() == [1.0, 1.0, 0.0, 1.0]
    assert not marker.exists()
    assert (workspace / "canary" / "keep").exists()
    messages = " ".join(str(item.message) for item in caught if issubclass(item.category, RollauditWarning))
    module, _, attribute = name.rpartition(".")
    if placement != "top":  # a pickle that is one placeholder fails before the warning
        assert f"{module}.{attribute}" in messages


@pytest.mark.parametrize("name", payloads.DANGEROUS_GLOBALS)
def test_dangerous_global_is_a_placeholder_in_a_raw_load(tmp_path: Path, name: str):
    """``load_torch_file`` (real torch tensors, no slime layout) gives the placeholder back, inert."""
    marker, workspace, made = _workspace(tmp_path)
    path = generate.write_torch_zip(tmp_path / "evil.pt", _dump(made[name], "top"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RollauditWarning)
        value = load_torch_file(path)
    assert isinstance(value, Placeholder)
    assert not marker.exists()
    assert (workspace / "canary" / "keep").exists()


@pytest.mark.parametrize(("module", "name"), payloads.TORCH_INTERNALS)
def test_torch_internals_other_than_tensor_rebuilding_are_placeholders(tmp_path: Path, module: str, name: str):
    called = payloads.call(payloads.global_(module, name), payloads.text("x"), payloads.small_int(1))
    path = generate.write_torch_zip(tmp_path / "t.pt", payloads.PROTO2 + called + payloads.STOP)
    with TorchArchive(path) as archive:
        value = archive.unpickle(warn=False)
        assert archive.unknown_globals == [f"{module}.{name}"]
    assert isinstance(value, Placeholder)


def test_the_cli_never_runs_a_dangerous_global(tmp_path: Path):
    from typer.testing import CliRunner

    from rollaudit._cli import app

    marker, workspace, made = _workspace(tmp_path)
    for name in payloads.DANGEROUS_GLOBALS:
        path = generate.write_torch_zip(tmp_path / "evil.pt", _dump(made[name], "metadata"))
        result = CliRunner().invoke(app, ["inspect", str(path), "--json"])
        assert result.exit_code == 0, (name, result.output)
        assert not marker.exists()
        assert (workspace / "canary" / "keep").exists()
