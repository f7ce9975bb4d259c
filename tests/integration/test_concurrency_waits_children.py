"""Concurrency slots across waits and child jobs, on real PostgreSQL, under races.

A step run parked waiting keeps its key's slot (by status: it has no lease)
through its wake until it is claimed again, ends or is cancelled; every way
a wait ends without a claim announces the next waiter of the key. A child
job inherits the slots of its ancestors: their holds do not count against
it, while every other job of the key still waits. Flows:
``tests/support/keyedflows.py`` (``keyed_gate``, ``keyed_parent``, ``keyed_kid``).
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import keyedflows
import psycopg
import pytest
from harness import fast_settings, run_of, thread_worker, wait_job_ended, wait_until

from engine import signal, store, submit
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.flow.registry import Registry
from engine.jobs import admin
from engine.runner import claim
from engine.store import Claimed, ClaimRefused, db
from engine.transports.message import StepMessage
from engine.transports.postgres import PostgresTransport
from engine.worker.sweeper import Sweeper

REGISTRY = Registry.load(["testflows", "keyedflows"])
ALL = REGISTRY.runnable()


class _ParentsOnly(Registry):
    """Submits kids but runs none (as a worker of an older deploy would not)."""

    def runnable(self) -> list[str]:
        return [r for r in super().runnable() if not r.startswith("keyed_kid:")]


# a worker that runs the parents but not their kids: a kid stays pending for the test to claim
PARENTS_ONLY = _ParentsOnly([keyedflows.keyed_parent, keyedflows.keyed_kid])


@pytest.fixture
def fast(settings: Settings) -> Settings:
    # a refused message comes back only after 15 minutes and the sweeper re-announces
    # after 5: whatever runs a waiter sooner is an announcement by the path under test
    return fast_settings(
        settings,
        concurrency=2,
        flow_modules=["testflows", "keyedflows"],
        over_limit_delay_s=900.0,
        republish_after_s=300.0,
    )


def submit_keyed(settings: Settings, flow: str, **params: Any) -> uuid.UUID:
    return submit(flow, params, settings=settings, registry=REGISTRY).job_id


def message(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str = "b") -> StepMessage:
    return StepMessage(job_id=job_id, step_run_id=run_of(conn, job_id, step)["id"])


def try_claim(settings: Settings, msg: StepMessage, worker: str) -> Claimed | ClaimRefused:
    with db.connect(settings, autocommit=True) as c:
        return claim(c, msg, worker, 30, ALL)


def announced(conn: psycopg.Connection[Any], step_run_id: uuid.UUID) -> int:
    """Announcements due at once: a refusal's delayed copy (its backstop) does not count."""
    row = conn.execute(
        "SELECT count(*) AS n FROM engine_outbox WHERE step_run_id = %s"
        " AND deliver_at < created_at + interval '0.5 s'",
        (step_run_id,),
    ).fetchone()
    assert row is not None
    return int(row["n"])


def first_event(conn: psycopg.Connection[Any], job_id: uuid.UUID, kind: str) -> Any:
    row = conn.execute(
        "SELECT min(at) AS at FROM engine_history WHERE job_id = %s AND kind = %s", (job_id, kind)
    ).fetchone()
    assert row is not None and row["at"] is not None, f"no {kind} event for {job_id}"
    return row["at"]


def parked_holder(fast: Settings, conn: psycopg.Connection[Any], group: str) -> uuid.UUID:
    """A ``keyed_gate`` job whose step run ran, then parked waiting for ``go``."""
    holder = submit_keyed(fast, "keyed_gate", group=group)
    with thread_worker(fast, REGISTRY):
        wait_until(
            lambda: run_of(conn, holder, "b")["status"] == "waiting", what="the holder to park"
        )
    return holder


def sweeper(fast: Settings) -> Sweeper:
    return Sweeper(fast, PostgresTransport(fast), "sweeper", AlertRecorder(["log"]))


# -- a wait keeps its slot ------------------------------------------------------------


