"""What a load needs besides the paths: one validated object, checked once, before any file is read.

:class:`LoadOptions` holds the reading options (which reward, which columns
play which role, how per-token values become one per sample) and the run
options (worker processes, the cache, the engine). ``rollaudit.load`` builds
it from its keywords; the command line builds it from its shared option
group. Both go through :func:`checked`, the one place where options are
validated; only the words of a message differ (``ray_address`` in Python,
``--ray-address`` on the command line).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from .._errors import UsageError

TokenReduce = Literal["first", "last", "mean"]
"""How per-token values become one per sample: the first token's, the last's, or their mean."""
Engine = Literal["local", "ray"]
"""Where a load's per-file reads run: this machine (this process or worker processes), or Ray tasks."""
TOKEN_REDUCE_RULES: tuple[str, ...] = get_args(TokenReduce)
ENGINES: tuple[str, ...] = get_args(Engine)
COLUMN_OPTIONS = ("reward_col", "prompt_col", "trajectory_col", "step_col", "advantage_col", "mask_col")
_RUN = {"run": True}  # field metadata: how the work runs, not what a file reads as (not part of the cache key)


@dataclass(frozen=True)
class LoadOptions:
    """Every option of a load.

    Reading: ``format`` (None: detected from each file's content), ``reward_key`` (slime's ``--reward-key``),
    ``n_samples_per_prompt`` (prompt keys as consecutive slices for dumps without any), the table column options
    (``reward_col`` ... ``mask_col``: which column plays which role), ``token_reduce`` (``first``, ``last``,
    ``mean``: per-token advantages to one value per sample), and TRL's ``reward_columns``, ``reward_weights`` and
    ``num_generations``. Running: ``jobs`` (worker processes; None: by the run's size), ``cache`` (None/False:
    none, True: the default directory, a path: that directory), ``engine`` (``local`` or ``ray``) and
    ``ray_address``; ``run`` (which run of a directory that holds several, by its name); ``config`` (the run's
    config file, where the framework saves none beside its dumps, or another: its settings decide the arithmetic).
    """

    format: str | None = None
    reward_key: str | None = None
    n_samples_per_prompt: int | None = None
    reward_col: str | None = None
    prompt_col: str | None = None
    trajectory_col: str | None = None
    step_col: str | None = None
    advantage_col: str | None = None
    mask_col: str | None = None
    token_reduce: TokenReduce = "first"
    # Any sequence is taken; checked() stores a tuple (weights by name: a dict).
    reward_columns: Sequence[str] | None = None
    reward_weights: Sequence[float] | Mapping[str, float] | None = None
    num_generations: int | None = None
    jobs: int | None = field(default=None, metadata=_RUN)
    cache: str | os.PathLike[str] | bool | None = field(default=None, metadata=_RUN)
    engine: Engine = field(default="local", metadata=_RUN)
    ray_address: str | None = field(default=None, metadata=_RUN)
    run: str | None = field(default=None, metadata=_RUN)
    config: str | os.PathLike[str] | None = field(default=None, metadata=_RUN)
    run_config: Any = field(default=None, metadata={**_RUN, "internal": True}, compare=False, repr=False)
    """The settings read from the run's config (a :class:`~.config.RunConfig`), set by the load once the format is
    known: from ``config``, else from the file the framework saves beside its dumps. Never given by a caller."""

    def __post_init__(self) -> None:
        fields = {item.name: getattr(self, item.name) for item in dataclasses.fields(self)}
        for name, value in checked(fields).items():
            object.__setattr__(self, name, value)

    def reading(self) -> dict[str, Any]:
        """The options that decide what a file reads as (the cache's key), by name."""
        return {item.name: getattr(self, item.name) for item in dataclasses.fields(self) if not item.metadata}


def set_reading_options(options: LoadOptions) -> list[str]:
    """The reading options ``options`` sets to other than their defaults, in field order (``format`` and the run
    options left out: every format accepts them)."""
    return [
        item.name
        for item in dataclasses.fields(options)
        if not item.metadata and item.name != "format" and getattr(options, item.name) != item.default
    ]


# ---------------------------------------------------------------------------------------------------------------------
# The checks, worded for the interface that gave the options.


@dataclass(frozen=True)
class Spelling:
    """How messages name an option (``option``) and a setting of one (``setting``)."""

    option: Callable[[str], str]
    setting: Callable[[str, str], str]


KEYWORDS = Spelling(option=lambda name: name, setting=lambda name, value: f"{name}={value!r}")
"""Python keywords, as ``rollaudit.load`` takes them."""
FLAGS = Spelling(
    option=lambda name: "--" + name.replace("_", "-"),
    setting=lambda name, value: f"--{name.replace('_', '-')} {value}",
)
"""Command-line flags."""


