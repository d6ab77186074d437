"""Resource limits a hostile dump cannot get around: huge declared allocations, deep nesting, zip bombs.

Each case ends in an InputError (one line) within a few seconds, with bounded
memory: measured with tracemalloc in-process, or with the peak resident size of
a child process for the cases that, unfixed, crash the interpreter (deep tuple
nesting overflowed the C stack: a segmentation fault, which must not take the
test session down with it).
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import textwrap
import time
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import pytest

import rollaudit
from rollaudit import InputError
from rollaudit._loaders.torchsave.torch_zip import TorchArchive
from tests.fuzz import payloads
from tests.fuzz.harness import ROOT, generate
from tests.torch_files import load_torch_file

SECONDS = 5.0
MIB = 1 << 20


def _expect_input_error(path: Path, match: str | None = None, *, max_bytes: int = 64 * MIB, **options) -> str:
    """Load ``path``: an InputError (one line, matching ``match``) within SECONDS and ``max_bytes`` of allocations.

    Timed once as it is, then measured once under tracemalloc (which slows allocation-heavy code several times).
    """

    def load() -> InputError:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(InputError) as caught:
                rollaudit.load(path, **options)
        return caught.value

    started = time.perf_counter()
    error = load()
    seconds = time.perf_counter() - started
    tracemalloc.start()
    try:
        load()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(error)
    assert "\n" not in message
    if match is not None:
        assert match in message, message
    assert seconds < SECONDS, f"{seconds:.1f} s"
    assert peak < max_bytes, f"{peak / MIB:.0f} MiB allocated"
    return message


def _pickle_file(tmp_path: Path, data: bytes, name: str = "hostile.pt", **kwargs) -> Path:
    return generate.write_torch_zip(tmp_path / name, data, **kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# Gigantic allocations asked for by a few bytes.

_HUGE = {
    "BINBYTES8 of 2**40 bytes": b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b"ab.",
    "BINUNICODE8 of 2**40 bytes": b"\x80\x04\x8d" + struct.pack("<Q", 1 << 40) + b"ab.",
    "BYTEARRAY8 of 2**40 bytes": b"\x80\x05\x96" + struct.pack("<Q", 1 << 40) + b"ab.",
    "BINUNICODE of 4 GiB": b"\x80\x02X" + struct.pack("<I", 0xFFFFFFFF) + b"ab.",
    "LONG4 of 2 GiB": b"\x80\x02\x8b" + struct.pack("<i", 0x7FFFFFFF) + b"ab.",
    "BINSTRING of negative length": b"\x80\x02T" + struct.pack("<i", -5) + b"ab.",
    "LONG_BINPUT at index 2**32-1": b"\x80\x02]r" + struct.pack("<I", 0xFFFFFFFF) + b".",
    "PUT at index 10**18": b"\x80\x02]p1000000000000000000\n.",
    "BINPUT far beyond the data": b"\x80\x02]q\xff.",
    "LONG_BINGET far away": b"\x80\x02j" + struct.pack("<I", 0xFFFFFFFF) + b".",
    "GET of a missing memo entry": b"\x80\x02g99999999999\n.",
    "FRAME of 2**62 bytes": b"\x80\x04\x95" + struct.pack("<Q", 1 << 62) + b"N.",
}


@pytest.mark.parametrize("name", sorted(_HUGE))
def test_gigantic_allocations_are_refused(tmp_path: Path, name: str):
    path = _pickle_file(tmp_path, _HUGE[name])
    _expect_input_error(path, max_bytes=16 * MIB)


def test_a_storage_of_2_40_elements_is_refused(tmp_path: Path):
    data = payloads.PROTO2 + _tensor(numel=1 << 40) + payloads.STOP
    path = _pickle_file(tmp_path, data, storages={"0": bytes(16)})
    _expect_input_error(path, "declares 1099511627776 float32 values", max_bytes=16 * MIB)


def test_memoizing_every_value_stays_linear(tmp_path: Path):
    """MEMOIZE after every one of 500k values: the memo grows with the data, no faster."""
    data = b"\x80\x04]" + b"(" + b"N\x94" * 500_000 + b"e."
    path = _pickle_file(tmp_path, data)
    _expect_input_error(path, "holds a list", max_bytes=64 * MIB)


# ---------------------------------------------------------------------------------------------------------------------
# Deep nesting.


def _in_child(tmp_path: Path, data: bytes, *, storages: dict | None = None, what: str = "load") -> dict:
    """Load a hostile dump in a child process: its outcome, seconds and peak resident MiB (a crash is a result)."""
    path = _pickle_file(tmp_path, data, storages=storages)
    script = textwrap.dedent(
        """
        import json, resource, sys, time, warnings
        sys.path.insert(0, sys.argv[1])
        import rollaudit
        from tests.torch_files import load_torch_file
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        try:
            if sys.argv[3] == "raw":
                load_torch_file(sys.argv[2])
            else:
                rollaudit.load(sys.argv[2])
            outcome = "value"
        except rollaudit.RollauditError as error:
            outcome = "InputError: " + str(error)
        except BaseException as error:
            outcome = f"BUG {type(error).__name__}: {error}"
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"outcome": outcome, "seconds": seconds, "peak_mib": peak}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(ROOT), str(path), what], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"the child died with {result.returncode}: {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


