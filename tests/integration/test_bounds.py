"""Every engine connection is bounded (issue 27): lock waits, statements, dead sockets.

An operator command held up by a row lock answers "busy, try again" within
its lock timeout instead of hanging; the heartbeat's, the sweeper's and the
commands' connections carry TCP keepalives and ``tcp_user_timeout`` at both
ends; a lock wait past ``lock_timeout`` in a checkpoint or a park is "not
done, try again", never an attempt charged (invariant 18).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import testflows
import waitflows
from harness import fast_settings, flows_registry, run_of, thread_worker, wait_job_ended, wait_until
from test_group_commit import group_order, one_runner, receive_all

from engine import StepContext, submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.jobs import admin
from engine.runner.attempt import Attempt
from engine.runner.execution import Executor
from engine.runner.lease import Heartbeat
from engine.store import db
from engine.transports.postgres import PostgresTransport
from engine.waits.signals import signal
from engine.worker.worker import connect_worker

BOUNDS = {
    "lock_timeout_s": 0.3,
    "tcp_keepalives_idle_s": 11,
    "tcp_keepalives_interval_s": 4,
    "tcp_keepalives_count": 5,
    "tcp_user_timeout_s": 7.0,
}


@pytest.fixture
def bounded(settings: Settings) -> Settings:
    return fast_settings(settings, flow_modules=["testflows", "waitflows"], **BOUNDS)


@pytest.fixture(autouse=True)
def _no_hooks() -> Iterator[None]:
    yield
    testflows.HOOKS.clear()
    waitflows.HOOKS.clear()


def released(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT e.detail FROM engine_history AS e JOIN engine_step_runs AS s "
        "ON s.id = e.step_run_id WHERE e.job_id = %s AND s.step = %s AND e.kind = 'released' "
        "ORDER BY e.at, e.id",
        (job_id, step),
    ).fetchall()


def kinds(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[str]:
    rows = conn.execute(
        "SELECT kind FROM engine_history WHERE job_id = %s ORDER BY at, id", (job_id,)
    ).fetchall()
    return [r["kind"] for r in rows]


# -- operator commands answer instead of hanging ---------------------------------------


def test_cancel__a_held_job_row_answers_busy_within_the_lock_timeout(
    bounded: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=bounded, registry=flows_registry())
    assert bounded.database_url is not None
    env = {
        **os.environ,
        "ENGINE_DATABASE_URL": bounded.database_url.get_secret_value(),
        "ENGINE_ADMIN_LOCK_TIMEOUT_S": "0.5",
    }
    with db.connect(bounded) as holder:
        holder.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR UPDATE", (job.job_id,))
        started = time.monotonic()
        # a hang is a TimeoutExpired here, far beyond the half second asked for
        done = subprocess.run(
            [sys.executable, "-m", "engine", "cancel", str(job.job_id)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        took = time.monotonic() - started
        holder_pid = holder.info.backend_pid
        holder.rollback()
    assert done.returncode == 3, done.stderr
    assert "busy" in done.stderr and "try again" in done.stderr
    assert f"cancel of job {job.job_id}" in done.stderr
    assert "changed nothing" in done.stderr
    assert f"pid {holder_pid} (engine from " in done.stderr, "names the session holding the row"
    assert took < 30, f"answered after {took:.1f} s"
    assert conn.execute(
        "SELECT status FROM engine_jobs WHERE id = %s", (job.job_id,)
    ).fetchone() == {"status": "pending"}
    # once the row is free, the same command goes through
    admin.cancel(bounded, job.job_id, transport=PostgresTransport(bounded))


# -- every connection is bounded -------------------------------------------------------


def _client_parameters(c: psycopg.Connection[Any]) -> dict[str, str]:
    return {o.keyword.decode(): (o.val or b"").decode() for o in c.pgconn.info}


def _server_settings(c: psycopg.Connection[Any]) -> dict[str, str]:
    rows = c.execute(
        "SELECT name, setting FROM pg_settings WHERE name IN ('lock_timeout', "
        "'statement_timeout', 'tcp_keepalives_idle', 'tcp_keepalives_interval', "
        "'tcp_keepalives_count', 'tcp_user_timeout')"
    ).fetchall()
    return {r["name"]: r["setting"] for r in rows}


def _assert_bounded(c: psycopg.Connection[Any], lock_ms: str) -> None:
    client = _client_parameters(c)
    assert (
        client["keepalives"],
        client["keepalives_idle"],
        client["keepalives_interval"],
        client["keepalives_count"],
        client["tcp_user_timeout"],
    ) == ("1", "11", "4", "5", "7000")
    server = _server_settings(c)
    assert server["lock_timeout"] == lock_ms
    assert server["statement_timeout"] != "0"
    if not c.info.host.startswith("/"):  # a Unix socket has no TCP settings
        assert (
            server["tcp_keepalives_idle"],
            server["tcp_keepalives_interval"],
            server["tcp_keepalives_count"],
            server["tcp_user_timeout"],
        ) == ("11", "4", "5", "7000")


def test_heartbeat__its_connection_has_keepalives_tcp_user_timeout_and_short_waits(
    bounded: Settings,
) -> None:
    settings = bounded.model_copy(update={"lock_timeout_s": 30.0, "heartbeat_s": 2.0})
    transport = PostgresTransport(settings)
    heartbeat = Heartbeat(settings, transport, "slot")
    try:
        c = heartbeat.connection()
        # a renewal waits for a lock, or runs, one heartbeat interval at most
        _assert_bounded(c, lock_ms="2000")
        assert _server_settings(c)["statement_timeout"] == "2000"
    finally:
        heartbeat.close()
        transport.close()


def test_connections__the_sweepers_and_the_commands_are_bounded(bounded: Settings) -> None:
    with connect_worker(bounded) as sweeper:  # the worker's slots and sweeper
        _assert_bounded(sweeper, lock_ms="300")
    with admin._connect(bounded.model_copy(update={"admin_lock_timeout_s": 1.5})) as command:
        _assert_bounded(command, lock_ms="1500")


_LOCKER = """
import sys
from engine.config import Settings
from engine.store import db

