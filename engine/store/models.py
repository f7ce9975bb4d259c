"""Typed, read-side access to the engine's tables (SQLModel).

The CLI and the reports read jobs, step runs and events through these models.
The guarded writes (claim, lease renewal, fenced checkpoint) are plain SQL in
``engine/store/sql``: their ``WHERE`` clauses are the invariants, and an ORM
would hide them. ``tests/integration/test_schema.py`` checks these models and
enums against the migrated schema column by column.
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, Column, DateTime, Dialect, Integer, Text
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

from engine.store.columns import _json, _text, _ts, _uuid_or_none

# what operators' actions keep (a pruned job's summary, bulk previews): models of their own
from engine.store.kept_models import BulkPreview, BulkPreviewOutcome, JobSummary
from engine.store.status import (
    AlertSource,
    AuditSource,
    CatchUp,
    DeadLetterSource,
    EventKind,
    FireOutcome,
    JobStatus,
    StepStatus,
    WorkerStatus,
)

__all__ = [
    "ENUM_COLUMNS",
    "AuditEntry",
    "AuditHead",
    "BulkPreview",
    "BulkPreviewOutcome",
    "DeadLetter",
    "DeadLetterSource",
    "EnumText",
    "Event",
    "EventKind",
    "Job",
    "JobSignal",
    "JobStatus",
    "JobSummary",
    "JobTag",
    "OutboxRow",
    "QueueMessage",
    "StepRun",
    "StepStatus",
    "WorkerRecord",
    "WorkerStatus",
]


class AlertDeliveryStatus(enum.StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    DELIVERED = "delivered"
    ABANDONED = "abandoned"


class EnumText(TypeDecorator[str]):
    """A text column holding one of an enum's values (the CHECK lists them): read as the enum."""

    impl = Text
    cache_ok = True

    def __init__(self, enum_type: type[enum.StrEnum]) -> None:
        super().__init__()
        self.enum_type = enum_type

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else str(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else self.enum_type(value)


class Job(SQLModel, table=True):
    """One run of a flow with its parameters."""

    __tablename__ = "engine_jobs"

    id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), primary_key=True))
    flow: str = _text(False)
    flow_version: int = Field(sa_column=Column(Integer, nullable=False))
    params: dict[str, Any] = _json(False)
    fingerprint: str = _text(False)
    status: JobStatus = Field(sa_column=Column(EnumText(JobStatus), nullable=False))
    submitted_by: str | None = _text(True)
    error: str | None = _text(True)
    created_at: datetime = _ts(False)
    started_at: datetime | None = _ts(True)
    finished_at: datetime | None = _ts(True)
    parent_job_id: uuid.UUID | None = _uuid_or_none()
    parent_step_run_id: uuid.UUID | None = _uuid_or_none()
    child_key: str | None = _text(True)
    signals: list[str] | None = Field(default=None, sa_column=Column(ARRAY(Text), nullable=True))
    approvals: list[str] | None = Field(default=None, sa_column=Column(ARRAY(Text), nullable=True))
    rejected: bool = Field(default=False, sa_column=Column(Boolean, nullable=False))
    pinned_until: datetime | None = _ts(True)
    pinned_reason: str | None = _text(True)
    traceparent: str | None = _text(True)  # the submit's W3C trace context (engine.tracing)
    # the worker whose checkpoint ended it done: its job_done event, folded (migration 0035)
    finished_by: str | None = _text(True)
    # its submitted event, folded (migration 0037): what the row does not say of it
    submitted_detail: dict[str, Any] | None = _json(True)


