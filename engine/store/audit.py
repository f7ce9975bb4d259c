"""The audit trail: one append-only row per operator action, in the action's transaction.

Who, when (database clock), from where, what, on what, why. The table's
trigger refuses UPDATE, DELETE and TRUNCATE (migration 0019); nothing here
changes a row once written. At commit the database chains each entry to the
one before (migration 0026: its position ``seq``, ``prev_hash`` and ``hash``);
the ``audit_select_chain_*`` reads give :func:`engine.jobs.audit.verify_chain`
what it recomputes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine.store.errors import wrap_errors
from engine.store.named import NamedQueries
from engine.store.queries import load

__all__ = [
    "audit_insert",
    "audit_insert_many",
    "audit_select_chain_after",
    "audit_select_head",
    "audit_select_recent",
    "audit_select_unchained",
]

_q = NamedQueries(load("audit"))


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
    params = {
        "actor": actor,
        "source": source,
        "action": action,
        "target_kind": target_kind,
        "target_id": target_id,
        "job_id": job_id,
        "reason": reason,
        "detail": Jsonb(detail or {}),
    }
    return _q.one(conn, "audit_insert", params)  # INSERT ... RETURNING returns its row


@wrap_errors
def audit_select_recent(
    conn: psycopg.Connection[Any],
    *,
    job_id: uuid.UUID | None = None,
    actor: str | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Entries newest first: all, or those matching every filter given."""
    params = {
        "job_id": job_id,
        "actor": actor,
        "action": action,
        "since": since,
        "until": until,
        "limit": limit,
    }
    return _q.rows(conn, "audit_select_recent", params)


@wrap_errors
def audit_select_chain_after(
    conn: psycopg.Connection[Any], *, after: int, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` chained entries past position ``after``, in chain order:
    ``seq``, ``id``, ``prev_hash``, ``hash`` and the ``canonical`` text their hash covers."""
    return _q.rows(conn, "audit_select_chain_after", {"after": after, "limit": limit})


@wrap_errors
def audit_select_unchained(conn: psycopg.Connection[Any], *, limit: int) -> list[int]:
    """Ids of committed entries without a position (written with the chain's trigger off)."""
    return [r["id"] for r in _q.rows(conn, "audit_select_unchained", {"limit": limit})]


@wrap_errors
def audit_select_head(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
    """The chain's head (``seq``, ``hash``, ``last_id``), ``None`` if its row is gone."""
    return _q.first(conn, "audit_select_head")


@wrap_errors
def audit_insert_many(
    conn: psycopg.Connection[Any],
    *,
    actor: str,
    source: str,
    action: str,
    target_kind: str,
    target_ids: Sequence[str],
    job_ids: Sequence[uuid.UUID | None],
    reason: str | None,
    details: Sequence[dict[str, Any]],
) -> None:
    """:func:`audit_insert` for many targets of one action, one statement."""
    _q.run(
        conn,
        "audit_insert_many",
        {
            "actor": actor,
            "source": source,
            "action": action,
            "target_kind": target_kind,
            "target_ids": list(target_ids),
            "job_ids": list(job_ids),
            "reason": reason,
            "details": [Jsonb(d) for d in details],
        },
    )
