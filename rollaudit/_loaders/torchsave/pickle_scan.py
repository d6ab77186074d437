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

import itertools
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
# Opcode -> argument width of the plain pushes: a long run of one of them (log-probs, loss masks) is checked by
# numpy, a thousand opcodes a call, instead of the regular expression's one at a time.
_PLAIN_WIDTHS = {code: 0 if op.arg is None else op.arg.n for code, op in _OPCODES.items() if op.name in _PLAIN_PUSHES}
_HOMOGENEOUS_CHUNK = 4096
_DUP_CODE = ord("2")
_TEXT_WIDTHS = {"SHORT_BINUNICODE": 1, "BINUNICODE": 4}
_MEMO_PUT_WIDTHS = {ord("q"): 1, ord("r"): 4, 0x94: 0}  # BINPUT, LONG_BINPUT, MEMOIZE
_MARK_CODE, _APPEND_CODE, _APPENDS_CODE, _FRAME_CODE = ord("("), ord("a"), ord("e"), 0x95
_EMPTY_DICT_CODE, _EMPTY_LIST_CODE, _SETITEMS_CODE = ord("}"), ord("]"), ord("u")
_BARE_STRUCTURE = frozenset(
    {_MARK_CODE, _EMPTY_DICT_CODE, _EMPTY_LIST_CODE, _SETITEMS_CODE, _APPENDS_CODE, _APPEND_CODE}
)
_MEMO_FAST_WIDTHS = {ord("h"): 1, ord("j"): 4, ord("q"): 1, ord("r"): 4}  # BINGET, LONG_BINGET, BINPUT, LONG_BINPUT
_GET_CODES = frozenset({ord("h"), ord("j")})
_MEMO_PUTS = frozenset({"BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"})
_MEMO_GETS = frozenset({"BINGET", "LONG_BINGET", "GET"})
SKIPPED_CALL = b"crollaudit\nskipped\n)R"
"""What a skimmed list becomes: a call of ``rollaudit.skipped`` (the unpickler's :data:`SKIPPED` marker)."""


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

    def pop_mark(self) -> list[int]:
        """Pop everything above the last MARK: its entries (:func:`_size` adds up what they expand to)."""
        start = self.marks.pop() if self.marks else 0
        start = min(start, len(self.items))
        entries = self.items[start:]
        del self.items[start:]
        return entries


