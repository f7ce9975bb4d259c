"""``engine worker`` and the CLI as users run them, behind a real PgBouncer (issue 27, item 5).

Every process reaches PostgreSQL only through PgBouncer in transaction
pooling mode (two server sessions per database: the worker's slots,
heartbeat, receiver and sweeper, and each command, take turns on them).
"""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from typing import Any

import psycopg
import pytest
from cli_zygote import run_engine
from harness import engine_cli as engine
from harness import settings_with_url, start_worker_process, wait_job_ended, worker_env
from pooler import PgBouncer
from psycopg.conninfo import conninfo_to_dict

from engine.config import Settings
from flows.tools.seed import seed

pytestmark = pytest.mark.acceptance


@pytest.fixture
def pooled(pgbouncer: PgBouncer, dbinfo: str) -> Settings:
    return settings_with_url(pgbouncer.url_for(str(conninfo_to_dict(dbinfo)["dbname"])))


def _test_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``engine ARGS`` with the test flows (``chain``) loaded, as the worker has them."""
    return run_engine(args, env=worker_env(settings))


def _charged(conn: psycopg.Connection[Any], job_id: str) -> list[Any]:
    """Events of an attempt charged or given back for the engine's own statement."""
    return conn.execute(
        "SELECT kind, detail FROM engine_history WHERE job_id = %s AND (kind IN "
        "('retried', 'fenced', 'dead_lettered') OR detail->>'reason' LIKE 'not done%%')",
        (job_id,),
    ).fetchall()


def test_cli_and_worker__behind_pgbouncer_submit_status_retry_signal_cancel(
    pooled: Settings, conn: psycopg.Connection[Any]
) -> None:
    worker = start_worker_process(pooled, max_attempts=2)
    try:
        ok = _test_cli(pooled, "submit", "chain", "--n", "1", "--wait", "--json")
        assert ok.returncode == 0, ok.stderr
        done = json.loads(ok.stdout)
        assert done["status"] == "done"
        attempts = conn.execute(
            "SELECT attempts FROM engine_step_runs WHERE job_id = %s", (done["job_id"],)
        ).fetchall()
        assert [r["attempts"] for r in attempts] == [1, 1, 1]
        assert _charged(conn, done["job_id"]) == []

        bad = _test_cli(pooled, "submit", "chain", "--n", "2", "--fail-times", "9", "--wait")
        assert bad.returncode == 1, bad.stderr
        status = engine(pooled, "runs", "--status", "failed", "--json")
        assert status.returncode == 0, status.stderr
        [failed] = json.loads(status.stdout)["jobs"]
        shown = engine(pooled, "status", failed["id"], "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["job"]["status"] == "failed"
        retried = engine(pooled, "retry", failed["id"])
        assert retried.returncode == 0, retried.stderr
        assert wait_job_ended(conn, uuid.UUID(failed["id"]), timeout=60) == "failed"

        # a posting waits for its approval (no worker here loads it): signal, then cancel
        seed(conn, stores=1, brands=1, employees=2, items=3, period="2026-11", seed=1)
        posting = engine(pooled, "submit", "posting", "--period", "2026-11", "--json")
        assert posting.returncode == 0, posting.stderr
        job_id = json.loads(posting.stdout)["job_id"]
        ok = ("--by", "acct", "--data", '{"by": "a", "reason": "r"}')
        sent = engine(pooled, "signal", job_id, "approve", *ok, "--json")
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["created"] is True
        cancelled = engine(pooled, "cancel", job_id)
        assert cancelled.returncode == 0, cancelled.stderr
        row = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job_id,)).fetchone()
        assert row == {"status": "cancelled"}
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0


def test_cli__migrate_through_pgbouncer_is_refused_naming_the_direct_url(pooled: Settings) -> None:
    # its session advisory lock would stay on a server session it no longer holds
    result = engine(pooled, "migrate")
    assert result.returncode == 3, result.stderr
    assert "engine migrate runs through a transaction pooler" in result.stderr
    assert "point ENGINE_DATABASE_URL at PostgreSQL itself" in result.stderr
