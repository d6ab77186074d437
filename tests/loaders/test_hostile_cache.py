"""The cache of read tables as an attacker or an unlucky user finds it: links and FIFOs planted at its paths, a
directory others can write, an entry that decodes to gigabytes, an entry whose format metadata was changed, and no
home directory to keep it in. Each case runs the command line in a measured child process (see test_hostile).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.loaders.test_hostile import (
    _cached_run,
    _measurement_table,  # noqa: F401  (ROLLAUDIT_HOSTILE_TABLE=FILE)
    check,
    measure,
    run_measured,
    size_of,
)
from tests.loaders.test_unpickle import generate

_PRECIOUS = b"a file the cache must never touch\n"
_CACHE_KEY = b"rollaudit.cache"


def _summary(result: dict) -> dict:
    return json.loads(result["stdout"])["summary"]


def _fresh_summary(dump: Path, tmp_path: Path) -> dict:
    fresh = run_measured("compare", dump, "--json", "--no-cache", cwd=tmp_path)
    assert fresh["code"] == 0, fresh["stderr"]
    return _summary(fresh)


# ---------------------------------------------------------------------------------------------------------------------
# Links, FIFOs and directories others can write.


def _plant_entry_link(tmp_path: Path, entry: Path) -> list[Path]:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(_PRECIOUS)
    entry.unlink()
    entry.symlink_to(victim)
    return [victim]


def _plant_directory_link(tmp_path: Path, entry: Path) -> list[Path]:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / entry.name  # where a write through the linked directory would land
    victim.write_bytes(_PRECIOUS)
    entry.parent.rename(tmp_path / "moved-away")
    entry.parent.symlink_to(elsewhere, target_is_directory=True)
    return [victim]


def _plant_fifo(tmp_path: Path, entry: Path) -> list[Path]:
    entry.unlink()
    os.mkfifo(entry)  # written straight into, a write would wait for a reader forever
    return []


_PLANTED = {
    "a link at an entry's path": _plant_entry_link,
    "a link at an entry's directory": _plant_directory_link,
    "a FIFO at an entry's path": _plant_fifo,
}


@pytest.mark.parametrize("case", sorted(_PLANTED))
def test_the_cache_follows_no_link_it_did_not_create(tmp_path: Path, case: str):
    """Once, a symlink planted at a predictable entry path made the next audit's atomic write replace its target."""
    dump, entry = _cached_run(tmp_path)
    victims = _PLANTED[case](tmp_path, entry)
    planted = os.lstat(entry.parent if "directory" in case else entry)
    result = run_measured("compare", dump, "--json", cwd=tmp_path)
    check(f"cache: {case}", result, size_of(dump), codes=(0,))
    for victim in victims:
        assert victim.read_bytes() == _PRECIOUS, f"{case}: {victim} was replaced"
    after = os.lstat(entry.parent if "directory" in case else entry)
    assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (planted.st_ino, stat.S_IFMT(planted.st_mode))
    assert _summary(result) == _fresh_summary(dump, tmp_path)


def test_a_cache_directory_others_can_write_is_refused_unless_sticky(tmp_path: Path):
    """Anyone who can write a cache directory can plant entries and links in it: one warning, and no cache."""
    dump = generate.save_rollout_dump(tmp_path / "0.pt", 0, generate.spec_4_3_4_step())
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)  # group-writable, not sticky
    result = run_measured("compare", dump, "--json", "--cache", shared, cwd=tmp_path)
    check("cache: a group-writable, not sticky directory", result, size_of(dump), codes=(0,))
    warned = [line for line in result["stderr"].splitlines() if "no cache" in line]
    assert len(warned) == 1 and "writable by other users" in warned[0], result["stderr"]
    assert not any(shared.iterdir()), "entries were written where others can replace them"
    assert _summary(result) == _fresh_summary(dump, tmp_path)

    shared.chmod(0o1777)  # sticky (as /tmp): others cannot replace what is not theirs
    result = run_measured("compare", dump, "--json", "--cache", shared, cwd=tmp_path)
    check("cache: a sticky directory everyone can write", result, size_of(dump), codes=(0,))
    assert "no cache" not in result["stderr"]
    entries = sorted(shared.rglob("*.parquet"))
    assert len(entries) == 1, entries
    entry = entries[0]
    if os.geteuid() == 0:  # only root can give an entry to another user: such an entry is a miss, and rewritten
        os.chown(entry, 54321, 54321)
        result = run_measured("compare", dump, "--json", "--cache", shared, cwd=tmp_path)
        check("cache: another user's entry in a sticky directory", result, size_of(dump), codes=(0,))
        assert entry.stat().st_uid == os.geteuid()  # read as a miss, then replaced by this user's own
        assert _summary(result) == _fresh_summary(dump, tmp_path)


