"""The tests' database pool (``tests/support/dbpool.py``) on real PostgreSQL.

A reset database must be what a new copy of the template is, to the planner
too (its statistics), and a schema, grant or setting a test changed must
still get the database dropped when the full comparison is skipped for an
unchanged catalog.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from dbpool import DatabasePool
from psycopg.rows import dict_row

STATS = """
SELECT c.relname, c.relpages, c.reltuples, c.relfilenode
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 1
"""


@pytest.fixture
def pool(db_pool: DatabasePool) -> Iterator[DatabasePool]:
    """A pool of its own, on the worker's template, made and dropped as the worker's are."""
    prefix = f"engine_pt_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    made = DatabasePool(db_pool.admin, db_pool.template, prefix, db_pool._create, db_pool._drop)
    yield made
    made.close()


def connect(pool: DatabasePool, name: str) -> psycopg.Connection[Any]:
    return psycopg.connect(pool.info(name), autocommit=True, row_factory=dict_row)


def as_template(
    found: dict[str, tuple[int, float]], template: dict[str, tuple[int, float]]
) -> bool:
    """Each table's counts are the template's, or what autovacuum (on, on the embedded
    server) writes when it finds the truncated table empty: it may pass at any time."""
    return all(found[t] in (counts, (0, 0.0)) for t, counts in template.items())


def stats(pool: DatabasePool, name: str) -> dict[str, tuple[int, float]]:
    with connect(pool, name) as c:
        return {r["relname"]: (r["relpages"], r["reltuples"]) for r in c.execute(STATS)}


def files(pool: DatabasePool, name: str) -> dict[str, int]:
    with connect(pool, name) as c:
        return {r["relname"]: r["relfilenode"] for r in c.execute(STATS)}


def write(c: psycopg.Connection[Any], events: int) -> None:
    c.execute("INSERT INTO erp_brands VALUES (1, 'B1', 'Brand')")
    c.execute("INSERT INTO erp_stores VALUES (1, 'ST001', 1, 'Store', 'small')")
    c.execute(
        "INSERT INTO engine_events (kind, detail)"
        " SELECT 'submitted', jsonb_build_object('n', n) FROM generate_series(1, %s) n",
        (events,),
    )
    c.execute("SELECT nextval('engine_events_id_seq')")


def test_reset__written_tables_truncated_and_as_fresh_as_a_copy(pool: DatabasePool) -> None:
    name = pool.acquire()
    template = stats(pool, name)
    before = files(pool, name)
    with connect(pool, name) as c:
        write(c, events=5000)
    pool.release(name)
    assert pool.acquire() == name and pool.recreated == 0
    with connect(pool, name) as c:
        assert pool.fresh(c)
        assert c.execute("SELECT nextval('engine_events_id_seq') AS n").fetchone() == {"n": 1}
    after = files(pool, name)
    # truncated (new files), never deleted: a later test's rows are stored in their order
    for table in ("erp_brands", "erp_stores", "engine_events"):
        assert after[table] != before[table], table
    # and the planner sees what it saw in a new copy
    assert as_template(stats(pool, name), template), stats(pool, name)


@pytest.mark.parametrize("rows", ["kept", "rolled back"])
def test_reset__the_statistics_a_test_left_are_put_back(pool: DatabasePool, rows: str) -> None:
    # ANALYZE's counts stay whatever becomes of the rows: rolled back, the tables were
    # empty (so not reset) and still planned the next test's statements from them
    name = pool.acquire()
    template = stats(pool, name)
    with connect(pool, name) as c:
        with c.transaction(force_rollback=rows == "rolled back"):
            write(c, events=3)
            c.execute("ANALYZE engine_events, erp_brands")
        c.execute("ANALYZE engine_jobs")  # empty all along
    assert stats(pool, name) != template
    pool.release(name)
    assert pool.acquire() == name
    assert as_template(stats(pool, name), template), stats(pool, name)
    with connect(pool, name) as c:
        left = c.execute(
            "SELECT count(*) AS n FROM pg_statistic s JOIN pg_class t ON t.oid = s.starelid"
            " WHERE t.relnamespace = 'public'::regnamespace"
        ).fetchone()
    assert left == {"n": 0}


def test_reset__rows_alone_skip_the_full_schema_comparison(pool: DatabasePool) -> None:
    name = pool.acquire()
    for events in (3, 3, 5000, 3):
        with connect(pool, name) as c:
            write(c, events=events)
        pool.release(name)
        assert pool.acquire() == name
    # the first reset knew no signature; a TRUNCATE's rewritten catalog rows are its own
    assert (pool.compared, pool.resets, pool.recreated) == (1, 4, 0)


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE erp_brands ADD COLUMN note text",
        "ALTER TABLE erp_brands ALTER COLUMN name DROP NOT NULL",
        "CREATE INDEX brands_by_name ON erp_brands (name)",
        "REVOKE SELECT ON engine_jobs FROM engine_worker",
        "ALTER DATABASE {db} SET work_mem = '7MB'",
        "ALTER TABLE engine_events DISABLE TRIGGER USER",
        "CREATE FUNCTION test_made() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    ],
)
def test_reset__a_schema_change_after_a_reset_still_drops_the_database(
    pool: DatabasePool, change: str
) -> None:
    name = pool.acquire()
    with connect(pool, name) as c:
        write(c, events=3)
    pool.release(name)  # its signature is known from here on
    assert pool.acquire() == name
    with connect(pool, name) as c:
        c.execute(change.format(db=name))
    pool.release(name)
    assert pool.recreated == 1
    assert pool.acquire() != name
