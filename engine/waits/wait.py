"""Durable waits: a step parks holding nothing, until a signal, a time or its children.

:class:`Wait` is what every wait raises: the runner (:mod:`engine.runner.park`)
turns it into one fenced transition of the step run to ``waiting`` (lease and
worker slot freed, the attempt given back: waiting is not running the step;
its concurrency key's slot kept until it is claimed again, ends or is
cancelled: :mod:`engine.flow.concurrency`), and nothing the step wrote so far
commits. When what it waits for comes (a signal, :mod:`engine.waits.signals`;
its children's end, :mod:`engine.waits.children`; or the time, found by the
sweeper), the step run becomes pending and runs again **from its start**.
Every time is the database's (invariant 3).

A step may catch a wait's timeout and wait again, with a new deadline. The
waits of one run are numbered in the order the step calls them; a park
records the deadlines of the waits the step passed before the one it parks
at (``engine_step_runs.wait_past``). Run again from its start, the step
meets its earlier waits first: one that timed out raises its timeout again
(unless what it waited for has come since, then it returns that), so the
step takes the same path to the wait it parked at, which has a deadline of
its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from engine import store
from engine.flow.retry import StepControl

if TYPE_CHECKING:
    import psycopg


class Wait(StepControl):
    """Park this step run until ``signal`` arrives or ``until``/``timeout_s`` passes.

    Raised by :meth:`StepContext.wait_for_signal`, :meth:`StepContext.sleep_until`
    and, with ``children``, :meth:`StepContext.wait_for_children`
    (:mod:`engine.waits.children`); a step does not raise it itself.
    """

    def __init__(
        self,
        *,
        signal: str | None = None,
        timeout_s: float | None = None,
        until: datetime | None = None,
        children: bool = False,
        past: tuple[datetime | None, ...] = (),
        summary: dict[str, Any] | None = None,
    ) -> None:
        self.past = past  # the deadlines of the waits the step passed before this one
        self.summary = summary  # what the approver sees (JSON, checked), stored with the park
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


def timed_out(state: store.WaitState, past: tuple[datetime | None, ...]) -> datetime | None:
    """The deadline the step's next wait (after ``past``) ran out at, if it did; else ``None``.

    ``state`` is what the step run recorded when it parked last; its
    ``timed_out`` is about the wait it parked at, checked by the caller to be
    of the same kind as this one.
    """
    seq = len(past)
    if seq < len(state.past):
        return state.past[seq]  # an earlier wait of the run: its timeout again
    if seq == len(state.past) and state.timed_out:
        return state.wait_until
    return None


def sleep_until(
    conn: psycopg.Connection[Any], until: datetime, past: tuple[datetime | None, ...] = ()
) -> None:
    """Return once the database clock has passed ``until``; :class:`Wait` until then."""
    if until.tzinfo is None:
        raise ValueError(f"sleep_until needs an aware datetime (with a time zone), got {until}")
    if store.clock_select(conn) >= until:
        return
    raise Wait(until=until, past=past)
