"""Shared test set-up."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_directory(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The command line caches reduced tables by default: keep the tests' cache out of the user's home."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    yield
    patch.undo()
