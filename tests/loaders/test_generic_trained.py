"""The generic loader's rows not trained (status words, flag columns, per-row and per-token masks) and agent column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

import rollaudit
from rollaudit import InputError
from rollaudit._loaders.formats import generic
from rollaudit._loaders.registry import FORMATS
from rollaudit._table import AGENT, NOT_TRAINED, notes_in


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def reasons(table: pa.Table) -> list[str | None]:
    return table.column(NOT_TRAINED).to_pylist()


def groups(**columns: list) -> list[dict]:
    """Rows of two prompts of four samples (rewards 1, 0, 1, 0), with ``columns`` beside them."""
    rows = [{"uid": f"p{row // 4}", "reward": float(row % 2 == 0)} for row in range(8)]
    for name, values in columns.items():
        for row, value in zip(rows, values, strict=True):
            row[name] = value
    return rows


# ---------------------------------------------------------------------------------------------------------------------
# Each kind of column.


def test_a_status_word_marks_the_row_not_trained_as_written(tmp_path: Path):
    statuses = ["completed", "REJECTED", "truncated", "filtered", " Aborted ", "failed", "error", None]
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", groups(status=statuses)))
    assert reasons(table) == [None, "status=REJECTED", None, "status=filtered", "status= Aborted ", None, None, None]
    assert table.column("status").to_pylist() == statuses  # the status itself is kept


def test_every_documented_status_word_is_not_trained(tmp_path: Path):
    words = list(generic.NOT_TRAINED_STATUSES)
    rows = [{"uid": 0, "reward": 1.0, "status": word.upper()} for word in words]
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", [*rows, {"uid": 0, "reward": 1.0, "status": "ok"}]))
    assert reasons(table) == [f"status={word.upper()}" for word in words] + [None]


def test_unrecognised_statuses_keep_every_row_trained(tmp_path: Path):
    statuses = ["completed", "truncated", "ok", "failed", "error", "pending", "rejected_later", ""]
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", groups(status=statuses)))
    assert NOT_TRAINED not in table.column_names and not notes_in(table)
    report = rollaudit.audit(table)
    assert "not_trained" not in report.info and report.info["samples"] == 8


@pytest.mark.parametrize(
    ("name", "values", "reason"),
    [
        ("trained", [True, False, None, True, True, False, True, True], "trained=false"),
        ("is_trained", [1, 0, 1, 1, None, 0, 1, 1], "is_trained=0"),
        ("rejected", [False, True, None, False, False, True, False, False], "rejected=true"),
        ("filtered", [0, 1, 0, 0, 0, 1, 0, None], "filtered=1"),
        ("is_filtered", [0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], "is_filtered=1"),
        ("dropped", [False, True, False, False, False, True, False, False], "dropped=true"),
        ("not_trained", [False, True, False, False, False, True, False, False], "not_trained=true"),
        ("loss_mask", [1, 0, 1, 1, 1, 0, 1, 1], "loss_mask=0"),
        ("sample_mask", [True, False, True, True, True, False, True, None], "sample_mask=false"),
    ],
)
def test_a_flag_or_per_row_mask_marks_rows_with_its_name_and_value(tmp_path: Path, name, values, reason):
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", groups(**{name: values})))
    assert reasons(table) == [None, reason, None, None, None, reason, None, None]  # a missing value: trained
    assert notes_in(table) == [f"2 rows read as not trained, left out of the audit: 2 by {name!r}"]


def test_a_token_mask_with_every_entry_0_marks_the_row_and_its_advantage_stays_null(tmp_path: Path):
    masks = [[0, 1], [0, 0], [1, 1], [], None, [0, 0, 0], [1], [0, 1]]
    rows = groups(token_loss_mask=masks, advantages=[[0.5] * len(mask or []) for mask in masks])
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", rows))
    reason = "token_loss_mask all 0"
    assert reasons(table) == [None, reason, None, None, None, reason, None, None]  # no entries: nothing said
    assert table.column("recorded_advantage").to_pylist() == [0.5, None, 0.5, None, None, None, 0.5, 0.5]
    assert table.column("response_length").to_pylist() == [1, 0, 2, 0, 0, 0, 1, 1]


def test_a_table_of_its_own_reasons_keeps_them_as_written(tmp_path: Path):
    written = [None, "group dropped", "", None, None, "group dropped", "  ", "not scored"]
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", groups(not_trained=written)))
    assert reasons(table) == [None, "group dropped", None, None, None, "group dropped", None, "not scored"]


def test_the_first_column_that_marks_a_row_gives_its_reason(tmp_path: Path):
    rows = groups(
        status=["completed", "rejected", "rejected", "completed", "completed", "completed", "completed", "completed"],
        rejected=[False, True, False, True, False, False, False, False],
        loss_mask=[1, 0, 1, 0, 0, 1, 1, 1],
        token_loss_mask=[[1], [0], [0], [1], [1], [0], [1], [1]],
    )
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", rows))
    assert reasons(table) == [
        None,
        "status=rejected",
        "status=rejected",
        "rejected=true",
        "loss_mask=0",
        "token_loss_mask all 0",
        None,
        None,
    ]
    assert notes_in(table) == [
        "5 rows read as not trained, left out of the audit: 2 by 'status', 1 by 'rejected', 1 by 'loss_mask', "
        "1 by 'token_loss_mask' all 0"
    ]


def test_parquet_and_csv_read_the_same_reasons(tmp_path: Path):
    rows = groups(status=["ok", "dropped"] * 4, trained=[True, True, False, True] * 2, sample_mask=[1, 1, 1, 0] * 2)
    arrow = pa.Table.from_pylist(rows)
    pq.write_table(arrow, tmp_path / "rows.parquet")
    pa_csv.write_csv(arrow, tmp_path / "rows.csv")
    expected = [None, "status=dropped", "trained=false", "status=dropped"] * 2
    assert reasons(rollaudit.load(tmp_path / "rows.parquet")) == expected
    assert reasons(rollaudit.load(tmp_path / "rows.csv")) == expected


def test_the_note_counts_the_rows_of_every_file(tmp_path: Path):
    write_jsonl(tmp_path / "a_step1.jsonl", groups(rejected=[True] + [False] * 7))
    write_jsonl(tmp_path / "b_step2.jsonl", groups(rejected=[True, True] + [False] * 6))
    table = rollaudit.load(tmp_path)
    assert notes_in(table) == ["3 rows read as not trained, left out of the audit: 3 by 'rejected'"]


# ---------------------------------------------------------------------------------------------------------------------
# Bad values, and columns of another type.


def test_a_flag_with_another_value_is_refused_naming_the_file_field_and_row(tmp_path: Path):
    path = write_jsonl(tmp_path / "rows.jsonl", groups(filtered=[0, 0, 0, 2, 0, 0, 0, 0]))
    with pytest.raises(InputError) as raised:
        rollaudit.load(path)
    message = str(raised.value)
    assert str(path) in message and "'filtered'" in message and "2" in message
    assert "true/false or 0/1 per row" in message and "\n" not in message


def test_a_flag_column_of_text_is_passed_through_unread(tmp_path: Path):
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", groups(rejected=["yes", "no"] * 4)))
    assert NOT_TRAINED not in table.column_names and table.column("rejected").to_pylist() == ["yes", "no"] * 4


# ---------------------------------------------------------------------------------------------------------------------
# The audit of such a table.


def test_the_audit_counts_the_rows_not_trained_and_leaves_them_out_of_every_rate(tmp_path: Path):
    rows = groups(status=["completed", "rejected", "completed", "completed", "filtered", "filtered", "ok", "ok"])
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    report = rollaudit.audit(rollaudit.load(path))
    assert report.info["not_trained"] == [
        {"reason": "status=rejected", "rows": 1, "groups": 1},
        {"reason": "status=filtered", "rows": 2, "groups": 1},
    ]
    assert report.info["samples"] == 5
    assert int(report.summary.loc["batch", "compared"]) == 5
    # The same five rows alone give the same rates: the others weigh nothing.
    kept = rollaudit.make_table(
        reward=[1.0, 1.0, 0.0, 1.0, 0.0], prompt=["p0", "p0", "p0", "p1", "p1"], status=["completed"] * 3 + ["ok"] * 2
    )
    alone = rollaudit.audit(kept)
    assert report.summary.loc["batch", "sign_flip_rate"] == alone.summary.loc["batch", "sign_flip_rate"]


# ---------------------------------------------------------------------------------------------------------------------
# The agent.


@pytest.mark.parametrize("name", ["agent", "role", "agent_id", "agent_name"])
def test_an_agent_column_lands_as_agent(tmp_path: Path, name):
    values = ["solver", "proposer"] * 4 if name != "agent_id" else [0, 1] * 4
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", groups(**{name: values})))
    assert table.column(AGENT).to_pylist() == [str(value) for value in values]
    assert table.schema.field(AGENT).type == pa.string()
    assert name == AGENT or name not in table.column_names


def test_the_first_agent_column_of_text_or_integers_is_the_agent(tmp_path: Path):
    rows = groups(agent=[0.5] * 8, role=["solver"] * 8, agent_name=["judge"] * 8)
    table = rollaudit.load(write_jsonl(tmp_path / "rows.jsonl", rows))
    assert table.column(AGENT).to_pylist() == ["solver"] * 8
    assert table.column("source_agent").to_pylist() == [0.5] * 8  # never read as the agent
    assert table.column("agent_name").to_pylist() == ["judge"] * 8


# ---------------------------------------------------------------------------------------------------------------------
# What ``rollaudit formats generic`` says.


def test_the_format_text_names_every_word_and_column_read():
    description = FORMATS["generic"].description
    names = (
        *generic.NOT_TRAINED_STATUSES,
        *generic.TRAINED_FLAGS,
        *generic.NOT_TRAINED_FLAGS,
        *generic.SAMPLE_MASK_NAMES,
        *generic.AGENT_NAMES,
    )
    assert all(name in description for name in names)
    for name in names:
        assert f"``{name}``" in (generic.__doc__ or "")
