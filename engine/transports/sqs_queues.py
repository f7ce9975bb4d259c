"""SQS set-up: the step queue and its dead-letter queue, made together (``engine queues create``).

The two queues are one pair: the step queue's redrive policy names the
dead-letter queue, so a message received ``maxReceiveCount`` times without
being deleted is moved there by SQS itself. :func:`create_queues` makes both,
or applies the configured attributes to existing ones, and is safe to run
again or from two places at once.

Set-up runs with the operator's credentials: ``CreateQueue`` and
``SetQueueAttributes`` are not calls of the worker, whose task role does not
grant them (``deploy/iam-worker-policy.json``). Everything a worker does with
the queues, the dead-letter queue's draining included, is the transport's
(:mod:`engine.transports.sqs`).

Invariants kept here (numbered in DESIGN.md):

- 6: the step queue's ``VisibilityTimeout`` is set here; the worker reads it
  back from the queue and refuses to start unless its heartbeat is shorter.
- 11: the redrive policy moves a message that keeps coming back undeleted
  to the dead-letter queue, where the sweeper records it as a dead letter
  with an alert (``SqsTransport.drain_dead_letters``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from engine.errors import BadInput, SqsError
from engine.transports.sqs_client import (
    MAX_VISIBILITY_S,
    MISSING_QUEUE_CODES,
    SqsSettings,
    api_call,
    error_code,
    sqs_client,
    whole_seconds,
)

__all__ = ["Queues", "create_queues"]


@dataclass(frozen=True)
class Queues:
    """The step queue and its dead-letter queue, as ``engine queues create`` made them."""

    name: str
    url: str
    dlq_name: str
    dlq_url: str
    max_receive_count: int
    visibility_s: int


def create_queues(
    sqs: SqsSettings, *, visibility_s: float, name: str | None = None, client: Any | None = None
) -> Queues:
    """Create the step queue and its dead-letter queue with a redrive policy; idempotent.

    Existing queues keep their URLs and get the configured attributes again
    (a changed ``max_receive_count`` or visibility is applied).
    """
    name = name or sqs.queue_name
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,76}", name):
        raise BadInput(
            f"queue name {name!r}: use 1 to 76 letters, digits, '-' or '_' "
            "(the dead-letter queue adds '-dlq')"
        )
    client = client if client is not None else sqs_client(sqs)
    visibility = whole_seconds(visibility_s, MAX_VISIBILITY_S)
    dlq_name = f"{name}-dlq"
    # 14 days, SQS's longest retention: time for someone to look at a poison message
    dlq_url = _ensure_queue(client, dlq_name, {"MessageRetentionPeriod": "1209600"})
    dlq_arn = _queue_arn(client, dlq_url)
    redrive = json.dumps(
        {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(sqs.max_receive_count)}
    )
    url = _ensure_queue(
        client, name, {"VisibilityTimeout": str(visibility), "RedrivePolicy": redrive}
    )
    return Queues(name, url, dlq_name, dlq_url, sqs.max_receive_count, visibility)


def _ensure_queue(client: Any, name: str, attributes: dict[str, str]) -> str:
    try:
        with api_call("GetQueueUrl"):
            url = str(client.get_queue_url(QueueName=name)["QueueUrl"])
    except SqsError as exc:
        if error_code(exc.__cause__ or exc) not in MISSING_QUEUE_CODES:
            raise
        # two creators racing: CreateQueue with the same attributes returns the same URL
        with api_call("CreateQueue"):
            return str(client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])
    with api_call("SetQueueAttributes"):
        client.set_queue_attributes(QueueUrl=url, Attributes=attributes)
    return url


def _queue_arn(client: Any, url: str) -> str:
    with api_call("GetQueueAttributes"):
        response = client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(response["Attributes"]["QueueArn"])
