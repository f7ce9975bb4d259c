"""SQS for a chaos scenario: moto's standalone server on 127.0.0.1 and one queue with its DLQ.

The server runs in the harness process (``ThreadedMotoServer``, bound to
127.0.0.1, never 0.0.0.0); the workers reach it through ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engine.transports.sqs import SqsSettings
from engine.transports.sqs_queues import Queues, create_queues

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "chaos",
    "AWS_SECRET_ACCESS_KEY": "chaos",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _fast_moto_clock() -> None:
    """moto reads the clock through datetime arithmetic several times per message per receive."""
    from moto.sqs import models

    if getattr(models, "_chaos_fast_clock", False):
        return
    setattr(models, "_chaos_fast_clock", True)  # noqa: B010
    unix_time = models.unix_time  # type: ignore[attr-defined]

    def now(dt: Any = None) -> float:
        return time.time() if dt is None else float(unix_time(dt))

    setattr(models, "unix_time", now)  # noqa: B010  moto's module, not ours
    setattr(models, "unix_time_millis", lambda dt=None: now(dt) * 1000.0)  # noqa: B010


@contextmanager
def moto_queue(seed: int, visibility_s: int = 4) -> Iterator[tuple[str, Queues, dict[str, str]]]:
    """The endpoint, the queues, and the environment that points boto3 at them."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    _fast_moto_clock()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in [*AWS_ENV, "AWS_ENDPOINT_URL"]}
    try:
        host, port = server.get_host_and_port()
        assert host == "127.0.0.1", host
        endpoint = f"http://127.0.0.1:{port}"
        env = {**AWS_ENV, "AWS_ENDPOINT_URL": endpoint}
        os.environ.update(env)
        name = f"chaos-{seed}-{uuid.uuid4().hex[:6]}"
        queues = create_queues(SqsSettings(), visibility_s=visibility_s, name=name)
        yield endpoint, queues, env
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