def test_wait__a_parked_holder_keeps_its_slot_through_its_wake_until_it_runs_again(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    holder = parked_holder(fast, conn, "park")
    b = run_of(conn, holder, "b")
    assert (b["status"], b["lease_token"], b["concurrency_kept"]) == ("waiting", None, True)
    waiter = submit_keyed(fast, "keyed_gate", group="park", n=1)
    # parked: no lease, yet the slot is held
    assert try_claim(fast, message(conn, waiter), "w2") == ClaimRefused(
        "over_limit", key="gate:park"
    )
    signal(holder, "go", settings=fast)
    # woken, not yet claimed again: still held (no other job slips in before it resumes)
    assert run_of(conn, holder, "b")["status"] == "pending"
    assert try_claim(fast, message(conn, waiter), "w2") == ClaimRefused(
        "over_limit", key="gate:park"
    )
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, holder) == "done"
        # the holder's checkpoint announces the waiter (its own copy is 15 minutes off)
        wait_until(
            lambda: run_of(conn, waiter, "b")["status"] == "waiting",
            what="the waiter to run once the holder ended",
        )
    assert first_event(conn, holder, "job_done") < first_event(conn, waiter, "claimed")
    assert run_of(conn, holder, "b")["concurrency_kept"] is False  # cleared by its claim
    assert announced(conn, run_of(conn, waiter, "b")["id"]) == 2  # at submit, by the holder


@pytest.mark.parametrize("ending", ["operator cancel", "job ended under it (sweeper)"])
def test_wait__a_wait_ended_without_a_claim_announces_the_next_waiter(
    fast: Settings, conn: psycopg.Connection[Any], ending: str
) -> None:
    holder = parked_holder(fast, conn, "end")
    waiter = submit_keyed(fast, "keyed_gate", group="end", n=1)
    wb = run_of(conn, waiter, "b")["id"]
    assert isinstance(try_claim(fast, message(conn, waiter), "w2"), ClaimRefused)
    before = announced(conn, wb)
    if ending == "operator cancel":
        admin.cancel(fast, holder)
    else:
        # a job ended while its step run waited (an older engine, a manual fix): the
        # sweeper cancels the step run and announces the key's next waiter with it
        conn.execute(
            "UPDATE engine_jobs SET status = 'failed', finished_at = now() WHERE id = %s", (holder,)
        )
        with db.connect(fast, autocommit=True) as c:
            assert sweeper(fast).sweep(c).cancelled == 1
    assert run_of(conn, holder, "b")["status"] == "cancelled"
    assert announced(conn, wb) == before + 1
    assert isinstance(try_claim(fast, message(conn, waiter), "w2"), Claimed)


def test_wait__a_timed_out_wait_keeps_its_slot_until_it_fails_then_announces_the_waiter(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    holder = parked_holder(fast, conn, "late")
    waiter = submit_keyed(fast, "keyed_gate", group="late", n=1)
    wb = run_of(conn, waiter, "b")["id"]
    assert isinstance(try_claim(fast, message(conn, waiter), "w2"), ClaimRefused)
    before = announced(conn, wb)
    conn.execute(
        "UPDATE engine_step_runs SET wait_until = now() - interval '1 s' "
        "WHERE job_id = %s AND step = 'b'",
        (holder,),
    )
    with db.connect(fast, autocommit=True) as c:
        assert sweeper(fast).sweep(c).woken == 1
    # woken by its deadline: pending, its slot still kept until it runs and fails
    assert run_of(conn, holder, "b")["status"] == "pending"
    assert announced(conn, wb) == before
    assert isinstance(try_claim(fast, message(conn, waiter), "w2"), ClaimRefused)
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, holder) == "failed"  # SignalTimeout
        wait_until(
            lambda: run_of(conn, waiter, "b")["status"] == "waiting",
            what="the waiter to run once the holder failed",
        )
    assert announced(conn, wb) == before + 1
    assert first_event(conn, holder, "job_failed") < first_event(conn, waiter, "claimed")


# -- a child inherits its ancestors' slots --------------------------------------------


def parent_waiting_for_its_kid(
    fast: Settings, conn: psycopg.Connection[Any], group: str, **params: Any
) -> tuple[uuid.UUID, uuid.UUID]:
    """A ``keyed_parent`` parked waiting for its ``keyed_kid``, which nobody claimed yet."""
    parent = submit_keyed(fast, "keyed_parent", group=group, **params)
    with thread_worker(fast, PARENTS_ONLY):
        wait_until(
            lambda: run_of(conn, parent, "spawn")["status"] == "waiting",
            what="the parent to park for its child",
        )
    row = conn.execute("SELECT id FROM engine_jobs WHERE parent_job_id = %s", (parent,)).fetchone()
    assert row is not None
    return parent, row["id"]


