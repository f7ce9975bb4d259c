"""The audit trail: one append-only row per operator action, in the action's transaction.

Who, when (database clock), from where, what, on what, why. The table's
trigger refuses UPDATE, DELETE and TRUNCATE (migration 0019); nothing here
changes a row once written.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from engine.store.errors import wrap_errors
from engine.store.queries import load

__all__ = ["audit_insert", "audit_select_recent"]

_q = load("audit")


@wrap_errors
def audit_insert(
    conn: psycopg.Connection[Any],
    *,
    actor: str,
    source: str,
    action: str,
    target_kind: str,
    target_id: str | None,
    job_id: uuid.UUID | None = None,
    reason: str | None = None,
    detail: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The entry as written (its id and database time filled in)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q["audit_insert"],
            {
                "actor": actor,
                "source": source,
                "action": action,
                "target_kind": target_kind,
                "target_id": target_id,
                "job_id": job_id,
                "reason": reason,
                "detail": Jsonb(detail or {}),
            },
        )
        row = cur.fetchone()
    assert row is not None, "INSERT ... RETURNING returns its row"
    return row


@wrap_errors
def audit_select_recent(
    conn: psycopg.Connection[Any], *, job_id: uuid.UUID | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """Entries newest first: all, or those concerning ``job_id``."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["audit_select_recent"], {"job_id": job_id, "limit": limit})
        return cur.fetchall()
