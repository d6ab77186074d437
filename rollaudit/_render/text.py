"""What every renderer says, as plain strings: numbers, labels, verdict sentences, prompt and step rows.

Pure functions of data already computed: a :class:`~rollaudit.Report`, the
``load`` summary (``format``, ``files``, ``bytes``, ``seconds``), or
``rollaudit.describe``'s dict. Nothing here computes a metric; it chooses
what to show and how to write it (rates as percentages, counts as ints,
undefined as ``n/a``). The terminal, Markdown and HTML renderers lay these
strings out, each in its own way.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._audit.report import RECORDED_ROW
from .._audit.trained_with.trained import part_label, parts_phrase
from .._errors import log_safe, visible

if TYPE_CHECKING:
    from .._audit.report import Report

NOT_AVAILABLE = "n/a"
HISTOGRAM_TITLES = {
    "samples_per_prompt": "samples / prompt",
    "trajectories_per_prompt": "trajectories / prompt",
    "samples_per_trajectory": "samples / trajectory",
}
_HISTOGRAM_ROWS = 8
_BAR_WIDTH = 10
_EIGHTHS = " ▏▎▍▌▋▊▉"
KEY_WIDTH = 24
_FOLDED_FIRST_COLUMN = 16
# A first column folded narrower than this is harder to read than a hidden column.
_FIRST_COLUMN_FLOOR = 14
# Presets shown in the fit table of recorded advantages: the match and the nearest misses tell the story.
_FIT_ROWS = 5
_EQUIVALENT_SHOWN = 3
# Advantages this close are the same numbers summed in another order (another CPU's kernels move a float64 advantage
# by units in its last place, 1e-16 at |A| ~ 1); two formulas differ by far more (an eps of 1e-8 is 1e-8 already).
_SAME_ADVANTAGES = 1e-12

# ---------------------------------------------------------------------------------------------------------------------
# Number formatting shared by the terminal and Markdown.


def undefined(value: Any) -> bool:
    """None, NaN or pandas' NA (a count with nothing counted): shown as n/a."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or type(value).__name__ == "NAType"


def percent(value: Any) -> str:
    """A rate as a percentage; never rounds a non-zero rate to 0% or a partial one to 100%."""
    if undefined(value):
        return NOT_AVAILABLE
    value = float(value)
    if 0 < value < 0.0005:
        return "<0.1%"
    if 0.9995 <= value < 1:
        return ">99.9%"
    return f"{value * 100:.1f}%"


def count(value: Any) -> str:
    """A count as an int with thousands separators."""
    return NOT_AVAILABLE if undefined(value) else f"{int(value):,}"


def ratio(value: Any) -> str:
    """An inflation factor, e.g. ``4.18×``."""
    return NOT_AVAILABLE if undefined(value) else f"{float(value):.2f}×"


def number(value: Any, digits: int = 3) -> str:
    """A float with ``digits`` significant digits."""
    if undefined(value):
        return NOT_AVAILABLE
    value = float(value)
    return "0" if value == 0 else f"{value:.{digits}g}"


def signed(value: Any) -> str:
    """A mean advantage: sign always shown, two decimals (tiny values read as 0)."""
    if undefined(value):
        return NOT_AVAILABLE
    value = float(value)
    return " 0.00" if abs(value) < 0.005 else f"{value:+.2f}"


def byte_size(value: int) -> str:
    """1234567 -> '1.2 MB'."""
    size = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"  # pragma: no cover - loop always returns


def plural(number_of: int, word: str, many: str | None = None) -> str:
    """``1 sample``, ``21 samples``."""
    return f"{number_of:,} {word if number_of == 1 else (many or word + 's')}"


# A key of comma-joined token ids (NeMo-RL groups by the prompt's tokens): unreadable as it is.
_TOKEN_IDS = re.compile(r"\d+(?:,\d+){2,}")


def token_key_label(value: str) -> str | None:
    """``'3552,6364,...'`` (token ids) -> ``'p:1a2b3c (12 tokens)'``: a short label that is the same for the same
    ids in every output; None for a key that is not a list of token ids."""
    if not _TOKEN_IDS.fullmatch(value):
        return None
    digest = hashlib.blake2b(value.encode(), digest_size=3).hexdigest()
    return f"p:{digest} ({value.count(',') + 1:,} tokens)"


