"""``rollaudit.watch``: follow a run directory as the trainer writes it and audit each step once its dump is whole.

Each look at the directory finds its dumps as ``compare`` would (the formats' own discovery), notes each file's
signature, and takes a file as whole once its bytes end as its kind ends (:mod:`.files`): at once where that end
is written last (zip, Parquet, Arrow), after holding still for ``settle`` seconds otherwise (JSON Lines, CSV).
Files are gathered into steps by their format (``Format.step_of``); a step is read and audited once every file of
it is whole, or, for formats whose steps grow file by file (``Format.step_grows``), once a later step has started
or the run has gone idle. A step whose files change afterwards (slime's train dumps
after its rollout dump, a file rewritten) is audited again and its new record says it replaces the earlier one.
A file that gains a step at a time (``Format.steps_appended``) is parsed only where it grew since the last look
(:mod:`rollaudit._loaders.arrow.appended`: what was read is checked still there, else the file is read whole).

Between looks the process sleeps on file notifications (:mod:`.follow`). Only the per-step records leave this
module, and no table outlives its step, but for a file that gains a step at a time: its parsed rows and its last
table are kept for the next look, so memory grows with that file (open-instruct starts a new one every 10,000 rows).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._errors import InputError, RollauditError, RollauditWarning, warn
from .._loaders.arrow.appended import AppendedFiles, reading_appended
from .._loaders.options import LoadOptions
from .._loaders.registry import FORMATS
from .._loaders.run.discover import Run, find_runs, natural_key, pick_run, run_files
from .._loaders.run.load import detect_format, expand_paths, load
from .._table import STEP, loaded_formats
from .files import WHOLE, WHOLE_IF_STILL, Signature, completeness, signature
from .follow import Wakeups
from .records import StepRecord, scheme_label

SETTLE_SECONDS = 0.2
"""How long a file must hold still (size, modification time) before it is read."""
RESCAN_SECONDS = 10.0
"""The longest sleep between two looks even with file notifications (writers on other machines notify nobody)."""
REDISCOVER_SECONDS = 300.0
"""How often the whole directory is searched again as ``compare`` searches it (between, the run's own format
lists its files: a look costs a listing, not a search through every format)."""
POLL_SECONDS = 1.0
"""The sleep between looks where there are no file notifications."""


@dataclass
class _File:
    signature: Signature
    since: float
    whole: bool = False
    format: str | None = None


@dataclass
class _Step:
    """A step's files as last audited: what must change for it to be audited again."""

    audited: dict[Path, Signature] = field(default_factory=dict)
    steps: frozenset[int] = frozenset()


