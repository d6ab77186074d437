"""``--tensorboard DIR`` as a user runs it: the event files read back with TensorBoard's own loaders hold one scalar
per (step, row, metric), equal to ``--json``'s per-step values (at float32, TensorBoard's scalar precision), the
share of prompts with no learning signal, and the run's scheme as text; ``watch`` writes each step as it lands,
flushed, and a watch started again with ``--jsonl`` writes no step twice. The event file is created exclusively in
the directory named, never through a link."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import rollaudit
from rollaudit._cli import app

from .readers import event_files, tensorboard_accumulated, tensorboard_events, tree, watch_then_interrupt

pytest.importorskip("tensorboard")

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
CORPUS = ROOT.parent / "shared" / "corpus"
VERL = SAMPLES / "verl" / "rollout_data"
TAG = re.compile(r"^rollaudit/[A-Za-z0-9_.=-]{1,256}/[a-z_]{1,64}$")
NO_SIGNAL = "rollaudit/data/no_signal_prompt_share"
SCHEME = "rollaudit/trained/scheme"
MULTI_STEP_RUNS = [
    pytest.param(VERL, id="verl-sample"),
    pytest.param(CORPUS / "verl" / "rollout_data_v1", id="verl-v1-corpus"),
    pytest.param(CORPUS / "prime_rl", id="prime-rl-corpus-recorded"),
    pytest.param(CORPUS / "tinker", id="tinker-corpus"),
]


def run(*args: object, env: dict | None = None):
    return CliRunner(env={"COLUMNS": "100", **(env or {})}).invoke(app, [str(arg) for arg in args])


def part_of(row: str, trained_row: str | None) -> str:
    """The tag part of a row, as a plain rule for the scheme strings of these runs."""
    if row == trained_row:
        return "trained"
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_.=-]", "_", row.replace(" ", ""))).strip("_")


def expected_scalars(document: dict) -> dict[tuple[int, str], float]:
    """``--json``'s per-step values as the tags they must be written under, rounded to float32."""
    trained_row = document["trained_with"]["row"]
    expected = {}
    for step, rows in document["per_step"].items():
        for row, metrics in rows.items():
            for metric, value in metrics.items():
                if value is not None:
                    expected[(int(step), f"rollaudit/{part_of(row, trained_row)}/{metric}")] = float(np.float32(value))
    return expected


def no_signal_oracle(path: Path) -> dict[int, float]:
    """Per step, the share of prompts whose samples all got the same reward: plain Python over the loaded table."""
    table = rollaudit.load(path).to_pylist()
    rewards: dict[tuple, list] = defaultdict(list)
    for row in table:
        rewards[(row["step"], row["prompt"])].append(row["reward"])
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for (step, _), values in rewards.items():
        counts[step][0] += len(set(values)) == 1
        counts[step][1] += 1
    return {step: float(np.float32(silent / total)) for step, (silent, total) in counts.items()}


def assert_matches_json(directory: Path, document: dict, dump: Path) -> tuple[int, int]:
    """The event files of ``directory`` against a compare document: (scalars, steps) checked."""
    scalars, written, texts = tensorboard_events(directory)
    assert all(count == 1 for count in written.values()), [key for key, count in written.items() if count > 1]
    metrics = {key: value for key, value in scalars.items() if key[1] != NO_SIGNAL}
    expected = expected_scalars(document)
    assert metrics == expected
    assert {key[0]: value for key, value in scalars.items() if key[1] == NO_SIGNAL} == no_signal_oracle(dump)
    trained = document["trained_with"]
    first = min(int(step) for step in document["per_step"])
    if len(trained["parts"]) > 1:
        # A scheme per environment: one text at the first step naming each env's scheme.
        ((at, tag),) = texts
        assert (at, tag) == (first, SCHEME)
        assert all(part["where"] in texts[at, tag] and part["scheme"] in texts[at, tag] for part in trained["parts"])
    else:
        scheme = trained["scheme"] or ("no preset matches" if trained["evidence"] == "recorded" else "unknown")
        said = f"{scheme} ({trained['evidence']})" if trained["evidence"] != "unknown" else scheme
        assert texts == {(first, SCHEME): said}
    assert all(TAG.match(tag) for _, tag in scalars)
    # TensorBoard's accumulator (what its Python loader serves) sees the same points.
    accumulated = tensorboard_accumulated(directory)
    assert {(step, tag): value for tag, points in accumulated.items() for step, value in points} == scalars
    return len(metrics), len(document["per_step"])


