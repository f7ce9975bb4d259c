"""``engine simulate``: real workers, injected faults, oracles, an animated replay.

The simulator makes its own scratch database on the configured server
(``engine_sim_<seed>_<pid>_<hex>``), migrates it, starts ``--workers`` real
``python -m engine worker`` processes on the small flow of
:mod:`engine.simulate_flow` with short leases, submits ``--jobs`` jobs and
injects faults from a plan drawn from ``--seed``:

- kills: each step run is, with probability ``--kill-rate``, the target of a
  SIGKILL to the worker running its first attempt, part-way through the step;
  a replacement worker starts at once and the dead worker's lease must expire
  before another worker reclaims the step run;
- duplicates: each step run is, with probability ``--dup-rate``, announced
  again (one or two copies, through the transport) once it was claimed, and
  each job is, with that probability, submitted a second time while active.

Drawing the plan per step run (not per tick) keeps the faults of a seed the
same from run to run, whatever the machine's speed. When every job ended (or
``--timeout`` passed) the workers are stopped, the oracles of RELIABILITY.md
are checked by SQL and printed, and the replay page is rendered to
``ENGINE_REPORTS_DIR/simulate-<seed>.html``. Exit 0 when every oracle holds,
1 otherwise, 2 on bad input, 3 when the database is unreachable.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from engine import db
from engine.config import Settings, mask_url
from engine.errors import EngineError
from engine.messages import StepMessage
from engine.registry import Registry
from engine.simulate_flow import STEPS, SimParams, step_seconds
from engine.simulate_replay import Fault, Oracle, SimRecord, oracle_lines, render_replay
from engine.store import migrations
from engine.store.queries import load
from engine.store.read import sqlalchemy_engine
from engine.submit import submit
from engine.transports.postgres import PostgresTransport

__all__ = ["SimOptions", "simulate"]

_q = load(str(Path(__file__).with_suffix(".sql")))

FLOW_MODULE = "engine.simulate_flow"
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


@dataclass(frozen=True)
class SimOptions:
    """The command's options."""

    workers: int = 2
    jobs: int = 8
    kill_rate: float = 0.3
    dup_rate: float = 0.5
    seed: int = 1
    concurrency: int = 1
    timeout_s: float = 120.0
    keep_db: bool = False


@dataclass
class _Plan:
    """The faults of a seed, by (job number, step)."""

    kill_at: dict[tuple[int, str], float]  # fraction of the step's duration
    dup_copies: dict[tuple[int, str], int]
    resubmit: set[int]

    @classmethod
    def draw(cls, options: SimOptions) -> _Plan:
        rng = random.Random(options.seed)
        kill_at: dict[tuple[int, str], float] = {}
        dup_copies: dict[tuple[int, str], int] = {}
        resubmit: set[int] = set()
        for n in range(options.jobs):
            for step in STEPS:
                # draw every number whatever the rates, so one rate does not reshuffle the other
                kill, where, dup, copies = (
                    rng.random(),
                    rng.uniform(0.2, 0.7),
                    rng.random(),
                    rng.randint(1, 2),
                )
                if kill < options.kill_rate:
                    kill_at[(n, step)] = where
                if dup < options.dup_rate:
                    dup_copies[(n, step)] = copies
            if rng.random() < options.dup_rate:
                resubmit.add(n)
        return cls(kill_at, dup_copies, resubmit)


