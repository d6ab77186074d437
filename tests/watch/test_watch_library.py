"""The pieces of ``watch``: when a file being written is whole, how files become steps, and ``rollaudit.watch`` as a
notebook uses it (each record equal to ``audit`` of that step alone)."""

from __future__ import annotations

import io
import json
import shutil
import threading
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit._loaders.base import folder_step
from rollaudit._loaders.formats.pickled.slime import step_of_dump
from rollaudit._render.dashboards.watch import render_watch_html, step_line, summary_lines
from rollaudit._watch.files import PARTIAL, WHOLE, WHOLE_IF_STILL, completeness
from rollaudit._watch.follow import Wakeups
from rollaudit._watch.records import StepPoint, latest_points

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"


def _state(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return completeness(path, len(data))


def _parquet_bytes() -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"reward": [1.0, 0.0], "prompt": [0, 0]}), buffer)
    return buffer.getvalue()


def _zip_bytes(comment: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", b"x" * 5000)
        archive.comment = comment
    return buffer.getvalue()


@pytest.mark.parametrize("comment", [b"", b"PK\x05\x06 a comment that looks like an end record"])
def test_a_zip_is_whole_only_with_its_end_record(tmp_path: Path, comment: bytes) -> None:
    data = _zip_bytes(comment)
    assert _state(tmp_path / "3.pt", data) == WHOLE
    for cut in (len(data) // 3, len(data) - 30, len(data) - 1):
        assert _state(tmp_path / "3.pt", data[:cut]) == PARTIAL, cut


def test_parquet_and_arrow_are_whole_only_with_their_footer(tmp_path: Path) -> None:
    data = _parquet_bytes()
    assert _state(tmp_path / "t.parquet", data) == WHOLE
    assert _state(tmp_path / "t.parquet", data[:-1]) == PARTIAL
    assert _state(tmp_path / "t.parquet", data[: len(data) // 2]) == PARTIAL
    buffer = io.BytesIO()
    feather.write_feather(pa.table({"reward": [1.0]}), buffer)
    arrow = buffer.getvalue()
    assert _state(tmp_path / "t.arrow", arrow) == WHOLE
    assert _state(tmp_path / "t.arrow", arrow[:-3]) == PARTIAL


def test_text_files_are_whole_at_the_end_of_a_line_or_document(tmp_path: Path) -> None:
    line = json.dumps({"reward": 1.0, "prompt": "p"}).encode()
    assert _state(tmp_path / "1.jsonl", line + b"\n") == WHOLE_IF_STILL
    assert _state(tmp_path / "1.jsonl", line + b"\n" + line[:5]) == PARTIAL
    assert _state(tmp_path / "r.csv", b"reward,prompt\n1,0\n") == WHOLE_IF_STILL
    assert _state(tmp_path / "r.csv", b"reward,prompt\n1,") == PARTIAL
    assert _state(tmp_path / "episode.json", b'{"a": [1, 2]}  \n') == WHOLE_IF_STILL
    assert _state(tmp_path / "episode.json", b'{"a": [1, ') == PARTIAL
    assert _state(tmp_path / "empty.jsonl", b"") == PARTIAL
    assert _state(tmp_path / "legacy.pt", b"\x80\x02anything") == WHOLE_IF_STILL  # no marker: holding still decides


def test_steps_of_files() -> None:
    assert step_of_dump(Path("run/rollout_data/12.pt")) == "12"
    assert step_of_dump(Path("run/train_data/12_3.pt")) == "12"
    assert step_of_dump(Path("run/rollout_data/rollout_12.pt")) == "run/rollout_data/rollout_12.pt"
    assert folder_step(Path("trial/rollout/7/41.jsonl")) == "trial/rollout/7"


def test_the_library_yields_each_step_as_audit_gives_it() -> None:
    records = list(rollaudit.watch(SAMPLES / "verl" / "rollout_data", until_idle=0, settle=0))
    assert [record.step for record in records] == [1, 2]
    table = rollaudit.load(SAMPLES / "verl" / "rollout_data")
    for record in records:
        assert record.report is not None and record.gate is None and record.error is None
        alone = rollaudit.load(record.files)
        expected = rollaudit.audit(alone, trained_with=None)
        assert record.to_dict()["summary"] == expected.to_dict()["summary"]
        assert record.report.info["samples"] == table.filter(pa.compute.equal(table["step"], record.step)).num_rows


def test_the_library_checks_the_run_directory(tmp_path: Path) -> None:
    with pytest.raises(rollaudit.InputError, match="no such directory"):
        next(rollaudit.watch(tmp_path / "missing", until_idle=0))
    (tmp_path / "file").write_text("x")
    with pytest.raises(rollaudit.InputError, match="is not a directory"):
        next(rollaudit.watch(tmp_path / "file", until_idle=0))


def test_gate_rules_in_each_record() -> None:
    config = rollaudit.gate_config(max_rules=["batch:sign_flip_rate=1%"])
    (record,) = rollaudit.watch(SAMPLES / "fanout", rules=config, until_idle=0, settle=0)
    assert record.passed is False
    assert record.to_dict()["gate"]["passed"] is False
    point = StepPoint.of(record.to_dict())
    assert point.failed == ("max batch:sign_flip_rate",)
    assert step_line(point).endswith("FAIL max batch:sign_flip_rate")


def test_one_multi_step_file_gives_a_record_per_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    pq.write_table(
        pa.table({"reward": [1.0, 0.0, 1.0, 1.0, 0.0, 0.5], "prompt": [0, 0, 1, 1, 2, 2], "step": [5, 5, 5, 5, 6, 6]}),
        run / "rollouts.parquet",
    )
    records = list(rollaudit.watch(run, until_idle=0, settle=0))
    assert [(record.step, record.report.info["samples"]) for record in records] == [(5, 4), (6, 2)]


def test_resumed_records_are_not_audited_again() -> None:
    first = [record.to_dict() for record in rollaudit.watch(SAMPLES / "verl" / "rollout_data", until_idle=0)]
    again = list(rollaudit.watch(SAMPLES / "verl" / "rollout_data", until_idle=0, recorded=first))
    assert again == []
    # A record of one file of the run: the other is audited.
    only_one = list(rollaudit.watch(SAMPLES / "verl" / "rollout_data", until_idle=0, recorded=first[:1]))
    assert [record.step for record in only_one] == [2]


def test_trend_summary_and_page_from_points() -> None:
    points = [
        StepPoint(
            step,
            100,
            10,
            "recorded",
            rate,
            0.0,
            1.0,
            "batch",
            0.5,
            rate < 0.3,
            () if rate < 0.3 else ("max trained:sign_flip_rate",),
            0,
            None,
            False,
        )
        for step, rate in enumerate([0.0, 0.1, 0.5, 0.2])
    ]
    points.append(StepPoint(None, 0, 0, None, None, None, None, None, None, None, (), 0, "bad file", False))
    replaced = StepPoint(1, 100, 10, "recorded", 0.05, 0.0, 1.0, "batch", 0.5, True, (), 0, None, True)
    latest = latest_points([*points, replaced])
    assert [point.step for point in latest] == [0, 1, 2, 3, None]
    assert latest[1].flips == 0.05
    lines = summary_lines([*points, replaced], "stopped")
    assert lines[0] == "watch stopped: 4 steps audited, 1 could not be read, 1 failed a rule"
    assert lines[1] == "share of signs changed against the reference, per step:"
    assert lines[2].startswith("  the run's own: ") and "max 50.0% (recorded at the last step)" in lines[2]
    assert lines[lines.index("worst steps:") + 1].startswith("  step 2 ")
    page = render_watch_html([*points, replaced], "<run>", "running")
    assert "&lt;run&gt;" in page and "<run>" not in page
    assert page.count("<polyline") == 2


def test_wakeups_notice_a_new_file(tmp_path: Path) -> None:
    wakeups = Wakeups(tmp_path)
    try:
        if not wakeups.notifies:
            pytest.skip("no file notifications on this system")
        assert wakeups.wait(0.05) is False
        (tmp_path / "step").mkdir()
        assert wakeups.wait(2.0) is True
        (tmp_path / "step" / "1.jsonl").write_text("{}\n")  # inside a directory that appeared after the start
        assert wakeups.wait(2.0) is True
    finally:
        wakeups.close()


def test_wakeups_walk_no_link_twice(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).symlink_to(tmp_path)
    wakeups = Wakeups(tmp_path)
    try:
        assert len(wakeups._watched) <= 1
    finally:
        wakeups.close()


def test_a_file_that_gains_a_step_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """open-instruct appends every step to one file: each step gets one record, the newest once the next one is
    appended (or the run goes idle), and steps already recorded are not recorded again when the file grows. Only
    the appended lines are parsed."""
    from rollaudit._loaders.arrow import json_lines

    parsed: list[int] = []
    parse = json_lines._lines_or_none

    def counting(data: bytes, *args: object) -> object:
        parsed.append(len(data))
        return parse(data, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(json_lines, "_lines_or_none", counting)
    source = SAMPLES / "open_instruct" / "rollouts"
    run = tmp_path / "rollouts"
    run.mkdir()
    (run / "demo_metadata.jsonl").write_bytes((source / "demo_metadata.jsonl").read_bytes())
    lines = (source / "demo_rollouts_000000.jsonl").read_bytes().splitlines(keepends=True)
    steps = [json.loads(line)["step"] for line in lines]
    target = run / "demo_rollouts_000000.jsonl"
    target.write_bytes(b"".join(line for line, step in zip(lines, steps, strict=True) if step == 1))

    def append_step_2() -> None:
        with open(target, "ab") as handle:
            handle.write(b"".join(line for line, step in zip(lines, steps, strict=True) if step == 2))

    timer = threading.Timer(1.0, append_step_2)
    timer.start()
    try:
        records = list(rollaudit.watch(run, until_idle=2.0, settle=0))
    finally:
        timer.join()
    assert [(record.step, record.replaces) for record in records] == [(1, False), (2, False)]
    step_1 = sum(len(line) for line, step in zip(lines, steps, strict=True) if step == 1)
    assert parsed == [step_1, target.stat().st_size - step_1]
    whole = rollaudit.audit(rollaudit.load(source))
    for record in records:
        assert record.to_dict()["summary"] == whole.to_dict()["per_step"][str(record.step)]


def test_a_step_rewritten_in_place_is_audited_again(tmp_path: Path) -> None:
    """What was read of a file that gains steps is checked still there: a step rewritten in place (the same length)
    is read again, and its new record replaces the first."""
    source = SAMPLES / "open_instruct" / "rollouts"
    run = tmp_path / "rollouts"
    shutil.copytree(source, run)
    target = run / "demo_rollouts_000000.jsonl"
    records = rollaudit.watch(run, until_idle=1.0, settle=0)
    first = next(records)
    assert (first.step, first.replaces) == (1, False)
    data = target.read_bytes()
    target.write_bytes(data.replace(b'"reward": 0.0', b'"reward": 9.0', 1))  # step 1's first zero reward
    rest = list(records)
    assert [(record.step, record.replaces) for record in rest] == [(1, True), (2, False)]
    changed = tmp_path / "changed"
    shutil.copytree(run, changed)
    whole = rollaudit.audit(rollaudit.load(changed)).to_dict()["per_step"]
    assert rest[0].to_dict()["summary"] == whole["1"] != first.to_dict()["summary"]


def _trl_run(root: Path, schemes: list[str]) -> Path:
    """TRL's completions_{step}.parquet, step i + 1 with ``schemes[i]``'s advantages (the plain-Python oracle's):
    a run whose ``scale_rewards`` changed mid-run."""
    from tests.oracle import oracle_advantages

    completions = root / "completions"
    completions.mkdir(parents=True)
    for step, scheme in enumerate(schemes, start=1):
        rewards = [float((step * 7 + place * 3) % 5) for place in range(12)]
        rows = [
            {"step": step, "position": place, "prompt": place // 4, "trajectory": place, "reward": reward}
            for place, reward in enumerate(rewards)
        ]
        advantages = oracle_advantages(rows, rollaudit.get_scheme(scheme))
        table = pa.table(
            {
                "step": [step] * 12,
                "prompt": [f"question {place // 4}" for place in range(12)],
                "completion": ["c"] * 12,
                "accuracy_reward": rewards,
                "advantage": advantages,
            }
        )
        pq.write_table(table, completions / f"completions_{step:05d}.parquet")
    return root


def test_a_step_whose_scheme_changed_says_so(tmp_path: Path) -> None:
    run = _trl_run(tmp_path / "out", ["trl-group(n=4)"] * 3 + ["trl-batch(n=4)"] * 3)
    records = list(rollaudit.watch(run, until_idle=0, settle=0))
    assert [record.step for record in records] == [1, 2, 3, 4, 5, 6]
    changes = {record.step: record.scheme_changed for record in records if record.scheme_changed}
    assert changes == {4: "scheme changed at step 4: was trl-group(n=4), now trl-batch(n=4)"}
    assert records[3].to_dict()["scheme_changed"] == changes[4]
    point = StepPoint.of(records[3].to_dict())
    assert "scheme changed at step 4: was trl-group(n=4), now trl-batch(n=4)" in step_line(point)
    # A watch resumed after step 3 still sees the change, from the records it resumes.
    earlier = [record.to_dict() for record in records[:3]]
    resumed = list(rollaudit.watch(run, until_idle=0, settle=0, recorded=earlier))
    assert [(record.step, record.scheme_changed) for record in resumed][:1] == [(4, changes[4])]


def test_torchtitans_file_appended_as_groups_finish(tmp_path: Path) -> None:
    """torchtitan appends each group as it finishes: a step (the policy-version bound) may gain a group after a later
    step has begun, and is then audited again, its new record replacing the old; the last record of each step is
    the audit of that step in the whole file."""
    source = SAMPLES / "torchtitan_whole" / "outputs" / "rl" / "rollout_samples.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    target = tmp_path / "outputs" / "rl" / source.name
    target.parent.mkdir(parents=True)
    # Cut the file before the first group whose step is below a later step already written: that step will have
    # been audited (only the newest step waits), and the rest of the file changes it.
    placed = sorted(zip(*(rollaudit.load(source).column(name).to_pylist() for name in ("line", "step")), strict=True))
    half = next(
        line
        for index, (line, step) in enumerate(placed)
        if step in {s for _, s in placed[:index]} and step < max(s for _, s in placed[:index])
    )
    target.write_bytes(b"".join(lines[:half]))

    def append_the_rest() -> None:
        with open(target, "ab") as handle:
            handle.write(b"".join(lines[half:]))

    timer = threading.Timer(1.0, append_the_rest)
    timer.start()
    try:
        records = list(rollaudit.watch(tmp_path, until_idle=2.0, settle=0))
    finally:
        timer.join()
    assert all(record.error is None for record in records)
    last = {record.step: record for record in records}
    whole = rollaudit.audit(rollaudit.load(source)).to_dict()["per_step"]
    assert sorted(last) == sorted(int(step) for step in whole)
    for step, record in last.items():
        assert record.to_dict()["summary"] == whole[str(step)] and whole[str(step)]  # the groups are whole: audited
    seen: set[int] = set()
    for record in records:
        assert record.replaces == (record.step in seen)
        seen.add(record.step)
    assert any(record.replaces for record in records)


def test_steps_unchanged_between_two_reads_of_a_file() -> None:
    """The steps whose rows are those of the last read: found in one comparison where they are the first rows,
    by their rows wherever they lie, and none where a step of the same size changed (each is then digested)."""
    from rollaudit._watch.run import _step_runs, _unchanged_steps

    def table(steps: list[int], rewards: list[float]) -> tuple[pa.Table, tuple]:
        """A table and its steps, as the watch keeps them."""
        made = pa.table({"step": steps, "reward": rewards})
        return made, _step_runs(made)

    before = table([1, 1, 2, 2, 3, 3], [0.0, 1.0, 1.0, 0.0, 0.5, 0.5])
    assert _unchanged_steps(None, before) == set()
    assert _unchanged_steps(before, table([1, 1, 2, 2, 3, 3, 4], [0.0, 1.0, 1.0, 0.0, 0.5, 0.5, 1.0])) == {1, 2, 3}
    # A step gaining a row is not unchanged; those after it moved, and are compared where they now lie.
    grown = table([1, 1, 2, 2, 2, 3, 3], [0.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.5])
    assert _unchanged_steps(before, grown) == {1, 3}
    # A step in the middle replaced by another of its size: the steps around it are compared by their rows.
    swapped = table([1, 1, 5, 5, 3, 3], [0.0, 1.0, 1.0, 0.0, 0.5, 0.5])
    assert _unchanged_steps(before, swapped) == {1, 3}
    # A NaN reward: equal rows, compared by their bytes.
    with_nan = table([1, 1, 2, 2], [float("nan"), 1.0, 1.0, 0.0])
    assert _unchanged_steps(with_nan, table([1, 1, 2, 2], [float("nan"), 1.0, 1.0, 0.0])) == {1, 2}
    assert _unchanged_steps(before, table([1, 1, 2, 2, 3, 3], [0.0, 1.0, 1.0, 9.0, 0.5, 0.5])) == set()
