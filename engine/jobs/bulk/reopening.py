"""A bulk retry or replay set-based: a chunk of items locked, re-checked and acted on at once.

The single retry (:func:`engine.jobs.admin.retry_in`) runs about a dozen
statements per job; 10,000 of them took minutes. Here a chunk's job rows are
locked in one statement (``job_select_many_locked``, id order; a replay's dead
letters after them, the lock order), each item compared with the state it was
previewed in, and the unchanged ones reopened in a few statements: the jobs,
their step runs, their open dead letters closed, one outbox announcement, one
``replayed`` event and one audit entry per job (each an ``INSERT ... SELECT``).

Only a job the single retry would reopen alone and refuse nothing of goes
this way (``alone``: no parent, not rejected, no failed or cancelled child,
so :func:`engine.jobs.admin.retry_in`'s refusals and its reaching down to
children cannot apply), and a replay of a step's dead letter whose job is
not already in the chunk. Everything else is handed back for the single
action, item by item, as are a chunk's items when one of them has its
fingerprint active elsewhere (the unique index refuses the statement): so a
job refused alone is refused in bulk, by the same code.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

from engine import store
from engine.jobs.bulk.previews import BulkItem, job_check
from engine.store import jsonb
from engine.store.status import AuditSource, EventKind
from engine.transports.announce import Announced, announce
from engine.transports.base import Transport

__all__ = ["SET_BASED", "Chunk", "reopen_chunk"]

SET_BASED = frozenset({"retry", "replay"})
"""The actions whose chunks are acted on set-based; the others item by item."""


@dataclass
class Chunk:
    """What a chunk's set-based pass did: each item's outcome (item, ``done`` or ``skipped``,
    why), the items left for the single action, and what to publish after the commit."""

    outcomes: list[tuple[BulkItem, str, str | None]] = field(default_factory=list)
    single: list[BulkItem] = field(default_factory=list)
    announced: Announced | None = None


def reopen_chunk(
    conn: psycopg.Connection[Any],
    transport: Transport,
    action: str,
    items: list[BulkItem],
    *,
    who: str,
    source: AuditSource,
    reason: str,
    preview_id: uuid.UUID,
) -> Chunk:
    """Lock, re-check and reopen ``items`` in the caller's transaction; see the module."""
    if action not in SET_BASED or not items:
        return Chunk(single=list(items))
    chunk = Chunk()
    find = _jobs if action == "retry" else _dead_letters
    acting = find(conn, items, chunk)
    if not acting:
        return chunk
    jobs = [job for _, job in acting]
    if store.job_reopen_many_if_ended(conn, jobs) is None:  # a fingerprint active elsewhere
        chunk.single += [item for item, _ in acting]
        return chunk
    runs = store.step_reopen_by_jobs(conn, jobs)
    store.dead_letter_mark_replayed_by_jobs(conn, jobs)
    chunk.announced = announce(
        conn, transport, outbox_ids=store.outbox_insert_many(conn, [run for run, _ in runs])
    )
    per_job = Counter(job for _, job in runs)
    store.event_insert_many(
        conn,
        EventKind.REPLAYED,
        jobs,
        [{"step_runs": per_job[job], "children": []} for job in jobs],
    )
    extra = {"source": "step"} if action == "replay" else {}
    details = [
        {**extra, "step_runs": per_job[job], "children": [], "preview": str(preview_id)}
        for job in jobs
    ]
    store.audit_insert_many(
        conn,
        actor=jsonb.checked(who, "audit actor"),
        source=AuditSource(source).value,
        action=action,
        target_kind="job" if action == "retry" else "dead_letter",
        target_ids=[item.id for item, _ in acting],
        job_ids=jobs,
        reason=jsonb.checked(reason, "audit reason"),
        details=details,
    )
    chunk.outcomes += [(item, "done", None) for item, _ in acting]
    return chunk


def _jobs(
    conn: psycopg.Connection[Any], items: list[BulkItem], chunk: Chunk
) -> list[tuple[BulkItem, uuid.UUID]]:
    rows = {
        r["id"]: r for r in store.job_select_many_locked(conn, [uuid.UUID(i.id) for i in items])
    }
    acting = []
    for item in items:
        row = rows.get(uuid.UUID(item.id))
        if row is None:
            chunk.outcomes.append((item, "skipped", "no longer exists"))
        elif job_check(row["status"], row["finished_at"]) != item.check:
            chunk.outcomes.append(
                (item, "skipped", f"changed since the preview: now {row['status']}")
            )
        elif not row["alone"]:
            chunk.single.append(item)
        else:
            acting.append((item, row["id"]))
    return acting


def _dead_letters(
    conn: psycopg.Connection[Any], items: list[BulkItem], chunk: Chunk
) -> list[tuple[BulkItem, uuid.UUID]]:
    letters = [int(i.id) for i in items]
    jobs = {
        r["id"]: r
        for r in store.job_select_many_locked(conn, store.dead_letter_select_jobs_of(conn, letters))
    }
    rows = {r["id"]: r for r in store.dead_letter_select_many_locked(conn, letters)}
    acting: list[tuple[BulkItem, uuid.UUID]] = []
    taken: set[uuid.UUID] = set()
    for item in items:
        state, _, job_status = item.check.partition("|")
        row = rows.get(int(item.id))
        job = None if row is None or row["job_id"] is None else jobs.get(row["job_id"])
        if row is None:
            chunk.outcomes.append((item, "skipped", "no longer exists (purged)"))
        elif row["job_id"] is not None and (job["status"] if job else "") != job_status:
            now = job["status"] if job else "-"
            chunk.outcomes.append(
                (item, "skipped", f"its job changed since the preview: now {now}")
            )
        elif ("open" if row["replayed_at"] is None else "replayed") != state:
            chunk.outcomes.append((item, "skipped", "changed since the preview: now replayed"))
        elif row["source"] != "step" or job is None or not job["alone"] or job["id"] in taken:
            chunk.single.append(item)  # a message, a job with more to it, or its job's second
        else:
            taken.add(job["id"])
            acting.append((item, job["id"]))
    return acting
