"""A pruned job as people still see it: its summary and where its report went."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.config import Settings
from engine.infra.json_fields import json_fields
from engine.store import db
from engine.store.job_summaries import job_summary_select

__all__ = ["PrunedJob", "pruned_job"]


@dataclass(frozen=True)
class PrunedJob:
    """The summary row of a pruned job (migration 0031)."""

    id: uuid.UUID
    flow: str
    flow_version: int
    status: str
    params: dict[str, Any]
    tags: dict[str, list[str]]
    submitted_by: str | None
    parent_job_id: uuid.UUID | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime
    step_runs: int
    step_runs_done: int
    step_runs_dead: int
    attempts: int
    events: int
    report: str | None
    pruned_at: datetime

    @property
    def note(self) -> str:
        """The line every view of it carries."""
        return (
            f"pruned on {self.pruned_at:%Y-%m-%d %H:%M:%S %Z}: its step runs and events are "
            f"gone; this is its summary, and its report is at {self.report or '(not stored)'}"
        )

    def as_json(self) -> dict[str, Any]:
        return {**json_fields(self, rename={"id": "job_id"}), "pruned": True, "note": self.note}


def pruned_job(settings: Settings, job_id: uuid.UUID) -> PrunedJob | None:
    """The summary of ``job_id`` if retention pruned it, else ``None``."""
    with db.connect(settings, autocommit=True) as conn:
        row = job_summary_select(conn, job_id)
    return None if row is None else PrunedJob(**row)
