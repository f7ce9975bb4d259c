"""SQS errors injected through botocore's event hooks, against moto's server on 127.0.0.1.

``before-send`` handlers answer in place of the server (a throttling error, a
500) or raise (a connection reset), so botocore's retries see exactly what
they would see from SQS. ``after-call`` handlers turn one entry of a
successful batch response into a failure: a batch call can succeed with some
entries failed. The server (not moto in-process) because in-process moto
would still carry out a request whose answer was replaced.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError
from sqs_support import REGION, moto_server, queue_name, server_env

from engine.errors import SqsError
from engine.transports.base import Outgoing, Received
from engine.transports.message import StepMessage
from engine.transports.sqs import SqsSettings, SqsTransport
from engine.transports.sqs_queues import Queues, create_queues


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def queues(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Queues]:
    with server_env(monkeypatch, endpoint):
        yield create_queues(SqsSettings(), visibility_s=30, name=queue_name("faults"))


@pytest.fixture
def client(queues: Queues) -> Any:
    return boto3.client("sqs", region_name=REGION)


def make(queues: Queues, attempts: int = 5) -> SqsTransport:
    return SqsTransport(SqsSettings(queue_url=queues.url, api_max_attempts=attempts))


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def error(status: int, code: str) -> AWSResponse:
    """An SQS (JSON protocol) error response."""
    body = json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": "injected"})
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "x-amzn-query-error": f"{code};{'Sender' if status < 500 else 'Receiver'}",
    }
    return AWSResponse("http://127.0.0.1/", status, headers, _Body(body.encode()))


THROTTLED = ("throttled", 400, "ThrottlingException")
SERVER_ERROR = ("500", 500, "InternalError")
UNAVAILABLE = ("503", 503, "ServiceUnavailable")
RESET = ("reset", 0, "")


class Faults:
    """Answer the next calls of ``operation`` with ``faults``, then let calls through."""

    def __init__(self, transport: SqsTransport, operation: str, *faults: tuple[str, int, str]):
        self.faults = list(faults)
        self.always: tuple[str, int, str] | None = None
        transport.client.meta.events.register(f"before-send.sqs.{operation}", self._send)

    def _send(self, request: Any, **_: Any) -> AWSResponse | None:
        fault = self.faults.pop(0) if self.faults else self.always
        if fault is None:
            return None
        _, status, code = fault
        if status == 0:
            raise ConnectionClosedError(endpoint_url=request.url)
        return error(status, code)


def fail_one_entry(transport: SqsTransport, operation: str, sender_fault: bool = False) -> None:
    """The next batch response of ``operation`` reports its entry "1" failed."""
    done = False

    def after(parsed: dict[str, Any], **_: Any) -> None:
        nonlocal done
        if done:
            return
        done = True
        parsed["Successful"] = [e for e in parsed.get("Successful", []) if e["Id"] != "1"]
        parsed["Failed"] = [
            {"Id": "1", "SenderFault": sender_fault, "Code": "InternalError", "Message": "x"}
        ]

    transport.client.meta.events.register(f"after-call.sqs.{operation}", after)


def message() -> StepMessage:
    return StepMessage(job_id=uuid.uuid4(), step_run_id=uuid.uuid4())


def count(client: Any, queues: Queues) -> int:
    attributes = client.get_queue_attributes(
        QueueUrl=queues.url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(v) for v in attributes.values())


# -- retried: nothing lost -------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "fault"),
    [
        ("SendMessageBatch", THROTTLED),
        ("ReceiveMessage", SERVER_ERROR),
        ("ChangeMessageVisibilityBatch", RESET),
        ("DeleteMessageBatch", UNAVAILABLE),
    ],
    ids=["send-throttled", "receive-500", "visibility-reset", "delete-503"],
)
def test_faults__every_call_is_retried_and_nothing_is_lost(
    queues: Queues, client: Any, operation: str, fault: tuple[str, int, str]
) -> None:
    transport = make(queues)
    Faults(transport, operation, fault)
    sent = message()

    transport.publish(None, [Outgoing(sent)])
    [got] = transport.receive(10, 30, 1)
    assert transport.extend([got.receipt], 60) == {got.receipt}
    transport.delete([got.receipt])

    assert StepMessage.decode(got.body) == sent
    assert transport.api_calls()[operation] == 2  # the fault, then the retry
    assert count(client, queues) == 0


# -- past the retries ------------------------------------------------------------------


def test_faults__a_delete_failing_past_its_retries_is_logged_and_the_message_comes_back(
    queues: Queues, client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    transport = make(queues, attempts=2)
    transport.send_raw("x")
    [got] = transport.receive(1, 30, 1)
    Faults(transport, "DeleteMessageBatch").always = SERVER_ERROR

    with caplog.at_level(logging.WARNING, logger="engine.transports.sqs"):
        transport.delete([got.receipt])  # raises nothing

    assert "will be redelivered" in caplog.text
    assert transport.api_calls()["DeleteMessageBatch"] == 2
    client.change_message_visibility(
        QueueUrl=queues.url, ReceiptHandle=got.receipt, VisibilityTimeout=0
    )
    assert [r.message_id for r in transport.receive(1, 30, 1)] == [got.message_id]


def test_faults__visibility_calls_failing_past_retries_lose_the_copy_and_raise_nothing(
    queues: Queues, caplog: pytest.LogCaptureFixture
) -> None:
    transport = make(queues, attempts=2)
    transport.send_raw("x")
    [got] = transport.receive(1, 30, 1)
    Faults(transport, "ChangeMessageVisibilityBatch").always = RESET

    with caplog.at_level(logging.WARNING, logger="engine.transports.sqs"):
        assert transport.extend([got.receipt], 60) == set()
        transport.release([got.receipt])

    assert "extend of 1 message(s) failed" in caplog.text
    assert "release of 1 message(s) failed" in caplog.text


@pytest.mark.parametrize(
    ("operation", "call"),
    [
        ("SendMessageBatch", lambda t: t.publish(None, [Outgoing(message())])),
        ("SendMessageBatch", lambda t: t.send_raw("x")),
        ("ReceiveMessage", lambda t: t.receive(1, 30, 0)),
    ],
    ids=["publish", "send_raw", "receive"],
)
def test_faults__send_and_receive_failing_past_retries_raise(
    queues: Queues, operation: str, call: Any
) -> None:
    transport = make(queues, attempts=2)
    Faults(transport, operation).always = THROTTLED

    with pytest.raises(SqsError, match=operation) as raised:
        call(transport)

    assert "ThrottlingException" in str(raised.value)
    assert raised.value.__cause__ is not None


# -- batch responses are read entry by entry -------------------------------------------


def test_entries__a_failed_send_entry_is_sent_again_alone(queues: Queues, client: Any) -> None:
    transport = make(queues)
    fail_one_entry(transport, "SendMessageBatch")
    sent = [message() for _ in range(3)]

    transport.publish(None, [Outgoing(m) for m in sent])

    assert transport.api_calls()["SendMessageBatch"] == 2
    got: list[Received] = []
    while batch := transport.receive(10, 30, 0):
        got.extend(batch)
    # the entry reported failed had reached the queue: a duplicate, never a loss
    assert {StepMessage.decode(r.body) for r in got} == set(sent)


def test_entries__a_send_entry_failed_by_the_sender_raises(queues: Queues) -> None:
    transport = make(queues)
    fail_one_entry(transport, "SendMessageBatch", sender_fault=True)

    with pytest.raises(SqsError, match="1 of 3 message"):
        transport.publish(None, [Outgoing(message()) for _ in range(3)])


def test_entries__a_failed_visibility_entry_is_left_out_of_extend(queues: Queues) -> None:
    transport = make(queues)
    transport.publish(None, [Outgoing(message()) for _ in range(3)])
    got = transport.receive(10, 30, 1)
    while len(got) < 3:
        got += transport.receive(10, 30, 0)
    fail_one_entry(transport, "ChangeMessageVisibilityBatch")

    extended = transport.extend([r.receipt for r in got], 60)

    assert extended == {got[0].receipt, got[2].receipt}


def test_entries__a_failed_delete_entry_is_logged_not_raised(
    queues: Queues, caplog: pytest.LogCaptureFixture
) -> None:
    transport = make(queues)
    transport.publish(None, [Outgoing(message()) for _ in range(3)])
    got = transport.receive(10, 30, 1)
    while len(got) < 3:
        got += transport.receive(10, 30, 0)
    fail_one_entry(transport, "DeleteMessageBatch")

    with caplog.at_level(logging.WARNING, logger="engine.transports.sqs"):
        transport.delete([r.receipt for r in got])

    assert "delete refused for one message: InternalError" in caplog.text
