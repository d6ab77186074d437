"""The JSON depth check: a bound counted at memory speed decides most files; the exact scan decides the rest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rollaudit._loaders.arrow import tables


def _chunks(text: bytes, size: int) -> list[np.ndarray]:
    view = np.frombuffer(text, dtype=np.uint8)
    return [view[start : start + size] for start in range(0, len(view), size)]


@pytest.mark.parametrize("size", [1, 3, 7, 64, 1 << 20])
def test_the_bound_is_the_longest_line_or_its_opening_brackets_across_chunk_edges(size):
    text = b'{"a": [1]}\n' + b"[" * 30 + b"]" * 30 + b'\n{"s": "[[[["}\n'
    assert tables._nesting_bound(_chunks(text, size), limit=100) == 60  # the longest line, 60 bytes
    assert tables._nesting_bound(_chunks(text, size), limit=50) == 30  # its opening brackets
    assert tables._nesting_bound(_chunks(b"[[[", size), limit=1) == 3  # no newline at all


def test_a_line_of_many_shallow_brackets_passes_the_exact_scan(tmp_path: Path):
    text = b'{"ok": 1}\n{"lists": [' + b",".join([b"[0]"] * 2000) + b"]}\n"
    assert tables.too_deep_line(np.frombuffer(text, dtype=np.uint8)) is None  # 2,001 opening brackets, 3 deep


def test_a_deep_line_is_named_whatever_the_others(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(tables, "_DEPTH_CHUNK", 97)  # the deep line straddles many chunks
    text = b'{"ok": 1}\n' * 50 + b'{"x": ' + b"[" * 600 + b"]" * 600 + b"}\n" + b'{"ok": 2}\n'
    assert tables.too_deep_line(np.frombuffer(text, dtype=np.uint8)) == 51


def test_brackets_inside_strings_count_toward_the_bound_but_not_the_depth(tmp_path: Path):
    text = b'{"text": "' + b"[" * 1000 + b'"}\n'
    assert tables.too_deep_line(np.frombuffer(text, dtype=np.uint8)) is None
