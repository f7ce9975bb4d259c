"""Retention (``BENCH_ONLY=retention``): retiring a day of finished work under claims.

Seeds a scratch database with set-based statements (``bench/retention.sql``):
``BENCH_RETENTION_RUNS`` finished step runs (three per job, ~2.67 events per
step run, a tag per job) whose jobs ended evenly over ``BENCH_RETENTION_DAYS``
days before the default horizon (14 days for done; one job in 20 failed,
kept 400 days), and ``BENCH_RETENTION_ACTIVE`` pending jobs for a claimer.
Then, with the engine's own statements:

1. a claimer thread claims step runs one per transaction (the worker's
   ``step_claim_if_available``) with nothing else running: claim p50/p99/max;
2. ``engine prune --dry-run`` for the oldest day (``as_of`` = its end + 14 days);
3. the same claimer while ``prune`` retires that day: claim p50/p99/max
   during the retirement, the longest retirement transaction (the most any
   of its locks was held), the ratio of the p99s;
4. the dry run's counts against what was removed, and the dead tuples of the
   live tables right after, counted from their pages (pgstattuple): after
   the prune's closing VACUUM (``BENCH_RETENTION_VACUUM=1``, the default;
   its time is ``vacuum_s``, and the claims during it are in step 3's
   figures), or without it (``=0``: what stays until autovacuum comes).

Reports are stored by a stub (a location per job) unless
``BENCH_RETENTION_REPORTS=1``: rendering happens before each batch's
transaction, outside what is measured here. Figures are printed, never failed.

    BENCH_RETENTION_RUNS=30000     finished step runs (10M in the issue's figure)
    BENCH_RETENTION_DAYS=10        days they span (90 in the issue's figure)
    BENCH_RETENTION_ACTIVE=3000    pending jobs the claimer may claim
    BENCH_RETENTION_BATCH=100      jobs per retirement transaction (ENGINE_PRUNE_BATCH)
    BENCH_RETENTION_REPORTS=0      1: render and store the real reports
    BENCH_RETENTION_VACUUM=1       0: the prune without its closing VACUUM
    BENCH_RETENTION_RETIRE_DAYS=1  the oldest days retired at once (a backlog: 10, 30)
    BENCH_RETENTION_DATABASE=engine_bench_retention
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.common import drop_database, emit, env_int, fresh_database, log, settings_for
from engine import store
from engine.config import Settings
from engine.retention import prune
from engine.store import db, queries

_q = queries.load(str(Path(__file__).with_name("retention.sql")))
NAME = "retention"


def _seed(conn: psycopg.Connection[Any], runs: int, days: int, active: int) -> None:
    sizes = {"jobs": max(1, runs // 3), "days": days, "active": active}
    for name in (
        "retention_seed_jobs",
        "retention_seed_step_runs",
        "retention_seed_events",
        "retention_seed_tags",
        "retention_seed_active",
    ):
        started = time.monotonic()
        count = conn.execute(_q[name], sizes).rowcount
        log(f"{name}: {count} rows in {time.monotonic() - started:.1f} s")
    for table in ("engine_jobs", "engine_step_runs", "engine_events", "engine_job_tags"):
        conn.execute(f"VACUUM ANALYZE {table}")


class Claimer(threading.Thread):
    """Claims step runs one per transaction, as a worker's slot does; times each claim."""

    def __init__(self, settings: Settings, runs: Sequence[dict[str, Any]]) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.runs = list(runs)
        self.stop = threading.Event()
        self.times: list[float] = []

    def run(self) -> None:
        with db.connect(self.settings) as conn:
            while self.runs and not self.stop.is_set():
                run = self.runs.pop()
                started = time.perf_counter()
                with conn.transaction():
                    store.step_claim_if_available(
                        conn,
                        step_run_id=run["id"],
                        job_id=run["job_id"],
                        worker="bench/0",
                        lease_s=60,
                        runnable=["bench:1"],
                    )
                self.times.append(time.perf_counter() - started)