def key_text(value: Any, width: int = KEY_WIDTH) -> str:
    """A prompt key, shortened to ``width`` characters (string keys can be whole prompts), escaped as every line
    rollaudit prints is (it may start a table row). Token ids show as :func:`token_key_label`."""
    if value is None:
        return "∅"
    folded = " ".join(str(value).split())
    text = token_key_label(folded) or log_safe(visible(folded))
    return text if len(text) <= width else text[: width - 1] + "…"


# The summary columns: (header, metric, formatter). ``nonzero_reference`` and ``compared`` go in the caption.
# Terminal headers take two lines (``\n``) so that the default three schemes fit in 100 columns. The headers
# speak SIGN_TERMS (sign changed: reversed, invented or lost); the JSON keys are the metrics' names
# (sign_flip_rate, strict_flip_rate, spurious_nonzero, lost_signal), whose descriptions use the same terms.
METRIC_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("sign\nchanged", "sign_flip_rate", percent),
    ("re-\nversed", "strict_flip_rate", percent),
    ("tokens\nchanged", "token_flip_rate", percent),
    ("non-\nzero", "nonzero", count),
    ("infla-\ntion", "nonzero_inflation", ratio),
    ("in-\nvented", "spurious_nonzero", count),
    ("lost", "lost_signal", count),
    ("cosine", "advantage_cosine", lambda value: number(value, 4)),
    ("max\n|ΔA|", "max_abs_diff", number),
    ("mean\n|ΔA|", "mean_abs_diff", number),
)


def one_line_header(header: str) -> str:
    """``'infla-\\ntion'`` -> ``'inflation'``, ``'sign\\nchanged'`` -> ``'sign changed'`` (Markdown headers)."""
    return header.replace("-\n", "").replace("\n(", "(").replace("\n", " ")


def has_undefined(report: Report) -> bool:
    table = report.summary_table
    return "undefined" in table.names and bool((table.floats("undefined") > 0).any())


def steps_label(values: Sequence[int]) -> str:
    """``step 3``, ``steps 0-9 (10)``, ``steps 0, 3, 5``."""
    values = sorted(values)
    if not values:
        return "no steps"
    if len(values) == 1:
        return f"step {values[0]}"
    if values[-1] - values[0] + 1 == len(values):
        return f"steps {values[0]}–{values[-1]} ({len(values)})"
    if len(values) <= 5:
        return "steps " + ", ".join(str(value) for value in values)
    return f"{len(values)} steps, {values[0]}–{values[-1]}"


def files_label(files: Sequence[str]) -> str:
    """The one file, or ``4 files in sample_dumps`` (their common directory)."""
    if not files:
        return "no files"
    if len(files) == 1:
        return visible(str(files[0]))
    try:
        common = os.path.commonpath([os.path.dirname(str(path)) or "." for path in files])
    except ValueError:  # absolute and relative paths mixed
        common = ""
    return f"{len(files)} files in {visible(common)}" if common else f"{len(files)} files"


def load_line(load: Mapping[str, Any]) -> str:
    """``slime, 62.3 KB, loaded in 0.32 s``."""
    parts = [str(load.get("format", "?"))]
    if load.get("bytes") is not None:
        parts.append(byte_size(load["bytes"]))
    if load.get("seconds") is not None:
        parts.append(f"loaded in {load['seconds']:.2f} s")
    return ", ".join(parts)


def source_line(load: Mapping[str, Any]) -> str:
    """``sample_dumps/fanout/rollout_data/3.pt (slime, 62.3 KB, loaded in 0.12 s)``."""
    return f"{files_label(load.get('files', []))} ({load_line(load)})"


