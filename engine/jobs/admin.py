"""Operator actions on jobs, dead letters and alerts: cancel, retry, replay, resend.

Each is one transaction; the messages they need are written to the outbox in
it and relayed after it commits, like a submit. Each records who did it in
the audit trail in that same transaction (:mod:`engine.jobs.audit`): a
refused action (a cancel of a finished job, exit 2) rolls back and records
nothing. ``actor`` defaults to the OS user at this host; ``source`` says
where the action was taken (the CLI, or the console).

An operator command waits for a lock at most ``ENGINE_ADMIN_LOCK_TIMEOUT_S``
(a step committing, or a session holding the job's row, makes it wait); past
that it changes nothing and raises :class:`~engine.errors.Busy`, naming the
sessions that likely hold the rows, instead of hanging (issue 27).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import BadInput, Busy, Contention, NoSuchJob, Refused
from engine.jobs.audit import operator, record_action
from engine.jobs.ending import Ended, job_ended
from engine.store import db, jsonb
from engine.store.status import AuditSource, EventKind
from engine.transports import transport_for
from engine.transports.announce import Announced, announce
from engine.transports.base import Transport


def operator_settings(settings: Settings) -> Settings:
    """``settings`` with an operator command's shorter lock wait."""
    return settings.model_copy(update={"lock_timeout_s": settings.admin_lock_timeout_s})


def _connect(settings: Settings) -> psycopg.Connection[Any]:
    return db.connect(settings, lock_timeout_s=settings.admin_lock_timeout_s)


@contextlib.contextmanager
def operator_action(settings: Settings, what: str, table: str = "engine_jobs") -> Iterator[None]:
    """Turn a lock wait past the operator's bound (or a deadlock) into :class:`Busy`.

    The message says what was attempted, that nothing changed, and which
    sessions hold rows of ``table`` now (read on a connection of its own).
    """
    try:
        yield
    except Busy:
        raise
    except Contention as exc:
        raise Busy(
            f"busy: {what} waited {settings.admin_lock_timeout_s:g} s for a lock "
            f"(ENGINE_ADMIN_LOCK_TIMEOUT_S) and changed nothing; try again"
            + _holders(settings, table)
        ) from exc


def _holders(settings: Settings, table: str) -> str:
    try:
        with db.connect(settings, autocommit=True, statement_timeout_s=2) as conn:
            holders = store.lock_select_holders(conn, table)
    except Exception:
        return ""  # only a message: its absence changes nothing
    if not holders:
        return ""
    named = "; ".join(
        f"pid {h['pid']} ({h['application']} from {h['client']}, {h['state']}, "
        f"transaction open {h['xact_s']:g} s)"
        for h in holders
    )
    return f"; sessions holding {table} rows: {named}"


