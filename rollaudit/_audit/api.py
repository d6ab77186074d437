"""The notebook API: recompute advantages and audit schemes against a reference.

table -> encode (codes on one device) -> advantages per scheme -> metrics -> Report.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .._errors import SchemeError
from .._memory import with_small_pages
from .._table import (
    NOT_TRAINED,
    PROMPT,
    REWARD,
    STEP,
    TRAJECTORY,
    advantage_column,
    facts_in,
    found_in,
    loaded_formats,
    notes_in,
    validate_table,
)
from .columns import Columns
from .findings.detect import run_findings
from .presets import DEFAULT_SCHEMES, get_scheme, split_schemes
from .report import RECORDED_ROW, Distributions, Report
from .schemes import Scheme
from .trained_with.fit import (
    DEFAULT_RECORDED_TOLERANCE,
    candidate_schemes,
    detect_by_cells,
    has_recorded,
    recorded_values,
)
from .trained_with.partial import PartialGroups, partial_groups
from .trained_with.parts import split_parts
from .trained_with.trained import TrainedWith, config_said, from_config, from_recorded, whole_run

if TYPE_CHECKING:
    import torch

    from .engine.encode import Encoded
    from .engine.tally import Tally
    from .metrics import Groups
    from .trained_with.fit import Detection

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
    from .engine.encode import encode
    from .kernel import advantages_of

    encoded = encode(table, device)
    return encoded, advantages_of(encoded, schemes)


def trained_rows(table: pa.Table) -> tuple[pa.Table, list[dict[str, Any]]]:
    """The rows the framework gave an advantage, and what was left out: per reason of the ``not_trained`` column
    (in first-seen order), its ``rows`` and its prompt ``groups`` (a (step, prompt) each)."""
    if NOT_TRAINED not in table.column_names or table.column(NOT_TRAINED).null_count == table.num_rows:
        return table, []
    import pyarrow.compute as pc

    reasons = table.column(NOT_TRAINED).cast(pa.string())
    trained = pc.is_null(reasons)
    left_out = table.filter(pc.invert(trained)).select([NOT_TRAINED, STEP, PROMPT])
    groups = left_out.group_by([NOT_TRAINED, STEP, PROMPT], use_threads=False).aggregate([([], "count_all")])
    per_reason = groups.group_by([NOT_TRAINED], use_threads=False).aggregate(
        [("count_all", "sum"), ("count_all", "count")]
    )
    counted = {
        reason: {"reason": reason, "rows": int(rows), "groups": int(count)}
        for reason, rows, count in zip(
            per_reason.column(NOT_TRAINED).to_pylist(),
            per_reason.column("count_all_sum").to_pylist(),
            per_reason.column("count_all_count").to_pylist(),
            strict=True,
        )
    }
    order = dict.fromkeys(left_out.column(NOT_TRAINED).unique().to_pylist())
    return table.filter(trained), [counted[reason] for reason in order]


def recompute(table: pa.Table, schemes: SchemeList = DEFAULT_SCHEMES, device: str = "auto") -> pa.Table:
    """One float64 advantage column per scheme, in row order, named ``advantage:`` and the scheme string as given
    (``advantage:prompt``, ``advantage:prompt(scale=none)``): no name of the table's own, so that the result joins
    the table it comes from (``table.to_pandas().join(recompute(table).to_pandas())``).

    NaN marks an undefined advantage (a NaN/inf reward, or a one-member group
    under a scheme whose framework produced NaN there).

    >>> import rollaudit
    >>> t = rollaudit.make_table(reward=[1.0, 3.0, 5.0], prompt=[0, 0, 1])
    >>> advantages = rollaudit.recompute(t, ["prompt(scale=none)"])
    >>> advantages.column_names
    ['advantage:prompt(scale=none)']
    >>> advantages.column(0).to_pylist()
    [-1.0, 1.0, 0.0]
    """
    table = validate_table(table)
    resolved = resolve_schemes(schemes)
    trained, left_out = trained_rows(table)
    _, values = _advantages(trained, resolved, device)
    if not left_out:
        return pa.table({advantage_column(name): pa.array(tensor.cpu().numpy()) for name, tensor in values.items()})
    # The rows the framework gave no advantage get none (NaN), in their places.
    import pyarrow.compute as pc

    at = np.flatnonzero(pc.is_null(table.column(NOT_TRAINED)).to_numpy(zero_copy_only=False))
    columns = {}
    for name, tensor in values.items():
        column = np.full(table.num_rows, np.nan)
        column[at] = tensor.cpu().numpy()
        columns[advantage_column(name)] = pa.array(column)
    return pa.table(columns)


def trajectory_limit(table: pa.Table) -> str | None:
    """Why schemes over trajectories cannot be audited on ``table`` (no row has a trajectory key), else None."""
    if table.column(TRAJECTORY).null_count < table.num_rows or table.num_rows == 0:
        return None
    reason = facts_in(table).get("no_trajectory")
    return str(reason) if reason else "no sample has a trajectory key, so no trajectory can be counted once"


def _needs_trajectories(scheme: Scheme) -> bool:
    return scheme.members == "trajectories" or scheme.group_by == TRAJECTORY


def needs_step(scheme: Scheme) -> bool:
    """Whether a scheme reads the whole step (one group, a batch-wide std, slices of the batch, a whitening)."""
    return scheme.groups != "prompt" or scheme.std_over == "batch" or scheme.whiten != "none"


@dataclass
class _Plan:
    """What an audit computes: the schemes (by name, the reference among them), what the run trained with as far
    as the table's facts tell, and the schemes the dump cannot support (each with its reason)."""

    schemes: dict[str, Scheme]
    reference: str
    given: str | None
    trained: TrainedWith | None
    not_auditable: dict[str, str]
    no_trajectory: str | None
    recorded: bool
    prompt_n: int | None  # the n the prompt groups slice keyless steps by


