"""What the loaders refuse to guess, the options each format reads, and the facts each states about its run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import rollaudit
from rollaudit import InputError, UsageError
from rollaudit._cli import app
from rollaudit._loaders.registry import FORMATS
from rollaudit._table import facts_in, found_in, notes_in
from tests.conformance.conftest import corpus

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
_spec = importlib.util.spec_from_file_location("sample_dumps_generate_tables", SAMPLES / "generate_tables.py")
generate_tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate_tables)
LINE = {"input": "p0", "output": "an answer", "gts": "4", "score": 1.0, "step": 3}


def write_lines(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def trained_default(table: pa.Table) -> str | None:
    return facts_in(table)["trained_default"]["scheme"]


# ---------------------------------------------------------------------------------------------------------------------
# verl v0: the input text is a group key only where its counts verify.


def test_per_step_inputs_without_uid_are_refused_naming_uid(tmp_path: Path):
    path = generate_tables.write_verl_per_step_inputs(tmp_path / "1.jsonl")
    with pytest.raises(InputError) as raised:
        rollaudit.load(path)
    assert raised.value.field == "uid" and "traj_uid" in raised.value.line()
    # Whatever the file is named: the lines say what they are.
    renamed = tmp_path / "verl_agent_rollouts.jsonl"
    renamed.write_bytes(path.read_bytes())
    with pytest.raises(InputError, match="'uid'"):
        rollaudit.load(renamed)


def test_per_step_inputs_exit_2_on_the_command_line(tmp_path: Path):
    path = generate_tables.write_verl_per_step_inputs(tmp_path / "1.jsonl")
    result = CliRunner().invoke(app, ["compare", str(path)])
    assert result.exit_code == 2 and "'uid'" in result.output and "Traceback" not in result.output
    process = subprocess.run(
        [sys.executable, "-m", "rollaudit", "compare", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert process.returncode == 2 and process.stdout == "", process.stderr
    assert len(process.stderr.splitlines()) == 1 and "'uid'" in process.stderr and "Traceback" not in process.stderr


def test_an_input_drawn_for_two_prompts_is_grouped_as_one_with_a_note(tmp_path: Path):
    lines = [{**LINE, "input": "p0"}] * 8 + [{**LINE, "input": "p1"}] * 4 + [{**LINE, "input": "p2", "score": 0.0}] * 4
    table = rollaudit.load(write_lines(tmp_path / "3.jsonl", lines))
    assert table.num_rows == 16 and len(set(table.column("prompt").to_pylist())) == 3
    assert found_in(table)["verl v0 (prompt = the input text)"]["input texts drawn for several prompts"] == 1
    assert any("1 input texts occur a multiple of rollout.n" in note for note in notes_in(table))


@pytest.mark.parametrize("counts", [[2, 3], [1, 4], [1]], ids=["no-common-n", "a-single", "one-row"])
def test_uneven_input_counts_are_refused(tmp_path: Path, counts: list[int]):
    lines = [{**LINE, "input": f"p{index}"} for index, count in enumerate(counts) for _ in range(count)]
    with pytest.raises(InputError, match="does not verify as the prompt key") as raised:
        rollaudit.load(write_lines(tmp_path / "3.jsonl", lines))
    assert raised.value.field == "uid"
    # The user's word: a prompt column they name is taken as it is.
    assert rollaudit.load(tmp_path / "3.jsonl", prompt_col="input").num_rows == sum(counts)


def test_the_v0_corpus_still_verifies_and_states_its_facts():
    table = rollaudit.load(corpus("verl") / "rollout_data_v0")
    assert table.num_rows == 192 and not notes_in(table)
    facts = facts_in(table)
    assert facts["trained_default"]["scheme"] == "verl-grpo" and "adv_estimator=grpo" in facts["trained_default"]["why"]
    assert "whole sample" in facts["no_trajectory"]
    v1 = rollaudit.load(corpus("verl") / "rollout_data_v1")
    assert trained_default(v1) == "verl-grpo-v1" and "no_trajectory" not in facts_in(v1)


def test_a_step_col_that_is_not_there_is_named(tmp_path: Path):
    with pytest.raises(InputError, match="no 'when' field") as raised:
        rollaudit.load(write_lines(tmp_path / "3.jsonl", [LINE, LINE]), step_col="when")
    assert raised.value.field == "when"


# ---------------------------------------------------------------------------------------------------------------------
# The same guess elsewhere: text columns as keys, TRL's inferred group size, agent-lightning's export.


def test_a_generic_text_prompt_column_must_verify_as_a_key(tmp_path: Path):
    rows = [{"input": text, "reward": 1.0} for text in ("a", "a", "b", "c", "c", "c")]
    path = write_lines(tmp_path / "rows.jsonl", rows)
    with pytest.raises(InputError, match=r"'input' text does not verify as one.*--prompt-col input"):
        rollaudit.load(path)
    assert rollaudit.load(path, prompt_col="input").column("prompt").to_pylist() == ["a", "a", "b", "c", "c", "c"]
    # A table's own prompt column is kept, partial groups and all, with a note that it was not verified.
    kept = rollaudit.load(
        write_lines(tmp_path / "prompts.jsonl", [{"prompt": row["input"], "reward": 1.0} for row in rows])
    )
    assert kept.column("prompt").to_pylist() == ["a", "a", "b", "c", "c", "c"]
    assert any("not verified as a key" in note for note in notes_in(kept))
    even = write_lines(tmp_path / "even.jsonl", [{"input": text, "reward": 1.0} for text in "aabbbb"])
    loaded = rollaudit.load(even)
    assert loaded.column("prompt").to_pylist() == list("aabbbb")
    assert any("1 prompt texts occur a multiple" in note for note in notes_in(loaded))


def test_trl_does_not_infer_a_group_of_one(tmp_path: Path):
    table = pa.table({"prompt": ["a", "b", "c", "d"], "completion": ["x"] * 4, "accuracy": [1.0, 0.0, 1.0, 0.0]})
    pq.write_table(table, tmp_path / "completions_00001.parquet")
    with pytest.raises(InputError, match="no group size can be read") as raised:
        rollaudit.load(tmp_path / "completions_00001.parquet")
    assert "num_generations" in raised.value.line()


def test_trl_states_its_default_with_the_group_size():
    with pytest.warns(rollaudit.RollauditWarning, match="NaN"):  # the sample's unscorable row
        table = rollaudit.load(SAMPLES / "trl")
    assert trained_default(table) == "trl-group(n=4)" and "whole completion" in facts_in(table)["no_trajectory"]


def test_the_agent_lightning_export_says_how_to_get_the_trained_rows():
    with pytest.raises(InputError) as raised:
        rollaudit.load(corpus("agent_lightning") / "train_trajectories.jsonl")
    assert raised.value.expected == (
        "the trained rows, which agent-lightning writes nowhere: save the batch "
        "AgentLightningRayPPOTrainer._train_step computes advantages on (non_tensor_batch data_id_list, "
        "rollout_id_list; reward = token_level_rewards summed per row) as a table of data_id, rollout_id, reward, "
        "and run rollaudit compare TABLE --trained-with agl-rollout; or --prompt-col naming a column you added "
        "holding data_id"
    )


def test_the_agent_lightning_export_is_not_keyed_by_its_own_fields():
    for key in ("prompt", "rollout_id"):
        with pytest.raises(InputError) as raised:
            rollaudit.load(corpus("agent_lightning") / "train_trajectories.jsonl", prompt_col=key)
        assert raised.value.field == "data_id"


# ---------------------------------------------------------------------------------------------------------------------
# Options checked against the format.


def test_every_format_declares_options_that_exist():
    fields = set(rollaudit.LoadOptions().reading()) - {"format"}
    for entry in FORMATS.values():
        assert entry.options <= fields, entry.name
        assert entry.reads, entry.name


@pytest.mark.parametrize(
    ("format_name", "options", "named"),
    [
        ("roll", {"prompt_col": "nope"}, "--prompt-col"),
        ("slime", {"reward_col": "nonexistent"}, "--reward-col"),
        ("nemo_rl", {"n_samples_per_prompt": 8}, "--n-samples-per-prompt"),
        ("verl", {"mask_col": "mask"}, "--mask-col"),
        ("areal", {"prompt_col": "task"}, "--prompt-col"),
    ],
)
def test_an_option_the_format_does_not_read_is_a_usage_error(format_name, options, named):
    with pytest.raises(UsageError) as raised:
        FORMATS[format_name].check_options(rollaudit.LoadOptions(**options))
    line = raised.value.line()
    assert named in line and f"not read by {format_name} dumps" in line and "they read" in line


def test_run_options_and_format_always_pass():
    options = rollaudit.LoadOptions(format="roll", jobs=2, cache=False, engine="local")
    for entry in FORMATS.values():
        entry.check_options(options)


def test_a_load_refuses_an_option_its_format_does_not_read():
    with pytest.raises(UsageError, match=r"--prompt-col is not read by roll dumps"):
        rollaudit.load(corpus("roll") / "agentic", prompt_col="nope")
    result = CliRunner().invoke(app, ["inspect", str(SAMPLES / "uniform.pt"), "--reward-col", "nonexistent"])
    assert result.exit_code == 2 and "--reward-col" in result.output and "slime" in result.output


def test_a_column_option_names_a_column_that_is_there():
    with pytest.raises(InputError, match=r"no column 'nonexistent' for the reward; columns found: 'step', 'uid'"):
        rollaudit.load(SAMPLES / "generic" / "rollouts.csv", reward_col="nonexistent")


# ---------------------------------------------------------------------------------------------------------------------
# AReaL's raw rewards.


def areal_trial(name: str) -> Path:
    return corpus("areal") / "experiments" / "logs" / "rl" / "gsm8k-agent-grpo" / name


def test_areal_original_reward_is_the_raw_reward():
    normalized = rollaudit.load(areal_trial("trial1-concat-rnorm"))
    raw = rollaudit.load(areal_trial("trial1-concat-rnorm"), reward_col="original_reward")
    assert raw.column("reward").to_pylist() == normalized.column("original_reward").to_pylist()
    assert raw.column("rollout_normalized_reward").to_pylist() == normalized.column("reward").to_pylist()
    assert any("--reward-col original_reward" in note for note in notes_in(normalized))
    assert any("the audit reads original_reward" in note for note in notes_in(raw))
    plain = rollaudit.load(areal_trial("trial0"))
    assert not any("normalized rewards at rollout time" in note for note in notes_in(plain))
    with pytest.raises(InputError, match="no reward field 'score'") as raised:
        rollaudit.load(areal_trial("trial0"), reward_col="score")
    assert raised.value.field == "score"


# ---------------------------------------------------------------------------------------------------------------------
# Facts: the framework's default preset, and why trajectories cannot be told.


@pytest.mark.parametrize(
    ("path", "scheme", "no_trajectory"),
    [
        (SAMPLES / "areal", "areal-group", "attempt id"),
        (SAMPLES / "rllm", "rllm-grpo", None),
        (SAMPLES / "roll", "roll-grpo", None),
        (SAMPLES / "nemo_rl", "nemo-loo", "whole conversation"),
        (SAMPLES / "verl_v1", "verl-grpo-v1", None),
        (SAMPLES / "uniform.pt", None, None),
    ],
)
def test_each_format_states_its_default(path, scheme, no_trajectory):
    facts = facts_in(rollaudit.load(path))
    assert facts["trained_default"]["scheme"] == scheme and facts["trained_default"]["why"]
    if no_trajectory is None:
        assert "no_trajectory" not in facts
    else:
        assert no_trajectory in facts["no_trajectory"]


def test_slime_says_its_default_needs_n_and_generic_tables_state_none():
    why = facts_in(rollaudit.load(SAMPLES / "uniform.pt"))["trained_default"]["why"]
    assert "slime-legacy(n=N)" in why and "n_samples_per_prompt" in why and "#2204" in why
    assert "trained_default" not in facts_in(rollaudit.load(SAMPLES / "generic" / "rollouts.csv"))


def test_a_trajectory_col_keeps_verl_v0_trajectories_auditable(tmp_path: Path):
    lines = [{**LINE, "episode": index} for index in range(4)]
    table = rollaudit.load(write_lines(tmp_path / "3.jsonl", lines), trajectory_col="episode")
    assert "no_trajectory" not in facts_in(table) and trained_default(table) == "verl-grpo"
