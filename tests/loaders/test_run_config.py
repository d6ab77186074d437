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
    assert "args.json" in line and "'num_generations'" in line and "an integer" in line
    (folder / "args.json").write_text('{"scale_rewards": "sometimes"}')
    line = _one_line_error(_compare(folder))
    assert "'scale_rewards'" in line and "one of group, batch, none, gdpo" in line


def test_config_for_a_format_that_reads_none_is_refused(tmp_path):
    config = tmp_path / "config.json"
    config.write_text("{}")
    line = _one_line_error(_compare(SAMPLES / "generic" / "rollouts.csv", "--config", config))
    assert "--config is not read for generic dumps" in line
