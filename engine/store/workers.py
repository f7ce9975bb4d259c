"""Workers: who runs, since when, last seen when (database clock), with which flow versions.

A worker upserts its row when it starts, renews ``last_seen_at`` at every
beat and marks it stopped on a clean shutdown; nobody deletes rows, so a gone
worker's row still says which versions it had and when it was last seen. The
versions in flight (active jobs by flow version beside the live workers that
have each loaded) are read here too, from both tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from engine.store.errors import wrap_errors
from engine.store.queries import load

__all__ = [
    "LiveWorker",
    "VersionInFlight",
    "version_select_in_flight",
    "worker_select_live",
    "worker_select_recent",
    "worker_stop_if_running",
    "worker_upsert_seen",
]

_q = load("workers")


@dataclass(frozen=True)
class LiveWorker:
    """A live worker as ``engine workers`` shows it."""

    id: str
    host: str
    pid: int
    transport: str
    concurrency: int
    runnable: list[str]
    started_at: datetime
    last_seen_at: datetime
    seen_s_ago: float


@dataclass(frozen=True)
class VersionInFlight:
    """One flow version: the active jobs pinned to it and the live workers that have it."""

    flow: str
    version: int
    active_jobs: int
    oldest_age_s: float | None  # the oldest active job's age; None without active jobs
    workers: list[str]  # live workers with it loaded
    last_loaded_at: datetime | None  # when any worker that had it was last seen
    last_loaded_s_ago: float | None


@wrap_errors
def worker_upsert_seen(
    conn: psycopg.Connection[Any],
    *,
    worker_id: str,
    host: str,
    pid: int,
    transport: str,
    concurrency: int,
    runnable: Sequence[str],
    starting: bool,
) -> datetime:
    """Register (``starting``) or renew the worker's row; its ``last_seen_at``."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q["worker_upsert_seen"],
            {
                "id": worker_id,
                "host": host,
                "pid": pid,
                "transport": transport,
                "concurrency": concurrency,
                "runnable": list(runnable),
                "starting": starting,
            },
        )
        row = cur.fetchone()
    assert row is not None, "an upsert returns its row"
    return row["last_seen_at"]  # type: ignore[no-any-return]


@wrap_errors
def worker_stop_if_running(conn: psycopg.Connection[Any], worker_id: str) -> bool:
    """Mark the worker stopped; ``False`` when it was not running under that id."""
    return conn.execute(_q["worker_stop_if_running"], {"id": worker_id}).rowcount == 1


@wrap_errors
def worker_select_live(conn: psycopg.Connection[Any], *, live_s: float) -> list[LiveWorker]:
    """Workers running and seen within ``live_s`` seconds, by id."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["worker_select_live"], {"live_s": live_s})
        return [LiveWorker(**row) for row in cur.fetchall()]


@wrap_errors
def worker_select_recent(
    conn: psycopg.Connection[Any], *, live_s: float, since_s: float = 3600.0
) -> list[dict[str, Any]]:
    """Workers running or seen within ``since_s``: live, dead (unseen for ``live_s``), stopped."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["worker_select_recent"], {"live_s": live_s, "since_s": since_s})
        return cur.fetchall()


@wrap_errors
def version_select_in_flight(
    conn: psycopg.Connection[Any], *, live_s: float, flow: str | None = None
) -> list[VersionInFlight]:
    """Every flow version (of ``flow``, or all) that active jobs need or live workers have."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["version_select_in_flight"], {"live_s": live_s, "flow": flow})
        return [VersionInFlight(**row) for row in cur.fetchall()]
