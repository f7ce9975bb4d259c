"""A sweep checks a slice of the queue, not the whole of it (invariants 9 and 13).

Each sweep looks at the next ``sweep_scan`` pending step runs (by when they
became due) and as many running ones (by lease expiry), from where the last
sweep stopped, and starts over once a part reaches its end: with the whole
queue read, a round at 1.5M pending step runs took 33 s, every 5 s (re-checking
every announcement, finding step runs under ended jobs). A queue no deeper
than the scan is checked whole at each sweep, as before; a deeper one within
a pass of several sweeps: a lost message or an ended job's leftover waits
longer in a deep queue, and is never missed.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from harness import fast_settings, flows_registry, run_of

from engine import submit
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.runner import claim
from engine.store import Claimed, db
from engine.transports.message import StepMessage
from engine.transports.postgres import PostgresTransport
from engine.worker import sweeper as sweeper_module
from engine.worker.sweeper import Sweeper

ALL = flows_registry().runnable()


def _queue(settings: Settings, n: int) -> list[uuid.UUID]:
    """``n`` jobs whose first step run is pending and due, their messages lost; the step
    runs in the order a sweep reads them (when they became due)."""
    jobs = [
        submit("chain", {"n": i}, settings=settings, registry=flows_registry()) for i in range(n)
    ]
    with db.connect(settings, autocommit=True) as c:
        c.execute("DELETE FROM engine_outbox")
        c.execute("DELETE FROM engine_queue")
        rows = c.execute(
            "SELECT id FROM engine_step_runs WHERE job_id = ANY (%s) AND status = 'pending' "
            "ORDER BY available_at, id",
            ([j.job_id for j in jobs],),
        ).fetchall()
    return [r["id"] for r in rows]


def _announced(conn: psycopg.Connection[Any]) -> set[uuid.UUID]:
    return {r["step_run_id"] for r in conn.execute("SELECT step_run_id FROM engine_outbox")}


def _sweeper(settings: Settings) -> Sweeper:
    return Sweeper(settings, PostgresTransport(settings), "sweeper", AlertRecorder([]))


@pytest.fixture
def scan3(settings: Settings) -> Settings:
    return fast_settings(settings).model_copy(update={"sweep_scan": 3})


def test_sweep__a_queue_deeper_than_the_scan_is_announced_a_slice_a_sweep_in_order(
    scan3: Settings, conn: psycopg.Connection[Any]
) -> None:
    queued = _queue(scan3, 7)
    sweeper = _sweeper(scan3)
    found = []
    with db.connect(scan3, autocommit=True) as c:
        first = sweeper.sweep(c).announced
        assert _announced(conn) == set(queued[:3])  # the three that became due first
        found = [first] + [sweeper.sweep(c).announced for _ in range(3)]
    # the third slice reached the end; the fourth started over and found them announced
    assert found == [3, 3, 1, 0]
    assert _announced(conn) == set(queued)


@pytest.mark.parametrize("scan", [1, 2, 5, 100])
def test_sweep__every_claimable_step_run_is_announced_within_a_pass_whatever_the_scan(
    settings: Settings, conn: psycopg.Connection[Any], scan: int
) -> None:
    fast = fast_settings(settings).model_copy(update={"sweep_scan": scan})
    pending = _queue(fast, 5)
    # two of them claimed by a worker that died: running, their leases expired
    with db.connect(fast, autocommit=True) as c:
        for run in pending[:2]:
            job = run_of_id(conn, run)
            assert isinstance(
                claim(c, StepMessage(job_id=job, step_run_id=run), "dead", 30, ALL), Claimed
            )
    conn.execute("DELETE FROM engine_outbox")
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE id = ANY (%s)",
        (pending[:2],),
    )
    sweeper = _sweeper(fast)
    passes = -(-3 // scan)  # the longer part (3 pending) in slices of scan
    with db.connect(fast, autocommit=True) as c:
        for _ in range(passes):
            sweeper.sweep(c)
    assert _announced(conn) == set(pending)


def run_of_id(conn: psycopg.Connection[Any], step_run_id: uuid.UUID) -> uuid.UUID:
    row = conn.execute("SELECT job_id FROM engine_step_runs WHERE id = %s", (step_run_id,))
    found = row.fetchone()
    assert found is not None
    job_id: uuid.UUID = found["job_id"]
    return job_id


def test_sweep__a_step_run_under_an_ended_job_deep_in_the_queue_is_cancelled_by_its_slice(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    fast = fast_settings(settings).model_copy(update={"sweep_scan": 2})
    queued = _queue(fast, 5)
    last = run_of_id(conn, queued[-1])
    # a job ended by an older engine, its first step run left pending
    conn.execute(
        "UPDATE engine_jobs SET status = 'failed', finished_at = now() WHERE id = %s", (last,)
    )
    sweeper = _sweeper(fast)
    with db.connect(fast, autocommit=True) as c:
        cancelled = [sweeper.sweep(c).cancelled for _ in range(3)]
    assert cancelled == [0, 0, 1]  # in the third slice (queued[4])
    assert run_of(conn, last, "a")["status"] == "cancelled"


def test_sweep__a_slice_is_not_passed_over_when_another_sweeper_holds_the_round(
    scan3: Settings, conn: psycopg.Connection[Any]
) -> None:
    queued = _queue(scan3, 4)
    sweeper = _sweeper(scan3)
    with db.connect(scan3) as holder, db.connect(scan3, autocommit=True) as c:
        holder.execute("SELECT pg_advisory_xact_lock(hashtextextended('engine.sweeper', 0))")
        assert sweeper.sweep(c).announced == 0  # another sweeper's round
        holder.rollback()
        assert sweeper.sweep(c).announced == 3  # the first slice, not the second
    assert _announced(conn) == set(queued[:3])


def test_sweep__a_slice_whose_announcements_reach_the_limit_is_taken_again(
    scan3: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a backlog whose messages all went stale goes round at the limit's pace, and the
    # rest of a slice cut short is announced the next round, not a pass later
    monkeypatch.setattr(sweeper_module, "_ANNOUNCE_LIMIT", 2)
    queued = _queue(scan3, 7)
    sweeper = _sweeper(scan3)
    with db.connect(scan3, autocommit=True) as c:
        found = [sweeper.sweep(c).announced for _ in range(6)]
    assert found == [2, 1, 2, 1, 1, 0]
    assert _announced(conn) == set(queued)


def test_sweep__a_slice_whose_cancellations_reach_the_limit_is_taken_again(
    scan3: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweeper_module, "_CANCEL_LIMIT", 1)
    queued = _queue(scan3, 3)
    ended = [run_of_id(conn, run) for run in queued[:2]]
    conn.execute(
        "UPDATE engine_jobs SET status = 'failed', finished_at = now() WHERE id = ANY (%s)",
        (ended,),
    )
    sweeper = _sweeper(scan3)
    with db.connect(scan3, autocommit=True) as c:
        cancelled = [sweeper.sweep(c).cancelled for _ in range(3)]
    # the second job's leftover the next round, not a pass later
    assert cancelled == [1, 1, 0]
    assert {run_of(conn, job, "a")["status"] for job in ended} == {"cancelled"}
