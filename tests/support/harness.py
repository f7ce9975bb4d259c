"""Running workers inside tests: in threads, or as real processes."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cli_zygote
import psycopg
from pydantic import SecretStr

from engine.config import Settings
from engine.flow.registry import Registry
from engine.worker.processes import WorkerProcess, settings_env, start_worker
from engine.worker.worker import Worker

SUPPORT = Path(__file__).parent
ROOT = SUPPORT.parent.parent

# Fast but honest: leases and visibility long enough that nothing expires by
# accident; tests move time by ageing rows instead.
FAST = {
    "lease_s": 30.0,
    "heartbeat_s": 5.0,
    "visibility_s": 60.0,
    "poll_wait_s": 0.2,
    "sweep_interval_s": 0.2,
    "retry_base_delay_s": 0.0,
    "shutdown_grace_s": 5.0,
    "flow_modules": ["testflows"],
    "report_on_end": False,  # tests that want reports turn them on, with a tmp folder
}


def fast_settings(settings: Settings, **overrides: Any) -> Settings:
    return settings.model_copy(update={**FAST, **overrides})


def flows_registry() -> Registry:
    return Registry.load(["testflows"])


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until truthy (a condition, not a tuned sleep); its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def job_status(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str:
    row = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row["status"])


def run_of(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str) -> dict[str, Any]:
    """The step run of a single-run ``step`` of the job, as a row."""
    row = conn.execute(
        "SELECT * FROM engine_step_runs WHERE job_id = %s AND step = %s", (job_id, step)
    ).fetchone()
    assert row is not None, f"no step run {step!r} in job {job_id}"
    return dict(row)


def recorded_alerts(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """The alerts recorded with dead letters (oldest first), as rows."""
    return [dict(r) for r in conn.execute("SELECT * FROM engine_alerts ORDER BY id").fetchall()]


def wait_job_ended(conn: psycopg.Connection[Any], job_id: uuid.UUID, timeout: float = 30) -> str:
    return str(
        wait_until(
            lambda: (s := job_status(conn, job_id)) in ("done", "failed", "cancelled") and s,
            timeout,
            f"job {job_id} to end",
        )
    )


@contextmanager
def thread_worker(
    settings: Settings, registry: Registry | None = None, **kwargs: Any
) -> Iterator[Worker]:
    """A worker running in a thread until the block ends."""
    worker = Worker(settings, registry or flows_registry(), **kwargs)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop_event.set()
        thread.join(timeout=30)
        assert not thread.is_alive(), "worker did not stop"
        if errors:
            raise errors[0]


def worker_env(settings: Settings, **overrides: Any) -> dict[str, str]:
    """The environment of an ``engine`` child on the test's database, FAST unless overridden."""
    assert settings.database_url is not None
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(ROOT)]),
        **settings_env(database_url=settings.database_url, **{**FAST, **overrides}),
    }


def start_worker_process(settings: Settings, *args: str, **overrides: Any) -> WorkerProcess:
    """``engine worker`` as a real process, its output in a pipe the test reads (or drains)."""
    return start_worker(*args, env=worker_env(settings, **overrides), log_level="INFO")


def settings_with_url(info: str, **overrides: Any) -> Settings:
    return Settings(database_url=SecretStr(info), **{**FAST, **overrides})


class ExternalQueue:
    """A publisher standing for an external queue (as SQS): submits leave outbox rows.

    A submit on a caller's connection then writes outbox rows for a relay to
    publish after the commit, which the PostgreSQL transport (publishing in
    the caller's transaction) never needs. Publishing through it is a crash
    of the submitting process before its publish.
    """

    transactional = False
    max_delay_s = 900.0

    def publish(self, conn: Any, messages: Any) -> None:
        raise AssertionError("the submitting process crashed before publishing")


def engine_cli(
    settings: Settings,
    *args: str,
    timeout: float = 120,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m engine ARGS`` as a user runs it, on the test's database (every flow module).

    ``stdin``: what the command reads (a password); ``env``: more variables.
    """
    assert settings.database_url is not None
    environ = {**os.environ, "ENGINE_DATABASE_URL": settings.database_url.get_secret_value()}
    environ.pop("ENGINE_FLOW_MODULES", None)
    environ.update(env or {})
    return cli_zygote.run_engine(args, env=environ, stdin=stdin, timeout=timeout)
