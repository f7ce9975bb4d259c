"""Shared fixtures of the SQS tests: moto in process, with SQS's documented receipts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from sqs_support import REGION, documented_receipts, moto_in_process, queue_name

from engine.transports.sqs import SqsSettings, SqsTransport
from engine.transports.sqs_queues import Queues, create_queues


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    documented_receipts(monkeypatch)
    with moto_in_process(monkeypatch):
        yield boto3.client("sqs", region_name=REGION)


@pytest.fixture
def max_receive_count() -> int:
    """SQS's redrive count of the test queue; a module overrides it to make receives count."""
    return 100


@pytest.fixture
def queues(client: Any, max_receive_count: int) -> Queues:
    """A queue and its dead-letter queue, with redrive after ``max_receive_count`` receives."""
    return create_queues(
        SqsSettings(max_receive_count=max_receive_count),
        visibility_s=60,
        name=queue_name("t"),
        client=client,
    )


@pytest.fixture
def transports(queues: Queues, max_receive_count: int) -> Iterator[Callable[[], SqsTransport]]:
    """Makes a transport per worker (and the test): each its own client of the same queue."""
    made: list[SqsTransport] = []

    def new() -> SqsTransport:
        made.append(
            SqsTransport(SqsSettings(queue_url=queues.url, max_receive_count=max_receive_count))
        )
        return made[-1]

    yield new
    for t in made:
        t.close()
