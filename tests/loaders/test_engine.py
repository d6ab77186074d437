"""Whole runs: flat memory over many dumps, worker processes, the cache, and the Ray engine."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import rollaudit
from rollaudit._errors import InputError, RollauditWarning, UsageError
from rollaudit._loaders.registry import FORMATS
from rollaudit._loaders.run import cache as _cache
from rollaudit._loaders.run import engine as _engine
from rollaudit._loaders.run.item import WorkItem
from tests.benchmarks.bench_run import write_run

ROOT = Path(__file__).resolve().parents[2]
DUMPS = ROOT / "sample_dumps"
RUN_FILES = 50
MAX_MEMORY_RATIO = 1.5


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """50 slime rollout dumps of 40 samples x 2000 tokens (~1.3 MB each, ~6 MB of Python objects once unpickled)."""
    return write_run(tmp_path_factory.mktemp("run") / "rollout_data", RUN_FILES, samples=40, tokens=2000)[0].parent


@pytest.fixture
def small_run(tmp_path: Path) -> Path:
    """A run of 6 small dumps this test may change."""
    return write_run(tmp_path / "run", 6, samples=16, tokens=50)[0].parent


class ReduceSpy:
    """Counts the files each format's reducer reads in this process (jobs=1 reads here)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[Path] = []
        for name, entry in list(FORMATS.items()):
            monkeypatch.setitem(FORMATS, name, dataclasses.replace(entry, read=self._wrap(entry.read)))

    def _wrap(self, reduce):
        def spy(path, options):
            self.paths.append(Path(path))
            return reduce(path, options)

        return spy


_OPENED: list[str] = []
_WATCHED: list[str] = []


def _audit_open(event: str, args: tuple) -> None:
    if event == "open" and _WATCHED and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if any(path.startswith(prefix) for prefix in _WATCHED):
            _OPENED.append(path)


sys.addaudithook(_audit_open)  # audit hooks cannot be removed: this one only records while _WATCHED is set


def opened_under(directory: Path, call):
    """``call()``'s result and the files under ``directory`` that Python opened meanwhile (any code, any module)."""
    _OPENED.clear()
    _WATCHED[:] = [str(directory.absolute()), str(directory)]
    try:
        result = call()
    finally:
        _WATCHED.clear()
    return result, list(_OPENED)


def quiet_load(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RollauditWarning)
        return rollaudit.load(*args, **kwargs)


def same_table(first, second) -> bool:
    """Equal schemas and values, NaN equal to NaN (Arrow's ``equals`` says NaN != NaN)."""
    return first.schema.equals(second.schema, check_metadata=True) and first.to_pandas().equals(second.to_pandas())


def same_metrics(first, second) -> None:
    report, other = rollaudit.audit(first), rollaudit.audit(second)
    assert report.summary.equals(other.summary)
    assert report.per_step.equals(other.per_step)


# ---------------------------------------------------------------------------------------------------------------------
# Memory.


_PEAK_RSS_CHILD = textwrap.dedent(
    """
    import resource, sys
    import rollaudit

    report = rollaudit.audit(rollaudit.load(sys.argv[1], jobs=1))
    assert report.info["steps"] == int(sys.argv[2]), report.info
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(peak * (1 if sys.platform == "darwin" else 1024))
    """
)


def _peak_rss(path: Path, steps: int) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS_CHILD, str(path), str(steps)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(sys.platform == "win32", reason="resource.getrusage is POSIX")
def test_auditing_50_dumps_takes_no_more_peak_memory_than_1_5x_auditing_one(run_dir: Path):
    one = _peak_rss(run_dir / "0.pt", 1)
    fifty = _peak_rss(run_dir, RUN_FILES)
    # Holding every file's tokens would add ~6 MB of Python objects a file: ~300 MB over one file's peak.
    assert fifty <= MAX_MEMORY_RATIO * one, f"peak RSS {fifty / 1e6:.0f} MB for 50 dumps vs {one / 1e6:.0f} MB for one"


# ---------------------------------------------------------------------------------------------------------------------
# The cache.


