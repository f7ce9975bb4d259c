"""The engine behind a real PgBouncer in transaction pooling mode (issue 27, item 5).

PgBouncer (``tests/support/pooler.py``) runs on 127.0.0.1 with a pool of one
or two server sessions, so that the server session behind a connection
changes between its transactions, as in production.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import flows_registry, settings_with_url, thread_worker, wait_job_ended, wait_until
from pooler import PgBouncer
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from engine import store
from engine.config import Settings
from engine.errors import ConfigError, Contention
from engine.flow.registry import Registry
from engine.jobs.submit import submit
from engine.store import db, pooler
from engine.store.read import sqlalchemy_engine
from engine.transports.outbox import RelayListener
from engine.transports.postgres import PostgresTransport
from engine.waits.signals import signal

ECHO = "-- echo --\nSELECT %(a)s::text AS a, %(b)s::jsonb AS b"


@pytest.fixture(autouse=True)
def _detect_again() -> Iterator[None]:
    # each test's PgBouncer has its own port: nothing is learnt from another test
    pooler.forget_routes()
    yield
    pooler.forget_routes()


def _dbname(dbinfo: str) -> str:
    return str(conninfo_to_dict(dbinfo)["dbname"])


@pytest.fixture
def pooled(pgbouncer: PgBouncer, dbinfo: str) -> Settings:
    """Settings of the test database through the session's PgBouncer (pool of 2)."""
    return settings_with_url(pgbouncer.url_for(_dbname(dbinfo)))


@pytest.fixture
def bouncer1(pg_admin: str, tmp_path: Path) -> Iterator[PgBouncer]:
    """A PgBouncer of its own with one server session: every client shares it."""
    with PgBouncer(pg_admin, tmp_path / "pgbouncer", pool_size=1) as bouncer:
        yield bouncer


def test_pooler__refused_startup_options_mean_a_pooler_and_each_transaction_sets_them(
    pooled: Settings, settings: Settings
) -> None:
    s = pooled.model_copy(update={"session_role": "engine_worker", "lock_timeout_s": 7.0})
    with db.connect(s) as conn:
        assert isinstance(conn, pooler.PooledConnection)
        row = conn.execute(
            "SELECT current_user AS who, current_setting('lock_timeout') AS lock, "
            "current_setting('statement_timeout') AS statement"
        ).fetchone()
        assert row == {"who": "engine_worker", "lock": "7s", "statement": "5min"}
        assert conn.prepare_threshold is None  # psycopg's own prepared statements: off too
    idle = "-c idle_in_transaction_session_timeout=9000"
    with db.connect(s, autocommit=True, options=idle) as c, c.transaction():
        row = c.execute("SELECT current_setting('idle_in_transaction_session_timeout') AS t")
        assert row.fetchone() == {"t": "9s"}
    assert db.pooled(s)
    # the direct connection keeps the fast path
    assert not db.pooled(settings)
    with db.connect(settings) as direct:
        assert not isinstance(direct, pooler.PooledConnection)


def test_pooler__a_refused_role_is_the_connections_error_naming_it(pooled: Settings) -> None:
    s = pooled.model_copy(update={"session_role": "no_such_role"})
    with pytest.raises(ConfigError, match="refused role 'no_such_role'"):
        db.connect(s)


