"""Rebuild the open-instruct fixtures of ``tests/fixtures/findings/`` with open-instruct's own data preparation.

Upstream: allenai/open-instruct, commit ``e6c3044aa6201c8bfa4573c1b03142af599e730d`` (the commit of the project's
open-instruct corpus). Functions run, unchanged, from ``open_instruct/data_loader.py`` of that checkout:

* ``process_group`` (the zero-std filter, ``filter_zero_std_samples`` True, the default) per prompt's
  ``data_types.GenerationResult``, then ``make_batch_from_groups``: the step's batch, n rows per prompt;
* ``DataPreparationActor._data_preparation_loop``, called unbound on an instance made with ``__new__`` that carries
  the attributes the loop reads, with a real ``StreamingDataLoaderConfig``: it runs
  ``maybe_mask_truncated_completions`` and the advantages (``scores.reshape(-1, n)``, lines 1472-1484). The loop's
  ``accumulate_inference_batches`` is replaced by a function returning the batch above, ``add_prompt_to_generator``
  by a no-op, and ``save_rollouts_to_disk`` by a spy that keeps the batch and the advantages it is handed (the
  values the dump's ``advantage`` records) and ends the loop.

With ``mask_truncated_completions`` True, every row whose finish_reason is not ``stop`` leaves the batch before the
reshape, so the advantages are taken over consecutive slices of n of the rows left, which straddle prompts
(open-instruct #1794). Where the rows left are not a multiple of n, the reshape raises ``ValueError`` and the
data-preparation thread dies: the generator checks that on one more step per design, which writes nothing.

Fixtures (columns ``step``, ``prompt_id`` = the dataset index of the row's prompt (``batch.indices``, the true
prompt), ``reward`` = ``batch.scores``, ``advantage`` = the loop's float64 advantage; one row per row of the
batch the loop trains, so the removed rows are absent):

* ``oi_masktrunc_centered_n4``: n 4, ``advantage_normalization_type`` centered, ``mask_truncated_completions``
  True; 10 prompts a step (step 1: 11 sampled, one with equal rewards filtered); 4, 8 and 4 truncated rows; in
  step 2 the 4 are one whole prompt, so its slices stay aligned.
* ``oi_masktrunc_standard_n6``: n 6, standard, ``mask_truncated_completions`` True; 7 prompts a step; 6, 6 and 12
  truncated rows.
* ``oi_nofilter_centered_n4``, ``oi_nofilter_standard_n6``: the same steps with ``mask_truncated_completions``
  False (the default): the truncated rows stay and every slice is a prompt (the control).

Usage (from the repository root)::

    python -m tests.findings.upstream_open_instruct --upstream /path/to/open-instruct          # compare
    python -m tests.findings.upstream_open_instruct --upstream /path/to/open-instruct --write  # write

``--upstream`` is a checkout (or ``git archive``) of the commit above: the folder that holds ``open_instruct/``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import sys
import tempfile
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.findings.upstream_stubs import note_commit, stub_packages

COMMIT = "e6c3044aa6201c8bfa4573c1b03142af599e730d"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "findings"
STUBBED = (
    "absl", "accelerate", "aiohttp", "backoff", "beaker", "datasets", "deepspeed", "dill", "docker",
    "huggingface_hub", "immutabledict", "langdetect", "nltk", "olmo_core", "openai", "openenv", "requests",
    "tiktoken", "tqdm", "transformers", "uvicorn", "vllm", "wandb", "ray",
)  # fmt: skip
KINDS = ("gsm8k", "string_f1", "passthrough")
F1 = (0.0, 0.25, 1 / 3, 0.4, 0.5, 4 / 7, 2 / 3, 0.8, 1.0)
"""Token F1 values ``F1Verifier`` gives on short answers; the score is 10 x F1 (``verification_reward`` 10)."""
ENV = (0.0, 0.25, 0.5, 0.75, 1.0)
"""The text environment's last per-turn reward (``passthrough``)."""


@dataclass(frozen=True)
class Step:
    """One step: ``prompts`` sampled; ``truncated`` {place: rows whose finish_reason is ``length``}; ``equal`` the
    places whose n rewards are all equal (``process_group`` filters them)."""

    prompts: int
    truncated: dict[int, int]
    equal: tuple[int, ...] = ()


@dataclass(frozen=True)
class Design:
    name: str
    n: int
    normalization: str
    mask_truncated: bool
    seed: int
    steps: tuple[Step, ...]
    crash: Step = field(default_factory=lambda: Step(0, {}))
    """One more step whose rows left are not a multiple of n: the reshape must raise."""