def counts_line(report: Report, load: Mapping[str, Any] | None = None) -> str:
    """``step 3 · 88 samples · 8 prompts · 32 trajectories · audited on cpu in 0.04 s · 1.52 s in all``
    (the whole command's time when ``load`` has it)."""
    info = report.info
    trajectories = info.get("trajectories")
    parts = [
        steps_label(info.get("step_values", [])),
        plural(int(info.get("samples", 0)), "sample"),
        plural(int(info.get("prompts", 0)), "prompt"),
        *([] if trajectories is None else [plural(int(trajectories), "trajectory", "trajectories")]),
        f"audited on {info.get('device', '?')} in {info.get('seconds', 0):.2f} s",
    ]
    if load is not None and load.get("command_seconds") is not None:
        parts.append(f"{load['command_seconds']:.2f} s in all")
    return " · ".join(parts)


# The nouns of the loaders' counts (``found``), plural -> singular, for ``1 padding row left out``.
_COUNTED_NOUNS = {
    "samples": "sample",
    "rows": "row",
    "groups": "group",
    "trajectories": "trajectory",
    "prompts": "prompt",
    "tasks": "task",
    "sessions": "session",
    "outputs": "output",
}


def counted(number_of: int, what: str) -> str:
    """``3 padding rows left out``, ``1 padding row left out``: the first counted noun of ``what`` agrees."""
    words = what.split(" ")
    if number_of == 1:
        for index, word in enumerate(words):
            if word in _COUNTED_NOUNS:
                words[index] = _COUNTED_NOUNS[word]
                break
    return f"{number_of:,} {' '.join(words)}"


def found_lines(report: Report) -> list[str]:
    """What the loader found, one line per label: ``verl V1 (...): 40 prompts, 282 sessions, 392 outputs``; then
    the rows the framework gave no advantage, which the audit leaves out."""
    lines = [
        visible(f"{label}: " + ", ".join(counted(number_of, what) for what, number_of in counts.items()))
        for label, counts in report.info.get("found", {}).items()
    ]
    left_out = report.info.get("not_trained", [])
    if left_out:
        each = "; ".join(
            f"{plural(int(entry['rows']), 'row')} of {plural(int(entry['groups']), 'group')}: {entry['reason']}"
            for entry in left_out
        )
        lines.append(visible(f"not trained by the framework, so left out of every scheme and rate: {each}"))
    return lines


def notes(report: Report) -> list[str]:
    """Data issues worth a line: non-finite rewards, undefined advantages, missing per-prompt view."""
    info = report.info
    lines = [visible(line) for line in info.get("loader_notes", [])]
    lines += [line for scheme_lines in info.get("scheme_notes", {}).values() for line in scheme_lines]
    if info.get("nonfinite_rewards"):
        shown = info.get("nonfinite_rows", [])[:5]
        more = "…" if info["nonfinite_rewards"] > len(shown) else ""
        # Counted from 1, as every position rollaudit prints: the JSON keeps the 0-based row indices.
        rows = ("row " if len(shown) == 1 and not more else "rows ") + ", ".join(str(row + 1) for row in shown) + more
        lines.append(
            f"{plural(info['nonfinite_rewards'], 'sample')} with a NaN or infinite reward ({rows}); "
            "left out of every statistic and comparison"
        )
    # The recorded row's samples without a recorded value are counted by the recorded sentence, not here.
    undefined: dict[str, int] = {}
    if has_undefined(report):
        table = report.summary_table
        numbers = zip(table.labels, table.column("undefined").tolist(), strict=True)
        undefined = {scheme: number_of for scheme, number_of in numbers if scheme != RECORDED_ROW}
    if any(number_of > 0 for number_of in undefined.values()):
        where = [str(scheme) for scheme, number_of in undefined.items() if number_of > 0]
        under = "every scheme" if len(where) == len(undefined) else ", ".join(where)
        samples = plural(int(max(undefined.values())), "sample")
        lines.append(f"{samples} not compared: the advantage is undefined there (under {under})")
    if info.get("per_prompt_unavailable"):
        lines.append(f"no per-prompt view: {info['per_prompt_unavailable']}")
    return lines


def _plain(text: str) -> str:
    return text


def strict_flips(row: Mapping[str, Any]) -> int:
    """Samples pushed the opposite way (+ became − or back): the strict flip rate times the samples compared."""
    rate, compared = row["strict_flip_rate"], row["compared"]
    return 0 if undefined(rate) or undefined(compared) else round(float(rate) * int(compared))


