"""Bulk previews: the frozen set a bulk action's dry run found (migration 0032).

Written once by :func:`bulk_preview_insert`; applied at most once, and never
after it expired, by the guarded :func:`bulk_preview_claim_if_open` (zero
rows: :func:`bulk_preview_select_one` says why). What is in a set and how it
is acted on is :mod:`engine.jobs.bulk`'s.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine.store.errors import wrap_errors
from engine.store.named import NamedQueries
from engine.store.queries import load

__all__ = ["bulk_preview_claim_if_open", "bulk_preview_insert", "bulk_preview_select_one"]

_q = NamedQueries(load("bulk_previews"))


@wrap_errors
def bulk_preview_insert(
    conn: psycopg.Connection[Any],
    *,
    preview_id: uuid.UUID,
    action: str,
    filter: dict[str, Any],
    items: list[list[Any]],
    counts: list[dict[str, Any]],
    created_by: str,
    ttl_s: float,
) -> dict[str, Any]:
    """Write a preview; its id, created_at and expires_at (database clock)."""
    return _q.one(
        conn,
        "bulk_preview_insert",
        {
            "id": preview_id,
            "action": action,
            "filter": Jsonb(filter),
            "items": Jsonb(items),
            "counts": Jsonb(counts),
            "total": len(items),
            "created_by": created_by,
            "ttl_s": ttl_s,
        },
    )


@wrap_errors
def bulk_preview_claim_if_open(
    conn: psycopg.Connection[Any], preview_id: uuid.UUID, applied_by: str
) -> dict[str, Any] | None:
    """Mark the preview applied when it is neither applied nor expired; its row, or ``None``."""
    return _q.first(
        conn, "bulk_preview_claim_if_open", {"id": preview_id, "applied_by": applied_by}
    )


@wrap_errors
def bulk_preview_select_one(
    conn: psycopg.Connection[Any], preview_id: uuid.UUID
) -> dict[str, Any] | None:
    """One preview (``expired`` judged by the database clock), or ``None``."""
    return _q.first(conn, "bulk_preview_select_one", {"id": preview_id})
