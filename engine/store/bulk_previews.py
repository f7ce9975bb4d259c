"""Bulk previews: the frozen set a bulk action's dry run found (migration 0032).

Written once by :func:`bulk_preview_insert`; an apply locks it in each of its
transactions (:func:`bulk_preview_lock`), records each item's outcome with the
action (:func:`bulk_outcome_insert_many`), and marks it applied once every item
has one (:func:`bulk_preview_mark_applied_if_complete`). What is in a set and how it
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

__all__ = [
    "bulk_outcome_counts",
    "bulk_outcome_insert_many",
    "bulk_outcome_select_recorded",
    "bulk_preview_insert",
    "bulk_preview_lock",
    "bulk_preview_mark_applied_if_complete",
    "bulk_preview_select_one",
]

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
def bulk_preview_lock(
    conn: psycopg.Connection[Any], preview_id: uuid.UUID
) -> dict[str, Any] | None:
    """Lock the preview's row for the transaction; its state (``begun``: an outcome recorded)."""
    return _q.first(conn, "bulk_preview_lock", {"id": preview_id})


@wrap_errors
def bulk_outcome_select_recorded(
    conn: psycopg.Connection[Any], preview_id: uuid.UUID, items: list[str]
) -> set[str]:
    """Those of ``items`` that have an outcome already."""
    rows = _q.rows(conn, "bulk_outcome_select_recorded", {"id": preview_id, "items": items})
    return {str(r["item"]) for r in rows}


@wrap_errors
def bulk_outcome_insert_many(
    conn: psycopg.Connection[Any],
    preview_id: uuid.UUID,
    outcomes: list[tuple[str, str, str | None]],
) -> None:
    """Record ``(item, outcome, why)`` rows in the caller's transaction (the action's)."""
    if not outcomes:
        return
    items, kinds, whys = (list(c) for c in zip(*outcomes, strict=True))
    _q.run(
        conn,
        "bulk_outcome_insert_many",
        {"id": preview_id, "items": items, "outcomes": kinds, "whys": whys},
    )


@wrap_errors
def bulk_outcome_counts(conn: psycopg.Connection[Any], preview_id: uuid.UUID) -> dict[str, int]:
    """A preview's outcomes by kind (``done``, ``skipped``, ``refused``)."""
    rows = _q.rows(conn, "bulk_outcome_counts", {"id": preview_id})
    return {str(r["outcome"]): int(r["n"]) for r in rows}


@wrap_errors
def bulk_preview_mark_applied_if_complete(
    conn: psycopg.Connection[Any], preview_id: uuid.UUID, applied_by: str
) -> bool:
    """Mark the preview applied when every item has an outcome; whether it did now."""
    row = _q.first(
        conn, "bulk_preview_mark_applied_if_complete", {"id": preview_id, "applied_by": applied_by}
    )
    return row is not None


@wrap_errors
def bulk_preview_select_one(
    conn: psycopg.Connection[Any], preview_id: uuid.UUID
) -> dict[str, Any] | None:
    """One preview (``expired`` judged by the database clock), or ``None``."""
    return _q.first(conn, "bulk_preview_select_one", {"id": preview_id})
