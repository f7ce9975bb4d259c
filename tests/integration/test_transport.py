"""Conformance of every transport to the ``Transport`` protocol (SQS semantics).

Each test talks to the transport only; moving time and observing receivers are
the harness's job, so the same tests run against every transport (PostgreSQL,
and SQS through moto in-process). Time moves by ageing rows (or moto's
messages), never by sleeping. What a backend cannot promise is listed in its
harness's ``limits`` with the reason, and only those checks are left out.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any, Protocol

import boto3
import psycopg
import pytest
from sqs_support import REGION, documented_receipts, moto_in_process, moto_messages

from engine.config import Settings
from engine.errors import BadInput
from engine.store import db
from engine.transports.base import Outgoing, Received, Transport
from engine.transports.message import StepMessage
from engine.transports.postgres import PostgresTransport
from engine.transports.sqs import SqsSettings, SqsTransport
from engine.transports.sqs_queues import create_queues

TRANSPORTS = ["postgres", "sqs"]
JOIN_TIMEOUT_S = 60.0


class QueueHarness(Protocol):
    """A transport under test plus the test-only powers its backend allows."""

    transport: Transport
    # capability -> why this backend lacks it; tests needing it check only what remains
    limits: dict[str, str]

    def new_transport(self) -> Transport:
        """Another client of the same queue (closed with the harness)."""
        ...

    def expire(self, receipt: str | None = None) -> None:
        """Make this delivery (or every hidden or delayed message) visible now,
        as if its visibility timeout (or delay) had elapsed."""
        ...

    def elapse(self, seconds: float) -> None:
        """As if ``seconds`` had passed for every hidden or delayed message."""
        ...

    def wait_for_waiting_receiver(self, timeout: float) -> None:
        """Return once some receiver is waiting (long polling) on the queue."""
        ...


EXCLUSIVE_RECEIVES = "exclusive_receives"  # concurrent receives never hand out one message twice
CLOSE_INTERRUPTS_WAIT = "close_interrupts_wait"  # close ends a long poll already in flight


def lacking(queue: QueueHarness, capability: str) -> bool:
    return capability in queue.limits


# Cases only some transports can offer run only on those (SQS's own behaviour
# for them is checked in tests/sqs): the transports are listed, never skipped.
TRANSACTIONAL = pytest.mark.parametrize("queue", ["postgres"], indirect=True)
INTERRUPTIBLE_WAIT = pytest.mark.parametrize("queue", ["postgres"], indirect=True)


class PostgresHarness:
    limits: dict[str, str] = {}

    def __init__(self, settings: Settings, conn: psycopg.Connection[Any]) -> None:
        self._settings = settings
        self._conn = conn
        self._transports: list[PostgresTransport] = []
        self.transport: Transport = self.new_transport()

    def new_transport(self) -> Transport:
        transport = PostgresTransport(self._settings)
        self._transports.append(transport)
        return transport

    def expire(self, receipt: str | None = None) -> None:
        if receipt is None:
            self._conn.execute(
                "UPDATE engine_queue SET visible_at = clock_timestamp() - interval '1 second'"
                " WHERE visible_at > clock_timestamp()"
            )
            return
        message_id, _, token = receipt.partition(":")
        self._conn.execute(
            "UPDATE engine_queue SET visible_at = clock_timestamp() - interval '1 second'"
            " WHERE id = %s AND receipt = %s",
            (int(message_id), uuid.UUID(token)),
        )

    def elapse(self, seconds: float) -> None:
        self._conn.execute(
            "UPDATE engine_queue SET visible_at = visible_at - make_interval(secs => %s::float8)",
            (seconds,),
        )

    def wait_for_waiting_receiver(self, timeout: float) -> None:
        # The LISTEN connection is opened only once a receive found nothing.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = self._conn.execute(
                "SELECT count(*) AS n FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND state = 'idle' AND query LIKE '%LISTEN engine_queue%'"
            ).fetchone()
            if row is not None and row["n"] > 0:
                return
            time.sleep(0.01)
        raise AssertionError("no receiver started waiting")

    def close(self) -> None:
        for transport in self._transports:
            transport.close()


class SqsHarness:
    """SQS through moto in-process; time moves by ageing moto's messages."""

    limits = {
        EXCLUSIVE_RECEIVES: (
            "moto hands a message to two concurrent receivers now and then (SQS may too: "
            "at-least-once); only that nothing is lost is checked"
        ),
        CLOSE_INTERRUPTS_WAIT: (
            "an SQS long poll in flight cannot be cut short; close ends the receive when "
            "that poll returns (at most 20 s, checked in tests/sqs)"
        ),
    }

    def __init__(self) -> None:
        self._client = boto3.client("sqs", region_name=REGION)
        self.queues = create_queues(
            # receive counts in these tests stay far below the redrive cap
            SqsSettings(region=REGION, max_receive_count=100),
            visibility_s=30,
            name=f"conformance-{uuid.uuid4().hex[:8]}",
            client=self._client,
        )
        self._settings = SqsSettings(queue_url=self.queues.url, region=REGION)
        self._transports: list[SqsTransport] = []
        self._polling = threading.Event()
        self.transport: Transport = self.new_transport()

    def new_transport(self) -> Transport:
        transport = SqsTransport(self._settings)
        transport.client.meta.events.register("before-send.sqs.ReceiveMessage", self._saw_receive)
        self._transports.append(transport)
        return transport

    def _saw_receive(self, request: Any, **_: Any) -> None:
        body = request.body.decode() if isinstance(request.body, bytes) else request.body
        if body and '"WaitTimeSeconds": 0' not in body and "WaitTimeSeconds" in body:
            self._polling.set()

    def expire(self, receipt: str | None = None) -> None:
        if receipt is not None:
            self._client.change_message_visibility(
                QueueUrl=self.queues.url, ReceiptHandle=receipt, VisibilityTimeout=0
            )
            return
        for m in moto_messages(self.queues.name):
            m.visible_at = 0.0
            m.delayed_until = 0.0

    def elapse(self, seconds: float) -> None:
        ms = seconds * 1000
        for m in moto_messages(self.queues.name):
            m.visible_at -= ms
            m.delayed_until -= ms
            m.sent_timestamp -= int(ms)  # moto bounds visibility by the time since sending

    def wait_for_waiting_receiver(self, timeout: float) -> None:
        # a long-poll request on its way: a message sent from now on reaches it
        if not self._polling.wait(timeout):
            raise AssertionError("no receiver started waiting")

    def close(self) -> None:
        for transport in self._transports:
            transport.close()


