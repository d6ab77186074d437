"""The restricted unpickler of ``torch.save`` files: nothing the file names is ever imported or called.

``torch.load`` with ``weights_only=False`` imports and calls whatever the
pickle names; with ``weights_only=True`` it is safe but runs a pure-Python
unpickler (about 8x slower). :class:`RestrictedUnpickler` keeps the C
unpickler (C speed) and replaces the two hooks a pickle can reach the outside
world through:

* ``find_class`` returns only objects of this module: a few rebuild
  functions (tensors, ``OrderedDict``, ``set``, protocol-2 ``bytes``) and,
  for every other name, an inert :class:`Placeholder` class that accepts any
  arguments, state or items and keeps none of them. The real object a name
  refers to (``os.system``, ``builtins.eval``, ``numpy...``) is never looked up.
* ``persistent_load`` accepts only torch's storage ids and reads the bytes
  of ``<archive>/data/<key>`` from the zip (:mod:`.torch_zip`); tensors are
  rebuilt from those bytes with ``frombuffer`` and ``as_strided`` after a
  bounds check.

One scan of the pickle's opcodes (:func:`.pickle_scan.check_opcodes`) refuses
what would make the C unpickler allocate gigabytes or hash without end, and
bounds how deeply its tuples can nest.

Tensors come back as ``torch.Tensor`` (``lazy_tensors=False``) or as
:class:`StoredTensor` records that read their bytes only when asked
(``.numpy()`` / ``.torch()``): a loader that needs two tensors out of ten
reads two, and torch is imported only when a torch tensor is asked for.
"""

from __future__ import annotations

import math
import pickle
import zipfile
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from ..._errors import InputError
from .pickle_scan import Malformed

_MAX_TENSOR_DIMS = 64
# Sizes, strides and offsets beyond this cannot describe real memory (and huge ints would make the checks slow).
_MAX_INDEX = 1 << 62
# A hostile pickle can name millions of distinct globals; past this many, they share one placeholder class.
_MAX_PLACEHOLDER_CLASSES = 256
_NAMES_IN_WARNING = 8
_MODULE_ALIASES = {"__builtin__": "builtins", "copy_reg": "copyreg"}


# ---------------------------------------------------------------------------------------------------------------------
# Skipped values: what a skimmed per-token list becomes (:func:`.pickle_scan.skim`).


class Skipped:
    """Per-token values (token ids, log-probs, masks) the reader did not build: the audit never reads them.

    It takes what the pickle may still do to the list it stands for (APPEND, APPENDS: nothing) and refuses what
    a list refuses (being hashed), so that no pickle unpickles differently for it; a pickle that fetches a cut
    list from the memo is read whole instead (:func:`.pickle_scan.skim`).
    """

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # unhashable, like lists

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def __repr__(self) -> str:
        return "<skipped per-token values>"

    def __reduce__(self) -> str:
        return "SKIPPED"


SKIPPED = Skipped()


def _skipped() -> Skipped:
    return SKIPPED


# Placeholders: what every global outside the allow-list becomes.


class Placeholder:
    """An inert stand-in for a class or function named by a dump that rollaudit does not rebuild.

    It takes part in every pickle protocol step (construction, ``__setstate__``,
    appends, item assignment, being called) and keeps nothing: no attribute,
    item or argument of the file survives in it.
    """

    __slots__ = ()
    global_name = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> Placeholder:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Placeholder:
        # A placeholder function called by REDUCE gives another inert value, never a call.
        return type(self)()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def add(self, item: Any) -> None:
        pass

    def __repr__(self) -> str:
        return f"<placeholder for {self.global_name}>"


class Record(Placeholder):
    """An object of a class whose fields a reader needs (Molt's ``Experience`` dataclass): the state the pickle
    gives it (its ``__dict__``: plain values, tensors, placeholders) is kept as ``fields``; nothing of the class is
    imported or run, and nothing else the pickle does to it is kept."""

    __slots__ = ("fields",)

    def __new__(cls, *args: Any, **kwargs: Any) -> Record:
        record = object.__new__(cls)
        record.fields = {}
        return record

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (__dict__, slots), as pickle writes a slotted object
            state = state[0]
        if not isinstance(state, dict):
            raise Malformed(f"the state of a {self.global_name} is not a dict of its fields")
        self.fields = state

    def __repr__(self) -> str:
        return f"<record of {self.global_name}>"