class StepRun(SQLModel, table=True):
    """One step of one job (one fan-out item): the unit claimed and leased."""

    __tablename__ = "engine_step_runs"

    id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), primary_key=True))
    job_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False))
    step: str = _text(False)
    fanout_key: str = _text(False)
    fingerprint: str = _text(False)
    status: StepStatus = Field(sa_column=Column(EnumText(StepStatus), nullable=False))
    attempts: int = Field(sa_column=Column(Integer, nullable=False))
    max_attempts: int = Field(sa_column=Column(Integer, nullable=False))
    available_at: datetime = _ts(False)
    lease_owner: str | None = _text(True)
    lease_token: uuid.UUID | None = _uuid_or_none()
    lease_expires_at: datetime | None = _ts(True)
    item: Any = _json(True)
    output: dict[str, Any] | None = _json(True)
    error: dict[str, Any] | None = _json(True)
    created_at: datetime = _ts(False)
    started_at: datetime | None = _ts(True)
    finished_at: datetime | None = _ts(True)
    claimed_at: datetime | None = _ts(True)
    concurrency_key: str | None = _text(True)
    concurrency_limit: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    concurrency_per_job: bool = Field(sa_column=Column(Boolean, nullable=False))
    wait_signal: str | None = _text(True)
    wait_until: datetime | None = _ts(True)
    wait_children: bool = Field(default=False, sa_column=Column(Boolean, nullable=False))
    concurrency_kept: bool = Field(default=False, sa_column=Column(Boolean, nullable=False))
    wait_past: list[datetime | None] = Field(
        default_factory=list, sa_column=Column(ARRAY(DateTime(timezone=True)), nullable=False)
    )
    wait_summary: dict[str, Any] | None = _json(True)  # what the last wait published
    # released at no charge after its body ran, since its last park (migration 0027)
    free_releases: int = Field(default=0, sa_column=Column(Integer, nullable=False))
    # retry rounds so far, and the attempts used before this round (migration 0029)
    retries: int = Field(default=0, sa_column=Column(Integer, nullable=False))
    attempt_base: int = Field(default=0, sa_column=Column(Integer, nullable=False))
    # its first claim and its success, folded into the row instead of two events
    # (migration 0035; engine_history reads them as the claimed and succeeded events)
    started_by: str | None = _text(True)
    started_detail: dict[str, Any] | None = _json(True)
    finished_by: str | None = _text(True)
    finished_detail: dict[str, Any] | None = _json(True)


class JobSignal(SQLModel, table=True):
    """A signal a job received (one per job and name), woken waits read it."""

    __tablename__ = "engine_signals"

    id: int = Field(sa_column=Column(BigInteger, primary_key=True))
    job_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False))
    name: str = _text(False)
    data: Any = _json(False)
    sent_by: str | None = _text(True)
    created_at: datetime = _ts(False)


class JobTag(SQLModel, table=True):
    """A searchable key of a job: a step's (``ctx.tag``, with its checkpoint) or a searchable
    parameter's (``param.NAME``, at submit); ``job_created_at`` is the job's, copied on insert."""

    __tablename__ = "engine_job_tags"

    job_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), primary_key=True))
    name: str = Field(sa_column=Column(Text, primary_key=True))
    value: str = Field(sa_column=Column(Text, primary_key=True))
    job_created_at: datetime = _ts(False)


class OutboxRow(SQLModel, table=True):
    """A "step run X is ready" row, published after its transaction commits."""

    __tablename__ = "engine_outbox"

    id: int = Field(sa_column=Column(BigInteger, primary_key=True))
    step_run_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False))
    created_at: datetime = _ts(False)
    published_at: datetime | None = _ts(True)
    deliver_at: datetime = _ts(False)


class Event(SQLModel, table=True):
    """One line of the append-only history."""

    __tablename__ = "engine_events"

    id: int = Field(sa_column=Column(BigInteger, primary_key=True))
    at: datetime = _ts(False)
    kind: EventKind = Field(sa_column=Column(EnumText(EventKind), nullable=False))
    job_id: uuid.UUID | None = _uuid_or_none()
    step_run_id: uuid.UUID | None = _uuid_or_none()
    worker: str | None = _text(True)
    attempt: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    detail: dict[str, Any] = _json(False)


class AuditEntry(SQLModel, table=True):
    """One operator action of the append-only audit trail: who, when, what, on what, why."""

    __tablename__ = "engine_audit"

    id: int = Field(sa_column=Column(BigInteger, primary_key=True))
    at: datetime = _ts(False)
    actor: str = _text(False)
    source: AuditSource = Field(sa_column=Column(EnumText(AuditSource), nullable=False))
    action: str = _text(False)
    target_kind: str = _text(False)
    target_id: str | None = _text(True)
    job_id: uuid.UUID | None = _uuid_or_none()
    reason: str | None = _text(True)
    detail: dict[str, Any] = _json(False)
    # the hash chain (migration 0026), set once at commit by the database
    seq: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    prev_hash: str | None = _text(True)
    hash: str | None = _text(True)