def _quantiles(name: str, times: list[float]) -> float | None:
    if len(times) < 2:
        log(f"{name}: too few claims ({len(times)})")
        return None
    q = statistics.quantiles(times, n=100)
    emit(NAME, f"claim_p50_ms/{name}", q[49] * 1000, "ms")
    emit(NAME, f"claim_p99_ms/{name}", q[98] * 1000, "ms")
    emit(NAME, f"claim_max_ms/{name}", max(times) * 1000, "ms")
    emit(NAME, f"claims/{name}", len(times), "claims")
    return q[98]


def _dead_tuples(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")  # the scratch database's
    for row in conn.execute(_q["retention_dead_tuples"]).fetchall():
        total = row["live"] + row["dead"]
        share = 100.0 * row["dead"] / total if total else 0.0
        emit(NAME, f"dead_tuples_pct/{row['relname']}", share, "%")


def _stub_reports(settings: Settings, jobs: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    return {job: f"bench://runs/{job}.html" for job in jobs}


def run() -> None:
    runs = env_int("BENCH_RETENTION_RUNS", 30_000)
    days = max(2, env_int("BENCH_RETENTION_DAYS", 10))
    active = env_int("BENCH_RETENTION_ACTIVE", 3000)
    batch = env_int("BENCH_RETENTION_BATCH", 100)
    real_reports = env_int("BENCH_RETENTION_REPORTS", 0) > 0
    vacuum = env_int("BENCH_RETENTION_VACUUM", 1) > 0
    # several days at once: the first prune after a backlog (retention just turned on)
    retire_days = min(days - 1, max(1, env_int("BENCH_RETENTION_RETIRE_DAYS", 1)))
    dbname = os.environ.get("BENCH_RETENTION_DATABASE", "engine_bench_retention")
    info = fresh_database(dbname=dbname)
    try:
        settings = settings_for(info, prune_batch=batch, flow_modules=[])
        with db.connect(settings, autocommit=True) as conn:
            _seed(conn, runs, days, active)
            claimable = conn.execute(_q["retention_active_runs"]).fetchall()
            now = store.clock_select(conn)
        half = len(claimable) // 2
        # the oldest day(s) become due: their end + the 14 days of the default horizon
        as_of = now - timedelta(days=days - retire_days)

        quiet = Claimer(settings, claimable[:half])
        quiet.start()
        quiet.join()
        p99_quiet = _quantiles("without_retirement", quiet.times)

        planned = prune(settings, dry_run=True, as_of=as_of)
        busy = Claimer(settings, claimable[half:])
        busy.start()
        started = time.monotonic()
        done = prune(
            settings,
            as_of=as_of,
            write_reports=None if real_reports else _stub_reports,
            vacuum=vacuum,
        )
        took = time.monotonic() - started
        busy.stop.set()
        busy.join()
        p99_busy = _quantiles("during_retirement", busy.times)
        if p99_quiet and p99_busy:
            emit(NAME, "claim_p99_during_over_without", p99_busy / p99_quiet, "x")

        total = done.total
        emit(NAME, "retired_jobs", total.jobs, "jobs")
        emit(NAME, "retired_step_runs", total.step_runs, "rows")
        emit(NAME, "retired_events", total.events, "rows")
        emit(NAME, "retire_day_s", took, "s")
        emit(NAME, "batches", done.batches, "transactions")
        emit(NAME, "longest_batch_lock_s", done.longest_batch_s, "s")
        if done.vacuum_s is not None:
            emit(NAME, "vacuum_s", done.vacuum_s, "s")
        emit(NAME, "dry_run_equals_removed", int(planned.counts == done.counts), "bool")
        emit(NAME, "skipped", done.skipped, "jobs")
        log(
            f"retired {retire_days} day(s) of {days}: {total.jobs} jobs, "
            f"{total.step_runs} step runs, {total.events} events in {took:.2f} s, "
            f"{done.batches} batches, longest "
            f"{done.longest_batch_s * 1000:.1f} ms; dry run equal: {planned.counts == done.counts}"
        )
        with db.connect(settings, autocommit=True) as conn:
            _dead_tuples(conn)
    finally:
        if os.environ.get("BENCH_RETENTION_KEEP") != "1":
            drop_database(dbname)