def test_a_second_load_with_the_cache_reads_no_dump_file(run_dir: Path, tmp_path: Path, monkeypatch):
    cache = tmp_path / "cache"
    spy = ReduceSpy(monkeypatch)
    cold, opened = opened_under(run_dir, lambda: rollaudit.load(run_dir, cache=cache, jobs=1))
    assert len(spy.paths) == RUN_FILES and len(set(opened)) == RUN_FILES
    spy.paths.clear()
    seen: list[tuple[str, int]] = []
    warm, opened = opened_under(
        run_dir, lambda: rollaudit.load(run_dir, cache=cache, jobs=1, on_file=lambda *args: seen.append(args))
    )
    assert opened == [] and spy.paths == []
    assert [Path(path).name for path, _ in seen] == [f"{step}.pt" for step in range(RUN_FILES)]
    assert [size for _, size in seen] == [(run_dir / f"{step}.pt").stat().st_size for step in range(RUN_FILES)]
    assert warm.equals(cold)
    same_metrics(warm, cold)


def test_a_modified_dump_invalidates_its_cache_entry(small_run: Path, tmp_path: Path, monkeypatch):
    cache = tmp_path / "cache"
    before = rollaudit.load(small_run, cache=cache)
    changed = small_run / "3.pt"
    write_run(tmp_path / "other", 4, samples=16, tokens=50, seed=1)[3].replace(changed)  # same step, other rewards
    stat = changed.stat()
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # a coarse clock cannot hide it
    spy = ReduceSpy(monkeypatch)
    after = rollaudit.load(small_run, cache=cache)
    assert spy.paths == [changed]
    fresh = rollaudit.load(small_run)
    assert after.equals(fresh) and not after.equals(before)
    spy.paths.clear()
    assert rollaudit.load(small_run, cache=cache).equals(fresh) and spy.paths == []


def test_a_damaged_cache_entry_is_a_miss_and_is_rewritten(small_run: Path, tmp_path: Path, monkeypatch):
    """Windows of 2 files: each of the 3 windows is one entry; the two damaged ones are read again, and rewritten."""
    monkeypatch.setattr(_cache, "WINDOW_FILES", 2)
    cache = tmp_path / "cache"
    expected = rollaudit.load(small_run, cache=cache)
    entries = sorted(cache.rglob("*.parquet"))
    assert len(entries) == 3
    entries[0].write_bytes(b"PAR1 not a parquet file")
    entries[1].write_bytes(entries[1].read_bytes()[:100])
    spy = ReduceSpy(monkeypatch)
    assert rollaudit.load(small_run, cache=cache).equals(expected)
    assert len(spy.paths) == 4  # the files of the two damaged windows; the third window's served
    spy.paths.clear()
    assert rollaudit.load(small_run, cache=cache).equals(expected) and spy.paths == []
    assert sorted(cache.rglob("*.parquet")) == entries  # rewritten where they were


def _reads(paths: list[Path], cache: Path | bool) -> list[_engine.Read]:
    from rollaudit._loaders.run.load import _detect_one_format

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RollauditWarning)
        return _engine.run_items(paths, rollaudit.LoadOptions(cache=cache), None, _detect_one_format())


def _same_reads(first: list[_engine.Read], second: list[_engine.Read]) -> bool:
    """The same files, read by the same formats into the same tables: columns, types, values, schema metadata."""
    return [(read.format, read.path) for read in first] == [(read.format, read.path) for read in second] and all(
        one.table.equals(other.table, check_metadata=True) for one, other in zip(first, second, strict=True)
    )


