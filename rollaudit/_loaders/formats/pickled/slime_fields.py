"""The values of slime's sample dicts, read one at a time: each reader checks one value of the untrusted pickle
and names the file, the field and the sample when it is not what slime writes."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...._errors import ChoiceNeeded, InputError, RollauditWarning, leave_open, warn
from ...torchsave.unpickle import StoredTensor

_POSITIONS_SHOWN = 5
_KEYS_SHOWN = 10
_INT64_MAX = (1 << 63) - 1
_PROMPT_KEYS_REQUIRED = "prompt keys are required when groups are not uniformly sized"
LAYOUT = "slime's {'rollout_id': int, 'samples': [dict, ...]}"


def type_name(value: Any) -> str:
    return getattr(type(value), "global_name", None) or type(value).__name__


def int_text(value: int) -> str:
    """An int from the file for a message: its digits, unless there are too many to print (Python refuses
    past 4300 digits, and a message must stay one short line)."""
    return str(value) if value.bit_length() <= 128 else f"an int of {value.bit_length()} bits"


def shown(value: Any) -> str:
    """A dict key from the file for a message, never long and never recursing into nested values."""
    if type(value) in (str, bytes):
        return repr(value[:40])
    if type(value) is int:
        return int_text(value)
    if type(value) in (float, bool) or value is None:
        return repr(value)
    return f"<{type_name(value)}>"


def text_of(value: Any) -> str | None:
    """A string field (status) as UTF-8 text; None when it is not a string. Pickled strings may hold lone
    surrogates, which Arrow cannot store: they become U+FFFD."""
    if type(value) is not str:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return value


def optional_int(sample: dict, name: str, path: Path, position: int) -> int | None:
    value = sample.get(name)
    if value is None:
        return None
    if type(value) is not int or not -_INT64_MAX <= value <= _INT64_MAX:
        found = f"is {int_text(value)}" if type(value) is int else f"is a {type_name(value)}"
        raise InputError(found, file=str(path), field=name, row=position, expected="an int64 or None")
    return value


def step_of(top: dict, path: Path) -> int:
    value = top.get("rollout_id")
    if type(value) is not int or not -_INT64_MAX <= value <= _INT64_MAX:
        found = "missing" if "rollout_id" not in top else f"a {type_name(value)}"
        raise InputError(f"rollout_id is {found}", file=str(path), field="rollout_id", expected=f"an int ({LAYOUT})")
    return value


# A sample of a real dump is a dict of a dozen fields: hundreds of bytes. A list of samples longer than the file's
# bytes over this is built by sharing (DUP, memo references), and would make millions of rows of nothing.
MIN_SAMPLE_BYTES = 8


def samples_of(top: dict, path: Path) -> Sequence[Any]:
    samples = top.get("samples")
    if not isinstance(samples, (list, tuple)):
        found = "no 'samples'" if "samples" not in top else f"'samples' as a {type_name(samples)}"
        raise InputError(f"the dump has {found}", file=str(path), field="samples", expected=LAYOUT)
    size = path.stat().st_size
    if len(samples) > size // MIN_SAMPLE_BYTES + 1:
        raise InputError(
            f"{len(samples):,} samples in {size:,} bytes",
            file=str(path),
            field="samples",
            expected=f"at least {MIN_SAMPLE_BYTES} bytes of dump a sample (each sample its own dict)",
        )
    for position, sample in enumerate(samples):
        if type(sample) is not dict:
            raise InputError(
                f"sample is a {type_name(sample)}", file=str(path), row=position, expected="a dict of Sample fields"
            )
    return samples


def number_of(value: Any) -> float | None:
    """A float from a Python number or a one-element tensor; None when it is neither."""
    if type(value) in (float, int, bool):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, StoredTensor) and value.numel == 1 and value.dtype != "bfloat16":
        return float(value.numpy().reshape(-1)[0].real)
    return None


def key_list(mapping: dict) -> str:
    keys = [shown(key) for key in list(mapping)[:_KEYS_SHOWN]]
    more = len(mapping) - len(keys)
    return ", ".join(keys) + (f" and {more} more" if more > 0 else "") if keys else "none"


REWARD_CANDIDATE = "slime.reward:"
"""The prefix of a rollout table's columns holding each key of a dict reward, where no --reward-key picks one:
the train dump's raw_reward tells which key slime trained on (:func:`~.slime.verified_reward_key`)."""
_CANDIDATE_KEYS = 64
_MISSING = object()


