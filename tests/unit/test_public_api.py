"""The public API is pinned: a name added to or dropped from ``engine`` is a decision.

Flows import only these names (DESIGN.md); a change here is a change of the
contract with every flow module, so it shows up in review as an edit of this
list (httpx pins its exports the same way).
"""

from __future__ import annotations

import engine

PUBLIC = [
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


def test_public_api__all_is_the_pinned_sorted_list() -> None:
    assert engine.__all__ == sorted(engine.__all__), "keep engine.__all__ sorted"
    assert sorted(engine.__all__) == PUBLIC


def test_public_api__every_name_is_there_without_the_worker_extra() -> None:
    # no lazy module __getattr__: each name is a real attribute at import
    for name in PUBLIC:
        assert name in vars(engine), name
    assert not hasattr(engine, "__getattr__")


def test_public_api__the_renderers_are_not_in_the_root() -> None:
    assert not hasattr(engine, "render_index")
    assert not hasattr(engine, "render_job_report")


def test_public_api__job_status_is_what_submit_returns() -> None:
    assert engine.Submitted.__dataclass_fields__["status"].type in ("JobStatus", engine.JobStatus)
    assert engine.JobStatus("done") is engine.JobStatus.DONE
