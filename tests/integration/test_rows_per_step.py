"""What a no-op step writes, counted row by row (issue 38: fewer rows per step).

Every insert, update and delete on the engine's tables while a worker drains
no-op jobs (``bench.noop``: three pure steps a -> b -> c) is counted by a
trigger, so the figure ``make bench-peers`` prints (rows written per no-op
step) is pinned here, and a write that creeps back onto the claim path fails
a test instead of a benchmark nobody reads.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from harness import fast_settings, thread_worker, wait_until
from pydantic import BaseModel

from engine import Flow, submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.infra import faults


class Params(BaseModel):
    i: int


class A(Params):
    pass


class B(Params):
    pass


class C(Params):
    pass


# bench.noop's flow: three steps that do nothing, no StepContext (pure)
noop = Flow("noop", params=Params, description="three no-op steps")


@noop.step()
def a(params: Params) -> A:
    return A(i=params.i)


@noop.step(after=["a"])
def b(x: A) -> B:
    return B(i=x.i)


@noop.step(after=["b"])
def c(x: B) -> C:
    return C(i=x.i)


COUNTER = """
CREATE TABLE test_writes (tbl text NOT NULL, op text NOT NULL);
CREATE FUNCTION test_count_write() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO test_writes VALUES (TG_TABLE_NAME, TG_OP);
    RETURN NULL;
END $$;
"""


def count_writes(conn: psycopg.Connection[Any]) -> None:
    """A row in ``test_writes`` for every row written in an engine table from now on."""
    conn.execute(COUNTER)
    tables = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
        "AND tablename LIKE 'engine%%' AND tablename <> 'engine_migrations'"
    ).fetchall()
    for row in tables:
        conn.execute(
            f"CREATE TRIGGER test_count_{row['tablename']} AFTER INSERT OR UPDATE OR DELETE "
            f"ON {row['tablename']} FOR EACH ROW EXECUTE FUNCTION test_count_write()"
        )


def writes(conn: psycopg.Connection[Any]) -> Counter[tuple[str, str]]:
    rows = conn.execute("SELECT tbl, op, count(*) AS n FROM test_writes GROUP BY 1, 2").fetchall()
    return Counter({(r["tbl"], r["op"]): r["n"] for r in rows})


JOBS = 6


@pytest.fixture
def noop_registry() -> Registry:
    return Registry([noop])


def test_rows__a_no_op_step_writes_ten_rows_a_job(
    settings: Settings, conn: psycopg.Connection[Any], noop_registry: Registry
) -> None:
    """What a worker writes for no-op jobs, row by row, once they were submitted: a write
    that creeps back onto the claim path fails here instead of in a bench nobody reads."""
    fast = fast_settings(settings, concurrency=1)
    jobs = [submit("noop", {"i": i}, settings=fast, registry=noop_registry) for i in range(JOBS)]
    count_writes(conn)
    with thread_worker(fast, noop_registry):
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) AS n FROM engine_jobs WHERE status = 'done'"
                ).fetchone()
                == {"n": JOBS}
            ),
            what="every noop job done",
        )
    counted = writes(conn)
    # each job's one delivery (its first step's) is received (hidden) and then deleted
    assert counted["engine_queue", "UPDATE"] == JOBS, counted
    assert counted["engine_queue", "DELETE"] == JOBS, counted
    assert counted["engine_queue", "INSERT"] == 0, counted
    # no event row at all: the claims, successes and the job's end are folded into rows
    assert counted["engine_events", "INSERT"] == 0, counted
    steps = 3 * JOBS
    # the worker's own liveness (engine_workers) is per worker, not per step
    per_step = sum(n for (table, _), n in counted.items() if table != "engine_workers") / steps
    # per job: the first step run claimed, three checkpoints, two eager successors
    # inserted claimed, the job started and done, its delivery hidden and deleted:
    # 10 rows, 3.33 per step
    assert per_step <= 10 / 3 + 1 / steps, counted
    assert {job.job_id for job in jobs} == {
        r["id"] for r in conn.execute("SELECT id FROM engine_jobs WHERE status = 'done'")
    }


def test_rows__a_slow_commit_does_not_keep_pure_steps_from_sharing_one(
    settings: Settings,
    conn: psycopg.Connection[Any],
    noop_registry: Registry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether a step is quick (batches, one commit for a round) is its own run's time, as a
    round measures it, not its commit's: on a loaded server every commit past the group
    window made each first run look slow, and the slot then claimed and committed one
    step at a time for good (1.5 commits per no-op step instead of about 0.15)."""
    fast = fast_settings(settings, concurrency=1, claim_batch=10)
    for i in range(JOBS):
        submit("noop", {"i": i}, settings=fast, registry=noop_registry)
    monkeypatch.setenv("ENGINE_FAULT_PAUSE_S", "0.2")  # past the 50 ms group window
    faults.enable("after_commit=pause")
    try:
        with thread_worker(fast, noop_registry):
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT count(*) AS n FROM engine_jobs WHERE status = 'done'"
                    ).fetchone()
                    == {"n": JOBS}
                ),
                what="every noop job done",
            )
    finally:
        faults.enable("")
    batched = conn.execute(
        "SELECT count(*) AS n FROM engine_step_runs WHERE started_detail ? 'batch'"
    ).fetchone()
    assert batched is not None and batched["n"] > 0, "no step run was claimed in a batch"