N4 = (
    Step(10, {1: 1, 3: 1, 4: 1, 8: 1}),
    Step(11, {2: 2, 5: 1, 7: 4, 9: 1}, equal=(4,)),
    Step(10, {6: 4}),
)
N6 = (
    Step(7, {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}),
    Step(7, {1: 3, 4: 2, 6: 1}),
    Step(7, {2: 6, 3: 5, 5: 1}),
)
CRASH4 = Step(10, {0: 1, 5: 2})
CRASH6 = Step(7, {0: 2, 3: 1, 6: 1})
DESIGNS = (
    Design("oi_masktrunc_centered_n4", 4, "centered", True, 1795, N4, CRASH4),
    Design("oi_masktrunc_standard_n6", 6, "standard", True, 1797, N6, CRASH6),
    Design("oi_nofilter_centered_n4", 4, "centered", False, 1795, N4),
    Design("oi_nofilter_standard_n6", 6, "standard", False, 1797, N6),
)
"""The seeds are the first after 1794 whose straddling slices give every one of their rows a value other than its
prompt's own (0/10 rewards can tie): the rows that show the defect are then exactly the rows of those slices."""


# ---------------------------------------------------------------------------------------------------------------------
# Inputs: per prompt, its dataset index, verifier source, n scores and finish reasons.


@dataclass
class Prompt:
    index: int
    kind: str
    scores: list[float]
    finish_reasons: list[str]


def prompts(design: Design, at_step: int, step: Step) -> list[Prompt]:
    """The step's prompts in completion order. Rewards on the verifier scale; a prompt not in ``step.equal`` never
    has n equal scores (``process_group`` would filter it, truncated rows and all)."""
    rng = np.random.default_rng([design.seed, at_step])
    indices = rng.permutation(np.arange(20 * at_step, 20 * at_step + 20))[: step.prompts]
    out: list[Prompt] = []
    for place in range(step.prompts):
        kind = KINDS[int(rng.integers(0, len(KINDS)))]
        cut = set(rng.choice(design.n, step.truncated.get(place, 0), replace=False).tolist())
        finish = ["length" if row in cut else "stop" for row in range(design.n)]
        while True:
            if place in step.equal:
                scores = [10.0] * design.n
            elif kind == "gsm8k":
                scores = [10.0 * float(rng.random() < 0.5) for _ in range(design.n)]
            elif kind == "string_f1":
                scores = [10.0 * F1[int(rng.integers(0, len(F1)))] for _ in range(design.n)]
            else:
                scores = [ENV[int(rng.integers(0, len(ENV)))] for _ in range(design.n)]
            if place in step.equal or np.std(scores) != 0:
                break
        out.append(Prompt(int(indices[place]), kind, scores, finish))
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Upstream.


def _identity_remote(*args: Any, **kwargs: Any) -> Any:
    """``ray.remote`` as a no-op decorator: ``DataPreparationActor`` stays the plain class."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return args[0]
    return lambda target: target


def load_upstream(upstream: Path) -> tuple[Any, Any, Any]:
    """(data_loader, data_types, dataset_transformation) from the checkout."""
    if not (upstream / "open_instruct" / "data_loader.py").is_file():
        raise SystemExit(f"{upstream}: no open_instruct/data_loader.py (pass the folder that holds open_instruct/)")
    note_commit(upstream, COMMIT)
    stub_packages(STUBBED, {"ray": {"remote": _identity_remote}})
    sys.path.insert(0, str(upstream))
    data_loader = importlib.import_module("open_instruct.data_loader")
    data_types = importlib.import_module("open_instruct.data_types")
    return data_loader, data_types, importlib.import_module("open_instruct.dataset_transformation")


class _Tokenizer:
    """What ``process_group`` and the loop ask of the tokenizer: ids and ``batch_decode``."""

    pad_token_id = 0
    eos_token_id = 1

    def batch_decode(self, sequences: Sequence[Sequence[int]], skip_special_tokens: bool = False) -> list[str]:
        return [" ".join(f"w{token}" for token in sequence) for sequence in sequences]


class _Prompts:
    """The loop's prompt iterator: the initial prompts it pushes go to the no-op ``add_prompt_to_generator``."""

    _epoch = 0

    def __iter__(self) -> _Prompts:
        return self

    def __next__(self) -> None:
        return None


