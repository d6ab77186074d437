"""The safe torch.save reader: faithful on real files, inert on hostile ones, InputError on damaged ones."""

from __future__ import annotations

import collections
import importlib.util
import pickle
import random
import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import rollaudit
from rollaudit import InputError, RollauditWarning
from rollaudit._loaders.torchsave.torch_zip import TorchArchive
from rollaudit._loaders.torchsave.unpickle import Placeholder, StoredTensor
from tests.fuzz.payloads import (
    APPENDS,
    BUILD,
    EMPTY_DICT,
    EMPTY_LIST,
    MARK,
    NEWOBJ,
    PROTO2,
    REDUCE,
    STOP,
    TUPLE,
    call,
    float_,
    global_,
    rollout_dump,
    sample,
    small_int,
    text,
    text_list,
)
from tests.torch_files import load_torch_file

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sample_dumps_generate", ROOT / "sample_dumps" / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)


def dump_pickle(metadata: bytes) -> bytes:
    """A one-sample slime rollout dump whose sample's ``metadata`` is ``metadata`` (pickle bytes of one value)."""
    fields = {"reward": float_(1.0), "group_index": small_int(0), "index": small_int(0), "metadata": metadata}
    return rollout_dump([sample(**fields)])


def attacks(marker: Path) -> dict[str, bytes]:
    """Payloads that create ``marker`` when a pickle is loaded the unsafe way."""
    command = f"touch {marker}"
    import_os = call(global_("importlib", "import_module"), text("os"))
    return {
        "os.system": call(global_("os", "system"), text(command)),
        "posix.system": call(global_("posix", "system"), text(command)),
        "builtins.eval": call(global_("builtins", "eval"), text(f"__import__('os').system({command!r})")),
        "__builtin__.eval": call(global_("__builtin__", "eval"), text(f"__import__('os').system({command!r})")),
        "builtins.exec": call(global_("builtins", "exec"), text(f"import os; os.system({command!r})")),
        "subprocess.Popen": call(global_("subprocess", "Popen"), text_list("touch", str(marker))),
        "importlib.import_module + getattr": call(
            call(global_("builtins", "getattr"), import_os, text("system")), text(command)
        ),
        "builtins.__import__": call(
            call(global_("builtins", "getattr"), call(global_("builtins", "__import__"), text("os")), text("system")),
            text(command),
        ),
        "stack global (protocol 4)": text("os") + text("system") + b"\x93" + MARK + text(command) + TUPLE + REDUCE,
        "INST opcode": MARK + text(command) + b"ios\nsystem\n",
        "OBJ opcode": MARK + global_("os", "system") + text(command) + b"o",
        "NEWOBJ + BUILD": global_("os", "system") + MARK + text(command) + TUPLE + NEWOBJ + EMPTY_DICT + BUILD,
        "nested pickle.loads": call(
            global_("pickle", "loads"),
            call(global_("_codecs", "encode"), text(pickle.dumps(None, protocol=0).decode("latin1")), text("latin1")),
        ),
        "torch.load": call(global_("torch", "load"), text(str(marker))),
    }


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "marker"


# ---------------------------------------------------------------------------------------------------------------------
# Faithful on what torch.save writes.


def test_the_unpickler_is_the_c_one():
    from rollaudit._loaders.torchsave.unpickle import RestrictedUnpickler as _RestrictedUnpickler

    assert pickle.Unpickler.__module__ == "_pickle"
    assert issubclass(_RestrictedUnpickler, pickle.Unpickler)


def test_tensors_and_builtin_values_round_trip(tmp_path: Path):
    base = torch.arange(24, dtype=torch.int64)
    value = {
        "int64": base,
        "int32 slice": base.to(torch.int32)[5:9],
        "float32 transposed": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
        "float16": torch.tensor([1.5, -2.0], dtype=torch.float16),
        "bfloat16": torch.tensor([0.5, 3.0], dtype=torch.bfloat16),
        "float64": torch.tensor([1e300]),
        "bool": torch.tensor([True, False]),
        "uint8": torch.tensor([0, 255], dtype=torch.uint8),
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 3),
        "shared view": base[10:12],
        "bytes": b"\x00\xff raw",
        "set": {1, 2, 3},
        "frozenset": frozenset({"a"}),
        "ordered": collections.OrderedDict(b=1, a=2),
        "nested": [(1, 2.5, None, True), {"deep": ["x"]}],
    }
    torch.save(value, tmp_path / "round.pt")
    loaded = load_torch_file(tmp_path / "round.pt")
    assert loaded.keys() == value.keys()
    for key, expected in value.items():
        if isinstance(expected, torch.Tensor):
            assert loaded[key].dtype == expected.dtype and torch.equal(loaded[key], expected), key
        else:
            assert loaded[key] == expected, key


