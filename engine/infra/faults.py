"""Named fault points: places in the engine where a chaos run may inject a fault.

Every point is a no-op unless ``ENGINE_FAULTS`` names it, so production pays
one falsy check per point. The chaos harness (``make chaos``) starts worker
and submit processes with, for example::

    ENGINE_FAULTS="after_commit=kill:0.05,after_claim=raise:0.02" ENGINE_FAULT_SEED=7

Each entry is ``point=action[:probability]`` (probability 1 when omitted).
Actions:

- ``kill``: SIGKILL this process at that point (a crash);
- ``raise``: raise :class:`FaultInjected` there (an unexpected error);
- ``pause``: sleep ``ENGINE_FAULT_PAUSE_S`` seconds (default 3) in that thread;
- ``stop``: SIGSTOP this process there (a frozen VM, a stalled container): it
  holds its sockets and its open transaction until someone sends SIGCONT or
  SIGKILL. The signal goes to the calling thread, which therefore stops at
  the point itself (the kernel then stops every other thread); sent to the
  process, it is taken by the main thread, and the caller ran on past the
  point until that thread was scheduled.

The points, in the order a step run meets them:

======================  ===========================================================
``after_claim``         the claim committed; the step has not started
``before_commit``       the step's writes and checkpoint are sent, not committed
``in_commit``           the commit's own statements are issued (successors, messages,
                        the delivery's delete), the COMMIT is not sent yet
``after_commit``        committed; the delivery is not deleted yet (SQS)
``after_submit_commit`` a submit committed; its outbox rows are not published yet
``after_publish``       outbox rows published; not yet marked published
======================  ===========================================================

And where a worker fires a schedule (:mod:`engine.schedules.schedules`):

==========================  =======================================================
``schedule_after_claim``    the schedule's row is claimed; no job is submitted yet
``schedule_before_commit``  its jobs are submitted; the transaction is not committed
==========================  =======================================================

SQS API errors are injected below botocore (``before-send`` hooks, so its
retries see what they would see from SQS) in every client made by
:func:`engine.transports.sqs_client.sqs_client` of a process started with
``ENGINE_FAULT_SQS_ERRORS=<probability>``: each HTTP request is answered, with
that probability, by a throttling error, a 500, a 503 or a connection reset.
With ``ENGINE_FAULT_SQS_ERRORS_WHILE=<path>`` only while that file exists, so
a harness can open and close error windows in running workers.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

POINTS = frozenset(
    {
        "after_claim",
        "before_commit",
        "in_commit",
        "after_commit",
        "after_submit_commit",
        "after_publish",
        "schedule_after_claim",
        "schedule_before_commit",
    }
)
ACTIONS = frozenset({"kill", "raise", "pause", "stop"})


class FaultInjected(Exception):
    """Raised at a fault point whose action is ``raise``."""


def parse(spec: str) -> dict[str, tuple[str, float]]:
    """``point=action[:p],...`` -> {point: (action, p)}; a bad entry names what is valid."""
    plan: dict[str, tuple[str, float]] = {}
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        point, _, rest = entry.partition("=")
        action, _, prob = rest.partition(":")
        if point not in POINTS or action not in ACTIONS:
            raise ValueError(
                f"ENGINE_FAULTS entry {entry!r}: expected point=action[:probability] with point "
                f"in {sorted(POINTS)} and action in {sorted(ACTIONS)}"
            )
        try:
            p = float(prob) if prob else 1.0
        except ValueError:
            raise ValueError(f"ENGINE_FAULTS entry {entry!r}: probability {prob!r}") from None
        plan[point] = (action, p)
    return plan


_plan = parse(os.environ.get("ENGINE_FAULTS", ""))
_rng = random.Random(int(os.environ.get("ENGINE_FAULT_SEED", "0")) ^ os.getpid())
_lock = threading.Lock()


def enable(spec: str, seed: int = 0) -> None:
    """Replace the plan in this process (tests); ``""`` turns every point off."""
    global _plan, _rng
    _plan = parse(spec)
    _rng = random.Random(seed)


def hit(point: str) -> None:
    """Pass fault point ``point``: a no-op unless the plan names it."""
    if not _plan:
        return
    planned = _plan.get(point)
    if planned is None:
        return
    action, probability = planned
    with _lock:
        fire = _rng.random() < probability
    if not fire:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise FaultInjected(f"fault injected at {point}")
    elif action == "stop":
        # not os.kill(getpid()): Linux hands a process-directed SIGSTOP to the
        # main thread, and until it runs (milliseconds on a loaded machine)
        # this thread went on, into the commit it was meant to stop before
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    else:
        time.sleep(float(os.environ.get("ENGINE_FAULT_PAUSE_S", "3")))


# (HTTP status, SQS error code); status 0 is a connection reset
SQS_ERRORS = (
    (400, "ThrottlingException"),
    (500, "InternalError"),
    (503, "ServiceUnavailable"),
    (0, ""),
)


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def _sqs_error(status: int, code: str) -> Any:
    from botocore.awsrequest import AWSResponse

    body = json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": "injected fault"})
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "x-amzn-query-error": f"{code};{'Sender' if status < 500 else 'Receiver'}",
    }
    return AWSResponse("http://fault.invalid/", status, headers, _Body(body.encode()))


def sqs_errors(client: Any) -> Any:
    """Hook SQS API errors into ``client`` if ``ENGINE_FAULT_SQS_ERRORS`` asks for them.

    Returns ``client``; a no-op (no hook at all) unless the variable is set.
    """
    rate = float(os.environ.get("ENGINE_FAULT_SQS_ERRORS") or 0)
    if rate <= 0:
        return client
    gate = os.environ.get("ENGINE_FAULT_SQS_ERRORS_WHILE")
    rng = random.Random(int(os.environ.get("ENGINE_FAULT_SEED", "0")) ^ os.getpid() ^ id(client))

    def before_send(request: Any, **_: Any) -> Any:
        if gate is not None and not os.path.exists(gate):
            return None
        with _lock:
            if rng.random() >= rate:
                return None
            status, code = rng.choice(SQS_ERRORS)
        if status == 0:
            from botocore.exceptions import ConnectionClosedError

            raise ConnectionClosedError(endpoint_url=request.url)
        return _sqs_error(status, code)

    client.meta.events.register("before-send.sqs", before_send)
    return client
