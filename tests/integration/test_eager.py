"""Eager successors: a slot claims a step run its checkpoint made ready and runs it next.

The claim commits with the checkpoint (or not at all), the step run has no
message, and the lease alone keeps it: a slot that dies leaves it to the
sweeper, exactly like a reclaimed delivery.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import testflows
from harness import (
    fast_settings,
    flows_registry,
    run_of,
    thread_worker,
    wait_job_ended,
    wait_until,
)

from engine import submit
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.runner import Outcome, StepRunner
from engine.runner.lease import Heartbeat
from engine.runner.services import SlotServices
from engine.transports.postgres import PostgresTransport
from engine.worker.worker import connect_worker


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings)


def claims(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, dict[str, Any]]:
    """The claim event of each step run (first attempt), by step name."""
    rows = conn.execute(
        "SELECT s.step, s.fanout_key, e.worker, e.detail FROM engine_history AS e "
        "JOIN engine_step_runs AS s ON s.id = e.step_run_id "
        "WHERE e.job_id = %s AND e.kind = 'claimed' ORDER BY e.at, e.id",
        (job_id,),
    ).fetchall()
    return {r["step"] + (f"[{r['fanout_key']}]" if r["fanout_key"] else ""): r for r in rows}


def announced(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[str]:
    """Steps that got an outbox row (a message), sorted."""
    rows = conn.execute(
        "SELECT s.step FROM engine_outbox AS o JOIN engine_step_runs AS s ON s.id = o.step_run_id "
        "WHERE s.job_id = %s ORDER BY s.step",
        (job_id,),
    ).fetchall()
    return [r["step"] for r in rows]


def queued(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone()
    assert row is not None
    return int(row["n"])


@contextmanager
def one_runner(settings: Settings, *, may_continue: bool) -> Iterator[StepRunner]:
    """A bare executor slot: the test hands it deliveries itself."""
    transport = PostgresTransport(settings)
    heartbeat = Heartbeat(settings, transport, "slot")
    conn = connect_worker(settings)
    conn.autocommit = True
    try:
        yield StepRunner(
            SlotServices(
                settings=settings,
                registry=flows_registry(),
                transport=transport,
                worker="slot",
                conn=conn,
                heartbeat=heartbeat,
                alerts=AlertRecorder(["log"]),
                may_continue=lambda: may_continue,
            )
        )
    finally:
        heartbeat.close()
        conn.close()
        transport.close()


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "every-step-delivered"])
def test_eager__successors_run_on_the_same_slot_without_a_message(
    fast: Settings, conn: psycopg.Connection[Any], eager: bool
) -> None:
    settings = fast.model_copy(update={"eager_successors": eager})
    job = submit("chain", {"n": 3}, settings=settings, registry=flows_registry())
    with thread_worker(settings):
        assert wait_job_ended(conn, job.job_id) == "done"
    claimed = claims(conn, job.job_id)
    assert sorted(claimed) == ["a", "b", "c"]
    assert [claimed[s]["detail"].get("eager", False) for s in "abc"] == [False, eager, eager]
    if eager:
        assert len({claimed[s]["worker"] for s in "abc"}) == 1, "one slot ran the whole chain"
        assert announced(conn, job.job_id) == ["a"], "only the submitted step had a message"
    else:
        assert announced(conn, job.job_id) == ["a", "b", "c"]
    assert queued(conn) == 0
    attempts = conn.execute(
        "SELECT array_agg(attempts ORDER BY step) AS a FROM engine_step_runs WHERE job_id = %s",
        (job.job_id,),
    ).fetchone()
    assert attempts == {"a": [1, 1, 1]}


def test_eager__a_fenced_checkpoint_takes_its_eager_successor_with_it(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Any
) -> None:
    hold = tmp_path / "hold"
    # no renewal comes while b is held: only the checkpoint's guard can notice the theft
    settings = fast.model_copy(update={"heartbeat_s": 25.0})
    job = submit("chain", {"hold_file": str(hold)}, settings=settings, registry=flows_registry())
    with thread_worker(settings) as worker:
        wait_until(lambda: (tmp_path / "hold.started").exists(), what="step b to start")
        conn.execute(
            "UPDATE engine_step_runs SET lease_token = gen_random_uuid(), lease_owner = 'thief' "
            "WHERE job_id = %s AND step = 'b'",
            (job.job_id,),
        )
        (tmp_path / "hold.release").touch()
        wait_until(lambda: worker.outcomes.get("fenced"), what="b's checkpoint to be refused")
    runs = conn.execute(
        "SELECT step FROM engine_step_runs WHERE job_id = %s ORDER BY step", (job.job_id,)
    ).fetchall()
    assert [r["step"] for r in runs] == ["a", "b"], "c was never created, nor claimed"
    assert "c" not in claims(conn, job.job_id)
    effects = conn.execute(
        "SELECT step FROM test_effects WHERE job_id = %s ORDER BY step", (job.job_id,)
    ).fetchall()
    assert [r["step"] for r in effects] == ["a"]


def test_eager__a_step_without_context_fenced_at_its_checkpoint_commits_nothing(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    # plan takes no StepContext: its transaction begins with its checkpoint
    held = threading.Barrier(2)
    testflows.HOOKS["plan"] = held
    try:
        job = submit("fan", {"n": 3}, settings=fast, registry=flows_registry())
        with thread_worker(fast) as worker:
            held.wait(timeout=30)
            conn.execute(
                "UPDATE engine_step_runs SET lease_token = gen_random_uuid(), "
                "lease_owner = 'thief' WHERE job_id = %s AND step = 'plan'",
                (job.job_id,),
            )
            held.wait(timeout=30)
            wait_until(lambda: worker.outcomes.get("fenced"), what="plan's checkpoint refused")
            # the slot's session: its refused transaction is over (a leaked one
            # would sit "idle in transaction" until the server's timeout)
            (slot,) = worker._slots
            assert slot.runner is not None
            pid = slot.runner.conn.info.backend_pid
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)
                    ).fetchone()
                    == {"state": "idle"}
                ),
                timeout=10,
                what="the slot's transaction to end",
            )
    finally:
        testflows.HOOKS.pop("plan")
    plan = run_of(conn, job.job_id, "plan")
    assert (plan["status"], plan["lease_owner"], plan["output"]) == ("running", "thief", None)
    runs = conn.execute(
        "SELECT count(*) AS n FROM engine_step_runs WHERE job_id = %s", (job.job_id,)
    ).fetchone()
    assert runs == {"n": 1}, "no part was created, nor claimed"


def test_eager__a_successor_whose_slot_died_is_announced_by_the_sweeper(
    fast: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    dropped: list[uuid.UUID] = []
    run_member = StepRunner._run_member

    def die_once(self: StepRunner, member: Any) -> Any:
        # the slot "dies" right after the commit that claimed b: b never runs
        # here, and nothing here renews its lease
        if not dropped and member.lease.receipt is None:
            dropped.append(member.lease.claimed.id)
            self.executor.heartbeat.unwatch(member.lease)
            return Outcome("fenced", "slot died (test)", member.lease.claimed.id)
        return run_member(self, member)

    monkeypatch.setattr(StepRunner, "_run_member", die_once)
    with thread_worker(fast):
        wait_until(lambda: dropped, what="b to be claimed eagerly")
        b = run_of(conn, job.job_id, "b")
        assert (b["status"], b["attempts"]) == ("running", 1)
        assert queued(conn) == 0 and announced(conn, job.job_id) == ["a"], "b has no message"
        # time moves past the dead slot's lease: the sweeper announces b
        conn.execute(
            "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
            "WHERE id = %s",
            (b["id"],),
        )
        assert wait_job_ended(conn, job.job_id) == "done"
    assert run_of(conn, job.job_id, "b")["attempts"] == 2
    reclaimed = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE step_run_id = %s AND kind = 'reclaimed'",
        (b["id"],),
    ).fetchone()
    assert reclaimed == {"n": 1}
    effects = conn.execute(
        "SELECT step, attempt FROM test_effects WHERE job_id = %s ORDER BY step", (job.job_id,)
    ).fetchall()
    assert [(r["step"], r["attempt"]) for r in effects] == [("a", 1), ("b", 2), ("c", 1)]


def test_eager__a_stopping_worker_publishes_every_successor(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    with one_runner(fast, may_continue=False) as runner:
        (delivery,) = runner.services.transport.receive(1, 60, 0)
        assert runner.handle(delivery).kind == "done"
        assert runner.continuation is None
    b = run_of(conn, job.job_id, "b")
    assert (b["status"], b["attempts"]) == ("pending", 0)
    assert queued(conn) == 1, "b's message is out for any worker"


def test_eager__a_fan_out_keeps_one_item_and_publishes_the_others(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("fan", {"n": 5}, settings=fast, registry=flows_registry())
    with one_runner(fast, may_continue=True) as runner:
        (delivery,) = runner.services.transport.receive(1, 60, 0)
        assert runner.handle(delivery).kind == "done"  # plan
        assert runner.continuation is not None
        kept = runner.continuation.claimed
        assert (kept.step, kept.fanout_key, kept.attempt) == ("part", "0", 1)
        assert queued(conn) == 4, "the other four items went out as messages"
        outcome = runner.run_continuation()
        assert outcome is not None and outcome.kind == "done"
        assert runner.continuation is None, "gather waits for the other items"
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"
    gather = run_of(conn, job.job_id, "gather")
    assert gather["output"] == {"total": sum(i * i for i in range(5)), "count": 5}
