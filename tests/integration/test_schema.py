"""The Python side (enums, SQLModel models, store row types) and the schema cannot drift."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
import uuid
from datetime import datetime
from typing import Any

import psycopg
import pytest
from sqlalchemy import inspect
from sqlmodel import SQLModel

from engine.config import Settings
from engine.store import rows, wait_rows
from engine.store.models import ENUM_COLUMNS
from engine.store.read import sqlalchemy_engine

TABLES = [t for t in SQLModel.metadata.tables if t.startswith("engine_")]


def _check_values(conn: psycopg.Connection[Any], table: str, column: str) -> set[str]:
    rows = conn.execute(
        """
        SELECT pg_get_constraintdef(c.oid) AS def
        FROM pg_constraint c
        WHERE c.conrelid = %s::regclass AND c.contype = 'c'
        """,
        (table,),
    ).fetchall()
    # the enum CHECK is the one of the form CHECK ((column = ANY (ARRAY[...])))
    for row in rows:
        definition = row["def"]
        if re.fullmatch(rf"CHECK \(\({column} = ANY \(ARRAY\[[^\]]*\]\)\)\)", definition):
            return set(re.findall(r"'([a-z_]+)'::text", definition))
    raise AssertionError(f"no CHECK on {table}.{column} found")


@pytest.mark.parametrize(
    ("table", "column"),
    [(t, c) for t, cols in ENUM_COLUMNS.items() for c in cols],
)
def test_schema__python_enum_equals_database_check(
    conn: psycopg.Connection[Any], table: str, column: str
) -> None:
    enum_type = ENUM_COLUMNS[table][column]
    assert {e.value for e in enum_type} == _check_values(conn, table, column)


def test_schema__every_engine_table_has_a_model(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'public' AND table_name LIKE 'engine\\_%%' "
        "AND table_name <> 'engine_migrations' AND table_type = 'BASE TABLE'"
    ).fetchall()
    assert {r["table_name"] for r in rows} == set(TABLES)


@pytest.mark.parametrize("table", TABLES)
def test_schema__model_matches_table_column_by_column(settings: Settings, table: str) -> None:
    engine = sqlalchemy_engine(settings)
    dialect = engine.dialect
    model = SQLModel.metadata.tables[table]
    actual = {c["name"]: c for c in inspect(engine).get_columns(table)}
    assert list(actual) == [c.name for c in model.columns], "column names or order differ"
    for column in model.columns:
        db_col = actual[column.name]
        assert column.type.compile(dialect) == db_col["type"].compile(dialect), column.name
        assert column.nullable == db_col["nullable"], f"{column.name} nullability"


def test_events__are_append_only(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO engine_events (kind) VALUES ('submitted')")
    with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
        conn.execute("UPDATE engine_events SET worker = 'me'")
    with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
        conn.execute("DELETE FROM engine_events")
    with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
        conn.execute("TRUNCATE engine_events")


def test_events__only_a_summarised_jobs_go_and_a_statement_goes_whole(
    conn: psycopg.Connection[Any],
) -> None:
    """The one exception to append-only (a retired job's events, its summary written
    first) holds for a statement's rows together: one event of a job with no summary, or
    of no job, refuses the whole DELETE."""
    kept, retired = uuid.uuid4(), uuid.uuid4()
    for job in (kept, retired):
        _insert_job(conn, job.hex * 2, "done", job_id=job)
    conn.execute(
        "INSERT INTO engine_events (kind, job_id) VALUES"
        " ('submitted', %(kept)s), ('submitted', %(retired)s), ('succeeded', %(retired)s),"
        " ('submitted', NULL)",
        {"kept": kept, "retired": retired},
    )
    conn.execute(
        "INSERT INTO engine_job_summaries (id, flow, flow_version, status, params, tags,"
        " created_at, finished_at, step_runs, step_runs_done, step_runs_dead, attempts, events)"
        " VALUES (%s, 'example', 1, 'done', '{}', '{}', now(), now(), 0, 0, 0, 0, 2)",
        (retired,),
    )

    def count() -> int:
        row = conn.execute("SELECT count(*) AS n FROM engine_events").fetchone()
        assert row is not None
        return int(row["n"])

    for refused in (
        "DELETE FROM engine_events WHERE job_id IN (%(kept)s, %(retired)s)",
        "DELETE FROM engine_events WHERE job_id = %(retired)s OR job_id IS NULL",
    ):
        with (
            pytest.raises(psycopg.errors.RestrictViolation, match="append-only"),
            conn.transaction(),
        ):
            conn.execute(refused, {"kept": kept, "retired": retired})
        assert count() == 4, refused
    gone = conn.execute("DELETE FROM engine_events WHERE job_id = %s", (retired,))
    assert gone.rowcount == 2 and count() == 2
    with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
        conn.execute("UPDATE engine_events SET worker = 'me' WHERE job_id = %s", (kept,))


def _insert_job(
    conn: psycopg.Connection[Any], fingerprint: str, status: str, job_id: uuid.UUID | None = None
) -> None:
    finished = "clock_timestamp()" if status in ("done", "failed", "cancelled") else "NULL"
    conn.execute(
        "INSERT INTO engine_jobs "
        "(id, flow, flow_version, params, fingerprint, status, finished_at) "
        f"VALUES (%s, 'example', 1, '{{}}', %s, %s, {finished})",
        (job_id or uuid.uuid4(), fingerprint, status),
    )


def test_jobs__one_active_job_per_fingerprint(conn: psycopg.Connection[Any]) -> None:
    fp = "a" * 64
    _insert_job(conn, fp, "done")
    _insert_job(conn, fp, "failed")
    _insert_job(conn, fp, "pending")
    with pytest.raises(psycopg.errors.UniqueViolation):
        _insert_job(conn, fp, "running")


def test_jobs__status_outside_the_enum_is_refused(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        _insert_job(conn, "b" * 64, "succeeded")


def test_step_runs__running_without_a_lease_is_refused(conn: psycopg.Connection[Any]) -> None:
    job = uuid.uuid4()
    conn.execute(
        "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint) "
        "VALUES (%s, 'example', 1, '{}', %s)",
        (job, "c" * 64),
    )
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "INSERT INTO engine_step_runs (id, job_id, step, fingerprint, max_attempts, status) "
            "VALUES (%s, %s, 'plan', %s, 3, 'running')",
            (uuid.uuid4(), job, "d" * 64),
        )
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "INSERT INTO engine_step_runs (id, job_id, step, fingerprint, max_attempts, attempts) "
            "VALUES (%s, %s, 'plan', %s, 3, 4)",
            (uuid.uuid4(), job, "d" * 64),
        )


# -- store/rows.py and store/wait_rows.py: the write side's row types ---------------------

# Each row type (store/rows.py, store/wait_rows.py) carrying columns of a table: the tables
# its fields come from (a field named as its column is looked up in them in order), the fields named
# otherwise ("table.column"), and the fields no column holds as is (computed by the
# statement). Field types are checked against the columns' types and nullability.
ROW_MIRRORS: dict[type[Any], tuple[tuple[str, ...], dict[str, str], set[str]]] = {
    rows.JobRow: (("engine_jobs",), {}, set()),
    wait_rows.ChildRow: (("engine_jobs",), {"key": "engine_jobs.child_key"}, {"output"}),
    rows.Claimed: (
        ("engine_step_runs", "engine_jobs"),
        {"attempt": "engine_step_runs.attempts", "token": "engine_step_runs.lease_token"},
        {"reclaimed_from"},
    ),
    rows.NewStepRun: (("engine_step_runs",), {}, set()),
    wait_rows.Parked: (("engine_step_runs",), {}, set()),
    rows.CancelledRun: (("engine_step_runs",), {}, set()),
    rows.ExpiredExhausted: (("engine_step_runs", "engine_jobs"), {}, set()),
    wait_rows.WaitingForSignal: (
        ("engine_step_runs", "engine_jobs"),
        {
            "step_run_id": "engine_step_runs.id",
            "signal": "engine_step_runs.wait_signal",
            "deadline": "engine_step_runs.wait_until",
            "summary": "engine_step_runs.wait_summary",
            "submitted_by": "engine_jobs.submitted_by",
            "parent_job_id": "engine_jobs.parent_job_id",
        },
        {"parent_flow", "since"},
    ),
    wait_rows.SignalRow: (("engine_signals",), {}, set()),
    rows.PendingOutbox: (
        ("engine_outbox",),
        {"job_id": "engine_step_runs.job_id"},
        {"delay_s"},
    ),
    rows.ClaimedDelivery: (
        ("engine_alert_deliveries", "engine_alerts"),
        {
            "delivery_attempt": "engine_alert_deliveries.attempts",
            "token": "engine_alert_deliveries.claim_token",
            "attempts": "engine_alerts.attempts",
        },
        set(),
    ),
}

# A nullable column read into a field that is never None: the statement guarantees a value
# (a claimed step run has its lease, a claimed delivery its claim token, a child job its
# key, a step run waiting for a signal the signal's name).
NARROWED = {
    (rows.Claimed, "token"),
    (rows.Claimed, "lease_expires_at"),
    (rows.ClaimedDelivery, "token"),
    (wait_rows.ChildRow, "key"),
    (wait_rows.WaitingForSignal, "signal"),
}

# The columns of those tables that no row type carries: read through store/models.py, or
# only inside a statement. A column added to one of these tables fails
# test_rows__every_column_is_carried_or_listed until it is carried by a row type or listed.
NOT_IN_ROWS = {
    "engine_jobs": {
        "flow_version",
        "fingerprint",
        "started_at",
        "parent_step_run_id",
        "signals",
        "approvals",
        "pinned_until",  # retention reads them in SQL (engine_retire_jobs)
        "pinned_reason",
        "finished_by",  # the folded job_done (0035): read as an event through engine_history
        "submitted_detail",  # the folded submitted (0037): read through engine_history too
    },
    "engine_step_runs": {
        "available_at",
        "lease_owner",
        "output",
        "error",
        "created_at",
        "started_at",
        "finished_at",
        "claimed_at",
        "wait_children",
        "concurrency_kept",
        "wait_past",
        "free_releases",
        # the folded claim and success (0035): read as events through engine_history
        "started_by",
        "started_detail",
        "finished_by",
        "finished_detail",
    },
    "engine_signals": {"id", "job_id"},
    "engine_outbox": {"created_at", "published_at", "deliver_at"},
    "engine_alerts": {"id", "episode", "schedule_id"},
    "engine_alert_deliveries": {
        "status",
        "next_attempt_at",
        "claimed_by",
        "claimed_until",
        "last_error",
        "delivered_at",
    },
}

# the Python types a column of each PostgreSQL type is read as
_PY_TYPES: dict[str, tuple[type[Any], ...]] = {
    "uuid": (uuid.UUID,),
    "text": (str,),  # a StrEnum is a str
    "integer": (int,),
    "bigint": (int,),
    "boolean": (bool,),
    "timestamp with time zone": (datetime,),
    "jsonb": (dict, list, str, int, float, bool),
    "ARRAY": (list, tuple),
}


def _columns(conn: psycopg.Connection[Any]) -> dict[str, dict[str, tuple[str, bool]]]:
    """table -> column -> (data type, nullable), for the tables of the row mirrors."""
    found: dict[str, dict[str, tuple[str, bool]]] = {t: {} for t in NOT_IN_ROWS}
    for row in conn.execute(
        "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema = 'public' AND table_name = ANY(%s) ORDER BY ordinal_position",
        (list(NOT_IN_ROWS),),
    ):
        found[row["table_name"]][row["column_name"]] = (
            row["data_type"],
            row["is_nullable"] == "YES",
        )
    return found


def _where(row_type: type[Any], field: str, tables: dict[str, dict[str, Any]]) -> str | None:
    """``table.column`` of a row type's field, or ``None`` when the field holds no column."""
    sources, renamed, computed = ROW_MIRRORS[row_type]
    if field in computed:
        return None
    if field in renamed:
        return renamed[field]
    table = next((t for t in sources if field in tables[t]), None)
    assert table is not None, (
        f"{row_type.__name__}.{field} is no column of {', '.join(sources)}: name its column "
        "in ROW_MIRRORS, or list it there as computed"
    )
    return f"{table}.{field}"


