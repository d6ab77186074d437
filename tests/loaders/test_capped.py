"""The capped table reader: a Parquet file read a piece at a time, each piece written to shared memory while the
next is read, the same table as a whole read; no room in shared memory, or more table than the bound, ends cleanly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollaudit._errors import InputError
from rollaudit._loaders.arrow import capped, tables
from rollaudit._table import arrow_array, numpy_view

pytestmark = pytest.mark.skipif(not capped.can_cap(), reason="no address-space limit on this platform")


def _run_file(path: Path, rows: int, row_group: int) -> pa.Table:
    rng = np.random.default_rng(0)
    table = pa.table(
        {
            "step": np.repeat(np.arange(5), rows // 5),
            "prompt": pa.array(rng.integers(0, 50, rows)).cast(pa.string()).dictionary_encode(),
            "reward": rng.random(rows),
        }
    )
    pq.write_table(table, path, row_group_size=row_group)
    return table


def test_pieces_make_the_table_a_whole_read_makes(tmp_path: Path, monkeypatch):
    path = tmp_path / "run.parquet"
    _run_file(path, rows=10_000, row_group=1_500)
    monkeypatch.setattr(tables, "PIECE_ROWS", 1_000)
    pieces = list(tables.read_pieces(path, "parquet", ["step", "prompt", "reward"]))
    assert len(pieces) > 5 and all(piece.schema == pieces[0].schema for piece in pieces)
    assert pieces[0].schema.field("prompt").type == pa.string()  # dictionaries decoded piece by piece
    whole = pq.read_table(path).cast(pieces[0].schema)
    assert pa.concat_tables(pieces).equals(whole)
    assert tables.read_in_this_process(path, "parquet", None).equals(whole)
    assert capped.read_table(path, "parquet", None).equals(whole)


def test_the_capped_child_writes_a_table_of_several_pieces(tmp_path: Path):
    # The child reads tables.PIECE_ROWS rows at a time: over two pieces' worth of rows come back as they were.
    # zstd: a codec the footer cannot bound, so the child reads it.
    path = tmp_path / "long.parquet"
    rows = 2 * tables.PIECE_ROWS + 123
    table = pa.table({"step": np.arange(rows) // 1000, "reward": np.linspace(0.0, 1.0, rows)})
    pq.write_table(table, path, compression="zstd")
    assert capped.read_parquet_in_bound(path, None) is None
    read = capped.read_table(path, "parquet", None)
    assert read.column("reward").num_chunks == 3
    assert read.equals(table)


def test_an_empty_parquet_file_is_one_empty_piece_with_its_columns(tmp_path: Path):
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"step": pa.array([], pa.int64()), "reward": pa.array([], pa.float64())}), path)
    pieces = list(tables.read_pieces(path, "parquet", ["reward"]))
    assert len(pieces) == 1 and pieces[0].num_rows == 0 and pieces[0].column_names == ["reward"]
    assert capped.read_table(path, "parquet", None).num_rows == 0


def _no_child(monkeypatch) -> None:
    """The capped child may walk the footer, never read the table."""

    def refuse(*args):
        raise AssertionError("the capped child was asked to read")

    monkeypatch.setattr(capped._Worker, "read", refuse)


def test_a_flat_snappy_file_is_read_in_this_process(tmp_path: Path, monkeypatch):
    path = tmp_path / "run.parquet"
    _run_file(path, rows=10_000, row_group=1_500)
    _no_child(monkeypatch)
    monkeypatch.setattr(capped, "_RUN_ROWS_PER_PIECE", 1)
    monkeypatch.setattr(tables, "PIECE_ROWS", 3_000)  # runs of two row groups
    read = capped.read_arrow(path, "parquet", ["step", "prompt", "reward"])
    assert read.schema.field("prompt").type == pa.string()  # the dictionary decoded, as the child does
    assert read.column("reward").num_chunks == 4
    assert read.equals(pq.read_table(path).cast(read.schema))


def test_files_the_footer_does_not_bound_are_left_to_the_child(tmp_path: Path, monkeypatch):
    flat = pa.table({"step": np.arange(1000), "reward": np.linspace(0.0, 1.0, 1000)})
    for name, table, compression in [
        ("zstd", flat, "zstd"),
        ("gzip", flat, "gzip"),
        ("lists", flat.append_column("tokens", pa.array([[1, 2]] * 1000)), "snappy"),
        ("struct", flat.append_column("meta", pa.array([{"a": 1}] * 1000)), "snappy"),
    ]:
        path = tmp_path / f"{name}.parquet"
        pq.write_table(table, path, compression=compression)
        assert capped.read_parquet_in_bound(path, None) is None, name
    path = tmp_path / "lists.parquet"
    assert capped.read_parquet_in_bound(path, ["step", "reward"]).equals(flat)  # the flat columns are bounded
    # A footer claiming more than the bound: the child reads it, and names the bound if it is passed.
    monkeypatch.setattr(capped, "FREE_BYTES", 1000)
    monkeypatch.setattr(capped, "BYTES_PER_FILE_BYTE", 1)
    assert capped.read_parquet_in_bound(path, ["step", "reward"]) is None


def test_text_decoding_past_the_bound_is_refused_before_it_is_decoded(tmp_path: Path, monkeypatch):
    # One 200 kB text a thousand times: a few kB of dictionary page and run-length encoded indices, whose footer
    # claims a few kB; decoded, 200 MB. Refused in this process, before any dictionary is decoded.
    path = tmp_path / "expands.parquet"
    long_text = pa.array(["x" * 200_000]).take(pa.array(np.zeros(1000, dtype=np.int64)))
    pq.write_table(pa.table({"step": np.zeros(1000, dtype=np.int64), "prompt": long_text}), path)
    assert path.stat().st_size < 100_000
    monkeypatch.setattr(capped, "FREE_BYTES", 1 << 20)
    _no_child(monkeypatch)

    def no_decoding(table):
        raise AssertionError("decoded before the bound was checked")

    monkeypatch.setattr(tables, "decode_dictionaries", no_decoding)
    with pytest.raises(InputError, match="decodes to more than 1 MiB of table") as error:
        capped.read_table(path, "parquet", None)
    assert error.value.file == str(path)


def _pieces(count: int, rows: int = 1000):
    for index in range(count):
        yield pa.table({"reward": np.full(rows, float(index))})


def test_no_room_in_shared_memory_leaves_no_file_and_sends_the_table_down_the_pipe(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(capped, "_SHARED_MEMORY", tmp_path)
    real_new_file = pa.ipc.new_file

    class Full:
        """A writer whose second piece finds the shared memory full."""

        def __init__(self, *args):
            self.writer, self.pieces = real_new_file(*args), 0

        def write_table(self, table):
            self.pieces += 1
            if self.pieces == 2:
                raise OSError(28, "No space left on device")
            self.writer.write_table(table)

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            self.writer.close()

    monkeypatch.setattr(pa.ipc, "new_file", Full)
    assert capped._shared_file(_pieces(4), size=1 << 20) is None
    assert list(tmp_path.iterdir()) == []


def test_more_table_than_the_bound_is_a_memory_error_and_leaves_no_file(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(capped, "_SHARED_MEMORY", tmp_path)
    monkeypatch.setattr(capped, "FREE_BYTES", 20_000)
    monkeypatch.setattr(capped, "BYTES_PER_FILE_BYTE", 1)
    # 8000 bytes a piece against 20_000 + 1000: the third piece is over, whatever the pieces still to come.
    with pytest.raises(MemoryError):
        capped._shared_file(_pieces(1000), size=1000)
    assert list(tmp_path.iterdir()) == []
    name = capped._shared_file(_pieces(2), size=1000)
    try:
        table = capped._mapped_table(name)
    finally:
        assert not os.path.exists(name)  # the name is gone once mapped; the mapping keeps the pages
    assert table.column("reward").to_pylist() == [0.0] * 1000 + [1.0] * 1000


def test_numpy_views_and_arrow_arrays_share_memory_without_pandas():
    code = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from rollaudit._table import arrow_array, numpy_view\n"
        "values = np.arange(10, dtype=np.int64)\n"
        "array = arrow_array(values)\n"
        "assert numpy_view(array.slice(3, 4)).tolist() == [3, 4, 5, 6]\n"
        "assert 'pandas' not in sys.modules, 'pandas imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    values = np.linspace(0, 1, 7)
    array = arrow_array(values)
    assert array.type == pa.float64() and array.to_pylist() == values.tolist()
    view = numpy_view(array)
    assert np.shares_memory(view, values) and not view.flags.writeable
    assert numpy_view(pa.array([], pa.int64())).tolist() == []


def test_loading_a_parquet_run_imports_no_pandas(tmp_path: Path):
    path = tmp_path / "run.parquet"
    _run_file(path, rows=2_000, row_group=500)
    code = (
        "import sys, rollaudit\n"
        f"table = rollaudit.load({str(path)!r}, cache=False)\n"
        "steps = table.column('step').to_pylist()\n"
        "assert table.num_rows == 2000 and steps == sorted(steps)\n"
        "assert 'pandas' not in sys.modules, 'pandas imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)
