"""Hostile and broken inputs, each class at ten times the size that once broke rollaudit, run the way a
user runs it: ``python -m rollaudit`` in a child process, measured for its exit code, seconds and peak resident
memory (the largest of it and of every process it waited for, its capped table reader included).

Every case must end in exit 0 or 2 with no traceback, in under 30 s and 1.5 GB. Each input is built here.
``ROLLAUDIT_HOSTILE_TABLE=FILE`` also writes the measurements as a Markdown table.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollaudit._loaders.arrow import tables
from tests.fuzz import payloads
from tests.loaders.test_unpickle import generate

SECONDS = 30.0
PEAK_MIB = 1536
_HASH_MODULUS = (1 << 61) - 1

_MEASURE = textwrap.dedent(
    """
    import json, resource, subprocess, sys, time
    started = time.perf_counter()
    try:
        done = subprocess.run(sys.argv[2:], capture_output=True, timeout=float(sys.argv[1]))
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        code, out, err = "timeout", expired.stdout or b"", expired.stderr or b""
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"code": code, "seconds": seconds, "peak_mib": peak,
                      "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace")}))
    """
)
_MEASURED: list[dict] = []


def measure(command: list[str], cwd: Path, environment: dict[str, str]) -> dict:
    """``command`` in a fresh child of a fresh measuring process: exit code, output, seconds, peak MiB."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(SECONDS * 3), *command],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=SECONDS * 4,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_measured(*args: str | Path, cwd: Path) -> dict:
    """``rollaudit ARGS`` measured (:func:`measure`) with COLUMNS=120, a private cache, not under GitHub Actions."""
    environment = {**os.environ, "COLUMNS": "120", "XDG_CACHE_HOME": str(cwd / "cache")}
    environment.pop("GITHUB_ACTIONS", None)
    return measure([sys.executable, "-m", "rollaudit", *map(str, args)], cwd, environment)


def check(case: str, result: dict, size: str, *, codes: tuple[int, ...] = (0, 2), said: str | None = None) -> None:
    """The contract of every case; ``said``: a part of the one error line (or of stdout when it exits 0)."""
    last = (result["stderr"].strip().splitlines() or [""])[-1]
    _MEASURED.append({"case": case, "input": size, **result, "said": last})
    assert result["code"] in codes, f"{case}: exit {result['code']}\n{result['stderr'][-3000:]}"
    assert "Traceback" not in result["stderr"] + result["stdout"], result["stderr"][-3000:]
    assert result["seconds"] < SECONDS, f"{case}: {result['seconds']:.1f} s"
    assert result["peak_mib"] < PEAK_MIB, f"{case}: {result['peak_mib']:.0f} MiB"
    if said is not None:
        assert said in result["stderr"] + result["stdout"], result["stderr"][-2000:]
    if result["code"] == 2:
        assert len(result["stderr"].strip().splitlines()) == 1 and last.startswith("error: "), result["stderr"]


@pytest.fixture(scope="module", autouse=True)
def _measurement_table():
    yield
    target = os.environ.get("ROLLAUDIT_HOSTILE_TABLE")
    if target:
        rows = ["| case | input | exit | seconds | peak MiB | what it said |", "|---|---|---|---|---|---|"]
        for item in _MEASURED:
            said = item["said"].replace("|", "\\|")[:150] or "(a report)"
            rows.append(
                f"| {item['case']} | {item['input']} | {item['code']} | {item['seconds']:.2f} | "
                f"{item['peak_mib']:.0f} | {said} |"
            )
        Path(target).write_text("\n".join(rows) + "\n")


def size_of(path: Path) -> str:
    files = [item for item in path.rglob("*") if item.is_file()] if path.is_dir() else [path]
    size = float(sum(item.stat().st_size for item in files))
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError  # pragma: no cover


def audit(case: str, path: Path, *extra: str, said: str | None = None, codes: tuple[int, ...] = (0, 2)) -> dict:
    result = run_measured("compare", path, "--no-cache", *extra, cwd=path.parent)
    check(case, result, size_of(path), codes=codes, said=said)
    return result


# ---------------------------------------------------------------------------------------------------------------------
# Pickles: hangs, hash floods, memory bombs.


def _long_put(index: int) -> bytes:
    return b"r" + struct.pack("<I", index)


def _long_get(index: int) -> bytes:
    return b"j" + struct.pack("<I", index)


def tuple_dag_key(levels: int) -> bytes:
    """``t = (t, t)`` ``levels`` times through the memo, as a dict key: hashing it takes 2**levels steps."""
    dag = b")" + _long_put(0)
    for level in range(1, levels + 1):
        dag += _long_get(level - 1) + _long_get(level - 1) + b"\x86" + _long_put(level)
    return payloads.dump_with("metadata", b"}" + dag + payloads.small_int(1) + b"s")