def _plan(table: pa.Table, schemes: SchemeList, reference: str | Scheme, trained_with: str | Scheme | None) -> _Plan:
    resolved = resolve_schemes(schemes)
    reference_scheme = named_scheme(reference)
    reference_name = str(reference_scheme)
    resolved.setdefault(reference_name, reference_scheme)
    given = None if trained_with is None else str(named_scheme(trained_with))
    recorded = has_recorded(table)
    trained = None if recorded else from_config(given, facts_in(table).get("trained_default"))
    if trained is not None and trained.scheme is not None:
        resolved.setdefault(trained.scheme, named_scheme(trained.scheme))
    no_trajectory = trajectory_limit(table)
    no_step = facts_in(table).get("no_step")
    not_auditable = {
        name: no_trajectory for name, scheme in resolved.items() if no_trajectory and _needs_trajectories(scheme)
    }
    if isinstance(no_step, str):
        not_auditable.update({name: no_step for name, scheme in resolved.items() if needs_step(scheme)})
    if reference_name in not_auditable:
        raise SchemeError(
            f"the reference {reference_name} cannot be audited on this dump: {not_auditable[reference_name]}"
        )
    return _Plan(
        schemes={name: scheme for name, scheme in resolved.items() if name not in not_auditable},
        reference=reference_name,
        given=given,
        trained=trained,
        not_auditable=not_auditable,
        no_trajectory=no_trajectory,
        recorded=recorded,
        prompt_n=next((scheme.n for scheme in (reference_scheme, *resolved.values()) if scheme.n), None),
    )


# The audit's tasks besides each scheme's own (named by its scheme string, which never holds a space).
REFERENCE = "the reference"
PROMPT_GROUPS = "prompt groups"
STEP_GROUP_SIZES = "step group sizes"
GROUP_COLUMNS = "group columns"
HISTOGRAMS = "histograms"
SCHEME_COLUMNS = "scheme columns"
DISTRIBUTIONS = "distributions"
_GROUP_TASKS = (STEP_GROUP_SIZES, GROUP_COLUMNS, HISTOGRAMS, SCHEME_COLUMNS)


@dataclass
class _Computed:
    """What the audit's tasks made."""

    values: dict[str, torch.Tensor]  # the advantages kept: every row's where asked for (the recorded ones last),
    # else the run's own scheme's where the audit made them
    tallies: dict[str, Tally]
    trained: TrainedWith
    detection: Detection | None
    groups: Groups | None  # the prompt groups, with their trajectories; None where the dump has none to tell
    groups_unavailable: str | None  # why not
    group_results: dict[str, Any]  # by task: step group sizes, group columns, histograms, scheme columns
    distributions: Distributions | None