@dataclass
class _Workers:
    """The worker processes: started, killed and replaced by name (``w1``, ``w2``, ...)."""

    info: str
    concurrency: int
    clock: Callable[[], datetime]
    faults: list[Fault]
    logdir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def spawn(self, why: str) -> str:
        name = f"w{len(self.procs) + 1}"
        env = {
            **os.environ,
            **_WORKER_ENV,
            "ENGINE_DATABASE_URL": self.info,
            "ENGINE_WORKER_ID": name,
        }
        with (self.logdir / f"{name}.log").open("wb") as out:
            self.procs[name] = subprocess.Popen(  # noqa: S603  our own interpreter and module
                [sys.executable, "-m", "engine", "worker", "--concurrency", str(self.concurrency)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.faults.append(
            Fault(at=self.clock(), kind="spawn", worker=name, detail=f"{name} {why}")
        )
        return name

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def kill(self, name: str, detail: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        at = self.clock()
        proc.wait(timeout=10)
        self.faults.append(Fault(at=at, kind="kill", worker=name, detail=detail))

    def stop(self, grace_s: float = 8.0) -> None:
        """SIGTERM the live workers (the graceful path); SIGKILL any left after ``grace_s``."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def tail(self, lines: int = 15) -> str:
        shown = []
        for name in self.procs:
            path = self.logdir / f"{name}.log"
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            shown.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(shown)


def _say(message: str) -> None:
    click.echo(f"[simulate] {message}", err=True)


def _scratch(base: str, seed: int) -> tuple[str, str]:
    """Create and migrate the scratch database; its name and conninfo."""
    name = f"engine_sim_{seed}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    info = make_conninfo(base, dbname=name)
    with psycopg.connect(info, autocommit=True) as conn:
        migrations.apply(conn, Settings().migration_dirs)
        conn.execute(_q["sim_effects_create"])
    return name, info


def _drop(base: str, name: str) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


class _Run:
    """One simulation on a migrated scratch database."""

    def __init__(self, options: SimOptions, info: str, out_dir: Path, logdir: Path) -> None:
        self.options = options
        self.settings = Settings(
            database_url=SecretStr(info), flow_modules=[FLOW_MODULE], transport="postgres"
        )
        self.conn = db.connect(self.settings, autocommit=True)
        self.plan = _Plan.draw(options)
        self.faults: list[Fault] = []
        self.workers = _Workers(info, options.concurrency, self._clock, self.faults, logdir)
        self.out_dir = out_dir
        self.killed: set[uuid.UUID] = set()
        self.duplicated: set[uuid.UUID] = set()
        self.resubmitted: set[int] = set()
        self.late_jobs = 0  # a resubmit that raced its job's end legitimately made a new job

    def _clock(self) -> datetime:
        row = self.conn.execute(_q["sim_clock"]).fetchone()
        assert row is not None
        at: datetime = row["at"]
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
        return self._oracles(), timed_out

    def _loop(self, job_no: dict[uuid.UUID, int], registry: Registry, transport: Any) -> bool:
        """Inject the planned faults until every job ended; False on timeout."""
        deadline = time.monotonic() + self.options.timeout_s
        started = last_progress = time.monotonic()
        while time.monotonic() < deadline:
            progress = self.conn.execute(_q["sim_progress"]).fetchone()
            assert progress is not None
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
        for row in self.conn.execute(_q["sim_running_select"]).fetchall():
            key = (job_no.get(row["job_id"], -1), row["step"])
            proc = str(row["lease_owner"]).split("/")[0]
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
        for row in self.conn.execute(_q["sim_delivered_select"]).fetchall():
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
        for row in self.conn.execute(_q["sim_active_jobs_select"]).fetchall():
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

    def _one(self, name: str, **params: Any) -> dict[str, Any]:
        row = self.conn.execute(_q[name], params).fetchone()
        assert row is not None
        return dict(row)

    def _oracles(self) -> list[Oracle]:
        steps = len(STEPS)
        expected_jobs = self.options.jobs + self.late_jobs
        effects = self._one("oracle_no_double_effect", steps=steps)
        fencing = self._one("oracle_fencing")
        lost = self._one("oracle_nothing_lost")
        stuck = self._one("oracle_no_expired_running")
        attempts = self._one("oracle_attempts")
        overlap = self._one("oracle_one_active_per_fingerprint")
        refused = sum(1 for f in self.faults if f.kind == "resubmit" and "active job" in f.detail)
        return [
            Oracle(
                name="no double effect",
                passed=effects["jobs_off"] == 0 and effects["refused_by_key"] == 0,
                detail=f"{effects['effects']} effects, {effects['jobs_off']} job(s) without "
                f"exactly {steps}, {effects['refused_by_key']} refused by the unique key",
            ),
            Oracle(
                name="fencing",
                passed=fencing["unfenced"] == 0,
                detail=f"{fencing['effects'] - fencing['unfenced']}/{fencing['effects']} effects "
                "written by the attempt that checkpointed; "
                f"{fencing['fenced_commits']} commit(s) fenced",
            ),
            Oracle(
                name="nothing lost",
                passed=lost["jobs"] == expected_jobs
                and lost["done"] == expected_jobs
                and lost["steps_not_done"] == 0,
                detail=f"{lost['done']}/{expected_jobs} jobs done "
                f"({lost['jobs']} in the database), "
                f"{lost['steps_not_done']} step run(s) not done",
            ),
            Oracle(
                name="no expired lease left running",
                passed=stuck["stuck"] == 0,
                detail=f"{stuck['stuck']} step run(s) running under an expired lease",
            ),
            Oracle(
                name="attempts within the cap",
                passed=attempts["over_cap"] == 0 and attempts["miscounted"] == 0,
                detail=f"max {attempts['max_attempts_used']} of {attempts['cap']}; "
                f"{attempts['miscounted']} step run(s) whose attempts differ from their claims",
            ),
            Oracle(
                name="one active job per fingerprint",
                passed=overlap["overlapping"] == 0,
                detail=f"{overlap['overlapping']} overlapping pair(s); {refused} duplicate "
                "submit(s) returned the active job",
            ),
        ]

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


@click.command("simulate")
@click.option(
    "--workers",
    type=click.IntRange(1, 16),
    default=2,
    show_default=True,
    envvar="ENGINE_SIM_WORKERS",
    show_envvar=True,
    help="worker processes at once",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 500),
    default=8,
    show_default=True,
    envvar="ENGINE_SIM_JOBS",
    show_envvar=True,
    help="jobs to submit (3 steps each)",
)
@click.option(
    "--kill-rate",
    type=click.FloatRange(0.0, 1.0),
    default=0.3,
    show_default=True,
    envvar="ENGINE_SIM_KILL_RATE",
    show_envvar=True,
    help="share of step runs whose first attempt's worker is SIGKILLed mid-step",
)
@click.option(
    "--dup-rate",
    type=click.FloatRange(0.0, 1.0),
    default=0.5,
    show_default=True,
    envvar="ENGINE_SIM_DUP_RATE",
    show_envvar=True,
    help="share of step runs announced again, and of jobs submitted again",
)
@click.option(
    "--seed",
    type=int,
    default=1,
    show_default=True,
    envvar="ENGINE_SIM_SEED",
    show_envvar=True,
    help="seed of the fault plan and step durations",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 8),
    default=1,
    show_default=True,
    envvar="ENGINE_SIM_CONCURRENCY",
    show_envvar=True,
    help="slots per worker",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(5, 3600),
    default=120.0,
    show_default=True,
    envvar="ENGINE_SIM_TIMEOUT_S",
    show_envvar=True,
    help="seconds before the run is stopped (jobs not done then fail an oracle)",
)
@click.option("--keep-db", is_flag=True, help="keep the scratch database for inspection")
def simulate(**kwargs: Any) -> None:
    """Run real workers with injected faults; check the oracles; render a replay page."""
    options = SimOptions(**kwargs)
    try:
        settings = Settings()
    except Exception as exc:  # a bad ENGINE_* value
        click.echo(f"error: bad setting: {exc}", err=True)
        sys.exit(3)
    click.echo(
        f"simulate: seed {options.seed}, {options.workers} worker(s), {options.jobs} job(s) "
        f"({options.jobs * len(STEPS)} step runs), kill rate {options.kill_rate:g}, "
        f"dup rate {options.dup_rate:g}"
    )
    try:
        record, path = run_simulation(options, settings)
    except (EngineError, psycopg.OperationalError) as exc:
        click.echo(f"error: {mask_url(str(exc)).strip()}", err=True)
        sys.exit(3)
    kills = sum(1 for f in record.faults if f.kind == "kill")
    dups = [f for f in record.faults if f.kind == "duplicate"]
    resubmits = sum(1 for f in record.faults if f.kind == "resubmit")
    click.echo(
        f"faults: {kills} kill(s), {len(dups)} step run(s) announced again, "
        f"{resubmits} duplicate submit(s)"
    )
    for line in oracle_lines(record.oracles):
        click.echo(line)
    click.echo(f"replay: {path}")
    sys.exit(0 if all(o.passed for o in record.oracles) and not record.timed_out else 1)
