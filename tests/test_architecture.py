"""The architecture contract: the pipeline's stages import only themselves and earlier stages, with no cycle.

file -> loader -> Arrow table -> recompute (torch) -> metrics -> report -> renderer: the packages of
``rollaudit`` are those stages, in this order (:data:`LAYERS`). Every ``import`` counts, at any depth (an import
inside a function runs too), except those under ``if TYPE_CHECKING:`` (never run) and inside the notebook's
``_repr_*`` hooks, each listed in :data:`DISPLAY_HOOKS` (a Report shows itself in a notebook through the HTML
renderer, imported when it is shown). Module sizes, and how many modules a folder holds, are held here as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rollaudit"
LAYERS = (
    (
        "base",
        (
            "rollaudit._version",
            "rollaudit._errors",
            "rollaudit._memory",
            "rollaudit._table",
            "rollaudit._output",
            "rollaudit._json",
            "rollaudit._pandas_import",
        ),
    ),
    ("loaders", ("rollaudit._loaders",)),
    ("audit", ("rollaudit._audit",)),
    ("gate", ("rollaudit._gate",)),
    ("watch", ("rollaudit._watch",)),
    ("render", ("rollaudit._render",)),
    ("api", ("rollaudit",)),
    ("cli", ("rollaudit._cli",)),
    ("main", ("rollaudit.__main__",)),
)
"""Stages, earliest first: a module may import modules of its own stage and of earlier ones. ``api`` is the
package's public face (``import rollaudit``), which the command line is a thin layer over."""
MAX_MODULE_LINES = 700
MAX_FOLDER_MODULES = 15
DISPLAY_HOOKS = {("rollaudit._audit.report", "Report._repr_html_"): {"rollaudit._render.html"}}
"""The one way back up the stages, and what each hook may import: a notebook asks a Report for its HTML, and the
renderer makes it. Nothing else in the package imports at display time."""