def _compute(
    encoded: Encoded,
    table: pa.Table,
    plan: _Plan,
    tol: float,
    recorded_tolerance: float,
    recorded_schemes: Iterable[str | Scheme],
    keep_advantages: bool,
) -> _Computed:
    """Run the audit's tasks on one pool, each beside other work: the schemes' advantages (meanwhile the prompt
    groups), then a metric pass per scheme and the distributions, then, the advantages let go (but where kept), the
    per-prompt rows. A scheme the dump cannot support leaves ``plan.schemes`` for ``plan.not_auditable``, with its
    reason; the reference must run."""
    import torch

    from .engine.tally import Layout, Reference, start_tallies
    from .engine.threads import SideBySide
    from .kernel import start_advantages
    from .metrics import group_columns, group_rows, histograms, scheme_columns, step_group_sizes, with_trajectories

    schemes, reference = plan.schemes, plan.reference
    with SideBySide(encoded.device, len(schemes) + 4) as work:
        start_advantages(work, encoded, schemes)
        # Meanwhile, what reads only what the schemes' threads read: the prompt groups' rows, steps and sizes,
        # and where the passes count (trajectories wait for a trajectory scheme's own units).
        groups: Groups | None
        try:
            groups, unavailable = group_rows(encoded, plan.prompt_n), None
        except SchemeError as error:
            groups, unavailable = None, error.line()
        layout = (
            Layout.of(encoded)
            if groups is None
            else Layout.of(encoded, groups.group, groups.count, groups.present, groups.step, groups.largest)
        )
        # The reference's signs, and its squares every pass shares, as soon as its advantages are there.
        work.start(REFERENCE, lambda: Reference.of(work.result(reference), tol).with_squares(layout))
        for name in list(schemes):
            try:
                work.result(name)
            except SchemeError as error:
                if name == reference:
                    raise SchemeError(
                        f"the reference {reference} cannot be audited on this dump: {error.message}",
                        expected=error.expected,
                    ) from None
                reason = error.message.removeprefix(f"{name}: ")  # the list names the scheme itself
                plan.not_auditable[name] = reason + (f" (expected {error.expected})" if error.expected else "")
                del schemes[name]
        values: dict[str, torch.Tensor] = work.results(schemes)

        detection, trained = None, plan.trained
        if plan.recorded:
            # Fit before the recorded column joins ``values``: every audited scheme is a candidate too, and its
            # advantages are reused rather than recomputed. Presets first, so that they win exact ties.
            presets = candidate_schemes(table)
            if plan.no_trajectory is not None:  # no preset is fitted over trajectories the dump cannot tell apart
                presets = [name for name in presets if not _needs_trajectories(get_scheme(name))]
            # The framework's own default first among the presets: where the recorded values cannot tell it from
            # another preset (open-instruct's centered GRPO is dr-grpo's arithmetic), the run's framework names it.
            default = (facts_in(table).get("trained_default") or {}).get("scheme")
            if default in presets:
                presets = [default, *(name for name in presets if name != default)]
            candidates = [*presets, *values, *recorded_schemes, *([plan.given] if plan.given else [])]
            cell_codes, where_labels = _part_cells(encoded, table)
            # The prompt groups already made, keyless rows (sliced by n there) in none: each row's tolerance scale.
            group_codes = None if groups is None else torch.where(encoded.prompt >= 0, groups.group, -1).cpu().numpy()
            detection, cells = detect_by_cells(
                encoded, table, candidates, recorded_tolerance, values, cell_codes, group_codes
            )
            parts = () if detection.matched or cells is None else split_parts(cells, encoded.step_values, where_labels)
            said = facts_in(table).get("trained_default")
            trained = from_recorded(detection, plan.given, RECORDED_ROW, parts, said)
            values[RECORDED_ROW] = torch.from_numpy(recorded_values(table)).to(encoded.device)

        # One pass per scheme, counted per prompt group: the steps', the run's and the prompts' counts come from
        # it; beside the passes, the trajectories of the prompt groups, and the distributions of the advantages.
        if groups is not None:
            work.start(PROMPT_GROUPS, partial(with_trajectories, encoded, groups))
        start_tallies(work, values, work.result(REFERENCE), layout, tol)
        work.start(DISTRIBUTIONS, partial(_distributions, values, reference))
        tallies: dict[str, Tally] = work.results(values)
        distributions = work.result(DISTRIBUTIONS)
        # Every pass has read the advantages: they are let go (the reference's too) before the per-prompt rows are
        # made, but where they are kept, and the run's own scheme's (its rounding residues read them).
        work.forget(REFERENCE)
        assert trained is not None
        held = values if keep_advantages else {name: values[name] for name in [str(trained.scheme)] if name in values}
        del values
        if groups is not None:
            work.start(STEP_GROUP_SIZES, lambda: step_group_sizes(encoded, work.result(PROMPT_GROUPS)))
            work.start(GROUP_COLUMNS, lambda: group_columns(encoded, work.result(PROMPT_GROUPS)))
            work.start(HISTOGRAMS, lambda: histograms(work.result(PROMPT_GROUPS)))
            work.start(SCHEME_COLUMNS, lambda: scheme_columns(groups, tallies, reference))
        group_results = {} if groups is None else work.results([PROMPT_GROUPS, *_GROUP_TASKS])
    return _Computed(
        values=held,
        tallies=tallies,
        trained=trained,
        detection=detection,
        groups=group_results.pop(PROMPT_GROUPS, None),
        groups_unavailable=unavailable,
        group_results=group_results,
        distributions=distributions,
    )