@pytest.mark.parametrize("dump", MULTI_STEP_RUNS)
def test_compare_writes_one_scalar_per_step_row_and_metric_equal_to_the_json(tmp_path: Path, dump: Path) -> None:
    if not dump.exists():
        pytest.skip(f"{dump} is not here (the corpus lies beside the project)")
    board = tmp_path / "tb"
    result = run("compare", dump, "--json", "--no-cache", "--tensorboard", board)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert len(document["per_step"]) >= 2
    scalars, steps = assert_matches_json(board, document, dump)
    rows = {row for rows in document["per_step"].values() for row in rows}
    assert scalars >= steps * len(rows) * 10  # every row's metrics, at every step
    assert len(event_files(board)) == 1


def test_gate_writes_its_audit_with_the_run_s_own_row_as_trained(tmp_path: Path) -> None:
    board = tmp_path / "tb"
    gated = run("gate", VERL, "--no-cache", "--max", "trained:strict_flip_rate=0", "--tensorboard", board)
    assert gated.exit_code == 0, gated.output
    compared = run("compare", VERL, "--json", "--no-cache")
    scalars, written, texts = tensorboard_events(board)
    assert set(written.values()) == {1}
    expected = expected_scalars(json.loads(compared.stdout))
    trained = {key: value for key, value in expected.items() if "/trained/" in key[1]}
    assert trained and {key: value for key, value in scalars.items() if "/trained/" in key[1]} == trained
    assert texts == {(1, SCHEME): "verl-grpo (framework default)"}


def watch(run_dir: Path, records: Path, board: Path):
    return run("watch", run_dir, "--until-idle", "0", "--no-cache", "--jsonl", records, "--tensorboard", board)


def test_watch_writes_each_step_once_and_a_restart_writes_no_step_twice(tmp_path: Path) -> None:
    run_dir, records, board = tmp_path / "run", tmp_path / "audit.jsonl", tmp_path / "tb"
    run_dir.mkdir()
    shutil.copy(VERL / "1.jsonl", run_dir)
    assert watch(run_dir, records, board).exit_code == 0
    assert len(event_files(board)) == 1
    shutil.copy(VERL / "2.jsonl", run_dir)
    assert watch(run_dir, records, board).exit_code == 0  # restarted: step 2 only
    assert watch(run_dir, records, board).exit_code == 0  # restarted again: nothing new, no file
    files = event_files(board)
    assert len(files) == 2
    steps_per_file = [{step for (step, _) in tensorboard_events_of(path)} for path in files]
    assert steps_per_file == [{1}, {2}]
    document = json.loads(run("compare", VERL, "--json", "--no-cache").stdout)
    scalars, steps = assert_matches_json(board, document, VERL)
    assert (scalars, steps) == (len(expected_scalars(document)), 2)


def tensorboard_events_of(path: Path) -> dict:
    scratch = path.parent / f"one-{path.name}"
    scratch.mkdir()
    os.link(path, scratch / path.name)
    try:
        return tensorboard_events(scratch)[0]
    finally:
        shutil.rmtree(scratch)