def _size(entries: list[int]) -> int:
    """The expanded size of stack entries (a skipped run ``-n``: ``n`` values of size 1)."""
    return sum(-entry if entry < 0 else entry for entry in entries)


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
    def __init__(self, data: Any, skim: frozenset[str] = frozenset()) -> None:
        self.data = data
        self.end = len(data)
        self.view: Any = None
        self.skim = frozenset(name.encode("utf-8") for name in skim)
        # The skimmed pickle so far: views of the kept bytes (no copy until the one join) and replacements.
        self.pieces: list[bytes | memoryview] = []
        self.whole = memoryview(data)
        self.kept_from = 0  # where the bytes not yet in pieces begin
        self.lists_cut = 0
        self.texts: dict[int, bytes] = {}  # memo index -> a short text pushed before it (a dict key)
        self.cut_memo: set[int] = set()  # memo indexes of cut lists
        self.cut_fetched = False  # whether a cut list is fetched from the memo: then nothing is cut
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

    def _find_newline(self, start: int) -> int:
        """``data.find(b"\\n", start)``, also for a memoryview (of a mapped file), searched in growing windows."""
        data = self.data
        if not isinstance(data, memoryview):
            return data.find(b"\n", start)
        if self.view is None:
            import numpy as np

            self.view = np.frombuffer(data, dtype=np.uint8)
        window = 256
        while start < self.end:
            found = (self.view[start : start + window] == 10).argmax()
            if self.view[start + found] == 10:
                return start + int(found)
            start, window = start + window, window * 2
        return -1

    # Skimming.

    def _key_step(self, name: str, key: bytes | None, argument: Any, position: int, after: int) -> bytes | None:
        """The short text this opcode leaves on top of the stack (a dict key, from its opcode or the memo)."""
        if name == "FRAME":
            self._cut(position, after, b"")  # cuts change frame lengths: the frames go (they are optional)
            return key
        width = _TEXT_WIDTHS.get(name)
        if width is not None:
            return bytes(self.data[position + 1 + width : after]) if after - position <= 80 else None
        if name in _MEMO_PUTS:
            if key is not None:
                self.texts[self.memo_len if name == "MEMOIZE" else argument] = key
            return key
        if name in _MEMO_GETS:
            self.cut_fetched |= argument in self.cut_memo
            return self.texts.get(argument)
        return None

    def _plain_run(self, position: int) -> int:
        """The end of the plain number opcodes from ``position`` on (FRAME opcodes among them cut out)."""
        data, end = self.data, self.end
        while True:
            position = self._homogeneous(position)
            match = _FAST_RUN.match(data, position)
            if match is not None:
                position = match.end()
            if position + 9 <= end and data[position] == _FRAME_CODE:
                position += 9  # inside a list: gone with it when it is cut, else the walk meets it again
                continue
            return position

    def _cut_list(self, position: int) -> int | None:
        """At the EMPTY_LIST opcode of a skimmed key: the end of the list, cut, when it is whole and only plain
        numbers (batches between MARK and APPENDS, or one number and APPEND); None, and nothing recorded, if not."""
        data, end = self.data, self.end
        cursor = position + 1
        memo, memo_index = b"", None
        width = _MEMO_PUT_WIDTHS.get(data[cursor]) if cursor < end else None
        if width is not None and cursor + 1 + width <= end:
            memo = bytes(data[cursor : cursor + 1 + width])
            memo_index = int.from_bytes(memo[1:], "little") if width else self.memo_len
            cursor += 1 + width
        batches = 0
        while cursor < end:
            code = data[cursor]
            if code == _MARK_CODE:
                run_end = self._plain_run(cursor + 1)
                if run_end == cursor + 1 or run_end >= end or data[run_end] != _APPENDS_CODE:
                    break
                cursor, batches = run_end + 1, batches + 1
            elif batches == 0 and code in _PLAIN_WIDTHS and cursor + 2 + _PLAIN_WIDTHS[code] <= end:
                after = cursor + 1 + _PLAIN_WIDTHS[code]
                if data[after] != _APPEND_CODE:
                    break
                cursor, batches = after + 1, 1
                break
            else:
                break
        if batches == 0 or (cursor < end and data[cursor] in (_MARK_CODE, _APPEND_CODE, _APPENDS_CODE)):
            return None  # not a whole list of numbers: the walk reads it opcode by opcode
        self.stack.push(1)
        if memo_index is not None:
            self._memo_put(memo_index, position + 1 if width else self.end)  # bounded as the walk bounds it
            self.cut_memo.add(memo_index)
        self._cut(position, cursor, SKIPPED_CALL + memo)
        self.lists_cut += 1
        return cursor

    def _cut(self, start: int, end: int, replacement: bytes) -> None:
        self.pieces += (self.whole[self.kept_from : start], replacement)
        self.kept_from = end

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
        fixed_width = _FIXED_WIDTHS.get(arg.name)
        if fixed_width is not None:
            if start + fixed_width > self.end:
                raise Malformed("the pickle is truncated")
            return int.from_bytes(data[start : start + fixed_width], "little"), start + fixed_width
        # Text arguments: one line, two for GLOBAL and INST.
        line_end = self._find_newline(start)
        if line_end < 0:
            raise Malformed("the pickle is truncated inside a text opcode")
        text = bytes(data[start:line_end])
        if arg.name == "stringnl_noescape_pair":
            line_end = self._find_newline(line_end + 1)
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

    def _homogeneous(self, position: int) -> int:
        """The end of the run of one plain opcode that starts at ``position`` (``position`` when there is none
        long enough to be worth a numpy call)."""
        width = _PLAIN_WIDTHS.get(self.data[position])
        return position if width is None else self._run_end(position, width + 1)

    def _run_end(self, position: int, stride: int) -> int:
        """The end of the run of the opcode at ``position`` repeated every ``stride`` bytes (``position`` when
        the run is too short to be worth a numpy call)."""
        data, end = self.data, self.end
        code = data[position]
        if position + 4 * stride >= end or data[position + stride] != code or data[position + 3 * stride] != code:
            return position
        if self.view is None:
            import numpy as np

            self.view = np.frombuffer(data, dtype=np.uint8)
        while True:
            count = min(_HOMOGENEOUS_CHUNK, (end - position) // stride)
            differs = self.view[position : position + count * stride : stride] != code
            first = int(differs.argmax())
            if differs[first]:
                return position + first * stride
            position += count * stride
            if count < _HOMOGENEOUS_CHUNK:
                return position

    def run(self) -> int:
        data, stack, fast = self.data, self.stack, _FAST_RUN
        push = stack.items.append  # the stack's one list, never replaced: a call saved on every value
        skimming = bool(self.skim)
        key: bytes | None = None  # the text pushed last, while it is the top value (a dict key, usually)
        position, end, plain, memo, texts = 0, self.end, _PLAIN_WIDTHS, self.memo, self.texts
        while True:
            width = plain.get(data[position]) if position < end else None
            if width is not None:
                start, single = position, position + 1 + width
                if single < end and data[single] not in plain:
                    position = single  # one value (None, a small int): no run to look for
                else:
                    position = self._homogeneous(position)
                    match = fast.match(data, position)
                    if match is not None:
                        position = match.end()
                push(-(position - start))
                key = None
            if position >= end:
                raise Malformed("the pickle ends without a STOP opcode (truncated?)")
            code = data[position]
            # The commonest structural opcodes of a dump, without the general dispatch: memo gets of dict keys
            # and memo puts (BINGET, LONG_BINGET, BINPUT, LONG_BINPUT).
            width = _MEMO_FAST_WIDTHS.get(code)
            if width is not None and position + 1 + width <= end:
                index = (
                    data[position + 1] if width == 1 else int.from_bytes(data[position + 1 : position + 5], "little")
                )
                if code in _GET_CODES:
                    push(memo.get(index, 1))
                    if skimming:
                        self.cut_fetched |= index in self.cut_memo
                        key = texts.get(index)
                else:
                    self._memo_put(index, position)
                    if skimming and key is not None:
                        texts[index] = key
                position += 1 + width
                continue
            if code == _DUP_CODE:
                # A run of DUPs (one byte a value) is pushed in one step: millions of them otherwise cost
                # seconds of this loop before the sample count bound can refuse them.
                after = max(self._run_end(position, 1), position + 1)
                stack.items.extend(itertools.repeat(stack.top(), after - position))
                position, key = after, None
                continue
            # The other structural opcodes of every dict and list, which take no argument: as the general dispatch
            # below does them (an empty list that may be skimmed goes there).
            if code in _BARE_STRUCTURE and not (code == _EMPTY_LIST_CODE and skimming and key in self.skim):
                if code == _MARK_CODE:
                    stack.marks.append(len(stack.items))
                elif code == _SETITEMS_CODE:
                    self._hash(_keys_size(stack.pop_mark()), position)
                elif code == _APPENDS_CODE:
                    stack.pop_mark()
                elif code == _APPEND_CODE:
                    stack.pop(1)
                else:  # EMPTY_DICT, EMPTY_LIST
                    push(1)
                position, key = position + 1, None
                continue
            op = _OPCODES.get(code)
            if op is None:
                raise Malformed(f"invalid pickle opcode {bytes([data[position]])!r} at byte {position}")
            argument, after = self._argument(op, position)
            name = op.name
            if skimming:
                if name == "EMPTY_LIST" and key in self.skim:
                    cut = self._cut_list(position)
                    if cut is not None:
                        position, key = cut, None
                        continue
                key = self._key_step(name, key, argument, position, after)
            if name == "STOP":
                return self.tuples
            if name in _PUSH_ONE:
                if isinstance(argument, int) and name in ("LONG1", "LONG4", "INT", "LONG"):
                    self._big_integer(argument, position)
                push(1)
            elif name in _TUPLES:
                self._tuple(1 + stack.pop(_TUPLES[name]), position)
            elif name == "TUPLE":
                self._tuple(1 + _size(stack.pop_mark()), position)
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                self._memo_put(argument, position)
            elif name == "MEMOIZE":
                self._memo_put(self.memo_len, self.end)
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                push(self.memo.get(argument, 1))
            elif name == "DUP":
                push(stack.top())
            elif name == "SETITEM":
                stack.pop(1)  # the value
                self._hash(stack.pop(1), position)
            elif name == "DICT":
                self._hash(_keys_size(stack.pop_mark()), position)
                push(1)
            elif name in ("ADDITEMS", "FROZENSET"):
                self._hash(_size(stack.pop_mark()), position)
                if name == "FROZENSET":
                    push(1)
            elif name in ("POP", "BUILD"):
                if name == "POP" and stack.marks and stack.marks[-1] == len(stack.items):
                    stack.marks.pop()
                else:
                    stack.pop(1)
            elif name == "POP_MARK":
                stack.pop_mark()
            elif name in ("LIST", "INST", "OBJ"):
                stack.pop_mark()
                push(1)
            elif name in ("REDUCE", "NEWOBJ", "STACK_GLOBAL"):
                stack.pop(2)
                push(1)
            elif name == "NEWOBJ_EX":
                stack.pop(3)
                push(1)
            elif name == "BINPERSID":
                stack.pop(1)
                push(1)
            elif name == "FRAME" and argument > self.end - position:
                raise Malformed(f"FRAME argument {argument} at byte {position} is larger than the data justifies")
            # PROTO, READONLY_BUFFER: no stack effect.
            position = after


def check_opcodes(data: bytes | bytearray) -> int:
    """Refuse a pickle that would make the C unpickler allocate or hash more than the data justifies (see the
    module's docstring); return its number of tuple opcodes, which bounds how deeply its tuples nest."""
    return _Scan(data).run()


def skim(data: Any, fields: frozenset[str]) -> tuple[bytes | Any, int]:
    """:func:`check_opcodes`, and the pickle with the lists of plain numbers under the dict keys ``fields``
    replaced by :data:`SKIPPED_CALL` (their memo entries kept): what the C unpickler then builds is the rest.

    A list is cut only when it is whole: an empty list opcode right after the key, then batches of plain number
    opcodes between MARK and APPENDS (or one and APPEND), and nothing else; any other shape is left as it is.
    When the pickle fetches a cut list from the memo (honest dumps never do), nothing is cut. The kept bytes are
    copied once, joined. Returns (the pickle to unpickle, the number of tuple opcodes).
    """
    scan = _Scan(data, fields)
    tuples = scan.run()
    if scan.cut_fetched or not scan.lists_cut:
        return data, tuples  # a cut list named again elsewhere would come back as the marker: read it all
    scan.pieces.append(scan.whole[scan.kept_from :])
    return b"".join(scan.pieces), tuples


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


__all__ = ["MAX_TUPLE_EXPANSION", "SKIPPED_CALL", "Malformed", "call_with_stack", "check_opcodes", "skim"]
