"""Signals: a step waits for a decision of its job; a caller sends it, once.

A step calls ``ctx.wait_for_signal("approve", timeout=timedelta(days=3))``. If
the signal has come the call returns it at once; otherwise it raises
:class:`~engine.waits.wait.Wait` and the step run parks holding nothing
(:mod:`engine.waits.wait`). When the signal arrives, or the sweeper finds the
deadline passed, the step run becomes pending and is announced; the step runs
again **from its start**, and this time the call returns the signal, or
raises :class:`SignalTimeout`. So a step that waits should wait before it
writes anything, and compute what it waits on from its inputs (which do not
change between runs). A step must not swallow ``Wait`` (a bare ``except
Exception`` would).

``signal(job_id, "approve", {"by": "acct"})`` records the signal (one per job
and name) and makes every step run of the job waiting for it pending, with
their announcements, in one transaction. Like :func:`engine.submit`, given
the caller's connection or SQLAlchemy session it joins that transaction: a
request that rolls back leaves no signal and wakes nothing; messages leave
at the caller's commit (:mod:`engine.transports.announce`). A signal sent before any
step waits for it is kept, and found by the step when it asks.

A flow declares the signals it receives (``Flow(..., signals=("approve",))``),
and the job records them at submit, from the flow at its version: a name the
job does not declare (a typo, ``aprove``) is refused with
:class:`~engine.errors.BadInput` naming the valid ones, and nothing is
written. A job submitted before signals were declared accepts any valid name.

Sending the same signal again (same name, same data) is a no-op that
returns ``created=False``; the same name with other data is refused
(:class:`~engine.errors.BadInput`): a signal is a decision, made once.
Every time is the database's (invariant 3).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from engine import store
from engine.errors import BadInput, OutputRefused, checked
from engine.flow.retry import Fail
from engine.flow.signals import SIGNAL_NAME, declared_signals
from engine.infra.json_fields import json_fields
from engine.waits.approvals import check_approval, record_self_approval
from engine.waits.wait import Wait, timed_out

if TYPE_CHECKING:
    from engine.jobs.transaction import Connectable


import json
from typing import TYPE_CHECKING

import psycopg

from engine.config import Settings
from engine.errors import NoSuchJob
from engine.jobs import admin
from engine.jobs.audit import operator, record_action
from engine.jobs.transaction import in_transaction
from engine.store import db, jsonb
from engine.store.status import AuditSource, EventKind
from engine.transports import transport_for
from engine.transports.announce import Announced, announce
from engine.transports.outbox import Publisher


def check_signal_name(name: str) -> str:
    """``name`` if it is a valid signal name; :class:`BadInput` naming it otherwise."""
    expected = (
        "a lowercase letter, then up to 62 lowercase letters, digits, '_', '.' or '-' "
        "(e.g. 'approve')"
    )
    return checked(name, SIGNAL_NAME, "signal name", expected)


@dataclass(frozen=True)
class Signal:
    """A signal a job received: its name, its data, who sent it and when (database clock)."""

    name: str
    data: Any
    sent_by: str | None
    at: datetime


class SignalTimeout(Fail):
    """The signal did not come before the wait's deadline.

    A step may catch it and decide; left unhandled it fails the step at once
    (a permanent failure: the deadline would not move on a retry).
    """

    def __init__(self, name: str, deadline: datetime | None) -> None:
        self.name = name
        self.deadline = deadline
        super().__init__(f"signal {name!r} did not arrive by {deadline}")


def summary_json(summary: BaseModel | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A wait's summary as the park stores it (a JSON object), or :class:`OutputRefused`.

    A pydantic model is dumped as JSON (as a checkpoint is); a mapping's
    values are turned into JSON the same way (dates, decimals, models).
    Refused, naming the field: a value with no JSON form (an object, a set
    of them) and what ``jsonb`` cannot carry (NaN, an infinity, a NUL).
    """
    if summary is None:
        return None
    noun = "wait summary"
    if isinstance(summary, BaseModel):
        data: Any = jsonb.model_json(summary, noun, error=OutputRefused)
    elif isinstance(summary, Mapping):
        # looked at before the JSON form, which makes a Decimal's NaN "NaN"
        jsonb.checked(summary, noun, error=OutputRefused)
        data = {str(k): _jsonable(v, str(k)) for k, v in summary.items()}
        jsonb.checked(data, noun, error=OutputRefused)
    else:
        raise OutputRefused(
            f"a wait summary is a pydantic model or a dict, got {type(summary).__name__}"
        )
    return dict(data)


