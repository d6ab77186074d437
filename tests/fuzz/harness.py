"""What every fuzz case runs: load a file, accept a valid table or a RollauditError, nothing else.

Each case writes its bytes to a file, calls ``rollaudit.load`` on it (and, on
success, ``validate_table`` and ``audit``), and records how it ended and how
long it took. Anything but a valid table or a :class:`~rollaudit.RollauditError`
fails the case with the input saved to a file named in the message; so does a
case slower than :data:`CASE_SECONDS`, or a marker file appearing (a hostile
payload ran). Counts per loader and the slowest case are kept in :data:`STATS`
and printed at the end of the session (``run_long.py`` reads them as JSON).
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
import traceback
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings

import rollaudit
from rollaudit import RollauditError, RollauditWarning

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
CASE_SECONDS = 5.0
"""No case may take longer (load + validate + audit)."""
HANG_SECONDS = 120
"""A case still running after this long dumps every thread's traceback and ends the process (a hang in C)."""
PROFILE_VARIABLE = "ROLLAUDIT_FUZZ_PROFILE"
STATS_VARIABLE = "ROLLAUDIT_FUZZ_STATS"
FAILURES_VARIABLE = "ROLLAUDIT_FUZZ_FAILURES"
EXAMPLES_VARIABLE = "ROLLAUDIT_FUZZ_EXAMPLES"
KEEP_CURRENT_VARIABLE = "ROLLAUDIT_FUZZ_KEEP_CURRENT"
"""Set (run_long.py sets it): each case's input is written to ``<failures>/current-<pid>`` before it runs, so that a
case which kills the process (a segmentation fault in C) leaves its input behind."""


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("sample_dumps_generate", SAMPLES / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _load_generator()


# ---------------------------------------------------------------------------------------------------------------------
# Hypothesis profiles: ``ci`` (500 cases per fuzz test, derandomized: CI is reproducible), ``long`` (20,000 per
# fuzz test, random; run_long.py), ``smoke`` (50). Applied to the fuzz tests only, as a decorator
# (``@harness.fuzz_settings()``), never to the rest of the test suite.

_COMMON = {
    "deadline": timedelta(seconds=CASE_SECONDS),
    "database": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
}
settings.register_profile("ci", max_examples=500, derandomize=True, **_COMMON)
settings.register_profile("long", max_examples=20_000, derandomize=False, **_COMMON)
settings.register_profile("smoke", max_examples=50, derandomize=True, **_COMMON)


def fuzz_settings() -> settings:
    """The settings of the profile named by ROLLAUDIT_FUZZ_PROFILE (``ci`` by default); ROLLAUDIT_FUZZ_EXAMPLES
    overrides its number of cases."""
    profile = settings.get_profile(os.environ.get(PROFILE_VARIABLE, "ci"))
    examples = os.environ.get(EXAMPLES_VARIABLE)
    return settings(profile, max_examples=int(examples)) if examples else profile


# ---------------------------------------------------------------------------------------------------------------------
# Statistics.


@dataclass
class LoaderStats:
    cases: int = 0
    tables: int = 0
    errors: int = 0
    audits: int = 0
    audit_errors: int = 0
    other_warnings: int = 0
    slowest_seconds: float = 0.0
    slowest_case: str = ""
    error_kinds: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "tables": self.tables,
            "errors": self.errors,
            "audits": self.audits,
            "audit_errors": self.audit_errors,
            "other_warnings": self.other_warnings,
            "slowest_seconds": round(self.slowest_seconds, 4),
            "slowest_case": self.slowest_case,
            "error_kinds": dict(sorted(self.error_kinds.items())),
        }


STATS: dict[str, LoaderStats] = {}


def stats_document() -> dict[str, Any]:
    return {
        "profile": os.environ.get(PROFILE_VARIABLE, "ci"),
        "loaders": {name: STATS[name].as_dict() for name in sorted(STATS)},
    }


def write_stats() -> None:
    target = os.environ.get(STATS_VARIABLE)
    if target and STATS:
        Path(target).write_text(json.dumps(stats_document(), indent=2) + "\n")


# ---------------------------------------------------------------------------------------------------------------------
# Scratch space: one directory per process, a fresh sub-directory per case.


