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

if TYPE_CHECKING:  # the exports, for type checkers (imported lazily by __getattr__ below)
    from ._audit.api import audit, recompute
    from ._audit.describe import describe
    from ._audit.metric_names import METRICS
    from ._audit.presets import DEFAULT_SCHEMES, PRESETS, get_scheme, split_schemes
    from ._audit.report import SCHEMA_VERSION, Report
    from ._audit.schemes import Scheme
    from ._audit.trained_with.fit import Detection, detect_scheme, fit_presets
    from ._errors import GateFailed, InputError, RollauditError, RollauditWarning, SchemeError, UsageError
    from ._gate.baseline import read_baseline, write_baseline
    from ._gate.config import GateConfig, gate_config, load_gate_config
    from ._gate.evaluate import GateResult, run_gate
    from ._loaders.options import LoadOptions
    from ._loaders.registry import FORMATS
    from ._loaders.run.load import detect_format, expand_paths, find_runs, load
    from ._table import (
        CANONICAL_COLUMNS,
        loaded_formats,
        make_table,
        parse_steps,
        select_prompt,
        select_steps,
        validate_table,
    )
    from ._watch.records import StepRecord
    from ._watch.run import watch


# Where each export lives, for the lazy lookup below; the architecture test keeps this, the TYPE_CHECKING block
# above and __all__ equal.
_MODULE_OF = {
    "CANONICAL_COLUMNS": "._table",
    "DEFAULT_SCHEMES": "._audit.presets",
    "Detection": "._audit.trained_with.fit",
    "FORMATS": "._loaders.registry",
    "GateConfig": "._gate.config",
    "GateFailed": "._errors",
    "GateResult": "._gate.evaluate",
    "InputError": "._errors",
    "LoadOptions": "._loaders.options",
    "METRICS": "._audit.metric_names",
    "PRESETS": "._audit.presets",
    "Report": "._audit.report",
    "RollauditError": "._errors",
    "RollauditWarning": "._errors",
    "SCHEMA_VERSION": "._audit.report",
    "Scheme": "._audit.schemes",
    "SchemeError": "._errors",
    "StepRecord": "._watch.records",
    "UsageError": "._errors",
    "audit": "._audit.api",
    "describe": "._audit.describe",
    "detect_format": "._loaders.run.load",
    "detect_scheme": "._audit.trained_with.fit",
    "expand_paths": "._loaders.run.load",
    "find_runs": "._loaders.run.load",
    "fit_presets": "._audit.trained_with.fit",
    "gate_config": "._gate.config",
    "get_scheme": "._audit.presets",
    "load": "._loaders.run.load",
    "load_gate_config": "._gate.config",
    "loaded_formats": "._table",
    "make_table": "._table",
    "parse_steps": "._table",
    "read_baseline": "._gate.baseline",
    "recompute": "._audit.api",
    "run_gate": "._gate.evaluate",
    "select_prompt": "._table",
    "select_steps": "._table",
    "split_schemes": "._audit.presets",
    "validate_table": "._table",
    "watch": "._watch.run",
    "write_baseline": "._gate.baseline",
}

__all__ = [
    "CANONICAL_COLUMNS",
    "DEFAULT_SCHEMES",
    "FORMATS",
    "METRICS",
    "PRESETS",
    "SCHEMA_VERSION",
    "Detection",
    "GateConfig",
    "GateFailed",
    "GateResult",
    "InputError",
    "LoadOptions",
    "Report",
    "RollauditError",
    "RollauditWarning",
    "Scheme",
    "SchemeError",
    "StepRecord",
    "UsageError",
    "__version__",
    "audit",
    "describe",
    "detect_format",
    "detect_scheme",
    "expand_paths",
    "find_runs",
    "fit_presets",
    "gate_config",
    "get_scheme",
    "load",
    "load_gate_config",
    "loaded_formats",
    "make_table",
    "parse_steps",
    "read_baseline",
    "recompute",
    "run_gate",
    "select_prompt",
    "select_steps",
    "split_schemes",
    "validate_table",
    "watch",
    "write_baseline",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'rollaudit' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
