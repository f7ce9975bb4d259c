"""Recovery: SIGKILL the worker holding a step; time until another worker reclaims it.

Two workers (one slot each) run with a short lease; the ``hold`` step writes
its worker's pid to a file and sleeps. We kill that pid and read the database
clock at once (with the step run's lease expiry), then wait for the
``reclaimed`` event. Expected: what was left of the lease, plus up to one
sweep interval (the sweeper republishes the expired step run), plus a receive.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psycopg

from bench import hold
from bench.common import Workers, emit, fresh_database, log, settings_for
from engine import submit
from engine.flow.registry import Registry

T = TypeVar("T")

SETTINGS = {
    "ENGINE_LEASE_S": "2",
    "ENGINE_HEARTBEAT_S": "0.5",
    "ENGINE_SWEEP_INTERVAL_S": "0.5",
    "ENGINE_POLL_WAIT_S": "0.5",
    "ENGINE_SHUTDOWN_GRACE_S": "0",
}

AT_KILL = """
SELECT clock_timestamp(), lease_expires_at, id FROM engine_step_runs WHERE job_id = %s
"""

RECLAIMED = """
SELECT at, worker FROM engine_events
WHERE kind = 'reclaimed' AND step_run_id = %s ORDER BY id LIMIT 1
"""


def _wait_for(what: str, timeout_s: float, probe: Callable[[], T | None]) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (found := probe()) is not None:
            return found
        time.sleep(0.02)
    raise TimeoutError(f"no {what} within {timeout_s:g} s")


def run(timeout_s: float = 30.0) -> float | None:
    info = fresh_database()
    flow = Registry([hold.flow]).get("hold")
    with (
        tempfile.TemporaryDirectory(prefix="bench-hold-") as tmp,
        psycopg.connect(info, autocommit=True) as conn,
        Workers(info, count=2, concurrency=1, modules="bench.hold", env=SETTINGS) as workers,
    ):
        marker = Path(tmp) / "held"
        job = submit(flow, {"path": str(marker)}, settings=settings_for(info))

        def started() -> str | None:
            return marker.read_text() or None if marker.exists() else None

        try:
            text = _wait_for("step start", timeout_s, started)
        except TimeoutError as exc:
            log(f"recovery: {exc}")
            workers.show_logs()
            return None
        pid = int(text)
        if pid not in workers.pids:
            log(f"recovery: the step reports pid {pid}, not one of our workers {workers.pids}")
            return None
        time.sleep(1.0)  # a few heartbeats in: the lease is mid-way, as in real life
        next(p for p in workers.procs if p.pid == pid).kill()
        killed_at, expires_at, step_run_id = conn.execute(AT_KILL, (job.job_id,)).fetchone()  # type: ignore[misc]
        try:
            reclaimed_at, by = _wait_for(
                "reclaim",
                timeout_s,
                lambda: conn.execute(RECLAIMED, (step_run_id,)).fetchone(),
            )
        except TimeoutError as exc:
            log(f"recovery: {exc}")
            workers.show_logs()
            return None
    recovery_ms = (reclaimed_at - killed_at).total_seconds() * 1000
    lease_left_ms = (expires_at - killed_at).total_seconds() * 1000
    emit("recovery", "kill_to_reclaimed", recovery_ms, "ms")
    emit("recovery", "lease_left_at_kill", lease_left_ms, "ms")
    emit("recovery", "lease_expiry_to_reclaimed", recovery_ms - lease_left_ms, "ms")
    for name, value in SETTINGS.items():
        if name != "ENGINE_SHUTDOWN_GRACE_S":
            emit("recovery", name, float(value), "s")
    log(
        f"recovery: killed worker {pid}; step run reclaimed by {by} after {recovery_ms:.0f} ms "
        f"({lease_left_ms:.0f} ms of lease left at the kill, then "
        f"{recovery_ms - lease_left_ms:.0f} ms to sweep, publish and claim)"
    )
    return recovery_ms