_SCRATCH = Path(tempfile.mkdtemp(prefix="rollaudit-fuzz-"))
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)
MARKER = _SCRATCH / "MARKER"
"""Hostile payloads spliced into fuzz inputs try to create this file."""


def failures_directory() -> Path:
    directory = Path(os.environ.get(FAILURES_VARIABLE) or (tempfile.gettempdir() + "/rollaudit-fuzz-failures"))
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextlib.contextmanager
def case_directory() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(dir=_SCRATCH))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def save_failure(loader: str, files: dict[str, bytes], note: str, case: dict[str, Any]) -> Path:
    """The failing input, kept for reproduction: one directory holding the case's files (under ``files/``), a
    note, and ``case.json`` (target and load options) for ``run_long.py --replay``."""
    digest = hashlib.sha256(b"".join(name.encode() + data for name, data in sorted(files.items()))).hexdigest()[:16]
    directory = failures_directory() / f"{loader}-{digest}"
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        target = directory / "files" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (directory / "NOTE.txt").write_text(note)
    (directory / "case.json").write_text(json.dumps(case, default=repr, indent=2) + "\n")
    return directory


def _current_directory() -> Path:
    return failures_directory() / f"current-{os.getpid()}"


def _keep_current(loader: str, files: dict[str, bytes], target: str | None, load_options: dict[str, Any]) -> None:
    directory = _current_directory()
    shutil.rmtree(directory, ignore_errors=True)
    for name, data in files.items():
        path = directory / "files" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    case = {"loader": loader, "target": target, "options": load_options}
    (directory / "case.json").write_text(json.dumps(case, default=repr, indent=2) + "\n")


def _drop_current() -> None:
    if os.environ.get(KEEP_CURRENT_VARIABLE):
        shutil.rmtree(_current_directory(), ignore_errors=True)


atexit.register(_drop_current)  # a normal exit: nothing crashed


def replay(directory: Path) -> str:
    """Run a saved failing case again (its outcome, or the FuzzFailure it raises)."""
    case = json.loads((directory / "case.json").read_text())
    root = directory / "files"
    files = {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}
    return run_case(case["loader"], files, target=case["target"] or next(iter(files)), **case["options"])


# ---------------------------------------------------------------------------------------------------------------------
# One case.


class FuzzFailure(AssertionError):
    pass


def run_case(
    loader: str,
    files: dict[str, bytes],
    *,
    target: str | None = None,
    description: str = "",
    **load_options: Any,
) -> str:
    """Write ``files`` (relative name -> bytes) into a fresh directory and load ``target`` (default: the only file).

    Returns ``"table"`` or ``"error"``. Raises :class:`FuzzFailure` (input saved) for anything else.
    """
    stats = STATS.setdefault(loader, LoaderStats())
    with case_directory() as directory:
        for name, data in files.items():
            path = directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        load_path = directory / (target if target is not None else next(iter(files)))
        if os.environ.get(KEEP_CURRENT_VARIABLE):
            _keep_current(loader, files, target, load_options)
        started = time.perf_counter()
        faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
        try:
            outcome, detail = _load_and_audit(load_path, stats, load_options)
        finally:
            faulthandler.cancel_dump_traceback_later()
        seconds = time.perf_counter() - started
    stats.cases += 1
    label = f"{description} {sorted(load_options.items())}".strip()
    if seconds > stats.slowest_seconds:
        stats.slowest_seconds = seconds
        stats.slowest_case = label
    problem = None
    if outcome == "bug":
        problem = detail
    elif MARKER.exists():
        problem = "a hostile payload ran: the marker file exists"
    elif seconds > CASE_SECONDS:
        problem = f"the case took {seconds:.2f} s (limit {CASE_SECONDS} s)"
    if problem is not None:
        case = {"loader": loader, "target": target, "options": load_options}
        saved = save_failure(loader, files, f"{label}\ntarget: {target}\n\n{problem}\n", case)
        with contextlib.suppress(OSError):
            MARKER.unlink()
        raise FuzzFailure(f"{loader}: {problem}\ninput saved in {saved} ({label})")
    if outcome == "table":
        stats.tables += 1
    else:
        stats.errors += 1
        stats.error_kinds[detail] = stats.error_kinds.get(detail, 0) + 1
    return outcome