@pytest.fixture(params=TRANSPORTS)
def queue(request: pytest.FixtureRequest) -> Iterator[QueueHarness]:
    harness: PostgresHarness | SqsHarness
    if request.param == "postgres":
        harness = PostgresHarness(
            request.getfixturevalue("settings"), request.getfixturevalue("conn")
        )
    elif request.param == "sqs":
        monkeypatch = request.getfixturevalue("monkeypatch")
        documented_receipts(monkeypatch)
        with moto_in_process(monkeypatch):
            harness = SqsHarness()
            try:
                yield harness
            finally:
                harness.close()
        return
    else:
        raise AssertionError(f"no harness for transport {request.param!r}")
    try:
        yield harness
    finally:
        harness.close()


def message() -> StepMessage:
    return StepMessage(job_id=uuid.uuid4(), step_run_id=uuid.uuid4())


def publish(queue: QueueHarness, *messages: StepMessage, delay_s: float = 0.0) -> None:
    queue.transport.publish(None, [Outgoing(m, delay_s) for m in messages])


def receive_one(queue: QueueHarness, visibility_s: float = 30.0) -> Received:
    got = queue.transport.receive(1, visibility_s, 0)
    assert len(got) == 1, got
    return got[0]


def assert_empty(queue: QueueHarness) -> None:
    queue.expire()
    assert queue.transport.receive(10, 30, 0) == []


def test_transport__publish_then_receive_round_trips_the_message(queue: QueueHarness) -> None:
    sent = message()
    publish(queue, sent)

    got = receive_one(queue)

    assert StepMessage.decode(got.body) == sent
    assert got.receive_count == 1
    assert got.message_id and got.receipt


def test_transport__send_raw_delivers_the_body_as_is(queue: QueueHarness) -> None:
    queue.transport.send_raw("not an envelope")

    assert receive_one(queue).body == "not an envelope"


