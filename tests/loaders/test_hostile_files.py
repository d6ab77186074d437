"""Hostile files, run the way a user runs them (``python -m rollaudit`` in a child process): a read stopped by a
signal leaves nothing in shared memory, a file rewritten in place while it is read ends in one line (never a
SIGBUS), and a zip whose central directory lists millions of empty entries is refused before it is parsed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollaudit._loaders.arrow import capped
from tests.loaders.test_hostile import audit, check, run_measured, size_of
from tests.loaders.test_unpickle import generate

SHARED_MEMORY = Path("/dev/shm")


def _rollaudit(*args: str | Path, cwd: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "rollaudit", *map(str, args)]
    environment = {**os.environ, "COLUMNS": "120", "XDG_CACHE_HOME": str(cwd / "cache")}
    environment.pop("GITHUB_ACTIONS", None)
    return subprocess.Popen(command, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(condition, seconds: float = 60.0, every: float = 0.002):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(every)
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Shared memory: a table read stopped by a signal.


def _long_parquet(path: Path, rows: int = 6_000_000) -> Path:
    """A few MB of Parquet that decodes to a few hundred MB of table: 200-character prompts from a dictionary."""
    rng = np.random.default_rng(5)
    prompts = pa.array([f"{index:04d} " + "p" * 195 for index in range(2_000)])
    table = pa.table(
        {
            "step": np.repeat(np.arange(4), rows // 4),
            "prompt": pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 2_000, rows, dtype=np.int32)), prompts),
            "reward": rng.integers(0, 2, rows).astype(np.float64),
        }
    )
    pq.write_table(table, path, row_group_size=1 << 20, compression="zstd")  # zstd: read by the capped child
    return path


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _shared_tables_open(pids: list[int]) -> set[Path]:
    """The table files in /dev/shm that these processes hold open (other programs' files are not counted)."""
    found = set()
    for pid in pids:
        try:
            links = [os.readlink(link) for link in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        found |= {Path(link) for link in links if link.startswith(str(SHARED_MEMORY / "rollaudit-table-"))}
    return found


@pytest.mark.skipif(not (capped.can_cap() and SHARED_MEMORY.is_dir()), reason="no capped reader or /dev/shm here")
@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda signum: signum.name
)
def test_a_read_stopped_by_a_signal_leaves_nothing_in_shared_memory(tmp_path: Path, signum: signal.Signals):
    """A table of ~300 MB is being written to /dev/shm when the signal comes: nothing of it stays (after SIGKILL of
    the command and its reader, the next command sweeps it)."""
    path = _long_parquet(tmp_path / "long.parquet")
    command = _rollaudit("compare", path, "--no-cache", cwd=tmp_path)
    try:
        written = _wait_for(lambda: _shared_tables_open([command.pid, *_children(command.pid)]))
        assert written, "the reader never wrote its table to shared memory"
        readers = _children(command.pid)
        command.send_signal(signum)
        _, stderr = command.communicate(timeout=60)
    finally:
        command.kill()
    if signum == signal.SIGKILL:
        for reader in readers:  # the whole process tree killed, as the out-of-memory killer or `kill -9` does
            with contextlib.suppress(ProcessLookupError):
                os.kill(reader, signal.SIGKILL)
        assert _wait_for(lambda: not any(Path(f"/proc/{reader}").exists() for reader in readers), 10)
        small = _long_parquet(tmp_path / "small.parquet", rows=4_000)
        result = run_measured("compare", small, "--no-cache", cwd=tmp_path)
        check("compare after a SIGKILL mid-read", result, size_of(small), codes=(0,))
    else:
        assert command.returncode != 0
        assert "Traceback" not in stderr.decode(errors="replace"), stderr.decode(errors="replace")[-3000:]
    assert _wait_for(lambda: not any(name.exists() for name in written), 10), f"left in /dev/shm: {written}"


# ---------------------------------------------------------------------------------------------------------------------
# A file rewritten in place (truncated) while it is read.


def _reading(pid: int, path: Path, past: int) -> bool:
    """Whether process ``pid`` has ``path`` mapped, or open and read past byte ``past``."""
    try:
        if str(path) in Path(f"/proc/{pid}/maps").read_text():
            return True
        for link in Path(f"/proc/{pid}/fd").iterdir():
            if os.readlink(link) == str(path):
                position = int(Path(f"/proc/{pid}/fdinfo/{link.name}").read_text().split()[1])
                if position > past:
                    return True
    except (OSError, ValueError, IndexError):
        pass
    return False


def _big_json_lines(path: Path) -> Path:
    """~300 MB of JSON Lines: 150,000 rollouts of a 2,000-character response."""
    line = '{{"prompt": "p{}", "reward": {}, "response": "' + "r" * 2000 + '"}}\n'
    with path.open("w") as out:
        for index in range(150_000):
            out.write(line.format(index // 8, index % 2))
    return path


def _big_slime_dump(path: Path) -> Path:
    """A 40 MB slime rollout dump, its data.pkl nearly all of it."""
    return generate.benchmark_dump(path, samples=800, tokens=3500)


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="needs /proc to see the read")
@pytest.mark.parametrize("kind", ["JSON Lines", "slime data.pkl"])
def test_a_file_truncated_while_it_is_read(tmp_path: Path, kind: str):
    """A trainer saving the same path again truncates the dump mid-read: one line naming the file or a report,
    never a SIGBUS (exit 135)."""
    import resource

    if kind == "JSON Lines":
        path = _big_json_lines(tmp_path / "run.jsonl")
    else:
        path = _big_slime_dump(tmp_path / "rollout_data" / "0.pt")
    size = size_of(path)
    started = time.perf_counter()
    command = _rollaudit("compare", path, "--no-cache", cwd=tmp_path)
    try:
        reading = _wait_for(lambda: command.poll() is not None or _reading(command.pid, path, 16 << 20))
        # (A JSON Lines file is read in one call of a fraction of a second: the command may be done by now.)
        assert reading, "the file was never seen being read"
        os.truncate(path, 1000)  # what opening it again for writing does, and a little of the new content
        stdout, stderr = command.communicate(timeout=120)
    finally:
        command.kill()
    result = {
        "code": command.returncode,
        "seconds": time.perf_counter() - started,
        "peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "stdout": stdout.decode("utf-8", "replace"),
        "stderr": stderr.decode("utf-8", "replace"),
    }
    assert result["code"] != -signal.SIGBUS, "killed by SIGBUS"
    check(f"{kind} truncated while read", result, size)
    if result["code"] == 2:
        assert str(path.name) in result["stderr"], result["stderr"]


# ---------------------------------------------------------------------------------------------------------------------
# Zip: a central directory of millions of empty entries.

_EMPTY_ENTRY = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def _with_empty_entries(path: Path, count: int, declared: int) -> Path:
    """``path`` (a zip) with ``count`` empty entries added to its central directory, whose end records (zip64's
    and the classic one) declare ``declared`` entries in all."""
    data = path.read_bytes()
    signature, _, _, _, entries, directory_size, directory_start, _ = struct.unpack("<4s4H2LH", data[-22:])
    assert signature == b"PK\x05\x06"
    directory = data[directory_start : directory_start + directory_size] + _EMPTY_ENTRY * count
    declared += entries
    zip64_end = directory_start + len(directory)
    with path.open("wb") as out:
        out.write(data[:directory_start])
        out.write(directory)
        out.write(struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, declared, declared, len(directory),
                              directory_start))  # fmt: skip
        out.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, zip64_end, 1))
        out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
    return path


@pytest.mark.parametrize("declared", ["all of them", "three"])
def test_a_zip_of_millions_of_empty_entries(tmp_path: Path, declared: str):
    """230 MB of central directory: 5M entries of 46 bytes, declared by the zip64 end record or understated."""
    count = 5_000_000
    rng = np.random.default_rng(12)
    samples = [{"index": index, "prompt": f"p{index // 4}", "reward": float(rng.integers(0, 2))} for index in range(16)]
    path = generate.save_rollout_dump(tmp_path / "rollout_data" / "0.pt", 0, samples)
    assert zipfile.is_zipfile(path)
    _with_empty_entries(path, count, count if declared == "all of them" else 3)
    audit(f"zip of {count:,} empty entries ({declared} declared)", path, said="entries", codes=(2,))
