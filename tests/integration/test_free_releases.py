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
from harness import fast_settings, flows_registry, thread_worker, wait_job_ended, wait_until
from test_group_commit import group_order, one_runner, receive_all

from engine import submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.runner import StepRunner
from engine.runner.attempt import Attempt
from engine.runner.execution import Executor
from engine.runner.group import GroupCommit

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
        "SELECT step_run_id, detail FROM engine_history WHERE job_id = %s AND kind = 'released' "
        "ORDER BY at, id",
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
                or [
                    r
                    for r in runs_of(conn, job, "pups" if flow == "litter" else "keyed_pups")
                    if r["fanout_key"] == "1" and r["status"] == "done"
                ]
            ),
            what="the sibling to checkpoint or be released",
        )
        childflows.EVENTS["go_on"].set()
        assert wait_job_ended(conn, job) == "done"
        # the children committed with part 0's checkpoint, and run
        kids = wait_until(
            lambda: (
                (
                    rows := conn.execute(
                        "SELECT status FROM engine_jobs WHERE parent_job_id = %s", (job,)
                    ).fetchall()
                )
                and all(r["status"] == "done" for r in rows)
                and rows
            ),
            what="the children to end",
        )
    assert released(conn, job) == [], "the sibling's checkpoint waited on part 0's child"
    assert sibling[0]["attempts"] == 1
    assert childflows.BODY_RUNS[(str(job), "1")] == 1, "the sibling's body ran again"
    assert childflows.BODY_RUNS[(str(job), "0")] == 1
    assert len(kids) == children


def hold_successor(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> None:
    """Insert, uncommitted, the step run ``second`` of ``job_id``: whoever schedules it
    (``first``'s checkpoint) waits for this transaction, past its lock_timeout."""
    conn.execute(
        "INSERT INTO engine_step_runs (id, job_id, step, fingerprint, max_attempts) "
        "VALUES (%s, %s, 'second', %s, 1)",
        (uuid.uuid4(), job_id, "0" * 64),
    )


def waits_on(conn: psycopg.Connection[Any], holder: psycopg.Connection[Any]) -> Iterator[int]:
    """How many times a session began to wait for ``holder`` so far (one per look)."""
    seen, blocked = 0, False
    while True:
        now = bool(
            conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE %s = ANY (pg_blocking_pids(pid))",
                (holder.info.backend_pid,),
            ).fetchone()
        )
        seen += now and not blocked
        blocked = now
        yield seen


def test_free_releases__a_checkpoint_that_always_waits_is_charged_then_dead_lettered_with_why(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, settings: Settings
) -> None:
    bounded = fast.model_copy(
        update={
            "lock_timeout_s": 0.2,
            "checkpoint_retries": 1,
            "free_releases_max": 2,
            "max_attempts": 2,
            "concurrency": 1,
        }
    )
    job = submit("counted", {}, settings=bounded, registry=registry).job_id
    with psycopg.connect(conn.info.dsn, autocommit=False) as holder:
        hold_successor(holder, job)
        with thread_worker(bounded, registry):
            assert wait_job_ended(conn, job) == "failed"
        holder.rollback()
    # two free releases, then each release charged: 2 + max_attempts body runs, no more
    assert childflows.BODY_RUNS[(str(job), "first")] == 4
    run = conn.execute(
        "SELECT * FROM engine_step_runs WHERE job_id = %s AND step = 'first'", (job,)
    ).fetchone()
    assert run is not None
    assert (run["status"], run["attempts"], run["free_releases"]) == ("dead", 2, 2)
    assert "released 2 times without charge" in run["error"]["message"]
    assert "lock timeout" in run["error"]["message"]
    frees = released(conn, job)
    assert [r["detail"]["free_release"] for r in frees] == [1, 2]
    assert all("lock timeout" in r["detail"]["reason"] for r in frees)
    charged = conn.execute(
        "SELECT attempt, detail FROM engine_history WHERE job_id = %s AND kind = 'retried'",
        (job,),
    ).fetchall()
    assert [c["attempt"] for c in charged] == [1]
    assert charged[0]["detail"]["charged"] == "free releases spent"
    alerts = conn.execute(
        "SELECT source, attempts, reason, error_line FROM engine_alerts WHERE job_id = %s "
        "ORDER BY id",
        (job,),
    ).fetchall()
    assert [(a["source"], a["attempts"]) for a in alerts] == [("release", 1), ("step", 2)]
    for alert in alerts:
        assert "released 2 times without charge" in alert["reason"]
        assert "lock timeout" in alert["error_line"]


