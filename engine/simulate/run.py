"""One simulation: scratch database, real workers, the planned faults, the oracles.

:func:`run_simulation` makes its own scratch database on the configured
server (``engine_sim_<seed>_<pid>_<hex>``), migrates it, starts real
``engine worker`` processes on the flow of :mod:`engine.simulate.flow` with
short leases, submits the jobs and, until every job ended (or the timeout),
injects the faults of the seed's :class:`~engine.simulate.plan.Plan`:

- kills: a step run's first attempt has its worker SIGKILLed part-way through
  the step; a replacement worker starts at once, and the dead worker's lease
  must expire before another worker reclaims the step run;
- duplicates: a claimed step run is announced again (one or two copies,
  through the transport), and a job is submitted a second time while active.

Then the workers are stopped, the oracles checked and the replay rendered.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import psycopg
from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from engine.config import Settings
from engine.flow.registry import Registry
from engine.jobs.submit import submit
from engine.simulate.fleet import Fleet
from engine.simulate.flow import SimParams, step_seconds
from engine.simulate.oracles import check_oracles
from engine.simulate.plan import Plan, SimOptions
from engine.simulate.record import Fault, Oracle, SimRecord
from engine.simulate.replay import render_replay
from engine.store import db, migrations
from engine.store.leases import worker_of
from engine.store.named import NamedQueries
from engine.store.queries import load
from engine.store.read import sqlalchemy_engine
from engine.transports.message import StepMessage
from engine.transports.postgres import PostgresTransport

__all__ = ["FLOW_MODULE", "run_simulation"]

_sql = NamedQueries(load(str(Path(__file__).with_name("simulate.sql"))))

FLOW_MODULE = "engine.simulate.flow"
_TICK_S = 0.05
_PROGRESS_EVERY_S = 1.0
# Short, but the worker's own rule must hold: heartbeat < lease and < visibility.
_WORKER_ENV = {
    "ENGINE_LEASE_S": "2",
    "ENGINE_HEARTBEAT_S": "0.5",
    "ENGINE_VISIBILITY_S": "4",
    "ENGINE_SWEEP_INTERVAL_S": "0.5",
    "ENGINE_POLL_WAIT_S": "0.5",
    "ENGINE_REPUBLISH_AFTER_S": "5",
    "ENGINE_RETRY_BASE_DELAY_S": "0.2",
    "ENGINE_MAX_ATTEMPTS": "5",
    "ENGINE_SHUTDOWN_GRACE_S": "3",
    "ENGINE_REPORT_ON_END": "false",
    "ENGINE_TRANSPORT": "postgres",
    "ENGINE_FLOW_MODULES": FLOW_MODULE,
}


def _say(message: str) -> None:
    click.echo(f"[simulate] {message}", err=True)


def _scratch(base: str, seed: int) -> tuple[str, str]:
    """Create and migrate the scratch database; its name and conninfo."""
    name = f"engine_sim_{seed}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(base, autocommit=True) as conn:
        _sql.run(conn, "sim_database_create", database=name)
    info = make_conninfo(base, dbname=name)
    with psycopg.connect(info, autocommit=True) as conn:
        migrations.apply(conn, Settings().migration_dirs)
        _sql.run(conn, "sim_effects_create")
    return name, info


def _drop(base: str, name: str) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        _sql.run(conn, "sim_database_drop", database=name)


class _Run:
    """One simulation on a migrated scratch database."""

    def __init__(self, options: SimOptions, info: str, out_dir: Path, logdir: Path) -> None:
        self.options = options
        self.settings = Settings(
            database_url=SecretStr(info), flow_modules=[FLOW_MODULE], transport="postgres"
        )
        self.conn = db.connect(self.settings, autocommit=True)
        self.plan = Plan.draw(options)
        self.faults: list[Fault] = []
        self.workers = Fleet(
            info, _WORKER_ENV, options.concurrency, self._clock, self.faults, logdir
        )
        self.out_dir = out_dir
        self.killed: set[uuid.UUID] = set()
        self.duplicated: set[uuid.UUID] = set()
        self.resubmitted: set[int] = set()
        self.late_jobs = 0  # a resubmit that raced its job's end legitimately made a new job

    def _clock(self) -> datetime:
        at: datetime = _sql.one(self.conn, "sim_clock")["at"]
        return at

    def run(self) -> tuple[list[Oracle], bool]:
        registry = Registry.load([FLOW_MODULE])
        transport = PostgresTransport(self.settings)
        job_no: dict[uuid.UUID, int] = {}
        timed_out = False
        try:
            for _ in range(self.options.workers):
                self.workers.spawn("started")
            for n in range(self.options.jobs):
                job = submit(
                    "simulate",
                    SimParams(n=n, seed=self.options.seed),
                    settings=self.settings,
                    registry=registry,
                    publisher=transport,
                    submitted_by="engine simulate",
                )
                job_no[job.job_id] = n
            timed_out = not self._loop(job_no, registry, transport)
        finally:
            transport.close()
            self.workers.stop()
        self.faults.append(Fault(at=self._clock(), kind="stop", detail="workers stopped (SIGTERM)"))
        expected_jobs = self.options.jobs + self.late_jobs
        return check_oracles(self.conn, expected_jobs=expected_jobs, faults=self.faults), timed_out

    def _loop(self, job_no: dict[uuid.UUID, int], registry: Registry, transport: Any) -> bool:
        """Inject the planned faults until every job ended; False on timeout."""
        deadline = time.monotonic() + self.options.timeout_s
        started = last_progress = time.monotonic()
        while time.monotonic() < deadline:
            progress = _sql.one(self.conn, "sim_progress")
            if time.monotonic() - last_progress >= _PROGRESS_EVERY_S:
                last_progress = time.monotonic()
                _say(
                    f"{last_progress - started:5.1f} s  jobs {progress['done']}/{progress['jobs']} "
                    f"done, steps {progress['steps_done']}/{progress['steps']}, "
                    f"kills {len(self.killed)}, duplicates {len(self.duplicated)}"
                )
            if progress["active"] == 0:
                return True
            self._kill_planned(job_no)
            self._duplicate_planned(job_no, transport)
            self._resubmit_planned(registry, transport)
            time.sleep(_TICK_S)
        _say(f"timed out after {self.options.timeout_s:g} s; stopping the workers")
        return False

    def _kill_planned(self, job_no: dict[uuid.UUID, int]) -> None:
        for row in _sql.rows(self.conn, "sim_running_select"):
            key = (job_no.get(row["job_id"], -1), row["step"])
            proc = worker_of(str(row["lease_owner"]))
            if key not in self.plan.kill_at or row["id"] in self.killed or row["attempts"] != 1:
                continue
            if not self.workers.alive(proc) or row["running_s"] < self._kill_after(key):
                continue
            self.killed.add(row["id"])
            self.workers.kill(
                proc, f"SIGKILL {proc} mid-step: job #{key[0]} {key[1]} attempt {row['attempts']}"
            )
            self.workers.spawn(f"started, replacing {proc}")

    def _kill_after(self, key: tuple[int, str]) -> float:
        params = SimParams(n=key[0], seed=self.options.seed)
        return self.plan.kill_at[key] * step_seconds(params, key[1])

    def _duplicate_planned(self, job_no: dict[uuid.UUID, int], transport: Any) -> None:
        for row in _sql.rows(self.conn, "sim_delivered_select"):
            key = (job_no.get(row["job_id"], -1), row["step"])
            copies = self.plan.dup_copies.get(key, 0)
            if not copies or row["id"] in self.duplicated:
                continue
            self.duplicated.add(row["id"])
            body = StepMessage(job_id=row["job_id"], step_run_id=row["id"]).encode()
            for _ in range(copies):
                transport.send_raw(body)
            self.faults.append(
                Fault(
                    at=self._clock(),
                    kind="duplicate",
                    step_run_id=row["id"],
                    detail=f"{copies} duplicate message(s) for job #{key[0]} {key[1]} "
                    f"(step run {row['status']})",
                )
            )

    def _resubmit_planned(self, registry: Registry, transport: Any) -> None:
        for row in _sql.rows(self.conn, "sim_active_jobs_select"):
            n = int(row["params"].get("n", -1))
            if n not in self.plan.resubmit or n in self.resubmitted:
                continue
            self.resubmitted.add(n)
            again = submit(
                "simulate",
                row["params"],
                settings=self.settings,
                registry=registry,
                publisher=transport,
                submitted_by="engine simulate (duplicate)",
            )
            if again.created:
                self.late_jobs += 1
            outcome = "a new job (the first had just ended)" if again.created else "the active job"
            self.faults.append(
                Fault(
                    at=self._clock(), kind="resubmit", detail=f"job #{n} submitted again: {outcome}"
                )
            )

    def record(self, oracles: list[Oracle], database: str, timed_out: bool) -> SimRecord:
        return SimRecord(
            seed=self.options.seed,
            workers=self.options.workers,
            concurrency=self.options.concurrency,
            jobs=self.options.jobs,
            kill_rate=self.options.kill_rate,
            dup_rate=self.options.dup_rate,
            lease_s=float(_WORKER_ENV["ENGINE_LEASE_S"]),
            database=database,
            faults=self.faults,
            oracles=oracles,
            timed_out=timed_out,
        )

    def close(self) -> None:
        self.conn.close()


def run_simulation(options: SimOptions, settings: Settings) -> tuple[SimRecord, Path]:
    """Run one simulation end to end; the record (oracles included) and the page's path."""
    base = db.conninfo(settings)
    name, info = _scratch(base, options.seed)
    _say(f"scratch database {name}; {options.workers} worker(s), {options.jobs} job(s)")
    sim: _Run | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="engine-sim-") as logdir:
            sim = _Run(options, info, settings.reports_dir, Path(logdir))
            oracles, timed_out = sim.run()
            record = sim.record(oracles, name, timed_out)
            if not all(o.passed for o in oracles) or timed_out:
                _say("worker logs (last lines):\n" + sim.workers.tail())
            engine = sqlalchemy_engine(sim.settings)
            try:
                path = render_replay(engine, record, settings.reports_dir)
            finally:
                engine.dispose()
            return record, path
    finally:
        if sim is not None:
            sim.workers.stop(grace_s=1.0)  # idempotent; a crash above must not leave children
            sim.close()
        if options.keep_db:
            _say(f"kept the scratch database {name}")
        else:
            _drop(base, name)