# ---------------------------------------------------------------------------------------------------------------------
# What an entry holds.


def _parquet_bomb_entry(entry: Path) -> None:
    """1M rows of one 4 KB prompt as plain text (a dictionary page and run-length indices) beside 12-bit rewards,
    under the entry's own valid record: 3.1 MB, 4.3 GB decoded."""
    record = pq.read_schema(entry).metadata[_CACHE_KEY]
    schema = pa.schema([("prompt", pa.string()), ("reward", pa.float64())], metadata={_CACHE_KEY: record})
    rows = 1 << 14
    prompts = pa.array(["x" * 4096] * rows)
    random = np.random.default_rng(0)
    with pq.ParquetWriter(entry, schema, compression="zstd") as writer:
        for _ in range(64):
            rewards = random.integers(0, 1 << 12, rows).astype(np.float64)
            writer.write_table(pa.table({"prompt": prompts, "reward": rewards}, schema=schema))


def test_a_parquet_bomb_planted_as_a_cache_entry_is_read_under_the_dumps_bound(tmp_path: Path):
    """Once, an entry was read in the main process, outside the memory-capped reader: 1.8 MB -> 4 GB."""
    dump, entry = _cached_run(tmp_path)
    _parquet_bomb_entry(entry)
    planted = size_of(entry)
    result = run_measured("compare", dump, "--json", cwd=tmp_path)
    check("cache: a Parquet bomb as an entry", result, planted, codes=(0,))
    assert _summary(result) == _fresh_summary(dump, tmp_path)  # a miss: the dump read again


_METADATA_CHANGES = {
    "slime metadata without its step": lambda metadata: metadata.pop(b"rollaudit.slime.step"),
    "slime metadata with a step that is no number": lambda metadata: metadata.update(
        {b"rollaudit.slime.step": b"seven"}
    ),
    "slime metadata of another kind": lambda metadata: metadata.update({b"rollaudit.slime.kind": b"train"}),
}


def _record(entry: Path) -> tuple[pa.Table, dict, dict]:
    """An entry's table, its Parquet schema metadata and the cache's record in it: a window's files column by column
    (``files``), each one's own schema metadata an index into the distinct ones (``metadata``, as hex pairs)."""
    table = pq.read_table(entry)
    metadata = dict(table.schema.metadata)
    return table, metadata, json.loads(metadata[_CACHE_KEY])


def _own_metadata(pairs: list) -> dict[bytes, bytes]:
    return {bytes.fromhex(key): bytes.fromhex(value) for key, value in pairs}


def _as_pairs(metadata: dict[bytes, bytes]) -> list:
    return sorted([key.hex(), value.hex()] for key, value in metadata.items())


@pytest.mark.parametrize("case", sorted(_METADATA_CHANGES))
def test_an_entry_whose_format_metadata_changed_is_a_miss(tmp_path: Path, case: str):
    """Once, an entry whose slime metadata lacked ``rollaudit.slime.step`` ended in a KeyError traceback. A file's
    metadata is kept in the cache's record: changed there, the record's ``shape`` left as it was, it is a miss."""
    dump, entry = _cached_run(tmp_path)
    table, metadata, record = _record(entry)
    (own,) = record["metadata"]
    own = _own_metadata(own)
    _METADATA_CHANGES[case](own)
    record["metadata"] = [_as_pairs(own)]
    metadata[_CACHE_KEY] = json.dumps(record).encode()
    pq.write_table(table.replace_schema_metadata(metadata), entry)
    planted = size_of(entry)
    result = run_measured("compare", dump, "--json", cwd=tmp_path)
    check(f"cache entry with {case}", result, planted, codes=(0,))
    assert _summary(result) == _fresh_summary(dump, tmp_path)


_SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
_FORGERIES = {
    "removed": lambda metadata, key: metadata.pop(key),
    "garbled": lambda metadata, key: metadata.update({key: b"\xff{"}),
}


