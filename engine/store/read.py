"""Read-side queries for the CLI and reports, through the SQLModel models.

These only read: every write goes through the guarded statements of the
other store modules. The engine comes from :func:`sqlalchemy_engine`, so
SQLAlchemy finds the database (the embedded one included) and takes the
session role exactly as psycopg connections do.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import tuple_row
from sqlalchemy import ColumnElement, Engine, and_, create_engine, not_, or_
from sqlalchemy.orm import aliased
from sqlalchemy.pool import NullPool
from sqlmodel import Session, col, select

from engine.config import Settings
from engine.store import db
from engine.store.errors import wrap_errors
from engine.store.models import (
    AuditEntry,
    DeadLetter,
    Event,
    EventKind,
    Job,
    JobSignal,
    JobStatus,
    JobSummary,
    OutboxRow,
    StepRun,
    StepStatus,
)
from engine.store.queries import load
from engine.store.status import wait_text


class JobState(enum.StrEnum):
    """How a job stands as people read it: its status, or ``waiting``.

    Derived on the read side, never stored: a job whose every unfinished
    step run is parked waiting (for a signal, a time or its children) is
    ``running`` in the engine's state machine and ``waiting`` here.
    """

    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


_BUSY = (StepStatus.PENDING, StepStatus.RUNNING)


def _waiting(job: Any = Job) -> ColumnElement[bool]:
    """``job`` is active, has a waiting step run and none pending or running (index lookups)."""

    def any_run(*statuses: StepStatus) -> ColumnElement[bool]:
        run = aliased(StepRun)  # its own, so an outer query of step runs does not correlate
        return (
            select(col(run.id))
            .where(col(run.job_id) == job.id, col(run.status).in_(statuses))
            .correlate_except(run)
            .exists()
        )

    return and_(
        col(job.status).in_([JobStatus.PENDING, JobStatus.RUNNING]),
        any_run(StepStatus.WAITING),
        not_(any_run(*_BUSY)),
    )


def waits_for(run: StepRun) -> str:
    """What a waiting step run waits for (:func:`~engine.store.status.wait_text`)."""
    return wait_text(run.wait_signal, run.wait_until, run.wait_children)


def _waits_of(session: Session, job_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, list[str]]:
    """For each of these jobs that is waiting, what for (each distinct wait once, in order)."""
    ids = list(job_ids)
    if not ids:
        return {}
    job = aliased(Job)
    runs = session.exec(
        select(StepRun)
        .join(job, col(job.id) == col(StepRun.job_id))
        .where(
            col(StepRun.job_id).in_(ids),
            col(StepRun.status) == StepStatus.WAITING,
            _waiting(job),
        )
        .order_by(col(StepRun.created_at), col(StepRun.step), col(StepRun.fanout_key))
    ).all()
    found: dict[uuid.UUID, list[str]] = {}
    for run in runs:
        texts = found.setdefault(run.job_id, [])
        if (text := waits_for(run)) not in texts:
            texts.append(text)
    return found


@dataclass(frozen=True)
class ListedJob:
    """A job with the state people read (``waiting`` derived) and what it waits for."""

    job: Job
    waiting_for: list[str] = field(default_factory=list)

    @property
    def state(self) -> JobState:
        return JobState.WAITING if self.waiting_for else JobState(self.job.status.value)

    def as_json(self) -> dict[str, Any]:
        """The job's columns, with ``state`` and ``waiting_for`` beside its ``status``."""
        return {
            **self.job.model_dump(mode="json"),
            "state": str(self.state),
            "waiting_for": self.waiting_for,
        }


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
    waiting_for: list[str] = field(default_factory=list)  # empty unless the job waits
    done: int = 0  # step runs done, the descendants' included
    total: int = 0  # step runs known so far, the descendants' included

    @property
    def listed(self) -> ListedJob:
        return ListedJob(self.job, self.waiting_for)


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
        waits = _waits_of(session, [job_id]).get(job_id, [])
        # the one progress query (engine/store/sql/jobs.sql), also what --wait shows
        progress = (
            session.connection()
            .exec_driver_sql(load("jobs")["job_progress"], {"job_id": job_id})
            .mappings()
            .one()
        )
        return JobView(
            job,
            steps,
            len(unpublished),
            _signals(session, job_id),
            parent,
            children,
            waits,
            progress["done"],
            progress["total"],
        )


