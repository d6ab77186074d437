"""The dashboards read back as their own tools read them: TensorBoard's event-file loader and accumulator, and the
records of a W&B offline run (its ``.wandb`` file, decoded with W&B's own protocol buffers)."""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

EVENT_GLOB = "events.out.tfevents.*"


def event_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(EVENT_GLOB))


def tensorboard_events(directory: Path) -> tuple[dict[tuple[int, str], float], Counter, dict[tuple[int, str], str]]:
    """Every scalar and text in the event files of ``directory``: ``{(step, tag): value}``, how many times each
    (step, tag) was written across all files (TensorBoard's raw event loader), and ``{(step, tag): text}``."""
    loader = pytest.importorskip("tensorboard.backend.event_processing.event_file_loader")
    tensor_util = pytest.importorskip("tensorboard.util.tensor_util")
    scalars: dict[tuple[int, str], float] = {}
    texts: dict[tuple[int, str], str] = {}
    written: Counter = Counter()
    for path in event_files(directory):
        kinds: dict[str, str] = {}
        for event in loader.EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name:
                    kinds[value.tag] = value.metadata.plugin_data.plugin_name
                written[(event.step, value.tag)] += 1
                array = tensor_util.make_ndarray(value.tensor)
                if kinds[value.tag] == "scalars":
                    assert array.dtype.name == "float32" and array.shape == ()
                    scalars[(event.step, value.tag)] = float(array.item())
                else:
                    assert kinds[value.tag] == "text"
                    texts[(event.step, value.tag)] = array.item().decode("utf-8")
    return scalars, written, texts


def tensorboard_accumulated(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """The scalars as TensorBoard's multiplexer-side accumulator serves them: ``{tag: [(step, value), ...]}``."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.plugin_event_accumulator")
    tensor_util = pytest.importorskip("tensorboard.util.tensor_util")
    events = accumulator.EventAccumulator(str(directory), size_guidance={"tensors": 0})
    events.Reload()
    return {
        tag: [(event.step, float(tensor_util.make_ndarray(event.tensor_proto).item())) for event in events.Tensors(tag)]
        for tag in events.PluginTagToContent("scalars")
    }


# A W&B ``.wandb`` file: a 7-byte header (":W&B", a 2-byte magic, a version byte), then LevelDB's log format:
# 32 KiB blocks of chunks, each a 7-byte header (CRC-32 of type and data, length, type) and its data; a record is
# one FULL chunk, or FIRST, MIDDLE..., LAST.
_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> list[Any]:
    """The records of a ``.wandb`` file, each checked against its CRC and decoded with W&B's ``Record`` proto."""
    protos = pytest.importorskip("wandb.proto.wandb_internal_pb2")
    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    position, pending, records = 7, b"", []
    while position + 7 <= len(data):
        left = _BLOCK - position % _BLOCK
        if left < 7:
            position += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0 and length == 0:
            break
        chunk = data[position + 7 : position + 7 + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == crc, f"{path}: bad chunk at {position}"
        position += 7 + length
        if kind == _FULL:
            records.append(chunk)
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            records.append(pending + chunk)
    decoded = []
    for raw in records:
        record = protos.Record()
        record.ParseFromString(raw)
        decoded.append(record)
    return decoded


@dataclass
class OfflineRun:
    """An offline W&B run as its file holds it."""

    path: Path
    run_id: str
    project: str
    group: str
    job_type: str
    name: str
    config: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)


def wandb_offline_runs(root: Path) -> list[OfflineRun]:
    """Every offline run under ``root/wandb``, oldest first, with its history rows (``_step`` and the keys)."""
    runs = []
    for path in sorted(root.glob("wandb/offline-run-*/run-*.wandb")):
        records = wandb_records(path)
        (run,) = [record.run for record in records if record.WhichOneof("record_type") == "run"]
        config = {item.key: json.loads(item.value_json) for item in run.config.update}
        offline = OfflineRun(path, run.run_id, run.project, run.run_group, run.job_type, run.display_name, config)
        for record in records:
            if record.WhichOneof("record_type") == "history":
                offline.history.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
        runs.append(offline)
    return runs


def tree(directory: Path) -> dict[str, bytes | str]:
    """Everything under ``directory`` (links not followed): relative path -> content, or ``link:<target>``,
    ``dir``."""
    found: dict[str, bytes | str] = {}
    if not directory.exists():
        return found
    for path in sorted(directory.rglob("*")):
        name = str(path.relative_to(directory))
        if path.is_symlink():
            found[name] = f"link:{path.readlink()}"
        elif path.is_dir():
            found[name] = "dir"
        else:
            found[name] = path.read_bytes()
    return found


def watch_then_interrupt(
    arguments: list[str],
    records: Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    steps: int = 2,
    seconds: float = 120,
    while_running: Callable[[], None] | None = None,
) -> str:
    """``rollaudit watch ARGUMENTS`` (with ``--jsonl RECORDS``) as a process, until ``steps`` records are written;
    ``while_running`` is called then, before the Ctrl-C; the watch must exit 0. Its stderr."""
    command = [sys.executable, "-m", "rollaudit", "watch", *arguments, "--jsonl", str(records)]
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and process.poll() is None:
            if records.exists() and len(records.read_text().splitlines()) >= steps:
                break
            time.sleep(0.1)
        if while_running is not None:
            while_running()
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=seconds)
    assert process.returncode == 0, stderr
    return stderr