def test_watch_flushes_each_step_and_ctrl_c_loses_none(tmp_path: Path) -> None:
    run_dir, records, board = tmp_path / "run", tmp_path / "audit.jsonl", tmp_path / "tb"
    shutil.copytree(VERL, run_dir)

    def each_step_on_disk() -> None:
        # Read while the watch still runs: each step is on disk as soon as its record is.
        assert {step for step, _ in tensorboard_events(board)[0]} == {1, 2}

    arguments = [str(run_dir), "--no-cache", "--tensorboard", str(board)]
    watch_then_interrupt(arguments, records, cwd=ROOT, seconds=90, while_running=each_step_on_disk)
    scalars, written, _ = tensorboard_events(board)
    assert {step for step, _ in scalars} == {1, 2} and set(written.values()) == {1}


def test_a_link_planted_at_the_event_file_name_is_never_followed(tmp_path: Path) -> None:
    board = tmp_path / "shared-logs"
    board.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    from rollaudit._render.dashboards.tensorboard_events import FILE_PREFIX, FILE_SUFFIX, _host

    now = int(time.time())
    for stamp in range(now - 2, now + 180):
        for number in (0, 1):
            name = f"{FILE_PREFIX}.{stamp:010d}.{_host()}.{os.getpid()}.{number}{FILE_SUFFIX}"
            (board / name).symlink_to(victim)
    result = run("compare", VERL, "--no-cache", "-q", "--tensorboard", board)
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n"
    (written,) = [path for path in board.iterdir() if not path.is_symlink()]
    assert written.name.endswith(f".2{FILE_SUFFIX}") and written.stat().st_size > 0
    assert all(path.resolve() == victim for path in board.iterdir() if path.is_symlink())


def _unwritable(tmp_path: Path) -> Path:
    """A directory this process cannot create files in, root included."""
    if os.geteuid() == 0:
        return Path("/sys/kernel")  # sysfs takes no new files, even from root
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    return locked