def test_transport__received_message_is_hidden_from_a_second_receive(
    queue: QueueHarness,
) -> None:
    publish(queue, message())
    receive_one(queue)

    assert queue.transport.receive(10, 30, 0) == []


def test_transport__expiry_redelivers_with_count_2_and_a_new_receipt(
    queue: QueueHarness,
) -> None:
    publish(queue, message())
    first = receive_one(queue)

    queue.expire(first.receipt)
    second = receive_one(queue)

    assert second.message_id == first.message_id
    assert second.body == first.body
    assert second.receive_count == 2
    assert second.receipt != first.receipt


def test_transport__stale_receipt_neither_deletes_nor_extends(queue: QueueHarness) -> None:
    publish(queue, message())
    first = receive_one(queue)
    queue.expire(first.receipt)
    second = receive_one(queue)

    assert queue.transport.extend([first.receipt], 600) == set()
    queue.transport.delete([first.receipt])

    # still there, and the current receipt still owns it
    assert queue.transport.extend([second.receipt], 600) == {second.receipt}
    queue.expire(second.receipt)
    assert receive_one(queue).receive_count == 3


def test_transport__extend_keeps_the_message_hidden_past_its_first_timeout(
    queue: QueueHarness,
) -> None:
    publish(queue, message(), message())
    extended, plain = queue.transport.receive(2, 30, 0)

    assert queue.transport.extend([extended.receipt], 600) == {extended.receipt}
    queue.elapse(60)

    # the un-extended one is back (the other side of the horizon), the extended one is not
    again = queue.transport.receive(10, 30, 0)
    assert [m.message_id for m in again] == [plain.message_id]


def test_transport__delete_removes_the_message(queue: QueueHarness) -> None:
    publish(queue, message())
    got = receive_one(queue)

    queue.transport.delete([got.receipt])

    assert_empty(queue)
    assert queue.transport.extend([got.receipt], 30) == set()


def test_transport__delete_with_a_stale_receipt_leaves_the_message(
    queue: QueueHarness,
) -> None:
    publish(queue, message())
    first = receive_one(queue)
    queue.expire(first.receipt)
    second = receive_one(queue)

    queue.transport.delete([first.receipt])

    queue.expire(second.receipt)
    assert receive_one(queue).message_id == first.message_id


def test_transport__release_makes_the_message_visible_at_once(queue: QueueHarness) -> None:
    publish(queue, message())
    first = receive_one(queue, visibility_s=600)

    queue.transport.release([first.receipt])

    second = receive_one(queue)
    assert second.message_id == first.message_id
    assert second.receive_count == 2


def test_transport__delayed_message_is_not_received_before_its_delay(
    queue: QueueHarness,
) -> None:
    delay_s = queue.transport.max_delay_s
    publish(queue, message(), delay_s=delay_s)
    assert queue.transport.receive(10, 30, 0) == []

    queue.elapse(delay_s / 2)
    assert queue.transport.receive(10, 30, 0) == []

    queue.elapse(delay_s / 2 + 1)
    assert receive_one(queue).receive_count == 1


def test_transport__delay_beyond_the_maximum_is_refused(queue: QueueHarness) -> None:
    too_long = queue.transport.max_delay_s + 1

    with pytest.raises(BadInput, match="delay"):
        publish(queue, message(), delay_s=too_long)

    assert_empty(queue)


@TRANSACTIONAL
def test_transport__publish_in_a_rolled_back_transaction_sends_nothing(
    queue: QueueHarness, settings: Settings
) -> None:
    assert queue.transport.transactional
    with db.connect(settings) as conn:
        with conn.transaction():
            queue.transport.publish(conn, [Outgoing(message())])
            assert queue.transport.receive(10, 30, 0) == []  # not committed yet
            raise psycopg.Rollback
        assert queue.transport.receive(10, 30, 0) == []

        sent = message()
        with conn.transaction():
            queue.transport.publish(conn, [Outgoing(sent)])
        assert StepMessage.decode(receive_one(queue).body) == sent