def test_children__a_barrier_race_of_the_kid_and_outsiders_admits_only_the_kid(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    parent, kid = parent_waiting_for_its_kid(fast, conn, "race")
    outsiders = [submit_keyed(fast, "keyed_kid", group="race", n=i) for i in range(1, 7)]
    jobs = [kid, *outsiders]
    messages = [message(conn, job) for job in jobs]
    barrier = threading.Barrier(len(jobs))
    results: list[Claimed | ClaimRefused] = [ClaimRefused("unset")] * len(jobs)

    def claimer(i: int) -> None:
        with db.connect(fast, autocommit=True) as c:
            barrier.wait(timeout=30)
            results[i] = claim(c, messages[i], f"w{i}", 30, ALL)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    # the parent's waiting hold does not count against its kid; it does against the others
    won = results[0]
    assert isinstance(won, Claimed), won
    assert results[1:] == [ClaimRefused("over_limit", key="fam:race")] * len(outsiders)
    # the kid running and its parent waiting: an outsider still waits
    assert try_claim(fast, messages[1], "late") == ClaimRefused("over_limit", key="fam:race")
    with db.connect(fast, autocommit=True) as c:  # give the kid back for the workers
        assert store.lease_release_if_owner(c, won.id, won.token)
    with thread_worker(fast, REGISTRY):
        for job in (kid, parent, *outsiders):
            assert wait_job_ended(conn, job, timeout=60) == "done"
    parent_done = first_event(conn, parent, "job_done")
    for job in outsiders:
        assert first_event(conn, job, "claimed") > parent_done


def test_children__a_grandchild_inherits_the_slot_of_its_grandparent(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    root = submit_keyed(fast, "keyed_parent", group="tree", n=1, hold_file=str(hold))
    with thread_worker(fast, REGISTRY):
        # root -> keyed_parent (n=0) -> keyed_kid, which holds in its step
        wait_until(lambda: (tmp_path / "hold.started").exists(), what="the grandchild to start")
        outsider = submit_keyed(fast, "keyed_kid", group="tree", n=9)
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM engine_history WHERE job_id = %s AND kind = 'claim_refused'",
                (outsider,),
            ).fetchone(),
            what="the outsider's refusal",
        )
        hold.with_suffix(".release").touch()
        assert wait_job_ended(conn, root, timeout=60) == "done"
        assert wait_job_ended(conn, outsider, timeout=60) == "done"
    tree = conn.execute(
        "WITH RECURSIVE t AS (SELECT id, flow, 0 AS depth FROM engine_jobs WHERE id = %s "
        "UNION ALL SELECT j.id, j.flow, t.depth + 1 FROM engine_jobs AS j "
        "JOIN t ON j.parent_job_id = t.id) "
        "SELECT t.flow, t.depth, j.status FROM t JOIN engine_jobs AS j USING (id) ORDER BY depth",
        (root,),
    ).fetchall()
    assert [(r["flow"], r["depth"], r["status"]) for r in tree] == [
        ("keyed_parent", 0, "done"),
        ("keyed_parent", 1, "done"),
        ("keyed_kid", 2, "done"),
    ]
    assert first_event(conn, outsider, "claimed") > first_event(conn, root, "job_done")


