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

__version__ = "0.1.0"

# Large CPU tensors on transparent huge pages: first-touch page faults of fresh 80 MB buffers
# cost more than the arithmetic on them (3x measured). PyTorch reads this once, at its first
# allocation, so it only applies when torch is imported after rollaudit; a user's own value wins.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

_EXPORTS = {
    "make_table": "._table",
    "validate_table": "._table",
    "CANONICAL_COLUMNS": "._table",
    "Scheme": "._schemes",
    "PRESETS": "._schemes",
    "get_scheme": "._schemes",
    "split_schemes": "._schemes",
    "recompute": "._api",
    "audit": "._api",
    "DEFAULT_SCHEMES": "._api",
    "Report": "._report",
    "SCHEMA_VERSION": "._report",
    "METRICS": "._metric_names",
    "load": "._load",
    "RollauditError": "._errors",
    "InputError": "._errors",
    "SchemeError": "._errors",
    "UsageError": "._errors",
    "GateFailed": "._errors",
    "RollauditWarning": "._errors",
    "GateConfig": "._gate",
    "GateResult": "._gate",
    "gate_config": "._gate",
    "load_gate_config": "._gate",
    "run_gate": "._gate",
    "write_baseline": "._gate",
    "read_baseline": "._gate",
    "fit_presets": "._detect",
    "detect_scheme": "._detect",
    "Detection": "._detect",
    "expand_paths": "._load",
    "detect_format": "._load",
    "loaded_formats": "._load",
    "FORMATS": "._load",
    "describe": "._inspect",
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
    "Report",
    "RollauditError",
    "RollauditWarning",
    "Scheme",
    "SchemeError",
    "UsageError",
    "__version__",
    "audit",
    "describe",
    "detect_format",
    "detect_scheme",
    "expand_paths",
    "fit_presets",
    "gate_config",
    "get_scheme",
    "load",
    "load_gate_config",
    "loaded_formats",
    "make_table",
    "read_baseline",
    "recompute",
    "run_gate",
    "split_schemes",
    "validate_table",
    "write_baseline",
]

if TYPE_CHECKING:
    from ._api import DEFAULT_SCHEMES, audit, recompute
    from ._detect import Detection, detect_scheme, fit_presets
    from ._errors import GateFailed, InputError, RollauditError, RollauditWarning, SchemeError, UsageError
    from ._gate import GateConfig, GateResult, gate_config, load_gate_config, read_baseline, run_gate, write_baseline
    from ._inspect import describe
    from ._load import FORMATS, detect_format, expand_paths, load, loaded_formats
    from ._metric_names import METRICS
    from ._report import SCHEMA_VERSION, Report
    from ._schemes import PRESETS, Scheme, get_scheme, split_schemes
    from ._table import CANONICAL_COLUMNS, make_table, validate_table


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rollaudit' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