def _resolved(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(path)


class _Follower:
    def __init__(
        self,
        root: Path,
        options: LoadOptions,
        audit_step: Any,
        recorded: Sequence[Mapping[str, Any]],
        settle: float,
    ) -> None:
        self.root = root
        self.options = options
        self.audit_step = audit_step
        self.settle = settle
        self.files: dict[Path, _File] = {}
        self.steps: dict[str, _Step] = {}
        self.format: str | None = options.format
        self.recorded_files = {_resolved(name) for record in recorded for name in record.get("files") or ()}
        self.recorded_steps = {record["step"] for record in recorded if isinstance(record.get("step"), int)}
        self.warned: set[str] = set()
        self.run: Run | None = None
        self.deferred: set[str] = set()
        self.step_digests: dict[int, bytes] = {}
        self.appended = AppendedFiles()
        # Of a file that gains a step at a time: its table at the last read, and that table's steps.
        self.tables: dict[str, tuple[Any, tuple[Any, Any, Any]]] = {}
        self.discovered_at = -math.inf
        # What each step trained with (its records', then this watch's): a step says when it differs from the
        # step before it.
        self.schemes: dict[int, str | None] = {
            record["step"]: scheme_label(record.get("trained_with"))
            for record in recorded
            if isinstance(record.get("step"), int)
        }
        # The finding codes its records (and then this watch) found: a step names the codes first found there.
        self.found_codes: set[str] = {
            finding["code"]
            for record in recorded
            if isinstance(record.get("findings"), list)
            for finding in record["findings"]
            if isinstance(finding, dict) and isinstance(finding.get("code"), str)
        }

    def _warn(self, message: str) -> None:
        if message not in self.warned:  # a run that stays broken says so once
            self.warned.add(message)
            warn(message, RollauditWarning)

    def settling(self, now: float) -> bool:
        """Whether a file changed less than ``settle`` seconds ago (it may be whole at the next look)."""
        return any(not state.whole and now - state.since < self.settle for state in self.files.values())

    def _discover(self, now: float) -> list[Path]:
        """The run's dump files: listed again by its own format at its root (names only) once the run is known,
        searched for as ``compare`` does at first and every ``REDISCOVER_SECONDS`` (a second run appearing)."""
        if self.run is not None and now - self.discovered_at < REDISCOVER_SECONDS:
            files = run_files(self.run)
            if files:
                return files
        self.discovered_at = now
        try:
            runs = find_runs(self.root)
            if self.options.run is not None and runs:
                runs = [pick_run(self.root, runs, self.options.run)]
            self.run = runs[0] if len(runs) == 1 else None
            return sorted(runs[0].files, key=natural_key) if len(runs) == 1 else expand_paths([self.root])
        except InputError:
            return []  # nothing written yet, or nothing rollaudit reads yet: look again later
        except RollauditError as error:
            self._warn(f"{self.root}: {error.line()}")
            return []

    def look(self, now: float) -> bool:
        """Rescan the directory; True when a file appeared, changed or became whole."""
        found = self._discover(now)
        changed = False
        present = set()
        for path in found:
            present.add(path)
            current = signature(path)
            if current is None:
                continue
            known = self.files.get(path)
            if known is None or known.signature != current:
                known = self.files[path] = _File(current, now)
                changed = True
            if not known.whole:
                state = completeness(path, current.size)
                if state == WHOLE or (state == WHOLE_IF_STILL and now - known.since >= self.settle):
                    known.whole = True
                    changed = True
                    known.format = self._format_of(path)
        for gone in set(self.files) - present:
            del self.files[gone]
        return changed

    def _format_of(self, path: Path) -> str | None:
        if self.format is not None and self.options.format is not None:
            return self.format
        try:
            return detect_format(path)
        except RollauditError:
            return None  # read on its own: the read says what is wrong with it, and the step is skipped

    def _step_key(self, path: Path, format_name: str) -> str:
        step_of = FORMATS[format_name].step_of
        return step_of(path) if step_of is not None else str(path)

    def pending(self, idle: bool) -> list[tuple[str, list[Path]]]:
        """The steps ready to audit (whole, changed since last audited), in step order."""
        by_step: dict[str, list[Path]] = {}
        waiting: set[str] = set()
        for path, state in self.files.items():
            if not state.whole:
                format_name = self.format or self.options.format
                waiting.add(self._step_key(path, format_name) if format_name else str(path))
                continue
            if state.format is None:
                by_step.setdefault(str(path), []).append(path)
                continue
            if self.format is None:
                self.format = state.format
            if state.format != self.format:
                self._warn(
                    f"{path}: a {state.format} dump in a {self.format} run; skipped (one framework's dumps at a time)"
                )
                continue
            by_step.setdefault(self._step_key(path, state.format), []).append(path)
        grows = self.format is not None and FORMATS[self.format].step_grows
        ordered = sorted(set(by_step) | waiting, key=lambda key: natural_key(Path(key)))
        ready = []
        for place, key in enumerate(ordered):
            if key in waiting or key not in by_step:
                continue
            if grows and place == len(ordered) - 1 and not idle:
                continue  # the newest step of a growing format: its next file may still come
            paths = sorted(by_step[key], key=natural_key)
            audited = self.steps.get(key)
            now = {path: self.files[path].signature for path in paths}
            if audited is not None and audited.audited == now and not (idle and key in self.deferred):
                continue
            if audited is None and all(_resolved(path) in self.recorded_files for path in paths):
                self.steps[key] = _Step(now)  # recorded by an earlier watch of this run (resumed)
                continue
            ready.append((key, paths))
        return ready

    def audit(self, key: str, paths: list[Path], idle: bool) -> Iterator[StepRecord]:
        """Read a step's files and audit each step they hold. Of a file holding several steps, only steps new or
        changed since they were last audited get a record; of a file that gains a step at a time
        (``Format.steps_appended``), the newest step waits for the next one, or for the run to go idle."""
        previous = self.steps.get(key)
        signatures = {path: self.files[path].signature for path in paths}
        names = tuple(str(path) for path in paths)
        appended = self.format is not None and FORMATS[self.format].steps_appended
        try:
            if appended:
                # A file that gains a step at a time: only its new lines are parsed, and no cache entry is made of
                # what changes at every step.
                with reading_appended(self.appended):
                    table = load(paths, replace(self.options, cache=False))
            else:
                table = load(paths, self.options)
            formats = loaded_formats(table)
            if self.format is not None and formats and formats != [self.format]:
                raise InputError(f"is a {'+'.join(formats)} dump in a {self.format} run", file=names[0])
        except RollauditError as error:
            self._warn(f"{error.line()}; step skipped")
            self.steps[key] = _Step(signatures)
            yield StepRecord(step=None, files=names, error=error.line(), replaces=previous is not None)
            return
        # Each step's rows, in step order (load gives each step's rows together); sliced only where audited.
        step_runs = _step_runs(table)
        runs = list(zip(*(array.tolist() for array in step_runs), strict=True))
        self.deferred.discard(key)
        if runs and FORMATS[self.format or formats[0]].steps_appended and not idle:
            self.deferred.add(key)  # its newest step may still be landing
            runs = runs[:-1]
        values = tuple(value for value, _, _ in runs)
        self.steps[key] = _Step(signatures, frozenset(values).union(previous.steps if previous is not None else ()))
        several = len(values) > 1 or key in self.deferred
        unchanged: set[int] = set()
        if appended:
            # The steps whose rows are those of the last read (one comparison of all of them, not one a step): a
            # file gains a step at a time, and its earlier steps are seldom touched.
            unchanged = _unchanged_steps(self.tables.get(key), (table, step_runs))
            self.tables[key] = table, step_runs
        for value, start, rows in runs:
            if several and value in unchanged and value in self.step_digests:
                continue  # its rows are those its digest was made of: unchanged since its record
            part = table if rows == table.num_rows else table.slice(start, rows)
            if several:
                digest, known = _digest(part), self.step_digests.get(value)
                self.step_digests[value] = digest
                if digest == known or (known is None and value in self.recorded_steps):
                    continue  # unchanged since its record (made here, or by the watch this one resumes)
            replaces = value in self.recorded_steps or (previous is not None and value in previous.steps)
            self.recorded_steps.add(value)
            record = self.audit_step(part, names)
            yield replace(
                record,
                step=value,
                replaces=replaces,
                scheme_changed=self._scheme_change(value, record),
                first_findings=self._first_findings(record),
            )

    def _first_findings(self, record: StepRecord) -> tuple[str, ...]:
        """The codes of ``record``'s findings that no step before it had, remembered from now on."""
        codes = [] if record.report is None else [finding.code for finding in record.report.findings]
        new = tuple(code for code in dict.fromkeys(codes) if code not in self.found_codes)
        self.found_codes.update(new)
        return new

    def _scheme_change(self, step: int, record: StepRecord) -> str | None:
        """``scheme changed at step N: was X, now Y`` where the step before this one trained with another scheme."""
        now = scheme_label(record.report.trained_with.to_dict()) if record.report is not None else None
        self.schemes[step] = now
        before = max((known for known in self.schemes if known < step), default=None)
        was = self.schemes.get(before) if before is not None else None
        if was is None or now is None or was == now:
            return None
        return f"scheme changed at step {step}: was {was}, now {now}"


def _step_runs(table: Any) -> tuple[Any, Any, Any]:
    """The steps of a table whose steps are contiguous (in step order): each one's value, first row and rows."""
    import numpy as np

    steps = np.asarray(table.column(STEP).to_numpy())
    starts = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]]) if len(steps) else np.zeros(0, dtype=np.int64)
    return steps[starts], starts, np.diff(np.r_[starts, len(steps)])


