"""Tags: searchable keys a job carries, ``(name, value)``.

A step gives its job tags (``ctx.tag("sku", "A-1")``) in the step's fenced
transaction, so a tag exists exactly when the step's checkpoint committed
(invariant 5); submit gives a job the tags of its flow's searchable
parameters (``param.NAME``, ``Flow(searchable=...)``) in the submit's
transaction. A value the job carries already is ignored. The engine gives
no tag a meaning but one: ``approval.barred`` holds the names a job barred
from approving it (``ctx.bar_approvers``, read by
:mod:`engine.waits.approvals`); :mod:`engine.jobs.search` finds jobs by any.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from engine.store.errors import wrap_errors
from engine.store.queries import load

__all__ = ["tag_insert_many", "tag_select_by_job"]

_q = load("tags")


@wrap_errors
def tag_insert_many(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, name: str, values: Sequence[str]
) -> int:
    """Tag the job with each of ``values`` under ``name`` in one statement; the tags added."""
    return conn.execute(
        _q["tag_insert_many"], {"job_id": job_id, "name": name, "values": list(values)}
    ).rowcount


@wrap_errors
def tag_select_by_job(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[tuple[str, str]]:
    """The job's tags as (name, value), by name then value."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_q["tag_select_by_job"], {"job_id": job_id}).fetchall()
    return [(r["name"], r["value"]) for r in rows]