class AuditHead(SQLModel, table=True):
    """The audit chain's last position and hash (one row): a deleted last entry shows."""

    __tablename__ = "engine_audit_head"

    one: bool = Field(default=True, sa_column=Column(Boolean, primary_key=True))
    seq: int = Field(sa_column=Column(BigInteger, nullable=False))
    hash: str = _text(False)
    last_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    at: datetime = _ts(False)


class DeadLetter(SQLModel, table=True):
    """A step run past its attempt cap, or a message that could not be handled."""

    __tablename__ = "engine_dead_letters"

    id: int = Field(sa_column=Column(BigInteger, primary_key=True))
    source: DeadLetterSource = Field(sa_column=Column(EnumText(DeadLetterSource), nullable=False))
    job_id: uuid.UUID | None = _uuid_or_none()
    step_run_id: uuid.UUID | None = _uuid_or_none()
    message_body: str | None = _text(True)
    reason: str = _text(False)
    error: dict[str, Any] | None = _json(True)
    created_at: datetime = _ts(False)
    replayed_at: datetime | None = _ts(True)
    message_id: str | None = _text(True)


class QueueMessage(SQLModel, table=True):
    """A message of the PostgreSQL transport's queue."""

    __tablename__ = "engine_queue"

    id: int = Field(sa_column=Column(BigInteger, primary_key=True))
    body: str = _text(False)
    visible_at: datetime = _ts(False)
    receive_count: int = Field(sa_column=Column(Integer, nullable=False))
    receipt: uuid.UUID | None = _uuid_or_none()
    created_at: datetime = _ts(False)


class AlertRow(SQLModel, table=True):
    """The one alert of a dead letter, or of an orphaned flow version's episode."""

    __tablename__ = "engine_alerts"

    id: int = Field(sa_column=Column(BigInteger, primary_key=True))
    dead_letter_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    source: AlertSource = Field(sa_column=Column(EnumText(AlertSource), nullable=False))
    job_id: uuid.UUID | None = _uuid_or_none()
    step_run_id: uuid.UUID | None = _uuid_or_none()
    flow: str | None = _text(True)
    step: str | None = _text(True)
    attempts: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    error_line: str = _text(False)
    reason: str = _text(False)
    created_at: datetime = _ts(False)
    flow_version: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    episode: datetime | None = _ts(True)
    schedule_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    schedule: str | None = _text(True)
    scheduled_for: datetime | None = _ts(True)


class AlertDelivery(SQLModel, table=True):
    """One sink's delivery of one alert."""

    __tablename__ = "engine_alert_deliveries"

    alert_id: int = Field(sa_column=Column(BigInteger, primary_key=True))
    sink: str = Field(sa_column=Column(Text, primary_key=True))
    status: AlertDeliveryStatus = Field(
        sa_column=Column(EnumText(AlertDeliveryStatus), nullable=False)
    )
    attempts: int = Field(sa_column=Column(Integer, nullable=False))
    next_attempt_at: datetime = _ts(False)
    claimed_by: str | None = _text(True)
    claim_token: uuid.UUID | None = _uuid_or_none()
    claimed_until: datetime | None = _ts(True)
    last_error: str | None = _text(True)
    delivered_at: datetime | None = _ts(True)


class ScheduleRow(SQLModel, table=True):
    """A flow submitted on a calendar (engine/schedules/)."""

    __tablename__ = "engine_schedules"

    id: int = Field(sa_column=Column(BigInteger, primary_key=True))
    name: str = _text(False)
    flow: str = _text(False)
    cron: str = _text(False)
    timezone: str = _text(False)
    params: dict[str, Any] = _json(False)
    catch_up: CatchUp = Field(sa_column=Column(EnumText(CatchUp), nullable=False))
    next_fire_at: datetime = _ts(False)
    last_fired_for: datetime | None = _ts(True)
    last_fired_at: datetime | None = _ts(True)
    last_job_id: uuid.UUID | None = _uuid_or_none()
    last_error: str | None = _text(True)
    created_by: str | None = _text(True)
    created_at: datetime = _ts(False)
    paused_at: datetime | None = _ts(True)
    paused_by: str | None = _text(True)
    paused_reason: str | None = _text(True)