def test_lazy_tensors_read_on_demand(tmp_path: Path):
    torch.save(
        {"a": torch.arange(10, dtype=torch.int32)[3:6], "b": torch.ones(2, dtype=torch.bfloat16)}, tmp_path / "x.pt"
    )
    with TorchArchive(tmp_path / "x.pt") as archive:
        value = archive.unpickle(lazy_tensors=True)
        assert isinstance(value["a"], StoredTensor) and value["a"].dtype == "int32" and value["a"].shape == (3,)
        assert value["a"].numpy().tolist() == [3, 4, 5]
        assert torch.equal(value["a"].torch(), torch.tensor([3, 4, 5], dtype=torch.int32))
        assert torch.equal(value["b"].torch(), torch.ones(2, dtype=torch.bfloat16))
        with pytest.raises(InputError, match="no numpy dtype"):
            value["b"].numpy()
    with pytest.raises(InputError, match="closed"):
        value["a"].numpy()


def test_big_endian_storages_are_swapped(tmp_path: Path):
    pickled = (
        PROTO2
        + call(
            global_("torch._utils", "_rebuild_tensor_v2"),
            MARK
            + text("storage")
            + global_("torch", "IntStorage")
            + text("0")
            + text("cpu")
            + small_int(2)
            + TUPLE
            + b"Q",
            small_int(0),
            small_int(2) + b"\x85",
            small_int(1) + b"\x85",
            b"\x89",
            call(global_("collections", "OrderedDict")),
        )
        + STOP
    )
    path = generate.write_torch_zip(tmp_path / "big.pt", pickled, {"0": struct.pack(">2i", 7, -3)}, byteorder=b"big")
    assert load_torch_file(path).tolist() == [7, -3]


# ---------------------------------------------------------------------------------------------------------------------
# Inert on hostile files: nothing named by the file runs.


def test_the_payloads_are_live(marker: Path):
    """Control: the unsafe loader runs the payload (so the tests below would notice if ours did)."""
    pickle.loads(dump_pickle(attacks(marker)["os.system"]))
    assert marker.exists()