def _admits(annotation: Any, allowed: tuple[type[Any], ...]) -> tuple[bool, bool]:
    """(whether ``annotation`` takes a value of one of ``allowed``, whether it takes None)."""
    if annotation is Any:
        return True, True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        parts = [_admits(a, allowed) for a in args if a is not type(None)]
        return any(ok for ok, _ in parts), type(None) in args or any(n for _, n in parts)
    origin = typing.get_origin(annotation) or annotation
    return isinstance(origin, type) and issubclass(origin, allowed), False


@pytest.mark.parametrize("row_type", list(ROW_MIRRORS), ids=lambda t: t.__name__)
def test_rows__fields_match_their_columns(conn: psycopg.Connection[Any], row_type: type) -> None:
    tables = _columns(conn)
    hints = typing.get_type_hints(row_type)
    for field in dataclasses.fields(row_type):
        where = _where(row_type, field.name, tables)
        if where is None:
            continue
        table, column = where.split(".")
        assert column in tables[table], f"{row_type.__name__}.{field.name}: no column {where}"
        data_type, nullable = tables[table][column]
        takes, takes_none = _admits(hints[field.name], _PY_TYPES[data_type])
        assert takes, f"{row_type.__name__}.{field.name} cannot hold {where} ({data_type})"
        if nullable and (row_type, field.name) not in NARROWED:
            assert takes_none, f"{row_type.__name__}.{field.name}: {where} is nullable"
        if not nullable and hints[field.name] is not Any:  # JSON's null is a value
            assert not takes_none, (
                f"{row_type.__name__}.{field.name} takes None, but {where} is NOT NULL"
            )


