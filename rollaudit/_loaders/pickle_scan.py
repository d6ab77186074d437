"""The opcode scan of a dump's pickle: what the C unpickler would allocate and hash, bounded before it runs.

CPython's C unpickler runs a pickle's opcodes with no budget of its own. A few hostile bytes can make it:

* allocate: the memo table is sized from a PUT or LONG_BINPUT index and zero-filled (five bytes ask for up to
  64 GB), and counted opcodes (BINBYTES8, BINUNICODE8, ...) preallocate their declared length;
* hash without end: a dict key or set member is hashed in C, and a tuple hashes every element, so 64 tuples each
  holding the previous one twice (``t = (t, t)`` through the memo) cost 2**64 steps: a hang no signal stops;
  integer keys built to share one hash residue (mod 2**61 - 1) turn each insertion into a scan of the others;
* overflow the C stack: hashing recurses once per level of tuple nesting.

:func:`check_opcodes` walks the opcodes once, simulating the unpickler's stack just enough to know each tuple's
*expanded size* (what hashing it costs: one plus its elements', through any sharing), and refuses the pickle
when a memo index runs ahead of the data, a counted length runs past it, one tuple expands past
:data:`MAX_TUPLE_EXPANSION`, the dict keys and set members it would hash add up to more than
:data:`HASH_BUDGET_PER_BYTE` per byte, or more than :data:`MAX_SHARED_RESIDUE` big integers share a residue.
Runs of fixed-size number opcodes (the bulk of a dump: token ids and log-probs) are skipped by one possessive
regular expression in C; everything else is one Python step. The count of tuple opcodes it returns bounds how
deeply tuples nest, which :func:`call_with_stack` turns into a thread with a deep enough C stack.
"""

from __future__ import annotations

import pickletools
import re
import struct
import threading
from typing import Any

MAX_TUPLE_EXPANSION = 1 << 20
"""The largest expanded size of one tuple (a tensor's rebuild arguments: about ten)."""
HASH_BUDGET_PER_BYTE = 16
"""Elements hashed as dict keys and set members, per byte of pickle (an honest key costs its own bytes)."""
MAX_SHARED_RESIDUE = 64
"""Big integers sharing one hash residue mod 2**61 - 1 (honest seeds and timestamps do not collide)."""
_HASH_BUDGET_BASE = 1 << 20
_HASH_MODULUS = (1 << 61) - 1


class Malformed(ValueError):
    """A pickle that does not follow torch's own layout; becomes an InputError at the load boundary."""


# ---------------------------------------------------------------------------------------------------------------------
# The opcode table: each opcode's argument reader and stack effect.

_OPCODES = {op.code.encode("latin1")[0]: op for op in pickletools.opcodes}
# Opcodes that push one value that is no tuple, with a fixed-size argument (or none): runs of them are skipped.
_PLAIN_PUSHES = ("BININT", "BININT1", "BININT2", "BINFLOAT", "NONE", "NEWTRUE", "NEWFALSE")
_COUNT_FORMATS = {
    "long1": "<B",
    "string1": "<B",
    "bytes1": "<B",
    "unicodestring1": "<B",
    "long4": "<i",
    "string4": "<i",
    "bytes4": "<I",
    "unicodestring4": "<I",
    "bytes8": "<Q",
    "unicodestring8": "<Q",
    "bytearray8": "<Q",
}
_FIXED_WIDTHS = {"uint1": 1, "uint2": 2, "int4": 4, "uint4": 4, "uint8": 8, "float8": 8}
_PUSH_ONE = frozenset(
    {
        "INT", "LONG", "STRING", "UNICODE", "FLOAT", "GLOBAL", "PERSID", "EXT1", "EXT2", "EXT4", "NEXT_BUFFER",
        "BINSTRING", "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8", "BINUNICODE",
        "SHORT_BINUNICODE", "BINUNICODE8", "LONG1", "LONG4", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "EMPTY_TUPLE",
        *_PLAIN_PUSHES,
    }
)  # fmt: skip
_TUPLES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}


def _fast_run() -> re.Pattern[bytes]:
    by_width: dict[int, list[int]] = {}
    for code, op in _OPCODES.items():
        if op.name in _PLAIN_PUSHES:
            by_width.setdefault(0 if op.arg is None else op.arg.n, []).append(code)
    alternatives = [
        b"[" + b"".join(re.escape(bytes([code])) for code in sorted(codes)) + b"]" + b"." * width
        for width, codes in sorted(by_width.items(), key=lambda item: -item[0])
    ]
    return re.compile(b"(?:" + b"|".join(alternatives) + b")++", re.DOTALL)


_FAST_RUN = _fast_run()


