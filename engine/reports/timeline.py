"""A job's history in time: the timeline of attempts, and the event log beside it.

Built from the job's append-only events (``engine_events``) and its step
runs. Each claim of a step run (``claimed``, or ``reclaimed`` after a lease
expired) opens an :class:`Attempt`, closed by the next event of that step
run that ends an attempt; a claim never closed is ``running`` (``queued``
while its step has not started), or ``lost`` when its worker vanished.

An attempt's bar runs from when its step started running on its worker to
when it stopped, not from its claim: a slot that claims a batch runs its
step runs one after another, each waiting its turn after its claim (queued
on the worker, not running). The event that ends an attempt carries that
start (``started_at``, on the database's clock: invariant 3) and ``ran_s``,
and so do its lease renewals while it is live; a ``started_at`` of null: not
started (never, for an end). An attempt without it (an older engine's
events, a worker that vanished before a renewal, one running for less than
a heartbeat) is drawn from its claim.

The lanes are the workers' slots, in the order of their first attempt. A
wait is not an attempt (no worker, lease or slot holds it): each
``waiting`` event opens a :class:`WaitSpan`, closed by the step run's wake,
its next claim or its cancel, drawn apart from the workers' lanes. The
event log lists every other event as one :class:`EventView` line, and sums
an attempt's lease renewals into one :class:`RenewalSummary`.
:func:`step_label` names a step run the way every part of a report does.

A view of rows, never a source of truth (invariant 1). It keeps no
invariant of its own; it shows them at work: every claim is an attempt
(invariant 2), renewals and ``lease_lost`` marks are the heartbeat
(invariant 4), a ``fenced`` attempt committed nothing (invariants 5 and 16),
and a reclaimed attempt resumed what a vanished worker left (invariants 9
and 10).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from engine.flow import Flow
from engine.store.models import Event, EventKind, StepRun, StepStatus
from engine.store.status import wait_text

__all__ = [
    "Attempt",
    "EventView",
    "RenewalSummary",
    "WaitSpan",
    "attempts",
    "event_log",
    "lanes",
    "step_label",
    "wait_spans",
]

# events that end an attempt, and the outcome each one gives it
_ENDINGS: dict[EventKind, str] = {
    EventKind.SUCCEEDED: "succeeded",
    EventKind.RETRIED: "retried",
    EventKind.DEAD_LETTERED: "dead_lettered",
    EventKind.REJECTED: "rejected",
    EventKind.FENCED: "fenced",
    EventKind.RELEASED: "released",
    EventKind.CANCELLED: "cancelled",
    EventKind.WAITING: "waiting",
}
_STARTS = (EventKind.CLAIMED, EventKind.RECLAIMED)


class Attempt(BaseModel):
    """One claim of a step run until what ended it: one bar of the timeline.

    The bar runs from ``start`` to ``stopped`` (or on, while ``stopped`` is
    None); between ``claimed_at`` and ``start`` the step run was queued on the
    worker, and between ``stopped`` and ``end`` its outcome waited to be
    written (a round's shared checkpoint): neither is running.
    """

    step_run_id: str
    label: str
    attempt: int | None
    worker: str
    claimed_at: datetime
    start: datetime  # its step started running; its claim when not recorded
    start_recorded: bool  # False: drawn from its claim (no start in its events)
    queued: bool  # not started at its last renewal: waiting its turn on the worker
    ran: bool = True  # False: ended before its step started (a batch's run given back)
    stopped: datetime | None  # its step stopped running; None: running, or lost
    end: datetime | None  # its outcome was written; None: still running, or its worker vanished
    outcome: str  # an _ENDINGS value; no end event: "running", "queued" or "lost"
    reclaimed_from: str | None
    lease_lost_at: list[datetime]


class WaitSpan(BaseModel):
    """A step run parked waiting, from its ``waiting`` event until what ended the wait."""

    step_run_id: str
    label: str
    what: str  # "signal go", "children", "until 2026-12-01 06:00:00"
    start: datetime
    end: datetime | None  # None: still waiting
    outcome: str  # "woken", "claimed" (woken, then taken), "cancelled" or "waiting"


# events of a step run that end its wait, and the outcome each gives it
_WAIT_ENDINGS: dict[EventKind, str] = {
    EventKind.WOKEN: "woken",
    EventKind.CLAIMED: "claimed",
    EventKind.RECLAIMED: "claimed",
    EventKind.CANCELLED: "cancelled",
}


def _wait_what(detail: dict[str, Any]) -> str:
    until = detail.get("until")
    at = datetime.fromisoformat(until) if isinstance(until, str) else None
    signal = detail.get("signal")
    return wait_text(signal if isinstance(signal, str) else None, at, bool(detail.get("children")))


def _of_step_runs(events: list[Event]) -> Iterator[tuple[Event, uuid.UUID, EventKind]]:
    """The events of step runs (a job's own have none), with their step run and kind."""
    for e in events:
        if e.step_run_id is not None:
            yield e, e.step_run_id, EventKind(e.kind)


def wait_spans(
    events: list[Event],
    runs: dict[uuid.UUID, StepRun],
    flow: Flow | None = None,
    ended: datetime | None = None,
) -> list[WaitSpan]:
    """Every wait of the job's step runs; one still open when the job ``ended`` closes there.

    A park that found its signal already there (``resumed``) did not wait.
    """
    open_: dict[uuid.UUID, WaitSpan] = {}
    spans: list[WaitSpan] = []
    for e, run_id, kind in _of_step_runs(events):
        if kind == EventKind.WAITING and not e.detail.get("resumed"):
            open_[run_id] = WaitSpan(
                step_run_id=str(run_id),
                label=step_label(runs.get(run_id), flow),
                what=_wait_what(e.detail),
                start=e.at,
                end=None,
                outcome="waiting",
            )
        elif kind in _WAIT_ENDINGS and run_id in open_:
            span = open_.pop(run_id)
            span.end, span.outcome = e.at, _WAIT_ENDINGS[kind]
            spans.append(span)
    for span in open_.values():
        if ended is not None:
            span.end, span.outcome = ended, "cancelled"
        spans.append(span)
    return sorted(spans, key=lambda w: w.start)


class EventView(BaseModel):
    """One line of the event log (renewals are summarised instead)."""

    at: datetime
    kind: str
    label: str
    worker: str
    attempt: int | None
    detail: str


class RenewalSummary(BaseModel):
    """Lease renewals of one attempt, as one line."""

    label: str
    worker: str
    attempt: int | None
    count: int
    first: datetime
    last: datetime


def step_label(run: StepRun | None, flow: Flow | None = None) -> str:
    """How a report names a step run: ``step[label]``, or ``(job)`` for none.

    A fan-out's run is labelled as its step declares (``label="{code}"``:
    ``cost_store[ST001]``) when ``flow`` is given and has the step, else by its
    fan-out key (``cost_store[0]``).
    """
    if run is None:
        return "(job)"
    if not run.fanout_key:
        return run.step
    step = flow.steps.get(run.step) if flow is not None else None
    return (
        f"{run.step}[{run.fanout_key if step is None else step.label_of(run.fanout_key, run.item)}]"
    )


def _detail(detail: dict[str, Any]) -> str:
    if not detail:
        return ""
    return "; ".join(
        f"{k}: {v if isinstance(v, str) else json.dumps(v, default=str)}"
        for k, v in sorted(detail.items())
    )


def _started(attempt: Attempt, detail: dict[str, Any]) -> None:
    """When ``attempt``'s step started, as an event of it records it, if it does.

    No ``started_at`` (an older engine's event): left at its claim.
    ``started_at`` null: not started by that event (``queued``).
    """
    if "started_at" not in detail:
        return
    started = detail["started_at"]
    attempt.start_recorded = True
    attempt.queued = not isinstance(started, str)
    if isinstance(started, str):
        # as its slot measured it (one slot's moments keep their order), on the database's clock
        attempt.start = datetime.fromisoformat(started)


def _ended(attempt: Attempt, ending: Event) -> None:
    """Close ``attempt`` at ``ending``, from when its step ran as the event records it.

    No ``started_at`` (an older engine's event): from its claim to the end.
    ``started_at`` null: the step never started (given back first), no bar.
    """
    attempt.outcome = _ENDINGS[EventKind(ending.kind)]
    attempt.end = attempt.stopped = ending.at
    _started(attempt, ending.detail)
    if attempt.queued:  # it never ran: its turn never came
        attempt.start, attempt.queued, attempt.ran = ending.at, False, False
        return
    ran = ending.detail.get("ran_s")
    if attempt.start_recorded and isinstance(ran, int | float):
        attempt.stopped = attempt.start + timedelta(seconds=ran)
    # as its slot measured both (never clamped to the events: that would move one bar of
    # a slot onto another), and never before its start
    attempt.stopped = max(attempt.stopped, attempt.start)


def attempts(
    events: list[Event], runs: dict[uuid.UUID, StepRun], flow: Flow | None = None
) -> list[Attempt]:
    """Pair every claim with the event that ended it (same step run, next in order)."""
    open_: dict[uuid.UUID, Attempt] = {}
    done: list[Attempt] = []
    for e, run_id, kind in _of_step_runs(events):
        current = open_.get(run_id)
        if kind in _STARTS:
            if current is not None:  # its worker vanished; the lease expired
                current.outcome = "lost"
                current.end = current.stopped = e.at
                done.append(current)
            open_[run_id] = Attempt(
                step_run_id=str(run_id),
                label=step_label(runs.get(run_id), flow),
                attempt=e.attempt,
                worker=e.worker or "?",
                claimed_at=e.at,
                start=e.at,
                start_recorded=False,
                queued=False,
                stopped=None,
                end=None,
                outcome="running",
                reclaimed_from=(str(e.detail.get("from")) if kind == EventKind.RECLAIMED else None),
                lease_lost_at=[],
            )
        elif kind == EventKind.LEASE_LOST and current is not None:
            current.lease_lost_at.append(e.at)
        elif kind == EventKind.RENEWED and current is not None:
            _started(current, e.detail)  # a live attempt: started yet, or queued
        elif kind in _ENDINGS and current is not None:
            _ended(current, e)
            done.append(open_.pop(run_id))
    for attempt in open_.values():
        run = runs.get(uuid.UUID(attempt.step_run_id))
        if run is not None and run.status != StepStatus.RUNNING:
            attempt.outcome = "lost"
        elif attempt.queued:
            attempt.outcome = "queued"
        done.append(attempt)
    return sorted(done, key=lambda a: a.start)


def lanes(timeline: list[Attempt]) -> list[str]:
    """The timeline's lanes: one per worker, in the order of its first attempt."""
    return list(dict.fromkeys(a.worker for a in timeline))


def event_log(
    events: list[Event], runs: dict[uuid.UUID, StepRun], flow: Flow | None = None
) -> tuple[list[EventView], list[RenewalSummary]]:
    """The event log in order, and each attempt's lease renewals summed into one line."""
    log: list[EventView] = []
    renewals: dict[tuple[uuid.UUID | None, int | None], RenewalSummary] = {}
    for e in events:
        run = runs.get(e.step_run_id) if e.step_run_id else None
        if e.kind == EventKind.RENEWED:
            key = (e.step_run_id, e.attempt)
            if key in renewals:
                renewals[key].count += 1
                renewals[key].last = e.at
            else:
                renewals[key] = RenewalSummary(
                    label=step_label(run, flow),
                    worker=e.worker or "",
                    attempt=e.attempt,
                    count=1,
                    first=e.at,
                    last=e.at,
                )
            continue
        log.append(
            EventView(
                at=e.at,
                kind=str(e.kind),
                label=step_label(run, flow),
                worker=e.worker or "",
                attempt=e.attempt,
                detail=_detail(e.detail),
            )
        )
    return log, list(renewals.values())