def test_pooler__an_autocommit_statement_is_bounded_and_runs_under_the_role_too(
    pooled: Settings, conn: psycopg.Connection[Any]
) -> None:
    s = pooled.model_copy(update={"session_role": "engine_worker"})
    # a heartbeat's connection: autocommit, its lock wait bounded
    with db.connect(s, autocommit=True, lock_timeout_s=0.3) as beat:
        row = beat.execute("SELECT current_user AS who, current_setting('lock_timeout') AS lock")
        assert row.fetchone() == {"who": "engine_worker", "lock": "300ms"}
        with conn.transaction():
            conn.execute("LOCK TABLE engine_workers IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            with pytest.raises(psycopg.errors.LockNotAvailable):
                beat.execute("SELECT count(*) FROM engine_workers")
            assert time.monotonic() - started < 5
        # committed alone, as in autocommit
        beat.execute("SELECT 1")
        assert beat.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_pooler__options_dropped_silently_are_detected_by_the_servers_view_of_the_socket(
    pg_admin: str, dbinfo: str, tmp_path: Path
) -> None:
    with PgBouncer(
        pg_admin, tmp_path / "pgb", pool_size=1, ignore_startup_parameters="options"
    ) as bouncer:
        s = settings_with_url(bouncer.url_for(_dbname(dbinfo)), lock_timeout_s=7.0)
        with db.connect(s) as conn:
            # without the probe the bounds would be dropped: lock_timeout 0, unbounded
            row = conn.execute("SELECT current_setting('lock_timeout') AS lock").fetchone()
            assert row == {"lock": "7s"}
        assert db.pooled(s)
        forced = s.model_copy(update={"pooler": "none"})
        assert not db.pooled(forced)


def test_prepared__statement_missing_behind_a_pooler_is_contention_then_unprepared(
    bouncer1: PgBouncer, dbinfo: str, settings: Settings
) -> None:
    s = settings_with_url(bouncer1.url_for(_dbname(dbinfo)), prepared_statements="on")
    with db.connect(s, autocommit=True) as conn, db.connect(settings, autocommit=True) as admin:
        with conn.transaction():
            batch = store.Batch(conn)
            batch.execute(ECHO, {"a": "x", "b": Jsonb(1)})
            batch.send()
        # the pooler's one server session ends (a server_lifetime, a failover): the
        # connection's next transaction runs on a new session, without the statement
        _end_idle_server_sessions(admin)
        with conn.transaction(force_rollback=True):
            batch = store.Batch(conn)
            batch.execute(ECHO, {"a": "y", "b": Jsonb(2)})
            with pytest.raises(Contention, match="prepared statement"):
                batch.send()
        # not done, try again: the same connection now sends its statements in full
        with conn.transaction():
            batch = store.Batch(conn)
            reply = batch.execute(ECHO, {"a": "z", "b": Jsonb(3)})
            batch.send()
            prepared_here = conn.execute("SELECT count(*) AS n FROM pg_prepared_statements")
            assert prepared_here.fetchone() == {"n": 0}
        assert reply.fetchone() == {"a": "z", "b": 3}


def _end_idle_server_sessions(admin: psycopg.Connection[Any]) -> None:
    """End the pooler's server sessions of this database (none is in a statement now);
    PgBouncer checks a server before lending it (``server_check_delay = 0``) and opens
    a new session in its place."""

    def ended() -> bool:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
            "current_database() AND pid <> pg_backend_pid() AND state = 'idle'"
        ).fetchall()
        return bool(rows)

    wait_until(ended, timeout=10, what="an idle server session of the pooler to end")


def _attempts(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, int]:
    rows = conn.execute(
        "SELECT step, attempts FROM engine_step_runs WHERE job_id = %s", (job_id,)
    ).fetchall()
    return {r["step"]: r["attempts"] for r in rows}


def _events(conn: psycopg.Connection[Any], job_id: uuid.UUID, kinds: tuple[str, ...]) -> list[Any]:
    return conn.execute(
        "SELECT kind, detail FROM engine_history WHERE job_id = %s AND kind = ANY(%s) "
        "ORDER BY at, id",
        (job_id, list(kinds)),
    ).fetchall()


def test_worker__flow_behind_pgbouncer_runs_to_done_one_attempt_per_step_run(
    pooled: Settings, conn: psycopg.Connection[Any]
) -> None:
    s = pooled.model_copy(update={"concurrency": 2})
    registry = flows_registry()
    jobs = [submit("diamond", {"n": n}, settings=s, registry=registry).job_id for n in range(3)]
    with thread_worker(s, registry):
        for job_id in jobs:
            assert wait_job_ended(conn, job_id) == "done"
    for job_id in jobs:
        assert set(_attempts(conn, job_id).values()) == {1}
        assert _events(conn, job_id, ("retried", "fenced", "dead_lettered")) == []
        # released for its batch (normal), never for a failed statement
        reasons = [r["detail"]["reason"] for r in _events(conn, job_id, ("released",))]
        assert not [r for r in reasons if r.startswith("not done")], reasons


def _approval_registry() -> Registry:
    return Registry.load(["testflows", "waitflows"])