ROOMS = {
    "rollaudit._loaders.torchsave": (),
    "rollaudit._loaders.arrow": ("rollaudit._table", "rollaudit._output", "rollaudit._memory"),
    "rollaudit._loaders.formats": (
        "rollaudit._table",
        "rollaudit._loaders.base",
        "rollaudit._loaders.options",
        "rollaudit._loaders.config",
        "rollaudit._loaders.arrow",
        "rollaudit._loaders.torchsave",
    ),
    "rollaudit._loaders.registry": ("rollaudit._loaders.base", "rollaudit._loaders.formats"),
    "rollaudit._loaders.run": (
        "rollaudit._table",
        "rollaudit._output",
        "rollaudit._version",
        "rollaudit._memory",
        "rollaudit._pandas_import",
        "rollaudit._loaders.base",
        "rollaudit._loaders.options",
        "rollaudit._loaders.config",
        "rollaudit._loaders.registry",
        "rollaudit._loaders.arrow",
    ),
    "rollaudit._audit.engine": ("rollaudit._table", "rollaudit._audit.schemes"),
    "rollaudit._audit.findings": (
        "rollaudit._table",
        "rollaudit._audit.schemes",
        "rollaudit._audit.presets",
        "rollaudit._audit.engine",
        "rollaudit._audit.kernel",
        "rollaudit._audit.trained_with",
        "rollaudit._audit.advice",
    ),
    "rollaudit._render.dashboards": (
        "rollaudit._version",
        "rollaudit._audit.metric_names",
        "rollaudit._audit.trained_with.trained",
        "rollaudit._audit.report",
        "rollaudit._watch.records",
        "rollaudit._render.text",
        "rollaudit._render.trend",
        "rollaudit._render.markdown",
        "rollaudit._render.html",
    ),
}
"""Rooms inside a stage, and what each may import besides itself and ``rollaudit._errors``: the safe torch.save
reader knows no format, the Arrow readers no format either (their shared-memory files are swept as the output
temporaries are), a format plug-in knows the readers it uses, the interface and the run-config reader, the run
machinery finds formats through the registry alone, reads cache entries through the capped Arrow reader (they are
untrusted too) and keeps pandas out of its worker processes, and
the audit engine (encoding, groups, piece sizing, tallies, threads) knows the table and the schemes' data, not the
metrics or the report built on it; the findings read the table, the schemes, the kernel that recomputes them and
what the run trained with, never the metrics or the report they go into; the dashboards (TensorBoard, W&B, the
watch's lines and page) know the step records and the report's names, and lay them out with the renderers' shared
pieces (text, trend, Markdown, the HTML page)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def stage_of(module: str) -> int:
    """The index in LAYERS of the stage a module belongs to (the longest matching prefix)."""
    best, length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = index, len(prefix)
    assert best is not None, f"{module} belongs to no stage of the architecture"
    return best


def _is_type_checking(node: ast.If) -> bool:
    return ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


class _Imports(ast.NodeVisitor):
    """Every rollaudit module a module imports, skipping TYPE_CHECKING blocks and ``_repr_*`` hooks."""

    def __init__(self, module: str, is_package: bool, type_only: bool = False) -> None:
        self.module, self.package = module, module if is_package else module.rpartition(".")[0]
        self.found: dict[str, int] = {}
        self.type_only = type_only

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node) and not self.type_only:
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if not node.name.startswith("_repr_"):
            self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _add(self, target: str, line: int) -> None:
        if target == "rollaudit" or target.startswith("rollaudit."):
            # ``from package import name``: the name may be a submodule (``from . import columns``).
            self.found.setdefault(target, line)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            self._add(submodule if submodule in MODULES else source, node.lineno)


def imports_of(module: str, type_only: bool = False) -> dict[str, int]:
    """The rollaudit modules ``module`` imports when it runs, or with ``type_only`` those its type hints name too."""
    path = MODULES[module]
    visitor = _Imports(module, path.name == "__init__.py", type_only)
    visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
    return {target: line for target, line in visitor.found.items() if target != module}


GRAPH = {module: imports_of(module) for module in MODULES}
TYPED_GRAPH = {module: imports_of(module, type_only=True) for module in MODULES}


class _DisplayImports(ast.NodeVisitor):
    """The rollaudit modules each ``_repr_*`` hook of a module imports, by ``Class._repr_x_``."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.module, self.is_package = module, is_package
        self.found: dict[str, set[str]] = {}
        self._class = ""

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._class, outer = node.name, self._class
        self.generic_visit(node)
        self._class = outer

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name.startswith("_repr_"):
            inner = _Imports(self.module, self.is_package)
            for statement in node.body:
                inner.visit(statement)
            self.found[f"{self._class}.{node.name}"] = set(inner.found)


def test_display_hooks_are_the_listed_ones_and_import_only_what_they_may():
    found = {}
    for module, path in MODULES.items():
        visitor = _DisplayImports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        found.update({(module, hook): imports for hook, imports in visitor.found.items() if imports})
    assert found == DISPLAY_HOOKS


def test_every_import_names_a_module_of_the_package():
    for module, targets in GRAPH.items():
        for target in targets:
            assert target in MODULES, f"{module} imports {target}, which is not a module of rollaudit"


def test_no_stage_imports_a_later_stage():
    violations = [
        f"{module} (stage {LAYERS[stage_of(module)][0]}) imports {target} (stage {LAYERS[stage_of(target)][0]}) "
        f"at line {line}"
        for module, targets in GRAPH.items()
        for target, line in targets.items()
        if stage_of(target) > stage_of(module)
    ]
    assert not violations, "\n".join(violations)


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return components


def test_no_import_cycles_at_any_depth_type_hints_included():
    """Not even a ``TYPE_CHECKING`` import closes a circle: two modules that need each other's names are one."""
    assert strongly_connected(TYPED_GRAPH) == []


def room_of(module: str) -> str | None:
    return next((room for room in ROOMS if module == room or module.startswith(room + ".")), None)


def test_every_room_imports_only_what_it_may():
    violations = []
    for module, targets in TYPED_GRAPH.items():
        room = room_of(module)
        if room is None:
            continue
        allowed = (room, "rollaudit._errors", *ROOMS[room])
        violations += [
            f"{module} (room {room}) imports {target} at line {line}"
            for target, line in targets.items()
            if not any(target == prefix or target.startswith(prefix + ".") for prefix in allowed)
        ]
    assert not violations, "\n".join(violations)


