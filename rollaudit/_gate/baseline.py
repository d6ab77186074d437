"""Baselines: an audit's summary metrics stored as JSON, read back for the gate's baseline rule."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._audit.metric_names import METRICS
from .._audit.presets import get_scheme
from .._audit.report import RECORDED_ROW
from .._errors import SchemeError, UsageError
from .._json import json_object, read_small_file
from .._output import write_atomic

if TYPE_CHECKING:
    from .._audit.report import Report

BASELINE_SCHEMA_VERSION = 1
BASELINE_KIND = "rollaudit-baseline"


@dataclass(frozen=True)
class Baseline:
    """A stored baseline: the reference it was measured against and ``{scheme: {metric: value or None}}``."""

    path: str
    reference: str
    summary: dict[str, dict[str, float | None]]
    samples: int | None = None


# ---------------------------------------------------------------------------------------------------------------------
# Baselines.


def baseline_document(report: Report) -> dict[str, Any]:
    """What ``write_baseline`` stores: versioned, the reference, and every summary metric per scheme."""
    from .._version import __version__

    return json_object(
        {
            "schema_version": BASELINE_SCHEMA_VERSION,
            "kind": BASELINE_KIND,
            "rollaudit_version": __version__,
            "reference": report.reference,
            "samples": report.info.get("samples"),
            "steps": report.info.get("step_values", []),
            "summary": {
                str(scheme): {metric: row[metric] for metric in METRICS if metric in row}
                for scheme, row in report.summary_table.rows()
                # The recorded row is data, not a scheme: a baseline holds what can be recomputed.
                if scheme != RECORDED_ROW
            },
        }
    )


def baseline_text(report: Report) -> str:
    """``report``'s summary metrics as a baseline JSON document (undefined metrics as null)."""
    return json.dumps(baseline_document(report), indent=2, allow_nan=False) + "\n"


def write_baseline(path: str | os.PathLike[str], report: Report) -> Path:
    """Store ``report``'s summary metrics as a baseline JSON file, atomically."""
    return write_atomic(path, baseline_text(report))


def read_baseline(path: str | os.PathLike[str]) -> Baseline:
    """A baseline written by :func:`write_baseline`; a missing or corrupt file is a one-line UsageError."""
    where = str(path)
    try:
        document = json.loads(read_small_file(path).decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(
            "baseline file does not exist", file=where, expected="a file written by --write-baseline"
        ) from None
    except IsADirectoryError:
        raise UsageError("baseline is a directory", file=where, expected="a JSON file") from None
    except OSError as error:
        raise UsageError(f"cannot read baseline: {error.strerror or error}", file=where) from None
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError, or an integer of too many digits
        raise UsageError(f"baseline is not valid JSON: {error}", file=where) from None
    except RecursionError:
        raise UsageError(
            "baseline nests too deeply to be one", file=where, expected="a file written by --write-baseline"
        ) from None
    if not isinstance(document, dict) or document.get("kind") != BASELINE_KIND:
        raise UsageError("not a rollaudit baseline", file=where, expected="a file written by --write-baseline")
    version = document.get("schema_version")
    if version != BASELINE_SCHEMA_VERSION:
        raise UsageError(
            f"baseline schema_version {version!r} is not supported",
            file=where,
            expected=f"{BASELINE_SCHEMA_VERSION}; rewrite it with --write-baseline",
        )
    reference, summary = document.get("reference"), document.get("summary")
    if not isinstance(reference, str) or not isinstance(summary, dict) or not summary:
        raise UsageError("baseline has no reference or no summary", file=where, field="summary")
    checked: dict[str, dict[str, float | None]] = {}
    for scheme, metrics in summary.items():
        if not isinstance(metrics, dict) or not all(
            value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
            for value in metrics.values()
        ):
            raise UsageError("metrics must be numbers or null", file=where, field=f"summary.{scheme}")
        try:
            name = str(get_scheme(scheme))
        except SchemeError as error:
            raise UsageError(f"baseline scheme: {error.line()}", file=where, field=f"summary.{scheme}") from None
        try:
            checked[name] = {str(metric): None if value is None else float(value) for metric, value in metrics.items()}
        except OverflowError:
            raise UsageError("a metric is too large a number", file=where, field=f"summary.{scheme}") from None
    samples = document.get("samples")
    return Baseline(
        path=where, reference=reference, summary=checked, samples=samples if isinstance(samples, int) else None
    )