_NESTED_TUPLE = b"K\x00" + b"\x85" * 2_000_000
_DEEP = {
    # Unfixed, hashing the key recursed two million times in C: a segmentation fault. Now the opcode scan sees a
    # tuple that expands to two million elements (what hashing it would cost) and refuses it before unpickling.
    "a 2M-deep tuple as a dict key": (payloads.PROTO2 + b"}" + _NESTED_TUPLE + b"K\x01s.", "expands to"),
    "a 2M-deep tuple in a frozenset": (payloads.PROTO4 + b"\x8f(" + _NESTED_TUPLE + b"\x90.", "expands to"),
    "a 2M-deep tuple as a sample's dict key": (
        payloads.rollout_dump([b"}" + _NESTED_TUPLE + b"K\x01s"]),
        "expands to",
    ),
    "5M tuple opcodes (more than read)": (payloads.PROTO2 + b"K\x00" + b"\x85" * 5_000_000 + b".", "expands to"),
    "1M nested lists": (payloads.PROTO2 + b"]" * 1_000_000 + b"a" * 999_999 + b".", "holds a list"),
    "100k MARKs": (payloads.PROTO2 + b"(" * 100_000 + b"N" + b"l" * 100_000 + b".", "holds a list"),
    "1M nested dicts": (payloads.PROTO2 + b"}" + b"X\x01\x00\x00\x00k}" * 1_000_000 + b"s" * 1_000_000 + b".", None),
    "a reward nested 1M deep": (
        payloads.dump_with("reward", b"]" * 1_000_000 + b"a" * 999_999),
        "reward is a list",
    ),
}


@pytest.mark.parametrize("name", sorted(_DEEP))
def test_deep_nesting_ends_in_an_input_error(tmp_path: Path, name: str):
    data, match = _DEEP[name]
    result = _in_child(tmp_path, data)
    assert result["outcome"].startswith("InputError"), result
    if match is not None:
        assert match in result["outcome"], result
    assert result["seconds"] < 10 * SECONDS, result  # a child process on a loaded 2-core machine
    assert result["peak_mib"] < 2048, result


def test_deep_tuples_in_a_raw_load(tmp_path: Path):
    """load_torch_file (torch tensors) takes the same path: refused by the scan, nothing crashes; a tuple nested
    a few thousand deep, which hashes in a few thousand steps, is read on a thread with the stack it needs."""
    result = _in_child(tmp_path, payloads.PROTO2 + b"}" + _NESTED_TUPLE + b"K\x01s.", what="raw")
    assert result["outcome"].startswith("InputError") and "expands to" in result["outcome"], result
    moderate = payloads.PROTO2 + b"}" + b"K\x00" + b"\x85" * 200_000 + b"K\x01s."
    assert _in_child(tmp_path, moderate, what="raw")["outcome"] == "value"