class ScheduleFire(SQLModel, table=True):
    """One scheduled time a schedule fired: its job, or why it has none (refused, error)."""

    __tablename__ = "engine_schedule_fires"

    schedule_id: int = Field(sa_column=Column(BigInteger, primary_key=True))
    scheduled_for: datetime = Field(sa_column=Column(DateTime(timezone=True), primary_key=True))
    job_id: uuid.UUID | None = _uuid_or_none()
    error: str | None = _text(True)
    fired_by: str = _text(False)
    fired_at: datetime = _ts(False)
    outcome: FireOutcome | None = Field(
        default=None, sa_column=Column(EnumText(FireOutcome), nullable=True)
    )


class WorkerRecord(SQLModel, table=True):
    """A worker: where it runs, the flow versions it claims, when the database last saw it."""

    __tablename__ = "engine_workers"

    id: str = Field(sa_column=Column(Text, primary_key=True))
    host: str = _text(False)
    pid: int = Field(sa_column=Column(Integer, nullable=False))
    transport: str = _text(False)
    concurrency: int = Field(sa_column=Column(Integer, nullable=False))
    runnable: list[str] = Field(sa_column=Column(ARRAY(Text), nullable=False))
    status: WorkerStatus = Field(sa_column=Column(EnumText(WorkerStatus), nullable=False))
    started_at: datetime = _ts(False)
    last_seen_at: datetime = _ts(False)
    stopped_at: datetime | None = _ts(True)


class ConsoleUser(SQLModel, table=True):
    """Who may sign in to the console, with which role (a hash, never shown, or none: OIDC)."""

    __tablename__ = "engine_console_users"

    name: str = Field(sa_column=Column(Text, primary_key=True))
    role: str = _text(False)
    password_hash: str | None = _text(True)
    created_at: datetime = _ts(False)
    password_changed_at: datetime | None = _ts(True)
    # no longer used (engine_console_signin_failures counts per user and address)
    failed_signins: int = Field(sa_column=Column(Integer, nullable=False))
    locked_until: datetime | None = _ts(True)
    last_signin_at: datetime | None = _ts(True)


class ConsoleSession(SQLModel, table=True):
    """A console session: the SHA-256 of its id (never the id), whose, until when."""

    __tablename__ = "engine_console_sessions"

    id_hash: str = Field(sa_column=Column(Text, primary_key=True))
    user_name: str = _text(False)
    role: str = _text(False)
    via: str = _text(False)
    created_at: datetime = _ts(False)
    last_seen_at: datetime = _ts(False)
    expires_at: datetime = _ts(False)
    token_expires_at: datetime | None = _ts(True)


class ConsoleSigninFailure(SQLModel, table=True):
    """Wrong passwords for a user from one address, and the lock they earned (that pair only)."""

    __tablename__ = "engine_console_signin_failures"

    name: str = Field(sa_column=Column(Text, primary_key=True))
    address: str = Field(sa_column=Column(Text, primary_key=True))
    failures: int = Field(sa_column=Column(Integer, nullable=False))
    last_failed_at: datetime = _ts(False)
    locked_until: datetime | None = _ts(True)


# table name -> column name -> enum; what the schema test checks against CHECKs
ENUM_COLUMNS: dict[str, dict[str, type[enum.StrEnum]]] = {
    "engine_jobs": {"status": JobStatus},
    "engine_step_runs": {"status": StepStatus},
    "engine_events": {"kind": EventKind},
    "engine_audit": {"source": AuditSource},
    "engine_dead_letters": {"source": DeadLetterSource},
    "engine_alerts": {"source": AlertSource},
    "engine_workers": {"status": WorkerStatus},
    "engine_alert_deliveries": {"status": AlertDeliveryStatus},
    "engine_schedules": {"catch_up": CatchUp},
    "engine_schedule_fires": {"outcome": FireOutcome},
}
