"""Read-side queries for the CLI and reports, through the SQLModel models.

These only read: every write goes through the guarded statements of the
other store modules. The engine comes from :func:`sqlalchemy_engine`, so
SQLAlchemy finds the database (the embedded one included) and takes the
session role exactly as psycopg connections do.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import tuple_row
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool
from sqlmodel import Session, col, select

from engine.config import Settings
from engine.store import db
from engine.store.errors import wrap_errors
from engine.store.models import (
    AuditEntry,
    DeadLetter,
    Event,
    Job,
    JobSignal,
    JobStatus,
    OutboxRow,
    StepRun,
)


def sqlalchemy_engine(settings: Settings, **kwargs: Any) -> Engine:
    """An engine on the configured database (the embedded one included).

    The connection comes from :func:`engine.store.db.connect`, so there is one way
    to find the database (through a pooler too) and the URL never has to be
    rewritten for SQLAlchemy.
    """

    def creator() -> psycopg.Connection[Any]:
        return db.connect(settings, row_factory=tuple_row)

    kwargs.setdefault("poolclass", NullPool)
    return create_engine("postgresql+psycopg://", creator=creator, **kwargs)


def _step_runs(session: Session, job_id: uuid.UUID) -> list[StepRun]:
    """A job's step runs in the order they were made (fan-out items by key)."""
    return list(
        session.exec(
            select(StepRun)
            .where(StepRun.job_id == job_id)
            .order_by(col(StepRun.created_at), col(StepRun.step), col(StepRun.fanout_key))
        ).all()
    )


@dataclass(frozen=True)
class JobView:
    job: Job
    steps: list[StepRun]
    unpublished: int
    signals: list[JobSignal]
    parent: Job | None = None  # the job whose step submitted this one, if a child
    children: list[Job] = field(default_factory=list)


def _family(session: Session, job: Job) -> tuple[Job | None, list[Job]]:
    """The job's parent (if it is a child job) and its children, oldest first."""
    parent = None if job.parent_job_id is None else session.get(Job, job.parent_job_id)
    children = session.exec(
        select(Job).where(Job.parent_job_id == job.id).order_by(col(Job.created_at), col(Job.id))
    ).all()
    return parent, list(children)


def _audit(session: Session, job_id: uuid.UUID) -> list[AuditEntry]:
    """The job's audit entries, in the order they were written."""
    return list(
        session.exec(
            select(AuditEntry).where(AuditEntry.job_id == job_id).order_by(col(AuditEntry.id))
        ).all()
    )


def _signals(session: Session, job_id: uuid.UUID) -> list[JobSignal]:
    return list(
        session.exec(
            select(JobSignal).where(JobSignal.job_id == job_id).order_by(col(JobSignal.id))
        ).all()
    )


@wrap_errors
def job_view(engine: Engine, job_id: uuid.UUID) -> JobView | None:
    with Session(engine) as session:
        job = session.get(Job, job_id)
        if job is None:
            return None
        steps = _step_runs(session, job_id)
        unpublished = session.exec(
            select(OutboxRow)
            .join(StepRun, col(StepRun.id) == col(OutboxRow.step_run_id))
            .where(StepRun.job_id == job_id, col(OutboxRow.published_at).is_(None))
        ).all()
        parent, children = _family(session, job)
        return JobView(job, steps, len(unpublished), _signals(session, job_id), parent, children)


@dataclass(frozen=True)
class JobHistory:
    """Everything recorded about one job: what a run report is built from."""

    job: Job
    runs: list[StepRun]
    events: list[Event]  # in the order they were written
    dead_letters: list[DeadLetter]
    signals: list[JobSignal]
    parent: Job | None = None
    children: list[Job] = field(default_factory=list)
    audit: list[AuditEntry] = field(default_factory=list)  # operators' actions on it


@wrap_errors
def job_history(engine: Engine, job_id: uuid.UUID) -> JobHistory | None:
    """The job with its step runs, events and dead letters; ``None`` if there is no such job."""
    with Session(engine) as session:
        job = session.get(Job, job_id)
        if job is None:
            return None
        runs = _step_runs(session, job_id)
        events = list(
            session.exec(select(Event).where(Event.job_id == job_id).order_by(col(Event.id))).all()
        )
        dead = list(
            session.exec(
                select(DeadLetter).where(DeadLetter.job_id == job_id).order_by(col(DeadLetter.id))
            ).all()
        )
        signals = _signals(session, job_id)
        parent, children = _family(session, job)
        audit = _audit(session, job_id)
    return JobHistory(job, runs, events, dead, signals, parent, children, audit)


@wrap_errors
def recent_jobs(
    engine: Engine,
    *,
    flow: str | None = None,
    statuses: Sequence[JobStatus] = (),
    limit: int = 50,
) -> list[Job]:
    """Jobs newest first, at most ``limit``, of ``flow`` and ``statuses`` when given."""
    with Session(engine) as session:
        query = select(Job).order_by(col(Job.created_at).desc()).limit(limit)
        if flow:
            query = query.where(Job.flow == flow)
        if statuses:
            query = query.where(col(Job.status).in_([s.value for s in statuses]))
        return list(session.exec(query).all())
