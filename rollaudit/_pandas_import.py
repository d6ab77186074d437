"""pyarrow imports pandas (a fifth of a second) the first time it makes an array, to recognise the pandas objects
it is given; a command gives it none. While a command runs, that import is refused (pyarrow then does without
pandas, and tries again when asked for pandas itself), until rollaudit needs pandas: a DataFrame for the report's
tables or a prompt's samples (``allow_pandas``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _RefusePandas:
    """An import finder that refuses pandas."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas":
            raise ImportError("pandas is left out of this command until it needs it")


_REFUSER = _RefusePandas()


@contextmanager
def pandas_refused() -> Iterator[None]:
    """Within: pandas is not imported unless ``allow_pandas`` is called first (nothing changes where it is)."""
    if "pandas" in sys.modules:
        yield
        return
    sys.meta_path.insert(0, _REFUSER)
    try:
        yield
    finally:
        allow_pandas()


def allow_pandas() -> None:
    """Let pandas be imported from now on (before rollaudit itself imports it)."""
    if _REFUSER in sys.meta_path:
        sys.meta_path.remove(_REFUSER)
