"""A retirement: its statements read the batch, its foreign keys' checks keep their plans.

``engine_retire_jobs`` deletes a batch of families in one transaction; every
deleted job and step run fires the checks of the foreign keys that point at it
(dead letters, outbox rows, child jobs, signals, schedule fires): about a dozen
a job. PostgreSQL plans each check once a session and keeps the plan, unless
the session forces custom plans: the function did (``plan_cache_mode``,
migration 0031, so that its own statements were planned for each batch's
arrays), and that planned every check again for every deleted row. At 1M step
runs that was 59 ms of CPU a batch of 100 jobs against 17 ms with the checks'
plans kept, CPU the claims wait for on two cores (``BENCH_ONLY=retention``).

Its own statements, planned generically after five batches of one session,
still read the batch's rows, not the backlog, with no statistics.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from engine.store.job_summaries import job_retire_many

BACKLOG = 2000  # pending jobs, three step runs each
BATCHES = 8  # past the five custom plans after which a session may keep a generic one
BATCH = 5  # families a retirement transaction takes


def _seed(conn: psycopg.Connection[Any]) -> list[uuid.UUID]:
    """A backlog of pending jobs and BATCHES x BATCH finished ones with their rows; the latter."""
    conn.execute(
        "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint)"
        " SELECT gen_random_uuid(), 'noop', 1, '{}', md5('p' || g) || md5('q' || g)"
        " FROM generate_series(1, %s) AS g",
        (BACKLOG,),
    )
    finished = [
        r["id"]
        for r in conn.execute(
            "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, status,"
            " created_at, started_at, finished_at)"
            " SELECT gen_random_uuid(), 'noop', 1, '{}', md5('f' || g) || md5('g' || g), 'done',"
            " now() - interval '30 days', now() - interval '30 days',"
            " now() - interval '30 days' + g * interval '1 second'"
            " FROM generate_series(1, %s) AS g RETURNING id",
            (BATCHES * BATCH,),
        ).fetchall()
    ]
    conn.execute(
        "INSERT INTO engine_step_runs (id, job_id, step, fingerprint, status, max_attempts, output)"
        " SELECT gen_random_uuid(), j.id, s, repeat('a', 64),"
        " CASE WHEN j.status = 'done' THEN 'done' ELSE 'pending' END, 3,"
        " CASE WHEN j.status = 'done' THEN '{}'::jsonb END"
        " FROM engine_jobs AS j, unnest(ARRAY['a', 'b', 'c']) AS s"
    )
    conn.execute(
        "INSERT INTO engine_events (at, kind, job_id, step_run_id, worker, attempt)"
        " SELECT now(), k, r.job_id, r.id, 'w1', 1 FROM engine_step_runs AS r,"
        " unnest(ARRAY['claimed', 'succeeded']) AS k WHERE r.status = 'done'"
    )
    conn.execute(
        "INSERT INTO engine_job_tags (job_id, name, value, job_created_at)"
        " SELECT id, 'param.n', '1', created_at FROM engine_jobs WHERE status = 'done'"
    )
    return finished


def _read_so_far(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Rows this session read of each live table, by any scan, since it last reported them."""
    return {
        r["relname"]: r["seq_tup_read"] + r["idx_tup_fetch"]
        for r in conn.execute(
            "SELECT relname, seq_tup_read, coalesce(idx_tup_fetch, 0) AS idx_tup_fetch"
            " FROM pg_stat_xact_user_tables"
            " WHERE relname IN ('engine_jobs', 'engine_step_runs', 'engine_events')"
        ).fetchall()
    }