def test_children__cancelling_the_parent_frees_the_key_for_the_next_job(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    parent, kid = parent_waiting_for_its_kid(fast, conn, "cx")
    outsider = submit_keyed(fast, "keyed_kid", group="cx", n=5)
    ob = run_of(conn, outsider, "b")["id"]
    assert isinstance(try_claim(fast, message(conn, outsider), "w1"), ClaimRefused)
    before = announced(conn, ob)
    admin.cancel(fast, parent)
    statuses = conn.execute(
        "SELECT status FROM engine_jobs WHERE id = ANY (%s) ORDER BY id = %s",
        ([parent, kid], parent),
    ).fetchall()
    assert [r["status"] for r in statuses] == ["cancelled", "cancelled"]
    assert announced(conn, ob) == before + 1
    assert isinstance(try_claim(fast, message(conn, outsider), "w1"), Claimed)


def test_children__a_kid_refused_beside_an_outsider_is_announced_when_that_one_ends(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    """An outsider that held the key before (here: by a lease the parent's park outlived)
    ends: the next waiter announced is the kid, whose parent's hold does not block it."""
    parent, kid = parent_waiting_for_its_kid(fast, conn, "sib")
    outsider = submit_keyed(fast, "keyed_kid", group="sib", n=5)
    # the outsider holds beside the waiting parent (as if claimed before the migration)
    conn.execute(
        "UPDATE engine_step_runs SET concurrency_kept = false WHERE job_id = %s", (parent,)
    )
    held = try_claim(fast, message(conn, outsider), "w1")
    assert isinstance(held, Claimed)
    conn.execute("UPDATE engine_step_runs SET concurrency_kept = true WHERE job_id = %s", (parent,))
    kb = run_of(conn, kid, "b")["id"]
    assert try_claim(fast, message(conn, kid), "w2") == ClaimRefused("over_limit", key="fam:sib")
    before = announced(conn, kb)
    admin.cancel(fast, outsider)
    assert announced(conn, kb) == before + 1
    assert isinstance(try_claim(fast, message(conn, kid), "w2"), Claimed)


@pytest.mark.parametrize("flow", ["keyed_jobs", "keyed_parent"])
def test_announce__a_job_holding_its_key_gets_no_announcements_for_its_own_step_runs(
    fast: Settings, conn: psycopg.Connection[Any], flow: str
) -> None:
    """Each checkpoint announces the key's next waiters: never the step runs of the job
    that holds it (nor of a child inheriting it), which were announced once already, or a
    fan-out of n step runs would be sent about n times each."""
    job = submit_keyed(fast, flow, group="fan", n=8 if flow == "keyed_jobs" else 0)
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, job, timeout=60) == "done"
    most = conn.execute(
        "SELECT coalesce(max(n), 0) AS most FROM (SELECT count(o.id) AS n "
        "FROM engine_step_runs AS s JOIN engine_jobs AS j ON j.id = s.job_id "
        "LEFT JOIN engine_outbox AS o ON o.step_run_id = s.id "
        "WHERE s.concurrency_key = 'jobs:fan' OR j.params ->> 'group' = 'fan' "
        "GROUP BY s.id) AS per_run"
    ).fetchone()
    # one at its creation; a parent parked for its child once more, when the child ended
    assert most is not None and most["most"] <= 2
    finished = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE kind = 'claim_refused' "
        "AND detail ->> 'reason' = 'finished'"
    ).fetchone()
    assert finished == {"n": 0}


def test_announce__a_reclaim_refused_over_the_limit_is_announced_when_the_holder_ends(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    """A worker paused past its lease: the key went to another job, and the reclaim of the
    paused step run was refused (its copy due in 15 minutes). The holder's end announces it."""
    paused, holder = (submit_keyed(fast, "keyed", group="rc", n=i) for i in range(2))
    first = try_claim(fast, message(conn, paused), "w1")
    assert isinstance(first, Claimed)
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = now() - interval '1 s' WHERE id = %s",
        (first.id,),
    )
    assert isinstance(try_claim(fast, message(conn, holder), "w2"), Claimed)
    assert try_claim(fast, message(conn, paused), "w3") == ClaimRefused(
        "over_limit", key="group:rc"
    )
    with db.connect(fast, autocommit=True) as c:  # what the refusing worker sends round
        store.outbox_insert_after(c, first.id, 900.0)
    before = announced(conn, first.id)
    admin.cancel(fast, holder)
    assert announced(conn, first.id) == before + 1
    reclaimed = try_claim(fast, message(conn, paused), "w3")
    assert isinstance(reclaimed, Claimed) and reclaimed.attempt == 2