def _load_and_audit(path: Path, stats: LoaderStats, load_options: dict[str, Any]) -> tuple[str, str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            table = rollaudit.load(str(path), **load_options)
        except RollauditError as error:
            return "error", _error_kind(error)
        except BaseException as error:
            if isinstance(error, KeyboardInterrupt):
                raise
            return "bug", f"load raised {type(error).__name__}:\n{traceback.format_exc()}"
        try:
            table = rollaudit.validate_table(table)
        except BaseException:
            return "bug", f"load returned a table that fails validate_table:\n{traceback.format_exc()}"
        stats.audits += 1
        try:
            rollaudit.audit(table)
        except RollauditError:
            stats.audit_errors += 1
        except BaseException as error:
            if isinstance(error, KeyboardInterrupt):
                raise
            return "bug", f"audit raised {type(error).__name__}:\n{traceback.format_exc()}"
        stats.other_warnings += sum(1 for item in caught if not issubclass(item.category, RollauditWarning))
    return "table", ""


def _error_kind(error: RollauditError) -> str:
    """A coarse name for an error, for the statistics: its class and its message without the specifics."""
    if "\n" in str(error) or "\n" in error.line():
        return "BUG: multi-line message"
    words = error.message.split()
    return f"{type(error).__name__}: {' '.join(words[:4])}"


def check_one_line(error: BaseException) -> None:
    text = str(error)
    assert "\n" not in text and "\r" not in text, text


# ---------------------------------------------------------------------------------------------------------------------
# Seeds: the bundled dumps, and their parts.


def read_sample(relative: str) -> bytes:
    return (SAMPLES / relative).read_bytes()


SLIME_SEEDS = {
    "fanout": "fanout/rollout_data/3.pt",
    "uniform": "uniform.pt",
    "reward_key": "reward_key.pt",
    "spec": "spec_4_3_4.pt",
    "rollout0": "dump_details/rollout_data/0.pt",
    "train0": "dump_details/train_data/0_0.pt",
}


@dataclass(frozen=True)
class TorchZip:
    """The members of a torch.save zip, in order: name -> bytes (the archive prefix included)."""

    members: tuple[tuple[str, bytes], ...]

    @classmethod
    def read(cls, data: bytes) -> TorchZip:
        import io

        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return cls(tuple((info.filename, archive.read(info)) for info in archive.infolist()))

    @property
    def pickle_name(self) -> str:
        return next(name for name, _ in self.members if name.endswith("/data.pkl"))

    @property
    def pickle(self) -> bytes:
        return dict(self.members)[self.pickle_name]

    def with_pickle(self, data: bytes) -> TorchZip:
        return TorchZip(tuple((name, data if name == self.pickle_name else body) for name, body in self.members))

    def write(self, compression: Callable[[str], int] | None = None) -> bytes:
        import io

        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as out:
            for name, body in self.members:
                kind = compression(name) if compression is not None else zipfile.ZIP_STORED
                info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
                info.compress_type = kind
                out.writestr(info, body)
        return buffer.getvalue()


def slime_options(seed: str) -> dict[str, Any]:
    return {"reward_key": "score"} if seed == "reward_key" else {}


def slime_files(seed: str, data: bytes) -> tuple[dict[str, bytes], str]:
    """The files of a slime case and the path to load: a train dump goes beside its rollout dump."""
    if seed == "train0":
        return (
            {"train_data/0_0.pt": data, "rollout_data/0.pt": read_sample(SLIME_SEEDS["rollout0"])},
            ".",
        )
    name = Path(SLIME_SEEDS[seed]).name
    return {name: data}, name


def warm_up() -> None:
    """Import torch and run one audit before timing anything: the first case must not pay for imports."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = rollaudit.load(str(SAMPLES / "spec_4_3_4.pt"))
        rollaudit.audit(table)
        for relative in ("trl/completions/completions_00010.parquet", "generic/rollouts.csv", "verl/rollout_data"):
            rollaudit.audit(rollaudit.load(str(SAMPLES / relative)))
