"""Pin: keep a job past its retention until a date, with a reason, audited.

``engine pin JOB --until 2027-06-30 --reason "tax audit"``: the job (live,
active or ended) is not pruned before that date; after it, its own policy
applies again. A new pin replaces the last one (an earlier date shortens
it). Recorded in the audit trail (``pin``) in the pin's own transaction.
A job pruned already cannot be pinned: its summary and report are all that
is left, and they are never pruned.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from engine.config import Settings
from engine.errors import BadInput, NoSuchJob
from engine.jobs.audit import operator, record_action
from engine.store import db, jsonb
from engine.store.job_summaries import job_summary_select
from engine.store.jobs import job_pin_if_exists
from engine.store.status import AuditSource

__all__ = ["Pinned", "pin_job"]


@dataclass(frozen=True)
class Pinned:
    """A job kept until ``until`` (its flow and status when pinned)."""

    job_id: uuid.UUID
    flow: str
    status: str
    until: datetime
    reason: str


def pin_job(
    settings: Settings,
    job_id: uuid.UUID,
    until: datetime,
    reason: str,
    *,
    actor: str | None = None,
    source: AuditSource = AuditSource.API,
) -> Pinned:
    """Keep ``job_id`` until ``until`` (a naive time is UTC) because of ``reason``.

    Raises :class:`BadInput` for an empty reason, :class:`NoSuchJob` for an
    unknown job, and :class:`BadInput` naming the date for a pruned one.
    """
    why = (reason or "").strip()
    if not why:
        raise BadInput("a pin needs a reason (--reason): why must this job be kept?")
    jsonb.checked(why, "pin reason")
    when = until if until.tzinfo is not None else until.replace(tzinfo=UTC)
    with db.connect(settings) as conn, conn.transaction():
        row = job_pin_if_exists(conn, job_id, when, why)
        if row is None:
            summary = job_summary_select(conn, job_id)
            if summary is None:
                raise NoSuchJob(job_id)
            raise BadInput(
                f"job {job_id} was pruned on {summary['pruned_at']:%Y-%m-%d %H:%M:%S %Z}; "
                "only a live job can be pinned (its summary and report are kept)"
            )
        record_action(
            conn,
            "pin",
            "job",
            job_id,
            actor=actor or operator(),
            source=source,
            job_id=job_id,
            reason=why,
            detail={"until": when.isoformat()},
        )
    return Pinned(job_id, row["flow"], row["status"], when, why)
