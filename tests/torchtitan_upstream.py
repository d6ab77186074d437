"""torchtitan's own recorder, estimator and filter, imported from a torchtitan source tree for the tests.

``TORCHTITAN_SOURCE`` names a torchtitan checkout (its root), or a git directory of one (then
``TORCHTITAN_COMMIT``, default ``HEAD``, picks the commit). The five modules the dump comes from are read from
it unchanged into a scratch package: ``torchtitan/config/configurable.py``, ``experiments/rl/types.py``,
``experiments/rl/rollout/types.py``, ``experiments/rl/rollout/advantage.py`` and
``experiments/rl/rollout_recorder.py``. What they import and the dump never sees is stubbed: the structured
logger's span decorator, the metrics module's ``Metric``, the ``renderers`` package's ``Message`` type and the
``rollout`` package's ``__init__`` (which would import the rollouter). Nothing of torchtitan is kept in this
project: without the variable, the tests that need it skip.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

RL = "torchtitan/experiments/rl"
UPSTREAM_FILES = (
    "torchtitan/config/configurable.py",
    f"{RL}/types.py",
    f"{RL}/rollout/types.py",
    f"{RL}/rollout/advantage.py",
    f"{RL}/rollout_recorder.py",
)
STUBS = {
    "torchtitan/__init__.py": "",
    "torchtitan/config/__init__.py": "from torchtitan.config.configurable import Configurable\n",
    "torchtitan/observability/__init__.py": "",
    # log_trace_span is both a decorator and a context manager upstream: a no-op span here.
    "torchtitan/observability/structured_logger.py": (
        "import contextlib\n\n\nclass _Span(contextlib.ContextDecorator):\n"
        "    def __enter__(self):\n        return self\n\n    def __exit__(self, *exc):\n        return False\n\n\n"
        "def log_trace_span(name):\n    return _Span()\n"
    ),
    "torchtitan/experiments/__init__.py": "",
    f"{RL}/__init__.py": "",
    f"{RL}/observability/__init__.py": "",
    f"{RL}/observability/metrics.py": (
        "from dataclasses import dataclass\n\n@dataclass\nclass Metric:\n    name: str\n    value: object = None\n"
    ),
    f"{RL}/rollout/__init__.py": (
        "from torchtitan.experiments.rl.rollout.types import Rollout, RolloutGroup, RolloutStatus, RolloutTurn\n"
    ),
    "renderers/__init__.py": "Message = dict\n",
}


def _read_upstream(source: Path, relative: str) -> str:
    if (source / relative).is_file():
        return (source / relative).read_text()
    commit = os.environ.get("TORCHTITAN_COMMIT", "HEAD")
    done = subprocess.run(
        ["git", "--git-dir", str(source), "show", f"{commit}:{relative}"], capture_output=True, text=True, check=False
    )
    if done.returncode:
        pytest.skip(f"TORCHTITAN_SOURCE={source} has no {relative}: {done.stderr.strip()[:120]}")
    return done.stdout


class Upstream:
    """torchtitan's modules, imported once per test session from a scratch package."""

    def __init__(self, source: Path) -> None:
        self._scratch = tempfile.TemporaryDirectory(prefix="torchtitan-upstream-")
        root = Path(self._scratch.name)
        for relative, text in {**STUBS, **{path: _read_upstream(source, path) for path in UPSTREAM_FILES}}.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text)
        ours = ("torchtitan", "renderers")
        saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] in ours}
        for name in saved:
            del sys.modules[name]
        sys.path.insert(0, str(root))
        try:
            self.types = importlib.import_module(f"{RL.replace('/', '.')}.rollout.types")
            self.turn_id = importlib.import_module(f"{RL.replace('/', '.')}.types").RolloutTurnID
            self.advantage = importlib.import_module(f"{RL.replace('/', '.')}.rollout.advantage")
            self.recorder = importlib.import_module(f"{RL.replace('/', '.')}.rollout_recorder")
        finally:
            sys.path.remove(str(root))
            for name in [name for name in sys.modules if name.split(".")[0] in ours]:
                del sys.modules[name]
            sys.modules.update(saved)

    def group(self, group: dict[str, Any], should_std_normalize: bool) -> Any:
        """A generator group (plain dicts) as torchtitan's ``RolloutGroup``, advantages from its own estimator."""
        types = self.types
        rollouts = []
        for rollout in group["rollouts"]:
            turns = [
                types.RolloutTurn(
                    rollout_id=self.turn_id(
                        group_id=group["group_id"], rollout_id=rollout["rollout_id"], turn_id=turn["turn_id"]
                    ),
                    prompt_token_ids=turn["prompt_token_ids"],
                    completion_token_ids=turn["completion_token_ids"],
                    completion_logprobs=turn["completion_logprobs"],
                    min_policy_version=turn["min_policy_version"],
                    max_policy_version=turn["max_policy_version"],
                    prompt_messages=turn["prompt_messages"],
                    completion_message=turn["completion_message"],
                    env_messages=turn["env_messages"],
                    env_rewards=turn["env_rewards"],
                )
                for turn in rollout["turns"]
            ]
            rollouts.append(
                types.Rollout(
                    group_id=group["group_id"],
                    rollout_id=rollout["rollout_id"],
                    turns=turns,
                    status=types.RolloutStatus(rollout["status"]),
                    reward=rollout["reward"],
                    reward_breakdown=rollout["reward_breakdown"],
                )
            )
        built = types.RolloutGroup(group_id=group["group_id"], rollouts=rollouts)
        estimator = self.advantage.AdvantageEstimator.Config(should_std_normalize=should_std_normalize).build()
        for rollout, value in zip(built.rollouts, estimator(built), strict=True):
            rollout.advantage = value
        return built

    def write_run(
        self, dump_dir: Path, events: list[Any], *, k: int = 1, log_tensors: bool = False, std: bool = False
    ) -> Path:
        """Record ``events`` (the generator's record calls) with torchtitan's own ``RolloutSampleRecorder``."""
        recorder_module = self.recorder
        config = recorder_module.RolloutSampleRecorder.Config(
            filter=recorder_module.KeepExtremeRewardsFilter.Config(k=k), log_tensors=log_tensors
        )
        recorder = config.build(dump_dir=str(dump_dir))
        for event in events:
            recorder.record(
                is_validation=event.is_validation,
                rollout_groups=[self.group(group, std) for group in event.groups],
            )
        return Path(dump_dir) / config.filename


_UPSTREAM: list[Upstream] = []


def upstream() -> Upstream:
    """torchtitan's own modules (from ``TORCHTITAN_SOURCE``), or a skip saying how to give them."""
    source = os.environ.get("TORCHTITAN_SOURCE")
    if not source:
        pytest.skip("torchtitan's own recorder not run: set TORCHTITAN_SOURCE to a torchtitan checkout or git dir")
    if not _UPSTREAM:
        _UPSTREAM.append(Upstream(Path(source)))
    return _UPSTREAM[0]