SIGN_TERMS: tuple[tuple[str, str], ...] = (
    ("sign changed", "the advantage's sign (+, 0 or −) is not the reference's: reversed, invented or lost"),
    ("reversed", "+ became −, or − became +"),
    ("invented", "0 became + or − (the reference's 0: the prompt's rewards are all equal, no learning signal)"),
    ("lost", "+ or − became 0"),
)
"""The one vocabulary of sign changes, in every output (verdict, table, legends; the JSON keys'
descriptions): a sample's sign changed when it was reversed, invented or lost."""


def sign_terms_line() -> str:
    """The sign-change terms defined in one line, where a report first uses them."""
    return "; ".join(f"{term}: {meaning}" for term, meaning in SIGN_TERMS) + "."


def scheme_verdict(row: Mapping[str, Any], reference: str) -> str:
    """What a scheme does to the reference's advantages, in the terms of :data:`SIGN_TERMS`:
    ``sign changed on 53.8%: 0 reversed, 14 invented, 0 lost; 2.17× as many non-zero advantages``."""
    if undefined(row["sign_flip_rate"]):
        return f"nothing to compare with {reference}"
    reversed_, invented, lost = strict_flips(row), int(row["spurious_nonzero"]), int(row["lost_signal"])
    if row["sign_flip_rate"] == 0:
        if row["max_abs_diff"] <= _SAME_ADVANTAGES:
            return f"same signs as {reference}; identical advantages"
        differ = f"advantages differ by up to {number(row['max_abs_diff'])} (mean {number(row['mean_abs_diff'])})"
        return f"same signs as {reference}; {differ}"
    text = (
        f"sign changed on {percent(row['sign_flip_rate'])} of samples: {count(reversed_)} reversed, "
        f"{count(invented)} invented, {count(lost)} lost"
    )
    if not undefined(row["nonzero_inflation"]) and row["nonzero_inflation"] != 1:
        text += f"; {ratio(row['nonzero_inflation'])} as many non-zero advantages"
    return text


_EVIDENCE = {
    "recorded": "its recorded advantages",
    "given": "as given",
    "framework default": "assumed: the framework's default",
    "config": "from the run's config",
}


def trained_text(report: Report, code: Callable[[str], str] = _plain) -> str:
    """``trained with verl-grpo-v1 (assumed: the framework's default)``: the run's own scheme and the evidence
    for it, short; :func:`trained_why` says the rest."""
    trained = report.trained_with
    if trained.changed:
        return f"trained with {parts_phrase(trained.parts, code)}"
    if trained.scheme is None and trained.evidence == "recorded":
        return "trained with its own recorded advantages, which match no preset"
    if trained.scheme is None and trained.evidence == "config":
        return "trained with a scheme its run's config names, which this dump cannot reproduce"
    if trained.scheme is None:
        return "trained with an unknown scheme"
    evidence = _EVIDENCE[trained.evidence]
    if trained.row is None and trained.evidence == "recorded":  # values that only a whole group would reproduce
        evidence = f"consistent with {evidence}"
    text = f"trained with {code(trained.scheme)} ({evidence})"
    if trained.row is None:
        text += ", which this dump cannot audit"
    return text


def trained_why(report: Report) -> str:
    """Where the answer of :func:`trained_text` comes from, and what would confirm it: one sentence."""
    why = visible(report.trained_with.why)
    return why + ("" if why.endswith(".") else ".")


def part_lines(report: Report) -> list[str]:
    """One line per part of a run that trained with more than one scheme: ``steps 1-3: batch (why)``; none for a
    run of one part."""
    trained = report.trained_with
    if not trained.changed:
        return []
    lines = []
    for part in trained.parts:
        name = part.scheme or ("undetermined" if part.undetermined else "no preset")
        lines.append(visible(f"{part_label(part)}: {name} ({part.why})"))
    return lines


def verdict_title(report: Report, code: Callable[[str], str] = _plain) -> str:
    """The report's first sentence: which scheme the run trained with, and on what evidence; ``Against prompt:``
    where schemes were compared with the reference."""
    compared = verdicts(report)
    return f"Verdict: {trained_text(report, code)}." + (f" Against {code(report.reference)}:" if compared else "")