@pytest.mark.parametrize("attack", list(attacks(Path("/nonexistent"))))
def test_hostile_globals_never_run(tmp_path: Path, marker: Path, attack: str):
    path = generate.write_torch_zip(tmp_path / "evil.pt", dump_pickle(attacks(marker)[attack]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = load_torch_file(path)
        except InputError as error:
            assert "\n" not in str(error)
        else:
            metadata = value["samples"][0]["metadata"]
            assert metadata is None or isinstance(metadata, (Placeholder, bytes, tuple, list))
            assert [str(warning.message) for warning in caught if "placeholders" in str(warning.message)]
    assert not marker.exists()


@pytest.mark.parametrize("attack", ["os.system", "subprocess.Popen", "importlib.import_module + getattr"])
def test_load_neutralises_hostile_metadata_and_keeps_the_audit_columns(tmp_path: Path, marker: Path, attack: str):
    path = generate.write_torch_zip(tmp_path / "evil.pt", dump_pickle(attacks(marker)[attack]))
    with pytest.warns(RollauditWarning, match="placeholders for") as caught:
        table = rollaudit.load(path)
    assert not marker.exists()
    assert table.column("reward").to_pylist() == [1.0]
    assert len([warning for warning in caught if "placeholders" in str(warning.message)]) == 1


class Unknown:
    def __init__(self) -> None:
        self.value = 1


class UnknownList(list):
    pass


class UnknownDict(dict):
    pass


class UnknownSet(set):
    pass


class UnknownWithState:
    def __reduce__(self):
        return (UnknownWithState, (1, 2), {"state": 3}, iter([4, 5]), iter([(6, 7)]))

    def __init__(self, *args):
        pass


@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
def test_placeholders_take_every_protocol_step(tmp_path: Path, protocol: int):
    value = {
        "plain": Unknown(),
        "list": UnknownList([1, 2]),
        "dict": UnknownDict(a=1),
        "set": UnknownSet({1}),
        "reduce": UnknownWithState(),
        "array": np.arange(3),
        "kept": [1, 2.5, "x"],
    }
    path = generate.write_torch_zip(tmp_path / "p.pt", pickle.dumps(value, protocol=protocol))
    unknown = r"placeholders for \d+ unknown classes: .*tests\.loaders\.test_unpickle\.Unknown"
    with pytest.warns(RollauditWarning, match=unknown):
        loaded = load_torch_file(path)
    for key in ("plain", "list", "dict", "set", "reduce", "array"):
        assert isinstance(loaded[key], Placeholder), key
    assert loaded["kept"] == [1, 2.5, "x"]


def test_a_module_that_does_not_exist_is_no_error(tmp_path: Path):
    pickled = PROTO2 + call(global_("no_such_module_xyz", "Thing"), small_int(1)) + STOP
    path = generate.write_torch_zip(tmp_path / "p.pt", pickled)
    with pytest.warns(RollauditWarning, match="placeholders for 1 unknown class: no_such_module_xyz.Thing"):
        assert isinstance(load_torch_file(path), Placeholder)


def test_many_unknown_globals_are_capped(tmp_path: Path):
    items = b"".join(call(global_(f"module{number}", "Thing")) for number in range(400))
    path = generate.write_torch_zip(tmp_path / "p.pt", PROTO2 + EMPTY_LIST + MARK + items + APPENDS + STOP)
    with pytest.warns(RollauditWarning, match="placeholders for 400 unknown classes: .* and 392 more"):
        assert len(load_torch_file(path)) == 400


# ---------------------------------------------------------------------------------------------------------------------
# Damaged files: one InputError line.


def _storage_tensor_pickle(key: str = "0", numel: int = 2, offset: int = 0, size: int = 2) -> bytes:
    return (
        PROTO2
        + call(
            global_("torch._utils", "_rebuild_tensor_v2"),
            MARK
            + text("storage")
            + global_("torch", "IntStorage")
            + text(key)
            + text("cpu")
            + small_int(numel)
            + TUPLE
            + b"Q",
            small_int(offset),
            small_int(size) + b"\x85",
            small_int(1) + b"\x85",
        )
        + STOP
    )


def _valid(tmp_path: Path) -> Path:
    return generate.save_rollout_dump(tmp_path / "valid.pt", 0, generate.spec_4_3_4_step())


def _patch_central_size(path: Path, member_suffix: str, size: int) -> None:
    """Rewrite one member's declared sizes in the zip's central directory."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        name = next(info.filename for info in archive.infolist() if info.filename.endswith(member_suffix))
    entry = data.find(b"PK\x01\x02")
    while entry != -1:
        name_length = struct.unpack_from("<H", data, entry + 28)[0]
        if data[entry + 46 : entry + 46 + name_length].decode() == name:
            struct.pack_into("<II", data, entry + 20, size, size)
            break
        entry = data.find(b"PK\x01\x02", entry + 4)
    path.write_bytes(bytes(data))


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    valid = _valid(tmp_path).read_bytes()
    files: dict[str, tuple[Path, str]] = {}

    def put(name: str, data: bytes, match: str) -> None:
        path = tmp_path / f"{name}.pt"
        path.write_bytes(data)
        files[name] = (path, match)

    put("empty", b"", "not a zip file")
    put("text", b"hello, not a dump\n", "not a zip file")
    put("legacy", pickle.dumps({"a": 1}, protocol=2), "legacy")
    put("truncated", valid[: len(valid) // 2], "truncated or damaged zip")
    put("no central directory", valid[:-22], "truncated or damaged zip")
    zipped = tmp_path / "plain.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("notes.txt", "hi")
    put("zip without pickle", zipped.read_bytes(), "without a data.pkl")
    garbage = generate.write_torch_zip(tmp_path / "g.tmp", b"this is no pickle")
    put("garbage pickle", garbage.read_bytes(), "cannot unpickle")
    cut = generate.write_torch_zip(tmp_path / "c.tmp", pickle.dumps({"samples": [1, 2, 3]}, protocol=2)[:-5])
    put("truncated pickle", cut.read_bytes(), "cannot unpickle")
    missing = generate.write_torch_zip(tmp_path / "m.tmp", _storage_tensor_pickle())
    put("missing storage", missing.read_bytes(), "no member data/0")
    short = generate.write_torch_zip(tmp_path / "s.tmp", _storage_tensor_pickle(), {"0": b"\x00" * 4})
    put("storage size", short.read_bytes(), "holds 4 bytes")
    outside = generate.write_torch_zip(tmp_path / "o.tmp", _storage_tensor_pickle(offset=1), {"0": b"\x00" * 8})
    put("view out of bounds", outside.read_bytes(), "reaches element")
    traversal = generate.write_torch_zip(tmp_path / "t.tmp", _storage_tensor_pickle(key="../0"), {"0": b"\x00" * 8})
    put("storage key traversal", traversal.read_bytes(), "alphanumeric")
    pid = generate.write_torch_zip(tmp_path / "p.tmp", PROTO2 + text("x") + b"Q" + STOP)
    put("foreign persistent id", pid.read_bytes(), "persistent id")
    ext = generate.write_torch_zip(tmp_path / "e.tmp", PROTO2 + b"\x82\x01" + STOP)
    put("extension code", ext.read_bytes(), "cannot unpickle")
    codecs = generate.write_torch_zip(
        tmp_path / "k.tmp", PROTO2 + call(global_("_codecs", "encode"), small_int(1)) + STOP
    )
    put("codecs abuse", codecs.read_bytes(), "_codecs.encode")
    memo_bomb = generate.write_torch_zip(tmp_path / "b.tmp", b"]replace.")
    put("memo bomb (LONG_BINPUT)", memo_bomb.read_bytes(), "larger than the data justifies")
    text_memo_bomb = generate.write_torch_zip(tmp_path / "b2.tmp", PROTO2 + EMPTY_LIST + b"p999999999\n" + STOP)
    put("memo bomb (PUT)", text_memo_bomb.read_bytes(), "larger than the data justifies")
    bytes_bomb = generate.write_torch_zip(tmp_path / "b3.tmp", b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b"ab.")
    put("declared length (BINBYTES8)", bytes_bomb.read_bytes(), "declares more bytes")
    absurd = _valid(tmp_path)
    _patch_central_size(absurd, "data.pkl", 1 << 31)
    put("absurd member size", absurd.read_bytes(), "past the end of the file")
    return files


def test_damaged_files_give_one_input_error_line(tmp_path: Path):
    for name, (path, match) in _bad_files(tmp_path).items():
        with pytest.raises(InputError) as caught:
            load_torch_file(path)
        message = str(caught.value)
        assert match in message, (name, message)
        assert "\n" not in message and str(path) in message, name
        assert caught.value.__cause__ is None, name


def test_pickle_size_limit(tmp_path: Path):
    with pytest.raises(InputError, match=r"data\.pkl declares"):
        TorchArchive(_valid(tmp_path), max_pickle_bytes=100)


def test_deflated_storages_are_read_and_a_deflated_pickle_is_refused(tmp_path: Path):
    # torch.save stores every member; a re-zipped file may deflate its storages (inflated within a budget), but a
    # deflated data.pkl would be inflated whole before any opcode check: refused in one line.
    valid = _valid(tmp_path)
    storages_deflated, all_deflated = tmp_path / "storages.pt", tmp_path / "deflated.pt"
    with zipfile.ZipFile(valid) as source:
        with zipfile.ZipFile(storages_deflated, "w") as out:
            for info in source.infolist():
                method = zipfile.ZIP_STORED if info.filename.endswith("data.pkl") else zipfile.ZIP_DEFLATED
                out.writestr(info.filename, source.read(info.filename), compress_type=method)
        with zipfile.ZipFile(all_deflated, "w", compression=zipfile.ZIP_DEFLATED) as out:
            for info in source.infolist():
                out.writestr(info.filename, source.read(info.filename))
    assert load_torch_file(storages_deflated)["samples"][3]["reward"] == 3.0
    with pytest.raises(InputError, match=r"data\.pkl is compressed"):
        load_torch_file(all_deflated)


def test_random_corruption_never_escapes_as_another_exception(tmp_path: Path):
    """A smoke fuzz (tests/fuzz fuzzes properly): flipped, dropped and truncated bytes end in InputError or a value."""
    torch.save({"rollout_id": 1, "samples": generate.spec_4_3_4_step()[:3], "t": torch.arange(4)}, tmp_path / "f.pt")
    original = (tmp_path / "f.pt").read_bytes()
    with zipfile.ZipFile(tmp_path / "f.pt") as archive:
        pickle_member = next(info for info in archive.infolist() if info.filename.endswith("data.pkl"))
    start = pickle_member.header_offset + 30 + len(pickle_member.filename)
    rng = random.Random(3)
    path = tmp_path / "mutant.pt"
    for _ in range(300):
        data = bytearray(original)
        choice = rng.random()
        if choice < 0.7:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(start, start + pickle_member.file_size)] = rng.randrange(256)
        elif choice < 0.9:
            data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            data = data[: rng.randrange(len(data))]
        path.write_bytes(bytes(data))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                load_torch_file(path)
            except InputError as error:
                assert "\n" not in str(error)