def test_a_run_that_grows_reads_only_its_new_files(small_run: Path, tmp_path: Path, monkeypatch):
    """Windows of 4 files (``rollaudit watch`` re-audits a growing run): the full windows' entries are served as
    they are; the last window's is rewritten in place with its new files, which alone are read."""
    monkeypatch.setattr(_cache, "WINDOW_FILES", 4)
    cache = tmp_path / "cache"
    rollaudit.load(small_run, cache=cache)  # steps 0-3 and 4-5
    before = {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in cache.rglob("*.parquet")}
    assert len(before) == 2
    more = write_run(tmp_path / "more", 9, samples=16, tokens=50, seed=2)
    more[6].replace(small_run / "6.pt")
    spy = ReduceSpy(monkeypatch)
    cached = rollaudit.load(small_run, cache=cache)
    assert spy.paths == [small_run / "6.pt"]
    assert cached.equals(rollaudit.load(small_run))
    after = {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in cache.rglob("*.parquet")}
    assert set(after) == set(before)  # the last window's entry replaced, not joined by another
    assert len([path for path in before if after[path] == before[path]]) == 1  # the first window's, untouched

    for step in (7, 8):  # past the second window's end: a third window
        more[step].replace(small_run / f"{step}.pt")
    spy = ReduceSpy(monkeypatch)
    grown = _reads(sorted(small_run.iterdir()), cache)
    assert spy.paths == [small_run / "7.pt", small_run / "8.pt"]
    assert len(list(cache.rglob("*.parquet"))) == 3
    spy.paths.clear()
    assert _same_reads(_reads(sorted(small_run.iterdir()), cache), grown) and spy.paths == []
    assert _same_reads(grown, _reads(sorted(small_run.iterdir()), False))

    (small_run / "6.pt").unlink()  # a file gone: 8.pt moves into the second window, whose entry lacks it
    spy.paths.clear()
    cached = rollaudit.load(small_run, cache=cache)
    assert spy.paths == [small_run / "8.pt"] and cached.equals(rollaudit.load(small_run))
    (small_run / "8.pt").unlink()  # the last window's entry rewritten without it: nothing read
    spy.paths.clear()
    cached = rollaudit.load(small_run, cache=cache)
    assert spy.paths == [] and cached.equals(rollaudit.load(small_run))
    spy.paths.clear()
    assert rollaudit.load(small_run, cache=cache).equals(cached) and spy.paths == []


