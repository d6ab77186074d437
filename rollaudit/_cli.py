"""The ``rollaudit`` command: compare, inspect, convert, gate.

Every command parses options, calls the library (load -> audit -> Report)
and hands the result to a renderer; no numbers are made here. The library is
imported inside the command bodies so that ``rollaudit --help`` loads
neither torch, pandas nor matplotlib.

Errors are mapped to exit codes in one place, :meth:`RollauditGroup.main`:
a :class:`~rollaudit.RollauditError` prints ``error: <one line>`` and exits
with its ``exit_code`` (2 for bad input or usage, 1 for a failed gate); a
click usage error (bad or missing option) prints one line and exits 2.
Anything else escaping a command is a bug and surfaces with its traceback.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x carries its own copy of click; older ones use click itself.
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

from ._errors import RollauditError, RollauditWarning, UsageError

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

# Loads of at least this many files, or this many bytes, get a progress bar (on a terminal).
PROGRESS_MIN_FILES = 2
PROGRESS_MIN_BYTES = 64 * 1024 * 1024


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _show_warning(
    message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """A RollauditWarning is one line on stderr; other warnings keep Python's format."""
    if issubclass(category, RollauditWarning):
        typer.echo(f"warning: {_one_line(message)}", err=True)
    else:
        typer.echo(warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"), err=True)


# click >= 8.2 raises this for a bare ``rollaudit``; older versions print the help themselves (never raised).
_NO_ARGS_IS_HELP: type[Exception] = getattr(click_exceptions, "NoArgsIsHelpError", None) or type(
    "_NeverRaised", (Exception,), {}
)


class RollauditGroup(TyperGroup):
    """The command group; its ``main`` is the one place where exceptions become exit codes."""

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        with warnings.catch_warnings():
            # "always": the same warning in a second run of the same process (tests, notebooks) still shows.
            warnings.simplefilter("always", RollauditWarning)
            warnings.showwarning = _show_warning
            code = self._exit_code(
                lambda: super(RollauditGroup, self).main(
                    args=args,
                    prog_name=prog_name or "rollaudit",
                    complete_var=complete_var,
                    standalone_mode=False,
                    **extra,
                )
            )
        if standalone_mode:
            sys.exit(code)
        return code

    @staticmethod
    def _exit_code(run: Callable[[], Any]) -> int:
        try:
            result = run()
        except RollauditError as error:
            typer.echo(f"error: {error.line()}", err=True)
            return error.exit_code
        except _NO_ARGS_IS_HELP as error:
            # ``rollaudit`` alone asks for help: not a mistake. The message is the help text (rich help,
            # were it switched on, would have printed itself already and left the message empty).
            if error.format_message().strip():
                typer.echo(error.format_message())
            return 0
        except BrokenPipeError:
            # stdout closed early (``rollaudit compare ... | head``): stop quietly, and keep Python's
            # final flush from failing on the same pipe.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        except click_exceptions.UsageError as error:
            hint = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
            # typer words a bad choice through pydantic ("Value error, 'gpu' is not one of ..."): drop the prefix.
            message = _one_line(error.format_message()).replace("Value error, ", "")
            typer.echo(f"error: {message}{hint}", err=True)
            return error.exit_code
        except click_exceptions.ClickException as error:
            typer.echo(f"error: {_one_line(error.format_message())}", err=True)
            return error.exit_code
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            return 1
        return result if isinstance(result, int) else 0


app = typer.Typer(
    name="rollaudit",
    cls=RollauditGroup,
    help="Audit the advantages of RL-for-LLM rollout dumps: batch-wide vs per-prompt vs trajectory-level GRPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


# ---------------------------------------------------------------------------------------------------------------------
# Options every command that reads dumps shares (``gate`` reuses them too).

Inputs = Annotated[
    list[str],
    typer.Argument(
        metavar="DUMP",
        help="Dump files, directories (a slime --dump-details directory pairs rollout and train dumps) or globs.",
        show_default=False,
    ),
]
RewardKey = Annotated[
    str | None,
    typer.Option(
        "--reward-key",
        metavar="KEY",
        help="Key of the trained-on reward when rewards are dicts (slime's --reward-key).",
    ),
]
SamplesPerPrompt = Annotated[
    int | None,
    typer.Option(
        "--n-samples-per-prompt",
        min=1,
        metavar="N",
        help="Samples per prompt, to group dumps that have no prompt keys (slime's --n-samples-per-prompt).",
    ),
]
InputFormat = Annotated[
    str | None,
    typer.Option(
        "--format",
        metavar="NAME",
        help="Dump format to read (e.g. slime); detected from each file's content by default.",
    ),
]
Schemes = Annotated[
    list[str] | None,
    typer.Option(
        "--schemes",
        "-s",
        metavar="SCHEMES",
        help=(
            "Comma-separated scheme strings, e.g. 'batch,prompt(scale=none),slime-legacy(n=8)'; commas inside "
            "parentheses belong to the scheme; may be repeated."
        ),
        show_default=False,
    ),
]
Reference = Annotated[
    str, typer.Option("--reference", "-r", metavar="SCHEME", help="The scheme every other is measured against.")
]
DeviceOption = Annotated[Device, typer.Option("--device", help="Where advantages are recomputed.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no status messages on stderr.")]


class TokenReduce(str, Enum):
    first = "first"
    last = "last"
    mean = "mean"


# Tables (verl, TRL, generic): which column plays which role. Not given: each format's own or the common names.
RewardColumn = Annotated[
    str | None, typer.Option("--reward-col", metavar="COLUMN", help="Tables: the column holding the reward.")
]
PromptColumn = Annotated[
    str | None, typer.Option("--prompt-col", metavar="COLUMN", help="Tables: the column holding the prompt key.")
]
TrajectoryColumn = Annotated[
    str | None,
    typer.Option("--trajectory-col", metavar="COLUMN", help="Tables: the column holding the trajectory key."),
]
StepColumn = Annotated[
    str | None, typer.Option("--step-col", metavar="COLUMN", help="Tables: the column holding the training step.")
]
AdvantageColumn = Annotated[
    str | None,
    typer.Option(
        "--advantage-col", metavar="COLUMN", help="Tables: the column holding the advantage the trainer recorded."
    ),
]
MaskColumn = Annotated[
    str | None,
    typer.Option(
        "--mask-col", metavar="COLUMN", help="Tables: the per-token loss-mask column for per-token advantages."
    ),
]
TokenReduceOption = Annotated[
    TokenReduce | None,
    typer.Option(
        "--token-reduce",
        help="Tables: per-token advantages to one value per sample: the first (default), last or mean masked-in one.",
        show_default=False,
    ),
]
RewardColumns = Annotated[
    str | None,
    typer.Option(
        "--reward-columns",
        metavar="COLUMNS",
        help="TRL: the comma-separated reward-function columns (default: every numeric column but step, advantage).",
    ),
]
RewardWeights = Annotated[
    str | None,
    typer.Option(
        "--reward-weights",
        metavar="WEIGHTS",
        help="TRL: the reward functions' weights, comma-separated in column order (1,0.5) or by name (acc=1,fmt=0.5).",
    ),
]
NumGenerations = Annotated[
    int | None,
    typer.Option(
        "--num-generations",
        min=1,
        metavar="N",
        help="TRL: completions per prompt (GRPOConfig.num_generations); default: the first run of equal prompts.",
    ),
]


class Engine(str, Enum):
    local = "local"
    ray = "ray"


# Whole runs: how files are read (parallel workers, a cache of reduced tables, Ray).
Jobs = Annotated[
    int | None,
    typer.Option(
        "--jobs", "-j", min=1, metavar="N", help="Worker processes reading files (default: by the run's size)."
    ),
]
CacheDirectory = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        metavar="DIR",
        help="Keep each file's reduced table here (default: ~/.cache/rollaudit, or $XDG_CACHE_HOME/rollaudit).",
    ),
]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Read every file, and keep nothing.")]
EngineOption = Annotated[Engine, typer.Option("--engine", help="Where the per-file work runs: here, or on Ray.")]
RayAddress = Annotated[
    str | None,
    typer.Option("--ray-address", metavar="ADDRESS", help="With --engine ray: the cluster (default: the running one)."),
]


