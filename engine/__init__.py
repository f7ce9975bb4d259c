"""The engine: typed flows of steps, run as leased and fenced jobs.

A *flow* (:class:`Flow`) declares a typed graph of *steps*; a *job* is one run
of a flow with its parameters and a *step run* is one step of one job. Flows
are loaded explicitly into a :class:`Registry`. The public API is what this
module exports: what a flow author needs to declare, run and test flows, and
nothing else; flows import nothing else from ``engine``. Tools around the
engine (the CLI, the simulator, the bench, tests) import the module they need,
e.g. :mod:`engine.worker.processes` to start worker processes.

``import engine`` and :func:`submit` need only the API install (``pip install
erp-engine``); the report renderers need the worker extra (jinja2, SQLModel)
and are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.config import Settings
from engine.errors import (
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
    Refused,
    StoreError,
    UnknownFlow,
)
from engine.flow import Flow, MapOver, Step, StepInput
from engine.flow.concurrency import Concurrency
from engine.flow.registry import Registry
from engine.flow.retry import Cancel, Fail, Retry, RetryPolicy
from engine.jobs.lookup import JobInfo, active_jobs, job_info, wait_for_job
from engine.jobs.submit import Submitted, submit
from engine.runner.context import StepContext
from engine.schedules.schedules import Schedule, add_schedule, list_schedules, remove_schedule
from engine.store.db import connect
from engine.store.migrations import MigrationReport, migrate
from engine.store.queries import Queries
from engine.store.queries import load as load_queries
from engine.waits.children import Child, ChildrenTimeout
from engine.waits.signals import Signal, Signalled, SignalTimeout, signal

if TYPE_CHECKING:
    from engine.reports import render_index, render_job_report, write_report_file

# names that need the worker extra: imported when first asked for
_LAZY = {
    "render_index": "engine.reports",
    "render_job_report": "engine.reports",
    "write_report_file": "engine.reports.storage",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__all__ = [
    "BadInput",
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
    "LeaseLost",
    "MapOver",
    "MigrationChecksumMismatch",
    "MigrationError",
    "MigrationReport",
    "Queries",
    "Refused",
    "Registry",
    "Retry",
    "RetryPolicy",
    "Schedule",
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
    "connect",
    "job_info",
    "list_schedules",
    "load_queries",
    "migrate",
    "remove_schedule",
    "render_index",
    "render_job_report",
    "signal",
    "submit",
    "wait_for_job",
    "write_report_file",
]