def describe_unknown(names: list[str], overflow: int = 0) -> str:
    """``placeholders for 2 unknown classes: numpy.core.multiarray._reconstruct, PIL.Image.Image``."""
    total = len(names) + overflow
    shown = ", ".join(names[:_NAMES_IN_WARNING])
    more = total - min(len(names), _NAMES_IN_WARNING)
    noun = "class" if total == 1 else "classes"
    return f"placeholders for {total} unknown {noun}: {shown}" + (f" and {more} more" if more else "")


def printable(text: str, limit: int = 100) -> str:
    """A name from the file, safe to print on one line."""
    clean = "".join(character if character.isprintable() else "?" for character in text[:limit])
    return clean + ("..." if len(text) > limit else "")


# ---------------------------------------------------------------------------------------------------------------------
# Storages and tensors.


# Storage types and storages are tuples: the BUILD opcode can change an object's ``__dict__`` or slots (even those
# of a frozen dataclass), and a storage whose size or item size a pickle rewrote after it was checked would let a
# tensor view reach past its bytes. A tuple has neither.


class _StorageType(NamedTuple):
    """What ``torch.IntStorage`` and friends become: a dtype description, nothing callable."""

    torch_name: str
    numpy_dtype: str | None
    itemsize: int


_STORAGE_TYPES = {
    "DoubleStorage": _StorageType("float64", "<f8", 8),
    "FloatStorage": _StorageType("float32", "<f4", 4),
    "HalfStorage": _StorageType("float16", "<f2", 2),
    "BFloat16Storage": _StorageType("bfloat16", None, 2),
    "LongStorage": _StorageType("int64", "<i8", 8),
    "IntStorage": _StorageType("int32", "<i4", 4),
    "ShortStorage": _StorageType("int16", "<i2", 2),
    "CharStorage": _StorageType("int8", "i1", 1),
    "ByteStorage": _StorageType("uint8", "u1", 1),
    "BoolStorage": _StorageType("bool", "?", 1),
    "ComplexFloatStorage": _StorageType("complex64", "<c8", 8),
    "ComplexDoubleStorage": _StorageType("complex128", "<c16", 16),
}


class Storage(NamedTuple):
    key: str
    kind: _StorageType
    numel: int
    member: zipfile.ZipInfo


class _TensorType:
    """What ``torch.Tensor`` becomes when a pickle names it (``_rebuild_from_type_v2``): an inert marker."""

    __slots__ = ()


_TENSOR_TYPE = _TensorType()


def _check_view(storage: Storage, offset: Any, size: Any, stride: Any) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """Validate a tensor view against its storage before anything is built from it."""
    if type(offset) is not int or not 0 <= offset <= _MAX_INDEX:
        raise Malformed(f"tensor storage offset {offset!r} is not a non-negative int")
    for name, values in (("size", size), ("stride", stride)):
        if not isinstance(values, (tuple, list)) or len(values) > _MAX_TENSOR_DIMS:
            raise Malformed(f"tensor {name} is not a tuple of at most {_MAX_TENSOR_DIMS} ints")
        if any(type(value) is not int or not 0 <= value <= _MAX_INDEX for value in values):
            raise Malformed(f"tensor {name} holds something other than non-negative ints below 2**62")
    if len(size) != len(stride):
        raise Malformed("tensor size and stride differ in length")
    if offset > storage.numel:
        raise Malformed(f"tensor offset {offset} is past its storage of {storage.numel} elements")
    described = math.prod(size)
    if described > storage.numel:
        # A stride-0 (expanded) view: a few bytes describing billions of elements that any copy would allocate.
        raise Malformed(f"tensor describes {described} elements, more than the {storage.numel} of its storage")
    if 0 not in size:
        last = offset + sum((extent - 1) * step for extent, step in zip(size, stride, strict=True))
        if last >= storage.numel:
            raise Malformed(f"tensor reaches element {last} of a storage of {storage.numel}")
    return offset, tuple(size), tuple(stride)


class StorageSource(Protocol):
    """What the unpickler reads tensors' bytes from: a ``torch.save`` archive (:class:`~.torch_zip.TorchArchive`)."""

    path: str

    def storage_member(self, key: str) -> zipfile.ZipInfo: ...

    def storage_bytes(self, storage: Storage) -> bytearray: ...