def _jsonable(value: Any, path: str) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, f"{path}[{i}]") for i, v in enumerate(value)]
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError:
        raise OutputRefused(
            f"wait summary field {path!r} is a {type(value).__name__}: it has no JSON form"
        ) from None


def wait_for_signal(
    conn: psycopg.Connection[Any],
    job_id: uuid.UUID,
    step_run_id: uuid.UUID,
    name: str,
    timeout: timedelta | None,
    past: tuple[datetime | None, ...] = (),
    summary: dict[str, Any] | None = None,
) -> Signal:
    """The job's signal ``name``; :class:`Wait` if it has not come; :class:`SignalTimeout`.

    ``past``: the deadlines of the waits the step passed before this one in
    this run (``None``: it returned), see :mod:`engine.waits.wait`.
    ``summary``: what the approver sees (:func:`summary_json` of it), stored
    with the park.
    """
    check_signal_name(name)
    if timeout is not None and timeout < timedelta(0):
        raise ValueError(f"timeout must not be negative, got {timeout}")
    state = store.signal_select_for_wait(conn, job_id, step_run_id, name)
    if state.signal is not None:
        s = state.signal
        return Signal(s.name, s.data, s.sent_by, s.created_at)
    deadline = timed_out(state, past)
    if deadline is not None:
        raise SignalTimeout(name, deadline)
    raise Wait(
        signal=name,
        timeout_s=None if timeout is None else timeout.total_seconds(),
        past=past,
        summary=summary,
    )


