"""The reference commands: schemes, formats, schema. Each prints a registry as it is (PRESETS, FORMATS, the JSON
Schemas shipped with the renderers), so that what the tool says it does cannot drift from what it does.

In a terminal the entries are a rich table; in a pipe, one ``field: value`` line per field under each name; with
``--json``, a list of objects with the same fields.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from .app import app

AsJson = Annotated[bool, typer.Option("--json", help="A JSON list of objects on stdout.")]


def scheme_entries() -> list[dict[str, Any]]:
    """One object per preset, in PRESETS order: name, definition, parameters, source, undefined, rounding_fix."""
    import dataclasses

    from .._audit.presets import PRESETS

    entries = []
    for name, preset in PRESETS.items():
        notes = preset.notes
        entries.append(
            {
                "name": name,
                "definition": notes.description if notes else None,
                # The fields that differ from the defaults, as a scheme string that names the same arithmetic.
                "parameters": dataclasses.replace(preset, name="").spec_string(),
                "source": notes.source if notes else None,
                "undefined": notes.undefined if notes else None,
                "rounding_fix": notes.rounding_fix if notes else None,
            }
        )
    return entries


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
            "cannot_audit": list(entry.cannot_audit),
        }
        for entry in FORMATS.values()
    ]


# Notes most presets lack: left out of the text where there is none (``--json`` keeps them, as null).
_OPTIONAL = frozenset({"undefined", "rounding_fix"})


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
    """A table with one row per entry in a terminal; ``field: value`` lines under each name in a pipe."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    if not console.is_terminal:
        lines = []
        for entry in entries:
            lines.append(entry["name"])
            for key, value in entry.items():
                if key != "name":
                    lines.extend(f"  {field}: {text}" for field, text in _lines(key, value))
        typer.echo("\n".join(lines))
        return
    table = Table(title=title, show_lines=True, title_justify="left")
    table.add_column("name", style="bold cyan", no_wrap=True)
    table.add_column("details")
    for entry in entries:
        details = Table.grid(padding=(0, 1))
        details.add_column(style="dim", no_wrap=True)
        details.add_column()
        for key, value in entry.items():
            if key != "name":
                for field, text in _lines(key, value):
                    details.add_row(field, text)
        table.add_row(entry["name"], details)
    console.print(table)


def _echo_json(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, ensure_ascii=False))


@app.command()
def schemes(as_json: AsJson = False) -> None:
    """List every scheme and preset: its definition, parameters, source, and why it leaves values undefined.

    Any of them, with any parameters, names a scheme: rollaudit compare run/ -s 'prompt(scale=none)'.
    """
    entries = scheme_entries()
    if as_json:
        _echo_json(entries)
    else:
        _print_entries(entries, "schemes (NAME or NAME(key=value, ...))")


@app.command()
def formats(as_json: AsJson = False) -> None:
    """List every dump format: what it reads, its keys, reward, recorded advantages, default preset, options."""
    entries = format_entries()
    if as_json:
        _echo_json(entries)
    else:
        _print_entries(entries, "formats (detected in this order)")


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