def _unchanged_steps(before: tuple[Any, Any] | None, now: tuple[Any, Any]) -> set[int]:
    """The steps whose rows in the table ``now`` are those they had in the table ``before`` (each in step order,
    given with its :func:`_step_runs`): every step of the same row count in both, where all of them compare equal
    at once; none otherwise (then each step is compared by its digest)."""
    import numpy as np
    import pyarrow as pa

    table, (new_steps, new_starts, new_counts) = now
    if before is None:
        return set()
    previous, (old_steps, old_starts, old_counts) = before
    if not previous.schema.remove_metadata().equals(table.schema.remove_metadata()):
        return set()
    common, old_at, new_at = np.intersect1d(old_steps, new_steps, assume_unique=True, return_indices=True)
    same_size = old_counts[old_at] == new_counts[new_at]
    common, old_at, new_at = common[same_size], old_at[same_size], new_at[same_size]
    counts = old_counts[old_at]
    prefix = int(counts.sum())
    tiled = int((old_starts[old_at] + counts).max(initial=0)) == prefix  # the steps fill the first rows
    if (
        tiled
        and np.array_equal(old_starts[old_at], new_starts[new_at])
        and previous.slice(0, prefix).equals(table.slice(0, prefix))
    ):
        return {int(step) for step in common}  # the usual case: the same first rows (NaNs compare unequal here)
    within = np.arange(prefix) - np.repeat(np.cumsum(counts) - counts, counts)
    old_rows = np.repeat(old_starts[old_at], counts) + within
    new_rows = np.repeat(new_starts[new_at], counts) + within
    if _digest(previous.take(pa.array(old_rows))) != _digest(table.take(pa.array(new_rows))):
        return set()
    return {int(step) for step in common}


