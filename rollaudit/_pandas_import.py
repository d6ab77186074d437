"""pyarrow imports pandas (a fifth of a second) the first time it makes an array, to recognise the pandas objects
it is given; rollaudit gives it none. While a command runs, that import is refused where rollaudit's or pyarrow's
own code asks for it (pyarrow then does without pandas, and tries again when asked for pandas itself), until
rollaudit needs pandas (a DataFrame for the report's tables or a prompt's samples: ``allow_pandas``). Another
package that imports pandas (a dashboard's client) gets it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PYARROW = f"{os.sep}pyarrow{os.sep}"


class _RefusePandas:
    """An import finder that refuses pandas to rollaudit's and pyarrow's own code."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name != "pandas":
            return
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
            frame = frame.f_back
        where = frame.f_code.co_filename if frame is not None else ""
        if where.startswith(_PACKAGE) or _PYARROW in where:
            raise ImportError("pandas is left out of this command until it needs it")
        allow_pandas()  # another package's import: pandas from now on


_REFUSER = _RefusePandas()


@contextmanager
def pandas_refused() -> Iterator[None]:
    """Within: rollaudit and pyarrow do not import pandas unless ``allow_pandas`` is called first (nothing changes
    where it is imported already)."""
    if "pandas" in sys.modules:
        yield
        return
    sys.meta_path.insert(0, _REFUSER)
    try:
        yield
    finally:
        allow_pandas()


def refuse_pandas() -> None:
    """In a process of rollaudit's own that never returns a DataFrame (a pool worker), from now on as within
    :func:`pandas_refused`: 45-55 MB and 0.2 s of CPU less per worker."""
    if "pandas" not in sys.modules and _REFUSER not in sys.meta_path:
        sys.meta_path.insert(0, _REFUSER)


def allow_pandas() -> None:
    """Let pandas be imported from now on (before rollaudit itself imports it)."""
    if _REFUSER in sys.meta_path:
        sys.meta_path.remove(_REFUSER)