@pytest.mark.parametrize("forgery", sorted(_FORGERIES))
@pytest.mark.parametrize("sample", ["fanout", "trl", "verl", "miles", "generic/rollouts.csv"])
def test_an_entry_forged_with_a_matching_record_is_a_miss(tmp_path: Path, sample: str, forgery: str):
    """Once, an entry whose format metadata was removed, the cache's record rewritten to match it, ended in a
    KeyError traceback for TRL, verl, miles and generic tables (slime's named the cache in an error)."""
    import rollaudit
    from rollaudit._loaders.run.cache import _shape

    dump, cache = _SAMPLES / sample, tmp_path / "cache"
    fresh = rollaudit.load(dump, cache=False)
    rollaudit.load(dump, cache=cache)
    forged = 0
    for entry in sorted(path for path in cache.rglob("*.parquet") if "-" not in path.stem):  # a window's part 0
        table, metadata, record = _record(entry)
        parts = [entry.with_name(f"{entry.stem}-{number}.parquet") for number in range(1, record["parts"])]
        distinct = []
        for pairs in record["metadata"]:
            own = _own_metadata(pairs)
            for key in [key for key in own if key.startswith(b"rollaudit.")]:
                _FORGERIES[forgery](own, key)
                forged += 1
            distinct.append(_as_pairs(own))
        record["metadata"] = distinct
        record["shape"] = _shape([table, *(pq.read_table(part) for part in parts)], distinct)
        metadata[_CACHE_KEY] = json.dumps(record).encode()
        pq.write_table(table.replace_schema_metadata(metadata), entry)
    assert forged, "the sample's read tables carry no metadata of their own: nothing was forged"
    with warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")
        again = rollaudit.load(dump, cache=cache)
    assert again.to_pandas().equals(fresh.to_pandas()) and again.schema == fresh.schema  # NaN rewards: not .equals
    messages = [str(warning.message) for warning in raised]
    assert len(messages) == len(set(messages)), messages  # each file's warnings once, not again as it is reread


# ---------------------------------------------------------------------------------------------------------------------
# No home directory.

# Python finds the home directory in HOME, else in the passwd entry of this process's user id: a container run with
# an arbitrary --user has none, which this reproduces for any user running the tests.
_WITHOUT_PASSWD_ENTRY = textwrap.dedent(
    """
    import pwd, runpy, sys
    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    pwd.getpwuid = no_entry
    sys.argv = ["rollaudit", *sys.argv[1:]]
    runpy.run_module("rollaudit", run_name="__main__", alter_sys=True)
    """
)


@pytest.mark.parametrize("home", [None, "", "relative/home"], ids=["HOME unset", "HOME empty", "HOME relative"])
def test_no_home_directory_means_one_warning_and_no_cache(tmp_path: Path, home: str | None):
    """Once, with HOME unset and no passwd entry (``env -i``, ``docker run --user 12345``) every command with the
    default cache ended in ``RuntimeError: Could not determine home directory``."""
    dump = generate.save_rollout_dump(tmp_path / "0.pt", 0, generate.spec_4_3_4_step())
    work = tmp_path / "work"
    work.mkdir()
    environment = {} if home is None else {"HOME": home}  # env -i: no XDG_CACHE_HOME either
    command = [sys.executable, "-c", _WITHOUT_PASSWD_ENTRY, "compare", str(dump), "--json"]
    result = measure(command, work, environment)
    check(f"no home directory ({'HOME unset' if home is None else f'HOME={home!r}'})", result, size_of(dump),
          codes=(0,))  # fmt: skip
    warned = [line for line in result["stderr"].splitlines() if "no cache" in line]
    assert len(warned) == 1 and "home directory" in warned[0], result["stderr"]
    assert list(work.iterdir()) == [], "a cache was made where the command ran"
    assert _summary(result) == _fresh_summary(dump, tmp_path)


def test_a_cache_under_a_home_that_does_not_exist_is_one_usage_line(tmp_path: Path):
    """``--cache ~/x`` with no home directory ended in ``RuntimeError: Could not determine home directory``."""
    dump = generate.save_rollout_dump(tmp_path / "0.pt", 0, generate.spec_4_3_4_step())
    work = tmp_path / "work"
    work.mkdir()
    result = measure([sys.executable, "-c", _WITHOUT_PASSWD_ENTRY, "compare", str(dump), "--cache", "~/x"], work, {})
    check("--cache ~/x with no home directory", result, size_of(dump), codes=(2,), said="this user has none")
    assert list(work.iterdir()) == []
