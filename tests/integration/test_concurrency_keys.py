"""Concurrency keys on real PostgreSQL: enforced by the claim statement, under races.

A step run over its key's limit is not claimed, costs no attempt and is not
an error; an expired lease frees its slot; a holder that stops (checkpoint,
retry, dead letter, cancel, give-back) announces the next waiter in its own
commit, so a waiter runs at once although its own message was put off for
long. Flows: ``tests/support/keyedflows.py``.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, run_of, thread_worker, wait_job_ended, wait_until

from engine import store, submit
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


@pytest.fixture
def fast(settings: Settings) -> Settings:
    # a refused message comes back only after 15 minutes and the sweeper
    # re-announces after 5: whatever runs a waiter sooner is the holder's announcement
    return fast_settings(
        settings,
        concurrency=2,  # a slot free beside a holder
        flow_modules=["testflows", "keyedflows"],
        over_limit_delay_s=900.0,
        republish_after_s=300.0,
    )


def submit_keyed(settings: Settings, flow: str, **params: Any) -> uuid.UUID:
    return submit(flow, params, settings=settings, registry=REGISTRY).job_id


def message(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str = "b") -> StepMessage:
    return StepMessage(job_id=job_id, step_run_id=run_of(conn, job_id, step)["id"])


def events(conn: psycopg.Connection[Any], job_id: uuid.UUID, kind: str) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT * FROM engine_history WHERE job_id = %s AND kind = %s ORDER BY at, id",
        (job_id, kind),
    ).fetchall()


def announced(conn: psycopg.Connection[Any], step_run_id: uuid.UUID) -> int:
    """Announcements due at once: a refusal's delayed copy (its backstop) does not count."""
    row = conn.execute(
        "SELECT count(*) AS n FROM engine_outbox WHERE step_run_id = %s"
        " AND deliver_at < created_at + interval '0.5 s'",
        (step_run_id,),
    ).fetchone()
    assert row is not None
    return int(row["n"])


# -- the claim: exactly `limit` win ---------------------------------------------------


@pytest.mark.parametrize(("flow", "limit"), [("keyed", 1), ("keyed_pair", 2)])
def test_claim__a_barrier_race_of_many_workers_admits_exactly_the_limit(
    fast: Settings, conn: psycopg.Connection[Any], flow: str, limit: int
) -> None:
    n = 8
    jobs = [submit_keyed(fast, flow, group="race", n=i) for i in range(n)]
    messages = [message(conn, job) for job in jobs]
    barrier = threading.Barrier(n)
    results: list[Claimed | ClaimRefused] = [ClaimRefused("unset")] * n

    def claimer(i: int) -> None:
        with db.connect(fast, autocommit=True) as c:
            barrier.wait(timeout=30)
            results[i] = claim(c, messages[i], f"w{i}", 30, ALL)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    won = [r for r in results if isinstance(r, Claimed)]
    refused = [r for r in results if isinstance(r, ClaimRefused)]
    assert len(won) == limit
    key = f"{'group' if flow == 'keyed' else 'pair'}:race"
    assert refused == [ClaimRefused("over_limit", key=key)] * (n - limit)
    rows = conn.execute(
        "SELECT status, attempts, count(*) AS n FROM engine_step_runs "
        "WHERE concurrency_key = %s GROUP BY 1, 2 ORDER BY 1",
        (key,),
    ).fetchall()
    assert rows == [
        {"status": "pending", "attempts": 0, "n": n - limit},  # no attempt used
        {"status": "running", "attempts": 1, "n": limit},
    ]


