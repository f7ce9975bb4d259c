"""A bulk action's dry run: what a filter finds now, written as a frozen preview.

Jobs are found by the runs search's statement (:func:`engine.store.job_search`,
with a bulk action's error text and time window), dead letters by
``dead_letter_select_for_preview``; either way each item keeps the state
:mod:`engine.jobs.bulk.applying` compares under its lock.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import BadInput
from engine.infra.json_fields import json_fields
from engine.jobs.audit import operator
from engine.jobs.bulk.filtering import DEAD_LETTER_ACTIONS, BulkFilter
from engine.jobs.search import RunQuery, search_filters
from engine.store import db

__all__ = [
    "DEFAULT_TTL_S",
    "MAX_ITEMS",
    "BulkItem",
    "BulkPreview",
    "job_check",
    "preview",
    "show",
]

MAX_ITEMS = 100_000
"""Items a preview may hold at most; a filter that finds more is refused (narrow it)."""

DEFAULT_TTL_S = 900.0
"""How long a preview may be applied, by default (``ENGINE_BULK_PREVIEW_TTL_S`` in the CLI)."""

_SAMPLE = 10


@dataclass(frozen=True)
class BulkItem:
    """One previewed item: a job (retry, cancel) or a dead letter (replay, purge).

    ``state`` is what people read (a job's state, ``waiting`` derived; a dead
    letter's ``open`` or ``replayed``); ``check`` what :func:`apply` compares
    under the lock (a job's stored status and end; a dead letter's state and
    its job's status).
    """

    id: str
    flow: str
    state: str
    check: str

    def as_row(self) -> list[str]:
        return [self.id, self.flow, self.state, self.check]


@dataclass(frozen=True)
class BulkPreview:
    """A preview as written: its id, the set's size, counts by (flow, state), a sample."""

    id: uuid.UUID
    action: str
    filter: dict[str, Any]
    total: int
    counts: list[dict[str, Any]]  # {"flow", "state", "n"}, most first
    sample: list[BulkItem]
    created_by: str
    expires_at: Any
    applied_at: Any = None
    applied_by: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, rename={"id": "preview_id"}),
            "sample": [{"id": i.id, "flow": i.flow, "state": i.state} for i in self.sample],
        }


def preview(
    settings: Settings,
    action: str,
    where: BulkFilter,
    *,
    actor: str | None = None,
    ttl_s: float = DEFAULT_TTL_S,
) -> BulkPreview:
    """Find what ``where`` names for ``action`` now and write it as a preview (nothing else)."""
    where.check(action)
    if not 0 < ttl_s <= 7 * 86400:
        raise BadInput(f"bad preview lifetime {ttl_s!r} s: more than 0, at most 7 days (604800)")
    who = (actor or "").strip() or operator()
    with _connect(settings) as conn, conn.transaction():
        items = (
            _dead_letters(conn, action, where)
            if action in DEAD_LETTER_ACTIONS
            else _jobs(conn, action, where)
        )
        if len(items) > MAX_ITEMS:
            raise BadInput(
                f"the filter finds more than {MAX_ITEMS} items; narrow it (flow, state, "
                "time window, tag or parameter)"
            )
        counted = Counter((i.flow, i.state) for i in items)
        counts = [
            {"flow": f, "state": s, "n": n}
            for (f, s), n in sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        row = store.bulk_preview_insert(
            conn,
            preview_id=uuid.uuid4(),
            action=action,
            filter=where.as_json(),
            items=[i.as_row() for i in items],
            counts=counts,
            created_by=who,
            ttl_s=ttl_s,
        )
    return BulkPreview(
        row["id"],
        action,
        where.as_json(),
        len(items),
        counts,
        items[:_SAMPLE],
        who,
        row["expires_at"],
    )


def show(settings: Settings, preview_id: uuid.UUID) -> BulkPreview:
    """A preview as written (:class:`BadInput` when there is none with that id)."""
    with _connect(settings) as conn:
        row = store.bulk_preview_select_one(conn, preview_id)
    if row is None:
        raise BadInput(f"no bulk preview {preview_id}; `--dry-run` writes one and prints its id")
    items = [BulkItem(*r) for r in row["items"][:_SAMPLE]]
    return BulkPreview(
        row["id"],
        row["action"],
        row["filter"],
        row["total"],
        row["counts"],
        items,
        row["created_by"],
        row["expires_at"],
        row["applied_at"],
        row["applied_by"],
    )


def _jobs(conn: psycopg.Connection[Any], action: str, where: BulkFilter) -> list[BulkItem]:
    query = RunQuery(
        flow=where.flow,
        status=where.state,
        params=tuple(where.params),
        tags=tuple(where.tags),
        limit=1,
    )
    filters = search_filters(query, conn)
    if where.state is None:  # every state the action takes
        filters["statuses"] = (
            ["failed", "cancelled"] if action == "retry" else ["pending", "running"]
        )
        filters["waiting"] = None
    filters.update(error_text=where.error, since=where.since, until=where.until)
    rows = store.job_search(conn, filters, limit=MAX_ITEMS + 1)
    return [_job_item(r) for r in rows]


def _job_item(r: dict[str, Any]) -> BulkItem:
    waiting = r["status"] in ("pending", "running") and r["waits"]
    return BulkItem(
        str(r["id"]),
        r["flow"],
        "waiting" if waiting else r["status"],
        job_check(r["status"], r["finished_at"]),
    )


def job_check(status: str, finished_at: Any) -> str:
    """What a job is compared by under its lock: its stored status and when it ended."""
    return f"{status}|{'' if finished_at is None else finished_at.isoformat()}"


def _dead_letters(conn: psycopg.Connection[Any], action: str, where: BulkFilter) -> list[BulkItem]:
    pairs = [(f"param.{n}", v) for n, v in where.params] + list(where.tags)
    # a replay takes open dead letters only; a purge, closed ones of either state
    replayed = where.state == "replayed" if where.state else (False if action == "replay" else None)
    rows = store.dead_letter_select_for_preview(
        conn,
        flow=where.flow,
        replayed=replayed,
        purgeable=action == "purge",
        error_text=where.error,
        since=where.since,
        until=where.until,
        tags=pairs,
        limit=MAX_ITEMS + 1,
    )
    return [
        BulkItem(str(r["id"]), r["flow"], r["state"], f"{r['state']}|{r['job_status'] or ''}")
        for r in rows
    ]


def _connect(settings: Settings) -> psycopg.Connection[Any]:
    """An operator command's connection: its shorter lock wait, as :mod:`engine.jobs.admin`'s."""
    return db.connect(settings, lock_timeout_s=settings.admin_lock_timeout_s)
