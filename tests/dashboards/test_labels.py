"""Text that reaches a dashboard (a tag's part, a W&B run's name or group, a text event) is bounded and clean, whatever
a dump, a file name or an option holds: no control, format (bidi) or separator character, no ``..``, no leading
``/``, at most 256 characters; a tag's part never holds ``/`` or a newline, and is never empty."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from rollaudit._render.dashboards.dashboard import MAX_LABEL, clean_label, scheme_text, tag_part

HOSTILE = [
    "\x1b[31mred\x1b[0m",
    "\u202eevil\u202c",
    "a\u2066b\u2069c",
    "../../etc/passwd",
    "/abs/path",
    "line\nbreak\rand\ttab",
    "zero\u200bwidth\ufeff",
    "x" * 10_000,
    "..",
    "\ud800lone",
    "::error::forged",
    "${jndi:x}",
    "",
]


def assert_clean(label: str) -> None:
    assert len(label) <= MAX_LABEL
    assert ".." not in label and not label.startswith("/")
    assert not any(unicodedata.category(char) in {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"} for char in label)
    assert label == label.strip()


def test_hostile_labels_come_out_clean() -> None:
    for text in HOSTILE:
        assert_clean(clean_label(text))
        part = tag_part(text)
        assert_clean(part)
        assert re.fullmatch(r"[A-Za-z0-9_.=-]+", part) and not part.startswith(".")
    assert clean_label("\x1b[31mred\x1b[0m") == "[31mred[0m"
    assert clean_label("\u202eevil\u202c") == "evil"
    assert clean_label("../../etc/passwd") == "_/_/etc/passwd"
    assert clean_label("line\nbreak") == "line break"
    assert len(clean_label("x" * 10_000)) == MAX_LABEL
    assert tag_part("../../etc/passwd") == "etc_passwd"
    assert tag_part("") == "_"


def test_scheme_strings_read_as_themselves() -> None:
    assert tag_part("slime-legacy(n=8)") == "slime-legacy_n=8"
    assert tag_part("prompt( scale = none, eps=1e-6 )") == "prompt_scale=none_eps=1e-6"
    assert tag_part("trajectory(representative=last)") == "trajectory_representative=last"
    assert scheme_text("batch", "recorded") == "batch (recorded)"
    assert scheme_text(None, "recorded") == "no preset matches (recorded)"
    assert scheme_text(None, "unknown") == "unknown"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600))
def test_any_text_comes_out_bounded_and_clean(text: str) -> None:
    assert_clean(clean_label(text))
    part = tag_part(text)
    assert_clean(part)
    assert part and "/" not in part and "\n" not in part and re.fullmatch(r"[A-Za-z0-9_.=-]+", part)
