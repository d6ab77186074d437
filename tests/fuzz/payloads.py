"""Pickle bytes written by hand: dump skeletons and hostile payloads that create a marker file when run.

``pickle.dumps`` cannot write most of these (a call of ``os.system`` with
chosen arguments, a ``functools.partial`` carrying ``weights_only=False``);
they are spelled opcode by opcode. Each payload pushes exactly one value, so
it can stand wherever a value goes: a sample field, the whole pickle, the
reward.
"""

from __future__ import annotations

import struct
from pathlib import Path

PROTO2 = b"\x80\x02"
PROTO4 = b"\x80\x04"
STOP = b"."
MARK = b"("
TUPLE = b"t"
REDUCE = b"R"
EMPTY_DICT = b"}"
EMPTY_LIST = b"]"
SETITEM = b"s"
SETITEMS = b"u"
APPEND = b"a"
APPENDS = b"e"
BUILD = b"b"
NEWOBJ = b"\x81"
NEWFALSE = b"\x89"
NEWOBJ_EX = b"\x92"


def global_(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def text(value: str) -> bytes:
    data = value.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(data)) + data


def binbytes(value: bytes) -> bytes:
    return b"B" + struct.pack("<I", len(value)) + value


def small_int(value: int) -> bytes:
    return b"K" + bytes([value])


def float_(value: float) -> bytes:
    return b"G" + struct.pack(">d", value)


def call(function: bytes, *arguments: bytes) -> bytes:
    return function + MARK + b"".join(arguments) + TUPLE + REDUCE


def list_of(items: list[bytes]) -> bytes:
    """A list of the given pickle fragments (each pushing one value)."""
    return EMPTY_LIST + (MARK + b"".join(items) + APPENDS if items else b"")


def text_list(*values: str) -> bytes:
    return list_of([text(value) for value in values])


def sample(**fields: bytes) -> bytes:
    """A sample dict whose values are the given pickle fragments (each pushing one value)."""
    return EMPTY_DICT + MARK + b"".join(text(name) + value for name, value in fields.items()) + SETITEMS


def rollout_dump(samples: list[bytes], rollout_id: bytes = small_int(0)) -> bytes:
    """slime's ``{"rollout_id": ..., "samples": [...]}`` around sample fragments."""
    fields = text("rollout_id") + rollout_id + text("samples") + list_of(samples)
    return PROTO2 + EMPTY_DICT + MARK + fields + SETITEMS + STOP


def train_dump(samples: list[bytes], rollout_id: bytes = small_int(0)) -> bytes:
    """slime's train dump, ``{"format_version": 2, "rollout_id": ..., "samples": [...]}``, around sample fragments."""
    version = text("format_version") + small_int(2)
    fields = version + text("rollout_id") + rollout_id + text("samples") + list_of(samples)
    return PROTO2 + EMPTY_DICT + MARK + fields + SETITEMS + STOP


