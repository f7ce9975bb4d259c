"""Prune: what would go (exact counts by flow and end state), and retiring it.

Both walk the same candidates: top-level jobs that ended before their
horizon at ``as_of`` (the database clock unless given), unpinned, oldest
end first, a page at a time by a keyset on ``(finished_at, id)``
(``engine_jobs_finished_roots``), so neither scans a live table whole.

A retirement, per batch of ``Settings.prune_batch`` families:

1. their HTML reports are stored where reports go (outside any transaction;
   a job whose report cannot be stored keeps its rows: no evidence, no prune);
2. one short transaction runs ``engine_retire_jobs`` (migration 0031): the
   job rows ``FOR UPDATE SKIP LOCKED``, re-checked (ended, past the horizon,
   not pinned, the whole family ended), a summary row each, then their rows
   deleted by key. A job some session holds (a retry, a cancel, a late
   checkpoint) is skipped this time, not waited for; so is a batch whose
   step rows a session holds past ``lock_timeout`` (Contention).

A retirement paces itself, so that it holds no lock long and leaves the
database to the claims most of the time, whatever the load on the server:

- each batch is sized from the last one's transaction time (the first is of
  one family, unless a caller goes on with an earlier walk's size): one that took
  longer than ``Settings.prune_batch_s`` makes the next proportionally
  smaller (down to one family), one that took under half of it makes the
  next twice as big (up to ``Settings.prune_batch``);
- between two retirement transactions it rests ``Settings.prune_rest``
  times as long as the last one took (0: back to back).

A walk that retired rows and reached its end VACUUMs the live tables it
deleted from, outside any transaction, when its role owns them
(``vacuum=True``, the default; the worker's role does not, and relies on
the tables' autovacuum settings of 0031). VACUUM's lock is one no claim or
write waits for; it leaves the dead tuples of a retired day under 1% at
once instead of whenever autovacuum comes. It goes at autovacuum's pace
(``Settings.prune_vacuum_delay_ms``, 2 ms): at full speed its scans of the
indexes took the disk and CPU from the claims (claim p99 6.2 ms during it
against 1.0 ms without, 1M step runs; 1.6 ms paced, in 11 s instead of 1.8).

A dry run counts, with the same family rule, what each page would remove;
with nothing changing in between, a prune at the same ``as_of`` removes
exactly that (the tests hold it to it).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import Contention
from engine.flow.registry import Registry
from engine.retention.policy import RetentionPolicy
from engine.store import db

__all__ = ["PruneCounts", "PruneReport", "prune"]

log = logging.getLogger(__name__)

# stores the reports of these jobs; returns where each went (a job left out keeps its rows)
ReportWriter = Callable[[Settings, Sequence[uuid.UUID]], dict[uuid.UUID, str]]


@dataclass
class PruneCounts:
    """Rows of one flow and end state: jobs, their step runs, events and tags."""

    jobs: int = 0
    step_runs: int = 0
    events: int = 0
    tags: int = 0

    def add(self, other: PruneCounts) -> None:
        self.jobs += other.jobs
        self.step_runs += other.step_runs
        self.events += other.events
        self.tags += other.tags


@dataclass
class PruneReport:
    """What a prune removed (or a dry run would remove), by (flow, end state)."""

    as_of: datetime
    dry_run: bool
    policy: RetentionPolicy
    counts: dict[tuple[str, str], PruneCounts] = field(default_factory=dict)
    skipped: int = 0  # families due but kept this time (held, changed, pinned, no report)
    batches: int = 0
    batch: int = 0  # the families the next retirement transaction takes (paced; see above)
    rest_s: float = 0.0  # the rest owed before it (a round that stopped short: the caller's)
    longest_batch_s: float = 0.0  # the longest retirement transaction: the most any lock was held
    vacuum_s: float | None = None  # how long the closing VACUUM took; None: none ran
    # where the walk stopped at max_batches (finished_at, id); None: it reached the end
    cursor: tuple[datetime, uuid.UUID] | None = None

    def add(self, flow: str, status: str, counts: PruneCounts) -> None:
        self.counts.setdefault((flow, status), PruneCounts()).add(counts)

    @property
    def total(self) -> PruneCounts:
        total = PruneCounts()
        for c in self.counts.values():
            total.add(c)
        return total

    def as_json(self) -> dict[str, Any]:
        """One JSON object: ``by_flow`` rows (flow, status and the counts), totals, as_of."""
        return {
            "dry_run": self.dry_run,
            "as_of": self.as_of.isoformat(),
            "by_flow": [
                {"flow": f, "status": s, **vars(c)} for (f, s), c in sorted(self.counts.items())
            ],
            "total": vars(self.total),
            "skipped": self.skipped,
            "batches": self.batches,
            "batch": self.batch,
            "longest_batch_s": round(self.longest_batch_s, 4),
            "vacuum_s": None if self.vacuum_s is None else round(self.vacuum_s, 3),
            "policy": self.policy.as_json(),
        }


def prune(
    settings: Settings,
    *,
    registry: Registry | None = None,
    dry_run: bool = False,
    as_of: datetime | None = None,
    conn: psycopg.Connection[Any] | None = None,
    max_batches: int | None = None,
    after: tuple[datetime, uuid.UUID] | None = None,
    write_reports: ReportWriter | None = None,
    on_batch: Callable[[], None] | None = None,
    vacuum: bool = True,
    batch: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    rest: Callable[[float], object] = time.sleep,
) -> PruneReport:
    """Retire the finished jobs past their retention (``dry_run``: only count them).

    ``registry``'s flows have their ``retention`` declarations applied (a
    flow it does not load keeps the defaults). ``as_of`` defaults to the database's clock.
    ``conn`` (autocommit) is used when given (the sweeper's), else one is
    opened. ``max_batches`` bounds one call (the sweeper's round); the next
    call goes on from the report's ``cursor`` when given it as ``after``.
    ``on_batch`` is called inside each retirement transaction, its rows
    deleted and locked but not committed (a test's barrier). ``vacuum``:
    VACUUM the live tables once a walk that retired rows reached its end
    (when this role owns them; ``conn`` must be in autocommit). ``batch``:
    the families the first retirement transaction takes (a round goes on
    with the last round's ``report.batch``; default 1, doubling while quick);
    ``clock`` times each transaction and ``rest`` waits between two (the
    pruner's stop event waits, so that a stop cuts a rest short).
    """
    policy = RetentionPolicy.of(settings, registry.flows() if registry is not None else ())

    def reports(settings: Settings, jobs: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        # imported here: rendering needs the worker extra (jinja2, SQLModel)
        from engine.reports.render import render_job_reports

        return render_job_reports(settings, jobs, registry=registry)

    writer = write_reports or reports
    bounds = (max_batches, after)
    pace = _Pace(settings, batch, clock, rest)
    if conn is None:
        with db.connect(settings, autocommit=True) as own:
            report = _prune(settings, own, policy, dry_run, as_of, bounds, writer, on_batch, pace)
            if vacuum:
                _vacuum(settings, own, report)
            return report
    report = _prune(settings, conn, policy, dry_run, as_of, bounds, writer, on_batch, pace)
    if vacuum:
        _vacuum(settings, conn, report)
    return report


class _Pace:
    """How big the next retirement transaction is, and how long to rest before it."""

    def __init__(
        self,
        settings: Settings,
        batch: int | None,
        clock: Callable[[], float],
        rest: Callable[[float], object],
    ) -> None:
        self.ceiling = settings.prune_batch
        self.target_s = settings.prune_batch_s
        self.rest_ratio = settings.prune_rest
        # a walk starts at one family and doubles while quick: its first transaction is
        # never a whole PRUNE_BATCH on a server too loaded to do it in PRUNE_BATCH_S
        self.size = min(self.ceiling, max(1, batch or 1))
        self.clock = clock
        self.rest = rest
        self.owed_s = 0.0  # the rest due before the next retirement transaction

    def before(self) -> None:
        if self.owed_s > 0:
            self.rest(self.owed_s)
            self.owed_s = 0.0

    def after(self, families: int, took_s: float) -> None:
        """A retirement transaction of ``families`` took ``took_s``: size the next, owe a rest."""
        self.owed_s = took_s * self.rest_ratio
        if took_s > self.target_s:
            self.size = max(1, min(self.size, int(families * self.target_s / took_s)))
        elif took_s < self.target_s / 2 and families >= self.size:
            self.size = min(self.ceiling, self.size * 2)


def _vacuum(settings: Settings, conn: psycopg.Connection[Any], report: PruneReport) -> None:
    """VACUUM what a finished walk retired rows from (a walk stopped short: at its end), at
    ``Settings.prune_vacuum_delay_ms``'s pace."""
    if report.dry_run or report.cursor is not None or not report.total.jobs:
        return
    started = time.monotonic()
    if store.job_retired_tables_vacuum(conn, settings.prune_vacuum_delay_ms):
        report.vacuum_s = time.monotonic() - started
    else:
        log.debug("prune: this role does not own the live tables; autovacuum cleans them")


def _prune(
    settings: Settings,
    conn: psycopg.Connection[Any],
    policy: RetentionPolicy,
    dry_run: bool,
    as_of: datetime | None,
    bounds: tuple[int | None, tuple[datetime, uuid.UUID] | None],
    writer: ReportWriter,
    on_batch: Callable[[], None] | None,
    pace: _Pace,
) -> PruneReport:
    when = as_of or store.clock_select(conn)
    report = PruneReport(when, dry_run, policy, batch=pace.size)
    max_batches, after = bounds
    while True:
        if max_batches is not None and report.batches >= max_batches:
            report.cursor = after  # stopped short: the next call goes on from here
            break
        roots = store.job_retire_select_roots(
            conn,
            as_of=when,
            policy=policy.flows,
            defaults=policy.defaults,
            # a dry run holds no lock: its pages stay whole
            limit=settings.prune_batch if dry_run else pace.size,
            after=after,
        )
        if not roots:
            break
        after = (roots[-1]["finished_at"], roots[-1]["id"])
        report.batches += 1
        ids = [r["id"] for r in roots]
        if dry_run:
            for row in store.job_retire_count_many(conn, ids, when):
                report.add(row["flow"], row["status"], _counts(row))
            continue
        pace.before()  # rest owed by the last transaction, only if another one follows
        _retire(settings, conn, report, roots, writer, on_batch, pace)
        report.batch = pace.size
    report.rest_s = pace.owed_s
    return report


def _retire(
    settings: Settings,
    conn: psycopg.Connection[Any],
    report: PruneReport,
    roots: list[dict[str, Any]],
    writer: ReportWriter,
    on_batch: Callable[[], None] | None,
    pace: _Pace,
) -> None:
    family = store.job_select_family_many(conn, [r["id"] for r in roots])
    stored = writer(settings, family)
    # a family with a job whose report was not stored keeps all its rows
    missing = set(family) - set(stored)
    keep = {r["id"] for r in roots if missing and _has_any(conn, r["id"], missing)}
    chosen = [r for r in roots if r["id"] not in keep]
    report.skipped += len(keep)
    if not chosen:
        return
    started = pace.clock()
    try:
        with conn.transaction():
            gone = store.job_retire_many(
                conn, [r["id"] for r in chosen], [r["horizon"] for r in chosen], stored
            )
            if on_batch is not None:
                on_batch()  # the batch's locks held, not committed yet
    except Contention as exc:
        log.warning(
            "prune: a batch of %d job(s) waited too long and was skipped: %s", len(chosen), exc
        )
        report.skipped += len(chosen)
        pace.after(len(chosen), pace.clock() - started)
        return
    took = pace.clock() - started
    pace.after(len(chosen), took)
    report.longest_batch_s = max(report.longest_batch_s, took)
    retired = {g["job_id"] for g in gone}
    report.skipped += sum(1 for r in chosen if r["id"] not in retired)
    for g in gone:
        report.add(g["flow"], g["status"], PruneCounts(1, g["step_runs"], g["events"], g["tags"]))


def _has_any(conn: psycopg.Connection[Any], root: uuid.UUID, missing: set[uuid.UUID]) -> bool:
    return bool(missing & set(store.job_select_family_many(conn, [root])))


def _counts(row: dict[str, Any]) -> PruneCounts:
    return PruneCounts(row["jobs"], row["step_runs"], row["events"], row["tags"])