conn = db.connect(Settings())  # the engine's own bounds, from ENGINE_* variables
conn.execute("SELECT * FROM dead_locks WHERE id = 1 FOR UPDATE")
print("holding 1", flush=True)
conn.execute("SELECT * FROM dead_locks WHERE id = 2 FOR UPDATE")  # waits for the test
"""


def test_connections__a_killed_process_waiting_for_a_lock_frees_its_other_locks_meanwhile(
    bounded: Settings, conn: psycopg.Connection[Any]
) -> None:
    # Issue 34, item 10: a worker killed while one of its sessions waited for a
    # row lock kept every lock that session held until its wait ended (its
    # lock_timeout): the server noticed the closed socket only when it next read
    # from it. A session whose client is gone ends while its statement still runs,
    # over TCP or a Unix socket alike (client_connection_check_interval polls either).
    conn.execute("CREATE TABLE dead_locks (id int PRIMARY KEY)")
    conn.execute("INSERT INTO dead_locks VALUES (1), (2)")
    assert bounded.database_url is not None
    env = {
        **os.environ,
        "ENGINE_DATABASE_URL": bounded.database_url.get_secret_value(),
        "ENGINE_LOCK_TIMEOUT_S": "120",  # its wait for row 2 outlasts this test
        "ENGINE_TCP_KEEPALIVES_INTERVAL_S": "1",
        "ENGINE_POOLER": "none",
    }
    with psycopg.connect(conn.info.dsn, password=conn.info.password) as holder:
        holder.execute("SELECT * FROM dead_locks WHERE id = 2 FOR UPDATE")  # held throughout
        child = subprocess.Popen(
            [sys.executable, "-c", _LOCKER], env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().startswith("holding 1")
            wait_until(
                lambda: conn.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%%id = 2 FOR UPDATE%%' AND pid <> pg_backend_pid()"
                ).fetchone(),
                what="its wait for row 2",
            )
        finally:
            child.kill()
            child.wait()
        # row 2 is still held by the test: row 1 is free only if the dead session ended
        with psycopg.connect(conn.info.dsn, password=conn.info.password) as probe:
            probe.execute("SET lock_timeout = '60s'")
            probe.execute("SELECT * FROM dead_locks WHERE id = 1 FOR UPDATE")
        assert holder.execute("SELECT count(*) AS n FROM dead_locks").fetchone() == (2,)


# -- a lock wait is "not done, try again", never an attempt ----------------------------


def test_checkpoint__a_lock_wait_past_lock_timeout_charges_no_attempt(
    bounded: Settings, conn: psycopg.Connection[Any]
) -> None:
    hold = threading.Barrier(2)
    testflows.HOOKS["plan"] = hold
    job = submit("fan", {"n": 1}, settings=bounded, registry=flows_registry())
    with thread_worker(bounded) as worker, db.connect(bounded) as holder:
        hold.wait(timeout=30)  # plan is running: its claim committed
        # its checkpoint locks the job row first: held here past lock_timeout
        holder.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR UPDATE", (job.job_id,))
        testflows.HOOKS.pop("plan")  # the second run goes straight through
        hold.wait(timeout=30)
        wait_until(lambda: worker.outcomes.get("released"), what="the checkpoint to give up")
        plan = run_of(conn, job.job_id, "plan")
        assert (plan["status"], plan["attempts"], plan["lease_owner"]) == ("pending", 0, None)
        holder.rollback()
        assert wait_job_ended(conn, job.job_id) == "done"
    plan = run_of(conn, job.job_id, "plan")
    assert plan["attempts"] == 1, "the lock wait was not charged"
    [detail] = released(conn, job.job_id, "plan")
    assert "not done, try again" in detail["detail"]["reason"]
    assert "lock timeout" in detail["detail"]["reason"]
    assert "retried" not in kinds(conn, job.job_id)


def test_park__a_lock_wait_past_lock_timeout_parks_nothing_and_charges_no_attempt(
    bounded: Settings, conn: psycopg.Connection[Any]
) -> None:
    registry = Registry.load(["testflows", "waitflows"])
    job = submit("approval", {}, settings=bounded, registry=registry).job_id
    holders: list[psycopg.Connection[Any]] = []
    locked = threading.Event()

    def hold_job_row(ctx: StepContext) -> None:
        # another session holds the job's row when the gate parks
        waitflows.HOOKS.pop("before_wait")
        holder = db.connect(bounded)
        holders.append(holder)
        holder.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR UPDATE", (ctx.job_id,))
        locked.set()

    waitflows.HOOKS["before_wait"] = hold_job_row
    try:
        with thread_worker(bounded, registry) as worker:
            wait_until(lambda: worker.outcomes.get("released"), what="the park to give up")
            assert locked.is_set()
            gate = run_of(conn, job, "gate")
            assert (gate["attempts"], gate["wait_signal"]) == (0, None)
            holders[0].rollback()
            wait_until(
                lambda: run_of(conn, job, "gate")["status"] == "waiting", what="the gate to park"
            )
            signal(job, "go", settings=bounded)
            assert wait_job_ended(conn, job) == "done"
    finally:
        for h in holders:
            h.close()
    gate = run_of(conn, job, "gate")
    assert gate["output"]["attempt"] == 1, "the lock wait was not charged"
    [detail] = released(conn, job, "gate")
    assert "not done, try again" in detail["detail"]["reason"]
    assert "retried" not in kinds(conn, job)


def test_round__a_lock_wait_in_the_rounds_checkpoints_charges_nobody(
    bounded: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # three fan plans (no StepContext) checkpoint in one message; one job's row
    # is held by another session past lock_timeout: the round rolls back, each
    # goes again alone, the neighbours finish, the held one is given back
    settings = bounded.model_copy(update={"group_commit_ms": 5000})
    jobs = [
        submit("fan", {"n": n}, settings=settings, registry=flows_registry()) for n in (1, 2, 3)
    ]
    holders: list[psycopg.Connection[Any]] = []
    computed: list[uuid.UUID] = []  # the plans' bodies called, by job
    compute = Executor.compute

    with one_runner(settings) as (runner, transport):
        batch = receive_all(transport, 3)
        victim = group_order(batch)[1]

        def hooked(self: Executor, attempt: Attempt) -> Any:
            if attempt.step.name == "plan":
                computed.append(attempt.claimed.job_id)
            if attempt.step.name == "plan" and attempt.claimed.job_id == victim and not holders:
                holder = db.connect(settings)
                holder.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR UPDATE", (victim,))
                holders.append(holder)
            return compute(self, attempt)

        monkeypatch.setattr(Executor, "compute", hooked)
        try:
            outcomes = runner.handle_batch(batch)
        finally:
            for h in holders:
                h.close()
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    victim_plan = run_of(conn, victim, "plan")["id"]
    # the round's checkpoints were written again alone with the outputs in hand: no body
    # was called twice (invariant 20)
    assert sorted(computed) == sorted(job.job_id for job in jobs)
    assert [o.step_run_id for o in outcomes if o.kind == "released"] == [victim_plan]
    assert {o.kind for o in outcomes} == {"done", "released"}
    for job in jobs:
        plan = run_of(conn, job.job_id, "plan")
        if job.job_id == victim:
            assert (plan["status"], plan["attempts"], plan["lease_owner"]) == ("pending", 0, None)
            [detail] = released(conn, victim, "plan")
            assert "not done, try again" in detail["detail"]["reason"]
        else:
            assert (plan["status"], plan["attempts"]) == ("done", 1)
    assert not any("retried" in kinds(conn, job.job_id) for job in jobs)