def trained_label(report: Report, scheme: str) -> str:
    """A verdict line's label: the run's own row is marked ``(trained)``."""
    return f"{scheme} (trained)" if scheme == report.trained_row else scheme


def verdicts(report: Report) -> list[str]:
    """``scheme: what it does`` against the reference: the run's own row first, then every other scheme."""
    trained = report.trained_row
    rows = [scheme for scheme in report.summary_table.labels if scheme != report.reference and scheme != trained]
    lines = []
    if trained is not None:
        if trained == report.reference:
            lines.append(f"{trained_label(report, trained)}: the reference itself: the run trained as it would")
        else:
            verdict = scheme_verdict(report.summary_table.row(trained), report.reference)
            lines.append(f"{trained_label(report, trained)}: {verdict}")
    lines += [f"{scheme}: {scheme_verdict(report.summary_table.row(scheme), report.reference)}" for scheme in rows]
    return lines


def rounding_line(report: Report) -> str | None:
    """``8 samples in constant-reward groups got |A| up to 3.2e-4 from float32 rounding (the defect ... fixes)``:
    advantages the run's own arithmetic made where exact arithmetic gives none."""
    residues = report.info.get("rounding_residues")
    if not residues:
        return None
    samples, constant = int(residues["samples"]), int(residues["in_constant_groups"])
    where = (
        " in constant-reward groups"
        if constant == samples
        else f" ({count(constant)} in constant-reward groups)"
        if constant
        else ""
    )
    fix = f" ({residues['fix']})" if residues.get("fix") else ""
    return (
        f"{plural(samples, 'sample')}{where} got |A| up to {small_number(residues['largest'])} from "
        f"{residues['dtype']} rounding in {residues['scheme']}, where exact arithmetic gives 0{fix}"
    )


def advice_lines(report: Report) -> list[str]:
    """What to change for the reference's behaviour (each with its source), under the verdict."""
    return [visible(line) for line in report.advice]


def not_auditable_groups(report: Report) -> list[tuple[list[str], str]]:
    """The schemes the dump cannot support, those that share a reason together: ``[(schemes, reason)]``."""
    by_reason: dict[str, list[str]] = {}
    for scheme, reason in report.not_auditable.items():
        by_reason.setdefault(reason, []).append(scheme)
    return [(schemes, reason) for reason, schemes in by_reason.items()]


def not_auditable_lines(report: Report) -> list[str]:
    """``scheme: why this dump cannot support it``; schemes that share a reason on one line (``batch, prompt:
    why``)."""
    return [visible(f"{', '.join(schemes)}: {reason}") for schemes, reason in not_auditable_groups(report)]


# ---------------------------------------------------------------------------------------------------------------------
# Recorded advantages: which preset the trainer's own advantages come from (``Report.recorded``).


def fit_error(value: Any) -> str:
    """A fit's error: two significant digits; None (inf in the report: one side NaN) as ∞."""
    return "∞" if value is None or (isinstance(value, float) and math.isinf(value)) else number(value, 2)


def small_number(value: Any) -> str:
    """A tolerance: ``1e-04``, ``1.5e-04``, ``0.002``."""
    if undefined(value):
        return NOT_AVAILABLE
    value = float(value)
    if value == 0 or value >= 1e-3:
        return number(value, 2)
    mantissa, _, exponent = f"{value:.1e}".partition("e")
    return f"{mantissa.removesuffix('.0')}e{exponent}"


def tolerance_text(recorded: Mapping[str, Any]) -> str:
    """``1e-04``, or ``1e-04 × max |recorded| = 1.5e-04`` when the tolerance was scaled to large advantages."""
    tolerance, allowed = float(recorded["tolerance"]), float(recorded["allowed_error"])
    if allowed == tolerance:
        return small_number(tolerance)
    return f"{small_number(tolerance)} × max |recorded| = {small_number(allowed)}"


