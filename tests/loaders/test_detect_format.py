"""Format detection by content: every format found whatever the file is called; one error listing them all."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit import InputError, RollauditWarning
from rollaudit._loaders.registry import FORMATS
from rollaudit._loaders.run.load import detect_format

ROOT = Path(__file__).resolve().parents[2]
DUMPS = ROOT / "sample_dumps"
SAMPLES = {
    "uniform.pt": "slime",
    "dump_details/train_data/0_0.pt": "slime",
    "miles/rollout_data/7.pt": "miles",
    "miles/train_data/7_1.pt": "miles",
    "verl/rollout_data/1.jsonl": "verl",
    "trl/completions/completions_00010.parquet": "trl",
    "agl/rollouts.parquet": "generic",
    "generic/rollouts.csv": "generic",
    "generic/rollouts.jsonl": "generic",
    "generic/rollouts.feather": "generic",
    "nemo/train_data_step3.jsonl": "generic",
    "tinker/iteration_000001/train_rollout_summaries.jsonl": "tinker",
    "art/.art/demo/models/agent/trajectories/train/0001.parquet": "art",
    "prime_rl/rollouts/step_1/train/all/traces.jsonl": "prime_rl",
    "open_instruct/rollouts/demo_rollouts_000000.jsonl": "open_instruct",
    "torchtitan/outputs/rl/rollout_samples.jsonl": "torchtitan",
    "torchtitan_whole/outputs/rl/rollout_samples.jsonl": "torchtitan",
}


def load_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RollauditWarning)
        return rollaudit.load(*args, **kwargs)


def test_the_registry_order():
    # Molt and miles before slime (slime takes any torch.save zip); generic accepts any table: last; agent-lightning's
    # export before it, so it is never a table; torchtitan's and SkyRL's files before it too.
    assert list(FORMATS) == [
        "molt", "miles", "slime", "tinker", "ms-swift", "torchtitan", "prime_rl", "open_instruct", "art", "areal",
        "verl", "trl", "rllm", "nemo_rl", "roll", "agent_lightning", "skyrl", "generic",
    ]  # fmt: skip


@pytest.mark.parametrize("relative", sorted(SAMPLES))
def test_samples_are_detected_by_content_under_any_name(tmp_path: Path, relative: str):
    source = DUMPS / relative
    assert detect_format(source) == SAMPLES[relative]
    disguised = tmp_path / "dump.data"  # no extension says anything
    shutil.copyfile(source, disguised)
    assert detect_format(disguised) == SAMPLES[relative]
    if "train_data" in relative:
        return  # a train dump loads only beside its rollout dump
    if SAMPLES[relative] == "art":
        with pytest.raises(rollaudit.InputError, match="is not named"):
            load_quietly(disguised)  # ART's step is only in its file name ({step:04d}.parquet): never guessed
        return
    expected, loaded = load_quietly(source), load_quietly(disguised)
    assert loaded.column("prompt").equals(expected.column("prompt"))
    np.testing.assert_array_equal(loaded.column("reward").to_numpy(), expected.column("reward").to_numpy())


def test_misleading_extensions_do_not_decide(tmp_path: Path):
    parquet_named_jsonl = tmp_path / "rows.jsonl"
    shutil.copyfile(DUMPS / "trl" / "completions" / "completions_00010.parquet", parquet_named_jsonl)
    assert detect_format(parquet_named_jsonl) == "trl"
    csv_named_parquet = tmp_path / "rows.parquet"
    shutil.copyfile(DUMPS / "generic" / "rollouts.csv", csv_named_parquet)
    assert detect_format(csv_named_parquet) == "generic"
    assert rollaudit.load(csv_named_parquet).num_rows == 12


def test_a_verl_line_needs_verls_fields(tmp_path: Path):
    generic = tmp_path / "3.jsonl"
    generic.write_text('{"input": "p", "reward": 1.0}\n')  # no output: not a verl line
    assert detect_format(generic) == "generic"
    verl = tmp_path / "rows.txt"
    verl.write_text('{"input": "p", "output": "o", "score": 1.0, "step": 2}\n')
    assert detect_format(verl) == "verl"


def test_unknown_content_is_refused_in_one_short_line(tmp_path: Path):
    cases = {
        "notes.txt": b"hello",
        "binary.bin": b"\x00\x01\x02\x03 not a table",
        "one_column.txt": b"reward\n1\n",  # a one-column CSV reads, but only under a .csv or .tsv name
        "array.json": b"[1, 2, 3]\n",
        "bad_first_line.jsonl": b'{"reward": 1,\n',
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(InputError) as caught:
            rollaudit.load(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: not a dump rollaudit reads (expected "), name
        # One short line: a hint, never the list of every format's description.
        assert len(message) - len(str(path)) < 120, message
        assert not any(entry.description in message for entry in FORMATS.values()), name
        assert "\n" not in message


def test_empty_files_say_so_whatever_their_name(tmp_path: Path):
    for name in ("0.jsonl", "completions_00001.parquet", "rows.csv", "rows.feather", "data"):
        path = tmp_path / name
        path.write_bytes(b"")
        with pytest.raises(InputError, match=r"empty file"):
            rollaudit.load(path)


def test_detectors_never_raise(tmp_path: Path):
    (tmp_path / "folder").mkdir()
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes((DUMPS / "agl" / "rollouts.parquet").read_bytes()[:40])
    for path in (tmp_path / "folder", tmp_path / "missing", truncated):
        for entry in FORMATS.values():
            assert entry.detect(path) in (True, False)
    with pytest.raises(InputError, match=r"truncated.parquet: cannot read as Parquet"):
        rollaudit.load(truncated)


def test_a_forced_format_reads_or_says_why(tmp_path: Path):
    verl_file = DUMPS / "verl" / "rollout_data" / "1.jsonl"
    as_generic = load_quietly(verl_file, format="generic")  # input and score are common names
    assert as_generic.column("prompt").equals(rollaudit.load(verl_file).column("prompt"))
    with pytest.raises(InputError, match=r"rollouts.csv: not a Parquet file"):
        rollaudit.load(DUMPS / "generic" / "rollouts.csv", format="trl")
    with pytest.raises(InputError, match=r"unknown format 'nope'.*slime.*verl.*trl.*generic"):
        rollaudit.load(verl_file, format="nope")


def test_directories_expand_to_their_formats_dumps(tmp_path: Path):
    run = tmp_path / "run"
    (run / "completions").mkdir(parents=True)
    (run / "checkpoint-10").mkdir()
    shutil.copyfile(DUMPS / "trl" / "completions" / "completions_00010.parquet", run / "completions" / "c.parquet")
    shutil.copyfile(
        DUMPS / "trl" / "completions" / "completions_00010.parquet",
        run / "completions" / "completions_00010.parquet",
    )
    assert load_quietly(run).num_rows == 24  # TRL's output_dir: only completions_{step}.parquet files
    verl_dir = tmp_path / "rollout_data"
    shutil.copytree(DUMPS / "verl" / "rollout_data", verl_dir)
    (verl_dir / "notes.md").write_text("# not a dump, with a comma\n")
    assert sorted(set(rollaudit.load(verl_dir).column("step").to_pylist())) == [1, 2]


def test_formats_never_mix_in_one_load(tmp_path: Path):
    # Two frameworks' samples make no one report: the error names each format and a file of it.
    with pytest.raises(InputError, match=r"dumps of 2 formats given together.*slime \(.*uniform.pt\), verl \("):
        load_quietly([DUMPS / "uniform.pt", DUMPS / "verl" / "rollout_data" / "1.jsonl"])


def test_parquet_without_trls_columns_is_generic(tmp_path: Path):
    path = tmp_path / "completions_00001.parquet"
    pq.write_table(pa.table({"prompt": ["a"], "reward": [1.0]}), path)
    assert detect_format(path) == "generic"