def _part_cells(encoded: Encoded, table: pa.Table) -> tuple[np.ndarray | None, list[str] | None]:
    """Each row's cell for the fit per part (``where * steps + step``), and the label of each ``where`` (the
    values of the column the framework sets its estimator per, its ``estimator_per`` fact); (None, None) where a
    dump of one step and one such value has a single cell."""
    import pyarrow.compute as pc

    where_labels = None
    per = facts_in(table).get("estimator_per")
    steps = encoded.step.cpu().numpy().astype(np.int64, copy=False)
    if isinstance(per, str) and per in table.column_names:
        encoded_where = pc.dictionary_encode(table.column(per).combine_chunks())
        labels = [f"{per}={value}" for value in encoded_where.dictionary.to_pylist()]
        if encoded_where.null_count:
            labels.append(f"no {per}")
        if len(labels) > 1:
            where_labels = labels
            where = pc.fill_null(encoded_where.indices, len(labels) - 1).to_numpy(zero_copy_only=False)
            return where.astype(np.int64) * encoded.steps + steps, where_labels
    return (steps, None) if encoded.steps > 1 else (None, None)


@with_small_pages
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
    ``Report.recorded`` is None. ``keep_advantages``: keep every sample's advantages in ``Report.advantages``
    (for plots and :meth:`Report.prompt`): its ``step``, ``prompt``, ``trajectory`` and ``reward``, then a
    float64 column ``advantage:<scheme>`` per scheme (``advantage:recorded`` last, where the dump records
    advantages), in row order.

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
    from .engine.encode import encode
    from .kernel import scheme_notes

    started = time.perf_counter()
    every_row = validate_table(table)
    table, left_out = trained_rows(every_row)
    plan = _plan(table, schemes, reference, trained_with)
    encoded = encode(table, device)
    partial = partial_groups(table)
    if partial is not None and not partial.whole:
        return _recorded_in_part(table, encoded, plan, partial, left_out, started)
    computed = _compute(encoded, table, plan, tol, recorded_tolerance, recorded_schemes, keep_advantages)

    info = _info(table, encoded)
    if left_out:
        info["not_trained"] = left_out
    if partial is not None:
        info["partial_groups"] = partial.to_dict()
    if computed.groups_unavailable is not None:
        info["per_prompt_unavailable"] = computed.groups_unavailable
    summary, per_step = _summary_and_steps(encoded, computed.tallies)
    prompts, step_groups, group_histograms = _prompt_tables(computed, info)
    if plan.no_trajectory is not None:
        # Without a trajectory key a count of trajectories would be a count of samples: none is stated.
        info["trajectories"] = None
        group_histograms = {name: sizes for name, sizes in group_histograms.items() if "trajector" not in name}
        prompts, step_groups = prompts.without("trajectories"), step_groups.without("trajectories")
    notes = {name: scheme_notes(encoded, scheme) for name, scheme in plan.schemes.items()}
    if any(notes.values()):
        info["scheme_notes"] = {name: lines for name, lines in notes.items() if lines}
    steps = np.asarray(encoded.step_values, dtype=np.int64)
    whole = (int(steps[0]), int(steps[-1])) if len(steps) else (0, 0)
    samples = computed.detection.rows if computed.detection is not None else int(encoded.rows)
    trained = whole_run(computed.trained, whole, samples)
    residues = _trained_residues(encoded, trained, plan.not_auditable, tol, computed.values.get(str(trained.scheme)))
    if residues is not None:
        info["rounding_residues"] = residues
    if trained.row is not None and trained.row in plan.not_auditable:
        trained = replace(trained, row=None)
    findings = run_findings(
        encoded,
        table,
        every_row if left_out else None,
        computed.detection,
        computed.values,
        trained,
        plan.reference,
        info,
        None if computed.groups is None else (computed.groups.group, computed.groups.count),
    )
    info["device"] = str(encoded.device)
    info["seconds"] = round(time.perf_counter() - started, 6)
    return Report(
        reference=plan.reference,
        schemes=list(plan.schemes),
        not_auditable=plan.not_auditable,
        trained_with=trained,
        summary_table=summary,
        per_step_table=per_step,
        per_prompt_table=prompts,
        histograms=group_histograms,
        info=info,
        detection=computed.detection,
        step_groups_table=step_groups,
        advantages=_kept_advantages(table, computed.values) if keep_advantages else None,
        distributions=computed.distributions,
        findings=findings,
    )


