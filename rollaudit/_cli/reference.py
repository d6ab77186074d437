"""The reference commands: schemes, formats, findings, schema. Each prints a registry as it is (PRESETS, FORMATS,
CODES, the JSON Schemas shipped with the renderers), so that what the tool says it does cannot drift from what it does.

In a terminal the entries are a rich table; in a pipe, one ``field: value`` line per field under each name; with
``--json``, a list of objects with the same fields. The listings of schemes and formats are in alphabetical order of
name (case-insensitive), whatever the registry's own order (the loader keeps FORMATS' order to detect a file's format;
``formats --detection-order`` prints that order); findings keep the registry's order, defects then laws.
``formats NAME``, ``schemes NAME`` and ``findings CODE`` print one entry (``--json``: the object alone); a name the
registry does not know is an error that names it and the nearest known name.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .app import app

if TYPE_CHECKING:
    from .._audit.schemes import Scheme

AsJson = Annotated[
    bool, typer.Option("--json", help="A JSON list of objects on stdout (with one entry named, its object alone).")
]
FormatName = Annotated[
    str | None,
    typer.Argument(
        metavar="NAME", help="One format to show (e.g. slime); every format by default.", show_default=False
    ),
]
SchemeName = Annotated[
    str | None,
    typer.Argument(
        metavar="NAME",
        help="One preset to show (e.g. nemo-loo), or a scheme string (e.g. 'prompt(scale=none)'); every preset by "
        "default.",
        show_default=False,
    ),
]
FindingCode = Annotated[
    str | None,
    typer.Argument(
        metavar="CODE",
        help="One finding code to show (e.g. rows-misaligned); every code by default.",
        show_default=False,
    ),
]
DetectionOrder = Annotated[
    bool,
    typer.Option("--detection-order", help="In the order a file's format is detected (tried), not alphabetical order."),
]


def alphabetical(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` in alphabetical order of name, case-insensitive (ties, if names differ only in case, by name)."""
    return sorted(entries, key=lambda entry: (entry["name"].casefold(), entry["name"]))


def _scheme_entry(name: str, scheme: Scheme, definition_prefix: str = "") -> dict[str, Any]:
    """The object ``schemes`` prints for ``scheme`` under ``name``."""
    import dataclasses

    notes = scheme.notes
    return {
        "name": name,
        "definition": definition_prefix + notes.description if notes else None,
        # The fields that differ from the defaults, as a scheme string that names the same arithmetic.
        "parameters": dataclasses.replace(scheme, name="").spec_string(),
        "source": notes.source if notes else None,
        "undefined": notes.undefined if notes else None,
        "rounding_fix": notes.rounding_fix if notes else None,
    }


def scheme_entries() -> list[dict[str, Any]]:
    """One object per preset, in PRESETS order: name, definition, parameters, source, undefined, rounding_fix."""
    from .._audit.presets import PRESETS

    return [_scheme_entry(name, preset) for name, preset in PRESETS.items()]


def scheme_entry(text: str) -> dict[str, Any]:
    """The object for one preset name, or for a scheme string ``NAME(key=value, ...)``: the preset's notes, its
    definition introduced by the changes, and the parameters of the scheme the string names. A name no preset
    has is a SchemeError naming it and the nearest preset."""
    from .._audit.presets import PRESETS, get_scheme
    from .._errors import SchemeError, did_you_mean

    label = text.strip()
    if label in PRESETS:
        return _scheme_entry(label, PRESETS[label])
    base, paren, arguments = label.partition("(")
    base = base.strip()
    if not paren or base not in PRESETS:
        hint = did_you_mean(base.casefold(), PRESETS)
        raise SchemeError(
            f"unknown scheme {base!r}{hint}",
            expected=None if hint else "a preset `rollaudit schemes` lists, or NAME(key=value, ...)",
        )
    scheme = get_scheme(label)  # the string's own errors: unknown key, bad value, missing n
    changes = " ".join(arguments.rstrip().removesuffix(")").split())
    prefix = f"the preset {base} with {changes}; the preset: " if changes else ""
    return _scheme_entry(label, scheme, prefix)


def format_entries() -> list[dict[str, Any]]:
    """One object per registered format, in detection order."""
    from .._loaders.registry import FORMATS

    return [
        {
            "name": entry.name,
            "reads": entry.description,
            "prompt": entry.prompt,
            "framework_groups": entry.framework_groups or "the prompt above",
            "trajectory": entry.trajectory,
            "reward": entry.reward,
            "recorded_advantages": entry.advantage is not None,
            "advantage": entry.advantage,
            "trained_with": [{"scheme": scheme, "why": why} for scheme, why in entry.trained_with],
            "options": sorted(entry.options),
            "config": entry.config_where or ("--config only" if entry.settings else "none read"),
            "config_settings": [setting.keys[0] for setting in entry.settings],
            "cannot_audit": list(entry.cannot_audit),
        }
        for entry in FORMATS.values()
    ]


def format_entry(name: str) -> dict[str, Any]:
    """The object for one registered format. A name no format has is a UsageError naming it and the nearest
    format (or, where none is near, every format)."""
    from .._errors import UsageError, did_you_mean
    from .._loaders.registry import FORMATS

    entries = {entry["name"]: entry for entry in format_entries()}
    if name in entries:
        return entries[name]
    hint = did_you_mean(name.casefold(), FORMATS)
    raise UsageError(
        f"unknown format {name!r}{hint}",
        expected=None if hint else f"one of {', '.join(sorted(FORMATS, key=str.casefold))}",
    )