class StoredTensor:
    """A tensor of a dump, not read yet: dtype and shape now, the bytes on ``.numpy()`` or ``.torch()``.

    Only valid while its archive (a :class:`~.torch_zip.TorchArchive`) is open.
    """

    __slots__ = ("_archive", "_storage", "offset", "shape", "stride")

    def __init__(
        self,
        archive: StorageSource,
        storage: Storage,
        offset: int,
        shape: tuple[int, ...],
        stride: tuple[int, ...],
    ) -> None:
        self._archive = archive
        self._storage = storage
        self.offset = offset
        self.shape = shape
        self.stride = stride

    def __setstate__(self, state: Any) -> None:
        # BUILD on a rebuilt tensor would replace its checked shape and strides: a view past its bytes.
        raise Malformed("the pickle changes a tensor after rebuilding it")

    @property
    def dtype(self) -> str:
        """The torch dtype name (``float32``, ``int64``, ...)."""
        return self._storage.kind.torch_name

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def numpy(self) -> Any:
        """A read-only numpy view of the tensor (no torch import); bfloat16 has no numpy dtype."""
        import numpy as np

        kind = self._storage.kind
        if kind.numpy_dtype is None:
            raise InputError(f"a {kind.torch_name} tensor has no numpy dtype", file=self._archive.path)
        flat = np.frombuffer(self._archive.storage_bytes(self._storage), dtype=kind.numpy_dtype)
        strides = tuple(step * kind.itemsize for step in self.stride)
        view = np.lib.stride_tricks.as_strided(flat[self.offset :], self.shape, strides, writeable=False)
        return view

    def torch(self) -> Any:
        """A ``torch.Tensor`` sharing the bytes read from the zip."""
        return _torch_view(
            self._archive.storage_bytes(self._storage), self._storage, self.offset, self.shape, self.stride
        )

    def __repr__(self) -> str:
        return f"StoredTensor(dtype={self.dtype}, shape={self.shape})"


