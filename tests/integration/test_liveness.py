"""Liveness under faults (issue 10): nothing stranded, refusals free, stale attempts decide nothing.

Each test names a way a job used to get stuck, or a worker used to exit, and
would fail without the fix it guards.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import psycopg
import pytest
import testflows
from harness import (
    fast_settings,
    flows_registry,
    job_status,
    run_of,
    start_worker_process,
    thread_worker,
    wait_job_ended,
    wait_until,
)
from psycopg import sql

from engine import store, submit
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.errors import BadInput, StoreError
from engine.flow.registry import Registry
from engine.jobs import admin
from engine.reports.links import report_link
from engine.runner import StepRunner, claim
from engine.runner.lease import Heartbeat
from engine.runner.services import SlotServices
from engine.store import Claimed, ClaimRefused, db
from engine.transports.message import StepMessage
from engine.transports.postgres import PostgresTransport
from engine.worker.sweeper import Sweeper
from engine.worker.worker import connect_worker


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings)


def events(conn: psycopg.Connection[Any], job_id: uuid.UUID, kind: str) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT * FROM engine_history WHERE job_id = %s AND kind = %s ORDER BY at, id",
        (job_id, kind),
    ).fetchall()


def message_for(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str) -> StepMessage:
    return StepMessage(job_id=job_id, step_run_id=run_of(conn, job_id, step)["id"])


ALL = flows_registry().runnable()


def active_step_runs(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT step, status FROM engine_step_runs "
        "WHERE job_id = %s AND status IN ('pending', 'running')",
        (job_id,),
    ).fetchall()


# -- 1. nothing rests at the attempt cap -----------------------------------------------


def test_release__a_lease_given_back_on_the_last_attempt_costs_no_attempt(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    settings = fast.model_copy(update={"max_attempts": 1})
    job = submit("chain", {}, settings=settings, registry=flows_registry())
    message = message_for(conn, job.job_id, "a")
    with db.connect(settings, autocommit=True) as c:
        first = claim(c, message, "w1", 30, ALL)
        assert isinstance(first, Claimed) and first.attempt == first.max_attempts == 1
        assert store.lease_release_if_owner(c, first.id, first.token)
        row = run_of(conn, job.job_id, "a")
        assert (row["status"], row["attempts"]) == ("pending", 0)
        again = claim(c, message, "w2", 30, ALL)
    assert isinstance(again, Claimed) and again.attempt == 1


def test_schema__a_pending_step_run_at_its_attempt_cap_is_refused(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "UPDATE engine_step_runs SET attempts = max_attempts WHERE job_id = %s", (job.job_id,)
        )


def test_shutdown__grace_over_on_the_last_attempt_leaves_the_job_finishable(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    settings = fast.model_copy(update={"max_attempts": 1, "shutdown_grace_s": 0.2})
    job = submit("chain", {"hold_file": str(hold)}, settings=settings, registry=flows_registry())
    with thread_worker(settings):
        wait_until(lambda: (tmp_path / "hold.started").exists(), what="step b to start")
    # the grace period ended with b still running: its lease was given back
    b = run_of(conn, job.job_id, "b")
    assert (b["status"], b["attempts"]) == ("pending", 0)
    assert events(conn, job.job_id, "released")
    hold.with_suffix(".release").touch()
    with thread_worker(settings):
        assert wait_job_ended(conn, job.job_id) == "done"


# -- 2. refusals that are not the step's fault -----------------------------------------


def test_refusal__a_flow_not_loaded_here_is_not_claimed_and_not_spun_on(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    settings = fast.model_copy(update={"refusal_delay_s": 60.0})
    job = submit("chain", {}, settings=settings, registry=flows_registry())
    only_fan = Registry([testflows.fan])  # a worker of another deploy, without `chain`
    with thread_worker(settings, registry=only_fan) as old:
        wait_until(lambda: old.outcomes.get("refused"), what="the refusal")
        # a fresh copy, hidden for the refusal delay, replaced the delivery:
        # not the same copy again (on SQS its receive count would reach the
        # redrive to the dead-letter queue), and no tight loop
        queue = conn.execute(
            "SELECT receive_count, visible_at > clock_timestamp() + interval '50 s' AS later "
            "FROM engine_queue"
        ).fetchall()
        assert queue == [{"receive_count": 0, "later": True}]
        assert old.outcomes.get("refused") == 1
    a = run_of(conn, job.job_id, "a")
    assert (a["status"], a["attempts"]) == ("pending", 0), "no attempt used"
    assert not events(conn, job.job_id, "claimed")
    assert [e["detail"]["reason"] for e in events(conn, job.job_id, "claim_refused")] == [
        "not_runnable"
    ]
    conn.execute("UPDATE engine_queue SET visible_at = clock_timestamp()")  # the delay is over
    with thread_worker(settings):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert run_of(conn, job.job_id, "a")["attempts"] == 1


def test_refusal__a_job_of_another_flow_version_is_not_claimed(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    conn.execute("UPDATE engine_jobs SET flow_version = 2 WHERE id = %s", (job.job_id,))
    with db.connect(fast, autocommit=True) as c:
        refused = claim(c, message_for(conn, job.job_id, "a"), "w", 30, ALL)
    assert refused == ClaimRefused("not_runnable")
    assert run_of(conn, job.job_id, "a")["attempts"] == 0


def test_refusal__a_claimed_step_this_worker_cannot_run_is_given_back_and_logged(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    # the claim passed (the flow's name and version are loaded) but the runner
    # finds no such step: a code mismatch inside one version. The lease goes
    # back with its attempt, and the event log says so.
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    transport = PostgresTransport(fast)
    heartbeat = Heartbeat(fast, transport, "slot")
    worker_conn = connect_worker(fast)
    worker_conn.autocommit = True
    try:
        runner = StepRunner(
            SlotServices(
                settings=fast,
                registry=Registry([testflows.fan]),
                transport=transport,
                worker="slot",
                conn=worker_conn,
                heartbeat=heartbeat,
                alerts=AlertRecorder(["log"]),
                may_continue=lambda: False,
            )
        )
        runner.runnable = ALL  # as if `chain` of this version were loaded
        [received] = transport.receive(1, 30, 1)
        assert runner.handle(received).kind == "refused"
    finally:
        heartbeat.close()
        worker_conn.close()
        transport.close()
    a = run_of(conn, job.job_id, "a")
    assert (a["status"], a["attempts"], a["lease_owner"]) == ("pending", 0, None)
    [released] = events(conn, job.job_id, "released")
    assert released["worker"] == "slot"
    assert "not registered" in released["detail"]["reason"]


# -- 4. a stale attempt decides nothing ------------------------------------------------


@pytest.mark.parametrize("decision", ["cancel", "fail"])
def test_stale_attempt__its_cancel_or_fail_is_fenced(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path, decision: str
) -> None:
    hold = tmp_path / "hold"
    job = submit(
        "chain",
        {"hold_file": str(hold), "hold_then": decision},
        settings=fast,
        registry=flows_registry(),
    )
    with thread_worker(fast) as worker:
        wait_until(lambda: hold.with_suffix(".started").exists(), what="step b to start")
        # the lease expired and another worker reclaimed b (the heartbeat, 5 s
        # away, has not noticed): the old attempt then decides
        conn.execute(
            "UPDATE engine_step_runs SET lease_token = gen_random_uuid(), lease_owner = 'new' "
            "WHERE job_id = %s AND step = 'b'",
            (job.job_id,),
        )
        hold.with_suffix(".release").touch()
        wait_until(lambda: worker.outcomes.get("fenced"), what="the stale decision to be fenced")
    assert job_status(conn, job.job_id) == "running", "the new owner's job goes on"
    b = run_of(conn, job.job_id, "b")
    assert (b["status"], b["lease_owner"]) == ("running", "new")
    assert not conn.execute("SELECT 1 FROM engine_dead_letters").fetchall()


# -- 5 and 10. an ended job leaves nothing running; cancel reaches the step ------------


def test_failed_job__a_running_sibling_is_cancelled_not_left_running(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    # no sweep after the first: the failing step itself cancels its sibling
    settings = fast.model_copy(
        update={"concurrency": 2, "heartbeat_s": 0.1, "sweep_interval_s": 600.0}
    )
    job = submit(
        "diamond",
        {"hold_file": str(hold), "hold_step": "right", "fail_step": "left", "fail_times": 9},
        settings=settings.model_copy(update={"max_attempts": 1}),
        registry=flows_registry(),
    )
    with thread_worker(settings) as worker:
        assert wait_job_ended(conn, job.job_id) == "failed"
        wait_until(lambda: worker.outcomes.get("cancelled"), what="right to stop as cancelled")
    assert active_step_runs(conn, job.job_id) == []
    assert run_of(conn, job.job_id, "right")["status"] == "cancelled"
    right = run_of(conn, job.job_id, "right")["id"]
    kinds = [
        e["kind"]
        for e in conn.execute(
            "SELECT kind FROM engine_history WHERE step_run_id = %s ORDER BY at, id", (right,)
        )
    ]
    assert "cancelled" in kinds and "fenced" not in kinds


def test_sweeper__step_runs_left_active_under_an_ended_job_are_cancelled(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("diamond", {}, settings=fast, registry=flows_registry())
    with db.connect(fast, autocommit=True) as c:
        ghost = claim(c, message_for(conn, job.job_id, "a"), "ghost", 30, ALL)
        assert isinstance(ghost, Claimed)
    # a job ended by an older engine, its step run left running by a dead worker
    conn.execute(
        "UPDATE engine_jobs SET status = 'failed', finished_at = now() WHERE id = %s",
        (job.job_id,),
    )
    with db.connect(fast, autocommit=True) as c:
        Sweeper(fast, PostgresTransport(fast), "sweeper", AlertRecorder([])).sweep(c)
    assert active_step_runs(conn, job.job_id) == []
    assert run_of(conn, job.job_id, "a")["status"] == "cancelled"


def test_cancel__a_running_step_is_told_it_was_cancelled(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    settings = fast.model_copy(update={"heartbeat_s": 0.1})
    job = submit("chain", {"hold_file": str(hold)}, settings=settings, registry=flows_registry())
    with thread_worker(settings) as worker:
        wait_until(lambda: hold.with_suffix(".started").exists())
        admin.cancel(settings, job.job_id)
        wait_until(lambda: worker.outcomes.get("cancelled"), what="the step to stop as cancelled")
        assert not worker.outcomes.get("fenced")
    b = run_of(conn, job.job_id, "b")["id"]
    kinds = [
        e["kind"]
        for e in conn.execute("SELECT kind FROM engine_history WHERE step_run_id = %s", (b,))
    ]
    assert "cancelled" in kinds
    assert "fenced" not in kinds and "lease_lost" not in kinds


# -- 6. one lock order: job row first --------------------------------------------------


def _wait_blocked(conn: psycopg.Connection[Any], pid: int) -> None:
    wait_until(
        lambda: (
            conn.execute(
                "SELECT wait_event_type = 'Lock' AS blocked FROM pg_stat_activity WHERE pid = %s",
                (pid,),
            ).fetchone()
            == {"blocked": True}
        ),
        what=f"backend {pid} to wait for a lock",
    )


def test_lock_order__cancel_racing_a_first_claim_does_not_deadlock(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    message = message_for(conn, job.job_id, "a")
    result: list[Claimed | ClaimRefused | BaseException] = []
    with db.connect(fast) as canceller, db.connect(fast, autocommit=True) as claimer:
        claimer_pid = claimer.info.backend_pid
        # cancel's first statement locks the job row ...
        canceller.execute(
            "UPDATE engine_jobs SET status = 'cancelled', finished_at = clock_timestamp() "
            "WHERE id = %s",
            (job.job_id,),
        )

        def first_claim() -> None:
            try:
                result.append(claim(claimer, message, "w", 30, ALL))
            except BaseException as exc:
                result.append(exc)

        thread = threading.Thread(target=first_claim)
        thread.start()
        _wait_blocked(conn, claimer_pid)
        # ... and its second the step runs, which the claim must not hold by now
        canceller.execute(
            "UPDATE engine_step_runs SET status = 'cancelled', finished_at = clock_timestamp() "
            "WHERE job_id = %s AND status = 'pending'",
            (job.job_id,),
        )
        canceller.commit()
        thread.join(timeout=30)
    assert result == [ClaimRefused("finished")]


def test_claim__a_lock_wait_timeout_is_not_claimed_not_an_error(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    with db.connect(fast) as holder, db.connect(fast, autocommit=True) as claimer:
        holder.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR UPDATE", (job.job_id,))
        claimer.execute("SET lock_timeout = '100ms'")
        refused = claim(claimer, message_for(conn, job.job_id, "a"), "w", 30, ALL)
        holder.rollback()
    assert isinstance(refused, ClaimRefused) and refused.reason == "race"
    assert run_of(conn, job.job_id, "a")["attempts"] == 0


# -- 7. submit is atomic on any connection ---------------------------------------------


def test_submit__on_an_autocommit_connection_is_one_transaction(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    conn.execute(
        """
        CREATE FUNCTION refuse_step_runs() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'no step runs today'; END $$;
        CREATE TRIGGER refuse BEFORE INSERT ON engine_step_runs
            FOR EACH ROW EXECUTE FUNCTION refuse_step_runs();
        """
    )
    with db.connect(fast, autocommit=True) as caller, pytest.raises(Exception, match="no step"):
        submit("chain", {}, conn=caller, settings=fast, registry=flows_registry())
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone() == {"n": 0}


# -- 8. the first message leaves at the caller's commit --------------------------------


def test_submit__on_the_postgres_transport_the_message_commits_with_the_caller(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    with db.connect(fast) as caller:
        job = submit("chain", {}, conn=caller, settings=fast, registry=flows_registry())
        assert conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone() == {"n": 0}
        caller.commit()
    # no worker, no sweeper: the message is there as the caller's commit made it
    bodies = [r["body"] for r in conn.execute("SELECT body FROM engine_queue")]
    assert [StepMessage.decode(b).job_id for b in bodies] == [job.job_id]


def test_submit__a_rolled_back_caller_leaves_no_job_and_no_message(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    with db.connect(fast) as caller:
        submit("chain", {}, conn=caller, settings=fast, registry=flows_registry())
        caller.rollback()
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone() == {"n": 0}
    assert conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone() == {"n": 0}


# -- 11. retry of a job whose fingerprint is taken -------------------------------------


def test_retry_job__clashing_with_an_active_job_names_it(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    first = submit("chain", {}, settings=fast, registry=flows_registry())
    admin.cancel(fast, first.job_id)
    second = submit("chain", {}, settings=fast, registry=flows_registry())
    assert second.created and second.job_id != first.job_id
    with pytest.raises(BadInput, match=str(second.job_id)):
        admin.retry_job(fast, first.job_id)
    assert job_status(conn, first.job_id) == "cancelled"


# -- helpers for the outage tests ------------------------------------------------------


def set_connections(pg_admin: str, dbinfo: str, allowed: bool) -> None:
    name = psycopg.conninfo.conninfo_to_dict(dbinfo)["dbname"]
    assert isinstance(name, str)
    with psycopg.connect(pg_admin, autocommit=True) as admin_conn:
        admin_conn.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                sql.Identifier(name), sql.SQL("true" if allowed else "false")
            )
        )
        if not allowed:
            admin_conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )


class CountingTransport(PostgresTransport):
    """The PostgreSQL transport, counting receives that start while the worker saw an outage."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.down: threading.Event | None = None
        self.received_while_down = 0

    def receive(self, max_messages: int, visibility_s: float, wait_s: float) -> Sequence[Any]:
        if self.down is not None and self.down.is_set():
            self.received_while_down += 1
        return super().receive(max_messages, visibility_s, wait_s)  # type: ignore[return-value]


