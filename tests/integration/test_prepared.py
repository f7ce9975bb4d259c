"""Prepared statements from simple-query messages (engine.store.prepared), on real PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import ClientCursor
from psycopg.types.json import Jsonb

from engine import store
from engine.errors import StoreError
from engine.store import prepared

ECHO = "-- echo --\nSELECT %(a)s::text AS a, %(b)s::jsonb AS b, %(a)s::text || '%%' AS again"


def prepared_names(conn: psycopg.Connection[Any]) -> list[str]:
    query = "SELECT name FROM pg_prepared_statements WHERE name LIKE 'engine%' ORDER BY name"
    return [r["name"] for r in conn.execute(query)]


HOSTILE = [
    "o'clock",
    "back\\slash\\'",
    "'; DROP TABLE engine_jobs; --",
    "$1 %(a)s %s %% $$",
    "Ünïcödé ✓ 漢字",
    "",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_values_reach_the_server_exactly_as_given(conn: psycopg.Connection[Any], text: str) -> None:
    with conn.transaction():
        batch = store.Batch(conn)
        reply = batch.execute(ECHO, {"a": text, "b": Jsonb({"k": text, "n": [1, None]})})
        batch.send()
    assert reply.fetchone() == {"a": text, "b": {"k": text, "n": [1, None]}, "again": text + "%"}


def test_prepared_once_per_connection_and_kept_across_rollbacks(
    conn: psycopg.Connection[Any],
) -> None:
    name = prepared.statement(ECHO).name
    for _ in range(3):
        with conn.transaction():
            batch = store.Batch(conn)
            batch.execute(ECHO, {"a": "x", "b": Jsonb(1)})
            batch.send()
    other = "-- boom --\nSELECT 1 / %(zero)s::int"
    with conn.transaction(force_rollback=True):
        batch = store.Batch(conn)
        batch.execute(other, {"zero": 0})  # the first use on this connection prepares
        with pytest.raises(StoreError, match="division by zero"):
            batch.send()
    assert prepared_names(conn) == sorted([name, prepared.statement(other).name])


def test_a_dropped_statement_fails_once_then_is_prepared_again(
    conn: psycopg.Connection[Any],
) -> None:
    with conn.transaction():
        batch = store.Batch(conn)
        batch.execute(ECHO, {"a": "x", "b": Jsonb(1)})
        batch.send()
    conn.execute("DEALLOCATE ALL")  # someone else's reset
    with conn.transaction(force_rollback=True):
        batch = store.Batch(conn)
        batch.execute(ECHO, {"a": "x", "b": Jsonb(1)})
        with pytest.raises(StoreError, match="does not exist"):
            batch.send()
    with conn.transaction():
        batch = store.Batch(conn)
        reply = batch.execute(ECHO, {"a": "y", "b": Jsonb(2)})
        batch.send()
    assert reply.fetchone() == {"a": "y", "b": 2, "again": "y%"}


def test_literals_of_every_kind_round_trip(conn: psycopg.Connection[Any]) -> None:
    binder = ClientCursor(conn)
    escape = prepared._Session(conn).escape
    assert escape is not None  # a UTF-8 session
    values: list[Any] = [None, True, False, 0, -7, 2.5, uuid.uuid4(), [1, 2], *HOSTILE]
    values += [[], [uuid.uuid4(), uuid.uuid4()], [0.5, 1e-07, -3.0], ["a'b", "c,d"], [True]]
    values += [Jsonb(v) for v in ([], {"k": "o'c\\"}, *HOSTILE)]
    for quoting in (escape, None):  # libpq's, and psycopg's for a session not in UTF-8
        for value in values:
            literal = prepared._literal(quoting, binder, value)
            if isinstance(value, list):  # untyped: the parameter's type decides, as here
                item = type(value[0]) if value else int
                cast = {uuid.UUID: "uuid", float: "float8", int: "int8", str: "text"}
                literal = f"({literal})::{cast.get(item, 'bool')}[]"
            got = conn.execute(f"SELECT {literal} AS v").fetchone()
            assert got is not None
            expected = value.obj if isinstance(value, Jsonb) else value
            assert got["v"] == expected, literal
        with pytest.raises(psycopg.DataError):
            prepared._literal(quoting, binder, "nul\x00byte")  # refused, as psycopg refuses it


def test_positional_placeholders_are_refused() -> None:
    with pytest.raises(ValueError, match="named placeholders"):
        prepared.statement("SELECT %s")


def test_psycopg_deallocating_after_a_rollback_is_followed(
    conn: psycopg.Connection[Any],
) -> None:
    # psycopg prepares a statement of its own after 5 runs, and after a ROLLBACK
    # it sends DEALLOCATE ALL, which takes ours with it
    def echo(value: str) -> None:
        with conn.transaction():
            batch = store.Batch(conn)
            reply = batch.execute(ECHO, {"a": value, "b": Jsonb(1)})
            batch.send()
        assert reply.fetchone() == {"a": value, "b": 1, "again": value + "%"}

    for _round in range(3):
        for _ in range(8):
            conn.execute("SELECT %s::int AS n", (1,))
        echo("x")
        assert prepared.statement(ECHO).name in prepared_names(conn)
        with conn.transaction(force_rollback=True):
            conn.execute("SELECT 1")
        assert prepared_names(conn) == [], "psycopg deallocated everything"
        echo("y")  # prepared again
    # psycopg holding none of its own deallocates nothing on a rollback: ours stay
    with conn.transaction(force_rollback=True):
        conn.execute("SELECT 1")
    assert prepared_names(conn) == [prepared.statement(ECHO).name]
    echo("z")
