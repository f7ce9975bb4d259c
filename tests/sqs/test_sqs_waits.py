"""Durable waits on the SQS transport (moto in-process, real PostgreSQL, a worker in a thread).

A signal's wake is announced through the outbox and relayed after the
commit; a timeout's wake by the sweeper's re-announcement; a copy of the
step run's message arriving while it waits is deleted, not looped.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import psycopg
from harness import fast_settings, thread_worker, wait_job_ended, wait_until

from engine import signal, submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.store import db
from engine.transports.message import StepMessage
from engine.transports.sqs_queues import Queues

MODULES = ["testflows", "waitflows"]


def gate(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM engine_step_runs WHERE job_id = %s AND step = 'gate'", (job_id,)
    ).fetchone()
    return {} if row is None else dict(row)


def test_wait__over_sqs_frees_the_slot_and_the_signal_resumes_it(
    settings: Settings, conn: psycopg.Connection[Any], queues: Queues, transports: Any
) -> None:
    fast = fast_settings(settings, flow_modules=MODULES)  # one slot
    registry = Registry.load(MODULES)
    publisher = transports()
    job = submit("approval", {}, settings=fast, registry=registry, publisher=publisher).job_id
    with thread_worker(fast, registry, transport=transports()):
        wait_until(lambda: gate(conn, job).get("status") == "waiting", what="the gate to wait")
        run = gate(conn, job)
        assert (run["attempts"], run["lease_token"]) == (0, None)
        # a stray copy of its message while it waits is deleted, costs nothing
        publisher.send_raw(StepMessage(job_id=job, step_run_id=run["id"]).encode())
        other = submit("chain", {"n": 1}, settings=fast, registry=registry, publisher=publisher)
        assert wait_job_ended(conn, other.job_id) == "done"
        assert gate(conn, job)["status"] == "waiting"
        # from the caller's transaction: the wake leaves as an outbox row at the commit
        with db.connect(fast) as caller:
            sent = signal(
                job, "go", {"by": "acct"}, conn=caller, settings=fast, publisher=publisher
            )
            caller.commit()
        assert sent.woken == 1
        assert wait_job_ended(conn, job) == "done"
    run = gate(conn, job)
    assert (run["attempts"], run["output"]["data"]) == (1, {"by": "acct"})


def test_wait__over_sqs_a_timeout_is_woken_by_the_sweeper(
    settings: Settings, conn: psycopg.Connection[Any], queues: Queues, transports: Any
) -> None:
    fast = fast_settings(settings, flow_modules=MODULES)
    registry = Registry.load(MODULES)
    publisher = transports()
    job = submit(
        "approval",
        {"timeout_s": timedelta(days=3).total_seconds(), "handle_timeout": True},
        settings=fast,
        registry=registry,
        publisher=publisher,
    ).job_id
    with thread_worker(fast, registry, transport=transports()):
        wait_until(lambda: gate(conn, job).get("status") == "waiting", what="the gate to wait")
        conn.execute(
            "UPDATE engine_step_runs SET wait_until = now() - interval '1 s' "
            "WHERE job_id = %s AND step = 'gate'",
            (job,),
        )
        assert wait_job_ended(conn, job) == "done"
    assert gate(conn, job)["output"]["timed_out"] is True