@dataclass(frozen=True)
class Signalled:
    """What a send did: the signal as recorded, whether this call recorded it, who it woke."""

    job_id: uuid.UUID
    name: str
    data: Any
    sent_by: str | None
    at: datetime
    created: bool
    woken: int
    outbox_ids: tuple[int, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return json_fields(self, omit=("outbox_ids",))


def signal(
    job_id: uuid.UUID | str,
    name: str,
    data: Any = None,
    *,
    conn: Connectable | None = None,
    settings: Settings | None = None,
    publisher: Publisher | None = None,
    sent_by: str | None = None,
    source: AuditSource = AuditSource.API,
) -> Signalled:
    """Send signal ``name`` with ``data`` (any JSON value; ``None``: ``{}``) to an active job.

    :class:`~engine.errors.NoSuchJob` for an unknown job; :class:`BadInput`
    for a job that ended, an invalid name, data that is not JSON, or a
    signal of that name already sent with other data;
    :class:`~engine.errors.ApprovalRefused` for an approval its sender may not
    send (:mod:`engine.waits.approvals`; audited, with ``source``). See the
    module docstring for the transaction it joins.
    """
    settings = settings or Settings()
    job = _job_id(job_id)
    check_signal_name(name)
    data = _json_data(name, data)
    jsonb.checked(sent_by, f"sender of signal {name!r}")
    publisher = publisher or transport_for(settings)

    def work(raw: psycopg.Connection[Any], notify: bool) -> Signalled:
        return _signal_in(
            raw,
            job,
            name,
            data,
            publisher,
            sent_by,
            notify=notify,
            settings=settings,
            source=source,
        )

    return in_transaction(conn, settings, publisher, work)


def _signal_in(
    conn: psycopg.Connection[Any],
    job_id: uuid.UUID,
    name: str,
    data: Any,
    publisher: Publisher,
    sent_by: str | None,
    *,
    notify: bool,
    settings: Settings,
    source: AuditSource,
) -> Signalled:
    """Lock the job, record the signal, wake and announce its waiters, in ``conn``."""
    if not store.job_lock_if_active(conn, job_id):
        status = store.job_select_status(conn, job_id)
        if status is None:
            raise NoSuchJob(job_id)
        raise BadInput(f"job {job_id} is {status}; only a pending or running job can be signalled")
    flow, version, declared = store.job_select_signals(conn, job_id)
    if declared is not None and name not in declared:
        raise BadInput(
            f"signal {name!r} is not declared by flow {flow} (version {version}) of job "
            f"{job_id}: {declared_signals(declared)}"
        )
    approval = check_approval(conn, settings, job_id, name, data, sent_by, source)
    recorded = store.signal_insert_if_absent(conn, job_id, name, data, sent_by)
    if recorded is None:
        existing = store.signal_select(conn, job_id, name)
        assert existing is not None, "the insert conflicted with it, under the job's lock"
        if existing.data != data:
            raise BadInput(
                f"signal {name!r} was sent to job {job_id} already, at "
                f"{existing.created_at:%Y-%m-%d %H:%M:%S%z} by {existing.sent_by or '-'} with "
                f"data {json.dumps(existing.data, sort_keys=True)}; a signal is sent once per "
                "job and name (send the same data again, or use another name)"
            )
        return Signalled(
            job_id, name, existing.data, existing.sent_by, existing.created_at, False, 0
        )
    if approval is not None and approval.self_approved_as is not None:
        record_self_approval(conn, job_id, name, approval, source)
    # the history reads "signalled", then a "woken" event per step run it woke
    store.event_insert(
        conn, EventKind.SIGNALLED, job_id=job_id, detail={"signal": name, "by": sent_by}
    )
    woken = store.step_wake_by_signal(conn, job_id, name)
    announced = announce(
        conn, publisher, outbox_ids=store.outbox_insert_many(conn, woken), notify=notify
    )
    return Signalled(
        job_id,
        name,
        recorded.data,
        recorded.sent_by,
        recorded.created_at,
        True,
        len(woken),
        announced.outbox_ids,
    )


def _job_id(job_id: uuid.UUID | str) -> uuid.UUID:
    if isinstance(job_id, uuid.UUID):
        return job_id
    try:
        return uuid.UUID(str(job_id))
    except ValueError:
        raise BadInput(f"invalid job id {job_id!r}: expected a UUID") from None


def _json_data(name: str, data: Any) -> Any:
    """``data`` as it will read back from the database (so a resend compares equal).

    What JSON cannot carry (NaN, an infinity, a NUL, a surrogate) is
    :class:`~engine.errors.JsonRefused` naming its field, before anything is written.
    """
    if data is None:
        return {}
    jsonb.checked(data, f"signal {name!r} data")
    try:
        return json.loads(json.dumps(data, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise BadInput(f"data of signal {name!r} is not JSON: {exc}") from None


def operator_signal(
    job_id: uuid.UUID,
    name: str,
    data: Any = None,
    *,
    settings: Settings,
    actor: str | None = None,
    source: AuditSource = AuditSource.CLI,
    publisher: Publisher | None = None,
) -> Signalled:
    """An operator's :func:`signal` (``engine signal``), audited in its transaction.

    The sender and the audit entry's actor are ``actor`` (default: the OS
    user at this host). A signal sent again with the same data changes
    nothing and records nothing; a refused one (an undeclared name, other
    data, an ended job) rolls back and records nothing. The operator's
    shorter lock wait applies (:func:`engine.jobs.admin.operator_action`).
    """
    who = actor or operator()
    publisher = publisher or transport_for(settings)
    bounded = admin.operator_settings(settings)
    with (
        admin.operator_action(settings, f"signal {name!r} to job {job_id}"),
        db.connect(bounded) as conn,
    ):
        with conn.transaction():
            sent = signal(
                job_id,
                name,
                data,
                conn=conn,
                settings=bounded,
                publisher=publisher,
                sent_by=who,
                source=source,
            )
            if sent.created:
                record_action(
                    conn,
                    "signal",
                    "job",
                    job_id,
                    actor=who,
                    source=source,
                    job_id=job_id,
                    # a decision's reason is the entry's why (the audit's "why" column)
                    reason=_reason(data),
                    detail={"signal": name, "data": sent.data, "woken": sent.woken},
                )
        # committed: send the wake-ups now rather than at the relay's next round
        Announced(publisher, sent.outbox_ids).publish_after_commit(conn)
    return sent


def _reason(data: Any) -> str | None:
    """The ``reason`` a signal's data carries (a decision's why), else ``None``."""
    why = data.get("reason") if isinstance(data, Mapping) else None
    return why.strip() or None if isinstance(why, str) else None
