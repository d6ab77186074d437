"""``rollaudit watch``: audit a run while it trains, a line per step, and stop it when a rule fails.

The loop is the library's (:func:`rollaudit.watch`); this module writes what it yields: a line per step on stdout,
a JSON object per step appended to ``--jsonl`` (which also says, when the watch is started again, which steps are
done), the HTML page of the run so far, and the summary when the watch ends (idle, Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Annotated, Any

import typer

from .._errors import GateFailed, UsageError
from .._loaders.options import LoadOptions
from .app import Terminated, app, signals_held
from .io import echo_line
from .options import (
    DASHBOARDS,
    GATE_RULES,
    LOAD,
    ConfigFile,
    DashboardOptions,
    Device,
    DeviceOption,
    GateRules,
    HtmlFile,
    scheme_strings,
)

DEFAULT_LOAD = LoadOptions()
DEFAULT_RULES: GateRules = {}
DEFAULT_DASHBOARDS = DashboardOptions()
MAX_RECORDS_BYTES = 1 << 30
"""A ``--jsonl`` file read back to resume is at most this big (a record is a few KB: a million steps)."""


class _RecordFile:
    """``--jsonl``: the records of earlier watches of the run (read back), and the file new records append to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as error:
            raise UsageError(f"cannot append to it: {error.strerror or error}", file=str(path)) from None
        status = os.fstat(self.fd)
        if not stat.S_ISREG(status.st_mode):
            os.close(self.fd)
            raise UsageError("is not a regular file", file=str(path), expected="a JSON Lines file of records")
        if status.st_size > MAX_RECORDS_BYTES:
            os.close(self.fd)
            raise UsageError(f"holds {status.st_size:,} bytes", file=str(path), expected="at most 1 GB of records")
        self.records = self._read(status.st_size)

    def _read(self, size: int) -> list[dict[str, Any]]:
        records = []
        with open(os.dup(self.fd), "rb", closefd=True) as handle:
            handle.seek(0)
            data = handle.read(size)
        for number, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict) or not isinstance(record.get("files"), list):
                echo_line(f"warning: {self.path}: line {number} is not a watch record; ignored", err=True)
                continue
            records.append(record)
        if data and not data.endswith(b"\n"):
            os.write(self.fd, b"\n")  # a record cut short by a crash stays on a line of its own
        return records

    def append(self, record: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        os.close(self.fd)


@app.command()
@LOAD
@GATE_RULES
@DASHBOARDS
def watch(
    run_dir: Annotated[
        Path,
        typer.Argument(
            metavar="RUN_DIR", help="The run directory the trainer writes its dumps into.", show_default=False
        ),
    ],
    rules: GateRules = DEFAULT_RULES,  # replaced by the GATE_RULES group's options
    config_file: ConfigFile = None,
    jsonl: Annotated[
        Path | None,
        typer.Option(
            "--jsonl",
            metavar="FILE",
            help="Append one JSON object per step to FILE; started again with it, audit only steps not in it.",
            show_default=False,
        ),
    ] = None,
    html_file: HtmlFile = None,
    fail_fast: Annotated[
        bool, typer.Option("--fail-fast", help="Exit 1 at the first step that fails a rule, naming step and rule.")
    ] = False,
    until_idle: Annotated[
        float | None,
        typer.Option(
            "--until-idle",
            metavar="SECONDS",
            min=0,
            help="Exit after SECONDS with no dump landing or changing (default: follow until Ctrl-C or SIGTERM).",
            show_default=False,
        ),
    ] = None,
    load: LoadOptions = DEFAULT_LOAD,  # replaced by the LOAD group's options
    device: DeviceOption = Device.auto,
    dashboards: DashboardOptions = DEFAULT_DASHBOARDS,  # replaced by the DASHBOARDS group's options
) -> int:
    """Follow a run directory while it trains: audit each step once its dump is whole, a line per step.

    Each step's numbers are those of 'compare' on that step alone; with rules (the options of 'gate', its
    [tool.rollaudit.gate] table or --gate-config) each line ends PASS or FAIL. Ends with a summary of the run on
    Ctrl-C, SIGTERM or --until-idle: exit 0, or 1 if any step failed a rule.

    Examples:

    \b
      rollaudit watch run/ --max trained:strict_flip_rate=0 --jsonl audit.jsonl --html audit.html
      rollaudit watch run/ --max trained:strict_flip_rate=0 --fail-fast || kill "$TRAINER_PID"
      rollaudit watch run/ --jsonl audit.jsonl --tensorboard run/tb --wandb my-project
    """
    import rollaudit

    from .._gate.config import gate_config, load_gate_config
    from .._output import check_writable, write_atomic
    from .._render.dashboards.watch import render_watch_html, step_line, summary_lines
    from .._watch.records import StepPoint, latest_points

    config = gate_config(load_gate_config(path=config_file, start_dir="."), **rules)
    names = scheme_strings(list(config.schemes) or None, rollaudit.DEFAULT_SCHEMES)
    if html_file is not None:
        check_writable(html_file)
    if fail_fast and not config.has_rules:
        raise UsageError("--fail-fast needs a rule", expected="--max/--min SCHEME:METRIC=LIMIT, --require, ...")
    from .dashboards import open_dashboards

    config_items = {
        "command": "watch",
        "reference": config.reference_name,
        "schemes": names,
        "trained_with": config.trained_with,
    }
    boards = open_dashboards(dashboards, inputs=[run_dir], config=config_items)  # checked before any file is made
    records = _RecordFile(jsonl) if jsonl is not None else None
    points = [StepPoint.of(record) for record in (records.records if records else ())]
    if boards is not None and records is not None:
        boards.resume(records.records)
    run = str(run_dir)
    how = "stopped"
    try:
        for record in rollaudit.watch(
            run_dir,
            load,
            schemes=names,
            rules=config if config.has_rules else None,
            reference=config.reference_name,
            trained_with=config.trained_with,
            device=device.value,
            until_idle=until_idle,
            recorded=records.records if records else (),
        ):
            document = record.to_dict()
            point = StepPoint.of(document)
            points.append(point)
            with signals_held():  # a step reaches every sink (the records, the dashboards) or none
                if records is not None:
                    records.append(document)
                if boards is not None and record.report is not None and record.step is not None:
                    boards.write_report(record.report)
            echo_line(step_line(point, record.files))
            if html_file is not None:
                write_atomic(html_file, render_watch_html(points, run, "running"))
            if fail_fast and record.gate is not None and not record.gate.passed:
                failure = record.gate.failures[0]
                raise GateFailed(f"step {record.step} failed {failure.name}: {failure.message}")
        how = "idle"
    except (KeyboardInterrupt, Terminated):
        how = "stopped"
    finally:
        if records is not None:
            records.close()
        if boards is not None:
            boards.close()
    if html_file is not None:
        write_atomic(html_file, render_watch_html(points, run, how))
    for line in summary_lines(points, how):
        echo_line(line)
    return 1 if any(point.passed is False for point in latest_points(points)) else 0
