"""Child jobs through worker processes: a parent waits across a kill -9 of its worker."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from harness import fast_settings, start_worker_process, wait_job_ended, wait_until

from engine import signal, submit
from engine.config import Settings
from engine.flow.registry import Registry

pytestmark = pytest.mark.acceptance

MODULES = ["testflows", "childflows"]


def waiting(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> bool:
    row = conn.execute(
        "SELECT 1 FROM engine_step_runs WHERE job_id = %s AND status = 'waiting'", (job_id,)
    ).fetchone()
    return row is not None


def test_children__the_parent_waits_across_a_kill9_and_resumes_with_the_same_children(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    fast = fast_settings(settings, flow_modules=MODULES)
    job = submit(
        "brood", {"children": 2, "hold": True}, settings=fast, registry=Registry.load(MODULES)
    ).job_id
    first = start_worker_process(settings, flow_modules=MODULES, concurrency=1)
    second = None
    try:
        wait_until(lambda: waiting(conn, job), what="the parent to wait")
        kids = [
            r["id"]
            for r in conn.execute(
                "SELECT id FROM engine_jobs WHERE parent_job_id = %s ORDER BY child_key", (job,)
            ).fetchall()
        ]
        assert len(kids) == 2
        for k in kids:
            wait_until(lambda k=k: waiting(conn, k), what="a child to hold")
        first.kill()  # nothing is running: the parent and its children wait in the database
        for k in kids:
            signal(k, "release", settings=fast)
        second = start_worker_process(settings, flow_modules=MODULES, concurrency=1)
        assert wait_job_ended(conn, job, timeout=60) == "done"
    finally:
        first.kill()
        if second is not None:
            second.stop(10)
    out = conn.execute(
        "SELECT output FROM engine_step_runs WHERE job_id = %s AND step = 'spawn'", (job,)
    ).fetchone()
    assert out is not None
    assert [(o["job_id"], o["status"]) for o in out["output"]["outcomes"]] == [
        (str(k), "done") for k in kids
    ]
    total = conn.execute("SELECT count(*) AS n FROM engine_jobs WHERE flow = 'kid'").fetchone()
    assert total == {"n": 2}
