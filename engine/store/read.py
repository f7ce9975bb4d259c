"""Read-side queries for the CLI and reports, through the SQLModel models."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from engine.store.models import Job, JobStatus, OutboxRow, StepRun


@dataclass(frozen=True)
class JobView:
    job: Job
    steps: list[StepRun]
    unpublished: int


def job_view(engine: Engine, job_id: uuid.UUID) -> JobView | None:
    with Session(engine) as session:
        job = session.get(Job, job_id)
        if job is None:
            return None
        steps = session.exec(
            select(StepRun)
            .where(StepRun.job_id == job_id)
            .order_by(col(StepRun.created_at), col(StepRun.step), col(StepRun.fanout_key))
        ).all()
        unpublished = session.exec(
            select(OutboxRow)
            .join(StepRun, col(StepRun.id) == col(OutboxRow.step_run_id))
            .where(StepRun.job_id == job_id, col(OutboxRow.published_at).is_(None))
        ).all()
        return JobView(job, list(steps), len(unpublished))


def recent_jobs(
    engine: Engine,
    *,
    flow: str | None = None,
    statuses: Sequence[JobStatus] = (),
    limit: int = 50,
) -> list[Job]:
    with Session(engine) as session:
        query = select(Job).order_by(col(Job.created_at).desc()).limit(limit)
        if flow:
            query = query.where(Job.flow == flow)
        if statuses:
            query = query.where(col(Job.status).in_([s.value for s in statuses]))
        return list(session.exec(query).all())