class _Captured(Exception):
    """Raised by the ``save_rollouts_to_disk`` spy once it holds the step's batch and advantages."""

    def __init__(self, batch: Any, advantages: np.ndarray) -> None:
        super().__init__("captured")
        self.batch = batch
        self.advantages = advantages


def _step_batch(upstream: tuple[Any, Any, Any], design: Design, at_step: int, step: Step) -> tuple[Any, ...]:
    """``process_group`` per prompt, then ``make_batch_from_groups``: what ``accumulate_inference_batches``
    returns."""
    data_loader, data_types, keys = upstream
    generation_config = types.SimpleNamespace(n=design.n)
    tokenizer = _Tokenizer()
    groups = []
    dataset: dict[int, dict[str, Any]] = {}
    for prompt in prompts(design, at_step, step):
        query = [2 + prompt.index, 3, 4]
        dataset[prompt.index] = {
            keys.INPUT_IDS_PROMPT_KEY: query,
            keys.GROUND_TRUTHS_KEY: f"answer {prompt.index}",
            keys.VERIFIER_SOURCE_KEY: prompt.kind,
            keys.RAW_PROMPT_KEY: f"question {prompt.index}",
        }
        responses = [[5 + row, 6, 1] for row in range(design.n)]
        result = data_types.GenerationResult(
            responses=responses,
            finish_reasons=list(prompt.finish_reasons),
            masks=[[1] * len(response) for response in responses],
            request_info=data_types.RequestInfo(
                num_calls=[0] * design.n,
                timeouts=[0] * design.n,
                tool_errors=[""] * design.n,
                tool_outputs=[""] * design.n,
                tool_runtimes=[0.0] * design.n,
                tool_calleds=[False] * design.n,
                tool_call_stats=[[] for _ in range(design.n)],
                rollout_states=[{} for _ in range(design.n)],
            ),
            index=prompt.index,
            prompt_id=f"{at_step}_{prompt.index}",
            token_statistics=data_types.TokenStatistics(3, 3 * design.n, 1.0),
            logprobs=[[-0.5] * len(response) for response in responses],
            reward_scores=list(prompt.scores),
            reward_metrics={},
            model_step=at_step,
        )
        group = data_loader.process_group(
            result,
            generation_config,
            tokenizer,
            dataset,
            max_possible_score=10.0,
            no_resampling_pass_rate=None,
            iter_dataloader=None,
            filter_zero_std_samples=True,
            replenish_prompts=False,
            param_prompt_Q=None,
            base_env_config=None,
        )
        if group is not None:
            groups.append(group)
    return tuple(data_loader.make_batch_from_groups(groups, generation_config, at_step))