def plain_sample(number: int, reward: float) -> bytes:
    return sample(reward=float_(reward), group_index=small_int(number // 2), index=small_int(number))


def dump_with(field: str, value: bytes) -> bytes:
    """A four-sample rollout dump (two prompts) whose first sample's ``field`` is ``value``."""
    first = {"reward": float_(1.0), "group_index": small_int(0), "index": small_int(0), field: value}
    return rollout_dump([sample(**first)] + [plain_sample(number, float(number % 2)) for number in range(1, 4)])


def _system(marker: Path) -> str:
    return f"touch {marker}"


def unsafe_pickle(marker: Path) -> bytes:
    """A plain pickle that runs ``os.system("touch marker")`` when loaded the unsafe way."""
    return PROTO2 + call(global_("os", "system"), text(_system(marker))) + STOP


def unsafe_torch_zip(marker: Path, write_torch_zip, path: Path) -> bytes:
    """A torch.save zip whose data.pkl runs ``os.system``: what ``torch.load(weights_only=False)`` would run."""
    return write_torch_zip(path, unsafe_pickle(marker)).read_bytes()


def _partial(function: bytes, **keywords: bytes) -> bytes:
    """``functools.partial(function, **keywords)`` built by NEWOBJ_EX (a class, so keywords can be passed)."""
    items = b"".join(text(name) + value for name, value in keywords.items())
    return global_("functools", "partial") + MARK + function + TUPLE + EMPTY_DICT + MARK + items + SETITEMS + NEWOBJ_EX


DANGEROUS_GLOBALS = (
    "os.system",
    "posix.system",
    "subprocess.Popen",
    "subprocess.run",
    "builtins.exec",
    "builtins.eval",
    "builtins.getattr",
    "builtins.__import__",
    "importlib.import_module",
    "torch.load",
    "torch.serialization.load",
    "torch._C.PyTorchFileWriter",
    "torch.storage._load_from_bytes",
    "numpy.load",
    "pickle.loads",
    "shutil.rmtree",
)


def payloads(marker: Path, workspace: Path, write_torch_zip) -> dict[str, bytes]:
    """One payload per dangerous global: pickle fragments that create ``marker`` (``shutil.rmtree``: delete
    ``workspace/canary``) when unpickled by ``pickle.loads``. Auxiliary files go into ``workspace``."""
    command = _system(marker)
    workspace.mkdir(parents=True, exist_ok=True)
    torch_file = workspace / "inner.pt"
    zip_bytes = unsafe_torch_zip(marker, write_torch_zip, torch_file)
    plain_file = workspace / "inner.pkl"
    plain_file.write_bytes(unsafe_pickle(marker))
    (workspace / "canary").mkdir(exist_ok=True)
    (workspace / "canary" / "keep").write_text("keep")

    def via_getattr(module_value: bytes, name: str, *arguments: bytes) -> bytes:
        return call(call(global_("builtins", "getattr"), module_value, text(name)), *arguments)

    made = {
        "os.system": call(global_("os", "system"), text(command)),
        "posix.system": call(global_("posix", "system"), text(command)),
        "subprocess.Popen": call(global_("subprocess", "Popen"), text_list("touch", str(marker))),
        "subprocess.run": call(global_("subprocess", "run"), text_list("touch", str(marker))),
        "builtins.exec": call(global_("builtins", "exec"), text(f"import os; os.system({command!r})")),
        "builtins.eval": call(global_("builtins", "eval"), text(f"__import__('os').system({command!r})")),
        "builtins.getattr": via_getattr(call(global_("builtins", "__import__"), text("os")), "system", text(command)),
        "builtins.__import__": via_getattr(
            call(global_("builtins", "__import__"), text("subprocess")), "call", text_list("touch", str(marker))
        ),
        "importlib.import_module": via_getattr(
            call(global_("importlib", "import_module"), text("os")), "system", text(command)
        ),
        "torch.load": call(_partial(global_("torch", "load"), weights_only=NEWFALSE), text(str(torch_file))),
        "torch.serialization.load": call(
            _partial(global_("torch.serialization", "load"), weights_only=NEWFALSE), text(str(torch_file))
        ),
        "torch._C.PyTorchFileWriter": call(global_("torch._C", "PyTorchFileWriter"), text(str(marker))),
        "torch.storage._load_from_bytes": call(global_("torch.storage", "_load_from_bytes"), binbytes(zip_bytes)),
        "numpy.load": call(global_("numpy", "load"), text(str(plain_file)), b"N", b"\x88"),
        "pickle.loads": call(global_("pickle", "loads"), binbytes(unsafe_pickle(marker))),
        "shutil.rmtree": call(global_("shutil", "rmtree"), text(str(workspace / "canary"))),
    }
    assert tuple(made) == DANGEROUS_GLOBALS
    return made


# Torch internals other than tensor rebuilding: never looked up, whatever they would do.
TORCH_INTERNALS = (
    ("torch._utils", "_rebuild_device_tensor_from_numpy"),
    ("torch._utils", "_rebuild_wrapper_subclass"),
    ("torch._utils", "_rebuild_meta_tensor_no_storage"),
    ("torch._utils", "_rebuild_sparse_tensor"),
    ("torch._tensor", "_rebuild_from_type"),
    ("torch.serialization", "_get_restore_location"),
    ("torch.jit._script", "RecursiveScriptModule"),
    ("torch._C", "_set_default_dtype"),
    ("torch._C", "_jit_set_profiling_mode"),
    ("torch", "set_default_dtype"),
    ("torch._ops", "ops"),
    ("torch.nn.modules.module", "Module"),
)
