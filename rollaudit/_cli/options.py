"""The command line's options, each declared once.

Options several commands take are declared here as ``Annotated`` aliases;
the options that say how to load dumps form one group, :data:`LOAD`, which a
command takes as one :class:`~rollaudit.LoadOptions` parameter (the model is
sqlite-utils' shared option decorators). The group puts its options into the
command's signature where that parameter stands, and hands the command the
one validated object built from them (validation: ``LoadOptions`` itself,
worded in flags).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from .._errors import UsageError
from .._loaders.options import ENGINES, FLAGS, TOKEN_REDUCE_RULES, LoadOptions, checked
from .._render.registry import COMPARE_RENDERERS


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


def _choices(name: str, values: Iterable[str]) -> Any:
    """A str Enum of the values the library defines (the option's choices, spelled once, where they are used)."""
    return Enum(name, {value: value for value in values}, type=str)


TokenReduce = _choices("TokenReduce", TOKEN_REDUCE_RULES)
Engine = _choices("Engine", ENGINES)
CompareFormat = _choices("CompareFormat", COMPARE_RENDERERS)


Inputs = Annotated[
    list[str],
    typer.Argument(
        metavar="DUMP",
        help="Dump files, directories (a slime --dump-details directory pairs rollout and train dumps) or globs.",
        show_default=False,
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
TrainedWith = Annotated[
    str | None,
    typer.Option(
        "--trained-with",
        metavar="SCHEME",
        help=(
            "The scheme your run trained with, where the dump records no advantages (they outrank it); "
            "default: the framework's default preset for the dump."
        ),
        show_default=False,
    ),
]
DeviceOption = Annotated[Device, typer.Option("--device", help="Where advantages are recomputed.")]
HtmlFile = Annotated[
    Path | None,
    typer.Option(
        "--html",
        metavar="FILE",
        help="Also write a self-contained HTML page (figures inline, no network), atomically: the report "
        "(watch: the run so far, rewritten after each step).",
    ),
]
Steps = Annotated[
    str | None,
    typer.Option(
        "--steps",
        metavar="STEPS",
        help="Audit only these steps: steps and inclusive ranges, comma-separated, e.g. 10-20,30.",
        show_default=False,
    ),
]
PromptKey = Annotated[
    str | None,
    typer.Option(
        "--prompt",
        metavar="KEY",
        help=(
            "Also show this prompt's samples: each one's step, trajectory, reward and advantage under every scheme "
            "(KEY as the report prints it)."
        ),
        show_default=False,
    ),
]
ConfigFile = Annotated[
    Path | None,
    typer.Option(
        "--gate-config",
        metavar="FILE",
        help="Read the rules from FILE instead of [tool.rollaudit.gate] of the nearest pyproject.toml.",
        show_default=False,
    ),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no status messages on stderr.")]


# ---------------------------------------------------------------------------------------------------------------------
# Option groups: several options declared once, given to a command as one object.


@dataclass(frozen=True)
class Option:
    """One option of a group: its parameter name, its ``Annotated`` type and its default."""

    name: str
    annotation: Any
    default: Any = None


@dataclass(frozen=True)
class OptionGroup:
    """Options shared by several commands, handed to each as the one object ``build`` makes of their values.

    Used as a decorator: the command's parameter named ``parameter`` (say ``load: LoadOptions``) is replaced, in the
    signature typer reads, by the group's options; when the command runs, their values become that one argument.
    """

    parameter: str
    options: tuple[Option, ...]
    build: Callable[[dict[str, Any]], Any]

    def __call__(self, command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        if self.parameter not in signature.parameters:
            raise TypeError(f"{command.__name__} has no parameter {self.parameter!r} for the option group")
        names = {option.name for option in self.options}
        parameters = []
        for parameter in signature.parameters.values():
            if parameter.name != self.parameter:
                parameters.append(parameter)
                continue
            parameters += [
                inspect.Parameter(option.name, parameter.kind, default=option.default, annotation=option.annotation)
                for option in self.options
            ]

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            group = {name: values.pop(name) for name in list(values) if name in names}
            return command(**values, **{self.parameter: self.build(group)})

        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
        del run.__wrapped__  # typer must read the signature above, not the command's own
        return run


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


def _load_options(values: Mapping[str, Any]) -> LoadOptions:
    """The load group's values as one LoadOptions; the command line caches by default."""
    values = dict(values)
    cache, no_cache = values.pop("cache"), values.pop("no_cache")
    if no_cache and cache is not None:
        raise UsageError("--cache and --no-cache exclude each other", expected="one of them")
    values["cache"] = False if no_cache else (cache if cache is not None else True)
    values["format"] = values.pop("input_format")
    if values["reward_columns"] is not None:
        values["reward_columns"] = _column_names("--reward-columns", values["reward_columns"])
    if values["reward_weights"] is not None:
        values["reward_weights"] = _reward_weights(values["reward_weights"])
    for name in ("token_reduce", "engine"):
        if isinstance(values[name], Enum):
            values[name] = values[name].value
    values["token_reduce"] = values["token_reduce"] or "first"
    return LoadOptions(**checked(values, FLAGS))


def _option(name: str, kind: Any, *declarations: str, default: Any = None, **settings: Any) -> Option:
    return Option(name, Annotated[kind, typer.Option(*declarations, **settings)], default)


LOAD = OptionGroup(
    parameter="load",
    options=(
        _option(
            "reward_key",
            str | None,
            "--reward-key",
            metavar="KEY",
            help="Key of the trained-on reward when rewards are dicts (slime's --reward-key).",
        ),
        _option(
            "n_samples_per_prompt",
            int | None,
            "--n-samples-per-prompt",
            min=1,
            metavar="N",
            help="Samples per prompt, to group dumps that have no prompt keys (slime's --n-samples-per-prompt).",
        ),
        _option(
            "input_format",
            str | None,
            "--format",
            metavar="NAME",
            help="Dump format to read (e.g. slime); detected from each file's content by default.",
        ),
        _option(
            "run",
            str | None,
            "--run",
            metavar="NAME",
            help="Of a directory holding several runs, the one to read (default: each, one report per run).",
        ),
        # Tables (verl, TRL, generic): which column plays which role. Not given: each format's own or the common names.
        _option(
            "reward_col", str | None, "--reward-col", metavar="COLUMN", help="Tables: the column holding the reward."
        ),
        _option(
            "prompt_col",
            str | None,
            "--prompt-col",
            metavar="COLUMN",
            help="Tables: the column holding the prompt key.",
        ),
        _option(
            "trajectory_col",
            str | None,
            "--trajectory-col",
            metavar="COLUMN",
            help="Tables: the column holding the trajectory key.",
        ),
        _option(
            "step_col", str | None, "--step-col", metavar="COLUMN", help="Tables: the column holding the training step."
        ),
        _option(
            "advantage_col",
            str | None,
            "--advantage-col",
            metavar="COLUMN",
            help="Tables: the column holding the advantage the trainer recorded.",
        ),
        _option(
            "mask_col",
            str | None,
            "--mask-col",
            metavar="COLUMN",
            help="Tables: the per-token loss-mask column for per-token advantages.",
        ),
        _option(
            "token_reduce",
            TokenReduce | None,
            "--token-reduce",
            help=(
                "Tables: per-token advantages to one value per sample: the first (default), last or mean masked-in one."
            ),
            show_default=False,
        ),
        _option(
            "reward_columns",
            str | None,
            "--reward-columns",
            metavar="COLUMNS",
            help=(
                "TRL: the comma-separated reward-function columns (default: every numeric column but step, advantage)."
            ),
        ),
        _option(
            "reward_weights",
            str | None,
            "--reward-weights",
            metavar="WEIGHTS",
            help=(
                "TRL: the reward functions' weights, comma-separated in column order (1,0.5) or by name "
                "(acc=1,fmt=0.5)."
            ),
        ),
        _option(
            "num_generations",
            int | None,
            "--num-generations",
            min=1,
            metavar="N",
            help="TRL: completions per prompt (GRPOConfig.num_generations); default: the first run of equal prompts.",
        ),
        _option(
            "config",
            Path | None,
            "--config",
            metavar="FILE",
            help=(
                "The run's config (args.json, config.yaml, a TOML file): the settings that decide its arithmetic "
                "(default: the one its framework saves beside the dumps, where there is one)."
            ),
        ),
        # Whole runs: how files are read (parallel workers, a cache of read tables, Ray).
        _option(
            "jobs",
            int | None,
            "--jobs",
            "-j",
            min=1,
            metavar="N",
            help="Worker processes reading files (default: by the run's size).",
        ),
        _option(
            "cache",
            Path | None,
            "--cache",
            metavar="DIR",
            help="Keep each file's read table here (default: ~/.cache/rollaudit, or $XDG_CACHE_HOME/rollaudit).",
        ),
        _option("no_cache", bool, "--no-cache", default=False, help="Read every file, and keep nothing."),
        _option(
            "engine",
            Engine,
            "--engine",
            default=Engine.local,
            help="Where the per-file work runs: here, or on Ray.",
        ),
        _option(
            "ray_address",
            str | None,
            "--ray-address",
            metavar="ADDRESS",
            help="With --engine ray: the cluster (default: the running one).",
        ),
    ),
    build=_load_options,
)
"""How to load the dumps: every command that reads dumps takes these, as one ``load: LoadOptions`` parameter."""


def scheme_strings(values: list[str] | None, default: tuple[str, ...] | list[str]) -> list[str]:
    """``--schemes`` values (each comma-separated, repeatable) as scheme strings, each checked before any load."""
    from .._audit.presets import get_scheme, split_schemes

    if not values:
        return list(default)
    names: list[str] = []
    for value in values:
        names.extend(split_schemes(value))
    if not names:
        raise UsageError("--schemes is empty", expected="scheme strings, e.g. batch,prompt")
    for name in names:
        get_scheme(name)
    return names


def compare_format(chosen: Enum | None, *, as_json: bool, as_markdown: bool) -> str:
    """The renderer ``compare`` uses: ``--output-format``, or its aliases ``--json`` and ``--markdown``; two that
    disagree are a usage error."""
    aliases = (("--json", "json", as_json), ("--markdown", "markdown", as_markdown))
    named = {flag: name for flag, name, given in aliases if given}
    if chosen is not None:
        named[f"--output-format {chosen.value}"] = chosen.value
    if len(set(named.values())) > 1:
        raise UsageError(f"{' and '.join(named)} exclude each other", expected="one output format")
    return next(iter(named.values()), "terminal")


GateRules = dict[str, Any]
"""The gate's rule options by name, as :func:`rollaudit.gate_config` takes them (sequences never None)."""
_REPEATABLE = ("max_rules", "min_rules", "require", "baseline_tolerance", "fail_on", "ignore")


def _gate_rules(values: Mapping[str, Any]) -> GateRules:
    return {name: (() if value is None and name in _REPEATABLE else value) for name, value in values.items()}


_RULE = "SCHEME:METRIC=LIMIT"
GATE_RULES = OptionGroup(
    parameter="rules",
    options=(
        _option(
            "max_rules",
            list[str] | None,
            "--max",
            metavar=_RULE,
            show_default=False,
            help=(
                "The metric of SCHEME against the reference must be at most LIMIT (a rate may be 1%); repeatable. "
                "SCHEME 'trained' checks the run's own advantages; a named scheme measures what it would do to "
                "this data, whatever the trainer did."
            ),
        ),
        _option(
            "min_rules",
            list[str] | None,
            "--min",
            metavar=_RULE,
            show_default=False,
            help="The metric of SCHEME (or 'trained') against the reference must be at least LIMIT; repeatable.",
        ),
        _option(
            "reference",
            str | None,
            "--reference",
            "-r",
            metavar="SCHEME",
            show_default=False,
            help="The scheme every metric is measured against. Default: the baseline's reference, else prompt.",
        ),
        Option("schemes", Schemes),
        Option("trained_with", TrainedWith),
        _option(
            "require",
            list[str] | None,
            "--require",
            metavar="NAME",
            show_default=False,
            help="A data rule: prompt-key, trajectory-key, finite-rewards or no-singletons; repeatable.",
        ),
        _option(
            "fail_on",
            list[str] | None,
            "--fail-on",
            metavar="CODE[,CODE...]",
            show_default=False,
            help=(
                "Fail when the dump shows a finding of these codes (rollaudit findings lists them), of a severity "
                "(error, warning, note) or of any code (all); repeatable."
            ),
        ),
        _option(
            "ignore",
            list[str] | None,
            "--ignore",
            metavar="CODE[,CODE...]",
            show_default=False,
            help="Codes, severities or all that --fail-on leaves out; repeatable.",
        ),
        _option(
            "expect_recorded",
            str | None,
            "--expect-recorded",
            metavar="SCHEME",
            show_default=False,
            help="The advantages the dump recorded must equal SCHEME's; on a mismatch, the best fit is named.",
        ),
        _option(
            "recorded_tolerance",
            float | None,
            "--recorded-tolerance",
            metavar="TOL",
            show_default=False,
            help="Tolerance of --expect-recorded, times max(1, |recorded|) over each row's prompt group. "
            "Default: 1e-4.",
        ),
        _option(
            "baseline",
            Path | None,
            "--baseline",
            metavar="FILE",
            show_default=False,
            help="Fail when a metric moved from this baseline (written by --write-baseline) past its tolerance.",
        ),
        _option(
            "baseline_tolerance",
            list[str] | None,
            "--baseline-tolerance",
            metavar="METRIC:TOL",
            show_default=False,
            help=(
                "How far METRIC may move from the baseline: sign_flip_rate:0.5% (points on a rate), nonzero:5% "
                "(relative), nonzero:3 (absolute), *:TOL (every other metric); repeatable. Default: unchanged."
            ),
        ),
    ),
    build=_gate_rules,
)
"""``rollaudit gate``'s rules: given to the command as one dict of :func:`rollaudit.gate_config` keywords."""


@dataclass(frozen=True)
class DashboardOptions:
    """Where the audit's per-step scalars go besides the report: ``--tensorboard DIR``, ``--wandb PROJECT`` and
    ``--wandb-group GROUP`` (default: the run directory's name)."""

    tensorboard: Path | None = None
    wandb_project: str | None = None
    wandb_group: str | None = None

    @property
    def any(self) -> bool:
        return self.tensorboard is not None or self.wandb_project is not None


def _dashboard_options(values: Mapping[str, Any]) -> DashboardOptions:
    options = DashboardOptions(**values)
    if options.wandb_group is not None and options.wandb_project is None:
        raise UsageError("--wandb-group needs --wandb", expected="--wandb PROJECT --wandb-group GROUP")
    return options


DASHBOARDS = OptionGroup(
    parameter="dashboards",
    options=(
        _option(
            "tensorboard",
            Path | None,
            "--tensorboard",
            metavar="DIR",
            show_default=False,
            help=(
                "Also write each step's metrics as TensorBoard scalars into a new event file in DIR (e.g. the "
                "trainer's log directory), at the dump's steps. Tags: rollaudit/<row>/<metric>, <row> 'trained' for "
                "the run's own advantages, else the scheme without spaces and with each character but letters, "
                "digits and -_.= made _ (slime-legacy(n=8): slime-legacy_n=8), <metric> its --json name; "
                "rollaudit/data/no_signal_prompt_share (the share of prompts without learning signal); the text "
                "rollaudit/trained/scheme (the run's scheme, where it changes). Needs rollaudit[tensorboard]."
            ),
        ),
        _option(
            "wandb_project",
            str | None,
            "--wandb",
            metavar="PROJECT",
            show_default=False,
            help=(
                "Also log each step's metrics, as --tensorboard names them, to a W&B run of rollaudit's own (job "
                "type rollaudit) in PROJECT (the trainer's: the runs overlay), at the dump's steps; never the "
                "trainer's run. WANDB_MODE, WANDB_ENTITY, WANDB_DIR are honoured. Needs rollaudit[wandb]."
            ),
        ),
        _option(
            "wandb_group",
            str | None,
            "--wandb-group",
            metavar="GROUP",
            show_default=False,
            help="The W&B group of the run (default: the run directory's name).",
        ),
    ),
    build=_dashboard_options,
)
"""The dashboards a command writes the audit's per-step scalars to: one ``dashboards: DashboardOptions``."""
