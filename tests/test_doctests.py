"""The examples in the package's docstrings run, and say what they show: every module's doctests pass."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rollaudit"
ROOT = PACKAGE.parent
MODULES = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for path in PACKAGE.rglob("*.py")
    if path.name != "__main__.py"
)


def _examples(module: str) -> int:
    finder = doctest.DocTestFinder()
    return sum(len(test.examples) for test in finder.find(importlib.import_module(module)))


@pytest.mark.parametrize("module", MODULES)
def test_the_docstring_examples_of_every_module_pass(module, monkeypatch):
    monkeypatch.chdir(ROOT)  # examples name the bundled sample dumps by their path from the project root
    result = doctest.testmod(
        importlib.import_module(module), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    assert result.failed == 0, f"{module}: {result.failed} of {result.attempted} examples failed"


def test_the_public_functions_show_an_example():
    """The entry points a notebook starts from each carry a running example."""
    import rollaudit

    for name in ("recompute", "audit", "make_table", "get_scheme", "load"):
        function = getattr(rollaudit, name)
        examples = doctest.DocTestFinder().find(function)
        assert any(test.examples for test in examples), f"rollaudit.{name} has no example"
    assert sum(_examples(module) for module in MODULES) >= 10