def test_worker__a_prepared_statement_lost_by_the_pooler_costs_no_attempt(
    bouncer1: PgBouncer,
    dbinfo: str,
    settings: Settings,
    conn: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="engine.runner.execution")
    s = settings_with_url(
        bouncer1.url_for(_dbname(dbinfo)),
        prepared_statements="on",
        flow_modules=["testflows", "waitflows"],
    )
    registry = _approval_registry()
    job_id = submit("approval", {"n": 1}, settings=s, registry=registry).job_id
    with thread_worker(s, registry, worker_id="pooled"):
        # `prepare` checkpointed (its statements prepared on the one server session);
        # `gate` waits for its signal
        wait_until(lambda: _events(conn, job_id, ("waiting",)), what="the gate to wait")
        _end_idle_server_sessions(conn)
        signal(job_id, "go", {"by": "test"}, settings=s)
        assert wait_job_ended(conn, job_id) == "done"
    tried = [r.getMessage() for r in caplog.records if "trying it again" in r.getMessage()]
    assert tried, "the gate's checkpoint met a missing prepared statement"
    assert all("prepared statement" in t for t in tried)
    # its checkpoint alone was tried again, with its output: no release, no body run again
    assert _events(conn, job_id, ("released",)) == []
    assert set(_attempts(conn, job_id).values()) == {1}
    assert _events(conn, job_id, ("retried", "dead_lettered", "fenced")) == []


def test_transport__behind_a_pooler_an_idle_receiver_polls_instead_of_listening(
    pooled: Settings, settings: Settings
) -> None:
    transport = PostgresTransport(pooled)
    direct = PostgresTransport(settings)
    try:
        transport.receive(1, 30, wait_s=0)  # connects: the pooler is detected
        started = time.monotonic()
        sent = threading.Timer(0.3, lambda: direct.send_raw("{}"))
        sent.start()
        received = transport.receive(1, 30, wait_s=10)
        sent.join()
        # LISTEN through the pooler would hear nothing: the receive would wait 10 s
        assert received and time.monotonic() - started < 3
    finally:
        transport.close()
        direct.close()


def test_transport__the_receivers_session_setting_is_not_left_on_a_shared_server_session(
    bouncer1: PgBouncer, dbinfo: str, pg_admin: str
) -> None:
    # the test databases default to synchronous_commit=off (tests/conftest.py):
    # this one has the server's default, so that a setting left behind shows
    with psycopg.connect(pg_admin, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} RESET synchronous_commit").format(
                sql.Identifier(_dbname(dbinfo))
            )
        )
    s = settings_with_url(bouncer1.url_for(_dbname(dbinfo)))
    transport = PostgresTransport(s)
    try:
        transport.receive(1, 30, wait_s=0)
        # the one server session, as the next client borrowing it sees it: a
        # synchronous_commit=off left there would make its commits (checkpoints) lossy
        with db.connect(s, autocommit=True) as other:
            row = other.execute("SELECT current_setting('synchronous_commit') AS s").fetchone()
            assert row == {"s": "on"}
    finally:
        transport.close()


class Recorder:
    """An external queue (as SQS) that keeps what it is sent."""

    transactional = False
    max_delay_s = 900.0

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def publish(self, conn: Any, messages: Any) -> None:
        self.sent.extend(m.message for m in messages)


@pytest.mark.parametrize("kind", ["psycopg", "sqlalchemy"])
def test_relay_listener__behind_a_pooler_relays_the_callers_commit_by_polling(
    pooled: Settings, kind: str
) -> None:
    queue = Recorder()
    listener = RelayListener(pooled, queue)
    listener.start()
    try:
        wait_until(lambda: listener.listening, what="the relay to start")
        caller: Any
        with (
            db.connect(pooled) if kind == "psycopg" else sqlalchemy_engine(pooled).connect()
        ) as caller:
            submit(
                "chain",
                {},
                conn=caller,
                settings=pooled,
                registry=flows_registry(),
                publisher=queue,
            )
            assert queue.sent == []
            caller.commit()
        # no worker, no sweeper, and a NOTIFY nobody can hear through the pooler
        wait_until(lambda: queue.sent, timeout=5, what="the relay to publish")
    finally:
        listener.close()


@pytest.mark.parametrize(("mode", "expected"), [("auto", 1), ("off", 0)])
def test_prepared__direct_connection_keeps_the_fast_path_unless_off(
    settings: Settings, mode: str, expected: int
) -> None:
    s = settings.model_copy(update={"prepared_statements": mode})
    with db.connect(s) as conn, conn.transaction():
        batch = store.Batch(conn)
        reply = batch.execute(ECHO, {"a": "x", "b": Jsonb(1)})
        batch.send()
        assert reply.fetchone() == {"a": "x", "b": 1}
        count = conn.execute("SELECT count(*) AS n FROM pg_prepared_statements").fetchone()
        assert count == {"n": expected}