def colliding_int_keys(count: int) -> bytes:
    """``count`` integer keys of one hash residue mod 2**61 - 1: every insertion compares against all the others."""
    keys = b"".join(b"\x8a\x10" + (7 + index * _HASH_MODULUS).to_bytes(16, "little") + b"N" for index in range(count))
    return payloads.dump_with("metadata", b"}(" + keys + b"u")


def samples_by_dup(copies: int) -> bytes:
    """One sample dict pushed ``copies`` times by DUP: one byte a sample."""
    one = payloads.plain_sample(0, 1.0)
    fields = payloads.text("rollout_id") + b"K\x00" + payloads.text("samples") + b"](" + one + b"2" * copies + b"e"
    return payloads.PROTO2 + b"}(" + fields + b"u."


def memo_inflated_pickle(copies: int) -> bytes:
    """LONG_BINPUT of one 1 KB text and ``copies`` LONG_BINGETs of it in a list: 5 bytes a reference."""
    return payloads.PROTO2 + payloads.text("x" * 1000) + _long_put(1) + b"](" + _long_get(1) * copies + b"e."


PICKLES: dict[str, tuple[Callable[[], bytes], str]] = {
    # Reported: a 642 B pickle, a 64-level DAG: a hang Ctrl-C could not stop. Here 1,100 levels (17 KB).
    "tuple DAG as a dict key": (lambda: tuple_dag_key(1100), "expands to"),
    # Reported: 1.3 MB, 72-104 s. Here 13 MB of keys.
    "hash-colliding int keys": (lambda: colliding_int_keys(1_100_000), "integers of one hash"),
    # Reported: 10M samples from a few bytes each. Here 20M.
    "20M samples by DUP": (lambda: samples_by_dup(20_000_000), "samples in"),
    # Reported: 200-300 KB -> 2.7-3.4 GB by memo references. Here 10 MB: 2M references.
    "memo references": (lambda: memo_inflated_pickle(2_000_000), None),
}


@pytest.mark.parametrize("case", sorted(PICKLES))
def test_hostile_pickles(tmp_path: Path, case: str):
    build, said = PICKLES[case]
    path = generate.write_torch_zip(tmp_path / "rollout_data" / "0.pt", build())
    audit(case, path, said=said)