def test_retry__a_cancelled_tree_runs_again_inside_the_roots_slot(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    root = submit_keyed(fast, "keyed_parent", group="rt", n=1, hold_file=str(hold))
    with thread_worker(fast, REGISTRY):
        wait_until(lambda: (tmp_path / "hold.started").exists(), what="the grandchild to start")
        admin.cancel(fast, root, "wrong day")
    child = conn.execute("SELECT id FROM engine_jobs WHERE parent_job_id = %s", (root,)).fetchone()
    assert child is not None
    grandchild = conn.execute(
        "SELECT id FROM engine_jobs WHERE parent_job_id = %s", (child["id"],)
    ).fetchone()
    assert grandchild is not None
    reopened = admin.retry_job(fast, root)
    assert reopened.children == (child["id"], grandchild["id"]), "parents before children"
    # each spawn waits for its child again, the root's holding the key's slot (the
    # child's inherits it); the grandchild's step run is pending, announced
    for job in (root, child["id"]):
        spawn = run_of(conn, job, "spawn")
        assert (spawn["status"], spawn["wait_children"]) == ("waiting", True)
    assert run_of(conn, root, "spawn")["concurrency_kept"]
    assert run_of(conn, grandchild["id"], "b")["status"] == "pending"
    # an outsider of the key is refused while the tree holds it
    outsider = submit_keyed(fast, "keyed_kid", group="rt", n=9)
    assert isinstance(try_claim(fast, message(conn, outsider), "w1"), ClaimRefused)
    with thread_worker(fast, REGISTRY):
        assert wait_job_ended(conn, root, timeout=60) == "done"
        assert wait_job_ended(conn, outsider, timeout=60) == "done"
    for job in (child["id"], grandchild["id"]):
        row = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job,)).fetchone()
        assert row == {"status": "done"}
    assert first_event(conn, outsider, "claimed") > first_event(conn, root, "job_done")


# -- prompt wakes: announced when the key frees, not by the backstop --------------------

BROOD_PARENTS = _ParentsOnly([keyedflows.keyed_brood, keyedflows.keyed_kid])


def test_announce__a_woken_parent_refused_over_its_limit_is_announced_when_its_kid_ends(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    # the refused copy comes back after 15 minutes and the sweeper re-announces
    # after 5 (fast): the parent finishing now is the freed key's announcement
    parent = submit_keyed(fast, "keyed_brood", group="brood")
    with thread_worker(fast, BROOD_PARENTS):
        wait_until(
            lambda: run_of(conn, parent, "spawn")["status"] == "waiting",
            what="the parent to park for its kids",
        )
    kids = [
        r["id"]
        for r in conn.execute(
            "SELECT id FROM engine_jobs WHERE parent_job_id = %s ORDER BY child_key", (parent,)
        ).fetchall()
    ]
    assert isinstance(try_claim(fast, message(conn, kids[0]), "kid-worker"), Claimed)
    admin.cancel(fast, kids[0])  # the first kid ends: the parent is woken, and announced
    # the second kid takes the key before the parent's claim (the parent's
    # hold does not count against its kid; the kid, another job, counts against it)
    assert isinstance(try_claim(fast, message(conn, kids[1]), "kid-worker"), Claimed)
    spawn = run_of(conn, parent, "spawn")["id"]
    with thread_worker(fast, BROOD_PARENTS):
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM engine_history WHERE step_run_id = %s AND kind = 'claim_refused'",
                (spawn,),
            ).fetchone(),
            what="the woken parent's claim to be refused over its limit",
        )
        admin.cancel(fast, kids[1])  # the key frees: the parent is announced now
        assert wait_job_ended(conn, parent, timeout=30) == "done"


def test_announce__an_eager_successor_created_pending_on_a_busy_key_lock_runs_when_it_frees(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    # keyed_chain: a -> b, b under chain:{group}; a's checkpoint creates b leased
    # to itself, trying the key's lock without waiting (under the job's row lock):
    # held by another session at that moment, b is created pending, no holder
    # exists to announce it, and only the sweeper's next round would (here in 2 minutes)
    fast = fast.model_copy(update={"sweep_interval_s": 120.0})
    key_lock = "SELECT pg_advisory_lock(hashtextextended('engine.concurrency:chain:busy', 0))"
    with db.connect(fast, autocommit=True) as locker:
        locker.execute(key_lock)
        job = submit_keyed(fast, "keyed_chain", group="busy")
        with thread_worker(fast, REGISTRY):
            wait_until(
                lambda: conn.execute(
                    "SELECT 1 FROM engine_history WHERE job_id = %s AND kind = 'claim_refused'",
                    (job,),
                ).fetchone(),
                what="b created pending",
            )
            locker.execute(
                "SELECT pg_advisory_unlock(hashtextextended('engine.concurrency:chain:busy', 0))"
            )
            assert wait_job_ended(conn, job, timeout=30) == "done"
    [refused] = conn.execute(
        "SELECT detail FROM engine_history WHERE job_id = %s AND kind = 'claim_refused'", (job,)
    ).fetchall()
    assert refused["detail"]["eager"] is True
