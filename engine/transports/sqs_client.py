"""The SQS API as the engine uses it: settings, one client, its limits and its errors.

Shared by the transport (:mod:`engine.transports.sqs`, what a worker does
with the queues) and the set-up (:mod:`engine.transports.sqs_queues`, what
an operator does once). botocore retries throttling, 5xx and resets
(``standard`` mode, bounded attempts); an error that outlives those retries
becomes :class:`~engine.errors.SqsError` in :func:`api_call`. SQS's own
limits (batch of 10, 20 s long poll, 900 s delay, 12 h visibility, XML-legal
bodies) are checked here, because emulators do not check them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.errors import BadInput, SqsError
from engine.infra import faults
from engine.transports.base import Received
from engine.transports.message import MAX_BODY_BYTES

__all__ = [
    "MAX_BATCH",
    "MAX_DELAY_S",
    "MAX_VISIBILITY_S",
    "MAX_WAIT_S",
    "MISSING_QUEUE_CODES",
    "RECEIVE_COUNT",
    "SqsSettings",
    "api_call",
    "check_body",
    "error_code",
    "received_from",
    "sqs_client",
    "whole_seconds",
]

MAX_BATCH = 10  # entries per SQS batch call, and messages per receive
MAX_WAIT_S = 20  # longest WaitTimeSeconds of one receive
MAX_DELAY_S = 900  # longest DelaySeconds
MAX_VISIBILITY_S = 43_200  # 12 hours, counted from the receive
RECEIVE_COUNT = "ApproximateReceiveCount"  # the system attribute asked for on receive
# Error codes meaning "no such queue" (they differ between SQS API protocols and emulators).
MISSING_QUEUE_CODES = frozenset(
    {"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "NonExistentQueue"}
)
# characters outside XML 1.0's Char production, which SQS refuses
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SQS_HOST = re.compile(r"^sqs[.-](?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


class SqsSettings(BaseSettings):
    """Settings of the SQS transport; each is read from ``ENGINE_SQS_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="ENGINE_SQS_", extra="ignore")

    queue_url: str | None = Field(
        default=None, description="URL of the step queue (`engine queues create` prints it)"
    )
    dlq_url: str | None = Field(
        default=None,
        description="URL of its dead-letter queue; unset: read from the queue's redrive policy",
    )
    queue_name: str = Field(
        default="engine-steps",
        pattern=r"^[A-Za-z0-9_-]{1,76}$",
        description="name `engine queues create` gives the queue (its DLQ: <name>-dlq)",
    )
    region: str | None = Field(
        default=None,
        description="AWS region; unset: the queue URL's region, else us-east-1",
    )
    max_receive_count: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="receives after which SQS moves a message to the dead-letter queue",
    )
    api_max_attempts: int = Field(
        default=5,
        ge=1,
        le=20,
        description="attempts per SQS call (botocore standard retries: throttling, 5xx, resets)",
    )
    connect_timeout_s: float = Field(default=5.0, gt=0, description="SQS connect timeout")
    read_timeout_s: float = Field(
        default=30.0,
        gt=MAX_WAIT_S,
        description="SQS read timeout; longer than a 20 s long poll",
    )
    max_pool_connections: int = Field(
        default=50,
        ge=1,
        description="HTTP connections per client (receiver, slots and heartbeats share it)",
    )

    def resolved_region(self) -> str:
        """The configured region, else the queue URL's, else ``us-east-1``."""
        if self.region:
            return self.region
        for url in (self.queue_url, self.dlq_url):
            if url and (match := _SQS_HOST.match(urlparse(url).hostname or "")):
                return match["region"]
        return "us-east-1"


def sqs_client(sqs: SqsSettings) -> Any:
    """A boto3 SQS client with bounded retries and timeouts (thread-safe)."""
    config = Config(
        region_name=sqs.resolved_region(),
        retries={"total_max_attempts": sqs.api_max_attempts, "mode": "standard"},
        connect_timeout=sqs.connect_timeout_s,
        read_timeout=sqs.read_timeout_s,
        max_pool_connections=sqs.max_pool_connections,
    )
    # a session per client: boto3's default session is not thread-safe
    return faults.sqs_errors(boto3.session.Session().client("sqs", config=config))


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` (``""`` for anything else)."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


@contextmanager
def api_call(operation: str) -> Iterator[None]:
    """Turn a botocore error (after its retries) into :class:`SqsError`."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise SqsError(f"SQS {operation} failed: {exc}") from exc


def check_body(body: str) -> None:
    """Refuse (``BadInput``) a body SQS would refuse or that is not ours: empty,
    not XML-legal, or over :data:`~engine.transports.message.MAX_BODY_BYTES` UTF-8 bytes."""
    if not body:
        raise BadInput("empty message body: SQS needs at least one character")
    if bad := _NOT_XML_CHAR.search(body):
        raise BadInput(
            f"message body has character {bad[0]!r} at offset {bad.start()}: SQS accepts only "
            "XML characters (tab, newline, carriage return, U+0020 and above, no surrogates)"
        )
    size = len(body.encode("utf-8"))
    if size > MAX_BODY_BYTES:
        raise BadInput(f"message body of {size} bytes: at most {MAX_BODY_BYTES} bytes")


def whole_seconds(seconds: float, upper: int) -> int:
    """SQS takes whole seconds: round up (never hide or delay less than asked), clamp."""
    return max(0, min(upper, math.ceil(seconds)))


def received_from(message: dict[str, Any]) -> Received:
    """A received SQS message as the engine's :class:`~engine.transports.base.Received`."""
    attributes = message.get("Attributes") or {}
    return Received(
        message_id=str(message["MessageId"]),
        body=str(message.get("Body", "")),
        receipt=str(message["ReceiptHandle"]),
        receive_count=int(attributes.get(RECEIVE_COUNT, 1)),
    )