class _Stack:
    """The unpickler's stack as expanded sizes: 1 for anything but a tuple; a run of plain pushes skipped in one
    step is one entry ``-n``, at most ``n`` values of size 1 (``n`` its bytes: each opcode takes one at least)."""

    __slots__ = ("items", "marks")

    def __init__(self) -> None:
        self.items: list[int] = []
        self.marks: list[int] = []

    def push(self, size: int) -> None:
        self.items.append(size)

    def top(self) -> int:
        if not self.items:
            return 1
        return 1 if self.items[-1] < 0 else self.items[-1]

    def pop(self, count: int) -> int:
        """Pop ``count`` values; the sum of their sizes (an underflow pops what there is: the C unpickler will
        name the damage)."""
        total, items = 0, self.items
        while count > 0 and items:
            last = items[-1]
            if last < 0:
                taken = min(count, -last)
                items[-1] += taken
                if items[-1] == 0:
                    items.pop()
                total, count = total + taken, count - taken
            else:
                items.pop()
                total, count = total + last, count - 1
        return total

    def pop_mark(self) -> tuple[int, list[int]]:
        """Pop everything above the last MARK: (the sum of their sizes, the entries)."""
        start = self.marks.pop() if self.marks else 0
        start = min(start, len(self.items))
        entries = self.items[start:]
        del self.items[start:]
        return sum(-entry if entry < 0 else entry for entry in entries), entries


def _keys_size(entries: list[int]) -> int:
    """The sizes of the keys among SETITEMS' alternating keys and values (a skipped run: half of it, rounded up)."""
    total, index = 0, 0
    for entry in entries:
        if entry < 0:
            count = -entry
            total += (count + (index % 2 == 0)) // 2
            index += count
        else:
            total += entry if index % 2 == 0 else 0
            index += 1
    return total


class _Scan:
    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data
        self.end = len(data)
        self.stack = _Stack()
        self.memo: dict[int, int] = {}  # memo index -> expanded size, where more than 1
        self.memo_len = 0
        self.memo_seen: set[int] = set()
        self.tuples = 0
        self.hash_budget = HASH_BUDGET_PER_BYTE * self.end + _HASH_BUDGET_BASE
        self.residues: dict[int, int] = {}

    # The bounds.

    def _hash(self, size: int, position: int) -> None:
        self.hash_budget -= size
        if self.hash_budget < 0:
            raise Malformed(
                f"the pickle's dict keys and set members would hash more elements than its size justifies "
                f"(at byte {position}: shared tuples?)"
            )

    def _tuple(self, size: int, position: int) -> None:
        self.tuples += 1
        if size > MAX_TUPLE_EXPANSION:
            raise Malformed(f"a tuple at byte {position} expands to {size} elements (shared through the memo?)")
        self.stack.push(size)

    def _big_integer(self, value: int, position: int) -> None:
        residue = value % _HASH_MODULUS
        count = self.residues.get(residue, 0) + 1
        if count > MAX_SHARED_RESIDUE:
            raise Malformed(
                f"the pickle holds more than {MAX_SHARED_RESIDUE} integers of one hash (at byte {position}): "
                "keys built to collide"
            )
        self.residues[residue] = count

    def _memo_put(self, index: int, position: int) -> None:
        if index > position:
            raise Malformed(f"memo index {index} at byte {position} is larger than the data justifies")
        if index not in self.memo_seen:
            self.memo_seen.add(index)
            self.memo_len += 1
        size = self.stack.top()
        if size > 1:
            self.memo[index] = size
        else:
            self.memo.pop(index, None)

    # The walk.

    def _argument(self, op: pickletools.OpcodeInfo, position: int) -> tuple[Any, int]:
        """The argument of the opcode at ``position`` (ints for memo indexes and big integers, else None) and the
        position after it."""
        data, start = self.data, position + 1
        arg = op.arg
        if arg is None:
            return None, start
        count_format = _COUNT_FORMATS.get(arg.name)
        if count_format is not None:
            width = struct.calcsize(count_format)
            if start + width > self.end:
                raise Malformed("the pickle is truncated")
            count = struct.unpack_from(count_format, data, start)[0]
            after = start + width + count
            if count < 0 or after > self.end:
                raise Malformed(f"{op.name} at byte {position} declares more bytes than the pickle holds")
            if arg.name in ("long1", "long4") and count >= 8:  # may reach past 2**61: hashed mod 2**61 - 1
                return int.from_bytes(data[start + width : after], "little", signed=True), after
            return None, after
        width = _FIXED_WIDTHS.get(arg.name)
        if width is not None:
            if start + width > self.end:
                raise Malformed("the pickle is truncated")
            return int.from_bytes(data[start : start + width], "little"), start + width
        # Text arguments: one line, two for GLOBAL and INST.
        line_end = data.find(b"\n", start)
        if line_end < 0:
            raise Malformed("the pickle is truncated inside a text opcode")
        text = bytes(data[start:line_end])
        if arg.name == "stringnl_noescape_pair":
            line_end = data.find(b"\n", line_end + 1)
            if line_end < 0:
                raise Malformed("the pickle is truncated inside a text opcode")
            return None, line_end + 1
        if op.name in ("PUT", "GET"):
            text = text.strip()
            if not text.isdigit() or len(text) > 19:
                raise Malformed(f"{op.name} argument at byte {position} is not a memo index")
            return int(text), line_end + 1
        if op.name in ("INT", "LONG") and len(text) > 18:  # protocol 0's decimal integers, big ones
            try:
                return int(text.strip().rstrip(b"L")), line_end + 1
            except ValueError:
                raise Malformed(f"{op.name} at byte {position} is not an integer rollaudit reads") from None
        return None, line_end + 1

    def run(self) -> int:
        data, stack, fast = self.data, self.stack, _FAST_RUN
        position = 0
        while True:
            match = fast.match(data, position)
            if match is not None:
                stack.push(-(match.end() - position))
                position = match.end()
            if position >= self.end:
                raise Malformed("the pickle ends without a STOP opcode (truncated?)")
            op = _OPCODES.get(data[position])
            if op is None:
                raise Malformed(f"invalid pickle opcode {bytes([data[position]])!r} at byte {position}")
            argument, after = self._argument(op, position)
            name = op.name
            if name == "STOP":
                return self.tuples
            if name in _PUSH_ONE:
                if isinstance(argument, int) and name in ("LONG1", "LONG4", "INT", "LONG"):
                    self._big_integer(argument, position)
                stack.push(1)
            elif name == "MARK":
                stack.marks.append(len(stack.items))
            elif name in _TUPLES:
                self._tuple(1 + stack.pop(_TUPLES[name]), position)
            elif name == "TUPLE":
                self._tuple(1 + stack.pop_mark()[0], position)
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                self._memo_put(argument, position)
            elif name == "MEMOIZE":
                self._memo_put(self.memo_len, self.end)
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                stack.push(self.memo.get(argument, 1))
            elif name == "DUP":
                stack.push(stack.top())
            elif name == "SETITEM":
                value, key = stack.pop(1), stack.pop(1)
                del value
                self._hash(key, position)
            elif name == "SETITEMS":
                self._hash(_keys_size(stack.pop_mark()[1]), position)
            elif name == "DICT":
                self._hash(_keys_size(stack.pop_mark()[1]), position)
                stack.push(1)
            elif name in ("ADDITEMS", "FROZENSET"):
                self._hash(stack.pop_mark()[0], position)
                if name == "FROZENSET":
                    stack.push(1)
            elif name in ("APPEND", "POP", "BUILD"):
                if name == "POP" and stack.marks and stack.marks[-1] == len(stack.items):
                    stack.marks.pop()
                else:
                    stack.pop(1)
            elif name in ("APPENDS", "POP_MARK"):
                stack.pop_mark()
            elif name in ("LIST", "INST", "OBJ"):
                stack.pop_mark()
                stack.push(1)
            elif name in ("REDUCE", "NEWOBJ", "STACK_GLOBAL"):
                stack.pop(2)
                stack.push(1)
            elif name == "NEWOBJ_EX":
                stack.pop(3)
                stack.push(1)
            elif name == "BINPERSID":
                stack.pop(1)
                stack.push(1)
            elif name == "FRAME" and argument > self.end - position:
                raise Malformed(f"FRAME argument {argument} at byte {position} is larger than the data justifies")
            # PROTO, READONLY_BUFFER: no stack effect.
            position = after


