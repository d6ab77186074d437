"""Shared test set-up."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

import rollaudit


@pytest.fixture(autouse=True, scope="session")
def _private_cache_directory(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The command line caches reduced tables by default: keep the tests' cache out of the user's home."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    yield
    patch.undo()


@pytest.fixture
def spy_on_load(monkeypatch: pytest.MonkeyPatch) -> Callable[..., dict]:
    """``spy_on_load(forward=None)`` replaces ``rollaudit.load`` with a spy and returns the keywords of its last
    call. The real ``load`` then runs with the keywords named in ``forward`` (default: all of them)."""

    def install(forward: Iterable[str] | None = None) -> dict:
        seen: dict = {}
        real_load = rollaudit.load

        def spy(paths, **options):
            seen.clear()
            seen.update(options)
            return real_load(paths, **(options if forward is None else {name: options[name] for name in forward}))

        monkeypatch.setattr(rollaudit, "load", spy)
        return seen

    return install
