"""Child jobs on the SQS transport (moto in-process, real PostgreSQL, a worker in a thread).

The children's first messages leave through the outbox (a NOTIFY wakes the
relay at the park's commit); each child's end announces the parent's wake
the same way, relayed after the commit.
"""

from __future__ import annotations

from typing import Any

import psycopg
from harness import fast_settings, thread_worker, wait_job_ended

from engine import submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.transports.sqs_queues import Queues

MODULES = ["testflows", "childflows"]


def test_children__over_sqs_run_on_one_slot_and_wake_their_parent(
    settings: Settings, conn: psycopg.Connection[Any], queues: Queues, transports: Any
) -> None:
    fast = fast_settings(settings, flow_modules=MODULES)  # one slot
    registry = Registry.load(MODULES)
    job = submit(
        "brood",
        {"children": 2, "fail_child": 0},
        settings=fast,
        registry=registry,
        publisher=transports(),
    ).job_id
    with thread_worker(fast, registry, transport=transports()):
        assert wait_job_ended(conn, job) == "done"
    row = conn.execute(
        "SELECT output, attempts FROM engine_step_runs WHERE job_id = %s AND step = 'spawn'",
        (job,),
    ).fetchone()
    assert row is not None and row["attempts"] == 1
    assert [o["status"] for o in row["output"]["outcomes"]] == ["failed", "done"]
    left = conn.execute(
        "SELECT count(*) AS n FROM engine_outbox WHERE published_at IS NULL"
    ).fetchone()
    assert left == {"n": 0}
