"""Shared test set-up."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

import rollaudit

# The sample generators import their shared command line (samples_cli) as scripts do, from their own folder.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_dumps"))


@pytest.fixture(autouse=True, scope="session")
def _private_cache_directory(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The command line caches reduced tables by default: keep the tests' cache out of the user's home."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    yield
    patch.undo()


RUN_OPTIONS = ("jobs", "cache", "engine", "ray_address")


def given_options(options: rollaudit.LoadOptions | None, keywords: dict) -> dict:
    """What a ``load`` call was given, as keywords: a LoadOptions' reading options that differ from their defaults
    (sequences as lists), its run options and ``format``, plus the call's other keywords (``on_file``)."""
    if options is None:
        return dict(keywords)
    defaults = rollaudit.LoadOptions()
    given = {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in options.reading().items()
        if value != getattr(defaults, name) and name != "format"
    }
    given.update({name: getattr(options, name) for name in (*RUN_OPTIONS, "format")})
    return {**given, **keywords}


@pytest.fixture
def spy_on_load(monkeypatch: pytest.MonkeyPatch) -> Callable[..., dict]:
    """``spy_on_load(forward=None)`` replaces ``rollaudit.load`` with a spy and returns what its last call was given
    (:func:`given_options`). The real ``load`` then runs with the options named in ``forward`` (default: all)."""

    def install(forward: Iterable[str] | None = None) -> dict:
        seen: dict = {}
        real_load = rollaudit.load

        def spy(paths, options=None, **keywords):
            seen.clear()
            seen.update(given_options(options, keywords))
            if forward is None:
                return real_load(paths, options, **keywords)
            kept = {name: seen[name] for name in forward}
            on_file = kept.pop("on_file", None)
            return real_load(paths, on_file=on_file, **kept)

        monkeypatch.setattr(rollaudit, "load", spy)
        return seen

    return install