def test_a_deflated_data_pkl(tmp_path: Path):
    """Once: 3.1 MB of deflated zeros inflated to 3.2 GB before any check. Here 31 MB -> 32 GB: never inflated."""
    path = tmp_path / "rollout_data" / "0.pt"
    path.parent.mkdir()
    zeros = 32 << 30
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        with out.open("archive/data.pkl", "w", force_zip64=True) as member:
            member.write(payloads.PROTO2 + b"\x8e" + struct.pack("<Q", zeros))
            block = bytes(64 << 20)
            for _ in range(zeros // len(block)):
                member.write(block)
            member.write(b".")
        out.writestr("archive/version", b"3\n")
    audit("deflated data.pkl", path, said="compressed")


def _big_step(samples: int) -> tuple[list[dict], list[dict]]:
    rng = random.Random(16)
    rollout = [
        generate.rollout_sample(rng, group_index=index // 4, index=index, reward=float(index % 2), response_length=4)
        for index in range(samples)
    ]
    train = [
        generate.train_sample(rollout[index], position=index, normalized=0.0, data_parallel_rank=0, raw_reward=0.0)
        for index in range(samples)
    ]
    return rollout, train


def _train_run(directory: Path, rollout: list[dict], train: list[dict]) -> Path:
    generate.save_rollout_dump(directory / "rollout_data" / "0.pt", 0, rollout)
    generate.save_train_dump(
        directory / "train_data" / "0_0.pt", 0, train, raw_reward=[sample["reward"] for sample in rollout]
    )
    return directory


def test_stride_0_advantages(tmp_path: Path):
    """Once, a 608 B view over 4 bytes describing 4.2 GB, or a hang at 2**44 elements. Here 2**48 elements."""
    import torch

    rollout, train = _big_step(8)
    train[0]["advantages"] = torch.zeros(1).expand(1 << 48)
    audit("stride-0 tensor view", _train_run(tmp_path / "run", rollout, train), said="advantages")


@pytest.mark.parametrize("kind", ["tensor", "list"])
def test_per_token_values_shared_through_the_memo(tmp_path: Path, kind: str):
    """Once: 80 KB -> 3.2 GB. Here one 1M-value tensor (or a 100k-value list) named by all 4,000 samples' advantages:
    4G (400M) values to build from a few MB."""
    import torch

    rollout, train = _big_step(4000)
    shared = torch.zeros(1 << 20) if kind == "tensor" else [0.0] * 100_000
    for sample in train:
        sample["advantages"] = shared
    audit(f"shared advantages ({kind})", _train_run(tmp_path / "run", rollout, train), said="shared across samples")


# ---------------------------------------------------------------------------------------------------------------------
# Tables that pyarrow expands: dictionary pages, list levels, compressed IPC buffers.


def parquet_dictionary_bomb(path: Path) -> Path:
    """1M rows of one 240 KB prompt: a dictionary page and run-length indices (tens of KB), 250 GB decoded."""
    rows = 1 << 20
    prompts = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array(["x" * 240_000]))
    pq.write_table(pa.table({"prompt": prompts, "reward": np.zeros(rows)}), path, store_schema=False)
    return path


def parquet_list_bomb(path: Path) -> Path:
    """One row whose chat prompt lists one 30 KB message 1M times: 564 B, 30 GB decoded."""
    count = 1 << 20
    messages = pa.DictionaryArray.from_arrays(pa.array(np.zeros(count, dtype=np.int32)), pa.array(["y" * 30_000]))
    prompt = pa.ListArray.from_arrays(pa.array([0, count], pa.int32()), messages)
    pq.write_table(pa.table({"prompt": prompt, "reward": [1.0]}), path, compression="zstd", store_schema=False)
    return path


def parquet_mask_bomb(path: Path) -> Path:
    """160 rows of 8M-long loss masks of zeros: 17 KB, 10.7 GB decoded."""
    count = 8 << 20
    masks = pa.ListArray.from_arrays(pa.array([0, count], pa.int32()), pa.array(np.zeros(count, dtype=np.int64)))
    table = pa.table(
        {
            "prompt": pa.chunked_array([pa.array(["p"])] * 160),
            "reward": pa.chunked_array([pa.array([1.0])] * 160),
            "loss_mask": pa.chunked_array([masks] * 160),
        }
    )
    pq.write_table(table, path, compression="zstd", row_group_size=1 << 20)
    return path


def compressed_ipc_bomb(path: Path) -> Path:
    """40 zstd-compressed batches of 64M zeros in two columns: 1.3 MB, 43 GB decoded (issue: 455 KB -> 4.3 GB)."""
    batch = pa.record_batch({"reward": np.zeros(64 << 20), "prompt": np.zeros(64 << 20, dtype=np.int64)})
    with pa.ipc.new_file(path, batch.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        for _ in range(40):
            writer.write_batch(batch)
    return path


TABLES: dict[str, tuple[Callable[[Path], Path], str]] = {
    # Reported: 68 KB -> 2.2 GB.
    "Parquet dictionary page": (parquet_dictionary_bomb, "decodes to more than"),
    # Reported: 1.5 KB -> 2.7 GB.
    "Parquet list values (prompt)": (parquet_list_bomb, "decodes to more than"),
    "Parquet list values (loss mask)": (parquet_mask_bomb, "decodes to more than"),
    # Reported: 455 KB -> 4.3 GB.
    "compressed Arrow IPC": (compressed_ipc_bomb, "decodes to more than"),
}


@pytest.mark.parametrize("case", sorted(TABLES))
def test_tables_that_expand(tmp_path: Path, case: str):
    build, said = TABLES[case]
    path = build(tmp_path / ("bomb.arrow" if "IPC" in case else "bomb.parquet"))
    audit(case, path, said=said)


# ---------------------------------------------------------------------------------------------------------------------
# JSON: depth, and values JSON has no type for.


@pytest.mark.parametrize("depth", [50_000, 200_000])
def test_deeply_nested_json_lines(tmp_path: Path, depth: int):
    """Once: 20k+ deep on line 2 segfaulted in pyarrow (exit 139), 2-5k gave RecursionError tracebacks."""
    path = tmp_path / "deep.jsonl"
    deep = "[" * depth + "]" * depth
    path.write_text('{"prompt": "a", "reward": 1}\n{"prompt": "b", "reward": 0, "x": ' + deep + "}\n")
    audit(f"JSON Lines nested {depth:,} deep", path, said="nested")
    result = run_measured("compare", path, path, "--no-cache", "--jobs", "2", cwd=tmp_path)
    check(f"JSON Lines nested {depth:,} deep, 2 workers", result, size_of(path) + " ×2", said="nested")


def _deepest_line_model(text: bytes, limit: int) -> int | None:
    """The first line nesting deeper than ``limit``, one character at a time: the oracle of the numpy scan."""
    for number, line in enumerate(text.split(b"\n"), start=1):
        depth, in_string, backslashes = 0, False, 0
        for byte in line:
            if byte == ord('"') and backslashes % 2 == 0:
                in_string = not in_string
            elif not in_string and byte in b"[{":
                depth += 1
                if depth > limit:
                    return number
            elif not in_string and byte in b"]}":
                depth -= 1
            backslashes = backslashes + 1 if byte == ord("\\") else 0
    return None


@settings(max_examples=400, deadline=None)
@given(
    text=st.lists(st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b"a", b"\n", b"[[[["]), max_size=300),
    limit=st.integers(0, 6),
    chunk=st.integers(1, 17),
)
def test_the_depth_scan_agrees_with_a_character_loop(text: list[bytes], limit: int, chunk: int):
    """Strings (quotes escaped by odd runs of backslashes) and lines, carried across chunk boundaries."""
    data = b"".join(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tables, "_DEPTH_CHUNK", chunk)
        found = tables.too_deep_line(np.frombuffer(data, dtype=np.uint8), limit)
    assert found == _deepest_line_model(data, limit)


