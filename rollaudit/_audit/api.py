"""The notebook API: recompute advantages and audit schemes against a reference.

table -> encode (codes on one device) -> advantages per scheme -> metrics -> Report.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from .._errors import SchemeError
from .._table import PROMPT, TRAJECTORY, facts_in, found_in, loaded_formats, notes_in, validate_table
from .fit import DEFAULT_RECORDED_TOLERANCE, candidate_schemes, detect_encoded, has_recorded, recorded_values
from .report import RECORDED_ROW, Report
from .schemes import Scheme, get_scheme, split_schemes
from .trained import TrainedWith, from_config, from_recorded

if TYPE_CHECKING:
    import torch

    from .encode import Encoded
    from .tally import Tally

DEFAULT_SCHEMES = ("batch", "prompt", "trajectory")
SchemeList = str | Scheme | Iterable[str | Scheme]


def named_scheme(spec: str | Scheme) -> Scheme:
    """``get_scheme``, refusing the one name a scheme cannot take: ``recorded`` is the dump's own advantages."""
    scheme = get_scheme(spec.strip() if isinstance(spec, str) else spec)
    if str(scheme) == RECORDED_ROW:
        raise SchemeError(
            f"a scheme cannot be named {RECORDED_ROW!r}: that row holds the advantages recorded in the dump",
            expected="another name for the Scheme",
        )
    return scheme


def resolve_schemes(schemes: SchemeList) -> dict[str, Scheme]:
    """Scheme strings (or Schemes) to ``{name: Scheme}``, in order, duplicates dropped."""
    if isinstance(schemes, (str, Scheme)):
        schemes = split_schemes(schemes) if isinstance(schemes, str) else [schemes]
    resolved: dict[str, Scheme] = {}
    for item in schemes:
        scheme = named_scheme(item)
        resolved.setdefault(str(scheme), scheme)
    if not resolved:
        raise SchemeError("no scheme given", expected="at least one scheme string, e.g. prompt")
    return resolved


def _advantages(table: pa.Table, schemes: dict[str, Scheme], device: str) -> tuple[object, dict[str, torch.Tensor]]:
    from .encode import encode
    from .kernel import advantages_of

    encoded = encode(table, device)
    return encoded, advantages_of(encoded, schemes)


def recompute(table: pa.Table, schemes: SchemeList = DEFAULT_SCHEMES, device: str = "auto") -> pa.Table:
    """One float64 advantage column per scheme, named by the scheme string as given, in row order.

    NaN marks an undefined advantage (a NaN/inf reward, or a one-member group
    under a scheme whose framework produced NaN there).

    >>> import rollaudit
    >>> t = rollaudit.make_table(reward=[1.0, 3.0, 5.0], prompt=[0, 0, 1])
    >>> rollaudit.recompute(t, ["prompt(scale=none)"]).column(0).to_pylist()
    [-1.0, 1.0, 0.0]
    """
    table = validate_table(table)
    resolved = resolve_schemes(schemes)
    _, values = _advantages(table, resolved, device)
    return pa.table({name: pa.array(tensor.cpu().numpy()) for name, tensor in values.items()})


def trajectory_limit(table: pa.Table) -> str | None:
    """Why schemes over trajectories cannot be audited on ``table`` (no row has a trajectory key), else None."""
    if table.column(TRAJECTORY).null_count < table.num_rows or table.num_rows == 0:
        return None
    reason = facts_in(table).get("no_trajectory")
    return str(reason) if reason else "no sample has a trajectory key, so no trajectory can be counted once"


def _needs_trajectories(scheme: Scheme) -> bool:
    return scheme.members == "trajectories" or scheme.group_by == TRAJECTORY