def run_step(upstream: tuple[Any, Any, Any], design: Design, at_step: int, step: Step, save: str) -> _Captured:
    """``_data_preparation_loop`` for exactly one step on the batch above."""
    data_loader = upstream[0]
    prepared = _step_batch(upstream, design, at_step, step)

    def accumulate(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return prepared

    def spy(save_path: str, run_name: str, training_step: int, batch: Any, result: Any, advantages: Any, *rest: Any):
        raise _Captured(batch, np.asarray(advantages))

    actor = data_loader.DataPreparationActor.__new__(data_loader.DataPreparationActor)
    actor.config = data_loader.StreamingDataLoaderConfig(
        num_samples_per_prompt_rollout=design.n,
        num_unique_prompts_rollout=step.prompts,
        advantage_normalization_type=design.normalization,
        mask_truncated_completions=design.mask_truncated,
        save_traces=True,
        rollouts_save_path=save,
    )
    actor.metadata_saved = True
    actor.global_batch_size = step.prompts
    actor.iter_dataloader = _Prompts()
    actor.param_prompt_Q = actor.inference_results_Q = None
    actor.generation_config = types.SimpleNamespace(n=design.n)
    actor.base_env_config = None
    actor.ground_truth_overrides = {}
    actor.training_step = at_step
    actor.num_training_steps = at_step + 1
    actor._last_consumed_step = at_step - 1
    actor.model_dims = actor.dataset = actor.actor_manager = None
    actor.tokenizer = _Tokenizer()
    actor.verbose = False
    actor.rubric_manager = None
    actor.run_name = design.name
    actor.total_samples_written = 0
    patched = {
        "accumulate_inference_batches": accumulate,
        "add_prompt_to_generator": lambda *args, **kwargs: None,
        "save_rollouts_to_disk": spy,
    }
    saved = {name: getattr(data_loader, name) for name in patched}
    try:
        for name, value in patched.items():
            setattr(data_loader, name, value)
        data_loader.DataPreparationActor._data_preparation_loop(actor)
    except _Captured as captured:
        return captured
    finally:
        for name, value in saved.items():
            setattr(data_loader, name, value)
    raise AssertionError(f"{design.name} step {at_step}: the loop ended without saving its rollouts")


def build(design: Design, upstream: tuple[Any, Any, Any]) -> pa.Table:
    steps: list[int] = []
    prompt_ids: list[int] = []
    scores: list[float] = []
    advantages: list[float] = []
    with tempfile.TemporaryDirectory() as save:
        for at_step, step in enumerate(design.steps):
            captured = run_step(upstream, design, at_step, step, save)
            batch = captured.batch
            assert captured.advantages.dtype == np.float64
            steps += [at_step] * len(batch.scores)
            prompt_ids += [int(index) for index in batch.indices]
            scores += [float(score) for score in batch.scores]
            advantages += captured.advantages.tolist()
        if design.mask_truncated:
            crash_at = len(design.steps)
            try:
                run_step(upstream, design, crash_at, design.crash, save)
            except ValueError as error:
                print(f"{design.name}: step {crash_at} (rows left not a multiple of {design.n}) raised: {error}")
            else:
                raise AssertionError(f"{design.name}: the reshape of step {crash_at} did not raise")
    return pa.table(
        {
            "step": pa.array(steps, pa.int64()),
            "prompt_id": pa.array(prompt_ids, pa.int64()),
            "reward": pa.array(scores, pa.float64()),
            "advantage": pa.array(advantages, pa.float64()),
        }
    )


# ---------------------------------------------------------------------------------------------------------------------
# What the tables must show, checked before writing (numpy, not open-instruct).


def slices(step: np.ndarray, n: int) -> np.ndarray:
    """Each row's consecutive slice of n within its step (open-instruct's ``prompt_idx``)."""
    out = np.zeros(len(step), dtype=np.int64)
    for at_step in np.unique(step):
        rows = np.flatnonzero(step == at_step)
        out[rows] = np.arange(len(rows)) // n
    return out


def grouped(reward: np.ndarray, key: np.ndarray, normalization: str) -> np.ndarray:
    out = np.zeros(len(reward))
    for value in np.unique(key):
        rows = key == value
        centred = reward[rows] - reward[rows].mean()
        out[rows] = centred / (reward[rows].std() + 1e-8) if normalization == "standard" else centred
    return out


def check(design: Design, table: pa.Table) -> None:
    step = table.column("step").to_numpy()
    prompt = table.column("prompt_id").to_numpy()
    reward = table.column("reward").to_numpy()
    advantage = table.column("advantage").to_numpy()
    place = slices(step, design.n)
    by_slice = grouped(reward, step * 1000 + place, design.normalization)
    np.testing.assert_allclose(advantage, by_slice, rtol=1e-12, atol=1e-12, err_msg=design.name)
    mixed = np.zeros(len(step), dtype=bool)
    for at_step, at_slice in set(zip(step.tolist(), place.tolist(), strict=True)):
        rows = (step == at_step) & (place == at_slice)
        mixed[rows] = len(np.unique(prompt[rows])) > 1
    differ = ~np.isclose(advantage, grouped(reward, step * 1000 + prompt, design.normalization), atol=1e-9)
    np.testing.assert_array_equal(differ, mixed, err_msg=f"{design.name}: rows that differ are not the straddlers")
    assert mixed.any() == design.mask_truncated, design.name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", type=Path, required=True, help="open-instruct checkout (holds open_instruct/)")
    parser.add_argument("--write", action="store_true", help="write the fixtures (default: compare with them)")
    parser.add_argument("--out", type=Path, default=FIXTURES, help="fixture folder")
    args = parser.parse_args(argv)
    upstream = load_upstream(args.upstream.resolve())
    failed = 0
    for design in DESIGNS:
        table = build(design, upstream)
        check(design, table)
        path = args.out / f"{design.name}.parquet"
        if args.write:
            args.out.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            print(f"wrote {path} ({table.num_rows} rows, {path.stat().st_size} bytes)")
        elif not path.is_file() or not pq.read_table(path).equals(table):
            print(f"{path}: differs from the rebuilt table")
            failed += 1
        else:
            print(f"{path}: same")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