def test_every_room_exists():
    for room in ROOMS:
        assert any(module == room or module.startswith(room + ".") for module in MODULES), room


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert strongly_connected(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_700_lines(module):
    lines = MODULES[module].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_MODULE_LINES, f"{module} has {lines} lines"


FOLDERS = sorted({path.parent for path in MODULES.values()})


@pytest.mark.parametrize("folder", FOLDERS, ids=[str(folder.relative_to(PACKAGE.parent)) for folder in FOLDERS])
def test_no_folder_holds_over_15_modules(folder):
    """A folder of more modules is split into rooms: a reader finds a module among a few."""
    modules = sorted(path.name for path in folder.glob("*.py"))
    assert len(modules) <= MAX_FOLDER_MODULES, f"{folder.relative_to(PACKAGE.parent)} holds {len(modules)}: {modules}"


def test_a_loader_is_a_module_and_one_registry_line():
    """Every format module exposes the one interface, and the registry lists exactly those modules."""
    from rollaudit._loaders.base import Format
    from rollaudit._loaders.registry import FORMATS

    for name, entry in FORMATS.items():
        assert isinstance(entry, Format) and entry.name == name
        module = entry.read.__module__
        assert module.startswith("rollaudit._loaders."), module
        for function in (entry.detect, entry.expand_directory, entry.combine):
            assert function.__module__ == module, (name, function)


def test_the_cache_key_covers_every_loader_module_without_a_list():
    import sys

    from rollaudit._loaders.registry import FORMATS
    from rollaudit._loaders.run.cache import fingerprint_sources

    sources = {path.resolve() for path in fingerprint_sources()}
    assert {path.resolve() for path in (PACKAGE / "_loaders").rglob("*.py")} <= sources
    for entry in FORMATS.values():
        assert Path(sys.modules[entry.read.__module__].__file__).resolve() in sources
    assert (PACKAGE / "_table.py").resolve() in sources


def test_every_load_option_is_declared_once_for_the_command_line():
    """Each field of LoadOptions has exactly one command-line option in the shared group (no other command
    declares one of its own), so a new option reaches every command that reads dumps at once."""
    import dataclasses

    from rollaudit._cli.options import LOAD
    from rollaudit._loaders.options import LoadOptions

    fields = {field.name for field in dataclasses.fields(LoadOptions) if not field.metadata.get("internal")}
    declared = {option.name for option in LOAD.options}
    spelled = {"input_format": "format", "no_cache": "cache"}
    assert {spelled.get(name, name) for name in declared} == fields
    commands = (PACKAGE / "_cli" / "commands.py").read_text(encoding="utf-8")
    for name in declared:
        flag = "--" + {"input_format": "format"}.get(name, name).replace("_", "-")
        assert f'"{flag}"' not in commands, f"{flag} declared again in a command"


def test_the_exports_resolve_each_to_its_module():
    """The exports are spelled three times for three readers (type checkers: the TYPE_CHECKING imports of
    ``rollaudit/__init__.py``; the lazy lookup: ``_MODULE_OF``; ``import *``: the literal ``__all__``); they are
    equal, and every name resolves lazily to the object its module defines."""
    import importlib

    import rollaudit

    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and _is_type_checking(node))
    listed = {alias.name: "." + node.module for node in block.body for alias in node.names}
    assert listed == rollaudit._MODULE_OF
    assert sorted([*listed, "__version__"]) == sorted(rollaudit.__all__) == dir(rollaudit)
    for name, module in listed.items():
        assert getattr(rollaudit, name) is getattr(importlib.import_module(f"rollaudit{module}"), name)


def test_load_takes_every_option_as_a_keyword_with_its_default():
    """``rollaudit.load``'s keywords are the fields of LoadOptions, defaults included: an option is declared in the
    dataclass, and this keeps the notebook's signature from drifting."""
    import dataclasses
    import inspect

    import rollaudit

    parameters = inspect.signature(rollaudit.load).parameters
    keywords = {name: p.default for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    keywords.pop("on_file")
    fields = {
        field.name: field.default
        for field in dataclasses.fields(rollaudit.LoadOptions)
        if not field.metadata.get("internal")  # set by the load itself (the run's config, once read)
    }
    assert keywords == fields