def reward_candidates(dicts: dict[int, dict], rewards: list[float]) -> dict[str, list[float]]:
    """Each string key of the first dict reward whose value is a number (or None) in every dict reward: its values
    by position (NaN for None; a sample whose reward is a plain number keeps it under every key)."""
    first = next(iter(dicts.values()))
    keys = [key for key in itertools.islice(first, _CANDIDATE_KEYS) if type(key) is str]
    candidates: dict[str, list[float]] = {}
    for key in keys:
        values = list(rewards)
        for position, reward in dicts.items():
            value = reward.get(key, _MISSING)
            number = None if value is _MISSING else math.nan if value is None else number_of(value)
            if number is None:  # a dict without the key, or a value that is no number: not a candidate
                break
            values[position] = number
        else:
            candidates[key] = values
    return candidates


def same_rewards(ours: list[float], theirs: list[Any]) -> bool:
    """Whether a key's rewards are the train dump's raw_reward: each :func:`same_reward`, NaN where it is NaN."""
    for mine, other in zip(ours, theirs, strict=True):
        if not isinstance(other, (int, float)) or math.isnan(mine) != math.isnan(float(other)):
            return False
        if not math.isnan(mine) and not same_reward(mine, float(other)):
            return False
    return True


def same_reward(ours: float, theirs: float) -> bool:
    """A rollout reward and the train dump's raw_reward for it: equal to 1e-6, relative past 1."""
    return abs(ours - theirs) <= 1e-6 * max(1.0, abs(theirs))


def reward_of(sample: dict, reward_key: str | None, path: Path, position: int) -> float | None:
    """The sample's raw reward; NaN for None (reported with the non-finite ones). None where the reward is a dict
    and no reward_key picks its key, in a load that leaves that choice open (``rollaudit inspect``)."""
    if "reward" not in sample:
        raise InputError("sample has no reward", file=str(path), field="reward", row=position, expected="a reward key")
    value = sample["reward"]
    if type(value) is dict:
        if reward_key is None:
            keys = [shown(key) for key in itertools.islice(value, 1000)]
            if leave_open("reward", "a dict with keys {}", "--reward-key KEY", keys):
                return None
            raise ChoiceNeeded(
                f"reward is a dict with keys {key_list(value)}",
                file=str(path),
                field="reward",
                row=position,
                expected="--reward-key naming the key slime trained on (slime's own --reward-key)",
            )
        if reward_key not in value:
            raise InputError(
                f"reward has no key {reward_key!r}; its keys: {key_list(value)}",
                file=str(path),
                field="reward",
                row=position,
                expected="--reward-key naming one of the reward dict's keys",
            )
        value = value[reward_key]
    if value is None:
        return math.nan
    number = number_of(value)
    if number is None:
        where = f"reward[{reward_key!r}]" if type(sample["reward"]) is dict else "reward"
        raise InputError(
            f"{where} is a {type_name(value)}", file=str(path), field="reward", row=position, expected="a float"
        )
    return number


def warn_non_finite(path: Path, positions: list[int]) -> None:
    if not positions:
        return
    shown = ", ".join(str(position) for position in positions[:_POSITIONS_SHOWN])
    more = ", ..." if len(positions) > _POSITIONS_SHOWN else ""
    noun = "sample has" if len(positions) == 1 else "samples have"
    warn(
        f"{path}: {len(positions)} {noun} a NaN, infinite or None reward (positions {shown}{more}); "
        "kept as they are and reported by the audit",
        RollauditWarning,
    )


def prompt_keys(group_index: list[int | None], n_samples_per_prompt: int | None, path: Path) -> list[int | None]:
    """slime PR #2204's identity rules: every key, or none and slices of n, never a guess."""
    missing = [position for position, key in enumerate(group_index) if key is None]
    if not missing:
        return group_index
    count = len(group_index)
    if len(missing) < count:
        raise InputError(
            "sample has no group_index while others have one",
            file=str(path),
            field="group_index",
            row=missing[0],
            expected="a group_index on every sample, or on none",
        )
    n = n_samples_per_prompt
    if n is None:
        raise InputError(
            f"no sample has a group_index: {_PROMPT_KEYS_REQUIRED}",
            file=str(path),
            field="group_index",
            expected=f"group_index keys, or --n-samples-per-prompt N when every prompt has N of the {count} samples",
        )
    if count % n:
        raise InputError(
            f"no sample has a group_index and {count} samples are not slices of --n-samples-per-prompt {n}: "
            f"{_PROMPT_KEYS_REQUIRED}",
            file=str(path),
            field="group_index",
            expected="group_index keys",
        )
    return [position // n for position in range(count)]