def audit(
    table: pa.Table,
    schemes: SchemeList = DEFAULT_SCHEMES,
    reference: str | Scheme = "prompt",
    device: str = "auto",
    tol: float = 1e-6,
    recorded_tolerance: float = DEFAULT_RECORDED_TOLERANCE,
    recorded_schemes: Iterable[str | Scheme] = (),
    keep_advantages: bool = False,
    trained_with: str | Scheme | None = None,
) -> Report:
    """Recompute ``schemes`` and the ``reference`` and measure how far each is from the reference.

    When the table holds recorded advantages (the trainer's own), they are audited like one more scheme,
    in a row named ``recorded`` (of ``summary``, ``per_step`` and the per-prompt columns; rows without a
    recorded value count as ``undefined``), and ``Report.recorded`` says which preset they come from
    (:func:`rollaudit.detect_scheme`, within ``recorded_tolerance``, fitting every candidate preset and
    the audited schemes, and ``recorded_schemes``). Without recorded advantages nothing is fitted and
    ``Report.recorded`` is None. ``keep_advantages``: keep every scheme's advantages in
    ``Report.advantages`` (for plots; a float64 column per scheme, in row order).

    ``Report.trained_with`` says which scheme the run trained with: the preset the recorded advantages match,
    else ``trained_with`` (the scheme the caller names), else the loader's default preset for the dump's
    framework, layout and version (an assumption, said as one), else unknown; a named or default scheme is
    audited in its own row. A scheme the dump cannot support (a key or field it lacks, per-step rewards where
    one reward per trajectory is needed) is not computed: ``Report.not_auditable`` lists it with the reason.

    >>> import rollaudit
    >>> t = rollaudit.make_table(reward=[0, 1, 0, 0], prompt=[0, 0, 1, 1])
    >>> int(rollaudit.audit(t).summary.loc["batch", "spurious_nonzero"])
    2
    """
    import torch

    from .encode import encode
    from .kernel import scheme_notes, start_advantages
    from .metrics import (
        group_columns,
        group_rows,
        histograms,
        scheme_columns,
        step_group_sizes,
        with_trajectories,
    )
    from .tally import Layout, Reference, start_tallies
    from .threads import SideBySide

    started = time.perf_counter()
    table = validate_table(table)
    resolved = resolve_schemes(schemes)
    reference_scheme = named_scheme(reference)
    reference_name = str(reference_scheme)
    resolved.setdefault(reference_name, reference_scheme)
    given = None if trained_with is None else str(named_scheme(trained_with))
    recorded = has_recorded(table)
    trained = None if recorded else from_config(given, facts_in(table).get("trained_default"))
    if trained is not None and trained.scheme is not None:
        resolved.setdefault(trained.scheme, named_scheme(trained.scheme))
    not_auditable: dict[str, str] = {}
    no_trajectory = trajectory_limit(table)
    if no_trajectory is not None:
        for name, scheme in resolved.items():
            if _needs_trajectories(scheme):
                not_auditable[name] = no_trajectory
    if reference_name in not_auditable:
        raise SchemeError(f"the reference {reference_name} cannot be audited on this dump: {no_trajectory}")
    resolved = {name: scheme for name, scheme in resolved.items() if name not in not_auditable}
    n_for_groups = next((scheme.n for scheme in (reference_scheme, *resolved.values()) if scheme.n), None)
    encoded = encode(table, device)
    # One pool for the whole audit: the schemes, then a metric pass per scheme, each beside other work.
    with SideBySide(encoded.device, len(resolved) + 4) as work:
        start_advantages(work, encoded, resolved)
        # Meanwhile, what reads only what the schemes' threads read: the prompt groups' rows, steps and sizes,
        # and where the passes count (trajectories wait for a trajectory scheme's own units).
        try:
            groups, unavailable = group_rows(encoded, n_for_groups), None
        except SchemeError as error:
            groups, unavailable = None, error.line()
        layout = (
            Layout.of(encoded)
            if groups is None
            else Layout.of(encoded, groups.group, groups.count, groups.present, groups.step, groups.largest)
        )
        # The reference's signs, and its squares every pass shares, as soon as its advantages are there.
        work.start(Reference, lambda: Reference.of(work.result(reference_name), tol).with_squares(layout))
        # A scheme that cannot run on this dump is listed with its reason; the reference must run.
        for name in list(resolved):
            try:
                work.result(name)
            except SchemeError as error:
                if name == reference_name:
                    raise SchemeError(
                        f"the reference {reference_name} cannot be audited on this dump: {error.message}",
                        expected=error.expected,
                    ) from None
                reason = error.message.removeprefix(f"{name}: ")  # the list names the scheme itself
                not_auditable[name] = reason + (f" (expected {error.expected})" if error.expected else "")
                del resolved[name]
        values = work.results(resolved)

        detection = None
        if recorded:
            # Fit before the recorded column joins ``values``: every audited scheme is a candidate too, and its
            # advantages are reused rather than recomputed. Presets first, so that they win exact ties.
            presets = candidate_schemes(table)
            if no_trajectory is not None:  # no preset is fitted over trajectories the dump cannot tell apart
                presets = [name for name in presets if not _needs_trajectories(get_scheme(name))]
            candidates = [*presets, *values, *recorded_schemes, *([given] if given else [])]
            detection = detect_encoded(encoded, table, candidates, recorded_tolerance, computed=values)
            trained = from_recorded(detection, given, RECORDED_ROW)
            recorded_tensor = torch.from_numpy(recorded_values(table)).to(encoded.device)
            values = {**values, RECORDED_ROW: recorded_tensor}

        # One pass per scheme, counted per prompt group: the steps' counts, the run's and the prompts' come from
        # it. Beside the passes, what the prompt groups alone give.
        if groups is not None:  # first: what waits for it starts after the passes
            work.start(with_trajectories, partial(with_trajectories, encoded, groups))
        start_tallies(work, values, work.result(Reference), layout, tol)
        if groups is not None:
            for task in (step_group_sizes, group_columns):
                work.start(task, lambda task=task: task(encoded, work.result(with_trajectories)))
            work.start(histograms, lambda: histograms(work.result(with_trajectories)))
            work.start(
                scheme_columns, lambda groups=groups: scheme_columns(groups, work.results(values), reference_name)
            )
        info = _info(table, encoded)
        if unavailable is not None:
            info["per_prompt_unavailable"] = unavailable
        # The run's and the steps' frames here, while the pool makes the prompts' columns.
        summary, per_step = _summary_and_steps(encoded, work.results(values))
        if groups is not None:
            by_group = work.results([with_trajectories, step_group_sizes, group_columns, histograms, scheme_columns])
            groups = by_group[with_trajectories]

    if groups is None:
        group_histograms: dict[str, dict[int, int]] = {}
        prompts = step_groups = pd.DataFrame()
    else:
        group_histograms = by_group[histograms]
        # The columns are this audit's own arrays: the frame takes them as they are (no copy into 2-D blocks).
        columns = {**by_group[group_columns], **by_group[scheme_columns]}
        prompts = pd.DataFrame(columns, copy=False)
        info["prompts"] = len(prompts)
        info["trajectories"] = int(groups.trajectories.sum())
        step_groups = pd.DataFrame(by_group[step_group_sizes])
        if not step_groups.empty:
            step_groups = step_groups.set_index("step")
    if no_trajectory is not None:
        # Without a trajectory key a count of trajectories would be a count of samples: none is stated.
        info["trajectories"] = None
        group_histograms = {name: sizes for name, sizes in group_histograms.items() if "trajector" not in name}
        prompts = prompts.drop(columns=["trajectories"], errors="ignore")
        step_groups = step_groups.drop(columns=["trajectories"], errors="ignore")

    notes = {name: scheme_notes(encoded, scheme) for name, scheme in resolved.items()}
    if any(notes.values()):
        info["scheme_notes"] = {name: lines for name, lines in notes.items() if lines}
    assert trained is not None
    residues = _trained_residues(encoded, trained, not_auditable, tol, values.get(str(trained.scheme)))
    if residues is not None:
        info["rounding_residues"] = residues
    info["device"] = str(encoded.device)
    info["seconds"] = round(time.perf_counter() - started, 6)
    if trained.row is not None and trained.row in not_auditable:
        trained = replace(trained, row=None)
    return Report(
        reference=reference_name,
        schemes=list(resolved),
        not_auditable=not_auditable,
        trained_with=trained,
        summary=summary,
        per_step=per_step,
        per_prompt=prompts,
        histograms=group_histograms,
        info=info,
        detection=detection,
        step_groups=step_groups,
        advantages=(
            pa.table({name: pa.array(tensor.cpu().numpy()) for name, tensor in values.items()})
            if keep_advantages
            else None
        ),
    )