def run_options(
    *,
    jobs: int | None = None,
    cache: Path | None = None,
    no_cache: bool = False,
    engine: Engine = Engine.local,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """The ``rollaudit.load`` keywords of the run options; the command line caches by default."""
    if no_cache and cache is not None:
        raise UsageError("--cache and --no-cache exclude each other", expected="one of them")
    if ray_address is not None and engine is not Engine.ray:
        raise UsageError("--ray-address needs --engine ray")
    return {
        "jobs": jobs,
        "cache": False if no_cache else (cache if cache is not None else True),
        "engine": engine.value,
        "ray_address": ray_address,
    }


def _column_names(option: str, text: str) -> list[str]:
    """``a,b`` to ``["a", "b"]``; an empty name is a usage error."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise UsageError(f"{option} {text!r} has an empty column name", expected="comma-separated names, e.g. a,b")
    return names


def _reward_weights(text: str) -> list[float] | dict[str, float]:
    """``1,0.5`` (weights in column order) or ``acc=1,fmt=0.5`` (by name); a mix or a non-number is a usage error."""
    expected = "comma-separated numbers (1,0.5) or name=weight pairs (acc=1,fmt=0.5)"
    parts = [part.strip() for part in text.split(",")]
    named = ["=" in part for part in parts]
    if any(named) and not all(named):
        raise UsageError(f"--reward-weights {text!r} mixes weights by name and by position", expected=expected)
    weights: dict[str, float] = {}
    for part in parts:
        name, _, number = part.rpartition("=")
        if any(named) and not name.strip():
            raise UsageError(f"--reward-weights {text!r}: {part!r} has no column name", expected=expected)
        try:
            weight = float(number)
        except ValueError:
            weight = math.nan
        if not math.isfinite(weight):
            raise UsageError(f"--reward-weights {text!r}: {number.strip()!r} is not a finite number", expected=expected)
        key = name.strip() if any(named) else str(len(weights))
        if key in weights:
            raise UsageError(f"--reward-weights {text!r} names {key!r} twice", expected=expected)
        weights[key] = weight
    return weights if any(named) else list(weights.values())


def load_options(
    *,
    reward_key: str | None = None,
    n_samples_per_prompt: int | None = None,
    reward_col: str | None = None,
    prompt_col: str | None = None,
    trajectory_col: str | None = None,
    step_col: str | None = None,
    advantage_col: str | None = None,
    mask_col: str | None = None,
    token_reduce: TokenReduce | None = None,
    reward_columns: str | None = None,
    reward_weights: str | None = None,
    num_generations: int | None = None,
) -> dict[str, Any]:
    """The loader options given on the command line as ``rollaudit.load`` keywords; those not given are left out,
    so ``load`` keeps its own defaults. Comma-separated values are split and checked here (one-line usage errors)."""
    given: dict[str, Any] = {
        "reward_key": reward_key,
        "n_samples_per_prompt": n_samples_per_prompt,
        "reward_col": reward_col,
        "prompt_col": prompt_col,
        "trajectory_col": trajectory_col,
        "step_col": step_col,
        "advantage_col": advantage_col,
        "mask_col": mask_col,
        "token_reduce": token_reduce.value if token_reduce is not None else None,
        "reward_columns": _column_names("--reward-columns", reward_columns) if reward_columns is not None else None,
        "reward_weights": _reward_weights(reward_weights) if reward_weights is not None else None,
        "num_generations": num_generations,
    }
    for name in ("reward_col", "prompt_col", "trajectory_col", "step_col", "advantage_col", "mask_col"):
        value = given[name]
        if value is not None and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} is empty", expected="a column name")
    return {name: value for name, value in given.items() if value is not None}


@dataclass
class Loaded:
    """A loaded table and what the load was: the ``load`` object of ``--json`` and the report header."""

    table: pa.Table
    summary: dict[str, Any] = field(default_factory=dict)


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


@contextmanager
def _progress(files: list[Path], sizes: list[int], quiet: bool, console: Console | None = None) -> Iterator[Any]:
    """An ``on_file`` callback for ``rollaudit.load``, drawing a progress bar on stderr for big loads."""
    console = console or _stderr_console()
    total = sum(sizes)
    big = len(files) >= PROGRESS_MIN_FILES or total >= PROGRESS_MIN_BYTES
    if quiet or not big or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("loading"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[completed_files]}/{task.fields[total_files]} files", markup=False),
        TimeElapsedColumn(),
        TextColumn("{task.description}", markup=False),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(files[0].name, total=total, completed_files=0, total_files=len(files))
        done = {"files": 0}

        def on_file(path: str, n_bytes: int) -> None:
            done["files"] += 1
            progress.update(task, advance=n_bytes, description=Path(path).name, completed_files=done["files"])

        yield on_file


def load_inputs(inputs: list[str], *, quiet: bool, format: str | None = None, **options: Any) -> Loaded:
    """Expand the inputs, load them (with a progress bar when big) and say what was loaded.

    ``format`` and ``options`` (``reward_key``, ``prompt_col``, ..., usually :func:`load_options`'s) go to
    ``rollaudit.load`` as they are, so a new load option is a new CLI option and nothing else.
    """
    import rollaudit

    files = rollaudit.expand_paths(inputs)
    sizes = [path.stat().st_size for path in files]
    started = time.perf_counter()
    with _progress(files, sizes, quiet) as on_file:
        table = rollaudit.load(files, format=format, on_file=on_file, **options)
    seconds = time.perf_counter() - started
    return Loaded(
        table=table,
        summary={
            "format": "+".join(rollaudit.loaded_formats(table)),
            "files": [str(path) for path in files],
            "bytes": sum(sizes),
            "seconds": round(seconds, 4),
        },
    )


def scheme_strings(values: list[str] | None, default: tuple[str, ...] | list[str]) -> list[str]:
    """``--schemes`` values (each comma-separated, repeatable) as scheme strings, each checked before any load."""
    import rollaudit

    if not values:
        return list(default)
    names: list[str] = []
    for value in values:
        names.extend(rollaudit.split_schemes(value))
    if not names:
        raise UsageError("--schemes is empty", expected="scheme strings, e.g. batch,prompt")
    for name in names:
        rollaudit.get_scheme(name)
    return names


def _check_plot_directory(directory: Path) -> Path:
    """A directory to write PNGs into: an existing writable one, or one that can be made. Checked up front."""
    from ._output import check_writable

    if directory.exists() and not directory.is_dir():
        raise UsageError("is not a directory", file=str(directory), expected="a directory for the PNGs")
    if directory.is_dir():
        check_writable(directory / "group_sizes.png")
    else:
        check_writable(directory)
    return directory


def _echo_status(message: str, quiet: bool) -> None:
    if not quiet:
        typer.echo(message, err=True)


def _write_text(text: str, output: Path | None, quiet: bool) -> None:
    """Text to stdout, or atomically to ``output``."""
    if output is None:
        typer.echo(text, nl=False)
        return
    from ._output import write_atomic

    write_atomic(output, text)
    _echo_status(f"wrote {output}", quiet)


def _terminal_text(renderable: Any, width: int = 100) -> str:
    """A rich renderable as plain text (for ``-o`` without --json/--markdown)."""
    from io import StringIO

    from rich.console import Console

    buffer = StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False, force_terminal=False).print(renderable)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------------------------------
# compare


@app.command()
def compare(
    inputs: Inputs,
    schemes: Schemes = None,
    reference: Reference = "prompt",
    reward_key: RewardKey = None,
    n_samples_per_prompt: SamplesPerPrompt = None,
    input_format: InputFormat = None,
    reward_col: RewardColumn = None,
    prompt_col: PromptColumn = None,
    trajectory_col: TrajectoryColumn = None,
    step_col: StepColumn = None,
    advantage_col: AdvantageColumn = None,
    mask_col: MaskColumn = None,
    token_reduce: TokenReduceOption = None,
    reward_columns: RewardColumns = None,
    reward_weights: RewardWeights = None,
    num_generations: NumGenerations = None,
    jobs: Jobs = None,
    cache: CacheDirectory = None,
    no_cache: NoCache = False,
    engine: EngineOption = Engine.local,
    ray_address: RayAddress = None,
    device: DeviceOption = Device.auto,
    as_json: Annotated[
        bool, typer.Option("--json", help="One versioned JSON document on stdout (schema: README).")
    ] = False,
    as_markdown: Annotated[bool, typer.Option("--markdown", help="A Markdown report, for a pull request.")] = False,
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
    top: Annotated[
        int, typer.Option("--top", min=0, metavar="N", help="How many prompts each prompt table shows.")
    ] = 5,
    quiet: Quiet = False,
) -> None:
    """Recompute advantages under several schemes and show how far each is from the reference.

    Default schemes: batch,prompt,trajectory; reference: prompt.
    """
    if as_json and as_markdown:
        raise UsageError("--json and --markdown exclude each other", expected="one output format")
    from ._output import check_writable

    output_path = check_writable(output) if output is not None else None
    plot_directory = _check_plot_directory(plot) if plot is not None else None
    import rollaudit

    names = scheme_strings(schemes, rollaudit.DEFAULT_SCHEMES)
    rollaudit.get_scheme(reference)
    loaded = load_inputs(
        inputs,
        quiet=quiet,
        format=input_format,
        **load_options(
            reward_key=reward_key,
            n_samples_per_prompt=n_samples_per_prompt,
            reward_col=reward_col,
            prompt_col=prompt_col,
            trajectory_col=trajectory_col,
            step_col=step_col,
            advantage_col=advantage_col,
            mask_col=mask_col,
            token_reduce=token_reduce,
            reward_columns=reward_columns,
            reward_weights=reward_weights,
            num_generations=num_generations,
        ),
        **run_options(jobs=jobs, cache=cache, no_cache=no_cache, engine=engine, ray_address=ray_address),
    )
    report = rollaudit.audit(loaded.table, schemes=names, reference=reference, device=device.value)

    if as_json:
        document = {**report.to_dict(), "load": loaded.summary}
        _write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", output_path, quiet)
    elif as_markdown:
        from ._render import render_markdown

        _write_text(render_markdown(report, loaded.summary, top=top), output_path, quiet)
    else:
        from ._render import render_compare

        renderable = render_compare(report, loaded.summary, top=top)
        if output_path is None:
            from rich.console import Console

            Console(highlight=False).print(renderable)
        else:
            _write_text(_terminal_text(renderable), output_path, quiet)

    if plot_directory is not None:
        from ._plots import write_plots

        advantages = rollaudit.recompute(loaded.table, report.schemes, device=device.value)
        columns = {name: advantages.column(name).to_numpy() for name in advantages.column_names}
        for path in write_plots(report, columns, plot_directory):
            _echo_status(f"wrote {path}", quiet)


# ---------------------------------------------------------------------------------------------------------------------
# inspect


@app.command()
def inspect(
    inputs: Inputs,
    reward_key: RewardKey = None,
    n_samples_per_prompt: SamplesPerPrompt = None,
    input_format: InputFormat = None,
    reward_col: RewardColumn = None,
    prompt_col: PromptColumn = None,
    trajectory_col: TrajectoryColumn = None,
    step_col: StepColumn = None,
    advantage_col: AdvantageColumn = None,
    mask_col: MaskColumn = None,
    token_reduce: TokenReduceOption = None,
    reward_columns: RewardColumns = None,
    reward_weights: RewardWeights = None,
    num_generations: NumGenerations = None,
    jobs: Jobs = None,
    cache: CacheDirectory = None,
    no_cache: NoCache = False,
    engine: EngineOption = Engine.local,
    ray_address: RayAddress = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    quiet: Quiet = False,
) -> None:
    """What a dump holds (format, steps, counts, fields, reward type, key coverage), without recomputing."""
    loaded = load_inputs(
        inputs,
        quiet=quiet,
        format=input_format,
        **load_options(
            reward_key=reward_key,
            n_samples_per_prompt=n_samples_per_prompt,
            reward_col=reward_col,
            prompt_col=prompt_col,
            trajectory_col=trajectory_col,
            step_col=step_col,
            advantage_col=advantage_col,
            mask_col=mask_col,
            token_reduce=token_reduce,
            reward_columns=reward_columns,
            reward_weights=reward_weights,
            num_generations=num_generations,
        ),
        **run_options(jobs=jobs, cache=cache, no_cache=no_cache, engine=engine, ray_address=ray_address),
    )
    from rollaudit import describe

    description = describe(loaded.table)
    if as_json:
        from ._report import SCHEMA_VERSION, json_value

        document = {"schema_version": SCHEMA_VERSION, **json_value(description), "load": loaded.summary}
        typer.echo(json.dumps(document, indent=2, allow_nan=False))
        return
    from rich.console import Console

    from ._render import render_inspect

    Console(highlight=False).print(render_inspect(description, loaded.summary))


# ---------------------------------------------------------------------------------------------------------------------
# convert


def _write_parquet(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, path)


def _write_feather(table: pa.Table, path: Path) -> None:
    import pyarrow.feather as feather

    feather.write_feather(table, path)


def _write_arrow(table: pa.Table, path: Path) -> None:
    # Uncompressed IPC: readable by every Arrow implementation, not only those built with lz4.
    import pyarrow.feather as feather

    feather.write_feather(table, path, compression="uncompressed")


def _write_csv(table: pa.Table, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.csv as csv

    try:
        csv.write_csv(table, path)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise UsageError(
            f"cannot write this table as CSV: {_one_line(error)}", expected="a Parquet or Arrow output"
        ) from None


def _json_ready(value: Any) -> Any:
    """NaN and inf become null: JSON has no such numbers."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_ready(item) for item in value]
    return value


def _write_jsonl(table: pa.Table, path: Path) -> None:
    with path.open("w", encoding="utf-8") as stream:
        for batch in table.to_batches(max_chunksize=65_536):
            for row in batch.to_pylist():
                stream.write(json.dumps(_json_ready(row), allow_nan=False, default=str) + "\n")


TABLE_WRITERS: dict[str, Callable[[Any, Path], None]] = {
    ".parquet": _write_parquet,
    ".pq": _write_parquet,
    ".feather": _write_feather,
    ".arrow": _write_arrow,
    ".ipc": _write_arrow,
    ".csv": _write_csv,
    ".jsonl": _write_jsonl,
    ".ndjson": _write_jsonl,
}
"""Output extension -> writer of a pyarrow table to a (temporary) path."""

ADVANTAGE_PREFIX = "advantage:"


@app.command()
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
    reward_key: RewardKey = None,
    n_samples_per_prompt: SamplesPerPrompt = None,
    input_format: InputFormat = None,
    reward_col: RewardColumn = None,
    prompt_col: PromptColumn = None,
    trajectory_col: TrajectoryColumn = None,
    step_col: StepColumn = None,
    advantage_col: AdvantageColumn = None,
    mask_col: MaskColumn = None,
    token_reduce: TokenReduceOption = None,
    reward_columns: RewardColumns = None,
    reward_weights: RewardWeights = None,
    num_generations: NumGenerations = None,
    jobs: Jobs = None,
    cache: CacheDirectory = None,
    no_cache: NoCache = False,
    engine: EngineOption = Engine.local,
    ray_address: RayAddress = None,
    device: DeviceOption = Device.auto,
    quiet: Quiet = False,
) -> None:
    """Write the canonical table (plus an advantage:<scheme> column per --schemes entry) to a file."""
    from ._output import check_writable, write_atomic

    check_writable(output)
    writer = TABLE_WRITERS.get(output.suffix.lower())
    if writer is None:
        extension = repr(output.suffix) if output.suffix else "(none)"
        raise UsageError(
            f"unknown output extension {extension}",
            file=str(output),
            expected=f"one of {', '.join(TABLE_WRITERS)}",
        )
    names = scheme_strings(schemes, []) if schemes else []
    loaded = load_inputs(
        inputs,
        quiet=quiet,
        format=input_format,
        **load_options(
            reward_key=reward_key,
            n_samples_per_prompt=n_samples_per_prompt,
            reward_col=reward_col,
            prompt_col=prompt_col,
            trajectory_col=trajectory_col,
            step_col=step_col,
            advantage_col=advantage_col,
            mask_col=mask_col,
            token_reduce=token_reduce,
            reward_columns=reward_columns,
            reward_weights=reward_weights,
            num_generations=num_generations,
        ),
        **run_options(jobs=jobs, cache=cache, no_cache=no_cache, engine=engine, ray_address=ray_address),
    )
    table = loaded.table
    if names:
        import rollaudit

        advantages = rollaudit.recompute(table, names, device=device.value)
        for name in advantages.column_names:
            column = f"{ADVANTAGE_PREFIX}{name}"
            if column in table.column_names:
                raise UsageError(f"the table already has a column {column!r}", expected="a dump without it")
            table = table.append_column(column, advantages.column(name))
    write_atomic(output, lambda temporary: writer(table, temporary))
    _echo_status(f"wrote {output}: {table.num_rows:,} rows, {table.num_columns} columns", quiet)


# ---------------------------------------------------------------------------------------------------------------------
# gate

CI_LOG_WIDTH = 120
"""Columns of the gate's table when stdout is no terminal and COLUMNS is unset (a CI log); rich would use 80."""


def _log_console() -> Console:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(highlight=False, width=CI_LOG_WIDTH)
    return console


@app.command()
def gate(
    inputs: Inputs,
    max_rules: Annotated[
        list[str] | None,
        typer.Option(
            "--max",
            metavar="SCHEME:METRIC=LIMIT",
            help="The metric of SCHEME against the reference must be at most LIMIT (a rate may be 1%); repeatable.",
            show_default=False,
        ),
    ] = None,
    min_rules: Annotated[
        list[str] | None,
        typer.Option(
            "--min",
            metavar="SCHEME:METRIC=LIMIT",
            help="The metric of SCHEME against the reference must be at least LIMIT; repeatable.",
            show_default=False,
        ),
    ] = None,
    reference: Annotated[
        str | None,
        typer.Option(
            "--reference",
            "-r",
            metavar="SCHEME",
            help="The scheme every metric is measured against. Default: the baseline's reference, else prompt.",
            show_default=False,
        ),
    ] = None,
    schemes: Schemes = None,
    require: Annotated[
        list[str] | None,
        typer.Option(
            "--require",
            metavar="NAME",
            help="A data rule: prompt-key, trajectory-key, finite-rewards or no-singletons; repeatable.",
            show_default=False,
        ),
    ] = None,
    expect_recorded: Annotated[
        str | None,
        typer.Option(
            "--expect-recorded",
            metavar="SCHEME",
            help="The advantages the dump recorded must equal SCHEME's; on a mismatch, the best fit is named.",
            show_default=False,
        ),
    ] = None,
    recorded_tolerance: Annotated[
        float | None,
        typer.Option(
            "--recorded-tolerance",
            metavar="TOL",
            help="Tolerance of --expect-recorded, times max(1, max |recorded|). Default: 1e-4.",
            show_default=False,
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            metavar="FILE",
            help="Fail when a metric moved from this baseline (written by --write-baseline) past its tolerance.",
            show_default=False,
        ),
    ] = None,
    baseline_tolerance: Annotated[
        list[str] | None,
        typer.Option(
            "--baseline-tolerance",
            metavar="METRIC:TOL",
            help=(
                "How far METRIC may move from the baseline: sign_flip_rate:0.5% (points on a rate), nonzero:5% "
                "(relative), nonzero:3 (absolute), *:TOL (every other metric); repeatable. Default: unchanged."
            ),
            show_default=False,
        ),
    ] = None,
    write_baseline_file: Annotated[
        Path | None,
        typer.Option(
            "--write-baseline",
            metavar="FILE",
            help="Store this run's metrics as a baseline (atomically; may be the --baseline file).",
            show_default=False,
        ),
    ] = None,
    config_file: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="Read the rules from FILE instead of [tool.rollaudit.gate] of the nearest pyproject.toml.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One versioned JSON document on stdout instead of the table.")
    ] = False,
    junit: Annotated[
        Path | None,
        typer.Option(
            "--junit", metavar="FILE", help="Write JUnit XML (one test case per rule) to FILE.", show_default=False
        ),
    ] = None,
    reward_key: RewardKey = None,
    n_samples_per_prompt: SamplesPerPrompt = None,
    input_format: InputFormat = None,
    reward_col: RewardColumn = None,
    prompt_col: PromptColumn = None,
    trajectory_col: TrajectoryColumn = None,
    step_col: StepColumn = None,
    advantage_col: AdvantageColumn = None,
    mask_col: MaskColumn = None,
    token_reduce: TokenReduceOption = None,
    reward_columns: RewardColumns = None,
    reward_weights: RewardWeights = None,
    num_generations: NumGenerations = None,
    jobs: Jobs = None,
    cache: CacheDirectory = None,
    no_cache: NoCache = False,
    engine: EngineOption = Engine.local,
    ray_address: RayAddress = None,
    device: DeviceOption = Device.auto,
    quiet: Quiet = False,
) -> None:
    """Check rules on the dumps' advantages: exit 0 when all hold, 1 when any fails, 2 on a usage or input error.

    Rules come from the options and from [tool.rollaudit.gate] in the nearest pyproject.toml (or --config);
    the options are merged over the file. Under GitHub Actions, failed rules become ::error annotations and a
    summary is appended to $GITHUB_STEP_SUMMARY.
    """
    from ._gate import gate_config, load_gate_config, require_rules, run_gate, write_baseline
    from ._gate_render import emit_github, junit_xml, terminal, to_json
    from ._output import check_writable, write_atomic

    config = gate_config(
        load_gate_config(path=config_file, start_dir="."),
        max_rules=max_rules or (),
        min_rules=min_rules or (),
        reference=reference,
        schemes=schemes,
        require=require or (),
        expect_recorded=expect_recorded,
        recorded_tolerance=recorded_tolerance,
        baseline=baseline,
        baseline_tolerance=baseline_tolerance or (),
    )
    require_rules(config, writing_baseline=write_baseline_file is not None)
    junit_path = check_writable(junit) if junit is not None else None
    baseline_path = check_writable(write_baseline_file) if write_baseline_file is not None else None
    options = load_options(
        reward_key=reward_key,
        n_samples_per_prompt=n_samples_per_prompt,
        reward_col=reward_col,
        prompt_col=prompt_col,
        trajectory_col=trajectory_col,
        step_col=step_col,
        advantage_col=advantage_col,
        mask_col=mask_col,
        token_reduce=token_reduce,
        reward_columns=reward_columns,
        reward_weights=reward_weights,
        num_generations=num_generations,
    )
    run = run_options(jobs=jobs, cache=cache, no_cache=no_cache, engine=engine, ray_address=ray_address)
    table = load_inputs(inputs, quiet=quiet, format=input_format, **options, **run).table
    result = run_gate(table, config, device.value)

    if baseline_path is not None:
        if result.report is not None:
            write_baseline(baseline_path, result.report)
            _echo_status(f"wrote baseline {baseline_path}", quiet)
        else:
            typer.echo(f"warning: baseline {baseline_path} not written: the audit could not run", err=True)
    if as_json:
        typer.echo(to_json(result), nl=False)
    elif result.results:  # a run that only writes a baseline has no rule to show
        _log_console().print(terminal(result))
    if junit_path is not None:
        write_atomic(junit_path, junit_xml(result))
        _echo_status(f"wrote {junit_path}", quiet)
    # Annotations go to stdout, where GitHub reads workflow commands, unless stdout holds the JSON document.
    emit_github(result, stream=sys.stderr if as_json else None)
    result.raise_for_failures()


def main(argv: list[str] | None = None) -> None:
    """The console script ``rollaudit``."""
    typer.main.get_command(app).main(args=argv, prog_name="rollaudit")


if __name__ == "__main__":  # pragma: no cover
    main()
