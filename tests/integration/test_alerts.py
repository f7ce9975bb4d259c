"""Alerts: one per dead letter, recorded with it; deliveries claimed once, retried, fenced."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from harness import (
    fast_settings,
    flows_registry,
    recorded_alerts,
    run_of,
    thread_worker,
    wait_job_ended,
    wait_until,
)
from webhook import SECRET_PATH, webhook_server

from engine import store, submit
from engine.alerts import AlertRecorder
from engine.alerts.dispatch import AlertDispatcher
from engine.alerts.sinks import LogSink, WebhookSink
from engine.config import Settings
from engine.errors import DatabaseUnavailable, StoreError
from engine.infra.outage import Outage
from engine.reports.links import report_link
from engine.store import db

WORKER = "engine_worker"


@pytest.fixture
def worker_settings(settings: Settings) -> Settings:
    """The worker's role: the grants of migration 0007 are what these tests use."""
    return fast_settings(settings, session_role=WORKER, max_attempts=2)


@pytest.fixture
def wconn(worker_settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    with db.connect(worker_settings, autocommit=True) as c:
        yield c


def a_dead_letter(
    settings: Settings, conn: psycopg.Connection[Any], n: int = 0
) -> tuple[uuid.UUID, uuid.UUID]:
    """A job of `chain` whose step `a` is dead, without its dead letter yet."""
    # submitted by the ERP's own role, as in production
    admin = settings.model_copy(update={"session_role": ""})
    job = submit("chain", {"n": n}, settings=admin, registry=flows_registry())
    a = run_of(conn, job.job_id, "a")["id"]
    conn.execute(
        "UPDATE engine_step_runs SET status = 'dead', attempts = 2, max_attempts = 2 WHERE id = %s",
        (a,),
    )
    return job.job_id, a


def dead_letter_with_alert(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, step_run_id: uuid.UUID, sinks: list[str]
) -> bool:
    """What the runner and the sweeper do: the dead letter and its alert in one transaction."""
    with conn.transaction():
        dl = store.dead_letter_insert_step(
            conn,
            job_id=job_id,
            step_run_id=step_run_id,
            reason="ValueError: boom (attempt 2 of 2)",
            error={"type": "ValueError", "message": "boom\nsecond line", "attempt": 2},
        )
        return AlertRecorder(sinks).record(conn, dl)


def deliveries(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in conn.execute(
            "SELECT * FROM engine_alert_deliveries ORDER BY alert_id, sink"
        ).fetchall()
    ]


def make_due(conn: psycopg.Connection[Any]) -> None:
    """Move time past every backoff and claim instead of sleeping through them."""
    conn.execute(
        "UPDATE engine_alert_deliveries SET next_attempt_at = clock_timestamp() - interval '1 s',"
        " claimed_until = CASE WHEN status = 'sending'"
        "   THEN clock_timestamp() - interval '1 s' ELSE claimed_until END"
    )


# -- recording -------------------------------------------------------------------------


def test_alert_insert__one_alert_per_dead_letter_even_when_the_insert_runs_twice(
    worker_settings: Settings, conn: psycopg.Connection[Any], wconn: psycopg.Connection[Any]
) -> None:
    job_id, a = a_dead_letter(worker_settings, conn)

    assert dead_letter_with_alert(wconn, job_id, a, ["log", "webhook"]) is True
    # a second worker or sweeper seeing the same dead step run: no dead letter, no alert
    assert dead_letter_with_alert(wconn, job_id, a, ["log", "webhook"]) is False
    [letter] = conn.execute("SELECT id FROM engine_dead_letters").fetchall()
    # the same dead letter recorded again (a retried transaction): still one alert
    with wconn.transaction():
        assert store.alert_insert_for_dead_letter(wconn, letter["id"], ["log"]) is None

    [alert] = recorded_alerts(conn)
    assert (alert["dead_letter_id"], alert["job_id"], alert["step_run_id"]) == (
        letter["id"],
        job_id,
        a,
    )
    assert (alert["flow"], alert["step"], alert["attempts"]) == ("chain", "a", 2)
    assert alert["error_line"] == "ValueError: boom", "the first line of the last error"
    assert [(d["sink"], d["status"]) for d in deliveries(conn)] == [
        ("log", "pending"),
        ("webhook", "pending"),
    ]


def test_alert_insert__a_dead_letter_never_commits_without_its_alert(
    worker_settings: Settings, conn: psycopg.Connection[Any], wconn: psycopg.Connection[Any]
) -> None:
    job_id, a = a_dead_letter(worker_settings, conn)

    # the alert's insert fails (a sink name its CHECK refuses): the dead letter goes too
    with pytest.raises(StoreError):
        dead_letter_with_alert(wconn, job_id, a, ["Not A Sink"])

    assert conn.execute("SELECT count(*) AS n FROM engine_dead_letters").fetchone() == {"n": 0}
    assert recorded_alerts(conn) == []


def test_alert_insert__a_message_seen_twice_is_one_dead_letter_and_one_alert(
    conn: psycopg.Connection[Any], wconn: psycopg.Connection[Any]
) -> None:
    class Received:
        message_id = "m-1"
        body = "not a step message"

    made = []
    for _ in range(2):  # recorded, then back before its delete (a crash, an SQS duplicate)
        with wconn.transaction():
            dl = store.dead_letter_insert_message_logged(wconn, "w", Received(), "malformed")
            made.append(AlertRecorder(["log"]).record(wconn, dl))

    assert made == [True, False]
    [alert] = recorded_alerts(conn)
    assert (alert["source"], alert["job_id"], alert["error_line"]) == ("message", None, "malformed")


# -- claiming --------------------------------------------------------------------------


def test_alert_delivery_claim__each_due_delivery_goes_to_exactly_one_of_n_dispatchers(
    worker_settings: Settings, conn: psycopg.Connection[Any], wconn: psycopg.Connection[Any]
) -> None:
    for i in range(6):
        job_id, a = a_dead_letter(worker_settings, conn, i)
        dead_letter_with_alert(wconn, job_id, a, ["log", "webhook"])
    n = 4
    barrier = threading.Barrier(n)
    claims: dict[int, list[tuple[int, str]]] = {}

    def dispatcher(i: int) -> None:
        with db.connect(worker_settings, autocommit=True) as c:
            barrier.wait(timeout=30)
            mine: list[tuple[int, str]] = []
            while got := store.alert_delivery_claim_due_many(
                c, owner=f"d{i}", sinks=["log", "webhook"], limit=2, claim_s=60
            ):
                mine += [(d.alert_id, d.sink) for d in got]
            claims[i] = mine

    threads = [threading.Thread(target=dispatcher, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    everything = [c for got in claims.values() for c in got]
    assert len(everything) == 12 and len(set(everything)) == 12, claims
    # claimed and not lapsed: nobody gets them again
    assert (
        store.alert_delivery_claim_due_many(
            wconn, owner="late", sinks=["log", "webhook"], limit=100, claim_s=60
        )
        == []
    )


def test_alert_delivery_claim__only_the_sinks_a_dispatcher_has(
    worker_settings: Settings, conn: psycopg.Connection[Any], wconn: psycopg.Connection[Any]
) -> None:
    job_id, a = a_dead_letter(worker_settings, conn)
    dead_letter_with_alert(wconn, job_id, a, ["log", "sns"])

    got = store.alert_delivery_claim_due_many(
        wconn, owner="d", sinks=["log", "webhook"], limit=10, claim_s=60
    )

    assert [d.sink for d in got] == ["log"]


def test_alert_delivery_claim__a_lapsed_claim_is_taken_over_and_the_stale_outcome_refused(
    worker_settings: Settings, conn: psycopg.Connection[Any], wconn: psycopg.Connection[Any]
) -> None:
    job_id, a = a_dead_letter(worker_settings, conn)
    dead_letter_with_alert(wconn, job_id, a, ["webhook"])
    [stale] = store.alert_delivery_claim_due_many(
        wconn, owner="old", sinks=["webhook"], limit=10, claim_s=60
    )
    make_due(conn)  # the old holder paused past its claim

    [fresh] = store.alert_delivery_claim_due_many(
        wconn, owner="new", sinks=["webhook"], limit=10, claim_s=60
    )

    assert (fresh.alert_id, fresh.delivery_attempt) == (stale.alert_id, 2)
    assert fresh.token != stale.token
    assert store.alert_delivery_mark_delivered_if_claimed(wconn, stale) is False
    assert (
        store.alert_delivery_mark_failed_if_claimed(
            wconn, stale, error="late", delay_s=1, max_attempts=5
        )
        is None
    )
    assert store.alert_delivery_mark_delivered_if_claimed(wconn, fresh) is True
    [d] = deliveries(conn)
    assert (d["status"], d["claimed_by"], d["attempts"]) == ("delivered", "new", 2)
    make_due(conn)
    assert (
        store.alert_delivery_claim_due_many(
            wconn, owner="x", sinks=["webhook"], limit=10, claim_s=60
        )
        == []
    ), "a delivered alert is never sent again"


def test_alert_delivery__failures_back_off_then_abandon_and_an_operator_retry_resends(
    worker_settings: Settings, conn: psycopg.Connection[Any], wconn: psycopg.Connection[Any]
) -> None:
    job_id, a = a_dead_letter(worker_settings, conn)
    dead_letter_with_alert(wconn, job_id, a, ["webhook"])
    statuses = []
    for _ in range(2):
        [d] = store.alert_delivery_claim_due_many(
            wconn, owner="d", sinks=["webhook"], limit=10, claim_s=60
        )
        statuses.append(
            store.alert_delivery_mark_failed_if_claimed(
                wconn, d, error="HTTP 500", delay_s=30, max_attempts=2
            )
        )
        if statuses[-1] == "pending":
            assert (
                store.alert_delivery_claim_due_many(
                    wconn, owner="d", sinks=["webhook"], limit=10, claim_s=60
                )
                == []
            ), "not due before its backoff ends"
            make_due(conn)

    assert statuses == ["pending", "abandoned"]
    make_due(conn)
    assert (
        store.alert_delivery_claim_due_many(
            wconn, owner="d", sinks=["webhook"], limit=10, claim_s=60
        )
        == []
    )
    assert store.alert_delivery_reset_abandoned(conn, None) == 1
    [d] = deliveries(conn)
    assert (d["status"], d["attempts"], d["last_error"]) == ("pending", 0, "HTTP 500")


# -- the dispatcher --------------------------------------------------------------------


def test_alert_dispatcher__a_webhook_that_is_down_is_retried_and_gets_the_alert_once(
    worker_settings: Settings,
    conn: psycopg.Connection[Any],
    wconn: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    job_id, a = a_dead_letter(worker_settings, conn)
    dead_letter_with_alert(wconn, job_id, a, ["log", "webhook"])
    caplog.set_level(logging.DEBUG)
    with webhook_server([500, 200]) as receiver:
        dispatcher = AlertDispatcher(
            worker_settings,
            [LogSink(), WebhookSink(receiver.url, timeout_s=5)],
            owner="d",
            connect=lambda: db.connect(worker_settings, autocommit=True),
        )
        try:
            assert dispatcher.dispatch_once() == 2  # log delivered, webhook answered 500
            failed = {d["sink"]: d for d in deliveries(conn)}["webhook"]
            assert (failed["status"], failed["last_error"]) == (
                "pending",
                "AlertSendFailed: webhook answered HTTP 500",
            )
            assert dispatcher.dispatch_once() == 0, "backing off"
            make_due(conn)
            assert dispatcher.dispatch_once() == 1
            make_due(conn)
            assert dispatcher.dispatch_once() == 0, "delivered: never again"
        finally:
            dispatcher.close(5)

    assert [d["status"] for d in deliveries(conn)] == ["delivered", "delivered"]
    [first, second] = receiver.posts
    assert first == second and receiver.answered == [500, 200]
    [alert] = recorded_alerts(conn)
    assert second["alert_id"] == alert["id"]
    assert (second["job_id"], second["flow"], second["step"], second["attempts"]) == (
        str(job_id),
        "chain",
        "a",
        2,
    )
    assert second["error"] == "ValueError: boom"
    assert second["report"] == report_link(worker_settings, job_id)
    assert f"job: {job_id}" in second["text"] and "report: " in second["text"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"ALERT dead letter: chain/a of job {job_id}" in logged
    assert SECRET_PATH not in logged and "xoxsecrettoken42" not in logged


def test_alert_dispatcher__an_unreachable_webhook_fails_without_its_url(
    worker_settings: Settings,
    conn: psycopg.Connection[Any],
    wconn: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    job_id, a = a_dead_letter(worker_settings, conn)
    dead_letter_with_alert(wconn, job_id, a, ["webhook"])
    with webhook_server() as receiver:
        url = receiver.url  # the server is gone after the block: connection refused
    caplog.set_level(logging.DEBUG)
    dispatcher = AlertDispatcher(
        worker_settings.model_copy(update={"alert_max_attempts": 1}),
        [WebhookSink(url, timeout_s=5)],
        owner="d",
        connect=lambda: db.connect(worker_settings, autocommit=True),
    )
    try:
        assert dispatcher.dispatch_once() == 1
    finally:
        dispatcher.close(5)

    [d] = deliveries(conn)
    assert d["status"] == "abandoned" and "webhook POST failed" in d["last_error"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "abandoned" in logged and f"engine alerts retry {d['alert_id']}" in logged
    for text in (d["last_error"], logged):
        assert SECRET_PATH not in text and "xoxsecrettoken42" not in text


def test_alert_dispatcher__a_database_outage_is_reported_and_waited_out(
    worker_settings: Settings, conn: psycopg.Connection[Any], wconn: psycopg.Connection[Any]
) -> None:
    job_id, a = a_dead_letter(worker_settings, conn)
    dead_letter_with_alert(wconn, job_id, a, ["webhook"])
    down = threading.Event()
    down.set()

    def connect() -> psycopg.Connection[Any]:
        if down.is_set():
            raise DatabaseUnavailable("PostgreSQL is not answering (test)")
        return db.connect(worker_settings, autocommit=True)

    outage = Outage(1.0)
    with webhook_server() as receiver:
        dispatcher = AlertDispatcher(
            worker_settings.model_copy(update={"alert_poll_s": 0.05}),
            [WebhookSink(receiver.url, timeout_s=5)],
            owner="d",
            outage=outage,
            connect=connect,
        )
        dispatcher.start()
        try:
            wait_until(outage.down.is_set, what="the dispatcher to report the outage")
            down.clear()
            outage.recovered()  # what the worker's probe does once PostgreSQL answers
            wait_until(
                lambda: [d["status"] for d in deliveries(conn)] == ["delivered"],
                what="the alert to be delivered after the outage",
            )
        finally:
            dispatcher.close(10)
        assert len(receiver.posts) == 1


def test_worker__a_poison_step_alerts_the_webhook_once_when_woken(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    # a poll far longer than the test: only the wake after the commit can deliver it
    with webhook_server() as receiver:
        fast = fast_settings(
            settings,
            max_attempts=2,
            alert_sinks=["webhook"],
            alert_poll_s=3600,
            alert_claim_s=7200,
        )
        job = submit(
            "chain", {"fail_step": "a", "fail_times": 99}, settings=fast, registry=flows_registry()
        )
        with thread_worker(fast, alert_sinks=[WebhookSink(receiver.url, timeout_s=5)]):
            assert wait_job_ended(conn, job.job_id) == "failed"
            wait_until(lambda: receiver.accepted(), what="the webhook to receive the alert")
        [body] = receiver.posts
    assert (body["job_id"], body["step"], body["attempts"]) == (str(job.job_id), "a", 2)
    assert body["error"] == "ValueError: planned failure 2 of 99 in a"