def test_outage__the_worker_outlives_it_and_stops_receiving_meanwhile(
    fast: Settings, pg_admin: str, dbinfo: str
) -> None:
    transport = CountingTransport(fast)
    with thread_worker(fast, transport=transport) as worker:
        transport.down = worker.outage.down
        set_connections(pg_admin, dbinfo, allowed=False)
        try:
            wait_until(worker.outage.down.is_set, what="the worker to notice the outage")
            # several sweeps' and receives' worth of time with the database gone
            wait_until(lambda: worker.outage.probes >= 3, what="three failed probes")
            assert transport.received_while_down == 0
        finally:
            set_connections(pg_admin, dbinfo, allowed=True)
        wait_until(lambda: not worker.outage.down.is_set(), what="the end of the outage")
        job = submit("chain", {}, settings=fast, registry=flows_registry())
        with db.connect(fast, autocommit=True) as after:  # the outage ended `conn`
            assert wait_job_ended(after, job.job_id) == "done"


def test_outage__a_worker_started_during_it_waits_then_works(
    fast: Settings, pg_admin: str, dbinfo: str
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    set_connections(pg_admin, dbinfo, allowed=False)
    try:
        with thread_worker(fast) as worker:
            wait_until(lambda: worker.outage.probes >= 2, what="start-up to wait for PostgreSQL")
            set_connections(pg_admin, dbinfo, allowed=True)
            with db.connect(fast, autocommit=True) as after:  # the outage ended `conn`
                assert wait_job_ended(after, job.job_id) == "done"
    finally:
        set_connections(pg_admin, dbinfo, allowed=True)


# -- 8. the relay wakes at the caller's commit (external queues) -----------------------


class Recorder:
    """An external queue (as SQS) that keeps what it is sent."""

    transactional = False
    max_delay_s = 900.0

    def __init__(self) -> None:
        self.sent: list[StepMessage] = []

    def publish(self, conn: Any, messages: Sequence[Any]) -> None:
        self.sent.extend(m.message for m in messages)


@pytest.mark.parametrize("kind", ["psycopg", "sqlalchemy"])
def test_relay_listener__publishes_at_the_callers_commit_without_a_sweep(
    fast: Settings, kind: str
) -> None:
    from engine.store.read import sqlalchemy_engine
    from engine.transports.outbox import RelayListener

    queue = Recorder()
    listener = RelayListener(fast, queue)
    listener.start()
    try:
        wait_until(lambda: listener.listening, what="the relay to listen")
        if kind == "psycopg":
            with db.connect(fast) as caller:
                job = submit(
                    "chain",
                    {},
                    conn=caller,
                    settings=fast,
                    registry=flows_registry(),
                    publisher=queue,
                )
                assert queue.sent == []
                caller.commit()
        else:
            with sqlalchemy_engine(fast).connect() as caller:
                job = submit(
                    "chain",
                    {},
                    conn=caller,
                    settings=fast,
                    registry=flows_registry(),
                    publisher=queue,
                )
                caller.commit()
        # no worker and no sweeper run: only the commit's NOTIFY can have woken it
        wait_until(lambda: queue.sent, what="the first message to be published")
    finally:
        listener.close()
    assert [m.job_id for m in queue.sent] == [job.job_id]


# -- 9. an eager successor never starts on a lapsed lease ------------------------------


class AfterCommitTransport(PostgresTransport):
    """The PostgreSQL queue acting like SQS: publish and delete happen after the commit.

    The first delete waits on :attr:`gate`, as a slow or retried SQS call would.
    """

    transactional = False  # type: ignore[assignment]

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.gate = threading.Event()
        self.blocked = threading.Event()

    def publish(self, conn: Any, messages: Sequence[Any]) -> None:
        super().publish(None, messages)

    def delete(self, receipts: Sequence[str], conn: Any = None) -> None:
        if not self.blocked.is_set():
            self.blocked.set()
            assert self.gate.wait(30)
        super().delete(receipts, None)


def test_eager__a_successor_whose_lease_lapsed_during_the_delete_does_not_start(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    transport = AfterCommitTransport(fast)
    hold = tmp_path / "hold"
    hold.with_suffix(".release").touch()  # b marks that it started, and goes on at once
    job = submit("chain", {"hold_file": str(hold)}, settings=fast, registry=flows_registry())
    with thread_worker(fast, transport=transport) as worker:
        wait_until(transport.blocked.is_set, what="a's delivery delete to start")
        # a committed and claimed b for this slot; while the delete hangs, b's
        # lease runs out and another worker reclaims it
        conn.execute(
            "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
            "WHERE job_id = %s AND step = 'b'",
            (job.job_id,),
        )
        with db.connect(fast, autocommit=True) as c:
            stolen = claim(c, message_for(conn, job.job_id, "b"), "other", 30, ALL)
        assert isinstance(stolen, Claimed) and stolen.attempt == 2
        transport.gate.set()
        wait_until(lambda: worker.outcomes.get("fenced"), what="the slot to drop b")
    b = run_of(conn, job.job_id, "b")
    assert (b["status"], b["lease_owner"]) == ("running", "other")
    ran = conn.execute(
        "SELECT count(*) AS n FROM test_effects WHERE job_id = %s AND step = 'b'", (job.job_id,)
    ).fetchone()
    assert ran == {"n": 0}
    assert not hold.with_suffix(".started").exists(), "the slot never started b"


# -- 12. a frozen worker's transaction does not outlive the idle timeout ---------------


def _process_state(pid: int) -> str:
    """The one-letter state of a process (``T``: stopped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _frozen_at_is_taken_over(fast: Settings, conn: psycopg.Connection[Any], point: str) -> None:
    """A worker SIGSTOPped at ``point`` of step a's commit; another one finishes the job."""
    frozen_settings = {"lease_s": 2.0, "heartbeat_s": 0.5, "idle_in_transaction_timeout_s": 1.0}
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    frozen = start_worker_process(fast, faults=f"{point}=stop", concurrency=1, **frozen_settings)
    try:
        wait_until(lambda: _process_state(frozen.pid) == "T", what="the worker to freeze")
        assert job_status(conn, job.job_id) == "running"
        with thread_worker(fast_settings(fast, **frozen_settings)):
            assert wait_job_ended(conn, job.job_id, timeout=60) == "done"
    finally:
        frozen.kill()
    assert conn.execute(
        "SELECT count(*) AS n FROM test_effects WHERE job_id = %s", (job.job_id,)
    ).fetchone() == {"n": 3}


def test_frozen_worker__stopped_after_its_checkpoint_does_not_hold_the_job_lock(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    # A worker frozen (SIGSTOP) between its checkpoint and its COMMIT holds the
    # job row lock; the server must end its idle transaction so that another
    # worker can reclaim the step and finish the job. A checkpoint sent as a
    # psycopg pipeline left the session without the idle-in-transaction timer
    # (the pipeline's trailing Flush disarms it), so the lock stayed forever.
    _frozen_at_is_taken_over(fast, conn, "before_commit")


def test_frozen_worker__stopped_inside_its_commit_does_not_hold_the_job_lock(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    # Frozen later: the statements that commit with the checkpoint (the eager
    # successor's claim, the delivery's delete) are issued, the COMMIT is not.
    # Sent as a pipeline, each statement reached the server on its own with no
    # Sync behind it: the session sat 'active' in ClientRead, where neither
    # statement_timeout nor idle_in_transaction_session_timeout runs, holding
    # the job row lock until the process died (the survivor's claim waited on
    # it, lock_timeout after lock_timeout). A worker frozen at before_commit
    # used to end up here too, now and then: SIGSTOP sent to the process let
    # the slot thread run on into its commit.
    _frozen_at_is_taken_over(fast, conn, "in_commit")


def test_batch__nothing_reaches_the_server_before_it_is_sent(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    # What the commit's statements rely on: until the batch goes, the session
    # is idle in transaction (its timer armed), never halfway through a
    # sequence of messages; once answered it is idle in transaction again.
    def session(pid: int) -> dict[str, Any] | None:
        return conn.execute(
            "SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()

    with db.connect(settings, autocommit=True) as c, c.transaction():
        pid = c.info.backend_pid
        batch = store.Batch(c)
        first = batch.execute("SELECT %(n)s::int AS n", {"n": 1})
        none = batch.execute("SELECT 1 AS n WHERE false")
        quoted = batch.execute("SELECT %(t)s::text AS t", {"t": "it's; -- not a comment"})
        # the statements with parameters were prepared (engine.store.prepared),
        # each a whole query of its own: none of them has run
        state = session(pid)
        assert state is not None and state["state"] == "idle in transaction"
        assert state["query"] == "BEGIN" or state["query"].startswith("PREPARE engine_")
        with pytest.raises(StoreError, match="before its batch is sent"):
            first.fetchone()
        batch.send()
        assert session(pid) == {"state": "idle in transaction", "query": ANY}
    assert first.fetchone() == {"n": 1}
    assert none.fetchone() is None
    assert quoted.fetchone() == {"t": "it's; -- not a comment"}


def test_sweeper__a_job_it_fails_gets_its_report_where_the_alert_links(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    settings = fast.model_copy(
        update={"report_on_end": True, "reports_dir": tmp_path, "flow_modules": ["testflows"]}
    )
    job = submit("chain", {}, settings=settings, registry=flows_registry())
    with db.connect(settings, autocommit=True) as c:
        ghost = claim(c, message_for(conn, job.job_id, "a"), "ghost", 30, ALL)
        assert isinstance(ghost, Claimed)
    # the worker died during the last allowed attempt: its lease has lapsed
    conn.execute(
        "UPDATE engine_step_runs SET max_attempts = attempts,"
        " lease_expires_at = now() - interval '1 s' WHERE id = %s",
        (ghost.id,),
    )
    with db.connect(settings, autocommit=True) as c:
        report = Sweeper(settings, PostgresTransport(settings), "sweeper", AlertRecorder(["log"]))
        assert report.sweep(c).dead == 1
    link = report_link(settings, job.job_id)
    page = Path(link.removeprefix("file://"))
    assert page.is_file(), f"the alert links to {link}, which was never written"
    assert "failed" in page.read_text()
    assert (tmp_path / "index.html").is_file()


def test_cancel__an_operators_cancel_renders_the_report_like_every_other_end(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    settings = fast.model_copy(
        update={"report_on_end": True, "reports_dir": tmp_path, "flow_modules": ["testflows"]}
    )
    job = submit("chain", {}, settings=settings, registry=flows_registry())
    admin.cancel(settings, job.job_id, actor="operator", transport=PostgresTransport(settings))
    page = Path(report_link(settings, job.job_id).removeprefix("file://"))
    assert page.is_file(), "engine cancel ended the job without rendering its report"
    assert "cancelled by operator" in page.read_text()
    assert (tmp_path / "index.html").is_file()
