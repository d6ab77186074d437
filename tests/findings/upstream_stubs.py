"""Inert stand-ins for the packages an upstream function imports but never calls on the path the reproductions run
(ray, transformers, ...): a module of such a package hands out :class:`Stub`, a class that can be subclassed,
called, indexed and iterated and does nothing. Used by the generators that run a framework's own code."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import subprocess
import sys
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class _StubMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub

    def __getitem__(cls, item: Any) -> Any:
        return Stub

    def __or__(cls, other: Any) -> Any:
        return Stub

    def __ror__(cls, other: Any) -> Any:
        return Stub


class Stub(metaclass=_StubMeta):
    """Anything a stubbed module is asked for: a class that can be subclassed, called, indexed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return Stub()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub()

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False


class _StubModule(types.ModuleType):
    """A stubbed module: its ``given`` names (``remote`` of ``ray``, say) as given, every other name a Stub."""

    given: Mapping[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self.given.get(name, Stub)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: Sequence[str], given: Mapping[str, Mapping[str, Any]]) -> None:
        self.roots, self.given = set(roots), given

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.given = self.given.get(spec.name, {})
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def stub_packages(roots: Sequence[str], given: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Every module under the top-level packages ``roots`` becomes a stub from now on (those already imported are
    forgotten); ``given``: names a stubbed module hands out as they are, by module name."""
    for name in [name for name in sys.modules if name.split(".")[0] in roots]:
        del sys.modules[name]
    sys.meta_path.insert(0, _StubFinder(roots, given or {}))


def note_commit(upstream: Path, commit: str) -> None:
    """Say on stderr where the checkout is not at the commit the fixtures were made at."""
    head = subprocess.run(["git", "-C", str(upstream), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0 and head.stdout.strip() != commit:
        print(f"note: {upstream} is at {head.stdout.strip()}, the fixtures were made at {commit}", file=sys.stderr)
