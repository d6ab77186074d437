"""The registry of dump formats: one line per format, tried in this order to detect a file's format.

Adding a format is one module implementing :class:`~.base.Format` and one line here; the engine, the cache and the
command line find it through this table.
"""

from __future__ import annotations

from .base import Format
from .formats import (
    agent_lightning,
    areal,
    art,
    generic,
    ms_swift,
    nemo_rl,
    open_instruct,
    prime_rl,
    rllm,
    roll,
    tinker,
    torchtitan,
    trl,
    verl,
)
from .formats.pickled import miles, molt, skyrl, slime

FORMATS: dict[str, Format] = {
    loader.name: loader
    for loader in (
        molt.LOADER,  # before slime, which takes any torch.save zip: Molt's start with its Experience class
        miles.LOADER,  # before slime, which takes any torch.save zip: miles' are told apart by their top-level keys
        slime.LOADER,
        tinker.LOADER,
        ms_swift.LOADER,  # before verl and generic: its completions.jsonl is JSON Lines too
        torchtitan.LOADER,  # before generic: its rollout_samples.jsonl is a JSON Lines table too
        prime_rl.LOADER,  # before verl and generic: its traces.jsonl are JSON Lines tables too
        open_instruct.LOADER,  # before generic: its traces are JSON Lines any table reader would take
        art.LOADER,  # before trl and generic: an ART log is a Parquet table too
        areal.LOADER,  # before verl: its task files are named {task_id}.jsonl, like verl's {step}.jsonl
        verl.LOADER,
        trl.LOADER,
        rllm.LOADER,
        nemo_rl.LOADER,
        roll.LOADER,
        agent_lightning.LOADER,
        skyrl.LOADER,  # recognised (a pickle naming TrainingInputBatch) and refused: rewards and uids are popped
        generic.LOADER,  # last: it accepts any table (and an empty file, so that the error says so)
    )
}
"""Format name -> Format. Detection tries the entries in this order."""
