"""What a run report and the index show: the typed context their templates get.

Built by :mod:`engine.reports.context` from the database (templates hold no
SQL and no logic beyond loops); each view is a row as a person reads it,
with times as the database recorded them and JSON already serialised. The
attempts, waits and event log of the timeline are
:mod:`engine.reports.timeline`'s.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from engine.reports.timeline import Attempt, EventView, RenewalSummary, WaitSpan

__all__ = [
    "AuditView",
    "ChildWaitView",
    "DeadLetterView",
    "DecidedView",
    "ErrorView",
    "GraphNode",
    "IndexReport",
    "IndexRow",
    "JobLink",
    "RunReport",
    "SignalView",
    "StepRunView",
    "WaitView",
]


class GraphNode(BaseModel):
    """One step of the flow with the aggregate state of its step runs."""

    name: str
    status: str  # a StepStatus value, or "not_reached" when it has no step run
    mapped: bool
    runs: int
    done: int
    after: list[str]
    column: int
    row: int


class ErrorView(BaseModel):
    """The last error recorded for a step run (or a dead letter)."""

    where: str
    attempt: int | None
    type: str
    message: str
    traceback: str


class StepRunView(BaseModel):
    """One step run row, as a person reads it.

    ``started_at``: when its step first started running on a worker, as its
    attempts record it; its first claim when they do not (an older engine's).
    """

    id: str
    label: str
    step: str
    fanout_key: str
    status: str
    attempts: int
    max_attempts: int
    attempt_base: int = 0  # attempts before its retry round (``engine retry``)
    retries: int = 0  # retry rounds: shown "1/5 (retry 2)", never a growing cap
    lease_owner: str | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None


class WaitView(BaseModel):
    """A step run waiting now, for what, and the summary its wait published (if any).

    ``flow`` is the flow of the job the step run belongs to (a child's, for a
    parent's report): it picks the summary's template.
    """

    label: str
    signal: str | None
    until: datetime | None
    children: bool = False
    summary: dict[str, Any] | None = None
    flow: str = ""


class DecidedView(BaseModel):
    """A wait that published a summary and is over: what was shown, and the signal that came.

    ``signal_*`` are empty when no signal came (the wait timed out, or the
    job was cancelled while it waited).
    """

    label: str
    signal: str | None
    summary: dict[str, Any]
    flow: str
    sent_by: str | None = None
    at: datetime | None = None
    data: str | None = None  # JSON


class AuditView(BaseModel):
    """An operator's action on the job, from the audit trail."""

    at: datetime
    actor: str
    source: str
    action: str
    target: str
    reason: str | None
    detail: str  # JSON


class SignalView(BaseModel):
    """A signal the job received."""

    name: str
    data: str  # JSON
    sent_by: str | None
    at: datetime


class JobLink(BaseModel):
    """A parent or child job, linked from a run report (``href`` beside this report's).

    ``key`` is the child's key: a child's own, or for a parent this job's.
    """

    job_id: str
    flow: str
    status: str
    key: str | None
    href: str


class ChildWaitView(BaseModel):
    """A child job's step run waiting now, shown on its parent's report, linked to the child."""

    child: JobLink
    wait: WaitView


class DeadLetterView(BaseModel):
    """A dead letter of this job."""

    id: int
    source: str
    label: str
    reason: str
    created_at: datetime
    replayed_at: datetime | None


class RunReport(BaseModel):
    """Everything a run report shows; built by :func:`engine.reports.context.build_run_report`."""

    generated_at: datetime
    job_id: str
    flow: str
    flow_version: int
    flow_known: bool
    flow_description: str
    params: list[tuple[str, str]]  # name, JSON value
    status: str  # its state: ``waiting`` when every unfinished step run waits
    waiting_for: list[str]
    fingerprint: str
    submitted_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None
    error: str | None
    trace_id: str | None = None  # its submit's trace (engine.tracing), when traced
    rejected: bool = False  # failed by a step's Reject: the data's decision, not retried
    nodes: list[GraphNode]
    steps: list[StepRunView]
    attempts: list[Attempt]
    wait_spans: list[WaitSpan] = []  # drawn as waits, in a lane of their own
    lanes: list[str]
    counts: dict[str, int]  # event kind -> how many
    events: list[EventView]
    renewals: list[RenewalSummary]
    errors: list[ErrorView]
    dead_letters: list[DeadLetterView]
    summary_step: str | None
    summary: dict[str, Any] | None
    waits: list[WaitView]
    signals: list[SignalView]
    parent: JobLink | None = None
    children: list[JobLink] = []
    audit: list[AuditView] = []
    child_waits: list[ChildWaitView] = []  # what the waiting children wait for, and show
    decided: list[DecidedView] = []  # waits with a summary that are over: what was decided on


class IndexRow(BaseModel):
    """One job in the index; ``status`` is its state (``waiting`` derived, see JobState)."""

    job_id: str
    flow: str
    status: str
    waiting_for: list[str] = []
    period: str
    params: str
    submitted_by: str | None
    created_at: datetime
    duration_s: float | None
    href: str
    pruned: bool = False  # retention pruned it: its row is its summary, its page the stored one


class IndexReport(BaseModel):
    """The index of all runs, newest first."""

    generated_at: datetime
    rows: list[IndexRow]
    flows: list[str]
    statuses: list[str]
    periods: list[str]
