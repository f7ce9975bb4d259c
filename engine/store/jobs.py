"""Jobs: submitted once per fingerprint, ended once, cancelled or reopened by request.

A job's end, cancel and reopen also change its step runs (and a reopen its
dead letters) in the same transaction, with the job row locked first: one
lock order for every writer of a job.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from engine.store.batch import Executes
from engine.store.dead_letters import dead_letter_mark_replayed_by_job
from engine.store.errors import wrap_errors
from engine.store.named import NamedQueries
from engine.store.queries import load
from engine.store.rows import Claimed, FingerprintTaken, JobRow, Reopen, column
from engine.store.step_runs import step_cancel_by_job, step_reopen_by_job
from engine.store.step_waits import step_wait_children_if_reopened
from engine.store.wait_rows import ChildOf, ChildRow

__all__ = [
    "job_cancel_descendants",
    "job_cancel_if_active",
    "job_cancel_if_leased",
    "job_finish_if_active",
    "job_finish_if_active_logged",
    "job_insert_if_absent",
    "job_lock_children",
    "job_lock_if_active",
    "job_mark_rejected_if_failed",
    "job_pin_if_exists",
    "job_progress",
    "job_reopen_if_ended",
    "job_reopen_many_if_ended",
    "job_select_active_by_fingerprint",
    "job_select_active_matching",
    "job_select_approval_parties",
    "job_select_by_id_range",
    "job_select_child",
    "job_select_children",
    "job_select_info",
    "job_select_many_locked",
    "job_select_parent",
    "job_select_rejected_in_retry",
    "job_select_signals",
    "job_select_state_locked",
    "job_select_status",
    "job_select_version",
]

_q = load("jobs")
_rows = NamedQueries(_q)  # the reads that return rows as dicts


@wrap_errors
def job_insert_if_absent(
    conn: psycopg.Connection[Any],
    *,
    job_id: uuid.UUID,
    flow: str,
    flow_version: int,
    params: dict[str, Any],
    fingerprint: str,
    submitted_by: str | None,
    parent: ChildOf | None = None,
    signals: tuple[str, ...] = (),
    approvals: tuple[str, ...] = (),
    traceparent: str | None = None,
    submitted_detail: dict[str, Any] | None = None,
) -> JobRow | None:
    """Insert a job (a child of ``parent``) receiving ``signals`` (its flow's, declared),
    of which ``approvals`` are approvals, submitted under the W3C ``traceparent``.

    Its row is its ``submitted`` event too (migration 0037, read through
    ``engine_history``), with ``submitted_detail`` (what the row does not hold:
    a schedule's ``scheduled_for``) added to the detail its columns give.

    ``None``: an active job has this fingerprint.
    """
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q["job_insert_if_absent"],
            {
                "id": job_id,
                "flow": flow,
                "flow_version": flow_version,
                "params": Jsonb(params),
                "fingerprint": fingerprint,
                "submitted_by": submitted_by,
                "parent_job_id": None if parent is None else parent.job_id,
                "parent_step_run_id": None if parent is None else parent.step_run_id,
                "child_key": None if parent is None else parent.key,
                "signals": list(signals),
                "approvals": list(approvals),
                "traceparent": traceparent,
                "submitted_detail": Jsonb(submitted_detail or {}),
            },
        )
        row = cur.fetchone()
    return None if row is None else JobRow.from_row(row)


@wrap_errors
def job_select_active_by_fingerprint(
    conn: psycopg.Connection[Any], fingerprint: str
) -> JobRow | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["job_select_active_by_fingerprint"], {"fingerprint": fingerprint})
        row = cur.fetchone()
    return None if row is None else JobRow.from_row(row)


@wrap_errors
def job_select_active_matching(
    conn: psycopg.Connection[Any],
    *,
    flows: list[str],
    params: dict[str, Any],
    exclude: uuid.UUID | None = None,
) -> list[dict[str, Any]]:
    """Active jobs of ``flows`` whose parameters contain ``params`` (``exclude`` left out)."""
    return _rows.rows(
        conn,
        "job_select_active_matching",
        {"flows": flows, "params": Jsonb(params), "exclude": exclude},
    )


@wrap_errors
def job_select_info(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any] | None:
    return _rows.first(conn, "job_select_info", {"job_id": job_id})


@wrap_errors
def job_pin_if_exists(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, until: datetime, reason: str
) -> dict[str, Any] | None:
    """Keep the job past its retention until ``until`` (id, flow, status); ``None``: no such job."""
    return _rows.first(
        conn, "job_pin_if_exists", {"job_id": job_id, "until": until, "reason": reason}
    )


@wrap_errors
def job_select_by_id_range(
    conn: psycopg.Connection[Any], low: uuid.UUID, high: uuid.UUID, *, limit: int
) -> list[dict[str, Any]]:
    """At most ``limit`` jobs (id, flow, status, created_at, pruned) with ``low <= id <= high``.

    By id; live jobs and pruned ones (their summaries) alike.
    """
    return _rows.rows(conn, "job_select_by_id_range", {"low": low, "high": high, "limit": limit})


@wrap_errors
def job_select_parent(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any] | None:
    """The parent job (id, flow, status) of a child job; ``None`` for a job with none."""
    return _rows.first(conn, "job_select_parent", {"job_id": job_id})


@wrap_errors
def job_select_status(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str | None:
    row = _rows.first(conn, "job_select_status", {"job_id": job_id})
    return None if row is None else str(row["status"])


@wrap_errors
def job_select_state_locked(
    conn: psycopg.Connection[Any], job_id: uuid.UUID
) -> dict[str, Any] | None:
    """The job's status and finished_at under its row lock (``None``: no such job)."""
    return _rows.first(conn, "job_select_state_locked", {"job_id": job_id})


@wrap_errors
def job_select_version(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str | None:
    """A token that changes with the job's status, events or audit entries (``None``: no job)."""
    row = _rows.first(conn, "job_select_version", {"job_id": job_id})
    if row is None:
        return None
    return f"{row['status']}.{row['last_event'] or 0}.{row['last_audit'] or 0}.{row['folded']}"


@wrap_errors
def job_progress(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["job_progress"], {"job_id": job_id})
        return cur.fetchone()


@wrap_errors
def job_finish_if_active(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, status: str, error: str | None = None
) -> bool:
    cur = conn.execute(
        _q["job_finish_if_active"], {"job_id": job_id, "status": status, "error": error}
    )
    return cur.rowcount == 1


@wrap_errors
def job_finish_if_active_logged(
    conn: Executes,
    job_id: uuid.UUID,
    status: str,
    *,
    event: str,
    worker: str,
    error: str | None = None,
) -> None:
    """End an active job and log ``event`` for it; no result, so it can be batched."""
    conn.execute(
        _q["job_finish_if_active_logged"],
        {"job_id": job_id, "status": status, "error": error, "event": event, "worker": worker},
    )


@wrap_errors
def job_cancel_if_active(conn: psycopg.Connection[Any], job_id: uuid.UUID, reason: str) -> bool:
    """Cancel an active job, its active descendants, and their step runs.

    Job rows first (the job's, then its children's), then the step runs.
    """
    if conn.execute(_q["job_cancel_if_active"], {"job_id": job_id, "reason": reason}).rowcount:
        job_cancel_descendants(conn, job_id, f"parent cancelled: {reason}")
        step_cancel_by_job(conn, job_id)
        return True
    return False


@wrap_errors
def job_cancel_if_leased(conn: psycopg.Connection[Any], claimed: Claimed, reason: str) -> bool:
    """A step's own ``Cancel``: only while its lease is current (invariant 16)."""
    cur = conn.execute(
        _q["job_cancel_if_leased"],
        {"job_id": claimed.job_id, "id": claimed.id, "token": claimed.token, "reason": reason},
    )
    if cur.rowcount:
        job_cancel_descendants(conn, claimed.job_id, f"parent cancelled: {reason}")
        step_cancel_by_job(conn, claimed.job_id)
        return True
    return False


@wrap_errors
def job_cancel_descendants(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, reason: str
) -> list[uuid.UUID]:
    """Cancel the active children of ``job_id`` (ended or ending, its row locked), theirs, ...

    Their step runs too; ``reason`` is their error. The ids of the jobs cancelled.
    """
    rows = conn.execute(_q["job_cancel_descendants"], {"job_id": job_id, "reason": reason})
    cancelled = [column(r, "id") for r in rows.fetchall()]
    for child in cancelled:
        step_cancel_by_job(conn, child)
    return cancelled


@wrap_errors
def job_reopen_if_ended(
    conn: psycopg.Connection[Any], job_id: uuid.UUID
) -> Reopen | FingerprintTaken | None:
    """Reopen a failed or cancelled job, and the children that ended badly under it.

    The job's dead and cancelled step runs go back to pending in a new retry
    round (``retries`` + 1, their attempts counted again from 1 of the
    step's own budget: "attempt 1 of 5 (retry 2)"); so do those of its failed or cancelled children
    whose submitting step run reopens (and theirs, recursively): the step
    runs again, and ``submit_child`` under the same key finds its child
    running again. A done child stays done. A reopened step run whose
    children reopened with it waits for them (``step_wait_children_if_reopened``).
    Job rows first (the job's, then its children's), then step runs: the one
    lock order.

    ``None``: the job is not failed or cancelled. :class:`FingerprintTaken`:
    another job with its fingerprint (or a child's) is active (the unique
    index said so, in a savepoint, so the caller's transaction stays usable).
    """
    try:
        with conn.transaction():
            reopened = conn.execute(_q["job_reopen_many_if_ended"], {"ids": [job_id]}).fetchone()
            if reopened is None:
                return None
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute(_q["job_reopen_children_if_ended"], {"job_id": job_id})
                children = cur.fetchall()
    except psycopg.errors.UniqueViolation:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(_q["job_select_active_with_fingerprint_of"], {"job_id": job_id})
            row = cur.fetchone()
        return FingerprintTaken(None if row is None else row["id"])
    jobs = [job_id] + [r["id"] for r in children]
    pending: list[uuid.UUID] = []
    for job in jobs:
        pending += step_reopen_by_job(conn, job)
        dead_letter_mark_replayed_by_job(conn, job)
    waiting: list[uuid.UUID] = []
    # one statement per step run: each counts its key's holders after the one before
    for parent_run in dict.fromkeys(r["parent_step_run_id"] for r in children):
        if step_wait_children_if_reopened(conn, parent_run):
            waiting.append(parent_run)
    return Reopen(jobs, [r for r in pending if r not in waiting], waiting)


@wrap_errors
def job_lock_if_active(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> bool:
    """Lock the job row for the rest of the transaction; ``False``: it is not active (or absent).

    A statement of its own, so the statements after it see what the previous
    holder of the lock committed (a signal, a step run starting to wait).
    """
    return conn.execute(_q["job_lock_if_active"], {"job_id": job_id}).fetchone() is not None


@wrap_errors
def job_select_child(
    conn: psycopg.Connection[Any], parent_step_run_id: uuid.UUID, key: str
) -> JobRow | None:
    """The child ``key`` of the step run, whatever its status; ``None``: not submitted yet."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q["job_select_child"], {"parent_step_run_id": parent_step_run_id, "child_key": key}
        )
        row = cur.fetchone()
    return None if row is None else JobRow.from_row(row)


@wrap_errors
def job_select_children(
    conn: psycopg.Connection[Any], parent_step_run_id: uuid.UUID
) -> list[ChildRow]:
    """The children the step run submitted, oldest first."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["job_select_children"], {"parent_step_run_id": parent_step_run_id})
        return [ChildRow.from_row(r) for r in cur]


@wrap_errors
def job_lock_children(conn: psycopg.Connection[Any], parent_step_run_id: uuid.UUID) -> None:
    """Share-lock the step run's children (after its job row): a child ending now commits first."""
    conn.execute(_q["job_lock_children"], {"parent_step_run_id": parent_step_run_id})


@wrap_errors
def job_select_signals(
    conn: psycopg.Connection[Any], job_id: uuid.UUID
) -> tuple[str, int, tuple[str, ...] | None]:
    """The job's flow, its version and the signals it declared (``None``: any, an older job)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["job_select_signals"], {"job_id": job_id})
        row = cur.fetchone()
    assert row is not None, "called for a job locked before"
    signals = None if row["signals"] is None else tuple(row["signals"])
    return row["flow"], row["flow_version"], signals


@wrap_errors
def job_select_approval_parties(
    conn: psycopg.Connection[Any], job_id: uuid.UUID
) -> tuple[tuple[str, ...] | None, list[dict[str, Any]]]:
    """The job's recorded approvals (``None``: an older job) and its submitters, job first.

    Each submitter row: ``id``, ``submitted_by``, ``depth`` (0 the job, 1 its
    parent, ...).
    """
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["job_select_approval_parties"], {"job_id": job_id})
        rows = cur.fetchall()
    assert rows, "called for a job locked before"
    approvals = rows[0]["approvals"]
    return (None if approvals is None else tuple(approvals)), rows


@wrap_errors
def job_mark_rejected_if_failed(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> bool:
    """Record that a step's Reject failed the job (in that transaction); ``False``: not failed."""
    row = conn.execute(_q["job_mark_rejected_if_failed"], {"job_id": job_id}).fetchone()
    return row is not None


@wrap_errors
def job_select_rejected_in_retry(
    conn: psycopg.Connection[Any], job_id: uuid.UUID
) -> dict[str, Any] | None:
    """The job, or a failed descendant a retry would reopen, that was rejected; ``None``: none."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["job_select_rejected_in_retry"], {"job_id": job_id})
        return cur.fetchone()


@wrap_errors
def job_select_many_locked(
    conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID]
) -> list[dict[str, Any]]:
    """A bulk chunk's jobs under their row locks (id order): id, status, finished_at, and
    ``alone``: no parent, not rejected, no failed or cancelled child."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_q["job_select_many_locked"], {"ids": list(ids)}).fetchall()


@wrap_errors
def job_reopen_many_if_ended(
    conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID]
) -> list[uuid.UUID] | None:
    """:func:`job_reopen_if_ended` for jobs with nothing under them to reopen, one statement in
    a savepoint; the ids reopened, or ``None``: another job with the fingerprint of one of
    them is active (the unique index said so; nothing reopened, the transaction usable)."""
    try:
        with conn.transaction():
            rows = conn.execute(_q["job_reopen_many_if_ended"], {"ids": list(ids)}).fetchall()
    except psycopg.errors.UniqueViolation:
        return None
    return [column(r, "id") for r in rows]
