"""The state of one chaos scenario: its databases, workers, transport, submitted jobs and faults.

:class:`Run` owns the scratch databases (the chaos one, and the clean one
copied from it before any worker starts), the worker fleet, the harness's
own publisher, and the record of what was submitted (committed, rolled back,
or of unknown outcome) and which faults were injected. The fault injectors
(:mod:`.inject`) and the oracles (:mod:`.oracles`) work on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from pydantic import SecretStr

from engine import Registry, Settings, load_queries, signal, submit
from engine.store import migrations

from .chaosflow import EFFECTS_DDL
from .config import FLOW_MODULES, PERIOD, ChaosConfig
from .keyflows import GATES_DDL
from .procs import ROOT, Fleet, Proc, run_engine

_q = load_queries(str(Path(__file__).with_name("chaos.sql")))
log = logging.getLogger("chaos")

_TICK_S = 0.05
SCHEDULE = "chaos-nightly"  # the chaos schedule (the `schedule` fault kind adds it)


def _upstream(info: str) -> int | str:
    """The server of ``info`` as a fault proxy reaches it: a port on 127.0.0.1, or a socket."""
    parts = conninfo_to_dict(info)
    host, port = str(parts.get("host") or "/tmp"), int(parts.get("port") or 5432)
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else port


def say(message: str) -> None:
    print(f"[chaos] {message}", file=sys.stderr, flush=True)


@dataclass
class Fault:
    """One injected fault. Recovery is counted from ``origin`` for the step runs it took away."""

    kind: str
    round: int
    detail: str = ""
    victim: str | None = None
    start: datetime | None = None  # when it began (a later fault cuts an earlier one's sample)
    origin: datetime | None = None  # when recovery starts (an outage: its end)
    affected: list[tuple[uuid.UUID, int]] = field(default_factory=list)  # (step run, attempt)
    applied: bool = True  # False: its condition was never met (e.g. a fault point not reached)
    partition: dict[str, Any] | None = None  # the partition fault's mode and figures


@dataclass
class Tally:
    kills: int = 0  # SIGKILLs by the harness and kills at fault points (workers and submits)
    pauses: int = 0
    terms: int = 0
    terminations: int = 0  # pg_terminate_backend rounds
    outages: int = 0
    outage_s: float = 0.0
    duplicates: int = 0  # extra messages sent
    duplicate_submits: int = 0
    sqs_error_windows: int = 0
    rollbacks: int = 0  # submits rolled back
    deploys: int = 0
    point_kills: int = 0
    submit_kills: int = 0
    term_lasts: int = 0
    schedule_kills: int = 0  # workers killed while firing a schedule (claimed, not committed)
    schedule_times: int = 0  # times of the chaos schedule made due
    partitions: int = 0  # workers cut off behind their fault proxy (any mode)
    worker_exits: int = 0  # workers that exited on their own (each replaced, as ECS would)


@dataclass
class Jobs:
    """What the harness submitted, by outcome."""

    committed: set[uuid.UUID] = field(default_factory=set)
    committed_ns: set[int] = field(default_factory=set)  # chaos jobs submitted by a process
    ambiguous_ns: set[int] = field(default_factory=set)  # the submit failed: may exist
    rolled_back_ns: set[int] = field(default_factory=set)
    may_fail: set[int] = field(default_factory=set)  # ns whose job may end failed (term_last)
    erp: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # first-created order
    erp_ids: dict[tuple[str, str], uuid.UUID] = field(default_factory=dict)
    # the newer paths: keyed jobs waiting for the harness's signal `go` (sent a
    # round after their submit), close-like parents whose child fails until the
    # harness opens its gate and `engine retry`-es them
    to_signal: dict[uuid.UUID, int] = field(default_factory=dict)  # job -> round submitted
    signalled: set[uuid.UUID] = field(default_factory=set)
    closes_failing: dict[uuid.UUID, int] = field(default_factory=dict)  # job -> n
    retried: dict[uuid.UUID, str] = field(default_factory=dict)  # job -> `engine retry` output
    next_n: int = 0

    def new_n(self) -> int:
        self.next_n += 1
        return self.next_n


class Run:
    """One scenario's world; see the module docstring."""

    def __init__(self, cfg: ChaosConfig, transport: str, seed: int, admin: str, logdir: Path):
        self.cfg = cfg
        self.transport = transport
        self.seed = seed
        self.admin_info = admin
        self.logdir = logdir
        suffix = f"{seed}_{transport[:2]}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.db = f"chaos_{suffix}"
        self.clean_db = f"chaos_clean_{suffix}"
        self.info = make_conninfo(admin, dbname=self.db)
        self.clean_info = make_conninfo(admin, dbname=self.clean_db)
        self.bound_s = cfg.bound_s(transport)
        self.tally = Tally()
        self.jobs = Jobs()
        self.faults: list[Fault] = []
        self.reduced: list[tuple[str, str]] = []  # (worker, flow it lacks)
        self.schedule_times: list[datetime] = []  # the chaos schedule's times made due
        self.notes: list[str] = []
        self.sqs_env: dict[str, str] = {}
        self.sqs_gate = logdir / "sqs-errors.on"
        self.queue_url: str | None = None
        self.dlq_url: str | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._admin: psycopg.Connection[Any] | None = None
        self.publisher: Any = None
        self.registry = Registry.load(list(FLOW_MODULES))
        self.settings = Settings(
            database_url=SecretStr(self.info),
            flow_modules=list(FLOW_MODULES),
            transport="postgres" if transport == "postgres" else "sqs",
            max_attempts=cfg.max_attempts,
            report_on_end=False,
            connect_timeout_s=3,
        )
        self.fleet: Fleet | None = None
        self.created: list[str] = []
        self.proxies: list[Any] = []  # the partition fault's proxies (stopped at the end)
        self.partitioned: list[str] = []  # workers that were behind a partition
        self.pg_upstream: int | str = _upstream(admin)  # where a fault proxy forwards to
        self.pooled = False  # every worker through PgBouncer (scenario._pooler)
        self.worker_url = self.info  # the workers' and engine commands' database URL

    # -- databases ---------------------------------------------------------------------

    def admin(self) -> psycopg.Connection[Any]:
        if self._admin is None or self._admin.closed or self._admin.broken:
            self._admin = psycopg.connect(
                self.admin_info, autocommit=True, row_factory=dict_row, connect_timeout=5
            )
        return self._admin

    def admin_q(self, name: str, **params: Any) -> list[dict[str, Any]]:
        return self.admin().execute(_q[name], params or None).fetchall()

    def clock(self) -> datetime:
        at: datetime = self.admin_q("clock")[0]["at"]
        return at

    def q(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """A named query on the chaos database (reconnects once: an outage ends sessions)."""
        for attempt in range(2):
            try:
                if self._conn is None or self._conn.closed or self._conn.broken:
                    self._conn = psycopg.connect(
                        self.info, autocommit=True, row_factory=dict_row, connect_timeout=3
                    )
                return self._conn.execute(_q[name], params or None).fetchall()
            except psycopg.OperationalError:
                self.drop_conn()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def drop_conn(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _create(self, name: str, template: str | None = None) -> None:
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        self.admin().execute(statement)
        self.created.append(name)

    def allow_connections(self, allowed: bool) -> None:
        self.admin().execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                sql.Identifier(self.db), sql.SQL("true" if allowed else "false")
            )
        )

    def setup_databases(self) -> None:
        """Migrate, seed the small ERP with ``engine seed``, copy it as the clean database."""
        self._create(self.db)
        with psycopg.connect(self.info, autocommit=True) as conn:
            migrations.apply(conn, Settings().migration_dirs)
            conn.execute(EFFECTS_DDL)
            conn.execute(GATES_DDL)
        cfg = self.cfg
        args = [
            "seed",
            "--stores",
            str(cfg.stores),
            "--brands",
            "2",
            "--employees",
            str(cfg.stores * 3),
            "--items",
            str(cfg.items),
            "--period",
            PERIOD,
            "--seed",
            str(self.seed),
        ]
        env = {**self.child_env(), "ENGINE_DATABASE_URL": self.info}
        env.pop("ENGINE_FLOW_MODULES", None)  # `engine seed` comes with the ERP's flow modules
        done = subprocess.run(
            [sys.executable, "-m", "engine", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"engine seed failed ({done.returncode}): {done.stderr[-2000:]}")
        self._create(self.clean_db, template=self.db)

    def drop_databases(self) -> None:
        self.drop_conn()
        with contextlib.suppress(psycopg.Error):
            self.allow_connections(True)
        for name in reversed(self.created):
            self.admin().execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        self.created.clear()

    # -- processes ---------------------------------------------------------------------

    def child_env(self) -> dict[str, str]:
        """The environment of every process the run starts (workers and submits)."""
        env = {
            **os.environ,
            **self.cfg.worker_env(),
            **self.sqs_env,
            "ENGINE_DATABASE_URL": self.worker_url,
            "ENGINE_TRANSPORT": self.settings.transport,
            "ENGINE_FLOW_MODULES": ",".join(FLOW_MODULES),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
        }
        for name in ("ENGINE_FAULTS", "ENGINE_FAULT_PAUSE_S"):
            env.pop(name, None)
        return env

    def worker_faults(self) -> dict[str, str]:
        """Full workers pause some commits at ``before_commit``: ERP steps last long
        enough to be hit mid-step."""
        if self.cfg.slow_commit <= 0:
            return {}
        return {
            "ENGINE_FAULTS": f"before_commit=pause:{self.cfg.slow_commit}",
            "ENGINE_FAULT_PAUSE_S": str(self.cfg.slow_commit_s),
        }

    def start_fleet(self) -> None:
        self.fleet = Fleet(self.child_env(), self.logdir, self.cfg.concurrency, self.seed)
        procs = [self.spawn_full() for _ in range(self.cfg.workers)]
        for proc in procs:
            self.wait_up(proc)

    def spawn_full(self) -> Proc:
        assert self.fleet is not None
        return self.fleet.spawn("full", **self.worker_faults())

    def wait_up(self, proc: Proc, timeout_s: float = 30.0) -> bool:
        """A worker is up once it holds a database session (it connects before receiving);
        behind a pooler, once it registered."""
        app = f"chaos:{proc.name}"

        def up() -> bool:
            if not proc.alive:
                return True
            if self.pooled:
                found = self.q("worker_registered", id=proc.name, pid=proc.popen.pid)
                return bool(found[0]["sessions"])
            return bool(self.admin_q("sessions_count_by_app", db=self.db, app=app)[0]["sessions"])

        return bool(self.wait_for(up, timeout_s)) and proc.alive

    def reap(self) -> None:
        """Workers that exited on their own are counted (a failure) and replaced, as ECS would."""
        if self.fleet is None:
            return
        for proc in self.fleet.reap():
            self.tally.worker_exits += 1
            code = proc.popen.returncode
            self.notes.append(f"worker {proc.name} ({proc.role}) exited on its own, code {code}")
            say(f"worker {proc.name} ({proc.role}) exited on its own (code {code}); replacing it")
            if proc.role == "full":
                self.spawn_full()

    def wait_for(self, predicate: Callable[[], Any], timeout_s: float) -> Any:
        """Poll ``predicate`` until truthy or ``timeout_s``; its last value. Reaps meanwhile."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = predicate()
            if value or time.monotonic() >= deadline:
                return value
            self.reap()
            time.sleep(_TICK_S)

    # -- submitting ----------------------------------------------------------------------

    def chaos_params(self, n: int, **extra: Any) -> dict[str, Any]:
        fan = 1 + n % 3
        return {
            "n": n,
            "fan": fan,
            "min_ms": self.cfg.step_min_ms,
            "max_ms": self.cfg.step_max_ms,
            # every other job's last step waits durably first (the waiting state under faults)
            "nap_ms": self.cfg.step_max_ms if n % 2 == 0 else 0,
            **extra,
        }

    def submit_chaos(self, **extra: Any) -> int:
        """Submit one chaos job in the harness (committed, or of unknown outcome on error)."""
        n = self.jobs.new_n()
        try:
            job = submit(
                "chaos",
                self.chaos_params(n, **extra),
                settings=self.settings,
                registry=self.registry,
                publisher=self.publisher,
                submitted_by="chaos",
            )
        except Exception as exc:
            self.jobs.ambiguous_ns.add(n)
            self.notes.append(f"submit of chaos job {n} raised {type(exc).__name__}: {exc}")
            self.renew_publisher()
            return n
        self.jobs.committed.add(job.job_id)
        return n

    def submit_flow(self, flow: str, params: dict[str, Any]) -> uuid.UUID | None:
        """Submit a job of the newer chaos flows in the harness; its id once committed."""
        try:
            job = submit(
                flow,
                params,
                settings=self.settings,
                registry=self.registry,
                publisher=self.publisher,
                submitted_by="chaos",
            )
        except Exception as exc:
            self.notes.append(f"submit of {flow} {params} raised {type(exc).__name__}: {exc}")
            self.renew_publisher()
            return None
        self.jobs.committed.add(job.job_id)
        return job.job_id

    def submit_newer(self, round_no: int) -> None:
        """A round's jobs of the newer paths: keyed (signal, children), pure, close-like."""
        cfg = self.cfg
        slot = f"k{round_no % 2}"
        n = self.jobs.new_n()
        keyed = {"n": n, "slot": slot, "kids": n % 3, "min_ms": 50, "max_ms": cfg.step_max_ms // 2}
        job = self.submit_flow("chaos_keyed", keyed)
        if job is not None:
            self.jobs.to_signal[job] = round_no
        n = self.jobs.new_n()
        self.submit_flow("chaos_pure", {"n": n, "fan": 1 + n % 4, "slot": slot})
        if round_no % 3 == 0:
            n = self.jobs.new_n()
            fail = round_no % 6 == 0  # every other close: a child fails, retried
            close = {**keyed, "n": n, "kids": 2, "fail_kid": fail}
            job = self.submit_flow("chaos_close", close)
            if job is not None and fail:
                self.jobs.closes_failing[job] = n

    def tend(self, round_no: int | None = None) -> None:
        """What an operator does: ``go`` to keyed jobs a round old (all, once the
        faults stopped); a close-like parent failed by its planned child: its gate
        opened and ``engine retry``."""
        due = [
            j
            for j, r in self.jobs.to_signal.items()
            if j not in self.jobs.signalled and (round_no is None or r < round_no)
        ]
        for job in due:
            try:
                signal(job, "go", settings=self.settings, publisher=self.publisher, sent_by="chaos")
            except Exception as exc:  # an outage: sent again on the next call
                self.notes.append(f"signal go to {job}: {type(exc).__name__}: {exc}")
                self.renew_publisher()
                return
            self.jobs.signalled.add(job)
        waiting = [j for j in self.jobs.closes_failing if j not in self.jobs.retried]
        if not waiting:
            return
        rows = {r["id"]: r["status"] for r in self.q("jobs_status_select", ids=waiting)}
        for job in waiting:
            if rows.get(job) not in ("failed", "cancelled"):
                continue
            n = self.jobs.closes_failing[job]
            self.q("gate_open", n=n)
            code, output = run_engine(
                self.child_env(), ["retry", str(job)], self.logdir, f"retry-{n}"
            )
            if code != 0:
                self.notes.append(f"engine retry {job} exited {code}: {output[-300:]}")
                continue
            self.jobs.retried[job] = output.strip()[-200:]

    def submit_erp(self, flow: str, params: dict[str, Any]) -> None:
        try:
            job = submit(
                flow,
                params,
                settings=self.settings,
                registry=self.registry,
                publisher=self.publisher,
                submitted_by="chaos",
            )
        except Exception as exc:
            self.notes.append(f"submit of {flow} {params} raised {type(exc).__name__}: {exc}")
            self.renew_publisher()
            return
        self.jobs.committed.add(job.job_id)
        key = (flow, str(sorted(params.items())))
        if key not in self.jobs.erp_ids:
            self.jobs.erp.append((flow, params))
        self.jobs.erp_ids[key] = job.job_id

    def erp_done(self, flow: str, params: dict[str, Any]) -> bool:
        job_id = self.jobs.erp_ids.get((flow, str(sorted(params.items()))))
        if job_id is None:
            return False
        rows = self.q("job_status_by_id", id=job_id)
        return bool(rows) and rows[0]["status"] == "done"

    def renew_publisher(self) -> None:
        """A publisher whose connection an outage ended is replaced."""
        if self.transport != "postgres":
            return
        from engine.transports.postgres import PostgresTransport

        with contextlib.suppress(Exception):  # its connection is gone already
            self.publisher.close()
        self.publisher = PostgresTransport(self.settings)