def _recorded_in_part(
    table: pa.Table,
    encoded: Encoded,
    plan: _Plan,
    partial: PartialGroups,
    left_out: list[dict[str, Any]],
    started: float,
) -> Report:
    """The report of a dump that holds part of its groups while their recorded advantages cover the whole group:
    no scheme recomputed from the dumped rows is auditable; the run's scheme is the one its recorded values are
    consistent with on every group, and said so."""
    reason = partial.reason()
    not_auditable = {**{name: reason for name in plan.schemes}, **plan.not_auditable}
    groups = f"{partial.groups:,} group{'s' if partial.groups != 1 else ''}"
    if partial.scheme is None:
        why = f"the recorded advantages are consistent with no preset on every one of the {groups}"
        trained = TrainedWith(None, "recorded", why)
    else:
        scheme = get_scheme(partial.scheme)
        how = (
            "r - A is one value on every sibling, the whole group's mean"
            if scheme.scale == "none"
            else "r = m + s x A for one mean m and one scale s > 0 per group"
        )
        why = (
            f"the recorded advantages are consistent with it on every one of the {groups} ({how}); the dump holds "
            "part of each group, so that is consistency, not a reproduction"
        )
        not_auditable.setdefault(partial.scheme, reason)
        trained = config_said(TrainedWith(partial.scheme, "recorded", why), facts_in(table).get("trained_default"))
    steps = np.asarray(encoded.step_values, dtype=np.int64)
    trained = whole_run(trained, (int(steps[0]), int(steps[-1])) if len(steps) else (0, 0), int(encoded.rows))
    info = _info(table, encoded)
    info.update(prompts=partial.groups, trajectories=None, partial_groups=partial.to_dict())
    info["per_prompt_unavailable"] = reason
    if left_out:
        info["not_trained"] = left_out
    info["device"] = str(encoded.device)
    info["seconds"] = round(time.perf_counter() - started, 6)
    summary, per_step = _summary_and_steps(encoded, {})  # no scheme: no row
    return Report(
        reference=plan.reference,
        schemes=[],
        not_auditable=not_auditable,
        trained_with=trained,
        summary_table=summary,
        per_step_table=per_step,
        per_prompt_table=Columns({}),
        histograms={},
        info=info,
    )


def _distributions(values: dict[str, torch.Tensor], reference: str) -> Distributions | None:
    """Every row's finite advantages in ``Distributions.BINS`` bins between the lowest and the highest of them
    all, counted where they are (on the GPU when the audit ran there); the reference's row first. A row with a
    NaN or an infinity (``aminmax`` says so: both propagate) is counted over its finite values, copied while that
    row is measured and again while it is counted, one row at a time."""
    import torch

    names = [name for name in dict.fromkeys((reference, *values)) if name in values]
    masked: set[str] = set()  # the rows with a NaN or an infinity

    def floats(name: str) -> torch.Tensor:
        tensor = values[name]
        tensor = tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.to(torch.float64)
        return tensor[torch.isfinite(tensor)] if name in masked else tensor

    ranges = []
    for name in names:
        tensor = floats(name)
        if not tensor.numel():
            continue
        bounds = [float(bound) for bound in torch.aminmax(tensor)]
        if not all(map(math.isfinite, bounds)):
            masked.add(name)
            tensor = floats(name)
            if not tensor.numel():
                continue
            bounds = [float(bound) for bound in torch.aminmax(tensor)]
        ranges.append(bounds)
    if not ranges:
        return None
    low, high = min(bound[0] for bound in ranges), max(bound[1] for bound in ranges)
    if low == high:
        low, high = low - 0.5, high + 0.5
    bins = Distributions.BINS
    counts = {name: torch.histc(floats(name), bins=bins, min=low, max=high).to(torch.int64).tolist() for name in names}
    return Distributions(low=low, high=high, counts=counts)