@TRANSACTIONAL
def test_transport__delete_in_a_rolled_back_transaction_keeps_the_message(
    queue: QueueHarness, settings: Settings
) -> None:
    assert queue.transport.transactional
    publish(queue, message())
    got = receive_one(queue)

    with db.connect(settings) as conn:
        with conn.transaction():
            queue.transport.delete([got.receipt], conn)
            raise psycopg.Rollback
        assert queue.transport.extend([got.receipt], 30) == {got.receipt}

        with conn.transaction():
            queue.transport.delete([got.receipt], conn)
    assert_empty(queue)


@pytest.mark.parametrize("clients", ["shared", "one_per_thread"])
def test_transport__concurrent_receivers_get_each_message_once(
    queue: QueueHarness, clients: str
) -> None:
    publish(queue, *(message() for _ in range(200)))
    receivers = 8
    barrier = threading.Barrier(receivers)
    received: list[list[Received]] = [[] for _ in range(receivers)]
    errors: list[BaseException] = []

    def run(i: int, transport: Transport) -> None:
        try:
            barrier.wait(timeout=JOIN_TIMEOUT_S)
            while batch := transport.receive(7, 600, 0):
                received[i].extend(batch)
        except BaseException as exc:
            errors.append(exc)

    transports = [
        queue.transport if clients == "shared" else queue.new_transport() for _ in range(receivers)
    ]
    threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate(transports)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)

    assert not errors
    assert not any(thread.is_alive() for thread in threads)
    counts = Counter(m.message_id for batch in received for m in batch)
    assert len(counts) == 200
    if not lacking(queue, EXCLUSIVE_RECEIVES):
        assert set(counts.values()) == {1}


def test_transport__long_poll_wakes_on_a_message_published_meanwhile(
    queue: QueueHarness,
) -> None:
    result: list[Received] = []
    done = threading.Event()
    receiver = queue.new_transport()

    def run() -> None:
        # waits far longer than the join below: only a wake-up makes this pass
        result.extend(receiver.receive(1, 30, 10 * JOIN_TIMEOUT_S))
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    queue.wait_for_waiting_receiver(JOIN_TIMEOUT_S)
    sent = message()
    publish(queue, sent)

    assert done.wait(JOIN_TIMEOUT_S)
    assert [StepMessage.decode(m.body) for m in result] == [sent]
    thread.join(JOIN_TIMEOUT_S)


def test_transport__long_poll_returns_a_delayed_message_once_due(queue: QueueHarness) -> None:
    sent = message()
    publish(queue, sent, delay_s=0.5)
    result: list[Received] = []
    done = threading.Event()

    def run() -> None:
        result.extend(queue.transport.receive(1, 30, 10 * JOIN_TIMEOUT_S))
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    assert done.wait(JOIN_TIMEOUT_S)
    assert [StepMessage.decode(m.body) for m in result] == [sent]
    thread.join(JOIN_TIMEOUT_S)


@INTERRUPTIBLE_WAIT
def test_transport__close_ends_a_waiting_receive(queue: QueueHarness) -> None:
    assert not lacking(queue, CLOSE_INTERRUPTS_WAIT)
    receiver = queue.new_transport()
    result: list[list[Received]] = []
    done = threading.Event()

    def run() -> None:
        result.append(receiver.receive(1, 30, 10 * JOIN_TIMEOUT_S))
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    queue.wait_for_waiting_receiver(JOIN_TIMEOUT_S)

    receiver.close()

    assert done.wait(JOIN_TIMEOUT_S)
    assert result == [[]]


def test_transport__receive_without_wait_on_an_empty_queue_returns_nothing(
    queue: QueueHarness,
) -> None:
    assert queue.transport.receive(10, 30, 0) == []


def test_transport__receive_returns_at_most_max_messages(queue: QueueHarness) -> None:
    publish(queue, *(message() for _ in range(5)))

    first = queue.transport.receive(3, 30, 0)
    rest = queue.transport.receive(10, 30, 0)

    assert len(first) == 3
    assert len(rest) == 2
    assert {m.message_id for m in first}.isdisjoint(m.message_id for m in rest)


def test_transport__dead_letter_removes_the_message(queue: QueueHarness) -> None:
    queue.transport.send_raw("garbage")
    got = receive_one(queue)

    queue.transport.dead_letter(got, "malformed: not a step message envelope")

    assert_empty(queue)
