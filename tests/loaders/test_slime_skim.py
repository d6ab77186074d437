"""The skimming slime reader: per-token lists are never built, and nothing else changes.

Three checks: the skimmed unpickle of random dicts (every pickle protocol, memo sharing, batch boundaries, frames)
equals a model (the full unpickle with exactly the cuttable lists replaced); the tables of every bundled and
corpus slime dump are identical with and without skimming; and the security scan still sees the whole pickle.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rollaudit
from rollaudit._loaders.formats.pickled import slime
from rollaudit._loaders.torchsave.torch_zip import TorchArchive
from rollaudit._loaders.torchsave.unpickle import SKIPPED
from tests.loaders.test_unpickle import generate

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus" / "slime"
FIELDS = frozenset({"tokens", "loss_mask", "rollout_log_probs"})

_PLAIN_INTS = st.integers(-(1 << 31), (1 << 31) - 1)
_NUMBERS = st.one_of(_PLAIN_INTS, st.floats(allow_nan=False), st.none(), st.booleans())
_ANY_ITEM = st.one_of(_NUMBERS, st.integers(), st.text(max_size=3), st.lists(st.integers(0, 3), max_size=2))
_LENGTHS = st.one_of(st.integers(0, 5), st.sampled_from((999, 1000, 1001, 2000, 2001, 2500)))


@st.composite
def per_token_list(draw: st.DrawFn) -> list:
    length = draw(_LENGTHS)
    items = draw(st.sampled_from(("ints", "floats", "mask", "mixed")))
    if items == "mask":
        return [draw(st.integers(0, 1))] * length
    if items == "floats":
        return [float(index) / 7 for index in range(length)]
    if items == "ints":
        return [draw(_PLAIN_INTS) if index % 97 == 0 else index * 40_503 for index in range(length)]
    return [draw(_ANY_ITEM) if index % 50 == 0 else index for index in range(length)]


_KEYS = st.sampled_from(sorted(FIELDS | {"reward", "index", "metadata", "other"}))
_VALUES = st.one_of(per_token_list(), _NUMBERS, st.text(max_size=4))


@st.composite
def samples(draw: st.DrawFn) -> dict:
    """A dump-like dict: samples whose fields hold per-token lists (sometimes one list shared by several)."""
    shared = draw(per_token_list())
    rows = []
    for _ in range(draw(st.integers(0, 4))):
        row = draw(st.dictionaries(_KEYS, _VALUES, max_size=5))
        if draw(st.booleans()):
            row[draw(_KEYS)] = shared
        if draw(st.booleans()):
            row["nested"] = {"tokens": draw(per_token_list()), "x": [draw(per_token_list())]}
        rows.append(row)
    return {"rollout_id": 0, "samples": rows, "tokens": draw(per_token_list())}


def _plain(item: object) -> bool:
    """Pushed by one fixed-size opcode: BININT/BININT1/BININT2, BINFLOAT, NONE, NEWTRUE/NEWFALSE."""
    return (type(item) is int and -(1 << 31) <= item < 1 << 31) or type(item) in (float, bool) or item is None


def cuttable(value: object) -> bool:
    """Whether the skimmer cuts ``value`` under a skimmed key: a non-empty list of plain pickle numbers."""
    return type(value) is list and len(value) > 0 and all(_plain(item) for item in value)


def model(full: object) -> object:
    """The full unpickle with every cuttable list under a skimmed dict key replaced by SKIPPED. A list is written
    once, where the pickler first meets it (dict order, depth first), and decided there; when a cut list is met
    again (fetched from the memo), nothing is cut: the skimmer reads such a pickle whole."""
    decided: dict[int, object] = {}
    fetched_cut = False

    def walk(value: object, key: object = None) -> object:
        nonlocal fetched_cut
        if type(value) is list:
            if id(value) in decided:
                fetched_cut |= decided[id(value)] is SKIPPED
                return decided[id(value)]
            if key in FIELDS and cuttable(value):
                decided[id(value)] = SKIPPED
            else:
                decided[id(value)] = [walk(item) for item in value]
            return decided[id(value)]
        if type(value) is dict:
            return {name: walk(item, name) for name, item in value.items()}
        return value

    skimmed = walk(full)
    return full if fetched_cut else skimmed


def _unpickled(path: Path, skip: frozenset[str]) -> object:
    with TorchArchive(path) as archive:
        return archive.unpickle(skip=skip)


@settings(max_examples=300, deadline=None)
@given(value=samples(), protocol=st.sampled_from((2, 3, 4, 5)))
def test_skimming_equals_the_model(tmp_path_factory: pytest.TempPathFactory, value: dict, protocol: int):
    path = generate.write_torch_zip(tmp_path_factory.mktemp("skim") / "d.pt", pickle.dumps(value, protocol=protocol))
    full = _unpickled(path, frozenset())
    assert full == value
    assert _unpickled(path, FIELDS) == model(full)


def test_a_cut_list_named_again_is_read_whole(tmp_path: Path):
    """A list fetched from the memo under another key would come back as the marker there: nothing is cut."""
    tokens = list(range(3000))
    value = {"a": {"tokens": tokens}, "b": {"reward": tokens}}
    path = generate.write_torch_zip(tmp_path / "d.pt", pickle.dumps(value, protocol=2))
    assert _unpickled(path, FIELDS) == value


def test_the_marker_takes_appends_and_refuses_hashing():
    """What a hostile pickle may still do to a cut list: append to it (nothing happens), hash it (refused)."""
    SKIPPED.append(1)
    SKIPPED.extend([1, 2])
    with pytest.raises(TypeError):
        hash(SKIPPED)


def test_the_scan_still_reads_what_is_cut(tmp_path: Path):
    """A memo index far ahead of the data inside a skimmed list is refused, as without skimming."""
    data = b"\x80\x02}X\x06\x00\x00\x00tokens]q\x01(K\x01K\x02e" + b"h\xff" + b"s."
    path = generate.write_torch_zip(tmp_path / "d.pt", data)
    with pytest.raises(rollaudit.InputError):
        _unpickled(path, FIELDS)
    hostile = b"\x80\x02}X\x06\x00\x00\x00tokens](K\x01r\xff\xff\xff\x00K\x02es."
    path = generate.write_torch_zip(tmp_path / "e.pt", hostile)
    for skip in (frozenset(), FIELDS):
        with pytest.raises(rollaudit.InputError, match="memo index"):
            _unpickled(path, skip)


READER_FIELDS = slime.PER_TOKEN_FIELDS


def test_a_cut_list_memo_index_is_bounded_as_the_walk_bounds_it(tmp_path: Path):
    """The LONG_BINPUT right after a skimmed list's EMPTY_LIST: an index past its own byte is refused either way
    (skimming once checked it against the end of the list instead)."""
    head = b"\x80\x02}X\x06\x00\x00\x00tokens]"
    index = len(head) + 3  # past the LONG_BINPUT's own byte, before the list ends
    data = head + b"r" + index.to_bytes(4, "little") + b"(K\x01K\x02K\x03es."
    path = generate.write_torch_zip(tmp_path / "d.pt", data)
    for skip in (frozenset(), FIELDS):
        with pytest.raises(rollaudit.InputError, match="memo index"):
            _unpickled(path, skip)


def _slime_inputs() -> list[Path]:
    """Every bundled and corpus slime dump, alone and as the runs they belong to."""
    files = sorted((ROOT / "sample_dumps").rglob("*.pt")) + sorted(CORPUS.rglob("*.pt"))
    runs = [ROOT / "sample_dumps" / "dump_details", ROOT / "sample_dumps" / "fanout"]
    return files + runs + ([CORPUS] if CORPUS.is_dir() else [])


def _read(path: Path, skip: frozenset[str], monkeypatch: pytest.MonkeyPatch) -> pa.Table | str:
    """The table (or the error line) of ``path`` read with ``skip`` as the skimmed fields."""
    monkeypatch.setattr(slime, "PER_TOKEN_FIELDS", skip)
    reward_key = "score" if "corpus" in str(path) or path.name == "reward_key.pt" else None
    try:
        return rollaudit.load(path, cache=False, reward_key=reward_key)
    except rollaudit.RollauditError as error:  # a train dump alone: the same error either way
        return str(error)


@pytest.mark.parametrize("path", _slime_inputs(), ids=lambda path: path.name if path.suffix else path.parts[-1] + "/")
def test_tables_are_identical_with_and_without_skimming(path: Path, monkeypatch: pytest.MonkeyPatch):
    before = _read(path, frozenset(), monkeypatch)
    after = _read(path, READER_FIELDS, monkeypatch)
    if isinstance(before, str):
        assert after == before
        return
    assert isinstance(after, pa.Table) and after.equals(before) and after.schema.metadata == before.schema.metadata


def test_skimming_drops_the_per_token_lists(tmp_path: Path):
    """What is cut is what makes a dump big: the pickle the C unpickler sees is a few percent of it."""
    from rollaudit._loaders.torchsave import pickle_scan

    path = generate.benchmark_dump(tmp_path / "b.pt", samples=40, tokens=2000)
    with TorchArchive(path) as archive:
        data = archive._read_member(archive.pickle_member, count_as_storage=False)
    reduced, _ = pickle_scan.skim(data, READER_FIELDS)
    assert len(reduced) < len(data) / 20, (len(reduced), len(data))
