"""The run's config is untrusted input: read with a safe YAML loader and the standard TOML and JSON parsers, bounded
in size and depth, never a FIFO or a device; an unknown key is ignored, a known key with a bad value is one line and
exit 2. Run as a user runs it: ``rollaudit compare`` in a subprocess, against ms-swift's corpus run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conformance.conftest import corpus

RUN = "grpo_default/output/v0-20261207-000000"
SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def _run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "output"
    folder.mkdir()
    shutil.copyfile(corpus("ms_swift") / RUN / "completions.jsonl", folder / "completions.jsonl")
    return folder


def _compare(*args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rollaudit", "compare", *map(str, args), "--no-cache", "--json", "--quiet"]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout[-400:], done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    return lines[0]


def test_a_yaml_tag_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    folder = _run_dir(tmp_path)
    marker = tmp_path / "ran"
    config = tmp_path / "config.yaml"
    config.write_text(f'advantage_estimator: !!python/object/apply:os.system ["touch {marker}"]\n', encoding="utf-8")
    line = _one_line_error(_compare(folder, "--config", config))
    assert "config.yaml" in line and "YAML" in line
    assert not marker.exists()


def _alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_never_expanded(tmp_path):
    folder = _run_dir(tmp_path)
    config = tmp_path / "bomb.yaml"
    config.write_text(_alias_bomb() + "num_generations: 8\n", encoding="utf-8")
    started = time.monotonic()
    done = _compare(folder, "--config", config)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    # A known key that is the bomb: a list, not an int, said in one line.
    config.write_text(_alias_bomb() + "num_generations: *a8\n", encoding="utf-8")
    line = _one_line_error(_compare(folder, "--config", config))
    assert "'num_generations'" in line and "a list" in line


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.json", '{"num_generations": ' + "[" * 10_000 + "]" * 10_000 + "}"),
        ("deep.yaml", "num_generations: " + "[" * 10_000 + "]" * 10_000 + "\n"),
        ("deep.toml", "num_generations = " + "[" * 10_000 + "]" * 10_000 + "\n"),
    ],
)
def test_ten_thousand_levels_of_nesting_are_one_line(tmp_path, name, text):
    folder = _run_dir(tmp_path)
    config = tmp_path / name
    config.write_text(text, encoding="utf-8")
    line = _one_line_error(_compare(folder, "--config", config))
    assert name in line


def test_a_gigabyte_config_is_refused_before_it_is_read(tmp_path):
    folder = _run_dir(tmp_path)
    config = folder / "args.json"  # where ms-swift saves it: found without --config
    with open(config, "wb") as stream:
        stream.truncate(1 << 30)  # sparse: no gigabyte is written
    started = time.monotonic()
    line = _one_line_error(_compare(folder))
    assert "args.json" in line and str(1 << 30) in line
    assert time.monotonic() - started < 60


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_config_that_links_to_a_fifo_is_refused_without_blocking(tmp_path):
    folder = _run_dir(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (folder / "args.json").symlink_to(fifo)
    line = _one_line_error(_compare(folder, timeout=60))
    assert "a FIFO" in line


def test_an_unknown_key_is_ignored_and_a_known_key_with_a_bad_value_named(tmp_path):
    folder = _run_dir(tmp_path)
    (folder / "args.json").write_text('{"model": {"deep": [1, 2]}, "num_generations": 8, "anything": null}')
    done = _compare(folder)
    assert done.returncode == 0, done.stderr
    (folder / "args.json").write_text('{"num_generations": "eight"}')
    line = _one_line_error(_compare(folder))
    assert "args.json" in line and "'num_generations'" in line and "a positive integer" in line
    (folder / "args.json").write_text('{"scale_rewards": "sometimes"}')
    line = _one_line_error(_compare(folder))
    assert "'scale_rewards'" in line and "one of group, batch, none, gdpo" in line


def test_config_for_a_format_that_reads_none_is_refused(tmp_path):
    config = tmp_path / "config.json"
    config.write_text("{}")
    line = _one_line_error(_compare(SAMPLES / "generic" / "rollouts.csv", "--config", config))
    assert "--config is not read for generic dumps" in line


def test_numbers_past_a_double_and_counts_out_of_range_are_named(tmp_path):
    import rollaudit
    from rollaudit import InputError

    folder = _run_dir(tmp_path)
    for text, key in (
        ('{"num_generations": 1' + "0" * 400 + "}", "num_generations"),
        ('{"beta": 1' + "0" * 400 + "}", "beta"),
        ('{"num_generations": 0}', "num_generations"),
    ):
        (folder / "args.json").write_text(text)
        with pytest.raises(InputError, match=f"field '{key}'"):
            rollaudit.load(folder)


def test_a_gate_rules_file_given_as_the_run_config_is_pointed_to_gate_config(tmp_path):
    folder = _run_dir(tmp_path)
    rules = tmp_path / "gate.toml"
    rules.write_text('[tool.rollaudit.gate]\nmax = ["batch:sign_flip_rate=0.1"]\n')
    line = _one_line_error(_compare(folder, "--config", rules))
    assert "--gate-config" in line


@pytest.mark.parametrize(
    ("settings", "scheme"),
    [
        (
            "algo:\n  advantage:\n    estimator: reinforce_baseline\n    no_whiten: true\n",
            "molt-reinforce-baseline(whiten=none)",
        ),
        ("algo:\n  advantage:\n    estimator: reinforce\n  kl:\n    init_coef: 0.0\n", "molt-reinforce-nokl"),
        ("algo:\n  advantage:\n    estimator: reinforce\n  kl:\n    use_loss: true\n", "molt-reinforce-nokl"),
        ("algo:\n  advantage:\n    estimator: reinforce\n    gamma: 0.9\n  kl:\n    init_coef: 0.0\n", None),
        ("algo:\n  advantage:\n    estimator: reinforce\n", None),
    ],
)
def test_molts_settings_name_its_preset_or_say_why_none(tmp_path, settings, scheme):
    import rollaudit

    config = tmp_path / "molt.yaml"
    config.write_text(settings)
    table = rollaudit.load(corpus("molt") / "reinforce_default" / "rollout_dump", config=config)
    trained = rollaudit.audit(table, device="cpu").trained_with
    assert (trained.scheme, trained.evidence) == (scheme, "config")
    assert "molt.yaml" in trained.why
