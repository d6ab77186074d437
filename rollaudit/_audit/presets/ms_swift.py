"""ms-swift's GRPO estimators (``swift/rl_core/advantage.py`` ``compute_advantages``, 3602360a), float32.

A group is ``num_generations`` consecutive rows of a generation batch, which the ms_swift loader keys. Every
``advantage_estimator`` meets every ``scale_rewards`` mode: ``group`` divides by the group's std + 1e-4, ``batch``
by the generation batch's (the dump line's, which is its step), ``none`` not at all. The std is the rewards'
(unbiased), but ``reinforce_plus_plus`` takes the std of the centred values instead, so its ``group`` mode is
``grpo``'s arithmetic and its ``none`` mode is ``swift-grpo-none``. A preset bears the estimator's bare name in the
mode ms-swift defaults it to (``swift/arguments/rlhf_args.py``): grpo group, rloo none, reinforce_plus_plus batch.
"""

from __future__ import annotations

from typing import Any

from ..schemes import PresetNotes, Scheme
from .frameworks import preset

_SOURCE = "ms-swift swift/rl_core/advantage.py compute_advantages (3602360a)"
# name: (ms-swift's advantage_estimator, its default scale_rewards, how it centres, its fields)
_ESTIMATORS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "grpo": ("grpo", "group", "r minus the group mean", {"std_of": "rewards"}),
    "rloo": (
        "rloo",
        "none",
        "(r - mean) x K/(K-1), r minus the mean of the group's other members",
        {"baseline": "leave-one-out", "std_of": "rewards"},
    ),
    "rpp": ("reinforce_plus_plus", "batch", "r minus the group mean", {"std_of": "centred"}),
}
# scale_rewards: (what it does, its fields)
_MODES: dict[str, tuple[str, dict[str, Any]]] = {
    "group": ("divided by the group's unbiased std + 1e-4", {}),
    "batch": ("divided by the generation batch's unbiased std + 1e-4", {"std_over": "batch"}),
    "none": ("not divided", {"scale": "none"}),
}


def _entry(name: str, mode: str) -> Scheme:
    estimator, default, centring, fields = _ESTIMATORS[name]
    division, mode_fields = _MODES[mode]
    of = " of the centred values" if fields["std_of"] == "centred" and mode != "none" else ""
    return preset(
        f"swift-{name}" if mode == default else f"swift-{name}-{mode}",
        PresetNotes(
            f"ms-swift advantage_estimator={estimator}, scale_rewards={mode}"
            f"{' (its default)' if mode == default else ''}: {centring}, {division}{of}; float32",
            f"{_SOURCE}, advantage_estimator={estimator}, scale_rewards={mode}",
        ),
        groups="prompt",
        eps=1e-4,
        dtype="float32",
        **fields,
        **mode_fields,
    )


ENTRIES: tuple[Scheme, ...] = tuple(
    _entry(name, mode)
    for name in _ESTIMATORS
    for mode in _MODES
    if not (name == "rpp" and mode == "none")  # r minus the group mean, undivided: swift-grpo-none
)