def _status_or_missing(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str:
    status = store.job_select_status(conn, job_id)
    if status is None:
        raise NoSuchJob(job_id)
    return status


def cancel(
    settings: Settings,
    job_id: uuid.UUID,
    reason: str | None = None,
    *,
    actor: str | None = None,
    source: AuditSource = AuditSource.CLI,
    transport: Transport | None = None,
) -> None:
    """Cancel an active job: its running steps stop at their next check or commit.

    The job's error reads ``cancelled by ACTOR`` (then ``: REASON`` when one
    is given), and the audit trail records the cancel with the reason.

    Its active child jobs (and theirs) are cancelled with it.

    The concurrency slots its step runs held are free at the commit: the
    step runs waiting for them are announced with it. Its report is rendered
    after the commit, as after every other end of a job.
    """
    transport = transport or transport_for(settings)
    who = actor or operator()
    for noun, value in (("actor", who), ("reason", reason)):
        jsonb.checked(value, f"cancel {noun}")  # a NUL: BadInput naming it, before any write
    message = f"cancelled by {who}" + (f": {reason}" if reason else "")
    with operator_action(settings, f"cancel of job {job_id}"), _connect(settings) as conn:
        with conn.transaction():
            ended = cancel_in(
                conn, transport, job_id, message, who=who, source=source, reason=reason
            )
        ended.after_commit(conn, settings)


def cancel_in(
    conn: psycopg.Connection[Any],
    transport: Transport,
    job_id: uuid.UUID,
    message: str,
    *,
    who: str,
    source: AuditSource,
    reason: str | None,
    detail: dict[str, Any] | None = None,
) -> Ended:
    """:func:`cancel`'s work in the caller's transaction (a bulk action's savepoint); the
    caller runs the returned ending's ``after_commit`` after it commits."""
    if not store.job_cancel_if_active(conn, job_id, message):
        status = _status_or_missing(conn, job_id)
        raise BadInput(f"job {job_id} is {status}; only pending or running jobs can be cancelled")
    store.event_insert(
        conn, EventKind.CANCELLED, job_id=job_id, detail={"reason": message, "by": who}
    )
    record_action(
        conn,
        "cancel",
        "job",
        job_id,
        actor=who,
        source=source,
        job_id=job_id,
        reason=reason,
        detail=detail,
    )
    # its slots are free, and a child cancelled on its own wakes its parent step
    return job_ended(conn, transport, job_id, cancel_rest=False, free_slots=True)


@dataclass(frozen=True)
class Reopened:
    """A retried job: how many of its step runs run again, and the children retried with it."""

    job_id: uuid.UUID
    step_runs: int
    children: tuple[uuid.UUID, ...] = ()


def retry_job(
    settings: Settings,
    job_id: uuid.UUID,
    *,
    actor: str | None = None,
    source: AuditSource = AuditSource.CLI,
    reason: str | None = None,
    transport: Transport | None = None,
    _replay_of: int | None = None,
) -> Reopened:
    """Resume a failed or cancelled job from its last checkpoints, with its children.

    Dead and cancelled step runs go back to pending in a new retry round
    (their attempts counted from 1 again, "attempt 1 of 5 (retry 2)");
    finished step runs are never run again (invariant 10). The
    failed or cancelled children of the step runs that run again are
    retried with the job, in the same transaction, keeping their ids, keys
    and parent (and theirs, recursively): the step finds them running again
    under the same key and waits for them, inside its concurrency slot when
    one is free. A done child stays done. Each job retried gets a
    ``replayed`` event, so its report shows both attempts.

    A child whose parent ended badly is not retried alone (its end would wake
    no one): :class:`BadInput` names the parent to retry instead. A rejected
    job (a step's ``Reject``: the data's decision), or one with a rejected
    child to reopen, is not retried: :class:`~engine.errors.Refused` says to
    correct the data and submit anew.

    The audit trail records a ``retry`` of the job (a ``replay`` of the dead
    letter ``_replay_of``, when :func:`replay` retries for one).
    """
    transport = transport or transport_for(settings)
    with operator_action(settings, f"retry of job {job_id}"), _connect(settings) as conn:
        with conn.transaction():
            reopened, announced = retry_in(
                conn,
                transport,
                job_id,
                actor=actor,
                source=source,
                reason=reason,
                replay_of=_replay_of,
            )
        announced.publish_after_commit(conn)
    return reopened


def retry_in(
    conn: psycopg.Connection[Any],
    transport: Transport,
    job_id: uuid.UUID,
    *,
    actor: str | None,
    source: AuditSource,
    reason: str | None,
    replay_of: int | None = None,
    detail: dict[str, Any] | None = None,
) -> tuple[Reopened, Announced]:
    """:func:`retry_job`'s work in the caller's transaction (a bulk action's savepoint);
    the caller publishes the returned announcements after it commits."""
    _refuse_rejected(conn, job_id)
    _refuse_orphaned_child(conn, job_id)
    reopened = store.job_reopen_if_ended(conn, job_id)
    if isinstance(reopened, store.FingerprintTaken):
        active = reopened.active_job_id
        raise BadInput(
            f"job {job_id} cannot be retried: job {active} with the same flow and "
            f"parameters is active; wait for it, or cancel it with `engine cancel {active}`"
        )
    if reopened is None:
        status = _status_or_missing(conn, job_id)
        raise BadInput(f"job {job_id} is {status}; only failed or cancelled jobs can be retried")
    announced = announce(
        conn, transport, outbox_ids=store.outbox_insert_many(conn, reopened.pending)
    )
    children = [str(c) for c in reopened.children]
    store.event_insert(
        conn,
        EventKind.REPLAYED,
        job_id=job_id,
        detail={"step_runs": reopened.step_runs, "children": children},
    )
    for child in reopened.children:
        store.event_insert(conn, EventKind.REPLAYED, job_id=child, detail={"with": str(job_id)})
    outcome = {"step_runs": reopened.step_runs, "children": children, **(detail or {})}
    if replay_of is None:
        record_action(
            conn,
            "retry",
            "job",
            job_id,
            actor=actor,
            source=source,
            job_id=job_id,
            reason=reason,
            detail=outcome,
        )
    else:
        record_action(
            conn,
            "replay",
            "dead_letter",
            replay_of,
            actor=actor,
            source=source,
            job_id=job_id,
            reason=reason,
            detail={"source": "step", **outcome},
        )
    return Reopened(job_id, reopened.step_runs, tuple(reopened.children)), announced


def _refuse_rejected(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> None:
    """:class:`Refused` for a job a step's ``Reject`` failed (or a failed child of it that
    a retry would reopen): the data's decision, which a retry would only repeat."""
    rejected = store.job_select_rejected_in_retry(conn, job_id)
    if rejected is None:
        return
    which = (
        f"job {job_id}"
        if rejected["id"] == job_id
        else f"its {rejected['flow']} child job {rejected['id']}"
    )
    raise Refused(
        f"job {job_id} cannot be retried: {which} was rejected ({rejected['error']}); a "
        "rejection is the data's decision, not a fault, and a retry would only repeat it: "
        "correct the data and submit a new job"
    )


def _refuse_orphaned_child(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> None:
    parent = store.job_select_parent(conn, job_id)
    if parent is not None and parent["status"] in ("failed", "cancelled"):
        raise BadInput(
            f"job {job_id} is a child of {parent['flow']} job {parent['id']}, which is "
            f"{parent['status']}: retry the parent with `engine retry {parent['id']}`; "
            "it retries this child with it, and its step waits for it again"
        )


def dead_letters(settings: Settings, limit: int = 100) -> list[dict[str, Any]]:
    with _connect(settings) as conn:
        return store.dead_letter_select_open(conn, limit)


def replay(
    settings: Settings,
    dead_letter_id: int,
    *,
    actor: str | None = None,
    source: AuditSource = AuditSource.CLI,
    reason: str | None = None,
    transport: Transport | None = None,
) -> str:
    """Re-drive one dead letter: a step run's job is retried; a message is sent again.

    Either way the audit trail records a ``replay`` of the dead letter.
    """
    transport = transport or transport_for(settings)
    with _connect(settings) as conn:
        row = store.dead_letter_select_one(conn, dead_letter_id)
        if row is None:
            raise BadInput(f"no dead letter with id {dead_letter_id}")
        if row["replayed_at"] is not None:
            raise BadInput(f"dead letter {dead_letter_id} was already replayed")
        conn.commit()
    if row["source"] == "step":
        reopened = retry_job(
            settings,
            row["job_id"],
            actor=actor,
            source=source,
            reason=reason,
            transport=transport,
            _replay_of=dead_letter_id,
        )
        return f"job {reopened.job_id} resumed ({reopened.step_runs} step run(s) back to pending)"
    with (
        operator_action(settings, f"replay of dead letter {dead_letter_id}", "engine_dead_letters"),
        _connect(settings) as conn,
        conn.transaction(),
    ):
        if not store.dead_letter_mark_replayed_if_open(conn, dead_letter_id):
            raise BadInput(f"dead letter {dead_letter_id} was already replayed")
        record_action(
            conn,
            "replay",
            "dead_letter",
            dead_letter_id,
            actor=actor,
            source=source,
            reason=reason,
            detail={"source": "message"},
        )
        transport.send_raw(row["message_body"])
    return f"message of dead letter {dead_letter_id} sent again"


def purge(
    settings: Settings,
    *,
    actor: str | None = None,
    source: AuditSource = AuditSource.CLI,
    reason: str | None = None,
) -> int:
    """Delete poison-message and replayed dead letters; the count deleted (audited with it)."""
    with (
        operator_action(settings, "purge of dead letters", "engine_dead_letters"),
        _connect(settings) as conn,
        conn.transaction(),
    ):
        deleted = store.dead_letter_delete_closed(conn)
        record_action(
            conn,
            "purge",
            "dead_letter",
            None,
            actor=actor,
            source=source,
            reason=reason,
            detail={"deleted": deleted},
        )
        return deleted


def alerts(settings: Settings, limit: int = 50, *, pending: bool = False) -> list[dict[str, Any]]:
    """Recorded alerts, newest first, each with its deliveries (``pending``: not all delivered)."""
    with _connect(settings) as conn:
        return store.alert_select_recent(conn, limit=limit, pending_only=pending)


def retry_alerts(settings: Settings, alert_id: int | None = None) -> int:
    """Make abandoned deliveries (of ``alert_id``, or all) pending again; how many.

    The workers' dispatchers send them at their next round. Delivered
    deliveries are never sent again.
    """
    with (
        operator_action(settings, "retry of alert deliveries", "engine_alert_deliveries"),
        _connect(settings) as conn,
        conn.transaction(),
    ):
        reset = store.alert_delivery_reset_abandoned(conn, alert_id)
        if reset == 0 and alert_id is not None:
            if not store.alert_exists(conn, alert_id):
                raise BadInput(f"no alert with id {alert_id}; `engine alerts list` shows them")
            states = ", ".join(
                f"{d['sink']} {d['status']}"
                for d in store.alert_delivery_select_by_alert(conn, alert_id)
            )
            raise BadInput(
                f"alert {alert_id} has no abandoned delivery ({states or 'no sinks'}); "
                "pending ones are sent by the workers, delivered ones are never sent again"
            )
        return reset