def _digest(table: Any) -> bytes:
    """A fingerprint of a step's rows: equal digests, the same audit. The rows are copied first: a slice's buffers
    hold the rows around it too, and the IPC writer writes them."""
    import hashlib

    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema.remove_metadata()) as writer:
        writer.write_table(table.take(pa.array(range(table.num_rows), pa.int64())))
    return hashlib.blake2b(sink.getvalue().to_pybytes(), digest_size=16).digest()


def watch(
    path: str | os.PathLike[str],
    options: LoadOptions | None = None,
    *,
    schemes: Iterable[str] | None = None,
    reference: str | None = None,
    trained_with: str | None = None,
    rules: Any = None,
    device: str = "auto",
    until_idle: float | None = None,
    recorded: Sequence[Mapping[str, Any]] = (),
    settle: float = SETTLE_SECONDS,
) -> Iterator[StepRecord]:
    """Follow the run directory ``path`` as a trainer writes it, yielding a :class:`StepRecord` per step as each
    step's dump becomes whole: the audit ``rollaudit.audit`` gives for that step alone (its ``report``), and with
    ``rules`` (a :class:`~rollaudit.GateConfig` with rules) the gate's verdict.

    ``options``: how to load (:class:`~rollaudit.LoadOptions`); ``schemes``, ``reference``, ``trained_with``: as
    for ``audit`` (default: those of ``rules``, else ``rollaudit.DEFAULT_SCHEMES`` against ``prompt``).
    ``until_idle``: stop after that many seconds in which no dump appeared, changed or became whole (default:
    follow forever; the caller stops by closing the generator). ``recorded``: the records (JSON objects) of an
    earlier watch of this run: steps whose files they name are not audited again. A step that cannot be read
    gives a record with ``error`` and a warning, and the watch goes on. A missing ``path``, or one that is not a
    directory: InputError.

    >>> import rollaudit
    >>> records = rollaudit.watch("sample_dumps/verl_v1", until_idle=0)   # doctest: +SKIP
    >>> [(record.step, record.report.info["samples"]) for record in records]  # doctest: +SKIP
    [(3, 27)]
    """
    root = Path(path)
    if not root.exists():
        raise InputError("no such directory", file=str(root), expected="the run directory the trainer writes")
    if not root.is_dir():
        raise InputError("is not a directory", file=str(root), expected="the run directory the trainer writes")
    audit_step = _auditor(schemes, reference, trained_with, rules, device)
    follower = _Follower(root, options or LoadOptions(), audit_step, recorded, settle)
    wakeups = Wakeups(root, timer=POLL_SECONDS)
    last_change = time.monotonic()
    try:
        while True:
            now = time.monotonic()
            changed = follower.look(now)
            if changed:
                last_change = now
            settling = follower.settling(now)
            idle = until_idle is not None and now - last_change >= until_idle and not settling
            if changed or idle:  # nothing else can make a step ready
                for key, paths in follower.pending(idle):
                    yield from follower.audit(key, paths, idle)
            if idle and not follower.pending(True):
                return
            timeout = settle if settling else RESCAN_SECONDS
            if until_idle is not None:
                timeout = min(timeout, max(0.0, until_idle - (time.monotonic() - last_change)) + 0.01)
            if wakeups.wait(timeout) and settle > 0:
                # A burst of writes: let it finish before looking (each look after a write restarts the settling).
                time.sleep(min(settle, 0.05))
    finally:
        wakeups.close()


def _auditor(
    schemes: Iterable[str] | None, reference: str | None, trained_with: str | None, rules: Any, device: str
) -> Any:
    """The function that audits one step's table: ``compare``'s audit, and the gate's when rules are given."""
    from .._audit.api import DEFAULT_SCHEMES, audit
    from .._gate.config import GateConfig, schemes_needed
    from .._gate.evaluate import run_gate

    config = rules if isinstance(rules, GateConfig) else GateConfig()
    names = list(schemes) if schemes is not None else list(config.schemes or DEFAULT_SCHEMES)
    reference_name = reference or config.reference_name
    chosen = trained_with or config.trained_with
    gated = config.has_rules
    if gated:
        # compare's schemes and those the rules measure, in one audit
        config = replace(config, schemes=tuple(dict.fromkeys([*names, *schemes_needed(config)])))
        if reference is not None:
            config = replace(config, reference=reference)
        if trained_with is not None:
            config = replace(config, trained_with=trained_with)

    def audit_step(table: Any, files: tuple[str, ...]) -> StepRecord:
        if gated:
            result = run_gate(table, config, device)
            return StepRecord(step=None, files=files, report=result.report, gate=result)
        report = audit(table, names, reference=reference_name, device=device, trained_with=chosen)
        return StepRecord(step=None, files=files, report=report)

    return audit_step
