"""The worker on the SQS transport (moto in-process, real PostgreSQL, workers in threads)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import (
    fast_settings,
    flows_registry,
    recorded_alerts,
    thread_worker,
    wait_job_ended,
    wait_until,
)
from sqs_support import moto_messages, queue_name

from engine import store, submit
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.errors import ConfigError
from engine.jobs import admin
from engine.runner.lease import Heartbeat, Lease
from engine.transports.base import Received
from engine.transports.message import StepMessage
from engine.transports.sqs import SqsSettings, SqsTransport
from engine.transports.sqs_queues import Queues, create_queues
from engine.worker.sweeper import Sweeper
from engine.worker.worker import check_startup


def effects(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[tuple[str, int]]:
    rows = conn.execute(
        "SELECT step, attempt FROM test_effects WHERE job_id = %s ORDER BY step", (job_id,)
    ).fetchall()
    return [(r["step"], r["attempt"]) for r in rows]


def submit_chain(
    settings: Settings, conn: psycopg.Connection[Any], publisher: SqsTransport, **params: Any
) -> tuple[uuid.UUID, StepMessage]:
    job = submit("chain", params, settings=settings, registry=flows_registry(), publisher=publisher)
    row = conn.execute(
        "SELECT id FROM engine_step_runs WHERE job_id = %s AND step = 'a'", (job.job_id,)
    ).fetchone()
    assert row is not None
    return job.job_id, StepMessage(job_id=job.job_id, step_run_id=row["id"])


def test_worker__chain_jobs_finish_over_sqs_with_every_first_message_sent_twice(
    settings: Settings, conn: psycopg.Connection[Any], queues: Queues, transports: Any
) -> None:
    fast = fast_settings(settings, concurrency=2)
    publisher = transports()
    jobs = []
    for n in range(6):
        job_id, first = submit_chain(fast, conn, publisher, n=n)
        publisher.send_raw(first.encode())  # a duplicate of every first message
        jobs.append(job_id)

    with thread_worker(fast, transport=transports()):
        for job_id in jobs:
            assert wait_job_ended(conn, job_id) == "done"

    for job_id in jobs:
        assert effects(conn, job_id) == [("a", 1), ("b", 1), ("c", 1)]


def test_worker__a_delete_failing_after_the_commit_loses_nothing(
    settings: Settings,
    conn: psycopg.Connection[Any],
    queues: Queues,
    transports: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast = fast_settings(settings)
    job_id, _ = submit_chain(fast, conn, transports())
    worker_transport = transports()
    failed: list[str] = []
    delete = SqsTransport.delete

    def delete_fails_once(self: SqsTransport, receipts: Any, conn: Any = None) -> None:
        if self is worker_transport and not failed:
            failed.extend(receipts)
            raise ConnectionError("connection reset by peer (injected)")
        delete(self, receipts, conn)

    monkeypatch.setattr(SqsTransport, "delete", delete_fails_once)
    with thread_worker(fast, transport=worker_transport) as worker:
        # a's checkpoint (with b claimed eagerly) committed, then its delete failed:
        # the slot carries on with b and c, and a's copy is refused as finished later
        assert wait_job_ended(conn, job_id) == "done"
        for m in moto_messages(queues.name):
            m.visible_at = 0.0  # time moves past a's visibility instead of waiting
        wait_until(lambda: moto_messages(queues.name) == [], what="a's leftover copy to go")
        # counted once the slot is back from deleting it
        wait_until(lambda: worker.outcomes.get("refused") == 1, what="the copy's refusal")
    assert failed
    assert effects(conn, job_id) == [("a", 1), ("b", 1), ("c", 1)]


def test_worker__visibility_shorter_than_the_step_without_heartbeat_the_second_receiver_backs_off(
    settings: Settings,
    conn: psycopg.Connection[Any],
    queues: Queues,
    transports: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # no heartbeat: nothing extends the visibility (or the lease, long enough here)
    monkeypatch.setattr(Heartbeat, "beat", lambda self, lease: True)
    # step b must come as a delivery (an eager successor has no message to copy)
    fast = fast_settings(settings, visibility_s=1.0, heartbeat_s=0.5, eager_successors=False)
    hold = tmp_path / "hold"
    job_id, _ = submit_chain(fast, conn, transports(), hold_file=str(hold))

    with (
        thread_worker(fast, transport=transports(), worker_id="first"),
        thread_worker(fast, transport=transports(), worker_id="second"),
    ):
        wait_until(lambda: Path(f"{hold}.started").exists(), what="step b to start")
        # b's message came back after 1 s and was received again: its holder's lease won
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM engine_history WHERE job_id = %s AND kind = 'claim_refused'"
                " AND detail->>'reason' = 'held'",
                (job_id,),
            ).fetchone(),
            what="a second receiver to back off",
        )
        Path(f"{hold}.release").touch()
        assert wait_job_ended(conn, job_id) == "done"
        # the refused copy was hidden for long (each return counts as a receive);
        # move time past that instead of waiting
        for m in moto_messages(queues.name):
            m.visible_at = 0.0
        # the holder's receipt was stale by then; the leftover copy is deleted once seen
        wait_until(lambda: moto_messages(queues.name) == [], what="the leftover copy to go")

    assert effects(conn, job_id) == [("a", 1), ("b", 1), ("c", 1)]
    finished = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE job_id = %s AND kind = 'claim_refused'"
        " AND detail->>'reason' = 'finished'",
        (job_id,),
    ).fetchone()
    assert finished is not None and finished["n"] >= 1


MALFORMED = [
    "not json",
    '{"v": 2, "job_id": "00000000-0000-0000-0000-000000000000"}',
    '{"v": 1, "job_id": 1e999999, "step_run_id": 123456789012345678901234567890}',
    "a\x00b",
    "",
    "x" * 5000,
]


def test_worker__malformed_bodies_are_dead_lettered_with_their_reason_and_alert_once(
    settings: Settings,
    conn: psycopg.Connection[Any],
    queues: Queues,
    transports: Any,
    client: Any,
) -> None:
    # sent around the engine's own checks, as a foreign producer (or moto) would allow
    for body in MALFORMED:
        client.send_message(QueueUrl=queues.url, MessageBody=body)
    fast = fast_settings(settings)

    with thread_worker(fast, transport=transports()):
        wait_until(
            lambda: len(admin.dead_letters(fast)) == len(MALFORMED), what="every dead letter"
        )
        job_id, _ = submit_chain(fast, conn, transports())
        assert wait_job_ended(conn, job_id) == "done"  # the worker kept going

    letters = admin.dead_letters(fast)
    assert {r["source"] for r in letters} == {"message"}
    reasons = " | ".join(r["reason"] for r in letters)
    for expected in ("not a step message envelope", "NUL byte", "empty message body", "bytes"):
        assert expected in reasons
    alerts = recorded_alerts(conn)
    assert sorted(a["dead_letter_id"] for a in alerts) == sorted(r["id"] for r in letters)
    assert {a["source"] for a in alerts} == {"message"}
    assert moto_messages(queues.name) == []


@pytest.mark.parametrize("max_receive_count", [2])
def test_dlq__a_message_sqs_redrove_ends_in_dlq_list_and_replays(
    settings: Settings, conn: psycopg.Connection[Any], transports: Callable[[], SqsTransport]
) -> None:
    transport = transports()  # SQS redrives on the third receive
    body = StepMessage(job_id=uuid.uuid4(), step_run_id=uuid.uuid4()).encode()
    transport.send_raw(body)
    while transport.receive(10, 0, 0):  # received twice, never deleted
        pass
    sweeper = Sweeper(settings, transport, "sweeper", AlertRecorder(["log"]))

    assert sweeper.record_transport_dead_letters(conn) == 1
    assert sweeper.record_transport_dead_letters(conn) == 0

    [letter] = admin.dead_letters(settings)
    assert letter["source"] == "message"
    assert "maxReceiveCount (2)" in letter["reason"]
    [alert] = recorded_alerts(conn)
    assert (alert["dead_letter_id"], alert["source"]) == (letter["id"], "message")
    admin.replay(settings, letter["id"], transport=transport)
    assert [r.body for r in transport.receive(10, 30, 0)] == [body]


def test_startup__the_queues_own_visibility_timeout_is_checked(
    settings: Settings, client: Any
) -> None:
    made = create_queues(SqsSettings(), visibility_s=10, name=queue_name("s"), client=client)
    transport = SqsTransport(SqsSettings(queue_url=made.url))
    configured = settings.model_copy(update={"heartbeat_s": 15.0, "visibility_s": 120.0})

    check_startup(configured)  # the configured visibility alone passes
    with pytest.raises(ConfigError, match="visibility timeout 10 s"):
        check_startup(configured, queue_visibility_s=transport.queue_visibility_s())
    transport.close()


def test_close__ends_a_waiting_receive_after_its_poll_and_hands_back_what_it_got(
    queues: Queues, transports: Any
) -> None:
    receiver = transports()
    sender = transports()
    polling = threading.Event()
    receiver.client.meta.events.register(
        "before-send.sqs.ReceiveMessage", lambda **_: polling.set()
    )
    result: list[list[Received]] = []
    thread = threading.Thread(target=lambda: result.append(receiver.receive(1, 30, 600)))
    thread.start()
    assert polling.wait(30)

    receiver.close()
    sender.send_raw("arrives while closing")
    thread.join(30)

    assert result == [[]]
    # handed back at once, not after its 30 s visibility
    assert [r.body for r in sender.receive(1, 30, 0)] == ["arrives while closing"]


def test_heartbeat__a_lost_copy_is_not_extended_again(
    settings: Settings, queues: Queues, transports: Any, conn: psycopg.Connection[Any]
) -> None:
    """A stale receipt is "lost this copy" for the heartbeat, not an error."""
    transport = transports()
    fast = fast_settings(settings)
    job_id, _ = submit_chain(fast, conn, transport)
    [got] = transport.receive(1, 30, 1)
    claimed = store.step_claim_if_available(
        conn,
        step_run_id=StepMessage.decode(got.body).step_run_id,
        job_id=job_id,
        worker="t",
        lease_s=30,
        runnable=["chain:1"],
    )
    assert isinstance(claimed, store.Claimed)
    lease = Lease(claimed, got.receipt)
    heartbeat = Heartbeat(fast, transport, "t")
    try:
        transport.release([got.receipt])
        transport.receive(1, 30, 1)  # received again elsewhere: our receipt is stale

        assert heartbeat.beat(lease) is True  # the lease is renewed all the same
        assert lease.copy_lost
    finally:
        heartbeat.close()