def recorded_sentence(report: Report, code: Callable[[str], str] = _plain) -> str:
    """What the recorded advantages are, in one sentence: the preset they match (or the closest one, saying
    that none matches) and how their signs compare with the reference. ``code`` marks up scheme strings."""
    recorded = report.recorded or {}
    rows, samples = int(recorded.get("rows", 0)), int(report.info.get("samples", 0))
    subject = "recorded advantages" + (f" ({count(rows)} of {count(samples)} samples)" if rows < samples else "")
    fits = recorded.get("fits", [])
    best_match = recorded.get("best_match")
    equivalent = list(recorded.get("equivalent", []))
    if best_match is not None:
        text = f"{subject} match {code(best_match)} (max err {fit_error(fits[0]['max_error'])}"
        if equivalent:
            # Ties are named: the recorded values cannot tell these schemes apart on this table.
            shown = ", ".join(code(scheme) for scheme in equivalent[:_EQUIVALENT_SHOWN])
            more = len(equivalent) - _EQUIVALENT_SHOWN
            text += f"; the same numbers: {shown}" + (f" and {more} more" if more > 0 else "")
        text += ")"
    elif fits:
        closest = fits[0]
        text = (
            f"{subject} match no preset within {tolerance_text(recorded)}; closest: {code(closest['scheme'])} "
            f"({percent(closest['share_within_tolerance'])} of samples within tolerance, "
            f"max err {fit_error(closest['max_error'])})"
        )
    else:
        return f"{subject}: no preset can run on this table to compare them with"
    if best_match is not None and report.reference in (best_match, *equivalent):
        return text  # they are the reference's numbers: no sign can differ
    if RECORDED_ROW in report.summary_table.labels:
        flips = report.summary_table.value(RECORDED_ROW, "sign_flip_rate")
        if not undefined(flips):
            reference = code(report.reference)
            text += (
                f"; they have the same signs as {reference}"
                if flips == 0
                else f"; they differ in sign from {reference} on {percent(flips)} of samples"
            )
    return text


def recorded_fit_rows(report: Report, limit: int = _FIT_ROWS) -> tuple[str, list[str], list[list[str]]]:
    """(title, header, rows) of the best ``limit`` fits; an ``undefined`` column only where some fit has one."""
    recorded = report.recorded or {}
    fits = recorded.get("fits", [])
    shown = fits[:limit]
    with_undefined = any(fit.get("undefined") for fit in shown)
    within = f"within\n±{small_number(recorded.get('allowed_error'))}"
    header = ["scheme", "max err", "mean err", within, *(["unde-\nfined"] if with_undefined else [])]
    rows = []
    for fit in shown:
        row = [
            str(fit["scheme"]),
            fit_error(fit["max_error"]),
            fit_error(fit["mean_error"]),
            percent(fit["share_within_tolerance"]),
        ]
        rows.append(row + ([count(fit.get("undefined", 0))] if with_undefined else []))
    more = f" (best {len(shown)} of {len(fits)})" if len(shown) < len(fits) else ""
    # The tolerance itself heads the share column; how it was scaled is in the sentence when nothing matched.
    title = f"Fit of each preset to the recorded advantages{more}"
    return title, header, rows


# ---------------------------------------------------------------------------------------------------------------------
# Histograms: a few rows of (size label, count), bucketed when there are many sizes.


def histogram_rows(sizes: Mapping[int, int], max_rows: int = _HISTOGRAM_ROWS) -> list[tuple[str, int]]:
    """``{size: count}`` as at most ``max_rows`` rows; many sizes are bucketed into ranges ``lo–hi``."""
    ordered = sorted((int(size), int(number_of)) for size, number_of in sizes.items())
    if len(ordered) <= max_rows:
        return [(str(size), number_of) for size, number_of in ordered]
    rows = []
    per_row = math.ceil(len(ordered) / max_rows)
    for start in range(0, len(ordered), per_row):
        chunk = ordered[start : start + per_row]
        low, high = chunk[0][0], chunk[-1][0]
        rows.append((str(low) if low == high else f"{low}–{high}", sum(number_of for _, number_of in chunk)))
    return rows


