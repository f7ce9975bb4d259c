"""Durable waits: a step waits for a signal of its job, or until a time, holding nothing.

Not to be confused with :mod:`engine.waiting` (a caller waiting for a job to end).

A step calls ``ctx.wait_for_signal("approve", timeout=timedelta(days=3))`` or
``ctx.sleep_until(t)``. If the signal has come (or the time has passed) the
call returns at once. Otherwise it raises :class:`Wait`, which the runner
turns into one fenced transition of the step run to ``waiting`` (lease and
worker slot freed, the attempt given back: waiting is not running the step;
its concurrency key's slot kept until it is claimed again, ends or is
cancelled: :mod:`engine.concurrency`), and nothing the step wrote so far
commits. When the signal arrives
(:func:`engine.signal`), or the sweeper finds the deadline passed, the step run
becomes pending and is announced; the step runs again **from its start**, and
this time the call returns the signal, or raises :class:`SignalTimeout`.

So a step that waits should wait before it writes anything, and compute
what it waits on from its inputs (which do not change between runs). A step
must not swallow :class:`Wait` (a bare ``except Exception`` would).
Every time is the database's (invariant 3).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from engine import store
from engine.errors import BadInput
from engine.retry import Fail, StepControl

if TYPE_CHECKING:
    import psycopg

SIGNAL_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")


def check_signal_name(name: str) -> str:
    """``name`` if it is a valid signal name; :class:`BadInput` naming it otherwise."""
    if not isinstance(name, str) or not SIGNAL_NAME.fullmatch(name):
        raise BadInput(
            f"invalid signal name {name!r}: expected a lowercase letter, then up to 62 "
            "lowercase letters, digits, '_', '.' or '-' (e.g. 'approve')"
        )
    return name


@dataclass(frozen=True)
class Signal:
    """A signal a job received: its name, its data, who sent it and when (database clock)."""

    name: str
    data: Any
    sent_by: str | None
    at: datetime


class Wait(StepControl):
    """Park this step run until ``signal`` arrives or ``until``/``timeout_s`` passes.

    Raised by :meth:`StepContext.wait_for_signal`, :meth:`StepContext.sleep_until`
    and, with ``children``, :meth:`StepContext.wait_for_children`
    (:mod:`engine.children`); a step does not raise it itself.
    """

    def __init__(
        self,
        *,
        signal: str | None = None,
        timeout_s: float | None = None,
        until: datetime | None = None,
        children: bool = False,
    ) -> None:
        self.signal = signal
        self.timeout_s = timeout_s
        self.until = until
        self.children = children
        what = (
            "its child jobs"
            if children
            else f"signal {signal!r}"
            if signal
            else f"the time {until}"
        )
        super().__init__(f"waiting for {what}")


class SignalTimeout(Fail):
    """The signal did not come before the wait's deadline.

    A step may catch it and decide; left unhandled it fails the step at once
    (a permanent failure: the deadline would not move on a retry).
    """

    def __init__(self, name: str, deadline: datetime | None) -> None:
        self.name = name
        self.deadline = deadline
        super().__init__(f"signal {name!r} did not arrive by {deadline}")


def wait_for_signal(
    conn: psycopg.Connection[Any],
    job_id: uuid.UUID,
    step_run_id: uuid.UUID,
    name: str,
    timeout: timedelta | None,
) -> Signal:
    """The job's signal ``name``; :class:`Wait` if it has not come; :class:`SignalTimeout`."""
    check_signal_name(name)
    if timeout is not None and timeout < timedelta(0):
        raise ValueError(f"timeout must not be negative, got {timeout}")
    state = store.signal_select_for_wait(conn, job_id, step_run_id, name)
    if state.signal is not None:
        s = state.signal
        return Signal(s.name, s.data, s.sent_by, s.created_at)
    if state.timed_out:
        raise SignalTimeout(name, state.wait_until)
    raise Wait(signal=name, timeout_s=None if timeout is None else timeout.total_seconds())


def sleep_until(conn: psycopg.Connection[Any], until: datetime) -> None:
    """Return once the database clock has passed ``until``; :class:`Wait` until then."""
    if until.tzinfo is None:
        raise ValueError(f"sleep_until needs an aware datetime (with a time zone), got {until}")
    if store.clock_select(conn) >= until:
        return
    raise Wait(until=until)
