"""The roster: each worker's row in ``engine_workers``, so the fleet is visible from SQL.

A worker writes its row when it starts (its id, host, pid, transport, slots
and the ``flow:version`` pairs its claims accept), renews ``last_seen_at`` by
the database clock at every sweep (the beat), and marks it stopped when it
shuts down cleanly. A worker is *live* while its row is running and was seen
within ``ENGINE_WORKER_LIVE_S``; one that crashed simply stops being seen.
What is live is read by ``engine workers``, ``engine flows show`` and the
sweeper's orphaned-version alert (:mod:`engine.worker.roster`); the console's
Workers page reads the last hour's, dead and stopped ones too.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.store import db
from engine.store.workers import LiveWorker, VersionInFlight

__all__ = ["Roster", "VersionsReport", "live_workers", "recent_workers", "versions_in_flight"]

log = logging.getLogger(__name__)


class Roster:
    """One worker's row: :meth:`register` at start, :meth:`beat` every sweep, :meth:`stop`."""

    def __init__(self, settings: Settings, worker_id: str, runnable: Sequence[str]) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.runnable = sorted(runnable)

    def _upsert(self, conn: psycopg.Connection[Any], *, starting: bool) -> None:
        store.worker_upsert_seen(
            conn,
            worker_id=self.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            transport=self.settings.transport,
            concurrency=self.settings.concurrency,
            runnable=self.runnable,
            starting=starting,
        )

    def register(self, conn: psycopg.Connection[Any]) -> None:
        """Write this worker's row as just started (an earlier run's row under its id is reused)."""
        self._upsert(conn, starting=True)
        log.info("worker %s registered with %s", self.worker_id, ", ".join(self.runnable) or "-")

    def beat(self, conn: psycopg.Connection[Any]) -> None:
        """Renew ``last_seen_at`` (and the row itself, should it have gone)."""
        self._upsert(conn, starting=False)

    def stop(self, conn: psycopg.Connection[Any]) -> bool:
        """Mark this worker stopped; ``False`` when its row was not running."""
        return store.worker_stop_if_running(conn, self.worker_id)


def live_workers(settings: Settings) -> list[LiveWorker]:
    """The workers live now (seen within ``worker_live_s``), by id."""
    with db.connect(settings, autocommit=True) as conn:
        return store.worker_select_live(conn, live_s=settings.worker_live_s)


def recent_workers(settings: Settings, since_s: float = 3600.0) -> list[dict[str, Any]]:
    """Workers running or seen within ``since_s``, each with its ``state``: live, dead, stopped.

    Dead: running, but unseen for ``worker_live_s``.
    """
    with db.connect(settings, autocommit=True) as conn:
        return store.worker_select_recent(conn, live_s=settings.worker_live_s, since_s=since_s)


@dataclass(frozen=True)
class VersionsReport:
    """The versions of one flow (or all) with active jobs or live workers."""

    versions: list[VersionInFlight]
    live_s: float

    def orphaned(self) -> list[VersionInFlight]:
        """Versions active jobs need that no live worker has loaded."""
        return [v for v in self.versions if v.active_jobs and not v.workers]

    def as_json(self) -> list[dict[str, Any]]:
        return [
            {**asdict(v), "orphaned": bool(v.active_jobs and not v.workers)} for v in self.versions
        ]


def versions_in_flight(settings: Settings, flow: str | None = None) -> VersionsReport:
    """The versions in flight of ``flow`` (every flow when ``None``)."""
    with db.connect(settings, autocommit=True) as conn:
        rows = store.version_select_in_flight(conn, live_s=settings.worker_live_s, flow=flow)
    return VersionsReport(rows, settings.worker_live_s)