@dataclass(frozen=True)
class JobHistory:
    """Everything recorded about one job: what a run report is built from."""

    job: Job
    runs: list[StepRun]
    events: list[Event]  # in the order they happened (the folded ones have no id)
    dead_letters: list[DeadLetter]
    signals: list[JobSignal]
    parent: Job | None = None
    children: list[Job] = field(default_factory=list)
    waiting_for: list[str] = field(default_factory=list)  # empty unless the job waits
    audit: list[AuditEntry] = field(default_factory=list)  # operators' actions on it
    child_waits: list[StepRun] = field(default_factory=list)  # its children's waiting runs


def _child_waits(session: Session, children: Sequence[Job]) -> list[StepRun]:
    """The waiting step runs of these (active) children, in the order they were made."""
    active = [c.id for c in children if c.status.active]
    if not active:
        return []
    return list(
        session.exec(
            select(StepRun)
            .where(col(StepRun.job_id).in_(active), col(StepRun.status) == StepStatus.WAITING)
            .order_by(col(StepRun.created_at), col(StepRun.step), col(StepRun.fanout_key))
        ).all()
    )


def _history(session: Session, job_id: uuid.UUID | None) -> list[Event]:
    """The job's events (every job's but the publications: ``None``) in the order they
    happened, the claims and successes folded into step runs included (``engine_history``,
    migration 0035; those have no id)."""
    name, params = (
        ("event_history_all", {})
        if job_id is None
        else ("event_history_of_job", {"job_id": job_id})
    )
    result = session.connection().exec_driver_sql(load("events")[name], params)
    return [Event(**{**row, "kind": EventKind(row["kind"])}) for row in result.mappings()]


@wrap_errors
def all_history(engine: Engine) -> list[Event]:
    """Every job's history but the publications, in the order it happened (the simulator's)."""
    with Session(engine) as session:
        return _history(session, None)


@wrap_errors
def job_history(engine: Engine, job_id: uuid.UUID) -> JobHistory | None:
    """The job with its step runs, events and dead letters; ``None`` if there is no such job."""
    with Session(engine) as session:
        job = session.get(Job, job_id)
        if job is None:
            return None
        runs = _step_runs(session, job_id)
        events = _history(session, job_id)
        dead = list(
            session.exec(
                select(DeadLetter).where(DeadLetter.job_id == job_id).order_by(col(DeadLetter.id))
            ).all()
        )
        signals = _signals(session, job_id)
        parent, children = _family(session, job)
        waits = _waits_of(session, [job_id]).get(job_id, [])
        audit = _audit(session, job_id)
        child_waits = _child_waits(session, children)
    return JobHistory(
        job,
        runs,
        events,
        dead,
        signals,
        parent,
        children,
        waiting_for=waits,
        audit=audit,
        child_waits=child_waits,
    )


@wrap_errors
def recent_jobs(
    engine: Engine,
    *,
    flow: str | None = None,
    statuses: Sequence[JobState | JobStatus] = (),
    limit: int = 50,
) -> list[ListedJob]:
    """Jobs newest first, at most ``limit``, of ``flow`` and in ``statuses`` when given.

    A status is a :class:`JobState`: ``waiting`` selects the active jobs whose
    unfinished step runs all wait, ``running`` the other running ones.
    """
    with Session(engine) as session:
        query = select(Job).order_by(col(Job.created_at).desc()).limit(limit)
        if flow:
            query = query.where(Job.flow == flow)
        if statuses:
            wanted = {JobState(str(s)) for s in statuses}
            plain = [JobStatus(s.value) for s in wanted if s != JobState.WAITING]
            either: list[ColumnElement[bool]] = [col(Job.status).in_(plain)] if plain else []
            if JobState.WAITING in wanted:
                either.append(_waiting())
            active = {JobState.PENDING, JobState.RUNNING} & wanted
            if active and JobState.WAITING not in wanted:
                # a waiting job is not shown as pending or running
                query = query.where(not_(_waiting()))
            query = query.where(or_(*either))
        jobs = list(session.exec(query).all())
        waits = _waits_of(session, [j.id for j in jobs if j.status.active])
        return [ListedJob(j, waits.get(j.id, [])) for j in jobs]


def recent_job_summaries(engine: Engine, *, limit: int = 50) -> list[JobSummary]:
    """Jobs retention pruned (their summaries), newest first, at most ``limit``."""
    with Session(engine) as session:
        query = select(JobSummary).order_by(col(JobSummary.created_at).desc()).limit(limit)
        return list(session.exec(query).all())