def _kept_advantages(table: pa.Table, values: dict[str, torch.Tensor]) -> pa.Table:
    """``Report.advantages``: each sample's keys and reward, named as in the table, then its advantages."""
    keys = {name: table.column(name) for name in (STEP, PROMPT, TRAJECTORY, REWARD)}
    return pa.table(
        {**keys, **{advantage_column(name): pa.array(tensor.cpu().numpy()) for name, tensor in values.items()}}
    )


def _prompt_tables(computed: _Computed, info: dict[str, Any]) -> tuple[Columns, Columns, dict[str, dict[int, int]]]:
    """``Report.per_prompt``, ``Report.step_groups`` (as columns) and the group-size histograms (empty without
    prompt groups); ``info`` gets the counts of prompts and trajectories."""
    groups, results = computed.groups, computed.group_results
    if groups is None:
        return Columns({}), Columns({}), {}
    prompts = Columns({**results[GROUP_COLUMNS], **results[SCHEME_COLUMNS]})
    info["prompts"] = len(prompts)
    assert groups.trajectories is not None
    info["trajectories"] = int(groups.trajectories.sum())
    return prompts, Columns(results[STEP_GROUP_SIZES], ("step",)), results[HISTOGRAMS]


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


def _summary_and_steps(encoded: Encoded, tallies: dict[str, Tally]) -> tuple[Columns, Columns]:
    """``Report.summary`` (a row per scheme) and ``Report.per_step`` (a row per step and scheme) from the passes,
    as columns."""
    from .metric_names import COUNT_METRICS, METRICS
    from .metrics import metrics_of

    totals: dict[str, list[Any]] = {metric: [] for metric in METRICS}
    by_steps: dict[str, list[Any]] = {metric: [] for metric in METRICS}
    steps = np.asarray(encoded.step_values, dtype=np.int64)
    for scheme in tallies.values():
        by_step = metrics_of(scheme.per_step)
        total = by_step if encoded.steps == 1 else metrics_of(scheme.per_step.whole())
        for metric in METRICS:
            totals[metric].append(total[metric][0])
            by_steps[metric].append(by_step[metric])
    # Columns, never a Python object per step: a run may have as many steps as samples.
    names = [np.full(len(steps), name, dtype=object) for name in tallies]
    summary: dict[str, Any] = {"scheme": list(tallies)}
    per_step: dict[str, Any] = {
        "step": np.concatenate([steps] * len(tallies)) if tallies else steps[:0],
        "scheme": np.concatenate(names) if tallies else np.zeros(0, dtype=object),
    }
    for metric in METRICS:
        kind = np.int64 if metric in COUNT_METRICS else np.float64
        summary[metric] = np.array(totals[metric]).astype(kind, copy=False)
        values = np.concatenate(by_steps[metric]) if tallies else np.zeros(0)
        per_step[metric] = values.astype(np.int64, copy=False) if metric in COUNT_METRICS else values
    return Columns(summary, ("scheme",)), Columns(per_step, ("step", "scheme"))


def _info(table: pa.Table, encoded: Encoded) -> dict[str, Any]:
    """Counts and data issues: how many samples, steps, keys present, non-finite rewards."""
    rewards = encoded.reward
    nonfinite, first_nonfinite = 0, []
    if not encoded.all_finite:
        rows = (~encoded.finite).nonzero().flatten()
        nonfinite, first_nonfinite = rows.numel(), rows[:20].tolist()
    info: dict[str, Any] = {
        "samples": int(encoded.rows),
        "steps": int(encoded.steps),
        "step_values": np.asarray(encoded.step_values, dtype=np.int64).tolist(),
        "prompts": 0,
        "trajectories": 0,
        "with_prompt_key": int(table.num_rows - table.column(PROMPT).null_count),
        "with_trajectory_key": int(table.num_rows - table.column(TRAJECTORY).null_count),
        "nonfinite_rewards": nonfinite,
    }
    if nonfinite:
        info["nonfinite_rows"] = first_nonfinite
        info["nonfinite_values"] = [str(float(rewards[row])) for row in first_nonfinite]
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
