"""Shared pieces: output, sizes, the scratch database, worker processes."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from engine.config import Settings
from engine.infra.secrets import mask_url
from engine.store import db, migrations
from engine.worker.processes import WorkerProcess, start_worker, stop_all

ROOT = Path(__file__).resolve().parent.parent
# two benches on one server (another checkout's) must not drop each other's database
SCRATCH_DB = os.environ.get("BENCH_DATABASE", "engine_bench")


def emit(bench: str, metric: str, value: float | int | None, unit: str) -> None:
    """One figure: one JSON line on stdout."""
    if isinstance(value, float):
        value = round(value, 3)
    line = {"bench": bench, "metric": metric, "value": value, "unit": unit}
    print(json.dumps(line), flush=True)


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def env_ints(name: str, default: str) -> list[int]:
    return [int(p) for p in (os.environ.get(name) or default).split(",") if p.strip()]


# -- the scratch database --------------------------------------------------------------


def server_conninfo() -> str:
    """The engine's own rule: ENGINE_DATABASE_URL, else the embedded server."""
    return db.conninfo(Settings())


def fresh_database(*, migrate: bool = True, dbname: str | None = None) -> str:
    """Drop and re-create ``dbname`` (``SCRATCH_DB`` by default; migrated unless told not).

    Its connection string.
    """
    dbname = dbname or SCRATCH_DB  # read at call time: a caller may rename the scratch database
    base = server_conninfo()
    admin = base
    if conninfo_to_dict(base).get("dbname") == dbname:
        admin = make_conninfo(base, dbname="postgres")
    name = sql.Identifier(dbname)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
    info = make_conninfo(base, dbname=dbname)
    if migrate:
        with psycopg.connect(info, autocommit=True) as conn:
            migrations.apply(conn, Settings().migration_dirs)
    return info


def drop_database(dbname: str | None = None) -> None:
    dbname = dbname or SCRATCH_DB
    base = server_conninfo()
    if conninfo_to_dict(base).get("dbname") == dbname:
        return
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
        )


def settings_for(info: str, **overrides: Any) -> Settings:
    return Settings(database_url=info, **overrides)


def masked(info: str) -> str:
    return mask_url(info)


# -- worker processes ------------------------------------------------------------------


class Workers:
    """``count`` processes of ``python -m engine worker``; always stopped on exit.

    Output of each goes to a temporary log file, shown on stderr if a worker
    exits early or when ``BENCH_VERBOSE`` is set.
    """

    def __init__(
        self,
        info: str,
        *,
        count: int,
        concurrency: int,
        modules: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.info = info
        self.count = count
        self.concurrency = concurrency
        self.modules = modules
        self.extra_env = env or {}
        self.procs: list[WorkerProcess] = []
        self._logdir = tempfile.TemporaryDirectory(prefix="bench-workers-")
        self.logs: list[Path] = []

    def env(self) -> dict[str, str]:
        """The workers' environment."""
        env = {**os.environ, **self.extra_env}
        env["ENGINE_DATABASE_URL"] = self.info
        env["ENGINE_FLOW_MODULES"] = self.modules
        env["ENGINE_REPORT_ON_END"] = "false"  # measure the runtime, not the renderer
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        return env

    def __enter__(self) -> Workers:
        env = self.env()
        try:
            for i in range(self.count):
                path = Path(self._logdir.name) / f"worker-{i}.log"
                self.logs.append(path)
                self.procs.append(
                    start_worker(
                        "--concurrency", str(self.concurrency), env=env, output=path, cwd=ROOT
                    )
                )
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop()
            if exc_type is not None or os.environ.get("BENCH_VERBOSE"):
                self.show_logs()
        finally:
            self._logdir.cleanup()

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self.procs}

    def cpu_s(self) -> tuple[float, float]:
        """CPU seconds (user + system) the workers used so far, and their child processes
        (a traced worker's exporter), from ``/proc``; zeros where it cannot be read."""
        own = children = 0.0
        for p in self.procs:
            own += _cpu_s(p.pid)
            for child in _children(p.pid):
                children += _cpu_s(child)
        return own, children

    def exited(self) -> list[WorkerProcess]:
        """Workers that stopped on their own (poll() is not None)."""
        return [p for p in self.procs if p.poll() is not None]

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every worker, wait up to ``timeout_s``, then SIGKILL the rest."""
        for p in stop_all(self.procs, timeout_s):
            log(f"worker {p.pid} ignored SIGTERM for {timeout_s:g} s: SIGKILL")

    def show_logs(self, tail: int = 40) -> None:
        for path, p in zip(self.logs, self.procs, strict=False):
            if not path.exists():
                continue
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            log(f"--- worker {p.pid} (exit {p.returncode}), last {len(lines)} lines of its log")
            for line in lines:
                print(f"    {line}", file=sys.stderr)
        sys.stderr.flush()


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Backends:
    """CPU seconds the database server's processes serving one database used (its backends,
    from ``/proc``: the server runs on this machine); each backend's last reading is kept
    when it has exited. All zeros when the server's processes cannot be read here."""

    PIDS = "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"

    def __init__(self, conn: psycopg.Connection[Any], dbname: str) -> None:
        self.conn = conn
        self.dbname = dbname
        self.seen: dict[int, float] = {}

    def cpu_s(self) -> float:
        for (pid,) in self.conn.execute(self.PIDS, (self.dbname,)).fetchall():
            self.seen[pid] = _cpu_s(pid) or self.seen.get(pid, 0.0)
        return sum(self.seen.values())


def _cpu_s(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        return found
    return found