def test_free_releases__a_checkpoint_that_waits_a_while_is_tried_again_not_the_body(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    # the lock is let go during the checkpoint's tries: the body ran once, nothing released
    bounded = fast.model_copy(
        update={"lock_timeout_s": 0.2, "checkpoint_retries": 20, "concurrency": 1}
    )
    job = submit("counted", {}, settings=bounded, registry=registry).job_id
    with psycopg.connect(conn.info.dsn, autocommit=False) as holder:
        hold_successor(holder, job)
        with thread_worker(bounded, registry):
            wait_until(lambda: childflows.BODY_RUNS[(str(job), "first")] == 1, what="first to run")
            # its checkpoint waits for the holder, gives up, and waits again
            waits = waits_on(conn, holder)
            wait_until(lambda: next(waits) >= 2, what="the second wait on the held step key")
            holder.rollback()
            assert wait_job_ended(conn, job) == "done"
    assert childflows.BODY_RUNS[(str(job), "first")] == 1
    assert released(conn, job) == []
    first = conn.execute(
        "SELECT attempts, free_releases FROM engine_step_runs WHERE job_id = %s AND step = 'first'",
        (job,),
    ).fetchone()
    assert first == {"attempts": 1, "free_releases": 0}


def test_group__a_members_checkpoint_that_waits_is_written_again_alone_not_its_body(
    settings: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # fan's plans (no StepContext) share a group; the middle job's row is held by
    # another session when its plan checkpoints: its savepoint goes, its
    # neighbours commit, and then its checkpoint alone is written again with the
    # output in hand (the lock let go by then): each plan's body ran once
    fast = fast_settings(settings, group_commit_ms=5000, lock_timeout_s=0.3)
    monkeypatch.setattr(StepRunner, "_together", lambda self, quick: ([], quick))
    jobs = [
        submit("fan", {"n": n}, settings=fast, registry=flows_registry()).job_id for n in (1, 2, 3)
    ]
    holders: list[psycopg.Connection[Any]] = []
    computed: list[uuid.UUID] = []
    compute, commit = Executor.compute, GroupCommit.commit

    def hooked(self: Executor, attempt: Attempt) -> Any:
        if attempt.step.name == "plan":
            computed.append(attempt.claimed.job_id)
            if attempt.claimed.job_id == victim and not holders:
                holder = psycopg.connect(conn.info.dsn)
                holder.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR UPDATE", (victim,))
                holders.append(holder)
        return compute(self, attempt)

    def committed(self: GroupCommit) -> None:
        commit(self)
        for holder in holders:
            holder.rollback()  # the neighbours committed: the lock goes

    with one_runner(fast) as (runner, transport):
        batch = receive_all(transport, 3)
        victim = group_order(batch)[1]
        monkeypatch.setattr(Executor, "compute", hooked)
        monkeypatch.setattr(GroupCommit, "commit", committed)
        try:
            outcomes = runner.handle_batch(batch)
        finally:
            for h in holders:
                h.close()
    assert holders, "the victim's job row was held"
    assert sorted(computed) == sorted(jobs), "a plan's body ran again"
    assert "released" not in [o.kind for o in outcomes]
    for job in jobs:
        plan = conn.execute(
            "SELECT status, attempts, free_releases FROM engine_step_runs "
            "WHERE job_id = %s AND step = 'plan'",
            (job,),
        ).fetchone()
        assert plan == {"status": "done", "attempts": 1, "free_releases": 0}
    assert all(released(conn, job) == [] for job in jobs)
