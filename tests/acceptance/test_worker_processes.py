"""Workers as real processes: kill -9, SIGSTOP (zombie), SIGTERM; the CLI around them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_zygote import run_engine
from harness import (
    fast_settings,
    flows_registry,
    run_of,
    start_worker_process,
    thread_worker,
    wait_job_ended,
    wait_until,
    worker_env,
)

from engine import submit
from engine.config import Settings

pytestmark = pytest.mark.acceptance


def effects(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[tuple[str, int, str]]:
    rows = conn.execute(
        "SELECT step, attempt, worker FROM test_effects WHERE job_id = %s ORDER BY step",
        (job_id,),
    ).fetchall()
    return [(r["step"], r["attempt"], r["worker"]) for r in rows]


def expire_running_leases(conn: psycopg.Connection[Any]) -> None:
    """Move time past the lease instead of sleeping through it."""
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE status = 'running'"
    )


def test_kill9__the_step_is_reclaimed_with_attempt_2_and_earlier_steps_are_not_rerun(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    job = submit(
        "chain",
        {"hold_file": str(hold)},
        settings=fast_settings(settings),
        registry=flows_registry(),
    )
    first = start_worker_process(settings)
    second = None
    try:
        wait_until(lambda: Path(f"{hold}.started").exists(), what="step b to start")
        first.kill()
        assert run_of(conn, job.job_id, "b")["status"] == "running"
        expire_running_leases(conn)
        second = start_worker_process(settings)
        assert wait_job_ended(conn, job.job_id, timeout=60) == "done"
    finally:
        first.kill()
        if second is not None:
            second.kill()
    b = run_of(conn, job.job_id, "b")
    assert b["attempts"] == 2
    assert run_of(conn, job.job_id, "a")["attempts"] == 1
    assert [(step, attempt) for step, attempt, _ in effects(conn, job.job_id)] == [
        ("a", 1),
        ("b", 2),
        ("c", 1),
    ]


def test_zombie__a_stopped_worker_resumed_after_its_lease_was_taken_commits_nothing(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    job = submit(
        "chain",
        {"hold_file": str(hold)},
        settings=fast_settings(settings),
        registry=flows_registry(),
    )
    # its open step transaction holds the lock on its effect row; the server
    # ends it once idle that long, or the new owner would wait behind it
    zombie = start_worker_process(settings, heartbeat_s=0.2, idle_in_transaction_timeout_s=1)
    try:
        wait_until(lambda: Path(f"{hold}.started").exists(), what="step b to start")
        zombie_owner = run_of(conn, job.job_id, "b")["lease_owner"]
        os.kill(zombie.pid, signal.SIGSTOP)
        expire_running_leases(conn)
        with thread_worker(fast_settings(settings)):
            assert wait_job_ended(conn, job.job_id) == "done"
        # the zombie wakes up and finishes its step: its commit must be refused
        Path(f"{hold}.release").touch()
        os.kill(zombie.pid, signal.SIGCONT)
        # its heartbeat finds the lease gone; its transaction is gone too
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM engine_history WHERE job_id = %s AND kind IN ('fenced', "
                "'lease_lost') AND worker = %s",
                (job.job_id, zombie_owner),
            ).fetchone(),
            what="the zombie to find its lease lost",
        )
    finally:
        zombie.kill()
    assert [(s, a) for s, a, _ in effects(conn, job.job_id)] == [("a", 1), ("b", 2), ("c", 1)]
    assert all(w != zombie_owner for s, _, w in effects(conn, job.job_id) if s == "b")
    assert run_of(conn, job.job_id, "b")["status"] == "done"


def test_sigterm__a_step_past_the_grace_period_is_released_and_picked_up_at_once(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    job = submit(
        "chain",
        {"hold_file": str(hold)},
        settings=fast_settings(settings),
        registry=flows_registry(),
    )
    worker = start_worker_process(settings, shutdown_grace_s=0.5)
    try:
        wait_until(lambda: Path(f"{hold}.started").exists(), what="step b to start")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        worker.kill()
    b = run_of(conn, job.job_id, "b")
    # given back with the attempt it took: shutdown is not the step's fault
    assert (b["status"], b["lease_token"], b["attempts"]) == ("pending", None, 0)
    released = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE kind = 'released' AND step_run_id = %s",
        (b["id"],),
    ).fetchone()
    assert released == {"n": 1}
    visible = conn.execute(
        "SELECT count(*) AS n FROM engine_queue WHERE visible_at <= clock_timestamp()"
    ).fetchone()
    assert visible == {"n": 1}, "its message is visible at once, not after a timeout"
    # no time moved: a new worker picks it up straight away (attempt 1 again,
    # so the step would hold again: let it go)
    Path(f"{hold}.release").touch()
    with thread_worker(fast_settings(settings)):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert run_of(conn, job.job_id, "b")["attempts"] == 1


def test_sigterm__a_step_finishing_within_the_grace_period_commits(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    job = submit(
        "chain",
        {"hold_file": str(hold)},
        settings=fast_settings(settings),
        registry=flows_registry(),
    )
    worker = start_worker_process(settings, shutdown_grace_s=30)
    try:
        wait_until(lambda: Path(f"{hold}.started").exists(), what="step b to start")
        worker.send_signal(signal.SIGTERM)
        Path(f"{hold}.release").touch()
        assert worker.wait(timeout=30) == 0
    finally:
        worker.kill()
    b = run_of(conn, job.job_id, "b")
    assert (b["status"], b["attempts"]) == ("done", 1)
    # a stopping worker claims nothing new, not even an eager successor
    c = run_of(conn, job.job_id, "c")
    assert (c["status"], c["attempts"]) == ("pending", 0)
    queued = conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone()
    assert queued == {"n": 1}, "c's message waits for another worker"


def test_sigterm__during_a_long_poll_exits_0(settings: Settings) -> None:
    worker = start_worker_process(settings, poll_wait_s=20)
    try:
        wait_until(lambda: worker.stdout is not None and "started" in worker.stdout.readline())
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        worker.kill()


def engine_cli(
    settings: Settings, *args: str, **overrides: Any
) -> subprocess.CompletedProcess[str]:
    return run_engine(args, env=worker_env(settings, **overrides))


def test_cli__worker_refuses_a_heartbeat_not_shorter_than_the_lease(settings: Settings) -> None:
    result = engine_cli(settings, "worker", heartbeat_s=60, lease_s=30)
    assert result.returncode == 3
    assert "heartbeat interval 60 s" in result.stderr
    assert "lease duration 30 s" in result.stderr
    assert "ENGINE_HEARTBEAT_S" in result.stderr


def test_cli__submit_wait_exit_codes_status_dlq_and_retry(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    worker = start_worker_process(settings, max_attempts=2)
    try:
        ok = engine_cli(settings, "submit", "chain", "--n", "1", "--wait", "--json")
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["status"] == "done"

        bad = engine_cli(
            settings, "submit", "chain", "--n", "2", "--fail-times", "9", "--wait", "--json"
        )
        assert bad.returncode == 1
        job_id = json.loads(bad.stdout)["job_id"]

        status = json.loads(engine_cli(settings, "status", job_id, "--json").stdout)
        assert status["job"]["status"] == "failed"
        b = next(s for s in status["steps"] if s["step"] == "b")
        assert (b["status"], b["attempts"]) == ("dead", 2)
        assert "planned failure" in b["error"]["message"]

        listed = json.loads(engine_cli(settings, "dlq", "list", "--json").stdout)
        [dead] = listed["dead_letters"]
        assert dead["job_id"] == job_id and "planned failure" in dead["reason"]

        runs = json.loads(engine_cli(settings, "runs", "--status", "failed", "--json").stdout)
        assert [j["id"] for j in runs["jobs"]] == [job_id]

        # fail_times=9 fails again, but from its checkpoint: a is not rerun
        replay = engine_cli(settings, "dlq", "replay", str(dead["id"]))
        assert replay.returncode == 0, replay.stderr
        wait_job_ended(conn, uuid.UUID(job_id), timeout=60)
        assert engine_cli(settings, "retry", job_id).returncode == 0
        wait_job_ended(conn, uuid.UUID(job_id), timeout=60)
        a = run_of(conn, uuid.UUID(job_id), "a")
        assert a["attempts"] == 1
        assert engine_cli(settings, "cancel", job_id).returncode == 2, "a failed job is not active"
        assert engine_cli(settings, "retry", str(uuid.uuid4())).returncode == 2
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
