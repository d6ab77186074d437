"""rollaudit: audit the advantages of RL-for-LLM rollout dumps.

>>> import rollaudit
>>> table = rollaudit.load("sample_dumps/fanout/rollout_data/3.pt")       # doctest: +SKIP
>>> report = rollaudit.audit(table, schemes=["batch", "prompt", "trajectory"])  # doctest: +SKIP
>>> report.summary                                                       # doctest: +SKIP

Names resolve lazily: ``import rollaudit`` loads neither torch nor matplotlib.
"""

from __future__ import annotations

import os
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

# Large CPU tensors on transparent huge pages: first-touch page faults of fresh 80 MB buffers
# cost more than the arithmetic on them (3x measured). PyTorch reads this once, at its first
# allocation, so it only applies when torch is imported after rollaudit; a user's own value wins.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
# OpenMP threads that finish a kernel sleep instead of spinning: with a busy neighbour on a shared core (any CI
# runner, any laptop), spinning threads made `prompt` on 1M samples 15-20x slower; on a quiet machine it costs
# nothing measurable (tests/benchmarks/bench_shared_core.py). Read when torch starts, so only when it is imported
# after rollaudit; a user's own value wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

if TYPE_CHECKING:  # the exports, listed once: type checkers read them here, and so does _exports() below
    from ._audit.api import DEFAULT_SCHEMES, audit, recompute
    from ._audit.describe import describe
    from ._audit.fit import Detection, detect_scheme, fit_presets
    from ._audit.metric_names import METRICS
    from ._audit.report import SCHEMA_VERSION, Report
    from ._audit.schemes import PRESETS, Scheme, get_scheme, split_schemes
    from ._errors import GateFailed, InputError, RollauditError, RollauditWarning, SchemeError, UsageError
    from ._gate.baseline import read_baseline, write_baseline
    from ._gate.config import GateConfig, gate_config, load_gate_config
    from ._gate.evaluate import GateResult, run_gate
    from ._loaders.load import detect_format, expand_paths, load
    from ._loaders.options import LoadOptions
    from ._loaders.registry import FORMATS
    from ._table import CANONICAL_COLUMNS, loaded_formats, make_table, validate_table


def _exports() -> dict[str, str]:
    """Name -> module of every import in the ``TYPE_CHECKING`` block above, read from this module's source."""
    import ast

    source = __spec__.loader.get_source(__name__)  # type: ignore[union-attr]
    tree = ast.parse(source)
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    return {
        alias.asname or alias.name: "." * node.level + (node.module or "")
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


_MODULE_OF = _exports()
__all__ = sorted([*_MODULE_OF, "__version__"])


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'rollaudit' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