def bar(value: int, largest: int, width: int = _BAR_WIDTH) -> str:
    """A horizontal bar in eighths of a character; any non-zero value shows at least a sliver."""
    if largest <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / largest * width * 8))
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def histogram_lines(sizes: Mapping[int, int], width: int = _BAR_WIDTH) -> list[str]:
    """``'    8 ████████   3'`` per row."""
    rows = histogram_rows(sizes)
    if not rows:
        return ["(none)"]
    largest = max(number_of for _, number_of in rows)
    label_width = max(len(label) for label, _ in rows)
    return [
        f"{label:>{label_width}} {bar(number_of, largest, width):<{width}} {number_of:,}" for label, number_of in rows
    ]


# ---------------------------------------------------------------------------------------------------------------------
# Prompt tables: the worst prompts and the silent ones, as rows of plain strings (shared by both renderers).


def _others(report: Report) -> list[str]:
    """The schemes compared with the reference in the prompt tables, and the recorded advantages when present."""
    others = [scheme for scheme in report.schemes if scheme != report.reference]
    if f"flips:{RECORDED_ROW}" in report.per_prompt_table.names:
        others.append(RECORDED_ROW)
    return others


# The per-prompt count columns' labels: ``flips`` counts any change of sign class, as the summary's "sign changed".
PROMPT_COUNT_LABELS = {"flips": "changed", "spurious": "invented"}


def prompt_rows(report: Report, prompts: Any, kind: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows for a per-prompt table; ``kind`` is ``flips`` (worst) or ``spurious`` (silent)."""
    multi_step = len(report.info.get("step_values", [])) > 1
    reference = report.reference
    # Two-line headers (scheme, then what): the Markdown renderer joins them with a space.
    counted = "trajectories" in prompts.names  # not where the dump has no trajectory key
    header = [*(["step"] if multi_step else []), "prompt", "samples", *(["traj."] if counted else [])]
    header += ["mean\nreward", f"{reference}\nĀ"]
    others = _others(report)
    label = PROMPT_COUNT_LABELS[kind]
    for scheme in others:
        header.append(f"{scheme}\n{label}")
        header.append(f"{scheme}\nĀ")
    rows = []
    for _, prompt in prompts.rows():
        row = [*([str(prompt["step"])] if multi_step else [])]
        row += [
            key_text(prompt["prompt"]),
            count(prompt["samples"]),
            *([count(prompt["trajectories"])] if counted else []),
            number(prompt["mean_reward"]),
            signed(prompt[f"mean_advantage:{reference}"]),
        ]
        for scheme in others:
            row.append(count(prompt[f"{kind}:{scheme}"]))
            row.append(signed(prompt[f"mean_advantage:{scheme}"]))
        rows.append(row)
    return header, rows


def prompt_sections(
    report: Report, top: int, fold_repeats: bool = False
) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the worst prompts and the silent prompts, empty sections (and ``top`` 0) left out.

    With ``fold_repeats``, silent prompts whose rows are the worst prompts' rows (the same prompts, counts and
    means: every sign change there is invented signal) are one title with no header and no rows."""
    if report.per_prompt_table.empty or top <= 0:
        return []
    sections = []
    total = len(report.per_prompt_table)
    worst_all = report.worst_prompt_table(total)
    if len(worst_all):
        shown = worst_all.head(top)
        title = (
            f"Worst prompts: {len(worst_all):,} of {total:,} prompts have samples whose sign differs "
            f"from {report.reference}" + (f" (top {len(shown)})" if len(shown) < len(worst_all) else "")
        )
        sections.append((title, *prompt_rows(report, shown, "flips")))
    silent_all = report.silent_prompt_table(total)
    if len(silent_all):
        shown = silent_all.head(top)
        title = f"Prompts with no learning signal that got advantages: {len(silent_all):,}" + (
            f" (top {len(shown)})" if len(shown) < len(silent_all) else ""
        )
        header, rows = prompt_rows(report, shown, "spurious")
        if fold_repeats and sections and rows == sections[0][2]:
            same = (
                f"the {plural(len(silent_all), 'prompt')} above"
                if len(silent_all) == len(worst_all)
                else f"{len(silent_all):,}, the top {len(shown)} being the rows above"
            )
            title = (
                f"Prompts with no learning signal that got advantages: {same}, with the same counts "
                "(there, every sign change is invented signal)"
            )
            sections.append((title, [], []))
        else:
            sections.append((title, header, rows))
    return sections