def test_claim__over_the_limit_is_a_typed_refusal_recorded_with_its_key(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    holder, waiter = (submit_keyed(fast, "keyed", group="g1", n=i) for i in range(2))
    with db.connect(fast, autocommit=True) as c:
        assert isinstance(claim(c, message(conn, holder), "w1", 30, ALL), Claimed)
        refused = claim(c, message(conn, waiter), "w2", 30, ALL)
        # another key, and a flow without one, are not limited by it
        other = submit_keyed(fast, "keyed", group="g2")
        assert isinstance(claim(c, message(conn, other), "w3", 30, ALL), Claimed)
        free = submit("chain", {}, settings=fast, registry=REGISTRY).job_id
        assert isinstance(claim(c, message(conn, free, "a"), "w4", 30, ALL), Claimed)
    assert refused == ClaimRefused("over_limit", key="group:g1")
    assert refused.explanation == "over its concurrency limit (key 'group:g1')"
    b = run_of(conn, waiter, "b")
    assert (b["status"], b["attempts"], b["concurrency_key"], b["concurrency_limit"]) == (
        "pending",
        0,
        "group:g1",
        1,
    )
    [event] = events(conn, waiter, "claim_refused")
    assert event["detail"] == {"reason": "over_limit", "key": "group:g1"}
    assert not events(conn, waiter, "claimed")


def test_claim__an_expired_lease_frees_its_slot(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    holder, waiter = (submit_keyed(fast, "keyed", group="dies", n=i) for i in range(2))
    with db.connect(fast, autocommit=True) as c:
        assert isinstance(claim(c, message(conn, holder), "dead-worker", 30, ALL), Claimed)
        assert claim(c, message(conn, waiter), "w2", 30, ALL) == ClaimRefused(
            "over_limit", key="group:dies"
        )
        # the holder's worker died: its lease runs out (time moved by ageing the row)
        conn.execute(
            "UPDATE engine_step_runs SET lease_expires_at = now() - interval '1 s' "
            "WHERE job_id = %s",
            (holder,),
        )
        assert isinstance(claim(c, message(conn, waiter), "w2", 30, ALL), Claimed)
        # the dead holder's step run, reclaimable by its lease, now waits for the slot
        assert claim(c, message(conn, holder), "w3", 30, ALL) == ClaimRefused(
            "over_limit", key="group:dies"
        )
    assert run_of(conn, holder, "b")["attempts"] == 1  # the refused reclaim used none


def test_claim__per_job_keys_let_one_jobs_step_runs_share_its_slot(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    jobs = [submit_keyed(fast, "keyed_jobs", group="pj", n=3, fail_times=i) for i in range(2)]
    with thread_worker(fast.model_copy(update={"concurrency": 4}), REGISTRY):
        for job in jobs:
            assert wait_job_ended(conn, job) == "done"
    # one job's parts may run side by side; two jobs' step runs never overlap
    spans = conn.execute(
        "SELECT s.job_id, min(e.at) AS claimed, max(s.finished_at) AS finished "
        "FROM engine_step_runs AS s JOIN engine_history AS e ON e.step_run_id = s.id "
        "AND e.kind = 'claimed' WHERE s.concurrency_key = 'jobs:pj' GROUP BY s.job_id, s.id"
    ).fetchall()
    assert len(spans) == 2 * (1 + 3 + 1)
    for a in spans:
        for b in spans:
            if a["job_id"] != b["job_id"]:
                assert a["finished"] < b["claimed"] or b["finished"] < a["claimed"], (a, b)


# -- the holder announces the next waiter ---------------------------------------------


def test_checkpoint__the_holder_announces_the_next_waiter_in_its_commit(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    holder = submit_keyed(fast, "keyed", group="next", hold_file=str(hold))
    with thread_worker(fast, REGISTRY) as worker:
        wait_until(lambda: (tmp_path / "hold.started").exists(), what="the holder to start")
        waiter = submit_keyed(fast, "keyed", group="next", n=1)
        wait_until(lambda: worker.outcomes.get("refused"), what="the waiter's refusal")
        # its message was replaced by a copy delayed by 15 minutes: no tight loop
        queue = conn.execute(
            "SELECT visible_at > clock_timestamp() + interval '800 s' AS later FROM engine_queue "
            "WHERE strpos(body, %s) > 0",
            (str(run_of(conn, waiter, "b")["id"]),),
        ).fetchall()
        assert queue == [{"later": True}]
        hold.with_suffix(".release").touch()
        assert wait_job_ended(conn, holder) == "done"
        assert wait_job_ended(conn, waiter) == "done"  # long before 15 minutes
        assert worker.outcomes.get("refused") == 1
    b = run_of(conn, waiter, "b")
    assert b["attempts"] == 1
    [succeeded] = events(conn, holder, "succeeded")
    [claimed] = events(conn, waiter, "claimed")
    assert succeeded["at"] < claimed["at"]
    assert announced(conn, b["id"]) == 2  # at submit, then by the holder's checkpoint


def test_eager__a_successor_over_its_limit_is_created_pending_and_runs_when_freed(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    submit_keyed(fast, "keyed_chain", group="chain-g", hold_file=str(hold))  # the holder
    with thread_worker(fast, REGISTRY):
        # the holder's b (its eager successor) holds chain:chain-g
        wait_until(lambda: (tmp_path / "hold.started").exists(), what="the holder to start")
        job = submit_keyed(fast, "keyed_chain", group="chain-g", n=1)
        wait_until(lambda: events(conn, job, "claim_refused"), what="the eager successor's refusal")
        b = run_of(conn, job, "b")
        assert (b["status"], b["attempts"]) == ("pending", 0)
        [refused] = events(conn, job, "claim_refused")
        assert refused["detail"] == {"reason": "over_limit", "key": "chain:chain-g", "eager": True}
        hold.with_suffix(".release").touch()
        assert wait_job_ended(conn, job) == "done"
    assert run_of(conn, job, "b")["attempts"] == 1


def test_cancel__an_operator_cancel_announces_the_next_waiter(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    holder, waiter = (submit_keyed(fast, "keyed", group="cx", n=i) for i in range(2))
    with db.connect(fast, autocommit=True) as c:
        assert isinstance(claim(c, message(conn, holder), "w1", 30, ALL), Claimed)
        assert isinstance(claim(c, message(conn, waiter), "w2", 30, ALL), ClaimRefused)
    b = run_of(conn, waiter, "b")
    before = announced(conn, b["id"])
    admin.cancel(fast, holder)
    assert announced(conn, b["id"]) == before + 1
    with db.connect(fast, autocommit=True) as c:
        assert isinstance(claim(c, message(conn, waiter), "w2", 30, ALL), Claimed)


@pytest.mark.parametrize(
    ("ending", "params", "holder_status"),
    [
        ("retry", {"fail_times": 1}, "pending"),  # retried 10 minutes later
        ("dead letter", {"hold_then": "fail"}, "dead"),
    ],
)
def test_failure__a_holder_that_fails_announces_the_next_waiter(
    fast: Settings,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    ending: str,
    params: dict[str, Any],
    holder_status: str,
) -> None:
    hold = tmp_path / "hold"
    holder = submit_keyed(fast, "keyed", group="fx", hold_file=str(hold), **params)
    settings = fast.model_copy(update={"retry_base_delay_s": 600.0})
    with thread_worker(settings, REGISTRY) as worker:
        wait_until(lambda: (tmp_path / "hold.started").exists(), what="the holder to start")
        waiter = submit_keyed(fast, "keyed", group="fx", n=1)
        wait_until(lambda: worker.outcomes.get("refused"), what="the waiter's refusal")
        hold.with_suffix(".release").touch()  # the holder fails now
        assert wait_job_ended(conn, waiter) == "done"
    assert run_of(conn, holder, "b")["status"] == holder_status
    assert announced(conn, run_of(conn, waiter, "b")["id"]) == 2, ending


# -- the sweeper: claimable later, never stranded -------------------------------------


def test_sweeper__a_holders_expired_lease_announces_the_waiter(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    holder, waiter = (submit_keyed(fast, "keyed", group="sw", n=i) for i in range(2))
    with db.connect(fast, autocommit=True) as c:
        assert isinstance(claim(c, message(conn, holder), "w1", 30, ALL), Claimed)
        assert isinstance(claim(c, message(conn, waiter), "w2", 30, ALL), ClaimRefused)
    wb = run_of(conn, waiter, "b")["id"]
    sweeper = Sweeper(fast, PostgresTransport(fast), "sweeper", AlertRecorder(["log"]))
    with db.connect(fast, autocommit=True) as c:
        sweeper.sweep(c)
        assert announced(conn, wb) == 1, "a full key announces nothing"
        c.execute(
            "UPDATE engine_step_runs SET lease_expires_at = now() - interval '1 s' "
            "WHERE job_id = %s",
            (holder,),
        )
        sweeper.sweep(c)
        assert announced(conn, wb) == 2
        # the waiter is not lag while it waits for a held slot
        c.execute(
            "UPDATE engine_step_runs SET lease_expires_at = now() + interval '1 min' "
            "WHERE job_id = %s",
            (holder,),
        )
        c.execute("UPDATE engine_step_runs SET available_at = now() - interval '1 min'")
        assert store.step_select_queue_lag(c) == 0.0


def test_lease__an_expired_holder_can_neither_renew_nor_checkpoint_beside_the_next(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    holder, waiter = (submit_keyed(fast, "keyed", group="zombie", n=i) for i in range(2))
    free = submit("chain", {}, settings=fast, registry=REGISTRY).job_id
    with db.connect(fast, autocommit=True) as c:
        paused = claim(c, message(conn, holder), "paused", 30, ALL)
        unkeyed = claim(c, message(conn, free, "a"), "paused", 30, ALL)
        assert isinstance(paused, Claimed) and isinstance(unkeyed, Claimed)
        # the holder's worker is paused past its lease; the waiter takes the slot
        conn.execute(
            "UPDATE engine_step_runs SET lease_expires_at = now() - interval '1 s' "
            "WHERE job_id IN (%s, %s)",
            (holder, free),
        )
        assert isinstance(claim(c, message(conn, waiter), "next", 30, ALL), Claimed)
        # the paused holder wakes up: its lease stays lost, its checkpoint is refused
        assert store.lease_extend_if_owner(c, paused.id, paused.token, 30) is None
        with c.transaction():
            refused = store.checkpoint_put_if_leased(
                c,
                step_run_id=paused.id,
                job_id=holder,
                token=paused.token,
                output={"step": "b", "n": 0},
                worker="paused",
            )
        assert refused is None
        # a step run without a key keeps the old rule: renewable until reclaimed
        assert store.lease_extend_if_owner(c, unkeyed.id, unkeyed.token, 30) is not None
    assert run_of(conn, holder, "b")["status"] == "running"  # reclaimable, by the sweeper
