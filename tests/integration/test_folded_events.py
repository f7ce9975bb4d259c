"""A step run's first claim and its success, and a job's submit and its end done, are columns
of their rows, not event rows (issue 38).

The history still shows them: ``engine_history`` (migration 0035) reads them
back as the claimed and succeeded events, and the run report's history
(``job_history``) has them in the order they happened; a later claim, a
reclaim, is an event row as before.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from harness import fast_settings, flows_registry, run_of, thread_worker, wait_job_ended

from engine import submit
from engine.config import Settings
from engine.store import db
from engine.store.claims import step_claim_if_available
from engine.store.read import job_history, sqlalchemy_engine


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings)


def kinds(conn: psycopg.Connection[Any], table: str, job_id: uuid.UUID) -> list[str]:
    query = {
        "engine_events": "SELECT kind FROM engine_events WHERE job_id = %s ORDER BY at, id",
        "engine_history": "SELECT kind FROM engine_history WHERE job_id = %s ORDER BY at, id",
    }[table]
    return [r["kind"] for r in conn.execute(query, (job_id,)).fetchall()]


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "every-step-delivered"])
def test_folded__a_chain_writes_no_claim_or_success_row_and_its_history_shows_them(
    fast: Settings, conn: psycopg.Connection[Any], eager: bool
) -> None:
    settings = fast.model_copy(update={"eager_successors": eager})
    job = submit("chain", {"n": 3}, settings=settings, registry=flows_registry())
    with thread_worker(settings):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert kinds(conn, "engine_events", job.job_id) == [], "not one event row (0037: the submit)"
    history = kinds(conn, "engine_history", job.job_id)
    assert history == ["submitted", *["claimed", "succeeded"] * 3, "job_done"]
    engine = sqlalchemy_engine(settings)
    try:
        read = job_history(engine, job.job_id)
    finally:
        engine.dispose()
    assert read is not None
    steps = {r.id: r.step for r in read.runs}
    seen = [(steps[e.step_run_id], e.kind.value, e.attempt) for e in read.events if e.step_run_id]
    assert seen == [(s, k, 1) for s in "abc" for k in ("claimed", "succeeded")], (
        "the report reads each first claim and success, in order, with its attempt"
    )
    succeeded = [e for e in read.events if e.kind.value == "succeeded"]
    assert all(e.worker and {"started_at", "ran_s"} <= set(e.detail) for e in succeeded)
    claimed = [e for e in read.events if e.kind.value == "claimed"]
    assert [e.detail.get("eager", False) for e in claimed] == [False, eager, eager]


def test_folded__a_reclaim_is_an_event_row_after_the_folded_first_claim(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {"n": 3}, settings=fast, registry=flows_registry())
    first = run_of(conn, job.job_id, "a")
    runnable = [f"chain:{flows_registry().get('chain').version}"]
    with db.connect(fast) as zombie:  # claims a, then is never heard of again
        step_claim_if_available(
            zombie,
            step_run_id=first["id"],
            job_id=job.job_id,
            worker="zombie",
            lease_s=30,
            runnable=runnable,
        )
        zombie.commit()
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE id = %s",
        (first["id"],),
    )
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"
    rows = conn.execute(
        "SELECT kind, worker, attempt, id IS NULL AS folded FROM engine_history "
        "WHERE step_run_id = %s AND kind IN ('claimed', 'reclaimed', 'succeeded') "
        "ORDER BY at, id",
        (first["id"],),
    ).fetchall()
    assert [(r["kind"], r["attempt"], r["folded"]) for r in rows] == [
        ("claimed", 1, True),
        ("reclaimed", 2, False),
        ("succeeded", 2, True),
    ]
    assert rows[0]["worker"] == "zombie" and rows[1]["worker"] == rows[2]["worker"] != "zombie"


@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("engine_step_runs", "started_by", "'someone else'"),
        ("engine_step_runs", "started_detail", "'{\"eager\": true}'::jsonb"),
        ("engine_step_runs", "finished_by", "'someone else'"),
        ("engine_step_runs", "finished_detail", "'{\"ran_s\": 0}'::jsonb"),
        ("engine_jobs", "finished_by", "NULL"),
    ],
)
def test_folded__a_claim_or_success_kept_on_its_row_is_written_once(
    fast: Settings, conn: psycopg.Connection[Any], table: str, column: str, value: str
) -> None:
    """The folded events are history, as append-only as engine_events: once set, even
    the worker's own role (which may update the row) cannot rewrite who or how."""
    job = submit("chain", {"n": 1}, settings=fast, registry=flows_registry())
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"
    key = "job_id" if table == "engine_step_runs" else "id"
    with pytest.raises(psycopg.errors.RaiseException, match="written once"):
        conn.execute(f"UPDATE {table} SET {column} = {value} WHERE {key} = %s", (job.job_id,))
    # the rest of the row is the engine's to update as before
    conn.execute(f"UPDATE {table} SET {column} = {column} WHERE {key} = %s", (job.job_id,))


def test_folded__a_submit_is_its_job_row_and_its_history_shows_the_event_it_was(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    """The submitted event's detail, as the event row had it (flow, params, by), is read
    back from the job's row (migration 0037); the row itself is written once."""
    job = submit("chain", {"n": 2}, settings=fast, registry=flows_registry(), submitted_by="ann")
    row = conn.execute(
        "SELECT at, worker, attempt, detail FROM engine_history "
        "WHERE job_id = %s AND kind = 'submitted'",
        (job.job_id,),
    ).fetchall()
    own = conn.execute("SELECT created_at, params FROM engine_jobs WHERE id = %s", (job.job_id,))
    created = own.fetchone()
    assert created is not None and created["params"]["n"] == 2
    assert row == [
        {
            "at": created["created_at"],
            "worker": None,
            "attempt": None,
            "detail": {"flow": "chain", "params": created["params"], "by": "ann"},
        }
    ]
    assert kinds(conn, "engine_events", job.job_id) == []
    with pytest.raises(psycopg.errors.RaiseException, match="written once"):
        conn.execute(
            "UPDATE engine_jobs SET submitted_detail = '{\"x\": 1}' WHERE id = %s",
            (job.job_id,),
        )
