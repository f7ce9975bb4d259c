"""The Python side (enums, SQLModel models) and the migrated schema cannot drift."""

from __future__ import annotations

import re
import uuid
from typing import Any

import psycopg
import pytest
from sqlalchemy import inspect
from sqlmodel import SQLModel

from engine.config import Settings
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
        "AND table_name <> 'engine_migrations'"
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


def _insert_job(conn: psycopg.Connection[Any], fingerprint: str, status: str) -> None:
    finished = "clock_timestamp()" if status in ("done", "failed", "cancelled") else "NULL"
    conn.execute(
        "INSERT INTO engine_jobs "
        "(id, flow, flow_version, params, fingerprint, status, finished_at) "
        f"VALUES (%s, 'example', 1, '{{}}', %s, %s, {finished})",
        (uuid.uuid4(), fingerprint, status),
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