def test_timestamps_and_bytes_in_chat_prompts(tmp_path: Path):
    """Once, a chat prompt holding "2024-01-01 00:00:00" is inferred as a timestamp; its key gave a TypeError."""
    path = tmp_path / "chat.jsonl"
    with path.open("w") as out:
        for index in range(400_000):
            message = {"role": "user", "content": f"q{index % 1000}", "sent": "2024-01-01 00:00:00"}
            out.write(json.dumps({"prompt": [message], "reward": index % 2}) + "\n")
    result = audit("timestamp in a chat prompt key", path, codes=(0,))
    assert "1,000 prompts" in result["stdout"] or "1000 prompts" in result["stdout"], result["stdout"][:500]


def test_a_pass_through_column_that_changes_type(tmp_path: Path):
    """Once, an int column in one file and text in the next gave an ArrowTypeError."""
    run = tmp_path / "run"
    run.mkdir()
    for step, extra in ((0, 5), (1, "five")):
        rows = [{"prompt": f"p{index % 3}", "reward": index % 2, "step": step, "extra": extra} for index in range(30)]
        (run / f"step{step}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = run_measured("compare", *sorted(run.iterdir()), "--no-cache", cwd=tmp_path)
    said = "column 'extra' changes type between files"
    check("pass-through column changing type", result, size_of(run), codes=(0,), said=said)


def test_convert_to_a_format_that_cannot_hold_a_column(tmp_path: Path):
    """Once: ``convert`` to Parquet with an unsupported column type gave ArrowNotImplementedError."""
    import pyarrow.feather as feather

    interval = pa.array([pa.MonthDayNano([1, 2, 3])] * 4, pa.month_day_nano_interval())
    source = tmp_path / "d.arrow"
    table = pa.table({"prompt": ["a", "a", "b", "b"], "reward": [0.0, 1.0, 0.0, 1.0], "interval": interval})
    feather.write_feather(table, source, compression="uncompressed")
    result = run_measured("convert", source, "-o", tmp_path / "out.parquet", "--no-cache", cwd=tmp_path)
    check("convert: a column Parquet cannot hold", result, size_of(source), codes=(2,), said="cannot write")
    assert not (tmp_path / "out.parquet").exists() and not list(tmp_path.glob(".out.parquet*"))


# ---------------------------------------------------------------------------------------------------------------------
# Config readers: baselines and gate files.

CONFIGS = {
    "baseline JSON nested 1M deep": ("baseline.json", "[" * 1_000_000 + "]" * 1_000_000),
    "baseline JSON with a 1M-digit number": ("baseline.json", '{"version": ' + "9" * 1_000_000 + "}"),
    "baseline JSON with 1e999999": ("baseline.json", '{"version": 1e999999}'),
    "gate TOML nested 1M deep": ("gate.toml", "x = " + "[" * 1_000_000 + "]" * 1_000_000 + "\n"),
    "gate TOML with a 1M-digit number": ("gate.toml", "[rules]\nmax = " + "9" * 1_000_000 + "\n"),
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_hostile_config_files(tmp_path: Path, case: str):
    name, text = CONFIGS[case]
    config = tmp_path / name
    config.write_text(text)
    dump = generate.save_rollout_dump(tmp_path / "0.pt", 0, generate.spec_4_3_4_step())
    option = "--baseline" if name.endswith(".json") else "--gate-config"
    result = run_measured("gate", dump, option, config, "--no-cache", cwd=tmp_path)
    check(case, result, size_of(config), codes=(2,), said=name)


# ---------------------------------------------------------------------------------------------------------------------
# The cache: its entries are data.


def _cached_run(tmp_path: Path) -> tuple[Path, Path]:
    dump = generate.save_rollout_dump(tmp_path / "0.pt", 0, generate.spec_4_3_4_step())
    first = run_measured("compare", dump, "--json", cwd=tmp_path)
    assert first["code"] == 0, first["stderr"]
    (entry,) = (tmp_path / "cache" / "rollaudit").rglob("*.parquet")
    return dump, entry


def _rewrite_entry(entry: Path, change: Callable[[dict], dict]) -> None:
    table = pq.read_table(entry)
    metadata = dict(table.schema.metadata)
    stored = json.loads(metadata[b"rollaudit.cache"])
    metadata[b"rollaudit.cache"] = json.dumps(change(stored)).encode()
    pq.write_table(table.replace_schema_metadata(metadata), entry)


@pytest.mark.parametrize(
    "case",
    ["a warning category naming a module", "a missing key", "a wrong type", "a format that does not exist"],
)
def test_a_tampered_cache_entry_is_a_miss(tmp_path: Path, case: str):
    """Once, a category was imported with importlib (``this`` printed the Zen of Python into ``--json``);
    malformed entries gave KeyError tracebacks."""
    dump, entry = _cached_run(tmp_path)
    # The record of a window of files lists them column by column ("files"), their warnings as indices into the
    # distinct lists of them ("warned"): this run is one file.
    changes: dict[str, Callable[[dict], dict]] = {
        "a warning category naming a module": lambda stored: {**stored, "warned": [[["this.Zen", "hi"]]]},
        "a missing key": lambda stored: {
            **stored,
            "files": {key: value for key, value in stored["files"].items() if key != "format"},
        },
        "a wrong type": lambda stored: {**stored, "warned": 7},
        "a format that does not exist": lambda stored: {**stored, "files": {**stored["files"], "format": ["os"]}},
    }
    _rewrite_entry(entry, changes[case])
    result = run_measured("compare", dump, "--json", cwd=tmp_path)
    check(f"cache entry with {case}", result, size_of(entry), codes=(0,))
    assert "hi" not in result["stderr"].split()  # a miss: the file read again, not the entry's warning
    assert "Zen of Python" not in result["stdout"] and "Beautiful is better" not in result["stdout"]
    json.loads(result["stdout"])


def test_a_same_size_rewrite_with_the_mtime_restored_is_not_served_stale(tmp_path: Path):
    dump, _ = _cached_run(tmp_path)
    before = dump.stat()
    samples = generate.spec_4_3_4_step()
    for sample in samples:
        sample["reward"] = 1.0 - sample["reward"]  # same types, same pickle size
    generate.save_rollout_dump(dump, 0, samples)
    assert dump.stat().st_size == before.st_size
    os.utime(dump, ns=(before.st_atime_ns, before.st_mtime_ns))
    fresh = run_measured("compare", dump, "--json", "--no-cache", cwd=tmp_path)
    cached = run_measured("compare", dump, "--json", cwd=tmp_path)
    check("cache: same-size rewrite, mtime restored", cached, size_of(dump), codes=(0,))
    assert json.loads(cached["stdout"])["summary"] == json.loads(fresh["stdout"])["summary"]


# ---------------------------------------------------------------------------------------------------------------------
# Terminal escapes from a dump's values.

_ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m\u202e\x9b"


@pytest.mark.parametrize("command", ["compare", "inspect"])
def test_control_characters_never_reach_the_terminal(tmp_path: Path, command: str):
    """Once: ANSI/OSC sequences in status values or prompt keys cleared the screen or retitled the window."""
    path = tmp_path / "escapes.jsonl"
    rows = [
        {"prompt": f"{_ESCAPES} {index % 3}", "reward": int(index % 3 == 0 or index % 6 == 1), "status": f"x{_ESCAPES}"}
        for index in range(12)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    for extra in ((), ("--markdown",), ("--top", "3")) if command == "compare" else ((),):
        result = run_measured(command, path, "--no-cache", *extra, cwd=tmp_path)
        check(f"escapes in prompts and status ({command} {' '.join(extra)})".replace(" )", ")"), result,
              size_of(path), codes=(0,))  # fmt: skip
        shown = result["stdout"] + result["stderr"]
        for control in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert control not in shown, repr(shown[:400])
    assert "\\x1b" in shown, shown[:400]  # the last run shows the prompts (or statuses): escaped, not dropped
