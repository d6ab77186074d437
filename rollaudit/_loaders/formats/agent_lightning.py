"""agent-lightning v1.0's W&B trajectory export, recognised so that it is never grouped by a guess.

agent-lightning's ``RolloutAdapter`` uploads ``step_{N}/train_trajectories.jsonl.zip`` (W&B artifact
``train-trajectories-<run>-step-N``): one line per rollout with ``rollout_id``, ``reward``, ``prompt`` and
``response``, the prompt and response of the rollout's last LLM call. It holds no ``data_id``, the GRPO group key,
and its ``prompt`` is not one either (later calls and sub-agents have prompts of their own), so no prompt group can
be read from it: reading it is one line saying so, and what to pass instead. The trained rows themselves (a table
with ``data_id``, ``rollout_id`` and ``reward``, one row per LLM call) are a generic table, and ``agl-rollout``
reproduces agent-lightning's rollout-level advantage on them. With ``prompt_col`` naming a column the user added,
the export reads as a generic table; ``prompt_col`` naming one of the export's own keys is refused (none of them is
the group key).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..._errors import InputError
from ..._table import with_trained_default
from ..arrow import tables
from ..base import Format
from ..torchsave.torch_zip import open_zip
from . import generic

if TYPE_CHECKING:
    import pyarrow as pa

    from ..options import LoadOptions

# agent-lightning writes its trained rows nowhere (verl's rollout_data_dir dump is not called by its trainer): they
# are the batch its trainer computes advantages on, uid = data_id_list (agentlightning/verl/trainer.py _train_step).
TRAINED_ROWS = (
    "the trained rows, which agent-lightning writes nowhere: save the batch AgentLightningRayPPOTrainer._train_step "
    "computes advantages on (non_tensor_batch data_id_list, rollout_id_list; reward = token_level_rewards summed per "
    "row) as a table of data_id, rollout_id, reward, and run rollaudit compare TABLE --trained-with agl-rollout"
)
EXPORT_KEYS = frozenset({"rollout_id", "reward", "prompt", "response"})
EXPORT_NAMES = ("train_trajectories.jsonl", "train_trajectories.jsonl.zip")
_LINE_LIMIT = 1 << 22
DEFAULT = (
    "agl-rollout",
    "agent-lightning v1.0's default (enable_rollout_level_advantage=true, adv_estimator=grpo): each rollout counts "
    "once in its data_id group, in bfloat16",
)


def _first_object_of_zip(path: Path) -> dict | None:
    """The first line of a zip's one JSON Lines member, as a dict (read a line at most: never the whole member)."""
    try:
        with open(path, "rb") as file, open_zip(file) as archive:  # its entries counted before zipfile parses them
            members = [info for info in archive.infolist() if info.filename.endswith(".jsonl")]
            if len(members) != 1:
                return None
            with archive.open(members[0]) as stream:
                line = stream.readline(_LINE_LIMIT)
    except Exception:  # a damaged zip is simply not this export
        return None
    return tables.json_line_object(line)


def _first_object(path: Path) -> dict | None:
    if path.name.endswith(".zip"):
        return _first_object_of_zip(path)
    return tables.first_json_object(path)


def detect(path: Path) -> bool:
    """A JSON Lines file (or a zip of one) whose lines hold exactly the export's keys."""
    if path.suffix not in (".jsonl", ".zip"):
        return False
    first = _first_object(path)
    return first is not None and set(first) == EXPORT_KEYS


def expand_directory(directory: Path) -> list[Path] | None:
    """An artifact directory's ``train_trajectories.jsonl(.zip)``, or those of its ``step_*`` folders."""
    found = [directory / name for name in EXPORT_NAMES if (directory / name).is_file()]
    for step in sorted(directory.glob("step_*")):
        if step.is_dir():
            found += [step / name for name in EXPORT_NAMES if (step / name).is_file()]
    return found or None


def read(path: Path, options: LoadOptions) -> pa.Table:
    """The export, refused with the one line that says why (or, with ``prompt_col``, read as a generic table)."""
    if options.prompt_col is not None and not path.name.endswith(".zip"):
        if options.prompt_col in EXPORT_KEYS:
            raise InputError(
                f"--prompt-col {options.prompt_col} names a key of agent-lightning's W&B trajectory export, which "
                "has no data_id, its prompt-group key (rollout_id is an attempt, prompt the last LLM call's text)",
                file=str(path),
                field="data_id",
                expected=f"{TRAINED_ROWS}; or --prompt-col naming a column you added holding data_id",
            )
        return generic.read(path, options)
    raise InputError(
        "agent-lightning's W&B trajectory export has no data_id, its prompt-group key (its prompt text is the last "
        "LLM call's, no key)",
        file=str(path),
        field="data_id",
        expected=f"{TRAINED_ROWS}; or --prompt-col naming a column you added holding data_id",
    )


def combine(paths: list[Path], reduced: list[pa.Table], options: LoadOptions) -> list[pa.Table]:
    """Exports read with ``prompt_col`` are generic tables, trained by agent-lightning's default."""
    return [with_trained_default(table, *DEFAULT) for table in generic.combine(paths, reduced, options)]


LOADER = Format(
    name="agent_lightning",
    description="agent-lightning's W&B export train_trajectories.jsonl(.zip): refused, it has no data_id",
    detect=detect,
    read=read,
    combine=combine,
    expand_directory=expand_directory,
    options=generic.LOADER.options,
    reads="the export's rollout_id, reward, prompt and response (no data_id: refused unless --prompt-col names a "
    "column holding it)",
    prompt="data_id, named by --prompt-col (the export has none)",
    trajectory="rollout_id",
    reward="reward",
    trained_with=(DEFAULT,),
)
