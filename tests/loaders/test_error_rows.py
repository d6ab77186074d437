"""Every loader names a real row or line in its errors, counted from 1: a bad value put on the third record of each
format's sample is named as row 3 (or line 3), never row 0 or the -1 of "not found"."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit import InputError
from rollaudit._errors import RollauditError
from rollaudit._loaders.registry import FORMATS

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def _set(name: str, value: object) -> Callable[[dict], None]:
    return lambda record: record.__setitem__(name, value)


def _first_trace(name: str, value: object) -> Callable[[dict], None]:
    return lambda record: record["traces"][0].__setitem__(name, value)


# format -> (sample, its place under tmp_path, the change made to record 3, what the error must say)
JSON_CASES = {
    "generic": ("generic/rollouts.jsonl", "rollouts.jsonl", _set("step", 2.5), "field 'step': row 3:"),
    "verl": ("verl/rollout_data/1.jsonl", "rollout_data/1.jsonl", _set("score", None), "field 'score': row 3:"),
    "tinker": (
        "tinker/iteration_000001/train_rollout_summaries.jsonl",
        "iteration_000001/train_rollout_summaries.jsonl",
        _set("iteration", None),
        "field 'iteration': row 3:",
    ),
    "open_instruct": (
        "open_instruct/rollouts/demo_rollouts_000000.jsonl",
        "rollouts/demo_rollouts_000000.jsonl",
        _set("reward", None),
        "field 'reward': row 3:",
    ),
    "areal": ("areal/rollout/2/40.jsonl", "rollout/2/40.jsonl", _set("task_id", None), "field 'task_id': row 3:"),
    "nemo_rl": (
        "nemo_rl/train_data_step3.jsonl",
        "train_data_step3.jsonl",
        _set("token_ids", None),
        "field 'token_ids': row 3:",
    ),
    "prime_rl": (
        "prime_rl/rollouts/step_1/train/all/traces.jsonl",
        "rollouts/step_1/train/all/traces.jsonl",
        _first_trace("id", None),
        "field 'traces[].id': row 3:",
    ),
    "torchtitan": (
        "torchtitan/outputs/rl/rollout_samples.jsonl",
        "outputs/rl/rollout_samples.jsonl",
        _set("reward", None),
        "field 'reward': row 3:",
    ),
}
# A format with no row-numbered error of its own: the one record it holds, or what names the error instead.
NO_ROWS = {
    "roll": "one line holding every trajectory; its errors name the trajectory_data entry",
    "rllm": "a JSON document per episode; its errors name the episode file",
    "agent_lightning": "refused whole (no data_id); with --prompt-col it is read as a generic table",
    "art": "Parquet tables read as generic tables (covered by the Parquet case)",
    "trl": "Parquet tables (covered by the Parquet case)",
    "slime": "torch.save dumps: errors name the sample's position (tests/loaders/test_slime.py)",
    "miles": "torch.save dumps: errors name the sample's position (tests/loaders/test_miles.py)",
    "skyrl": "a pickle refused whole: SkyRL pops its rewards and uids before the dump",
    "ms-swift": "a line of parallel lists per logging step: its errors name the line (tests/loaders/test_ms_swift.py)",
    "molt": "torch.save dumps of Experience objects: errors name the experience's index in the file",
}


def _rewritten(tmp_path: Path, sample: str, place: str, change: Callable[[dict], None]) -> Path:
    lines = (SAMPLES / sample).read_text().splitlines()
    record = json.loads(lines[2])
    change(record)
    lines[2] = json.dumps(record)
    path = tmp_path / place
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _error_of(path: Path, **options: object) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputError) as caught:
            rollaudit.load(path, **options)
    return str(caught.value)


def test_every_format_is_swept():
    assert set(FORMATS) == set(JSON_CASES) | set(NO_ROWS)


@pytest.mark.parametrize("name", sorted(JSON_CASES))
def test_the_third_record_is_named_row_3(tmp_path: Path, name: str):
    sample, place, change, said = JSON_CASES[name]
    path = _rewritten(tmp_path, sample, place, change)
    line = _error_of(path, format=name)
    assert said in line, line


@pytest.mark.parametrize("name", sorted(JSON_CASES))
def test_a_blank_line_before_it_still_names_a_real_record(tmp_path: Path, name: str):
    """Blank lines are no records: the error names the third record (row 3), which is line 4 of the file."""
    sample, place, change, said = JSON_CASES[name]
    path = _rewritten(tmp_path, sample, place, change)
    path.write_text("\n" + path.read_text())
    assert said in _error_of(path, format=name)


def _table_rows(steps: list[object]) -> dict[str, list[object]]:
    return {"step": steps, "prompt": ["a", "a", "b", "b"], "reward": [0.0, 1.0, 0.0, 1.0]}


@pytest.mark.parametrize("kind", ["csv", "parquet", "feather"])
def test_tables_name_the_data_row(tmp_path: Path, kind: str):
    table = pa.table(_table_rows([1, 1, None, 1]))
    path = tmp_path / f"t.{kind}"
    if kind == "csv":
        path.write_text("step,prompt,reward\n1,a,0\n1,a,1\n2.5,b,0\n1,b,1\n")
    elif kind == "parquet":
        pq.write_table(table, path)
    else:
        import pyarrow.feather as feather

        feather.write_feather(table, path)
    line = _error_of(path)
    assert "field 'step': row 3:" in line, line


def test_a_negative_row_is_never_shown():
    """-1 is what "not found" searches return: an error never shows it as "row 0"."""
    assert str(RollauditError("bad", file="f", field="x", row=-1)) == "f: field 'x': bad"
    assert str(RollauditError("bad", row=0)) == "row 1: bad"
