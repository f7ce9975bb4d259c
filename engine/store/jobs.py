"""Jobs, their step runs and the event log: inserts and lookups."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from engine.store.errors import wrap_errors
from engine.store.queries import load
from engine.store.rows import JobRow, NewStepRun

_q = load("jobs")


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
) -> JobRow | None:
    """Insert a job; ``None`` when an active job with this fingerprint already exists."""
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


def _runs_params(job_id: uuid.UUID, runs: Sequence[NewStepRun]) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "ids": [r.id for r in runs],
        "steps": [r.step for r in runs],
        "fanout_keys": [r.fanout_key for r in runs],
        "fingerprints": [r.fingerprint for r in runs],
        "max_attempts": [r.max_attempts for r in runs],
        "items": [None if r.item is None else Jsonb(r.item) for r in runs],
    }


@wrap_errors
def step_run_insert_many_with_outbox(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, runs: Sequence[NewStepRun]
) -> list[int]:
    """Insert the step runs not inserted yet, each with an outbox row; the outbox ids."""
    if not runs:
        return []
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_run_insert_many_with_outbox"], _runs_params(job_id, runs))
        return [row["id"] for row in cur.fetchall()]


@wrap_errors
def step_run_insert_many_announced(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, runs: Sequence[NewStepRun]
) -> None:
    """Insert the step runs not inserted yet, their outbox rows already published.

    For a transport that sends their messages in this same transaction; no
    result is read, so it can be pipelined.
    """
    if runs:
        conn.execute(_q["step_run_insert_many_announced"], _runs_params(job_id, runs))


@wrap_errors
def job_select_status(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["job_select_status"], {"job_id": job_id})
        row = cur.fetchone()
    return None if row is None else str(row["status"])


@wrap_errors
def job_progress(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["job_progress"], {"job_id": job_id})
        return cur.fetchone()
