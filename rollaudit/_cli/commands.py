"""The commands: compare, inspect, convert, gate. Each parses its options, calls the library, and renders.

Every command that reads dumps takes the shared load options (:data:`.options.LOAD`) as one
:class:`~rollaudit.LoadOptions`; outputs are checked before anything is loaded.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from .._errors import UsageError, visible
from .._loaders.options import LoadOptions
from .app import app
from .io import (
    audit_status,
    check_plot_directory,
    command_seconds,
    each_run,
    echo_line,
    echo_status,
    input_runs,
    load_inputs,
    print_report,
    refuse_several_runs,
    run_heading,
    terminal_text,
    write_text,
)
from .options import (
    DASHBOARDS,
    GATE_RULES,
    LOAD,
    CompareFormat,
    ConfigFile,
    DashboardOptions,
    Device,
    DeviceOption,
    GateRules,
    HtmlFile,
    Inputs,
    PromptKey,
    Quiet,
    Reference,
    Schemes,
    Steps,
    TrainedWith,
    compare_format,
    scheme_strings,
)

if TYPE_CHECKING:
    from .._output import Output

# What the LOAD group's options make when none is given; the signature typer reads has the options instead.
DEFAULT_LOAD = LoadOptions()
DEFAULT_RULES: GateRules = {}
DEFAULT_DASHBOARDS = DashboardOptions()


# ---------------------------------------------------------------------------------------------------------------------
# compare


@app.command()
@LOAD
@DASHBOARDS
def compare(
    inputs: Inputs,
    schemes: Schemes = None,
    reference: Reference = "prompt",
    trained_with: TrainedWith = None,
    load: LoadOptions = DEFAULT_LOAD,  # replaced by the LOAD group's options
    device: DeviceOption = Device.auto,
    output_format: Annotated[
        CompareFormat | None,
        # --format already names the dump format (the load options): this one names the report's.
        typer.Option("--output-format", help="The report's format (default terminal).", show_default=False),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="--output-format json: one versioned JSON document (schema: rollaudit schema)."),
    ] = False,
    as_markdown: Annotated[
        bool, typer.Option("--markdown", help="--output-format markdown: a Markdown report, for a pull request.")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", metavar="FILE", help="Write the report to this file (atomically) instead of stdout."
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", metavar="DIR", help="Write PNGs into this directory: group sizes, advantage scatter, per step."
        ),
    ] = None,
    html_file: HtmlFile = None,
    top: Annotated[
        int, typer.Option("--top", min=0, metavar="N", help="How many prompts each prompt table shows.")
    ] = 5,
    steps: Steps = None,
    prompt: PromptKey = None,
    dashboards: DashboardOptions = DEFAULT_DASHBOARDS,  # replaced by the DASHBOARDS group's options
    quiet: Quiet = False,
) -> int | None:
    """Recompute advantages under several schemes and show how far each is from the reference.

    Default schemes: batch,prompt,trajectory; reference: prompt.

    Examples:

    \b
      rollaudit compare run/rollout_data/                       # a whole run, one batch per step
      rollaudit compare dump.pt -s 'batch,verl-grpo' -r prompt  # framework presets against GRPO
      rollaudit compare run/ --markdown -o report.md --html report.html --plot figures/
      rollaudit compare run/ --steps 10-20,30 --prompt 17         # some steps; one prompt's samples
      rollaudit compare run/ --tensorboard run/tb --wandb my-project  # per-step curves beside the trainer's
    """
    chosen = compare_format(output_format, as_json=as_json, as_markdown=as_markdown)
    from .._output import prepare_output

    runs = input_runs(inputs, load)
    names = [name for name, _ in runs]
    refuse_several_runs(
        inputs,
        names,
        **{"--html": html_file, "--plot": plot, "--prompt": prompt, "--tensorboard": dashboards.tensorboard},
        **{"--wandb": dashboards.wandb_project},
    )
    # Every output is reserved (its temporary file created) before anything is loaded.
    output_path = prepare_output(output) if output is not None else None
    html_path = prepare_output(html_file) if html_file is not None else None
    plot_directory = check_plot_directory(plot) if plot is not None else None
    import rollaudit

    names_of_schemes = scheme_strings(schemes, rollaudit.DEFAULT_SCHEMES)
    rollaudit.get_scheme(reference)
    if trained_with is not None:
        rollaudit.get_scheme(trained_with)
    if steps is not None:
        rollaudit.parse_steps(steps)  # a typo is named before anything is loaded
    from .dashboards import open_dashboards

    config = {"command": "compare", "reference": reference, "schemes": names_of_schemes, "trained_with": trained_with}
    boards = open_dashboards(dashboards, inputs=inputs, config=config, quiet=quiet)
    from .._render.registry import COMPARE_RENDERERS

    def audit_run(name: str | None, files: list[Path]) -> tuple[Any, dict[str, Any]]:
        loaded = load_inputs(files, load, quiet=quiet, audits=True, run=name)
        table = loaded.table if steps is None else rollaudit.select_steps(loaded.table, steps)
        if prompt is not None:
            rollaudit.select_prompt(table, prompt)  # a key the dump lacks is named before the audit
        with audit_status(table.num_rows, len(names_of_schemes), quiet):
            report = rollaudit.audit(
                table,
                schemes=names_of_schemes,
                reference=reference,
                device=device.value,
                keep_advantages=plot is not None or html_file is not None or prompt is not None,
                trained_with=trained_with,
            )
        loaded.summary["command_seconds"] = command_seconds()
        return report, loaded.summary

    outcomes, errors = each_run(runs, audit_run)
    if names != [None]:  # several runs: one report each, headed by its run
        write_text_or_report(several_reports(chosen, outcomes, errors, names, top=top), output_path, quiet)
        return 2 if errors else None
    ((_, (report, summary)),) = outcomes
    rendered = COMPARE_RENDERERS[chosen](report, summary, top=top)
    if prompt is not None:
        from .._render.prompt_view import with_prompt

        rendered = with_prompt(chosen, rendered, report.prompt(prompt))
    write_text_or_report(rendered, output_path, quiet)

    if html_path is not None:
        from .._render.html import render_html

        write_text(render_html(report, summary, top=max(top, 10), prompt=prompt), html_path, quiet)
    if plot_directory is not None:
        from .._render.plots import write_plots

        for path in write_plots(report, plot_directory):
            echo_status(f"wrote {path}", quiet)
    if boards is not None:
        with boards:
            boards.write_report(report)
    return None


def write_text_or_report(rendered: Any, output_path: Output | None, quiet: bool) -> None:
    """A rendered report (text, or a rich renderable) to stdout or to the output file."""
    if isinstance(rendered, str):
        write_text(rendered, output_path, quiet)
    elif output_path is None:
        print_report(rendered)
    else:
        write_text(terminal_text(rendered), output_path, quiet)


def several_reports(
    chosen: str,
    outcomes: list[tuple[str | None, tuple[Any, dict[str, Any]]]],
    errors: list[tuple[str, str]],
    names: list[str | None],
    top: int,
) -> Any:
    """The reports of several runs as one output: a JSON document listing each run's, or each report under a
    heading naming its run (a Markdown heading, a line in the terminal)."""
    from .._render.registry import COMPARE_RENDERERS

    if chosen == "json":
        from .._render.json import compare_document, dumps, runs_document

        return dumps(runs_document([compare_document(report, load) for _, (report, load) in outcomes], errors))
    rendered = [(name, COMPARE_RENDERERS[chosen](report, load, top=top)) for name, (report, load) in outcomes]
    if chosen == "markdown":
        return "\n".join(f"## {visible(run_heading(name, names))}\n\n{text}" for name, text in rendered)
    from rich.console import Group

    pieces: list[Any] = []
    for name, report in rendered:
        pieces += [Text("")] * bool(pieces) + [_heading(name, names), report]
    return Group(*pieces)


def _heading(name: str | None, names: list[str | None]) -> Text:
    return Text(visible(run_heading(name, names)), style="bold")


# ---------------------------------------------------------------------------------------------------------------------
# inspect


@app.command()
@LOAD
def inspect(
    inputs: Inputs,
    load: LoadOptions = DEFAULT_LOAD,  # replaced by the LOAD group's options
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    quiet: Quiet = False,
) -> int | None:
    """What a dump holds (format, steps, counts, fields, reward type, key coverage), without recomputing.

    Examples:

    \b
      rollaudit inspect dump.pt
      rollaudit inspect export.parquet --prompt-col data_id --json
    """
    from .._render.registry import INSPECT_RENDERERS

    runs = input_runs(inputs, load)
    names = [name for name, _ in runs]
    described, errors = each_run(runs, lambda name, files: _inspect_run(files, load, quiet=quiet, run=name))
    if as_json and names != [None]:
        from .._render.json import dumps, inspect_document, runs_document

        documents = [inspect_document(description, summary) for _, (description, summary) in described]
        write_text(dumps(runs_document(documents, errors)), None, quiet)
        return 2 if errors else None
    for name, (description, summary) in described:
        if name is not None:
            print_report(_heading(name, names))
        rendered = INSPECT_RENDERERS["json" if as_json else "terminal"](description, summary)
        if isinstance(rendered, str):
            write_text(rendered, None, quiet)
        else:
            print_report(rendered)
    return 2 if errors else None


def _inspect_run(files: list[Path], load: LoadOptions, *, quiet: bool, run: str | None) -> tuple[Any, dict[str, Any]]:
    """One run's description and what was loaded; a choice the dump leaves open (a reward dict's key, the reward
    column), on which compare stops, is described with what there is to choose from."""
    from .._errors import ChoiceNeeded, OpenChoice, choices_left_open

    left_open: list[OpenChoice] = []
    try:
        loaded = load_inputs(files, load, quiet=quiet, run=run)
    except ChoiceNeeded:
        # Read again in this process with the choice left open, to say what there is to choose from.
        import dataclasses

        reread = dataclasses.replace(load, jobs=1, cache=False, engine="local", ray_address=None)
        with choices_left_open() as left_open:
            loaded = load_inputs(files, reread, quiet=quiet, run=run)
    from rollaudit import describe

    from .._audit.describe import with_choices_left_open

    return with_choices_left_open(describe(loaded.table), left_open), loaded.summary


# ---------------------------------------------------------------------------------------------------------------------
# convert


@app.command()
@LOAD
def convert(
    inputs: Inputs,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Output file; the extension picks the format: .parquet, .feather/.arrow, .csv, .jsonl.",
            show_default=False,
        ),
    ],
    schemes: Schemes = None,
    load: LoadOptions = DEFAULT_LOAD,  # replaced by the LOAD group's options
    device: DeviceOption = Device.auto,
    quiet: Quiet = False,
) -> None:
    """Write the canonical table (plus an advantage:<scheme> column per --schemes entry) to a file.

    Examples:

    \b
      rollaudit convert run/rollout_data/ -o rollouts.parquet
      rollaudit convert dump.pt -o table.csv -s 'batch,prompt'
    """
    from .._output import prepare_output
    from .._render.table_files import TABLE_WRITERS, write_table_file

    target = prepare_output(output)  # a directory or an unwritable place is named before the extension
    extension = output.suffix.lower()
    if extension not in TABLE_WRITERS:
        raise UsageError(
            f"unknown output extension {repr(output.suffix) if output.suffix else '(none)'}",
            file=str(output),
            expected=f"one of {', '.join(TABLE_WRITERS)}",
        )
    names = scheme_strings(schemes, []) if schemes else []
    import rollaudit

    files = rollaudit.expand_paths(inputs, load.run)
    table = load_inputs(files, load, quiet=quiet, audits=bool(names)).table
    if names:
        advantages = rollaudit.recompute(table, names, device=device.value)  # named advantage:<scheme>
        for column in advantages.column_names:
            if column in table.column_names:
                raise UsageError(f"the table already has a column {column!r}", expected="a dump without it")
            table = table.append_column(column, advantages.column(column))
    target.write(lambda temporary: write_table_file(table, temporary, extension))
    echo_status(f"wrote {output}: {table.num_rows:,} rows, {table.num_columns} columns", quiet)


# ---------------------------------------------------------------------------------------------------------------------
# gate


@app.command()
@LOAD
@GATE_RULES
@DASHBOARDS
def gate(
    inputs: Inputs,
    rules: GateRules = DEFAULT_RULES,  # replaced by the GATE_RULES group's options
    write_baseline_file: Annotated[
        Path | None,
        typer.Option(
            "--write-baseline",
            metavar="FILE",
            help="Store this run's metrics as a baseline (atomically; may be the --baseline file).",
            show_default=False,
        ),
    ] = None,
    config_file: ConfigFile = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One versioned JSON document on stdout instead of the table.")
    ] = False,
    junit: Annotated[
        Path | None,
        typer.Option(
            "--junit", metavar="FILE", help="Write JUnit XML (one test case per rule) to FILE.", show_default=False
        ),
    ] = None,
    load: LoadOptions = DEFAULT_LOAD,  # replaced by the LOAD group's options
    device: DeviceOption = Device.auto,
    dashboards: DashboardOptions = DEFAULT_DASHBOARDS,  # replaced by the DASHBOARDS group's options
    quiet: Quiet = False,
) -> int | None:
    """Check rules on the dumps' advantages: exit 0 when all hold, 1 when any fails, 2 on a usage or input error.

    Rules come from the options and from [tool.rollaudit.gate] in the nearest pyproject.toml (or --gate-config);
    the options are merged over the file. Under GitHub Actions, failed rules become ::error annotations and a
    summary is appended to $GITHUB_STEP_SUMMARY.

    Rules that check the trainer: --expect-recorded, and --max/--min on 'trained' (the run's own advantages).
    Rules on a named scheme measure the data's exposure: what that scheme would do to this data. A rule the
    dump cannot support is not evaluated, and says so.

    Examples:

    \b
      rollaudit gate run/ --max trained:strict_flip_rate=0      # the trainer: no reversed advantage
      rollaudit gate run/ --expect-recorded 'slime-2204' --require prompt-key
      rollaudit gate run/rollout_data/ --max batch:sign_flip_rate=1%   # exposure of this data
      rollaudit gate run/ --baseline ci/baseline.json --baseline-tolerance '*:1%'
    """
    from .._gate.baseline import baseline_text
    from .._gate.config import gate_config, load_gate_config, require_rules
    from .._output import prepare_output
    from .._render.gate import emit_github, junit_xml, terminal, to_json

    config = gate_config(load_gate_config(path=config_file, start_dir="."), **rules)
    require_rules(config, writing_baseline=write_baseline_file is not None)
    runs = input_runs(inputs, load)
    names = [name for name, _ in runs]
    refuse_several_runs(
        inputs,
        names,
        **{"--junit": junit, "--write-baseline": write_baseline_file, "--tensorboard": dashboards.tensorboard},
        **{"--wandb": dashboards.wandb_project},
    )
    junit_path = prepare_output(junit) if junit is not None else None
    baseline_path = prepare_output(write_baseline_file) if write_baseline_file is not None else None
    from .dashboards import open_dashboards

    config_items = {
        "command": "gate",
        "reference": config.reference_name,
        "schemes": list(config.schemes or ()),
        "trained_with": config.trained_with,
    }
    boards = open_dashboards(dashboards, inputs=inputs, config=config_items, quiet=quiet)
    if names != [None]:
        return _gate_runs(runs, config, load, device.value, as_json=as_json, quiet=quiet)
    ((_, files),) = runs
    result = _gated(files, load, config, device.value, quiet=quiet)

    if baseline_path is not None:
        if result.report is not None:
            baseline_path.write(baseline_text(result.report))
            echo_status(f"wrote baseline {baseline_path.path}", quiet)
        else:
            baseline_path.discard()
            echo_line(f"warning: baseline {baseline_path.path} not written: the audit could not run", err=True)
    if as_json:
        typer.echo(to_json(result), nl=False)
    elif result.results:  # a run that only writes a baseline has no rule to show
        print_report(terminal(result))
    if junit_path is not None:
        write_text(junit_xml(result), junit_path, quiet)
    # Annotations go to stdout, where GitHub reads workflow commands, unless stdout holds the JSON document.
    emit_github(result, stream=sys.stderr if as_json else None)
    if boards is not None:
        with boards:
            if result.report is not None:
                boards.write_report(result.report)
            else:
                echo_line("warning: nothing written to the dashboards: the audit could not run", err=True)
    result.raise_for_failures()
    return None


def _gate_runs(
    runs: list[tuple[str | None, list[Path]]],
    config: Any,
    load: LoadOptions,
    device: str,
    *,
    as_json: bool,
    quiet: bool,
) -> int | None:
    """The gate on each run of a directory that holds several: each run's table under a heading naming it (or one
    JSON document listing each run's); exit 2 where a run could not be read, else 1 where any run failed."""
    from .._errors import GateFailed
    from .._render.gate import emit_github, terminal
    from .._render.json import dumps, runs_document

    names = [name for name, _ in runs]
    results, errors = each_run(runs, lambda name, files: _gated(files, load, config, device, quiet=quiet, run=name))
    for name, result in results:
        if not as_json:
            print_report(_heading(name, names))
            print_report(terminal(result))
        emit_github(result, stream=sys.stderr if as_json else None)
    failed = [str(name) for name, result in results if not result.passed]
    if as_json:
        documents = [{**result.to_dict(), "run": name} for name, result in results]
        passed = not failed and not errors
        typer.echo(dumps(runs_document(documents, errors, passed=passed)), nl=False)
    if errors:
        return 2
    if failed:
        raise GateFailed(f"gate failed on {len(failed)} of {len(results)} runs ({', '.join(failed)})")
    return None


def _gated(
    files: list[Path], load: LoadOptions, config: Any, device: str, *, quiet: bool, run: str | None = None
) -> Any:
    """One run's files loaded and gated: its :class:`~rollaudit.GateResult`."""
    from .._gate.evaluate import run_gate

    table = load_inputs(files, load, quiet=quiet, audits=True, run=run).table
    with audit_status(table.num_rows, len(config.schemes or ()) + 1, quiet):
        return run_gate(table, config, device)