def checked(values: Mapping[str, Any], spelling: Spelling = KEYWORDS) -> dict[str, Any]:
    """``values`` (every field of :class:`LoadOptions`), checked and normalized; a UsageError naming the option
    otherwise. Sequences become tuples; weights a tuple (in column order) or a dict (by name)."""
    name = spelling.option
    values = dict(values)
    if values["format"] is not None and not isinstance(values["format"], str):
        raise UsageError(f"{name('format')} is {values['format']!r}", expected="a format name, e.g. slime")
    if values["reward_key"] is not None and not isinstance(values["reward_key"], str):
        raise UsageError(
            f"{name('reward_key')} is a {type(values['reward_key']).__name__}",
            expected="a string (slime's --reward-key)",
        )
    for option in ("n_samples_per_prompt", "num_generations", "jobs"):
        value = values[option]
        if value is not None and (type(value) is not int or value < 1):
            raise UsageError(f"{name(option)} is {value!r}", expected="a positive int")
    for option in COLUMN_OPTIONS:
        value = values[option]
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise UsageError(
                f"{name(option)} is empty" if isinstance(value, str) else f"{name(option)} is {value!r}",
                expected="a column name",
            )
    if values["token_reduce"] not in TOKEN_REDUCE_RULES:
        raise UsageError(
            f"{name('token_reduce')} is {values['token_reduce']!r}", expected=f"one of {', '.join(TOKEN_REDUCE_RULES)}"
        )
    values["reward_columns"] = _column_list(values["reward_columns"], name("reward_columns"))
    values["reward_weights"] = _weights(values["reward_weights"], name("reward_weights"))
    if values["engine"] not in ENGINES:
        raise UsageError(f"{name('engine')} is {values['engine']!r}", expected=f"one of {', '.join(ENGINES)}")
    address = values["ray_address"]
    if address is not None:
        if not isinstance(address, str) or not address:
            raise UsageError(
                f"{name('ray_address')} is {address!r}", expected="a Ray cluster address, e.g. ray://head:10001"
            )
        if values["engine"] != "ray":
            raise UsageError(f"{name('ray_address')} needs {spelling.setting('engine', 'ray')}")
    run = values["run"]
    if run is not None and (not isinstance(run, str) or not run.strip("/ ")):
        raise UsageError(f"{name('run')} is {run!r}", expected="a run's name, as the directory's runs are listed")
    config = values.get("config")
    if config is not None and not (isinstance(config, (str, os.PathLike)) and str(config)):
        raise UsageError(f"{name('config')} is {config!r}", expected="the path of the run's config file")
    cache = values["cache"]
    if not (cache is None or isinstance(cache, bool) or (isinstance(cache, (str, os.PathLike)) and str(cache))):
        raise UsageError(
            f"{name('cache')} is {cache!r}", expected="a directory, True for the default one, False/None for none"
        )
    if isinstance(cache, (str, os.PathLike)):
        try:
            values["cache"] = Path(cache).expanduser()
        except RuntimeError:  # "~" with no HOME and no passwd entry (env -i, docker run --user 12345)
            raise UsageError(
                f"{name('cache')} is {str(cache)!r}: ~ names the home directory, and this user has none",
                expected="a directory path without ~",
            ) from None
    return values


def _column_list(columns: Any, option: str) -> tuple[str, ...] | None:
    if columns is None:
        return None
    columns = (columns,) if isinstance(columns, str) else columns
    if not isinstance(columns, Sequence) or not columns or not all(isinstance(c, str) and c.strip() for c in columns):
        raise UsageError(f"{option} is {columns!r}", expected="a list of column names")
    return tuple(columns)


def _weights(weights: Any, option: str) -> tuple[float, ...] | dict[str, float] | None:
    if weights is None:
        return None
    if isinstance(weights, Mapping):
        names, numbers = list(weights), list(weights.values())
    elif isinstance(weights, Iterable) and not isinstance(weights, (str, bytes)):
        names, numbers = [], list(weights)
    else:
        names, numbers = [], [weights]
    if not numbers or not all(isinstance(name, str) for name in names) or not all(map(_is_real, numbers)):
        raise UsageError(
            f"{option} is {weights!r}", expected="finite numbers: a list in column order, or name -> weight"
        )
    floats = [float(number) for number in numbers]
    return dict(zip(names, floats, strict=True)) if names else tuple(floats)


def _is_real(value: Any) -> bool:
    """A finite int or float (numpy scalars included); not a bool."""
    try:
        return not isinstance(value, (bool, str, bytes)) and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
