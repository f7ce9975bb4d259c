"""The pruner: every worker retires finished jobs past their retention, off its receive path.

A thread of its own (as the schedule firer, :mod:`engine.schedules.firer`),
so rendering and storing a batch's reports, its retirement transaction and
the closing VACUUM never hold up the worker's main loop, which receives and
sweeps. Every ``prune_interval_s`` (0: never; the first time one interval
after the start, so a fleet's restarts do not all prune at once) a prune
walks the finished jobs due, ``_PRUNE_BATCHES`` batches a round
(:mod:`engine.retention`), going on from where it stopped each round until
none is left, and stopping between rounds when the worker stops. Safe with
several workers: each batch takes its job rows ``SKIP LOCKED``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from engine.config import Settings
from engine.errors import Contention
from engine.flow.registry import Registry
from engine.infra.background import BackgroundLoop
from engine.infra.outage import Outage
from engine.retention.prune import ReportWriter, prune

__all__ = ["Pruner"]

log = logging.getLogger(__name__)

# batches retired per round; a round ends between two, where a stop is seen
_PRUNE_BATCHES = 2


class Pruner(BackgroundLoop):
    """Retires finished jobs on ``prune_interval_s``; :meth:`start` runs it in a thread."""

    name = "pruner"

    def __init__(
        self,
        settings: Settings,
        registry: Registry | None = None,
        *,
        connect: Callable[[], psycopg.Connection[Any]] | None = None,
        stop: threading.Event | None = None,
        outage: Outage | None = None,
        clock: Callable[[], float] = time.monotonic,
        write_reports: ReportWriter | None = None,
    ) -> None:
        super().__init__(
            settings, connect=connect or (lambda: _connect(settings)), stop=stop, outage=outage
        )
        self.registry = registry
        self.clock = clock
        self.write_reports = write_reports  # None: the reports rendered and stored as configured
        self.next_prune = clock() + settings.prune_interval_s
        self.cursor: tuple[Any, Any] | None = None  # a due prune's place, between rounds
        self.batch: int | None = None  # its paced batch size, between rounds
        self.rest_s = 0.0  # the rest its last batch owes before the next round

    @property
    def enabled(self) -> bool:
        return self.settings.prune_interval_s > 0

    def round(self, conn: psycopg.Connection[Any]) -> int:
        """One round of a due prune (none when not due); how many jobs it retired."""
        if not self.enabled or self.clock() < self.next_prune:
            return 0
        report = prune(
            self.settings,
            registry=self.registry,
            conn=conn,
            max_batches=_PRUNE_BATCHES,
            after=self.cursor,
            write_reports=self.write_reports,
            batch=self.batch,
            rest=self.stop.wait,  # a stop cuts the rest between two batches short
        )
        self.cursor = report.cursor
        self.batch = report.batch
        self.rest_s = report.rest_s if report.cursor is not None else 0.0
        if report.cursor is None:  # done: the next prune one interval from now
            self.next_prune = self.clock() + self.settings.prune_interval_s
        total = report.total
        if total.jobs or report.skipped:
            log.info(
                "prune: %d finished job(s) retired (%d step runs, %d events), %d kept this time",
                total.jobs,
                total.step_runs,
                total.events,
                report.skipped,
            )
        return total.jobs

    # -- the thread ----------------------------------------------------------------------

    def start(self) -> None:
        """Run :meth:`run` in a daemon thread until :attr:`stop` is set (not at all if off)."""
        if self.enabled:
            super().start()

    def _interval_s(self) -> float:
        return self.settings.sweep_interval_s

    def _turn(self) -> float:
        """Prune rounds while one is due (resting as the last batch asks), else wait until it is."""
        if self.clock() < self.next_prune:
            return min(1.0, self._interval_s(), max(0.0, self.next_prune - self.clock()))
        self.round(self._connection())
        return self.rest_s

    def _round_failed(self, exc: Exception) -> None:
        if isinstance(exc, Contention):
            log.warning("prune round not done (%s)", str(exc).strip()[:300])
        else:
            log.exception("prune round failed")


def _connect(settings: Settings) -> psycopg.Connection[Any]:
    from engine.store import db

    return db.connect(settings)