def _carried(tables: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """table -> the columns a row type of store/rows.py and store/wait_rows.py carries."""
    carried: dict[str, set[str]] = {t: set() for t in tables}
    for row_type in ROW_MIRRORS:
        for field in dataclasses.fields(row_type):
            where = _where(row_type, field.name, tables)
            if where is not None:
                table, column = where.split(".")
                carried[table].add(column)
    return carried


def test_rows__every_column_is_carried_or_listed(conn: psycopg.Connection[Any]) -> None:
    tables = _columns(conn)
    carried = _carried(tables)
    for table, columns in tables.items():
        unlisted = set(columns) - carried[table] - NOT_IN_ROWS[table]
        assert not unlisted, (
            f"{table}: column(s) {sorted(unlisted)} neither carried by a row type of "
            "store/rows.py and store/wait_rows.py nor listed in NOT_IN_ROWS"
        )
        both = carried[table] & NOT_IN_ROWS[table]
        assert not both, f"{table}: {sorted(both)} carried by a row type and in NOT_IN_ROWS"
        gone = NOT_IN_ROWS[table] - set(columns)
        assert not gone, f"{table}: NOT_IN_ROWS lists {sorted(gone)}, no longer columns"


def test_rows__a_column_added_and_not_carried_is_found(conn: psycopg.Connection[Any]) -> None:
    conn.execute("ALTER TABLE engine_step_runs ADD COLUMN priority integer")
    tables = _columns(conn)
    unlisted = set(tables["engine_step_runs"]) - _carried(tables)["engine_step_runs"]
    assert unlisted - NOT_IN_ROWS["engine_step_runs"] == {"priority"}
