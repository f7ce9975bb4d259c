"""A step run dead-lettered and its job failed: written once, for the slot and the sweeper.

A step run ends dead in two places: on its slot, when its step failed for
the last time (:meth:`engine.runner.failures.Failures.failed`), and in the
sweeper, when its worker died during its last allowed attempt
(:mod:`engine.worker.sweeper`). Both write the same rows here, in the
caller's transaction: the dead letter, its alert (no dead letter commits
without it), the ``dead_lettered`` event, then the job failed once (its
``job_failed`` event) and what a job's end leads to (:func:`job_ended`: its
other step runs and children cancelled, nothing left running under it).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from engine import store
from engine.alerts import AlertRecorder
from engine.jobs.ending import Ended, job_ended
from engine.store.status import EventKind, JobStatus
from engine.transports.base import Transport

__all__ = ["dead_letter_step", "fail_job"]

# records the dead_lettered event: (conn, kind, **detail)
Record = Callable[..., None]


def fail_job(
    conn: psycopg.Connection[Any],
    transport: Transport,
    job_id: uuid.UUID,
    *,
    worker: str,
    error: str,
    free_slots: bool,
    rejected: bool = False,
) -> Ended | None:
    """Fail the job once (its ``job_failed`` event), cancelling what is left of it.

    ``rejected``: the data's decision (a step's Reject), which ``engine retry``
    refuses and a parent reads. ``None``: the job had ended already.
    """
    if not store.job_finish_if_active(conn, job_id, JobStatus.FAILED, error):
        return None
    store.event_insert(conn, EventKind.JOB_FAILED, job_id=job_id, worker=worker)
    if rejected:
        store.job_mark_rejected_if_failed(conn, job_id)
    # a failed job leaves nothing running: its children and the step's
    # siblings are cancelled (and, with free_slots, the slots they held freed)
    return job_ended(conn, transport, job_id, cancel_rest=True, free_slots=free_slots)


def dead_letter_step(
    conn: psycopg.Connection[Any],
    transport: Transport,
    alerts: AlertRecorder,
    *,
    job_id: uuid.UUID,
    step_run_id: uuid.UUID,
    step: str,
    reason: str,
    error: dict[str, Any] | None,
    worker: str,
    record: Record,
    free_slots: bool,
) -> tuple[Ended | None, bool]:
    """Dead-letter a step run already ended ``dead``, with its alert, and fail its job.

    ``record(conn, EventKind.DEAD_LETTERED, reason=...)`` writes its event
    (an attempt's, or the sweeper's). Returns the job's end (``None``: it had
    ended already) and whether an alert was recorded (wake the notifier
    after the commit).
    """
    dead_letter = store.dead_letter_insert_step(
        conn, job_id=job_id, step_run_id=step_run_id, reason=reason, error=error
    )
    # in this transaction: no dead letter commits without its alert
    alerted = alerts.record(conn, dead_letter)
    record(conn, EventKind.DEAD_LETTERED, reason=reason)
    ended = fail_job(
        conn,
        transport,
        job_id,
        worker=worker,
        error=f"step {step}: {reason}",
        free_slots=free_slots,
    )
    return ended, alerted
