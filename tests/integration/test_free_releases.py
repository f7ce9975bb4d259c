"""A step body runs again only for a reason that is counted (invariant 20, issue 34 item 5).

The engine must not make its own step runs wait on each other: a part of a
fan-out that submits a child and keeps working (its transaction open, the
child's row referencing the job's row in it) must not hold anything a
sibling's checkpoint needs, so the sibling's body runs once. A finished
body's checkpoint that meets a lock wait is tried again with the output in
hand while the lease holds; and a step run released at no charge again and
again is released so at most ``ENGINE_FREE_RELEASES_MAX`` times, then
charged an attempt with an alert that says why.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import childflows
import psycopg
import pytest
from harness import fast_settings, thread_worker, wait_job_ended, wait_until

from engine import submit
from engine.config import Settings
from engine.flow.registry import Registry

MODULES = ["testflows", "childflows"]


@pytest.fixture
def fast(settings: Settings) -> Settings:
    # a lock wait gives up quickly: a sibling made to wait is released within the test
    return fast_settings(settings, flow_modules=MODULES, lock_timeout_s=0.3, concurrency=3)


@pytest.fixture
def registry() -> Registry:
    return Registry.load(MODULES)


@pytest.fixture(autouse=True)
def _events() -> Iterator[None]:
    childflows.EVENTS["submitted"] = threading.Event()
    childflows.EVENTS["go_on"] = threading.Event()
    yield
    childflows.EVENTS["go_on"].set()  # a held part never outlives its test
    childflows.EVENTS.clear()


def runs_of(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT * FROM engine_step_runs WHERE job_id = %s AND step = %s ORDER BY fanout_key",
        (job_id, step),
    ).fetchall()
    return [dict(r) for r in rows]


def released(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT step_run_id, detail FROM engine_events WHERE job_id = %s AND kind = 'released' "
        "ORDER BY id",
        (job_id,),
    ).fetchall()
    return [dict(r) for r in rows]


@pytest.mark.parametrize(("flow", "children"), [("litter", 1), ("keyed_litter", 2)])
def test_fanout__a_sibling_of_a_child_submitting_part_runs_its_body_once(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, flow: str, children: int
) -> None:
    job = submit(flow, {"parts": 2, "children": children}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        wait_until(lambda: childflows.EVENTS["submitted"].is_set(), what="part 0 to submit")
        # part 0 keeps working, its child uncommitted in its transaction; its sibling
        # checkpoints meanwhile (or, were it made to wait, is released and runs again)
        sibling = wait_until(
            lambda: (
                released(conn, job)
                or [r for r in runs_of(conn, job, "pups" if flow == "litter" else "keyed_pups")
                    if r["fanout_key"] == "1" and r["status"] == "done"]
            ),
            what="the sibling to checkpoint or be released",
        )
        childflows.EVENTS["go_on"].set()
        assert wait_job_ended(conn, job) == "done"
    assert released(conn, job) == [], "the sibling's checkpoint waited on part 0's child"
    assert sibling[0]["attempts"] == 1
    assert childflows.BODY_RUNS[(str(job), "1")] == 1, "the sibling's body ran again"
    assert childflows.BODY_RUNS[(str(job), "0")] == 1
    kids = conn.execute(
        "SELECT status FROM engine_jobs WHERE parent_job_id = %s", (job,)
    ).fetchall()
    assert [k["status"] for k in kids] == ["done"] * children
