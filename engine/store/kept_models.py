"""Models of what operators' actions keep: a pruned job's summary, bulk previews.

Read-side models like those of :mod:`engine.store.models` (which re-exports
them), checked against the schema by ``tests/integration/test_schema.py``.
Written only by their stores' SQL (``job_summaries.sql``, ``bulk_previews.sql``).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Integer, Text
from sqlalchemy.dialects.postgresql import UUID
from sqlmodel import Field, SQLModel

from engine.store.columns import _json, _text, _ts, _uuid_or_none

__all__ = ["BulkPreview", "BulkPreviewOutcome", "JobSummary"]


class JobSummary(SQLModel, table=True):
    """What stays of a job that retention pruned (engine/retention/): read, never written here."""

    __tablename__ = "engine_job_summaries"

    id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), primary_key=True))
    flow: str = _text(False)
    flow_version: int = Field(sa_column=Column(Integer, nullable=False))
    status: str = _text(False)
    params: dict[str, Any] = _json(False)
    tags: dict[str, Any] = _json(False)
    submitted_by: str | None = _text(True)
    parent_job_id: uuid.UUID | None = _uuid_or_none()
    error: str | None = _text(True)
    created_at: datetime = _ts(False)
    started_at: datetime | None = _ts(True)
    finished_at: datetime = _ts(False)
    step_runs: int = Field(sa_column=Column(Integer, nullable=False))
    step_runs_done: int = Field(sa_column=Column(Integer, nullable=False))
    step_runs_dead: int = Field(sa_column=Column(Integer, nullable=False))
    attempts: int = Field(sa_column=Column(Integer, nullable=False))
    events: int = Field(sa_column=Column(Integer, nullable=False))
    report: str | None = _text(True)
    pruned_at: datetime = _ts(False)


class BulkPreview(SQLModel, table=True):
    """A bulk action's frozen preview (engine/jobs/bulk/): the exact items and their states."""

    __tablename__ = "engine_bulk_previews"

    id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), primary_key=True))
    action: str = _text(False)
    filter: dict[str, Any] = _json(False)
    items: list[Any] = _json(False)
    counts: dict[str, Any] = _json(False)
    total: int = Field(sa_column=Column(Integer, nullable=False))
    created_by: str = _text(False)
    created_at: datetime = _ts(False)
    expires_at: datetime = _ts(False)
    applied_at: datetime | None = _ts(True)
    applied_by: str | None = _text(True)


class BulkPreviewOutcome(SQLModel, table=True):
    """What an apply did with one item of a preview (done, skipped, refused, and why)."""

    __tablename__ = "engine_bulk_preview_outcomes"

    preview_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), primary_key=True))
    item: str = Field(sa_column=Column(Text, primary_key=True))
    outcome: str = _text(False)
    why: str | None = _text(True)
    at: datetime = _ts(False)