def _trained_residues(
    encoded: Encoded,
    trained: TrainedWith,
    not_auditable: dict[str, str],
    tol: float,
    computed: torch.Tensor | None,
) -> dict | None:
    """What the run's own rounding made non-zero that exact arithmetic leaves zero, JSON-ready; None when nothing
    (or the run's scheme is exact, unknown or not auditable). ``computed``: its advantages where the audit made
    them (a given or default scheme's row)."""
    from .rounding import rounding_residues

    if trained.scheme is None or trained.scheme in not_auditable:
        return None
    residues = rounding_residues(encoded, trained.scheme, tol, computed)
    return None if residues is None else {"scheme": trained.scheme, **residues._asdict()}


def _summary_and_steps(encoded: Encoded, tallies: dict[str, Tally]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``Report.summary`` (a row per scheme) and ``Report.per_step`` (a row per step and scheme) from the passes."""
    from .metric_names import COUNT_METRICS, METRICS
    from .metrics import metrics_of

    summary_rows, step_rows = {}, []
    for name, scheme in tallies.items():
        by_step = metrics_of(scheme.per_step)
        total = by_step if encoded.steps == 1 else metrics_of(scheme.per_step.whole())
        summary_rows[name] = {metric: total[metric][0] for metric in METRICS}
        for position, step in enumerate(encoded.step_values):
            step_rows.append(
                {"step": int(step), "scheme": name, **{metric: by_step[metric][position] for metric in METRICS}}
            )
    summary = pd.DataFrame.from_dict(summary_rows, orient="index", columns=list(METRICS))
    summary.index.name = "scheme"
    per_step = pd.DataFrame(step_rows, columns=["step", "scheme", *METRICS]).set_index(["step", "scheme"])
    counts = [metric for metric in METRICS if metric in COUNT_METRICS]
    summary[counts] = summary[counts].astype("int64")
    per_step[counts] = per_step[counts].astype("int64")
    return summary, per_step


def _info(table: pa.Table, encoded: object) -> dict:
    """Counts and data issues: how many samples, steps, keys present, non-finite rewards."""
    rewards = encoded.reward
    nonfinite = [] if encoded.all_finite else (~encoded.finite).nonzero().flatten().cpu().numpy()
    info = {
        "samples": int(encoded.rows),
        "steps": int(encoded.steps),
        "step_values": [int(step) for step in encoded.step_values],
        "prompts": 0,
        "trajectories": 0,
        "with_prompt_key": int(table.num_rows - table.column(PROMPT).null_count),
        "with_trajectory_key": int(table.num_rows - table.column(TRAJECTORY).null_count),
        "nonfinite_rewards": len(nonfinite),
    }
    if len(nonfinite):
        info["nonfinite_rows"] = [int(row) for row in nonfinite[:20]]
        info["nonfinite_values"] = [str(float(rewards[row])) for row in nonfinite[:20]]
    # What the loader found, in the framework's own words: how the samples were grouped, what was left out.
    formats = loaded_formats(table)
    if formats:
        info["formats"] = formats
    found, notes = found_in(table), notes_in(table)
    if found:
        info["found"] = found
    if notes:
        info["loader_notes"] = notes
    return info