def test_deeply_nested_per_token_advantages_are_not_numbers(tmp_path: Path):
    """A train dump's advantages as 100k nested lists: numpy refuses them (a depth limit), no recursion error."""
    rollout = generate.save_rollout_dump(tmp_path / "d" / "rollout_data" / "0.pt", 0, generate.spec_4_3_4_step())
    assert rollout.exists()
    nested = b"]" * 100_000 + b"G" + struct.pack(">d", 0.5) + b"a" * 100_000
    sample = payloads.sample(sample_index=payloads.small_int(0), rewards=payloads.float_(0.5), advantages=nested)
    train = payloads.train_dump([sample])
    generate.write_torch_zip(tmp_path / "d" / "train_data" / "0_0.pt", train)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = rollaudit.load(tmp_path / "d")
    assert table.column("recorded_advantage").to_pylist()[0] == 0.5


# ---------------------------------------------------------------------------------------------------------------------
# Zip bombs and broken zips.


def _zip_bytes(members: list[tuple[str, bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names
        with zipfile.ZipFile(buffer, "w") as out:
            for name, body, compression in members:
                info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
                info.compress_type = compression
                out.writestr(info, body)
    return buffer.getvalue()


def _central_sizes(data: bytes, name: str, compressed: int | None, uncompressed: int) -> bytes:
    """Rewrite one member's sizes in the central directory."""
    data = bytearray(data)
    entry = data.find(b"PK\x01\x02")
    while entry != -1:
        length = struct.unpack_from("<H", data, entry + 28)[0]
        if data[entry + 46 : entry + 46 + length].decode() == name:
            if compressed is not None:
                struct.pack_into("<I", data, entry + 20, compressed)
            struct.pack_into("<I", data, entry + 24, uncompressed)
        entry = data.find(b"PK\x01\x02", entry + 4)
    return bytes(data)


def test_a_data_pkl_that_inflates_a_thousandfold(tmp_path: Path):
    """A 40 KB member holding 40 MB of zeros (deflate's ratio tops out near 1032:1): torch never deflates data.pkl,
    so it is refused before a byte is inflated."""
    pickle_bytes = b"\x80\x04\x8e" + struct.pack("<Q", 40 * MIB) + bytes(40 * MIB) + b"."
    data = _zip_bytes([("archive/data.pkl", pickle_bytes, zipfile.ZIP_DEFLATED)])
    assert len(data) * 900 < len(pickle_bytes)
    path = tmp_path / "bomb.pt"
    path.write_bytes(data)
    _expect_input_error(path, "data.pkl is compressed", max_bytes=4 * MIB)


def _with_deflated_storage(tmp_path: Path, declared: int | None = None) -> Path:
    """A torch.save file whose tensor storage member is deflated (and, with ``declared``, claims that size)."""
    import torch

    torch.save({"rollout_id": 0, "samples": [], "t": torch.zeros(1 << 16)}, tmp_path / "plain.pt")
    with zipfile.ZipFile(tmp_path / "plain.pt") as source:
        members = [
            (
                info.filename,
                source.read(info.filename),
                zipfile.ZIP_DEFLATED if "/data/" in info.filename else zipfile.ZIP_STORED,
            )
            for info in source.infolist()
        ]
    data = _zip_bytes(members)
    storage = next(name for name, _, _ in members if "/data/" in name)
    if declared is not None:
        data = _central_sizes(data, storage, None, declared)
    path = tmp_path / "storage.pt"
    path.write_bytes(data)
    return path


def test_a_storage_that_declares_more_than_deflate_can_hold(tmp_path: Path):
    path = _with_deflated_storage(tmp_path, declared=1 << 31)
    with pytest.raises(InputError, match="impossible size"):
        load_torch_file(path)
    honest = tmp_path / "honest"
    honest.mkdir()
    assert load_torch_file(_with_deflated_storage(honest))["t"].numel() == 1 << 16  # within the budget: read


def test_a_storage_that_inflates_past_its_declared_size(tmp_path: Path):
    """Declares 10 bytes, inflates to 256 KB: reading stops at 10 bytes, which are not the tensor's."""
    with pytest.raises(InputError):
        load_torch_file(_with_deflated_storage(tmp_path, declared=10))


def test_a_member_claiming_a_huge_size(tmp_path: Path):
    data = _zip_bytes([("archive/data.pkl", b"\x80\x02N.", zipfile.ZIP_STORED)])
    path = tmp_path / "huge.pt"
    path.write_bytes(_central_sizes(data, "archive/data.pkl", 0xFFFFFFF0, 0xFFFFFFF0))
    _expect_input_error(path, "past the end of the file", max_bytes=4 * MIB)


def test_a_zip_of_100k_members(tmp_path: Path):
    members = [(f"archive/data/{index}", b"", zipfile.ZIP_STORED) for index in range(100_000)]
    path = tmp_path / "many.pt"
    path.write_bytes(_zip_bytes(members))
    _expect_input_error(path, "without a data.pkl", max_bytes=256 * MIB)


def test_100k_directory_entries_for_one_storage(tmp_path: Path):
    """Overlapping members (one local file, 100k directory entries): every storage read counts against the file."""
    members = [("archive/data.pkl", payloads.PROTO2 + _tensor() + payloads.STOP, zipfile.ZIP_STORED)]
    members += [("archive/data/0", bytes(8), zipfile.ZIP_STORED)] * 100_000
    path = tmp_path / "overlap.pt"
    path.write_bytes(_zip_bytes(members))
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_torch_file(path).tolist() == [0.0, 0.0]
    assert time.perf_counter() - started < SECONDS


def test_truncated_and_swapped_zips(tmp_path: Path):
    valid = ROOT / "sample_dumps" / "fanout" / "rollout_data" / "3.pt"
    data = valid.read_bytes()
    for cut in (len(data) // 3, len(data) - 30, 100):
        path = tmp_path / f"cut{cut}.pt"
        path.write_bytes(data[:cut])
        _expect_input_error(path)
    with zipfile.ZipFile(valid) as archive:
        members = [(info.filename, archive.read(info)) for info in archive.infolist()]
    names = [name for name, _ in members]
    pickle_index = next(index for index, name in enumerate(names) if name.endswith("data.pkl"))
    storage_index = next(index for index, name in enumerate(names) if "/data/" in name)
    swapped = list(members)
    swapped[pickle_index] = (names[pickle_index], members[storage_index][1])
    swapped[storage_index] = (names[storage_index], members[pickle_index][1])
    path = tmp_path / "swapped.pt"
    path.write_bytes(_zip_bytes([(name, body, zipfile.ZIP_STORED) for name, body in swapped]))
    _expect_input_error(path, "cannot unpickle")


# ---------------------------------------------------------------------------------------------------------------------
# BUILD: a pickle may set the state of what it built. Nothing it sets may outlive the file or undo a check.


def _long(value: int) -> bytes:
    return b"\x8a\x08" + value.to_bytes(8, "little")


def _persistent(key: str = "0", numel: int = 2) -> bytes:
    """torch's persistent id of a float32 storage: ``("storage", torch.FloatStorage, key, "cpu", numel)``."""
    parts = payloads.text("storage") + payloads.global_("torch", "FloatStorage") + payloads.text(key)
    return b"(" + parts + payloads.text("cpu") + _long(numel) + b"tQ"


def _tensor(key: str = "0", numel: int = 2) -> bytes:
    return payloads.call(
        payloads.global_("torch._utils", "_rebuild_tensor_v2"),
        _persistent(key, numel),
        payloads.small_int(0),
        _long(numel) + b"\x85",
        payloads.small_int(1) + b"\x85",
    )


def _slot_state(**values: bytes) -> bytes:
    """BUILD's ``(None, {slot: value})`` state, then BUILD."""
    items = b"".join(payloads.text(name) + value for name, value in values.items())
    return b"N}(" + items + b"u\x86b"


def test_a_tensor_cannot_be_reshaped_after_its_bounds_check(tmp_path: Path):
    """Unfixed, BUILD set a lazy tensor's shape to 16M elements over 8 bytes: numpy read far past the buffer."""
    huge = b"J" + struct.pack("<i", 1 << 24) + b"\x85"
    data = payloads.PROTO2 + _tensor() + _slot_state(shape=huge) + b"."
    path = _pickle_file(tmp_path, data, storages={"0": bytes(8)})
    with TorchArchive(path) as archive, pytest.raises(InputError, match="changes a tensor"):
        archive.unpickle(lazy_tensors=True)


def test_a_storage_type_cannot_be_changed_for_later_files(tmp_path: Path):
    """Unfixed, BUILD on torch.FloatStorage rewrote the shared type's item size for every later file."""
    poison = payloads.global_("torch", "FloatStorage") + b"}" + payloads.text("itemsize") + b"K\x01sb"
    hostile = _pickle_file(tmp_path, payloads.dump_with("metadata", poison), name="poison.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputError):
            rollaudit.load(hostile)
        poison_slots = payloads.global_("torch", "FloatStorage") + _slot_state(itemsize=b"K\x01")
        with pytest.raises(InputError):
            rollaudit.load(_pickle_file(tmp_path, payloads.dump_with("metadata", poison_slots), name="p2.pt"))
        good = _pickle_file(tmp_path, payloads.PROTO2 + _tensor() + b".", name="good.pt", storages={"0": bytes(8)})
        assert load_torch_file(good).tolist() == [0.0, 0.0]


def test_a_storage_cannot_grow_after_its_size_check(tmp_path: Path):
    grown = _persistent() + b"}" + payloads.text("numel") + b"J" + struct.pack("<i", 1 << 24) + b"sb"
    path = _pickle_file(tmp_path, payloads.PROTO2 + grown + b".", storages={"0": bytes(8)})
    with pytest.raises(InputError):
        load_torch_file(path)


@pytest.mark.parametrize("numel", [0, 2])
def test_build_cannot_regrow_a_tensor_over_its_storage(tmp_path: Path, numel: int):
    """Unfixed, BUILD's legacy ``set_(self, 0, (N,), (1,))`` regrew an empty storage: N uninitialised floats."""
    tensor = _tensor(numel=numel)
    # memo the tensor, then BUILD it with the state (itself, 0, (2**20,), (1,))
    state = b"(h\x00K\x00J" + struct.pack("<i", 1 << 20) + b"\x85K\x01\x85tb"
    data = payloads.PROTO2 + tensor + b"q\x00" + state + b"."
    path = _pickle_file(tmp_path, data, storages={"0": bytes(4 * numel)})
    with pytest.raises(InputError, match="cannot unpickle"):
        load_torch_file(path)


@pytest.mark.parametrize("name", ["collections.OrderedDict", "builtins.set", "torch._utils._rebuild_tensor_v2"])
def test_rebuild_functions_take_no_state(tmp_path: Path, name: str):
    module, _, attribute = name.rpartition(".")
    for state in (b"}" + payloads.text("x") + b"K\x01sb", _slot_state(__defaults__=b"(K\x01t")):
        path = _pickle_file(tmp_path, payloads.PROTO2 + payloads.global_(module, attribute) + state + b".")
        with pytest.raises(InputError, match="cannot unpickle"):
            load_torch_file(path)


# ---------------------------------------------------------------------------------------------------------------------
# Tables that declare more rows than their bytes can hold.


def test_a_parquet_file_of_run_length_encoded_rows(tmp_path: Path):
    """32M boolean rewards in ~100 KB: every canonical column would take 256 MB. Refused from the metadata."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rle.parquet"
    pq.write_table(pa.table({"reward": np.zeros(1 << 25, dtype=bool)}), path, compression="zstd")
    assert path.stat().st_size < 1 << 20
    _expect_input_error(path, "rows per byte", max_bytes=16 * MIB)


@pytest.mark.parametrize("kind", ["feather", "arrow-stream"])
def test_an_arrow_file_of_null_rows(tmp_path: Path, kind: str):
    """A null column of 2**31 - 1 rows has no buffers: a few hundred bytes, then 16 GB per canonical column."""
    import pyarrow as pa
    import pyarrow.feather as feather

    rows = (1 << 31) - 1
    table = pa.table({"reward": pa.nulls(rows)})
    path = tmp_path / "nulls.arrow"
    if kind == "feather":
        feather.write_feather(table, path, compression="uncompressed", chunksize=rows)
    else:
        with pa.ipc.new_stream(path, table.schema) as writer:
            writer.write_table(table)
    assert path.stat().st_size < 4096
    _expect_input_error(path, "rows per byte", max_bytes=16 * MIB)
