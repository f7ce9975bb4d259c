"""SQS through moto for tests: in-process (``mock_aws``) or a server on 127.0.0.1.

moto's SQS backend is not thread-safe in-process (two receives at once can
raise ``Set changed size during iteration``); its server answers such races
with a 500 that botocore retries, but in-process the error reaches the
caller. :func:`moto_in_process` serialises the backend's calls, releasing the
lock while a long poll waits, so threads behave as they would against SQS.

Both use :func:`fast_moto_clock`: moto reads the time through datetime
arithmetic several times per message on every receive, which makes its
receives cost milliseconds per message in the queue.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.server import ThreadedMotoServer
from moto.sqs import models as moto_sqs

REGION = "us-east-1"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
}
_SERIALISED = (
    "send_message",
    "send_message_batch",
    "delete_message",
    "delete_message_batch",
    "change_message_visibility",
    "change_message_visibility_batch",
    "get_queue_attributes",
    "purge_queue",
)


def fast_moto_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same clock for moto's SQS (seconds since the epoch), without datetime arithmetic."""
    unix_time = moto_sqs.unix_time

    def now(dt: Any = None) -> float:
        return time.time() if dt is None else float(unix_time(dt))

    monkeypatch.setattr(moto_sqs, "unix_time", now)
    monkeypatch.setattr(moto_sqs, "unix_time_millis", lambda dt=None: now(dt) * 1000.0)


def _serialise(monkeypatch: pytest.MonkeyPatch) -> None:
    lock = threading.RLock()
    backend = moto_sqs.SQSBackend

    def locked(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return fn(*args, **kwargs)

        return call

    for name in _SERIALISED:
        monkeypatch.setattr(backend, name, locked(getattr(backend, name)))
    receive = backend.receive_message

    def receive_message(
        self: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        deadline = time.monotonic() + (wait_seconds_timeout or 0)
        while True:
            with lock:
                got = receive(
                    self, queue_name, count, 0, visibility_timeout, message_attribute_names
                )
            remaining = deadline - time.monotonic()
            if got or remaining <= 0:
                return list(got)
            # outside the lock: senders must get in to wake us
            self.get_queue(queue_name).wait_for_messages(min(1.0, remaining))

    monkeypatch.setattr(backend, "receive_message", receive_message)


@contextmanager
def moto_in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``mock_aws`` with fake credentials, no endpoint override, serialised SQS calls."""
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_SQS", raising=False)
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    _serialise(monkeypatch)
    fast_moto_clock(monkeypatch)
    with mock_aws():
        yield


def documented_receipts(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto with SQS's documented receipt rule: only the latest receipt of a message counts.

    AWS: "you must provide the most recently received ReceiptHandle for the
    message (otherwise, the request succeeds, but the message will not be
    deleted)", and ChangeMessageVisibility refuses a receipt no longer in
    flight. moto accepts every receipt a message ever had.
    """
    monkeypatch.setattr(
        moto_sqs.Message,
        "had_receipt_handle",
        lambda self, receipt: receipt == self.receipt_handle,
    )


def moto_messages(queue_name: str) -> list[Any]:
    """moto's own message objects of a queue (in-process, or this process's server)."""
    backend = moto_sqs.sqs_backends[DEFAULT_ACCOUNT_ID][REGION]
    return list(backend.queues[queue_name]._messages)


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's server on 127.0.0.1 (never 0.0.0.0), a free port; its endpoint URL.

    Use with :func:`fast_moto_clock` where many messages wait in a queue.
    """
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a log line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        assert host == "127.0.0.1"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@contextmanager
def server_env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> Iterator[None]:
    """Point boto3 (here and in child processes, through os.environ) at ``endpoint``."""
    assert endpoint.startswith("http://127.0.0.1:"), endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    yield


def queue_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)
