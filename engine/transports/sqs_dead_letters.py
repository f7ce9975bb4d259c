"""The SQS dead-letter queue as a worker drains it into ``engine_dead_letters``.

SQS feeds this queue itself: the step queue's redrive policy (made by
:mod:`engine.transports.sqs_queues`) moves a message received
``maxReceiveCount`` times without being deleted. The sweeper hands each such
message to a ``record`` callback (which inserts the dead letter and raises
its alert, invariant 11) and only then deletes it: a crash in between shows
the message again after its visibility timeout, so it is recorded twice at
worst, never lost.

One :class:`SqsDeadLetters` belongs to one :class:`~engine.transports.sqs.SqsTransport`
(``transport.dead_letters``) and uses its client, its open/closed state and
its batch delete.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from engine.transports.base import Received
from engine.transports.sqs_client import (
    MAX_BATCH,
    MAX_VISIBILITY_S,
    RECEIVE_COUNT,
    api_call,
    received_from,
    whole_seconds,
)

if TYPE_CHECKING:
    from engine.transports.sqs import SqsTransport

__all__ = ["SqsDeadLetters"]


class SqsDeadLetters:
    """Receive, record and delete the messages SQS moved to the dead-letter queue."""

    def __init__(self, transport: SqsTransport) -> None:
        self._transport = transport
        self._url: str | None = transport.settings.dlq_url

    def queue_url(self) -> str | None:
        """``ENGINE_SQS_DLQ_URL``, else the target of the queue's redrive policy."""
        if self._url is None:
            transport = self._transport
            attributes = transport.queue_attributes(transport.queue_url, ["RedrivePolicy"])
            policy = attributes.get("RedrivePolicy")
            if not policy:
                return None
            arn = str(json.loads(policy)["deadLetterTargetArn"])
            account, name = arn.split(":")[4], arn.split(":")[5]
            with api_call("GetQueueUrl"):
                response = transport.client.get_queue_url(
                    QueueName=name, QueueOwnerAWSAccountId=account
                )
            self._url = str(response["QueueUrl"])
        return self._url

    def receive(self, max_messages: int = MAX_BATCH, visibility_s: float = 60.0) -> list[Received]:
        """Messages SQS moved to the dead-letter queue, hidden for ``visibility_s``.

        Record them, then :meth:`delete`; a crash in between shows them again
        after ``visibility_s`` (recorded twice, never lost).
        """
        self._transport.check_open()
        dlq = self.queue_url()
        if dlq is None:
            return []
        with api_call("ReceiveMessage"):
            response = self._transport.client.receive_message(
                QueueUrl=dlq,
                MaxNumberOfMessages=max(1, min(max_messages, MAX_BATCH)),
                VisibilityTimeout=whole_seconds(visibility_s, MAX_VISIBILITY_S),
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=[RECEIVE_COUNT],
            )
        return [received_from(m) for m in response.get("Messages", [])]

    def delete(self, receipts: Sequence[str]) -> None:
        """Delete recorded messages from the dead-letter queue (errors are logged)."""
        self._transport.check_open()
        dlq = self.queue_url()
        if dlq is not None:
            self._transport.delete_from(dlq, list(dict.fromkeys(receipts)))

    def drain(self, record: Callable[[Received, str], None], limit: int = 100) -> int:
        """Hand up to ``limit`` dead-letter-queue messages to ``record``, then delete them.

        ``record(received, reason)`` must commit before it returns (the
        sweeper inserts the dead letter and raises its alert). A message is
        deleted only after it was recorded; if ``record`` raises, the
        messages recorded so far are deleted, the rest come back after 60 s,
        and the error propagates. Returns how many were recorded.
        """
        drained = 0
        while drained < limit:
            batch = self.receive(min(MAX_BATCH, limit - drained))
            if not batch:
                break
            recorded: list[str] = []
            try:
                for received in batch:
                    record(received, self.reason(received))
                    recorded.append(received.receipt)
            finally:
                self.delete(recorded)
                drained += len(recorded)
        return drained

    def reason(self, received: Received) -> str:
        """The reason recorded for a message SQS moved to the dead-letter queue."""
        return (
            f"SQS moved message {received.message_id} to the dead-letter queue: received more "
            f"than maxReceiveCount ({self._transport.settings.max_receive_count}) times without "
            f"being deleted (ApproximateReceiveCount {received.receive_count})"
        )