def test_retire__each_batch_reads_its_rows_and_the_foreign_key_checks_keep_their_plans(
    conn: psycopg.Connection[Any],
) -> None:
    finished = _seed(conn)  # no statistics: a new database, as the tests' server runs
    horizon = conn.execute("SELECT now() AS at").fetchone()
    assert horizon is not None
    for n in range(BATCHES):
        roots = finished[n * BATCH : (n + 1) * BATCH]
        with conn.transaction():
            before = _read_so_far(conn)  # the backend's counts not yet reported, if any
            gone = job_retire_many(conn, roots, [horizon["at"]] * BATCH, {})
            read = {t: n - before.get(t, 0) for t, n in _read_so_far(conn).items()}
        assert sorted(g["job_id"] for g in gone) == sorted(roots)
        # a batch is 5 jobs, 15 step runs, 30 events (and each deleted row's checks);
        # a scan of the backlog would read its 2,000 jobs or 6,000 step runs
        assert all(rows <= 20 * 3 * BATCH for rows in read.values()), (n, read)

    # the checks of the foreign keys that point at a deleted step run or job kept one
    # generic plan each in this session (a custom plan is made and freed for each row)
    contexts = conn.execute(
        "SELECT name, ident FROM pg_backend_memory_contexts"
        " WHERE ident LIKE 'SELECT 1 FROM ONLY %% WHERE $1 OPERATOR%%'"
    ).fetchall()
    checks = {c["ident"] for c in contexts if c["name"] == "CachedPlanSource"}
    kept = {c["ident"] for c in contexts if c["name"] == "CachedPlan"}
    referencing = {"engine_outbox", "engine_dead_letters", "engine_jobs", "engine_signals"}
    assert {t for t in referencing if any(f'"public"."{t}"' in c for c in checks)} == referencing
    assert checks - kept == set(), "a foreign key's check planned again for each deleted row"


def test_retire__the_events_guard_checks_a_statement_not_each_deleted_event(
    conn: psycopg.Connection[Any],
) -> None:
    """Events are append-only but for a retired job's: a guard checks every DELETE. As a
    row trigger it ran, and looked the summary up, once per deleted event (about eight a
    job: 6 ms of a 25 ms batch of 100 jobs at 10M step runs); it checks the statement's
    deleted rows together now (migration 0042)."""
    finished = _seed(conn)[: 2 * BATCH]
    horizon = conn.execute("SELECT now() AS at").fetchone()
    assert horizon is not None
    conn.execute("SET track_functions = 'pl'")  # this session's calls, counted per function
    with conn.transaction():
        gone = job_retire_many(conn, finished, [horizon["at"]] * len(finished), {})
        calls = conn.execute(
            "SELECT p.proname, pg_stat_get_xact_function_calls(p.oid) AS n FROM pg_proc AS p"
            " WHERE p.proname LIKE 'engine_events%%'"
            " AND pg_stat_get_xact_function_calls(p.oid) IS NOT NULL"
        ).fetchall()
    assert sum(g["events"] for g in gone) == 2 * 3 * len(finished)  # two per step run
    assert {c["proname"]: c["n"] for c in calls} == {"engine_events_delete_guard": 1}


def test_retire__a_deleted_key_is_not_looked_up_again_before_its_references_are(
    conn: psycopg.Connection[Any],
) -> None:
    """The foreign keys that point at a job or a step run refuse its delete while a row
    still references it. As NO ACTION (the default) each first looked up whether another
    row now held the deleted key (a second query per key and referencing table: 1,400 a
    batch of 100 jobs, about a quarter of its time at 10M step runs); as RESTRICT
    (migration 0043) they check the references alone, and refuse the same deletes."""
    finished = _seed(conn)[:BATCH]
    horizon = conn.execute("SELECT now() AS at").fetchone()
    assert horizon is not None
    # a session of its own: the seed's inserts looked their keys up (the same query)
    with psycopg.connect(conn.info.dsn, autocommit=True, row_factory=dict_row) as fresh:
        with fresh.transaction():
            gone = job_retire_many(fresh, finished, [horizon["at"]] * BATCH, {})
        lookups = fresh.execute(
            "SELECT ident FROM pg_backend_memory_contexts WHERE name = 'CachedPlanSource'"
            " AND ident LIKE 'SELECT 1 FROM ONLY %% x WHERE \"id\" OPERATOR%%'"
        ).fetchall()
    assert len(gone) == BATCH
    assert [r["ident"] for r in lookups] == []
