"""Submit: one job per active fingerprint, and nothing enqueued before commit."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from harness import ExternalQueue
from sqlalchemy import text
from sqlmodel import Session

from engine.config import Settings
from engine.errors import InvalidParameters, UnknownFlow
from engine.flow.registry import Registry
from engine.jobs.submit import submit
from engine.store import db
from engine.store.read import sqlalchemy_engine
from engine.transports.message import StepMessage
from engine.transports.outbox import relay
from engine.transports.postgres import PostgresTransport

PARAMS = {"period": "2026-11"}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.load()


def counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    row = conn.execute(
        """
        SELECT (SELECT count(*) FROM engine_jobs) AS jobs,
               (SELECT count(*) FROM engine_step_runs) AS step_runs,
               (SELECT count(*) FROM engine_outbox) AS outbox,
               (SELECT count(*) FROM engine_outbox WHERE published_at IS NULL) AS unpublished,
               (SELECT count(*) FROM engine_queue) AS messages
        """
    ).fetchone()
    assert row is not None
    return dict(row)


def test_submit__writes_job_first_steps_outbox_and_publishes(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    result = submit("example", PARAMS, settings=settings, registry=registry)
    assert result.created
    assert result.status == "pending"
    roots = registry.get("example").roots()
    assert counts(conn) == {
        "jobs": 1,
        "step_runs": len(roots),
        "outbox": len(roots),
        "unpublished": 0,
        "messages": len(roots),
    }
    body = conn.execute("SELECT body FROM engine_queue").fetchone()
    assert body is not None
    message = StepMessage.decode(body["body"])
    assert message.job_id == result.job_id
    step = conn.execute(
        "SELECT step, status, attempts FROM engine_step_runs WHERE id = %s",
        (message.step_run_id,),
    ).fetchone()
    assert step == {"step": roots[0].name, "status": "pending", "attempts": 0}


def test_submit__same_parameters_return_the_active_job(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    first = submit("example", PARAMS, settings=settings, registry=registry)
    # same values, other spelling: key order and an equal number
    second = submit(
        "example", {"chunks": 3, "period": "2026-11"}, settings=settings, registry=registry
    )
    other = submit("example", {"period": "2026-10"}, settings=settings, registry=registry)
    assert (second.job_id, second.created) == (first.job_id, False)
    assert other.created and other.job_id != first.job_id
    assert counts(conn)["jobs"] == 2


def test_submit__after_the_job_ended_a_new_job_is_created(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    first = submit("example", PARAMS, settings=settings, registry=registry)
    conn.execute(
        "UPDATE engine_jobs SET status = 'done', finished_at = clock_timestamp() WHERE id = %s",
        (first.job_id,),
    )
    again = submit("example", PARAMS, settings=settings, registry=registry)
    assert again.created and again.job_id != first.job_id


def test_submit__64_concurrent_submits_create_one_job(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    n = 64
    barrier = threading.Barrier(n, timeout=60)

    def one() -> tuple[str, bool]:
        with db.connect(settings) as c:
            c.execute("SELECT 1")  # connected and inside a transaction before the race
            barrier.wait()
            result = submit("example", PARAMS, conn=c, settings=settings, registry=registry)
            c.commit()
        return str(result.job_id), result.created

    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(lambda _: one(), range(n)))

    assert len({job_id for job_id, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    roots = len(registry.get("example").roots())
    assert counts(conn) == {
        "jobs": 1,
        "step_runs": roots,
        "outbox": roots,
        "unpublished": 0,  # the PostgreSQL transport's messages commit with the caller
        "messages": roots,
    }


def test_submit__inside_a_rolled_back_transaction_leaves_nothing(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("CREATE TABLE erp_requests (note text)")
    with db.connect(settings) as c:
        c.execute("INSERT INTO erp_requests VALUES ('costing asked for')")
        submit("example", PARAMS, conn=c, settings=settings, registry=registry)
        c.rollback()
    assert relay(conn, PostgresTransport()) == 0
    assert counts(conn) == dict.fromkeys(
        ["jobs", "step_runs", "outbox", "unpublished", "messages"], 0
    )
    assert conn.execute("SELECT count(*) AS n FROM erp_requests").fetchone() == {"n": 0}


def test_submit__inside_a_committed_transaction_is_published_by_the_relay(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    with db.connect(settings) as c:
        result = submit(
            "example",
            PARAMS,
            conn=c,
            settings=settings,
            registry=registry,
            publisher=ExternalQueue(),
        )
        # not visible to anyone, so not publishable, before the commit
        assert relay(conn, PostgresTransport()) == 0
        c.commit()
    assert counts(conn)["unpublished"] == 1
    assert relay(conn, PostgresTransport()) == 1
    assert counts(conn) == {
        "jobs": 1,
        "step_runs": 1,
        "outbox": 1,
        "unpublished": 0,
        "messages": 1,
    }
    assert relay(conn, PostgresTransport()) == 0, "published rows are not sent again"
    assert result.created


def test_submit__sqlalchemy_session_rollback_and_commit(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    engine = sqlalchemy_engine(settings)
    with Session(engine) as session:
        session.execute(text("CREATE TABLE erp_requests (note text)"))
        session.commit()
        session.execute(text("INSERT INTO erp_requests VALUES ('rolled back')"))
        submit("example", PARAMS, conn=session, settings=settings, registry=registry)
        session.rollback()
        assert counts(conn)["jobs"] == 0

        session.execute(text("INSERT INTO erp_requests VALUES ('committed')"))
        result = submit("example", PARAMS, conn=session, settings=settings, registry=registry)
        assert counts(conn)["jobs"] == 0, "nothing visible before the caller commits"
        session.commit()
    assert result.created
    # the session's after-commit hook published at once
    assert counts(conn) == {
        "jobs": 1,
        "step_runs": 1,
        "outbox": 1,
        "unpublished": 0,
        "messages": 1,
    }
    notes = conn.execute("SELECT note FROM erp_requests").fetchall()
    assert notes == [{"note": "committed"}]


def test_submit__sqlalchemy_connection_joins_its_transaction(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    engine = sqlalchemy_engine(settings)
    with engine.connect() as c:
        submit("example", PARAMS, conn=c, settings=settings, registry=registry)
        c.rollback()
        assert counts(conn)["jobs"] == 0
        submit("example", PARAMS, conn=c, settings=settings, registry=registry)
        c.commit()
    assert counts(conn)["jobs"] == 1


def test_relay__concurrent_relays_publish_each_row_once(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    with db.connect(settings) as c:
        for month in range(1, 13):
            for year in (2024, 2025, 2026):
                submit(
                    "example",
                    {"period": f"{year}-{month:02d}"},
                    conn=c,
                    settings=settings,
                    registry=registry,
                    publisher=ExternalQueue(),
                )
        c.commit()
    barrier = threading.Barrier(4, timeout=30)

    def drain() -> int:
        total = 0
        with db.connect(settings, autocommit=True) as c:
            barrier.wait()
            while (n := relay(c, PostgresTransport(), limit=5)) > 0:
                total += n
        return total

    with ThreadPoolExecutor(max_workers=4) as pool:
        published = sum(pool.map(lambda _: drain(), range(4)))
    assert published == 36
    assert counts(conn)["messages"] == 36
    assert counts(conn)["unpublished"] == 0


def test_submit__invalid_period_names_the_value(settings: Settings, registry: Registry) -> None:
    with pytest.raises(InvalidParameters, match="2026-13"):
        submit("example", {"period": "2026-13"}, settings=settings, registry=registry)


def test_submit__unknown_flow_lists_the_known_ones(settings: Settings, registry: Registry) -> None:
    with pytest.raises(UnknownFlow, match=r"known flows: .*example"):
        submit("costnig", PARAMS, settings=settings, registry=registry)
