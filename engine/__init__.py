"""The engine: typed flows of steps, run as leased and fenced jobs.

A *flow* (:class:`Flow`) declares a typed graph of *steps*; a *job* is one run
of a flow with its parameters and a *step run* is one step of one job. Flows
are loaded explicitly into a :class:`Registry`. The public API is what this
module exports, one flat namespace pinned by ``tests/unit/test_public_api.py``;
flows import nothing else from ``engine``. Tools around the engine (the CLI,
the simulator, the bench, tests) import the module they need, e.g.
:mod:`engine.worker.processes` to start worker processes, or
:mod:`engine.reports` for the renderers (the worker extra).

Declare a flow
    Flow, Step, StepInput, MapOver, StepContext, Concurrency, RetryPolicy,
    Retry, Fail, Reject, Cancel, Refused, ApprovalRefused, Signal, SignalTimeout, Child,
    ChildrenTimeout
Run jobs (the API install: ``pip install erp-engine``)
    submit, Submitted, signal, Signalled, wait_for_job, JobStatus, job_info,
    awaiting_approval, Awaiting (the approvals inbox: waits with their summaries),
    JobInfo, active_jobs, Schedule, add_schedule, list_schedules,
    remove_schedule, pause_schedule, resume_schedule, run_schedule_now,
    Registry, Settings, migrate, MigrationReport
Find runs (a domain's ``engine runs`` options: a registered module's ``search_fields``)
    SearchField, RunMatch
Keep the evidence, prune the rest (retention per flow and end state)
    Retention, prune, PruneReport, pin_job
Record an operator's action (the audit trail, in the action's transaction)
    record_action, Audited, audit_trail
Act in bulk on a frozen preview (retry, cancel, replay, purge what a filter finds)
    bulk_preview, bulk_apply, BulkFilter, BulkPreview, BulkApplied, PreviewClosed
A flow's own SQL and files
    connect, load_queries, Queries, write_report_file
Errors (the tree is drawn in :mod:`engine.errors`)
    EngineError, ConfigError, DefinitionError, BadInput, UnknownFlow,
    InvalidParameters, JobFailed, JobCancelled, LeaseLost, ChecksFailed,
    MigrationError, MigrationChecksumMismatch, StoreError
"""

from __future__ import annotations

from engine.config import Settings
from engine.errors import (
    ApprovalRefused,
    BadInput,
    ChecksFailed,
    ConfigError,
    DefinitionError,
    EngineError,
    InvalidParameters,
    JobCancelled,
    JobFailed,
    LeaseLost,
    MigrationChecksumMismatch,
    MigrationError,
    PreviewClosed,
    Refused,
    StoreError,
    UnknownFlow,
)
from engine.flow import Flow, MapOver, Step, StepInput
from engine.flow.concurrency import Concurrency
from engine.flow.registry import Registry
from engine.flow.retention import Retention
from engine.flow.retry import Cancel, Fail, Reject, Retry, RetryPolicy
from engine.jobs.audit import Audited, audit_trail, record_action
from engine.jobs.bulk import BulkApplied, BulkFilter, BulkPreview
from engine.jobs.bulk import apply as bulk_apply
from engine.jobs.bulk import preview as bulk_preview
from engine.jobs.lookup import JobInfo, active_jobs, job_info, wait_for_job
from engine.jobs.search import RunMatch, SearchField
from engine.jobs.submit import Submitted, submit
from engine.reports.storage import write_report_file
from engine.retention import PruneReport, pin_job, prune
from engine.runner.context import StepContext
from engine.schedules.schedules import (
    Schedule,
    add_schedule,
    list_schedules,
    pause_schedule,
    remove_schedule,
    resume_schedule,
    run_schedule_now,
)
from engine.store.db import connect
from engine.store.migrations import MigrationReport, migrate
from engine.store.queries import Queries
from engine.store.queries import load as load_queries
from engine.store.status import JobStatus
from engine.waits.children import Child, ChildrenTimeout
from engine.waits.inbox import Awaiting, awaiting_approval
from engine.waits.signals import Signal, Signalled, SignalTimeout, signal

__all__ = [
    "ApprovalRefused",
    "Audited",
    "Awaiting",
    "BadInput",
    "BulkApplied",
    "BulkFilter",
    "BulkPreview",
    "Cancel",
    "ChecksFailed",
    "Child",
    "ChildrenTimeout",
    "Concurrency",
    "ConfigError",
    "DefinitionError",
    "EngineError",
    "Fail",
    "Flow",
    "InvalidParameters",
    "JobCancelled",
    "JobFailed",
    "JobInfo",
    "JobStatus",
    "LeaseLost",
    "MapOver",
    "MigrationChecksumMismatch",
    "MigrationError",
    "MigrationReport",
    "PreviewClosed",
    "PruneReport",
    "Queries",
    "Refused",
    "Registry",
    "Reject",
    "Retention",
    "Retry",
    "RetryPolicy",
    "RunMatch",
    "Schedule",
    "SearchField",
    "Settings",
    "Signal",
    "SignalTimeout",
    "Signalled",
    "Step",
    "StepContext",
    "StepInput",
    "StoreError",
    "Submitted",
    "UnknownFlow",
    "active_jobs",
    "add_schedule",
    "audit_trail",
    "awaiting_approval",
    "bulk_apply",
    "bulk_preview",
    "connect",
    "job_info",
    "list_schedules",
    "load_queries",
    "migrate",
    "pause_schedule",
    "pin_job",
    "prune",
    "record_action",
    "remove_schedule",
    "resume_schedule",
    "run_schedule_now",
    "signal",
    "submit",
    "wait_for_job",
    "write_report_file",
]