def finding_entries() -> list[dict[str, Any]]:
    """One object per finding code, in CODES order (defects, then laws): code, severity, shows, reference,
    signature, fix."""
    from .._audit.findings.codes import CODES

    return [
        {
            "code": entry.code,
            "severity": entry.severity,
            "shows": entry.shows,
            "reference": entry.reference or None,  # as a finding's JSON says it: null where the field has none
            "signature": entry.signature,
            "fix": entry.fix,
        }
        for entry in CODES
    ]


def finding_entry(code: str) -> dict[str, Any]:
    """The object for one finding code. A code the registry lacks is a UsageError naming it and the nearest code."""
    from .._audit.findings.codes import BY_CODE
    from .._errors import UsageError, did_you_mean

    entries = {entry["code"]: entry for entry in finding_entries()}
    if code in entries:
        return entries[code]
    hint = did_you_mean(code.casefold(), BY_CODE)
    raise UsageError(
        f"unknown finding code {code!r}{hint}", expected=None if hint else "a code `rollaudit findings` lists"
    )


# Notes most entries lack: left out of the text where there is none (``--json`` keeps them, as null).
_OPTIONAL = frozenset({"undefined", "rounding_fix", "reference"})


def _lines(key: str, value: Any) -> list[tuple[str, str]]:
    """A field as ``(key, text)`` pairs: one pair per sentence-long item of a list, so no item is split by commas."""
    if value is None:
        return [] if key in _OPTIONAL else [(key, "none")]
    if isinstance(value, bool):
        return [(key, "yes" if value else "no")]
    if isinstance(value, list):
        if not value:
            return [(key, "none")]
        if isinstance(value[0], dict):
            return [(key, f"{item['scheme'] or 'none'}: {item['why']}") for item in value]
        if key == "options":
            return [(key, ", ".join(value))]
        return [(key, str(item)) for item in value]
    return [(key, str(value))]


def _print_entries(entries: list[dict[str, Any]], title: str) -> None:
    """A table with one row per entry in a terminal; ``field: value`` lines under each name in a pipe. An entry's
    first field is its name (``name``, a finding's ``code``)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from .._errors import log_safe, visible

    # A scheme string a user gave (schemes 'custom(group_by=...)') is shown escaped, as every line rollaudit prints.
    console = Console(highlight=False)
    name = next(iter(entries[0])) if entries else "name"
    if not console.is_terminal:
        lines = []
        for entry in entries:
            lines.append(visible(entry[name]))
            for key, value in entry.items():
                if key != name:
                    lines.extend(f"  {field}: {visible(text)}" for field, text in _lines(key, value))
        typer.echo(log_safe("\n".join(lines)))
        return
    table = Table(title=title, show_lines=True, title_justify="left")
    table.add_column(name, style="bold cyan", no_wrap=True)
    table.add_column("details")
    for entry in entries:
        details = Table.grid(padding=(0, 1))
        details.add_column(style="dim", no_wrap=True)
        details.add_column()
        for key, value in entry.items():
            if key != name:
                for field, text in _lines(key, value):
                    # Text, not markup: "reward[reward_key]" is shown as written, not read as a style tag.
                    details.add_row(field, Text(visible(text)))
        table.add_row(Text(visible(entry[name])), details)
    console.print(table)


def _echo_json(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, ensure_ascii=False))


def _show(entries: list[dict[str, Any]], title: str, *, as_json: bool, one: bool) -> None:
    if as_json:
        _echo_json(entries[0] if one else entries)
    else:
        _print_entries(entries, title)


@app.command()
def schemes(name: SchemeName = None, as_json: AsJson = False) -> None:
    """List every scheme and preset (alphabetically): its definition, parameters, source, and why it leaves values
    undefined. With NAME, that one: rollaudit schemes nemo-loo.

    Any of them, with any parameters, names a scheme: rollaudit compare run/ -s 'prompt(scale=none)'.
    """
    entries = [scheme_entry(name)] if name is not None else alphabetical(scheme_entries())
    _show(entries, "schemes (NAME or NAME(key=value, ...))", as_json=as_json, one=name is not None)


@app.command()
def formats(name: FormatName = None, as_json: AsJson = False, detection_order: DetectionOrder = False) -> None:
    """List every dump format (alphabetically): what it reads, its keys, reward, recorded advantages, default
    preset, options. With NAME, that one: rollaudit formats slime."""
    if name is not None:
        entries = [format_entry(name)]
        title = "formats"
    elif detection_order:
        entries = format_entries()
        title = "formats (detected in this order)"
    else:
        entries = alphabetical(format_entries())
        title = "formats"
    _show(entries, title, as_json=as_json, one=name is not None)


@app.command()
def findings(code: FindingCode = None, as_json: AsJson = False) -> None:
    """List every finding code (defects, then the laws every GRPO-family estimator keeps): its severity, what the
    dump shows, where it was reported, the signature the audit tests, and the fix. With CODE, that one: rollaudit
    findings rows-misaligned.

    gate --fail-on CODE,... fails a run that shows them: rollaudit gate run/ --fail-on error --ignore law-order.
    """
    entries = [finding_entry(code)] if code is not None else finding_entries()
    _show(entries, "findings (gate --fail-on CODE, a severity or all)", as_json=as_json, one=code is not None)


@app.command()
def schema(
    command: Annotated[
        str, typer.Argument(metavar="COMMAND", help="compare, inspect or gate.", show_default=False)
    ] = "compare",
) -> None:
    """Print the JSON Schema (draft 2020-12) of a command's --json document."""
    from .._errors import UsageError
    from .._render.registry import JSON_SCHEMAS, json_schema

    if command not in JSON_SCHEMAS:
        raise UsageError(f"no JSON document for {command!r}", expected=f"one of {', '.join(JSON_SCHEMAS)}")
    typer.echo(json_schema(command), nl=False)
