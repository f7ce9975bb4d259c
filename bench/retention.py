"""Retention (``BENCH_ONLY=retention``): retiring a day of finished work under claims.

Seeds a scratch database with set-based statements (``bench/retention.sql``):
``BENCH_RETENTION_RUNS`` finished step runs (three per job, ~2.67 events per
step run, a tag per job) whose jobs ended evenly over ``BENCH_RETENTION_DAYS``
days before the default horizon (14 days for done; one job in 20 failed,
kept 400 days), and ``BENCH_RETENTION_ACTIVE`` pending jobs for a claimer.
Then, with the engine's own statements:

1. ``engine prune --dry-run`` for the oldest day (``as_of`` = its end + 14 days);
2. a claimer thread claims step runs one per transaction (the worker's
   ``step_claim_if_available``) all along, while the prune retires that day
   in windows of ``BENCH_RETENTION_WINDOW`` batches, each followed by a
   quiet window as long (the claimer alone), then the closing VACUUM and its
   quiet twin: with and without a retirement alternate in one run, so the
   noise of this shared machine hits both. Each claim is filed under the
   windows it overlapped (one straddling a switch counts as during): claim
   p50/p99/max without, during (batches and VACUUM), and each apart; the
   ratio of the p99s; the longest retirement transaction (the most any of
   its locks was held);
3. the dry run's counts against what was removed, and the dead tuples of the
   live tables right after, counted from their pages (pgstattuple): after
   the closing VACUUM (``BENCH_RETENTION_VACUUM=1``, the default; its time
   is ``vacuum_s``), or without it (``=0``: what stays until autovacuum comes).

Reports are stored by a stub (a location per job) unless
``BENCH_RETENTION_REPORTS=1``: rendering happens before each batch's
transaction, outside what is measured here. Figures are printed, never failed.

    BENCH_RETENTION_RUNS=30000     finished step runs (10M in the issue's figure)
    BENCH_RETENTION_DAYS=10        days they span (90 in the issue's figure)
    BENCH_RETENTION_ACTIVE=3000    pending jobs the claimer may claim
    BENCH_RETENTION_BATCH=100      jobs per retirement transaction (ENGINE_PRUNE_BATCH)
    BENCH_RETENTION_WINDOW=5       retirement batches per busy window (then a quiet one)
    BENCH_RETENTION_QUIET=1.0      a quiet window's length, times the busy one's before it
    BENCH_RETENTION_BATCH_S=       ENGINE_PRUNE_BATCH_S (the engine's default when unset)
    BENCH_RETENTION_REST=          ENGINE_PRUNE_REST (the engine's default when unset)
    BENCH_RETENTION_MAX_S=3600     stop retiring after this long (part of the day: its share)
    BENCH_RETENTION_REPORTS=0      1: render and store the real reports
    BENCH_RETENTION_VACUUM=1       0: the prune without its closing VACUUM
    BENCH_RETENTION_RETIRE_DAYS=1  the oldest days retired at once (a backlog: 10, 30)
    BENCH_RETENTION_DATABASE=engine_bench_retention
    BENCH_RETENTION_STAGE=         seed: seed the database and keep it, no measure;
                                   reuse: measure on what a seed stage left (then dropped,
                                   unless BENCH_RETENTION_KEEP=1)
    BENCH_RETENTION_KEEP=0         1: keep the database after the run
    BENCH_RETENTION_WAITS=0        1: sample what the claimer's backend waits for (its
                                   wait_event in pg_stat_activity, every 5 ms) by window,
                                   and the CPU the retirement used (its thread, backends)
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from bench.common import (
    drop_database,
    emit,
    env_float,
    env_int,
    fresh_database,
    log,
    server_conninfo,
    settings_for,
)
from engine import store
from engine.config import Settings
from engine.retention import PruneReport, prune
from engine.store import db, migrations, queries

_q = queries.load(str(Path(__file__).with_name("retention.sql")))
NAME = "retention"


_SEEDED = ("engine_jobs", "engine_step_runs", "engine_events", "engine_job_tags")


def seed(conn: psycopg.Connection[Any], runs: int, days: int, active: int) -> None:
    """Fill the scratch database as a bulk load does.

    Its indexes and constraints are dropped and built again after the rows
    (a sort each, not millions of random inserts; the foreign keys and checks
    come back ``NOT VALID``: enforced from then on, the seeded rows made whole
    by construction; a check costs more than the row's insert), and no per-row
    trigger runs (``session_replication_role``).
    """
    sizes = {"jobs": max(1, runs // 3), "days": days, "active": active}
    indexes = conn.execute(_q["retention_seed_indexes"]).fetchall()
    constraints = conn.execute(_q["retention_seed_constraints"]).fetchall()
    conn.execute("SET session_replication_role = replica")
    conn.execute("SET maintenance_work_mem = '256MB'")
    conn.execute("SET statement_timeout = 0")  # one statement writes 27M rows at 10M step runs
    for c in constraints:  # foreign keys first
        conn.execute(f"ALTER TABLE {c['table']} DROP CONSTRAINT {c['name']}")
    for index in indexes:
        conn.execute(f"DROP INDEX {index['name']}")
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
    started = time.monotonic()
    for c in reversed(constraints):  # keys first, then the foreign keys to them
        valid = " NOT VALID" if c["kind"] in ("f", "c") else ""
        conn.execute(
            f"ALTER TABLE {c['table']} ADD CONSTRAINT {c['name']} {c['definition']}{valid}"
        )
    for index in indexes:
        conn.execute(index["definition"])
    log(
        f"{len(constraints)} constraints and {len(indexes)} indexes back "
        f"in {time.monotonic() - started:.1f} s"
    )
    conn.execute("RESET session_replication_role")
    conn.execute("RESET maintenance_work_mem")
    conn.execute("RESET statement_timeout")
    started = time.monotonic()
    for table in _SEEDED:
        conn.execute(f"VACUUM ANALYZE {table}")
    log(f"VACUUM ANALYZE in {time.monotonic() - started:.1f} s")


class Windows:
    """Numbered windows, each quiet (the claimer alone) or busy (retirement batches, a VACUUM).

    A claim goes with the windows it overlapped: ``without`` only if it
    started and ended in one quiet window; one that straddles a switch goes
    with the busy side, so it never flatters the quiet one.
    """

    def __init__(self) -> None:
        self.kinds = ["without"]  # the current window is the last

    @property
    def n(self) -> int:
        return len(self.kinds) - 1

    def open(self, kind: str) -> None:
        self.kinds.append(kind)

    def label(self, first: int, last: int) -> str:
        kinds = set(self.kinds[first : last + 1])
        if kinds == {"without"}:
            return "without"
        return "vacuum" if "vacuum" in kinds else "retire"


class Claimer(threading.Thread):
    """Claims step runs one per transaction, as a worker's slot does; times each claim.

    Each claim's time is filed under the windows it overlapped (``Windows``):
    with and without a retirement, measured alternately in one run.
    """

    def __init__(
        self, settings: Settings, runs: Sequence[dict[str, Any]], windows: Windows
    ) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.runs = list(reversed(runs))
        self.windows = windows
        self.stop = threading.Event()
        self.times: dict[str, list[float]] = {"without": [], "retire": [], "vacuum": []}
        self.ran_out = False
        self.connected = threading.Event()  # set once backend_pid and native_id are
        self.backend_pid = 0

    def run(self) -> None:
        with db.connect(self.settings) as conn:
            self.backend_pid = conn.info.backend_pid
            self.connected.set()  # native_id: this thread's, set by start()
            while not self.stop.is_set():
                if not self.runs:
                    self.ran_out = True
                    return
                run = self.runs.pop()
                first = self.windows.n
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
                took = time.perf_counter() - started
                self.times[self.windows.label(first, self.windows.n)].append(took)


class Waits(threading.Thread):
    """What the claims wait for, by window kind (the one current at each sample, every 5 ms).

    The claimer's backend's wait event from ``pg_stat_activity`` (``ClientRead``: waiting
    for the bench's Python; ``CPU``: none, running or ready to run), and from the
    scheduler (``/proc/PID/schedstat``: the server runs on this machine) the time the
    backend and the claimer's thread ran and waited for a CPU, per claim; and the CPU the
    retirement itself used (its Python thread, its backend, the VACUUM's), in all.
    """

    def __init__(self, settings: Settings, claimer: Claimer) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.claimer = claimer
        self.counts: dict[str, dict[str, int]] = {"without": {}, "retire": {}, "vacuum": {}}
        # (process, ran or waited) -> kind -> ns
        self.sched: dict[tuple[str, str], dict[str, int]] = {}
        self._watched: dict[str, Path] = {}  # backends opened later (the retirement's)
        self._lock = threading.Lock()

    def watch(self, name: str, pid: int) -> None:
        """Sample backend ``pid``'s schedstat under ``name`` from now on (until it exits)."""
        with self._lock:
            self._watched[name] = Path(f"/proc/{pid}/schedstat")

    def run(self) -> None:
        self.claimer.connected.wait()
        files = {
            "backend": Path(f"/proc/{self.claimer.backend_pid}/schedstat"),
            "thread": Path(f"/proc/self/task/{self.claimer.native_id}/schedstat"),
            # the retirement's own Python (the claimer's thread waits for its GIL)
            "pruner_thread": Path(f"/proc/self/task/{threading.main_thread().native_id}/schedstat"),
        }
        last = {name: _schedstat(path) for name, path in files.items()}
        with db.connect(self.settings, autocommit=True) as conn:
            while not self.claimer.stop.wait(0.005):
                kind = self.claimer.windows.kinds[-1]
                row = conn.execute(_q["retention_wait_event"], {"pid": self.claimer.backend_pid})
                found = row.fetchone()
                if found is not None:
                    event = found["event"] or "CPU"
                    counts = self.counts[kind]
                    counts[event] = counts.get(event, 0) + 1
                with self._lock:
                    for name, path in self._watched.items():
                        if name not in files:
                            files[name], last[name] = path, _schedstat(path)
                    self._watched.clear()
                for name, path in list(files.items()):
                    try:
                        now = _schedstat(path)
                    except OSError:  # a watched backend that exited: its session closed
                        now = (0, 0)
                    if now[0] < last[name][0]:  # gone (an exited process reads zeros)
                        del files[name]
                        continue
                    for what, was, then in zip(("ran", "waited"), last[name], now, strict=True):
                        by_kind = self.sched.setdefault((name, what), {})
                        by_kind[kind] = by_kind.get(kind, 0) + then - was
                    last[name] = now

    def emit(self) -> None:
        for kind, counts in self.counts.items():
            total = sum(counts.values())
            for event, n in sorted(counts.items(), key=lambda kv: -kv[1]):
                if n * 200 >= total:  # 0.5% and more
                    emit(NAME, f"claimer_waits_pct/{kind}/{event}", 100.0 * n / total, "%")
        for (name, what), by_kind in self.sched.items():
            for kind, ns in by_kind.items():
                claims = len(self.claimer.times[kind])
                if name not in ("backend", "thread"):  # the retirement's: in all
                    emit(NAME, f"{name}_{what}_s/{kind}", ns / 1e9, "s")
                elif claims:
                    metric = f"claimer_{name}_{what}_us_per_claim/{kind}"
                    emit(NAME, metric, ns / claims / 1000, "us")


def _schedstat(path: Path) -> tuple[int, int]:
    """Nanoseconds a task ran and waited on a run queue (zeros when it cannot be read)."""
    try:
        ran, waited, _ = path.read_text().split()
    except (OSError, ValueError):
        return (0, 0)
    return (int(ran), int(waited))


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


def _retire_alternating(
    settings: Settings,
    claimer: Claimer,
    as_of: datetime,
    *,
    window_batches: int,
    quiet: float,
    max_s: float,
    real_reports: bool,
    vacuum: bool,
    batches: list[int],
    waits: Waits | None,
) -> PruneReport:
    """Retire what is due at ``as_of`` in windows of ``window_batches`` batches, each followed
    by a quiet window ``quiet`` times as long (the claimer alone), then the closing VACUUM and
    its quiet twin.

    What the windows' prunes removed, added up; ``vacuum_s`` the VACUUM's time. The paced
    batch size after each window is appended to ``batches``.
    """
    windows = claimer.windows
    total: PruneReport | None = None
    cursor: tuple[datetime, uuid.UUID] | None = None
    batch: int | None = None
    begun = time.monotonic()
    # one session for every window, as a worker's pruner keeps its connection from one round
    # to the next (a session each would fork a backend and plan everything again each time)
    with db.connect(settings, autocommit=True) as pruning:
        if waits:
            waits.watch("retirement_backend", pruning.info.backend_pid)
        while not claimer.ran_out:
            windows.open("retire")
            started = time.monotonic()
            part = prune(
                settings,
                as_of=as_of,
                conn=pruning,
                max_batches=window_batches,
                after=cursor,
                write_reports=None if real_reports else _stub_reports,
                vacuum=False,
                batch=batch,  # the pace goes on from the last window
            )
            time.sleep(part.rest_s)  # the rest its last batch owes is part of the retirement
            took = time.monotonic() - started
            windows.open("without")
            total = part if total is None else _added(total, part)
            cursor, batch = part.cursor, part.batch
            batches.append(part.batch)
            claimer.stop.wait(took * quiet)
            if cursor is None:
                break
            if time.monotonic() - begun > max_s:
                log(f"stopped after {max_s:.0f} s (BENCH_RETENTION_MAX_S): part of the day retired")
                break
    if total is None:
        raise SystemExit(
            "retention: the claimer found no pending step run left to claim (each measured run "
            "claims some): seed again (BENCH_RETENTION_STAGE=seed) or raise BENCH_RETENTION_ACTIVE"
        )
    total.cursor = cursor  # None: the whole day retired
    # after the claimer ran out too: vacuum_s and the dead tuples are figures of their own
    if vacuum and total.total.jobs:
        with db.connect(settings, autocommit=True) as conn:
            if waits:
                waits.watch("vacuum_backend", conn.info.backend_pid)
            windows.open("vacuum")
            started = time.monotonic()
            vacuumed = store.job_retired_tables_vacuum(conn, settings.prune_vacuum_delay_ms)
            took = time.monotonic() - started
            windows.open("without")
        if vacuumed:
            total.vacuum_s = took
        claimer.stop.wait(took * quiet)
    return total


def _added(total: PruneReport, part: PruneReport) -> PruneReport:
    for (flow, status), counts in part.counts.items():
        total.add(flow, status, counts)
    total.skipped += part.skipped
    total.batches += part.batches
    total.longest_batch_s = max(total.longest_batch_s, part.longest_batch_s)
    return total


def run() -> None:
    runs = env_int("BENCH_RETENTION_RUNS", 30_000)
    days = max(2, env_int("BENCH_RETENTION_DAYS", 10))
    active = env_int("BENCH_RETENTION_ACTIVE", 3000)
    batch = env_int("BENCH_RETENTION_BATCH", 100)
    window_batches = max(1, env_int("BENCH_RETENTION_WINDOW", 5))
    quiet = env_float("BENCH_RETENTION_QUIET", 1.0)
    pacing: dict[str, Any] = {}
    if os.environ.get("BENCH_RETENTION_BATCH_S"):
        pacing["prune_batch_s"] = env_float("BENCH_RETENTION_BATCH_S", 0.25)
    if os.environ.get("BENCH_RETENTION_REST"):
        pacing["prune_rest"] = env_float("BENCH_RETENTION_REST", 1.0)
    real_reports = env_int("BENCH_RETENTION_REPORTS", 0) > 0
    vacuum = env_int("BENCH_RETENTION_VACUUM", 1) > 0
    # several days at once: the first prune after a backlog (retention just turned on)
    retire_days = min(days - 1, max(1, env_int("BENCH_RETENTION_RETIRE_DAYS", 1)))
    dbname = os.environ.get("BENCH_RETENTION_DATABASE", "engine_bench_retention")
    # seed once, measure later (=seed), or measure on what an earlier =seed left (=reuse)
    stage = os.environ.get("BENCH_RETENTION_STAGE", "")
    keep = stage == "seed" or os.environ.get("BENCH_RETENTION_KEEP") == "1"
    info = (
        make_conninfo(server_conninfo(), dbname=dbname)
        if stage == "reuse"
        else fresh_database(dbname=dbname)
    )
    try:
        settings = settings_for(info, prune_batch=batch, flow_modules=[], **pacing)
        log(
            f"prune_batch {settings.prune_batch}, prune_batch_s {settings.prune_batch_s}, "
            f"prune_rest {settings.prune_rest}; {window_batches} batches a window, quiet {quiet}x"
        )
        with db.connect(settings, autocommit=True) as conn:
            if stage == "reuse":  # seeded by an earlier checkout: this one's migrations too
                migrations.apply(conn, settings.migration_dirs)
            else:
                seed(conn, runs, days, active)
            if stage == "seed":
                log(f"seeded {dbname}; measure with BENCH_RETENTION_STAGE=reuse")
                return
            claimable = conn.execute(_q["retention_active_runs"]).fetchall()
            now = store.clock_select(conn)
        # the oldest day(s) become due: their end + the 14 days of the default horizon
        as_of = now - timedelta(days=days - retire_days)

        planned = prune(settings, dry_run=True, as_of=as_of)
        claimer = Claimer(settings, claimable, Windows())
        claimer.start()
        waits = Waits(settings, claimer) if env_int("BENCH_RETENTION_WAITS", 0) else None
        if waits:
            waits.start()
        started = time.monotonic()
        sizes: list[int] = []
        done = _retire_alternating(
            settings,
            claimer,
            as_of,
            window_batches=window_batches,
            quiet=quiet,
            max_s=env_float("BENCH_RETENTION_MAX_S", 3600.0),
            real_reports=real_reports,
            vacuum=vacuum,
            batches=sizes,
            waits=waits,
        )
        took = time.monotonic() - started
        claimer.stop.set()
        claimer.join()
        if waits:
            waits.join()
            waits.emit()
        if claimer.ran_out:
            log(
                f"the claimer ran out of step runs ({len(claimable)}): seed more "
                "(BENCH_RETENTION_ACTIVE; ~1 a second of retirement at 10M on 2 loaded cores)"
            )
        times = claimer.times
        p99_quiet = _quantiles("without_retirement", times["without"])
        p99_busy = _quantiles("during_retirement", times["retire"] + times["vacuum"])
        _quantiles("during_retirement_batches", times["retire"])
        _quantiles("during_vacuum", times["vacuum"])
        if p99_quiet and p99_busy:
            emit(NAME, "claim_p99_during_over_without", p99_busy / p99_quiet, "x")

        total = done.total
        emit(NAME, "retired_jobs", total.jobs, "jobs")
        emit(NAME, "retired_step_runs", total.step_runs, "rows")
        emit(NAME, "retired_events", total.events, "rows")
        emit(NAME, "windows", claimer.windows.n, "windows")
        emit(NAME, "retire_day_with_quiet_windows_s", took, "s")
        emit(NAME, "batches", done.batches, "transactions")
        if sizes:
            emit(NAME, "paced_batch_median", statistics.median(sizes), "jobs")
            emit(NAME, "paced_batch_min", min(sizes), "jobs")
        emit(NAME, "longest_batch_lock_s", done.longest_batch_s, "s")
        if done.vacuum_s is not None:
            emit(NAME, "vacuum_s", done.vacuum_s, "s")
        if done.cursor is None:
            emit(NAME, "dry_run_equals_removed", int(planned.counts == done.counts), "bool")
        else:  # stopped short: what was retired against what the dry run said of the day
            emit(NAME, "retired_share_of_the_day", total.jobs / max(1, planned.total.jobs), "x")
        emit(NAME, "skipped", done.skipped, "jobs")
        log(
            f"retired {retire_days} day(s) of {days}: {total.jobs} jobs, "
            f"{total.step_runs} step runs, {total.events} events in {done.batches} batches "
            f"({claimer.windows.n} windows, {took:.1f} s with the quiet ones), longest "
            f"{done.longest_batch_s * 1000:.1f} ms; dry run equal: {planned.counts == done.counts}"
        )
        with db.connect(settings, autocommit=True) as conn:
            _dead_tuples(conn)
    finally:
        if not keep:
            drop_database(dbname)