def test_a_dump_rewritten_with_its_mtime_put_back_is_read_again(tmp_path: Path, monkeypatch):
    """Freshness is by stat, not by the dump's bytes: a same-size rewrite with its mtime restored still moves the
    ctime. The other files of its window are served from the entry."""
    from tests.loaders.test_unpickle import generate

    run = tmp_path / "run"
    run.mkdir()
    for step in range(3):
        generate.save_rollout_dump(run / f"{step}.pt", step, generate.spec_4_3_4_step())
    cache = tmp_path / "cache"
    before = rollaudit.load(run, cache=cache)
    dump = run / "1.pt"
    status = dump.stat()
    samples = generate.spec_4_3_4_step()
    for sample in samples:
        sample["reward"] = 1.0 - sample["reward"]  # same types, same pickle size
    generate.save_rollout_dump(dump, 1, samples)
    os.utime(dump, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert (dump.stat().st_size, dump.stat().st_mtime_ns) == (status.st_size, status.st_mtime_ns)
    spy = ReduceSpy(monkeypatch)
    after = rollaudit.load(run, cache=cache)
    assert spy.paths == [dump]
    assert after.equals(rollaudit.load(run)) and not after.equals(before)
    spy.paths.clear()
    assert rollaudit.load(run, cache=cache).equals(after) and spy.paths == []


def test_a_window_of_files_of_two_schemas_gives_each_file_its_own_table(tmp_path: Path, monkeypatch):
    """A slime rollout dump and a train dump (other columns, other metadata) in one window: one part each, and each
    file's read table comes back as read. A part of another write beside the entry is a miss."""
    run = tmp_path / "dump_details"
    shutil.copytree(DUMPS / "dump_details", run)
    files = sorted(run.rglob("*.pt"))
    cache = tmp_path / "cache"
    fresh = _reads(files, False)
    assert fresh[0].table.schema.names != fresh[1].table.schema.names
    assert _same_reads(_reads(files, cache), fresh)
    (entry,) = [path for path in cache.rglob("*.parquet") if "-" not in path.stem]
    part = entry.with_name(f"{entry.stem}-1.parquet")
    assert sorted(cache.rglob("*.parquet")) == sorted([entry, part])
    spy = ReduceSpy(monkeypatch)
    warm, opened = opened_under(run, lambda: _reads(files, cache))
    assert _same_reads(warm, fresh) and spy.paths == [] and opened == []
    assert all(read.cached for read in warm)

    earlier = part.read_bytes()
    os.utime(files[0], ns=(0, 0))  # its window written again, by another write
    assert _same_reads(_reads(files, cache), fresh) and spy.paths == [files[0]]
    part.write_bytes(earlier)  # the part of the earlier write, beside the entry of the later one
    spy.paths.clear()
    assert _same_reads(_reads(files, cache), fresh) and sorted(spy.paths) == files
    spy.paths.clear()
    assert _same_reads(_reads(files, cache), fresh) and spy.paths == []


def test_a_window_is_kept_in_parts_of_at_most_part_rows(small_run: Path, tmp_path: Path, monkeypatch):
    """Parts of two 16-row files: three Parquet files for the window, read back as one; written again with room
    for all, the window is one part, and the parts the earlier write left are removed."""
    monkeypatch.setattr(_cache, "PART_ROWS", 40)
    cache = tmp_path / "cache"
    files = sorted(small_run.iterdir())
    fresh = _reads(files, False)
    assert _same_reads(_reads(files, cache), fresh)
    assert len(list(cache.rglob("*.parquet"))) == 3
    spy = ReduceSpy(monkeypatch)
    assert _same_reads(_reads(files, cache), fresh) and spy.paths == []
    monkeypatch.setattr(_cache, "PART_ROWS", 1 << 20)
    os.utime(files[0], ns=(0, 0))  # its window written again
    assert _same_reads(_reads(files, cache), fresh) and spy.paths == [files[0]]
    assert len(list(cache.rglob("*.parquet"))) == 1
    spy.paths.clear()
    assert _same_reads(_reads(files, cache), fresh) and spy.paths == []


def test_a_full_disk_warns_once_and_the_load_goes_on(small_run: Path, tmp_path: Path, monkeypatch):
    import errno

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_cache, "WINDOW_FILES", 2)
    monkeypatch.setattr(_cache, "_write_temporary", full)
    cache = tmp_path / "cache"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert rollaudit.load(small_run, cache=cache).equals(rollaudit.load(small_run))
    said = [str(warning.message) for warning in caught if "cache entries not written" in str(warning.message)]
    assert len(said) == 1 and "No space left on device" in said[0], said  # three windows, one warning
    assert [path for path in cache.rglob("*") if path.is_file()] == []


def test_the_cache_is_keyed_by_the_options_that_change_the_reduction(tmp_path: Path, monkeypatch):
    cache = tmp_path / "cache"
    spy = ReduceSpy(monkeypatch)
    dump = DUMPS / "reward_key.pt"
    score = rollaudit.load(dump, reward_key="score", cache=cache)
    accuracy = rollaudit.load(dump, reward_key="acc", cache=cache)
    assert len(spy.paths) == 2 and not score.equals(accuracy)
    assert rollaudit.load(dump, reward_key="acc", cache=cache).equals(accuracy) and len(spy.paths) == 2


SAMPLE_LOADS = [
    ("fanout/rollout_data/3.pt", {}),
    ("uniform.pt", {}),
    ("reward_key.pt", {"reward_key": "score"}),
    ("dump_details", {}),
    ("verl/rollout_data", {}),
    ("trl", {}),
    ("agl/rollouts.parquet", {}),
    ("generic", {}),
    ("nemo/train_data_step3.jsonl", {"prompt_col": "prompt_id"}),
    ("verl_v1", {}),
    ("areal/rollout", {}),
    ("rllm/episodes", {}),
    ("nemo_rl/train_data_step3.jsonl", {}),
    ("roll", {}),
]