def check_opcodes(data: bytes | bytearray) -> int:
    """Refuse a pickle that would make the C unpickler allocate or hash more than the data justifies (see the
    module's docstring); return its number of tuple opcodes, which bounds how deeply its tuples nest."""
    return _Scan(data).run()


# Hashing one level of tuple nesting takes 64 bytes of C stack on CPython 3.11 (x86-64, gcc -O3); four times that
# leaves room for other builds. Up to _INLINE_TUPLES levels fit any thread's stack (even macOS's 512 KiB).
_STACK_BYTES_PER_TUPLE = 256
_INLINE_TUPLES = 1000
_MAX_TUPLES = 1 << 22
_BASE_STACK_BYTES = 16 << 20
_STACK_SIZE_LOCK = threading.Lock()


def call_with_stack(function: Any, tuples: int) -> Any:
    """``function()``, on a thread whose C stack holds ``tuples`` levels of tuple nesting when more than a few."""
    if tuples <= _INLINE_TUPLES:
        return function()
    if tuples > _MAX_TUPLES:
        raise Malformed(f"the pickle has {tuples} tuple opcodes, more than the {_MAX_TUPLES} rollaudit reads")
    page = 1 << 16
    size = (_BASE_STACK_BYTES + tuples * _STACK_BYTES_PER_TUPLE + page - 1) // page * page
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function()
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error

    with _STACK_SIZE_LOCK:  # stack_size is process-wide: set it for this thread only, then put it back
        previous = threading.stack_size(size)
        try:
            worker = threading.Thread(target=run, name="rollaudit-unpickle", daemon=True)
            worker.start()
        finally:
            threading.stack_size(previous)
    worker.join()
    if "error" in outcome:
        raise outcome.pop("error")
    return outcome["value"]


__all__ = ["MAX_TUPLE_EXPANSION", "Malformed", "call_with_stack", "check_opcodes"]