def hazards(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Each unusable --tensorboard DIR, and the words its one line must hold."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target, target_is_directory=True)
    (tmp_path / "a-file").write_text("x")
    return {
        "a link to a directory": (tmp_path / "link", "is a symbolic link"),
        "a file": (tmp_path / "a-file", "is not a directory"),
        "under a file": (tmp_path / "a-file" / "tb", "Not a directory"),
        "unwritable": (_unwritable(tmp_path) / "tb", "is not writable"),
    }


@pytest.mark.parametrize("hazard", ["a link to a directory", "a file", "under a file", "unwritable"])
def test_an_unusable_directory_is_one_line_and_exit_2_with_nothing_written(tmp_path: Path, hazard: str) -> None:
    directory, words = hazards(tmp_path)[hazard]
    before = tree(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "rollaudit", "compare", str(VERL), "--no-cache", "--tensorboard", str(directory)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: ") and words in result.stderr, result.stderr
    assert tree(tmp_path) == before


def test_missing_levels_are_made_and_the_event_file_is_the_trainer_s_neighbour(tmp_path: Path) -> None:
    trainer_log = tmp_path / "logs" / "run-7"
    trainer_log.mkdir(parents=True)
    (trainer_log / "events.out.tfevents.1700000000.node.1.0").write_bytes(b"")  # the trainer's own, untouched
    result = run("compare", VERL, "--no-cache", "-q", "--tensorboard", trainer_log)
    assert result.exit_code == 0, result.output
    assert len(event_files(trainer_log)) == 2
    deep = tmp_path / "a" / "b" / "c"
    assert run("compare", VERL, "--no-cache", "-q", "--tensorboard", deep).exit_code == 0
    assert len(event_files(deep)) == 1


def test_scheme_strings_become_tags_that_match_themselves_in_a_filter(tmp_path: Path) -> None:
    board = tmp_path / "tb"
    result = run(
        "compare", VERL, "--no-cache", "-q", "--tensorboard", board,
        "-s", "batch,prompt( scale = none ),verl-grpo,verl-rloo(eps=0.5),prompt(singleton=raw, eps=1e-6)",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    parts = {tag.split("/")[1] for _, tag in tensorboard_events(board)[0]}
    assert parts == {
        "batch", "prompt", "prompt_scale=none", "trained", "verl-rloo_eps=0.5", "prompt_singleton=raw_eps=1e-6", "data"
    }  # fmt: skip
    # The filter box of TensorBoard's UI is a regular expression: each part, typed there, matches itself.
    assert all(re.search(part, f"rollaudit/{part}/nonzero") for part in parts)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def served_scalars(logdir: Path, tags: list[str]) -> dict[str, list[tuple[int, float]]]:
    """The scalars as TensorBoard's own server shows them to its UI (its Rust data server, ``--load_fast=true``)."""
    import urllib.parse
    import urllib.request

    pytest.importorskip("tensorboard_data_server")
    port = _free_port()
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--load_fast=true"]
    server = subprocess.Popen(
        [*command, "--host", "127.0.0.1", "--port", str(port), "--reload_interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}/data/plugin/scalars"

    def get(path: str) -> object:
        with urllib.request.urlopen(base + path, timeout=5) as response:
            return json.loads(response.read())

    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                listed = get("/tags")
                if isinstance(listed, dict) and set(tags) <= set(listed.get(".", {})):
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"TensorBoard's server did not list the tags (exit status {server.poll()})")
            time.sleep(0.5)
        queries = {tag: "/scalars?" + urllib.parse.urlencode({"run": ".", "tag": tag}) for tag in tags}
        return {tag: [(step, value) for _, step, value in get(query)] for tag, query in queries.items()}
    finally:
        server.terminate()
        server.communicate(timeout=30)


def test_tensorboard_s_own_server_shows_the_curves_and_the_newer_audit_of_a_step_audited_again(tmp_path: Path) -> None:
    """The slime train dump lands after its rollout dump: the watch started again audits step 0 again (its files
    changed) and writes it again; TensorBoard's server shows the newer audit (a step written again replaces the
    earlier point), with the run's own recorded row as ``trained``."""
    run_dir, records, board = tmp_path / "run", tmp_path / "audit.jsonl", tmp_path / "tb"
    (run_dir / "rollout_data").mkdir(parents=True)
    shutil.copy(SAMPLES / "dump_details" / "rollout_data" / "0.pt", run_dir / "rollout_data")
    assert watch(run_dir, records, board).exit_code == 0
    shutil.copytree(SAMPLES / "dump_details" / "train_data", run_dir / "train_data")
    assert watch(run_dir, records, board).exit_code == 0
    first, second = (json.loads(line) for line in records.read_text().splitlines())
    assert second["replaces"] is True and second["trained_with"]["row"] == "recorded"
    _, written, texts = tensorboard_events(board)
    assert written[(0, "rollaudit/batch/nonzero")] == 2  # once per audit of the step
    tags = ["rollaudit/batch/sign_flip_rate", "rollaudit/trained/spurious_nonzero", NO_SIGNAL]
    served = served_scalars(board, tags)
    assert served["rollaudit/batch/sign_flip_rate"] == [
        (0, float(np.float32(second["summary"]["batch"]["sign_flip_rate"])))
    ]
    assert served["rollaudit/trained/spurious_nonzero"] == [(0, second["summary"]["recorded"]["spurious_nonzero"])]
    assert [step for step, _ in served[NO_SIGNAL]] == [0]
    assert texts[(0, SCHEME)] == "batch (recorded)"
    assert first["trained_with"]["evidence"] != "recorded"


def test_a_run_that_changed_scheme_writes_each_part_s_scheme_where_it_starts(tmp_path: Path) -> None:
    from tests.audit.test_parts import _run

    path = tmp_path / "run.parquet"
    pq.write_table(_run(["batch"] * 3 + ["prompt"] * 3), path)
    board = tmp_path / "tb"
    result = run("compare", path, "--no-cache", "--tensorboard", board)
    assert result.exit_code == 0, result.output
    _, _, texts = tensorboard_events(board)
    assert texts == {(1, SCHEME): "batch (recorded)", (4, SCHEME): "prompt (recorded)"}
