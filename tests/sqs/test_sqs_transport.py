"""The SQS transport's own behaviour through moto in-process: batching, SQS's
limits checked by the engine, the 12-hour bound, redrive to the DLQ, queue
creation, configuration. (The shared contract is in
tests/integration/test_transport.py.)"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from sqs_support import REGION, moto_messages, queue_name

from engine.cli import main
from engine.config import Settings
from engine.errors import BadInput, ConfigError
from engine.transports import sqs as sqs_module
from engine.transports import transport_for
from engine.transports.base import Outgoing, Received
from engine.transports.message import MAX_BODY_BYTES, StepMessage
from engine.transports.sqs import SqsSettings, SqsTransport
from engine.transports.sqs_queues import Queues, create_queues


@pytest.fixture
def queues(client: Any) -> Queues:
    return create_queues(
        SqsSettings(max_receive_count=3), visibility_s=30, name=queue_name("t"), client=client
    )


@pytest.fixture
def transport(queues: Queues) -> Iterator[SqsTransport]:
    t = SqsTransport(SqsSettings(queue_url=queues.url, max_receive_count=3))
    yield t
    t.close()


class Params:
    """The parameters of every call of one operation, recorded as botocore builds them."""

    def __init__(self, transport: SqsTransport, operation: str) -> None:
        self.calls: list[dict[str, Any]] = []
        transport.client.meta.events.register(
            f"provide-client-params.sqs.{operation}", self._record
        )

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        self.calls.append(dict(params))


def message() -> StepMessage:
    return StepMessage(job_id=uuid.uuid4(), step_run_id=uuid.uuid4())


def receive_all(transport: SqsTransport, visibility_s: float = 30) -> list[Received]:
    got: list[Received] = []
    while batch := transport.receive(10, visibility_s, 0):
        got.extend(batch)
    return got


# -- batching ------------------------------------------------------------------------


def test_publish__sends_in_batches_of_ten_with_whole_second_delays(
    transport: SqsTransport,
) -> None:
    sends = Params(transport, "SendMessageBatch")

    transport.publish(None, [Outgoing(message(), delay_s=i % 3 * 0.4) for i in range(23)])

    assert [len(c["Entries"]) for c in sends.calls] == [10, 10, 3]
    delays = [e["DelaySeconds"] for c in sends.calls for e in c["Entries"]]
    assert set(delays) == {0, 1}  # 0.4 and 0.8 s round up: never delivered early
    assert transport.api_calls()["SendMessageBatch"] == 3


def test_receive__at_most_ten_messages_and_long_polls_at_most_20_s(
    transport: SqsTransport,
) -> None:
    receives = Params(transport, "ReceiveMessage")
    transport.publish(None, [Outgoing(message()) for _ in range(15)])

    first = transport.receive(50, 30.2, 600)
    transport.receive(1, 30, 0.3)

    assert len(first) == 10
    long_poll, short_wait = receives.calls
    assert (long_poll["MaxNumberOfMessages"], long_poll["WaitTimeSeconds"]) == (10, 20)
    assert long_poll["VisibilityTimeout"] == 31  # rounded up: never hidden shorter than asked
    assert short_wait["WaitTimeSeconds"] == 1  # a positive wait never becomes a busy loop


def test_receive__an_empty_wait_returns_after_the_wait(transport: SqsTransport) -> None:
    started = time.monotonic()

    assert transport.receive(10, 30, 1.0) == []

    assert 0.9 < time.monotonic() - started < 10


def test_delete__batches_of_ten(transport: SqsTransport, queues: Queues) -> None:
    transport.publish(None, [Outgoing(message()) for _ in range(25)])
    got = receive_all(transport)
    deletes = Params(transport, "DeleteMessageBatch")

    transport.delete([r.receipt for r in got] + [got[0].receipt])  # a repeat is sent once

    assert [len(c["Entries"]) for c in deletes.calls] == [10, 10, 5]
    assert moto_messages(queues.name) == []


def test_extend__one_batch_call_per_ten_and_stale_receipts_left_out(
    transport: SqsTransport, client: Any, queues: Queues
) -> None:
    transport.publish(None, [Outgoing(message()) for _ in range(12)])
    got = receive_all(transport)
    # two of them are received again: their first receipts are stale
    for stale in got[:2]:
        client.change_message_visibility(
            QueueUrl=queues.url, ReceiptHandle=stale.receipt, VisibilityTimeout=0
        )
    again = transport.receive(10, 30, 0)
    assert {r.message_id for r in again} == {r.message_id for r in got[:2]}
    changes = Params(transport, "ChangeMessageVisibilityBatch")

    extended = transport.extend([r.receipt for r in got + again], 600)

    assert extended == {r.receipt for r in got[2:] + again}
    assert [len(c["Entries"]) for c in changes.calls] == [10, 4]


def test_extend__never_asks_past_12_hours_from_the_receive(
    transport: SqsTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport.publish(None, [Outgoing(message())])
    got = transport.receive(1, 30, 0)[0]
    changes = Params(transport, "ChangeMessageVisibilityBatch")
    real = time.monotonic

    # 11 h 58 min later: two minutes are left, less the safety margin
    monkeypatch.setattr(sqs_module.time, "monotonic", lambda: real() + 43_080)
    assert transport.extend([got.receipt], 600) == {got.receipt}
    asked = changes.calls[0]["Entries"][0]["VisibilityTimeout"]
    assert 60 <= asked <= 120 - 29

    # past the 12 hours: the copy is lost, and SQS is not even asked
    monkeypatch.setattr(sqs_module.time, "monotonic", lambda: real() + 43_200)
    assert transport.extend([got.receipt], 600) == set()
    assert len(changes.calls) == 1


def test_release__makes_them_visible_at_once(transport: SqsTransport) -> None:
    transport.publish(None, [Outgoing(message()) for _ in range(3)])
    got = receive_all(transport, visibility_s=600)

    transport.release([r.receipt for r in got])

    assert {r.message_id for r in receive_all(transport)} == {r.message_id for r in got}


# -- what the engine checks itself (moto does not) -----------------------------------


def test_send_raw__size_is_counted_in_utf8_bytes(transport: SqsTransport) -> None:
    transport.send_raw("a" * MAX_BODY_BYTES)

    # fewer characters than the limit, more bytes
    with pytest.raises(BadInput, match=f"{MAX_BODY_BYTES + 2} bytes"):
        transport.send_raw("é" * (MAX_BODY_BYTES // 2 + 1))


@pytest.mark.parametrize(
    ("body", "problem"),
    [("", "empty"), ("a\x00b", "'\\\\x00'"), ("\x0b", "'\\\\x0b'"), ("\ud800", "'\\\\ud800'")],
)
def test_send_raw__bodies_sqs_would_refuse_are_refused(
    transport: SqsTransport, queues: Queues, body: str, problem: str
) -> None:
    with pytest.raises(BadInput, match=problem):
        transport.send_raw(body)

    assert moto_messages(queues.name) == []


def test_publish__a_delay_past_900_s_is_refused_before_anything_is_sent(
    transport: SqsTransport, queues: Queues
) -> None:
    with pytest.raises(BadInput, match=r"delay of 900\.5 s"):
        transport.publish(None, [Outgoing(message()), Outgoing(message(), delay_s=900.5)])

    assert moto_messages(queues.name) == []


# -- the dead-letter queue ------------------------------------------------------------


def test_redrive__past_max_receive_count_the_message_moves_to_the_dlq(
    transport: SqsTransport, client: Any, queues: Queues
) -> None:
    transport.send_raw("poison")
    for count in (1, 2, 3):  # maxReceiveCount 3
        got = transport.receive(1, 0, 0)
        assert [r.receive_count for r in got] == [count]

    assert transport.receive(10, 30, 0) == []  # the 4th receive moved it instead
    [dead] = transport.dead_letters.receive()
    assert dead.body == "poison"
    reason = transport.dead_letters.reason(dead)
    assert "maxReceiveCount (3)" in reason
    assert f"ApproximateReceiveCount {dead.receive_count}" in reason


def test_give_back__a_copy_near_max_receive_count_is_sent_again_not_burned(
    transport: SqsTransport,
) -> None:
    """Giving a delivery back is never the message's fault (a shutdown, a lost lock race, a
    step run held or not due yet); yet each return counted a receive, and a copy given back
    at its last receive moved to the dead-letter queue on the next one: a dead letter and an
    alert for a step run nothing was wrong with (seen in the SQS chaos run). A copy whose
    next return could be its last is sent again fresh instead, and the worn one deleted."""
    sent = message()
    transport.publish(None, [Outgoing(sent)])
    for n in range(7):  # maxReceiveCount 3: the 4th receive would have moved it
        [got] = receive_all(transport, visibility_s=600)
        assert StepMessage.decode(got.body) == sent, n
        if n % 2:
            transport.release([got.receipt])
        else:
            transport.give_back([got.receipt], 0)

    assert transport.dead_letters.receive() == []


def test_give_back__later_hides_a_copy_or_sends_it_again_delayed(
    transport: SqsTransport, queues: Queues
) -> None:
    sent = message()
    transport.publish(None, [Outgoing(sent)])
    [got] = receive_all(transport, visibility_s=600)
    transport.give_back([got.receipt], 0)  # its first receive: visible again at once
    [again] = receive_all(transport, visibility_s=600)
    assert again.receive_count == 2

    transport.give_back([again.receipt], 60)  # worn: a fresh copy, due in 60 s
    assert receive_all(transport) == []
    [fresh] = moto_messages(queues.name)
    assert StepMessage.decode(fresh.body) == sent and fresh.delayed_until > time.time() + 50
    assert transport.dead_letters.receive() == []


def test_give_back__a_worn_copy_that_cannot_be_sent_again_is_returned_as_it_is(
    transport: SqsTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = message()
    transport.publish(None, [Outgoing(sent)])
    [got] = receive_all(transport, visibility_s=600)
    transport.release([got.receipt])
    [worn] = receive_all(transport, visibility_s=600)
    assert worn.receive_count == 2  # maxReceiveCount 3: worn

    def refused(chunk: Any) -> None:
        raise sqs_module.SqsError("SendMessageBatch refused")

    monkeypatch.setattr(transport, "_send_batch", refused)
    transport.give_back([worn.receipt], 0)

    [back] = receive_all(transport)  # the same copy, visible at once: not left hidden
    assert StepMessage.decode(back.body) == sent and back.receive_count == 3


def test_drain_dead_letters__deletes_only_what_was_recorded(
    transport: SqsTransport, queues: Queues
) -> None:
    for body in ("one", "two", "three"):
        transport.send_raw(body)
    for _ in range(4):
        transport.receive(10, 0, 0)
    recorded: list[tuple[str, str]] = []

    def record(received: Received, reason: str) -> None:
        if received.body == "three" and not recorded[2:]:
            raise RuntimeError("database down")
        recorded.append((received.body, reason))

    with pytest.raises(RuntimeError):
        transport.drain_dead_letters(record)
    left = moto_messages(queues.dlq_name)
    assert [m.body for m in left] == ["three"]  # not recorded: kept
    for m in left:  # its visibility runs out
        m.visible_at = 0.0

    assert transport.drain_dead_letters(lambda r, reason: recorded.append((r.body, reason))) == 1
    assert sorted(body for body, _ in recorded) == ["one", "three", "two"]
    assert all("dead-letter queue" in reason for _, reason in recorded)
    assert moto_messages(queues.dlq_name) == []


def test_dead_letter__removes_the_message_without_sending_it_to_the_dlq(
    transport: SqsTransport, queues: Queues
) -> None:
    transport.send_raw("garbage")
    got = transport.receive(1, 30, 0)[0]

    transport.dead_letter(got, "malformed")

    # the runner recorded it; the DLQ drain must not record it a second time
    assert moto_messages(queues.name) == []
    assert moto_messages(queues.dlq_name) == []


def test_dead_letter_queue_url__read_from_the_redrive_policy(
    transport: SqsTransport, queues: Queues
) -> None:
    assert transport.dead_letters.queue_url() == queues.dlq_url


# -- queues and configuration ---------------------------------------------------------


def test_queue_visibility_s__is_the_queues_own_attribute(client: Any) -> None:
    made = create_queues(SqsSettings(), visibility_s=77, name=queue_name("v"), client=client)

    assert SqsTransport(SqsSettings(queue_url=made.url)).queue_visibility_s() == 77.0


def test_queue_visibility_s__of_a_missing_queue_is_a_config_error(client: Any) -> None:
    url = f"https://sqs.{REGION}.amazonaws.com/123456789012/nope"

    with pytest.raises(ConfigError, match="engine queues create"):
        SqsTransport(SqsSettings(queue_url=url)).queue_visibility_s()


def test_create_queues__is_idempotent_and_applies_a_changed_receive_count(client: Any) -> None:
    name = queue_name("idem")
    first = create_queues(SqsSettings(max_receive_count=5), visibility_s=120, name=name)
    again = create_queues(SqsSettings(max_receive_count=8), visibility_s=120, name=name)

    assert (again.url, again.dlq_url) == (first.url, first.dlq_url)
    attributes = client.get_queue_attributes(QueueUrl=first.url, AttributeNames=["All"])
    policy = json.loads(attributes["Attributes"]["RedrivePolicy"])
    assert policy["deadLetterTargetArn"].endswith(f":{name}-dlq")
    assert int(policy["maxReceiveCount"]) == 8
    assert attributes["Attributes"]["VisibilityTimeout"] == "120"


def test_cli_queues_create__prints_the_urls_and_is_idempotent(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = queue_name("cli")
    monkeypatch.setenv("ENGINE_SQS_MAX_RECEIVE_COUNT", "4")
    runner = CliRunner()

    human = runner.invoke(main, ["queues", "create", "--name", name])
    as_json = runner.invoke(main, ["queues", "create", "--name", name, "--json"])

    assert human.exit_code == 0, human.output
    assert as_json.exit_code == 0, as_json.output
    made = json.loads(as_json.output)
    assert made["queue_url"] in human.output and made["dlq_url"] in human.output
    assert made["dlq_name"] == f"{name}-dlq"
    assert made["max_receive_count"] == 4
    assert len(client.list_queues(QueueNamePrefix=name)["QueueUrls"]) == 2


def test_cli_queues_create__a_bad_name_exits_2(client: Any) -> None:
    result = CliRunner().invoke(main, ["queues", "create", "--name", "no spaces"])

    assert result.exit_code == 2
    assert "'no spaces'" in result.output


def test_transport_for__sqs_reads_engine_sqs_settings(
    queues: Queues, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGINE_SQS_QUEUE_URL", queues.url)

    transport = transport_for(Settings(transport="sqs"))

    assert isinstance(transport, SqsTransport)
    assert transport.queue_url == queues.url
    transport.close()


def test_transport__without_a_queue_url_is_a_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGINE_SQS_QUEUE_URL", raising=False)

    with pytest.raises(ConfigError, match="ENGINE_SQS_QUEUE_URL"):
        SqsTransport(SqsSettings())


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/q", "eu-west-1"),
        ("http://127.0.0.1:5000/123456789012/q", "us-east-1"),
    ],
)
def test_settings__region_comes_from_the_queue_url_else_us_east_1(url: str, region: str) -> None:
    assert SqsSettings(queue_url=url).resolved_region() == region
    assert SqsSettings(queue_url=url, region="ap-south-1").resolved_region() == "ap-south-1"
