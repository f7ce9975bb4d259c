"""Named fault points: places in the engine where a chaos run may inject a fault.

Every point is a no-op unless ``ENGINE_FAULTS`` names it, so production pays
one falsy check per point. The chaos harness (``make chaos``) starts worker
and submit processes with, for example::

    ENGINE_FAULTS="after_commit=kill:0.05,after_claim=raise:0.02" ENGINE_FAULT_SEED=7

Each entry is ``point=action[:probability]`` (probability 1 when omitted).
Actions:

- ``kill``: SIGKILL this process at that point (a crash);
- ``raise``: raise :class:`FaultInjected` there (an unexpected error);
- ``pause``: sleep ``ENGINE_FAULT_PAUSE_S`` seconds (default 3) in that thread.

The points, in the order a step run meets them:

======================  ===========================================================
``after_claim``         the claim committed; the step has not started
``before_commit``       the step's writes and checkpoint are sent, not committed
``after_commit``        committed; the delivery is not deleted yet (SQS)
``after_submit_commit`` a submit committed; its outbox rows are not published yet
``after_publish``       outbox rows published; not yet marked published
======================  ===========================================================
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

POINTS = frozenset(
    {"after_claim", "before_commit", "after_commit", "after_submit_commit", "after_publish"}
)
ACTIONS = frozenset({"kill", "raise", "pause"})


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
    else:
        time.sleep(float(os.environ.get("ENGINE_FAULT_PAUSE_S", "3")))
