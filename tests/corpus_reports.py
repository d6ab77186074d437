"""What ``rollaudit compare`` says of every run of the conformance corpus (its JSON, its terminal text and its
Markdown) and what ``rollaudit gate`` says of it (JSON and text), timings masked: the outputs a change that promises
the same numbers must leave the same, on any CPU (:func:`outcome_difference` says how they are compared).

    python -m tests.corpus_reports --write   # with the code before a change: tests/fixtures/corpus_reports.json.gz

A run is a path of the corpus (a framework's folder, a run's folder or one file, three levels down at most, and the
runs deeper than that), with the options it needs; a path that refuses to load is recorded too, by its exit code
and error line (the same errors are part of the same outputs).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import math
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("ROLLAUDIT_CORPUS", ROOT.parent / "shared" / "corpus"))
# ``$ROLLAUDIT_CORPUS_REPORTS``: record to, or compare with, another file (another CPU's outputs, say).
FIXTURE = Path(os.environ.get("ROLLAUDIT_CORPUS_REPORTS", ROOT / "tests" / "fixtures" / "corpus_reports.json.gz"))
MOST_LEVELS = 3
# Runs below MOST_LEVELS, and runs that need an option, by path relative to the corpus.
EXTRA_RUNS: dict[str, list[str]] = {
    "areal/experiments/logs/rl/gsm8k-agent-grpo/trial0": [],
    "areal/experiments/logs/rl/gsm8k-agent-grpo/trial1-concat-rnorm": [],
    "slime --reward-key score": ["--reward-key", "score"],
}
# Timings, and where the audit ran, differ from run to run and machine to machine; the corpus lies anywhere.
_MASKED = re.compile(r'"(seconds|command_seconds|device)": ("[^"]*"|[-+0-9.eE]+)')
_SECONDS = re.compile(r"\b(on \w+ in|loaded in) [0-9.]+ s\b|\b[0-9.]+ s in all\b")
_SECONDS_VALUE = re.compile(r"[0-9][0-9.]*(?= s\b)")
GATE_RULES = ["--max", "batch:sign_flip_rate=0.1", "--min", "prompt:advantage_cosine=0.99"]
WIDTH = "100"


def runs() -> dict[str, tuple[Path, list[str]]]:
    """Every run: its name, its path and its options."""
    found: dict[str, tuple[Path, list[str]]] = {".": (CORPUS, [])}
    for path in sorted(CORPUS.rglob("*")):
        parts = path.relative_to(CORPUS).parts
        if len(parts) > MOST_LEVELS or any(part.startswith((".", "expected")) for part in parts):
            continue
        if path.is_file() and path.suffix == ".md":
            continue
        found["/".join(parts)] = (path, [])
    for name, options in EXTRA_RUNS.items():
        found[name] = (CORPUS / name.split(" ")[0], options)
    return found


def masked(text: str) -> str:
    return _MASKED.sub(lambda match: f'"{match.group(1)}": "<masked>"', text).replace(str(CORPUS), "<corpus>")


def masked_text(text: str) -> str:
    """A text report with its timings masked: each paragraph that holds one (wrapped to the width the timings take) as
    one line, with ``<t>`` for the seconds."""
    paragraphs = text.replace(str(CORPUS), "<corpus>").split("\n\n")
    for index, paragraph in enumerate(paragraphs):
        line = " ".join(part.strip() for part in paragraph.splitlines())
        if _SECONDS.search(line):
            paragraphs[index] = _SECONDS.sub(lambda match: _SECONDS_VALUE.sub("<t>", match.group(0)), line)
    return "\n\n".join(paragraphs)


def _run(*arguments: str) -> tuple[int, str, list[str]]:
    from typer.testing import CliRunner

    from rollaudit._cli import app

    result = CliRunner(env={"COLUMNS": WIDTH}).invoke(app, [*arguments, "--no-cache", "--quiet"])
    return result.exit_code, result.stdout, [line for line in result.stderr.splitlines() if line.startswith("error:")]


def report(path: Path, options: list[str]) -> dict[str, object]:
    """``compare PATH --json`` in this process, run in the corpus with PATH relative to it (a path the report
    prints, wrapped at ``WIDTH``, wraps the same wherever the corpus lies): its exit code, and its masked report or
    its error line; where it reports, its terminal text and Markdown, and the gate's JSON and text on
    ``GATE_RULES``."""
    before = os.getcwd()
    os.chdir(CORPUS)
    try:
        return _report(Path(os.path.relpath(path, CORPUS)), options)
    finally:
        os.chdir(before)


def _report(path: Path, options: list[str]) -> dict[str, object]:
    code, out, errors = _run("compare", str(path), *options, "--json")
    if code != 0:
        return {"exit": code, "error": masked("\n".join(errors))}
    outputs: dict[str, object] = {"exit": 0, "report": masked(out)}
    outputs["terminal"] = masked_text(_run("compare", str(path), *options)[1])
    outputs["markdown"] = masked_text(_run("compare", str(path), *options, "--markdown")[1])
    for name, extra in (("gate", ["--json"]), ("gate_text", [])):
        code, out, errors = _run("gate", str(path), *options, *GATE_RULES, *extra)
        outputs[name] = {"exit": code, "output": masked(out) if extra else masked_text(out), "errors": errors}
    return outputs


def recorded() -> dict[str, dict[str, object]]:
    with gzip.open(FIXTURE, "rt", encoding="utf-8") as stream:
        return json.load(stream)


# ---------------------------------------------------------------------------------------------------------------------
# Comparing a recorded outcome with a new one, on any CPU.
#
# The recorded outputs hold one CPU's floating-point results: torch's kernels sum in another order on another
# instruction set, and a float moves by units in its last place. So a float is compared within RELATIVE of its
# magnitude (ABSOLUTE near 0); the error of a fit of recorded advantages, and any value of a scheme computed in
# float32 or bfloat16, within ROUNDING_SLACK times that dtype's rounding
# (rollaudit._audit.trained_with.fit.rounding_error: 2 units in the last place at the largest recorded magnitude).
# Every count, key, label and string is compared exactly; a string or text output token by token, its numbers at
# the precision they are printed with (:func:`numbers_agree`).

RELATIVE = 1e-9
"""A float may differ by this share of its magnitude: a float64 sum in another order moves ~1e-16 of it."""
ABSOLUTE = 1e-12
"""...and by this much at least: a value that cancels to near 0 (a mean advantage) keeps the noise of its terms."""
ROUNDING_SLACK = 2
"""Roundings of the dtype a fit's error, or a reduced-precision scheme's value, may differ by: an error counted as 0
within the rounding on one CPU (``PresetFit``) may be just beyond it on another."""

_NUMBER = re.compile(r"(?<![\w.])([-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?)(?![\w]|\.\d)")
"""A number as the reports print it (``26``, ``1,234``, ``-1.79``, ``53.8`` of ``53.8%``, ``1.2e-07``); digits
inside a word (``nemo-loo-4158``'s are a separate integer, ``p:c90305``'s none) are text or an exact integer."""
_RULE = re.compile(r"─+")


def tolerance(expected: float, actual: float, rounding: float = 0.0) -> float:
    """How far ``actual`` may be from ``expected``: RELATIVE of the larger magnitude, at least ABSOLUTE, and at least
    ROUNDING_SLACK * ``rounding`` (a reduced-precision value's, or a fit error's, dtype rounding)."""
    return max(RELATIVE * max(abs(expected), abs(actual)), ABSOLUTE, ROUNDING_SLACK * rounding)


def floats_agree(expected: float, actual: float, rounding: float = 0.0) -> bool:
    """Equal within :func:`tolerance`; NaN only with NaN, an infinity only with itself."""
    if math.isnan(expected) or math.isnan(actual) or math.isinf(expected) or math.isinf(actual):
        return expected == actual or (math.isnan(expected) and math.isnan(actual))
    return abs(expected - actual) <= tolerance(expected, actual, rounding)


def _quantum(token: str) -> float:
    """The unit of the last digit a number is printed with: ``0.7607`` 1e-4, ``1.2e-07`` 1e-8, ``26`` 1."""
    mantissa, _, exponent = token.lower().partition("e")
    return 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2]))


def numbers_agree(expected: str, actual: str) -> bool:
    """Two printed numbers are one value within :func:`tolerance`, each rounded to the digits it shows.

    An integer (a count: no point, no exponent) against an integer: exactly. Otherwise a value printed as ``x``
    to a last digit of unit ``q`` lies within ``q / 2`` of ``x``: two printings agree when those intervals, at the
    finer ``q`` of the two (``%g`` drops trailing zeros: ``0.76`` may be ``0.7600``), come within the tolerance,
    that is when they differ by at most one unit of the last digit. ``0.7607`` and ``0.7608`` agree (a value at
    the rounding boundary, moved by 1e-12); ``0.7607`` and ``0.7609`` do not, nor ``26`` and ``27``, nor
    ``1.2e-07`` and ``0``."""
    if expected == actual:
        return True
    if not any(mark in token for token in (expected, actual) for mark in ".eE"):
        return False
    left, right = float(expected.replace(",", "")), float(actual.replace(",", ""))
    unit = min(_quantum(expected), _quantum(actual))
    return abs(left - right) <= unit * (1 + 1e-9) + 2 * tolerance(left, right)


def text_difference(expected: str, actual: str) -> str | None:
    """Where two texts differ beyond what :func:`numbers_agree` allows their numbers, or None.

    Split into text and numbers: the numbers agree or the texts differ; the text between them is the same
    exactly, layout included, but where some number is printed otherwise: then its width may move the columns
    of its table and the line breaks after it, so runs of whitespace (and of a table's rule ``─``) count as one,
    the words still compared exactly."""
    if expected == actual:
        return None
    before, after = _NUMBER.split(expected), _NUMBER.split(actual)
    moved = False
    for index, (left, right) in enumerate(zip(before, after, strict=False)):
        if index % 2 and left != right:
            if not numbers_agree(left, right):
                return f"{left!r} != {right!r} after {_context(before, index)!r}"
            moved = True
    if len(before) != len(after):
        shorter = min(len(before), len(after))
        return f"{len(before) // 2} numbers != {len(after) // 2} after {_context(before, shorter)!r}"
    for index in range(0, len(before), 2):
        left, right = before[index], after[index]
        if moved:
            left, right = _loose(left), _loose(right)
        if left != right:
            return f"{before[index][-80:]!r} != {after[index][-80:]!r} after {_context(before, index)!r}"
    return None


def _loose(text: str) -> str:
    return _RULE.sub("─", re.sub(r"\s+", " ", text))


def _context(parts: list[str], index: int) -> str:
    return "".join(parts[max(0, index - 4) : index])[-60:]


@dataclass(frozen=True)
class _Where:
    """Where in a report a value sits: its path, and what decides its tolerance there."""

    path: str = ""
    scale: float = 1.0
    """The report's ``max(1, max |recorded|)``: what a fit's tolerance is relative to."""

    def at(self, key: object) -> _Where:
        return replace(self, path=f"{self.path}[{key}]" if isinstance(key, int) else f"{self.path}.{key}")


@functools.cache
def scheme_dtype(label: str) -> str | None:
    """The dtype the scheme ``label`` computes in, or None where the label names no scheme (``recorded``, a metric)."""
    from rollaudit._audit.presets import get_scheme

    try:
        return get_scheme(label).dtype
    except Exception:  # not a scheme string
        return None


def rounding(dtype: str | None, scale: float) -> float:
    """The rounding of ``dtype`` at ``scale`` (rollaudit's ``rounding_error``), 0 for no dtype."""
    from rollaudit._audit.trained_with.fit import rounding_error

    return 0.0 if dtype is None else rounding_error(dtype, scale)


def _value_rounding(where: _Where, keys: list[str], value: float) -> float:
    """The rounding a float of a report may carry: that of the reduced-precision scheme whose row or column it is
    (``summary.miles-grpo.advantage_cosine``, ``per_step.3.nemo-grpo.max_abs_diff``,
    ``worst_prompts[0].mean_advantage:nemo-grpo``), at the scale of the value and of the recorded advantages; 0 for
    a float64 scheme's (its float64 rounding is far below ABSOLUTE)."""
    dtypes = {scheme_dtype(key.rpartition(":")[2]) for key in keys[-2:]} - {None, "float64"}
    return max((rounding(dtype, max(1.0, abs(value), where.scale)) for dtype in dtypes), default=0.0)


def json_difference(expected: object, actual: object) -> str | None:
    """Where two JSON documents (a report, the gate's) differ beyond the tolerances, as a path of keys, or None."""
    return _json_difference(expected, actual, _Where(), [])


def _json_difference(expected: object, actual: object, where: _Where, keys: list[str]) -> str | None:
    if isinstance(expected, dict) and isinstance(actual, dict):
        if list(expected) != list(actual):
            return f"{where.path}: keys {list(expected)} != {list(actual)}"
        recorded = expected.get("recorded")
        if isinstance(recorded, dict) and recorded.get("tolerance"):  # a report: its fits' scale
            where = replace(where, scale=float(recorded["allowed_error"]) / float(recorded["tolerance"]))
        for key in expected:
            found = _json_difference(expected[key], actual[key], where.at(key), [*keys, key])
            if found:
                return found
        if keys[-1:] == ["rounding_residues"] and not floats_agree(
            float(expected["largest"]), float(actual["largest"]), rounding(expected["dtype"], 1.0)
        ):  # |A| that the dtype's rounding made: it moves with that rounding
            return f"{where.path}.largest: {expected['largest']!r} != {actual['largest']!r}"
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        if keys[-1:] == ["fits"]:
            return _fits_difference(expected, actual, where)
        if len(expected) != len(actual):
            return f"{where.path}: {len(expected)} items != {len(actual)}"
        for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
            found = _json_difference(left, right, where.at(index), keys)
            if found:
                return found
        return None
    if isinstance(expected, str) and isinstance(actual, str):
        found = text_difference(expected, actual)
        return None if found is None else f"{where.path}: {found}"
    if isinstance(expected, float) and isinstance(actual, float):
        if keys[-2:] == ["rounding_residues", "largest"]:
            return None  # compared with its dtype above
        if floats_agree(expected, actual, _value_rounding(where, keys, expected)):
            return None
    elif type(expected) is type(actual) and expected == actual:  # int, bool, None: exactly (26 is not 26.0)
        return None
    return f"{where.path}: {expected!r:.200} != {actual!r:.200}"


_ERRORS = ("max_error", "mean_error")


def _fits_difference(expected: list, actual: list, where: _Where) -> str | None:
    """The fits of recorded advantages: the same schemes, each within tolerance, its errors within ROUNDING_SLACK
    roundings of its dtype at the report's scale; in the same order, but for fits that rank as one within that
    rounding (fit.py's ties), which may come in either order."""
    before = {fit["scheme"]: fit for fit in expected}
    after = {fit["scheme"]: fit for fit in actual}
    if len(before) != len(expected) or len(after) != len(actual) or sorted(before) != sorted(after):
        return f"{where.path}: schemes {list(before)} != {list(after)}"
    for name, fit in before.items():
        at = where.at(f"fits[{name}]")
        found = _json_difference(
            {key: value for key, value in fit.items() if key not in _ERRORS},
            {key: value for key, value in after[name].items() if key not in _ERRORS},
            at,
            [],
        )
        if found:
            return found
        allowed = rounding(scheme_dtype(name), where.scale)
        for key in _ERRORS:
            left, right = fit.get(key), after[name].get(key)
            if (left is None) != (right is None) or (
                left is not None and not floats_agree(float(left), float(right), allowed)
            ):
                return f"{at.path}.{key}: {left!r} != {right!r} (within {ROUNDING_SLACK} x {allowed:.3g})"
    start = 0
    for end in range(1, len(expected) + 1):
        if end < len(expected) and _one_rank(expected[end - 1], expected[end], where.scale):
            continue
        ranked, was = [fit["scheme"] for fit in actual[start:end]], [fit["scheme"] for fit in expected[start:end]]
        if sorted(ranked) != sorted(was):
            return f"{where.path}[{start}:{end}]: ranked {ranked}, not {was}"
        start = end
    return None


def _one_rank(left: dict, right: dict, scale: float) -> bool:
    """Whether two fits next to each other rank as one within their dtypes' rounding (either may come first)."""
    allowed = max(rounding(scheme_dtype(left["scheme"]), scale), rounding(scheme_dtype(right["scheme"]), scale))
    errors = (left["mean_error"], right["mean_error"])
    return left["share_within_tolerance"] == right["share_within_tolerance"] and (
        errors[0] == errors[1] or (None not in errors and floats_agree(float(errors[0]), float(errors[1]), allowed))
    )


def outcome_difference(expected: dict, actual: dict) -> str | None:
    """Where a run's outcome (:func:`report`) differs from the recorded one beyond the tolerances, or None: its exit
    code and error line, its JSON report (:func:`json_difference`), its terminal text and Markdown
    (:func:`text_difference`) and the gate's exit code, error lines and output (JSON, or text)."""
    if actual["exit"] != expected["exit"]:
        return f"exit {expected['exit']} != {actual['exit']}"
    if "error" in expected or "error" in actual:
        found = text_difference(str(expected.get("error")), str(actual.get("error")))
        return None if found is None else f"the error changed: {found}"
    found = json_difference(json.loads(expected["report"]), json.loads(actual["report"]))
    if found:
        return f"the report changed at {found}"
    for output in ("terminal", "markdown"):
        found = text_difference(expected[output], actual[output])
        if found:
            return f"the {output} output changed: {found}"
    for output in ("gate", "gate_text"):
        before, after = expected[output], actual[output]
        if before["exit"] != after["exit"]:
            found = f"exit {before['exit']} != {after['exit']}"
        else:
            found = json_difference(before["errors"], after["errors"])
        if not found and output == "gate" and before["output"].strip().startswith("{"):
            found = json_difference(json.loads(before["output"]), json.loads(after["output"]))
        elif not found:
            found = text_difference(before["output"], after["output"])
        if found:
            return f"the {output} output changed: {found}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"record every run's report in {FIXTURE}")
    arguments = parser.parse_args()
    if not CORPUS.is_dir():
        sys.exit(f"no corpus at {CORPUS} (set ROLLAUDIT_CORPUS)")
    reports = {name: report(path, options) for name, (path, options) in runs().items()}
    for name, outcome in reports.items():
        print(outcome["exit"], name)
    if arguments.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        # mtime 0: the same reports make the same bytes.
        with gzip.GzipFile(FIXTURE, "wb", mtime=0) as stream:
            stream.write(json.dumps(reports, indent=0, sort_keys=True).encode())


if __name__ == "__main__":
    main()