def _torch_view(buffer: bytearray, storage: Storage, offset: int, shape: tuple, stride: tuple) -> Any:
    import torch

    dtype = getattr(torch, storage.kind.torch_name)
    # Storages over a buffer are not resizable: BUILD's ``set_`` cannot regrow one past its checked bytes into
    # uninitialised memory. An empty storage gets a one-item buffer so that it is one of those too.
    flat = torch.frombuffer(buffer if len(buffer) else bytearray(storage.kind.itemsize), dtype=dtype)
    return torch.as_strided(flat[: len(buffer) // storage.kind.itemsize], shape, stride, offset)


# Protocol-2 pickles spell some builtin values as calls; these rebuild them without calling anything named.


def _ordered_dict(*args: Any, **kwargs: Any) -> dict:
    """``collections.OrderedDict``: a plain dict (items arrive by SETITEMS, or as one list of pairs)."""
    if args and isinstance(args[0], (list, tuple, dict)):
        try:
            return dict(args[0])
        except (TypeError, ValueError):
            return {}
    return {}


def _make_set(items: Any = ()) -> set | list:
    if not isinstance(items, (list, tuple)):
        return set()
    try:
        return set(items)
    except TypeError:  # unhashable members: keep them as a list rather than fail the audit
        return list(items)


def _make_frozenset(items: Any = ()) -> frozenset | list:
    made = _make_set(items)
    return frozenset(made) if isinstance(made, set) else made


def _encode(text: Any = "", encoding: Any = "latin1") -> bytes:
    """``_codecs.encode(text, "latin1")``: how protocol 2 writes ``bytes``."""
    if type(text) is not str or encoding not in ("latin1", "latin-1", "iso-8859-1"):
        raise Malformed("_codecs.encode used for something other than protocol-2 bytes")
    try:
        return text.encode("latin1")
    except UnicodeEncodeError:
        raise Malformed("protocol-2 bytes hold a character above 255") from None


def _make_bytearray(data: Any = b"", encoding: Any = None) -> bytearray:
    if type(data) is bytes and encoding is None:
        return bytearray(data)
    if type(data) is str:
        return bytearray(_encode(data, encoding or "latin1"))
    raise Malformed("bytearray rebuilt from something other than bytes")


def _rebuild_parameter(data: Any, *args: Any) -> Any:
    return data


# Rewards computed with numpy (np.mean, np.float64) are pickled as numpy scalars: decode the numeric ones.
_NUMPY_NUMERIC_CODES = frozenset({"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"})


class _NumpyDType:
    """What ``numpy.dtype("f8", ...)`` becomes: a numeric type code and byte order, no numpy object."""

    __slots__ = ("byteorder", "code")

    def __init__(self, code: str) -> None:
        self.code = code
        self.byteorder = "<"

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">"):
            self.byteorder = state[1]


def _numpy_dtype(code: Any = None, *args: Any) -> Any:
    if type(code) is str and code in _NUMPY_NUMERIC_CODES:
        return _NumpyDType(code)
    return Placeholder()  # object, string or structured dtypes: only arrays use them, and arrays are placeholders


def _numpy_scalar(dtype: Any = None, data: Any = None, *args: Any) -> Any:
    """``numpy.core.multiarray.scalar(dtype, raw bytes)``: the Python number it holds."""
    if not isinstance(dtype, _NumpyDType) or type(data) is not bytes:
        return Placeholder()
    import numpy as np

    kind = np.dtype(dtype.byteorder + dtype.code)
    if len(data) != kind.itemsize:
        raise Malformed(f"a numpy {dtype.code} scalar stored in {len(data)} bytes")
    return np.frombuffer(data, dtype=kind)[0].item()


class _Allowed:
    """What ``find_class`` gives for an allowed name: its rebuild function, callable and closed to BUILD.

    A bare function would take BUILD's state into its ``__dict__`` or ``__defaults__``, changes that would outlive
    the file and reach the next one read in this process.
    """

    __slots__ = ("_function",)
    _function: Callable[..., Any]

    def __init__(self, function: Callable[..., Any]) -> None:
        object.__setattr__(self, "_function", function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._function(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        raise Malformed("the pickle sets an attribute of a rebuild function")

    def __setstate__(self, state: Any) -> None:
        raise Malformed("the pickle sets the state of a rebuild function")

    def __repr__(self) -> str:
        return f"<rebuild {getattr(self._function, '__name__', '?')}>"


# ---------------------------------------------------------------------------------------------------------------------
# The unpickler.


class RestrictedUnpickler(pickle.Unpickler):
    """The C unpickler with ``find_class`` and ``persistent_load`` replaced; C speed is kept."""

    def __init__(
        self, file: Any, archive: StorageSource, lazy_tensors: bool, records: frozenset[str] = frozenset()
    ) -> None:
        super().__init__(file, encoding="utf-8", errors="replace")
        # Classes whose objects keep their pickled fields (:class:`Record`), by global name.
        self._records: dict[str, type[Record]] = {
            name: type("Record", (Record,), {"__slots__": (), "global_name": printable(name)}) for name in records
        }
        self._archive = archive
        self._lazy = lazy_tensors
        self._storages: dict[str, Storage] = {}
        self._placeholders: dict[str, type[Placeholder]] = {}
        self.unknown_globals: list[str] = []
        self.unknown_overflow = 0
        functions: dict[str, Any] = {
            "torch._utils._rebuild_tensor_v2": self._rebuild_tensor_v2,
            "torch._utils._rebuild_tensor": self._rebuild_tensor,
            "torch._utils._rebuild_parameter": _rebuild_parameter,
            "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
            "torch._tensor._rebuild_from_type_v2": self._rebuild_from_type_v2,
            "rollaudit.skipped": _skipped,
            "collections.OrderedDict": _ordered_dict,
            "builtins.set": _make_set,
            "builtins.frozenset": _make_frozenset,
            "builtins.bytearray": _make_bytearray,
            "_codecs.encode": _encode,
            "numpy.dtype": _numpy_dtype,
            "numpy.core.multiarray.scalar": _numpy_scalar,
            "numpy._core.multiarray.scalar": _numpy_scalar,
        }
        self._allowed: dict[str, Any] = {name: _Allowed(function) for name, function in functions.items()}
        for name in ("torch.Tensor", "torch._tensor.Tensor", "torch.nn.parameter.Parameter"):
            self._allowed[name] = _TENSOR_TYPE

    def release(self) -> None:
        """Drop the memo and the bound rebuild methods: they form a cycle that would keep every object
        of the pickle alive until the cyclic garbage collector runs, so memory would grow file after file."""
        self.memo.clear()
        self._allowed.clear()
        self._records.clear()
        self._storages.clear()

    def find_class(self, module: str, name: str) -> Any:
        module = _MODULE_ALIASES.get(module, module)
        full_name = f"{module}.{name}"
        allowed = self._allowed.get(full_name)
        if allowed is not None:
            return allowed
        if module == "torch" and name in _STORAGE_TYPES:
            return _STORAGE_TYPES[name]
        record = self._records.get(full_name)
        return record if record is not None else self._placeholder(full_name)

    def _placeholder(self, full_name: str) -> type[Placeholder]:
        known = self._placeholders.get(full_name)
        if known is not None:
            return known
        if len(self._placeholders) >= _MAX_PLACEHOLDER_CLASSES:
            self.unknown_overflow += 1
            return Placeholder
        shown = printable(full_name)
        made = type("Placeholder", (Placeholder,), {"__slots__": (), "global_name": shown})
        self._placeholders[full_name] = made
        self.unknown_globals.append(shown)
        return made

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is not tuple or len(pid) != 5 or pid[0] != "storage":
            raise Malformed("a persistent id that is not one of torch's storages")
        _, kind, key, _location, numel = pid
        if type(key) is not str or not key.isalnum() or len(key) > 64:
            raise Malformed("a storage key that is not a short alphanumeric name")
        if type(numel) is not int or not 0 <= numel <= _MAX_INDEX:
            raise Malformed(f"storage {key} has a size that is not a non-negative int")
        if isinstance(kind, type) and issubclass(kind, Placeholder):
            return kind()  # a storage type rollaudit does not know: the tensor becomes a placeholder
        if not isinstance(kind, _StorageType):
            raise Malformed(f"storage {key} has no storage type")
        known = self._storages.get(key)
        if known is not None:
            if known.kind != kind or known.numel != numel:
                raise Malformed(f"storage {key} is described two different ways")
            return known
        member = self._archive.storage_member(key)
        if member.file_size != numel * kind.itemsize:
            raise Malformed(
                f"storage {key} declares {numel} {kind.torch_name} values but its member holds {member.file_size} bytes"
            )
        storage = Storage(key, kind, numel, member)
        self._storages[key] = storage
        return storage

    def _tensor(self, storage: Any, offset: Any, size: Any, stride: Any) -> Any:
        if isinstance(storage, Placeholder):
            return storage
        if not isinstance(storage, Storage):
            raise Malformed("a tensor rebuilt from something other than a storage")
        offset, size, stride = _check_view(storage, offset, size, stride)
        if self._lazy:
            return StoredTensor(self._archive, storage, offset, size, stride)
        return _torch_view(self._archive.storage_bytes(storage), storage, offset, size, stride)

    def _rebuild_tensor_v2(
        self, storage: Any = None, offset: Any = 0, size: Any = (), stride: Any = (), *_ignored: Any
    ) -> Any:
        # requires_grad, backward hooks and metadata are training-time state: irrelevant to an audit.
        return self._tensor(storage, offset, size, stride)

    def _rebuild_tensor(self, storage: Any = None, offset: Any = 0, size: Any = (), stride: Any = ()) -> Any:
        return self._tensor(storage, offset, size, stride)

    def _rebuild_from_type_v2(
        self, function: Any = None, new_type: Any = None, args: Any = (), state: Any = None
    ) -> Any:
        rebuilds = [self._allowed.get(f"torch._utils._rebuild_tensor{suffix}") for suffix in ("_v2", "")]
        if not isinstance(function, _Allowed) or function not in rebuilds or not isinstance(args, tuple):
            return Placeholder()
        return function(*args)


class WholeBuffer:
    """Pickle bytes already in memory, as a file the C unpickler reads at C speed.

    ``peek`` hands over everything that is left, which the unpickler adopts as its
    input buffer: no Python call per opcode and no copy.
    """

    def __init__(self, data: bytes | bytearray) -> None:
        self._view = memoryview(data)
        self._position = 0

    def peek(self, size: int = 0) -> memoryview:
        return self._view[self._position :]

    def read(self, size: int = -1) -> memoryview:
        stop = len(self._view) if size is None or size < 0 else min(len(self._view), self._position + size)
        chunk = self._view[self._position : stop]
        self._position = stop
        return chunk

    def readinto(self, buffer: Any) -> int:
        chunk = self.read(len(buffer))
        memoryview(buffer)[: len(chunk)] = chunk
        return len(chunk)

    def readline(self) -> bytes:
        rest = self._view[self._position :]
        newline = bytes(rest[: 1 << 16]).find(b"\n")
        stop = len(rest) if newline < 0 else newline + 1
        self._position += stop
        return bytes(rest[:stop])

    def close(self) -> None:
        # The unpickler may still hold a view of the data until it is freed; the bytes go with the last reference.
        self._position = len(self._view)
