"""Versions in flight: which flow versions active jobs need, and who can run them.

A job is pinned to the version of its flow it was submitted with, and a
worker claims only the ``flow:version`` pairs it has loaded; a step run of
another version is left, at no attempt, for a worker that has it (a rolling
deploy runs old and new workers side by side). From the jobs and the
roster (:mod:`engine.roster`) this module tells, per version, how many
active jobs need it, how old the oldest is, and which live workers have it
loaded (``engine flows show NAME``).

A version that active jobs need and that no live worker has loaded for
``ENGINE_VERSION_ORPHAN_ALERT_S`` raises one alert per *orphan episode*,
recorded by the sweeper and delivered like a dead letter's. The episode is
keyed on the last time any worker that had the version was seen, which
stays put while the version is orphaned, so every sweeper of every worker
finds the same key and a unique index lets one alert through.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from engine import db, store
from engine.config import Settings
from engine.store.workers import VersionInFlight

__all__ = ["VersionsReport", "versions_in_flight"]


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