@pytest.mark.parametrize(("name", "options"), SAMPLE_LOADS, ids=[name for name, _ in SAMPLE_LOADS])
def test_every_format_reads_the_same_from_its_cache(name: str, options: dict, tmp_path: Path):
    fresh = quiet_load(DUMPS / name, **options)
    cold = quiet_load(DUMPS / name, cache=tmp_path, **options)
    warm, opened = opened_under(DUMPS, lambda: quiet_load(DUMPS / name, cache=tmp_path, **options))
    assert same_table(cold, fresh) and same_table(warm, fresh)
    # Detection too is skipped: the entry knows its format. (rllm's batch_summary.json, which orders the episodes,
    # is no dump.)
    assert [path for path in opened if not path.endswith("batch_summary.json")] == []


def test_a_cached_table_s_unknown_columns_hold_no_bytes_of_their_rows(tmp_path: Path):
    """A column the dump does not carry is all null; read from an entry, each would hold its rows' bytes (350 MB on
    a 12M-row table). They come back as a fresh load makes them: one block of zeros for the validity and the values,
    never written, so never mapped."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 100_000
    dump = tmp_path / "rollouts.parquet"
    table = pa.table({"step": [0] * rows, "prompt": [i // 4 for i in range(rows)], "reward": [0.5] * rows})
    pq.write_table(table, dump)
    fresh = quiet_load(dump)
    quiet_load(dump, cache=tmp_path / "cache")
    warm = quiet_load(dump, cache=tmp_path / "cache")
    assert same_table(warm, fresh)
    unknown = [name for name in warm.column_names if warm.column(name).null_count == rows]
    assert {"trajectory", "recorded_advantage"} <= set(unknown)
    for name in unknown:
        validity, values = warm.column(name).chunk(0).buffers()[:2]
        assert validity.address == values.address, name


def test_a_cached_load_raises_the_warnings_a_fresh_one_does(small_run: Path, tmp_path: Path, monkeypatch):
    generate = pytest.importorskip("tests.benchmarks.bench_run")._generator()
    rows = [generate.rollout_sample(generate.random.Random(0), group_index=0, index=i, reward=1.0) for i in range(4)]
    rows[2]["reward"] = None
    generate.save_rollout_dump(small_run / "9.pt", 9, rows)
    monkeypatch.chdir(small_run.parent)  # a relative path: messages name the file as given
    relative = Path(small_run.name)
    with pytest.warns(RollauditWarning) as fresh:
        rollaudit.load(relative, cache=tmp_path / "cache")
    with pytest.warns(RollauditWarning) as cached:
        rollaudit.load(relative, cache=tmp_path / "cache")
    messages = [str(warning.message) for warning in fresh]
    assert messages == [str(warning.message) for warning in cached]
    assert any(message.startswith(f"{relative / '9.pt'}: 1 sample has a NaN") for message in messages), messages


def test_load_keeps_its_cache_off_by_default_and_says_where_true_puts_it(small_run, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    rollaudit.load(small_run)
    assert not (tmp_path / "xdg").exists()
    rollaudit.load(small_run, cache=True)
    assert _cache.default_cache_dir() == tmp_path / "xdg" / "rollaudit"
    assert len(list((tmp_path / "xdg" / "rollaudit").rglob("*.parquet"))) == 1  # one window of 6 files


def test_a_default_cache_that_cannot_be_made_is_skipped_but_a_named_one_is_an_error(small_run, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with pytest.warns(RollauditWarning, match=r"no cache: .*a_file/rollaudit: cannot create the cache directory"):
        assert rollaudit.load(small_run, cache=True).num_rows == 6 * 16
    with pytest.raises(UsageError, match=r"a_file/cache: cannot create the cache directory"):
        rollaudit.load(small_run, cache=blocker / "cache")


# ---------------------------------------------------------------------------------------------------------------------
# Worker processes.


def test_worker_processes_give_the_table_one_process_gives(small_run: Path, tmp_path: Path):
    (tmp_path / "mixed").mkdir()
    steps_1_to_5 = [path for path in small_run.iterdir() if path.name != "0.pt"]  # dump_details holds step 0
    for path in [*steps_1_to_5, *(DUMPS / "dump_details").rglob("*.pt")]:
        target = tmp_path / "mixed" / path.parent.name / path.name
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(path.read_bytes())
    files = sorted((tmp_path / "mixed").rglob("*.pt"))  # rollout dumps, a train dump paired with its step's rollout
    seen: list[str] = []
    parallel = rollaudit.load(files, jobs=2, on_file=lambda path, size: seen.append(path))
    alone = rollaudit.load(files, jobs=1)
    assert parallel.equals(alone)
    assert sorted(seen) == sorted(str(path) for path in files)
    assert parallel.column("recorded_advantage").null_count < parallel.num_rows


def test_an_input_error_in_a_worker_reaches_the_caller_whole(small_run: Path, tmp_path: Path):
    broken = small_run / "4.pt"
    broken.write_bytes(b"PK\x03\x04 a zip that ends here")
    with pytest.raises(InputError) as caught:
        rollaudit.load(small_run, jobs=2)
    assert caught.value.file == str(broken)
    assert str(caught.value).startswith(f"{broken}: ") and "\n" not in str(caught.value)


def test_when_workers_die_a_default_jobs_load_reads_here_and_an_explicit_one_says_why(small_run, monkeypatch):
    def die(*args):
        raise _engine.WorkersDied

    monkeypatch.setattr(_engine, "_run_pool", die)
    monkeypatch.setattr(_engine, "SMALL_RUN_BYTES", 0)  # the default picks workers for this small run
    with pytest.warns(RollauditWarning, match=r"a worker process died: .*; reading the rest in this process"):
        assert rollaudit.load(small_run).equals(rollaudit.load(small_run, jobs=1))
    with pytest.raises(UsageError, match=r"a worker process died: .* \(expected --jobs 1 to read"):
        rollaudit.load(small_run, jobs=2)


def test_run_options_are_checked_before_any_file_is_read(small_run: Path):
    for keywords, text in [
        ({"jobs": 0}, "jobs is 0"),
        ({"jobs": 1.5}, "jobs is 1.5"),
        ({"engine": "spark"}, "engine is 'spark'"),
        ({"ray_address": "ray://head:10001"}, "ray_address needs engine='ray'"),
        ({"cache": 3}, "cache is 3"),
    ]:
        with pytest.raises(UsageError, match=text):
            rollaudit.load(small_run / "missing.pt", **keywords)


def _items(sizes: list[int]) -> list[tuple[int, WorkItem]]:
    return [
        (index, WorkItem(Path(f"{index}.jsonl"), Path(f"/{index}.jsonl"), size, 0)) for index, size in enumerate(sizes)
    ]


@pytest.mark.parametrize(
    ("sizes", "jobs"),
    [([460_000] * 400, 2), ([460_000] * 2000, 2), ([100] * 7, 2), ([5 << 20, 1, 1, 9 << 20, 1] * 30, 3), ([], 2)],
)
def test_worker_tasks_are_runs_of_consecutive_files_sized_for_their_workers(sizes: list[int], jobs: int):
    work = _items(sizes)
    tasks = _engine.tasks_of(work, jobs)
    assert [pair for task in tasks for pair in task] == work  # every file once, in order
    share = max(1, len(work) // (jobs * _engine.TASKS_PER_WORKER))
    for task in tasks:
        assert task and len(task) <= share
        assert sum(item.size for _, item in task[1:]) <= _engine.TASK_BYTES
    if len(work) >= jobs * _engine.TASKS_PER_WORKER:
        assert len(tasks) >= jobs * _engine.TASKS_PER_WORKER  # the last tasks end close together
    if sizes == [460_000] * 400:
        assert len(tasks) < len(work) / 10  # not a round trip to a worker per file


def test_a_worker_task_stops_at_its_first_file_that_fails(small_run: Path):
    broken = small_run / "2.pt"
    broken.write_bytes(b"not a dump")
    files = [("slime", small_run / f"{step}.pt") for step in (1, 2, 3)]
    outcomes = _engine.read_outcomes(files, rollaudit.LoadOptions())
    assert [outcome.error is None for outcome in outcomes] == [True, False]


def test_work_given_for_meanwhile_runs_once_while_workers_read_and_never_for_a_read_here(small_run: Path):
    calls: list[int] = []
    with _engine.meanwhile(lambda: calls.append(1)):
        parallel = rollaudit.load(small_run, jobs=2)
        assert calls == [1]
        assert rollaudit.load(small_run, jobs=1).equals(parallel)
    assert calls == [1]
    rollaudit.load(small_run, jobs=2)
    assert calls == [1]  # only within


def test_work_given_for_meanwhile_runs_once_while_the_cache_reader_starts(small_run: Path, tmp_path: Path):
    from rollaudit._loaders.arrow import capped

    cache = tmp_path / "cache"
    calls: list[bool] = []

    def own_work() -> None:  # the child that checks entries is starting, where reads use one
        calls.append(capped._current is not None and capped._current.alive)

    with _engine.meanwhile(own_work):
        cold = rollaudit.load(small_run, cache=cache, jobs=1)
        assert calls == []  # no entry yet: read here, nothing runs beside it
        capped._stop_worker()
        capped._current = None
        (small_run / "3.pt").touch()  # one miss, read by workers beside the hits
        os.utime(small_run / "3.pt", ns=(0, 10**18))
        warm = rollaudit.load(small_run, cache=cache, jobs=2)
    assert calls == [capped.can_cap()]  # once, not again for the workers
    assert warm.equals(cold)


def test_pool_workers_read_without_importing_pandas():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=_engine._start_worker) as pool:
        files = [
            ("verl", DUMPS / "verl_v1" / "rollout_data" / "3.jsonl"),
            ("slime", DUMPS / "fanout" / "rollout_data" / "3.pt"),
        ]
        outcomes = pool.submit(_engine.read_outcomes, files, rollaudit.LoadOptions()).result()
        assert [outcome.table.num_rows > 0 for outcome in outcomes] == [True, True]
        assert pool.submit(eval, "'pandas' in __import__('sys').modules").result() is False


def test_default_jobs_stay_in_process_for_one_file_or_a_small_run():
    assert _engine.default_jobs(1, 10 << 30) == 1
    assert _engine.default_jobs(100, 1 << 20) == 1
    assert _engine.default_jobs(100, 10 << 30) == min(_engine.available_cpus(), 100)


# ---------------------------------------------------------------------------------------------------------------------
# Ray.


def test_the_ray_engine_without_the_extra_says_how_to_install_it(small_run: Path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as it does without the extra
    with pytest.raises(UsageError) as caught:
        rollaudit.load(small_run, engine="ray")
    assert str(caught.value) == "--engine ray needs the ray extra: pip install 'rollaudit[ray]'"


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    # A Ray of our own, never a cluster another process runs on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_the_ray_engine_gives_the_metrics_the_local_engine_gives(local_ray, run_dir: Path, tmp_path: Path):
    steps = [run_dir / f"{step}.pt" for step in range(1, 11)]  # dump_details holds step 0
    files = [*steps, *sorted((DUMPS / "dump_details").rglob("*.pt"))]
    local = rollaudit.load(files)
    seen: list[str] = []
    distributed = rollaudit.load(files, engine="ray", on_file=lambda path, size: seen.append(path))
    assert distributed.equals(local)
    same_metrics(distributed, local)
    assert sorted(seen) == sorted(str(path) for path in files)
    cache = tmp_path / "cache"
    assert rollaudit.load(files, engine="ray", jobs=2, cache=cache).equals(local)
    assert rollaudit.load(files, engine="ray", cache=cache).equals(local)


def test_an_input_error_in_a_ray_task_reaches_the_caller_whole(local_ray, small_run: Path):
    broken = small_run / "2.pt"
    broken.write_bytes(b"not a dump")
    with pytest.raises(InputError) as caught:
        rollaudit.load(small_run, engine="ray")
    assert caught.value.file == str(broken) and "\n" not in str(caught.value)


def test_load_warnings_point_at_the_callers_line():
    """Once, they pointed at a wrapper inside rollaudit (``return function(*args, **keywords)``)."""
    dump = Path(__file__).resolve().parents[2] / "sample_dumps" / "trl"
    with warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")
        rollaudit.load(dump, cache=False)
    assert raised and all(warning.filename == __file__ for warning in raised), [
        (warning.filename, warning.lineno) for warning in raised
    ]
