"""Three `engine worker` processes, two dead letters, one webhook: exactly one alert each."""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import testflows
from harness import (
    fast_settings,
    flows_registry,
    recorded_alerts,
    run_of,
    wait_job_ended,
    wait_until,
    worker_env,
)
from pydantic import SecretStr
from webhook import SECRET_PATH, webhook_server

from engine import submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.runner import claim
from engine.store import Claimed, db
from engine.transports.message import StepMessage
from engine.worker.processes import WorkerProcess, start_worker, stop_all
from engine.worker.worker import Worker

pytestmark = pytest.mark.acceptance

WORKERS = 3


def _delivered(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM engine_alert_deliveries "
        "WHERE sink = 'webhook' AND status = 'delivered'"
    ).fetchone()
    assert row is not None
    return int(row["n"])


def _died_on_its_last_attempt(settings: Settings, conn: psycopg.Connection[Any]) -> uuid.UUID:
    """A job whose step `a` was claimed on its last attempt by a worker that then died.

    Every worker's sweeper sees its lease expired at its cap: one dead letter, one alert.
    """
    job = submit("chain", {"n": 2}, settings=settings, registry=flows_registry())
    a = run_of(conn, job.job_id, "a")["id"]
    conn.execute("UPDATE engine_step_runs SET max_attempts = 1 WHERE id = %s", (a,))
    runnable = Registry.load(["testflows"]).runnable()
    with db.connect(settings) as c:
        claimed = claim(c, StepMessage(job_id=job.job_id, step_run_id=a), "gone", 30, runnable)
        assert isinstance(claimed, Claimed)
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE id = %s",
        (a,),
    )
    return job.job_id


def test_three_workers__a_poison_step_and_an_expired_last_attempt_alert_the_webhook_once_each(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    fast = fast_settings(settings, max_attempts=3, reports_dir=tmp_path)
    poison = submit(
        "chain", {"fail_step": "a", "fail_times": 99}, settings=fast, registry=flows_registry()
    )
    expired = _died_on_its_last_attempt(fast, conn)
    procs: list[WorkerProcess] = []
    with webhook_server() as receiver:
        env = worker_env(
            fast,
            max_attempts=3,
            reports_dir=tmp_path,
            alert_sinks=["log", "webhook"],
            alert_webhook_url=SecretStr(receiver.url),
        )
        try:
            for i in range(WORKERS):
                procs.append(
                    start_worker(
                        "--concurrency",
                        "2",
                        env=env,
                        output=tmp_path / f"w{i}.log",
                        log_level="INFO",
                    )
                )
            wait_until(
                lambda: all(" started with " in p.output() for p in procs), 60, "3 workers up"
            )
            assert wait_job_ended(conn, poison.job_id, timeout=60) == "failed"
            assert wait_job_ended(conn, expired, timeout=60) == "failed"
            wait_until(lambda: _delivered(conn) == 2, 60, "both webhook deliveries")
        finally:
            killed = stop_all(procs, 30)
        assert killed == [], "every worker stops on SIGTERM"
        assert [p.returncode for p in procs] == [0] * WORKERS
        posts = list(receiver.posts)

    alerts = {a["job_id"]: a for a in recorded_alerts(conn)}
    assert set(alerts) == {poison.job_id, expired}
    by_job = {uuid.UUID(p["job_id"]): p for p in posts}
    assert len(posts) == 2 and set(by_job) == {poison.job_id, expired}, posts
    body = by_job[poison.job_id]
    print(json.dumps(body, indent=2))  # the closing note's webhook body (pytest -s)
    assert body["alert_id"] == alerts[poison.job_id]["id"]
    assert (body["flow"], body["step"], body["attempts"]) == ("chain", "a", 3)
    assert body["error"] == "ValueError: planned failure 3 of 99 in a"
    # the error's DETAIL line quotes a document: it stays in the database, out of the alert
    assert testflows.DOCUMENT_IN_ERROR not in json.dumps(body)
    assert body["report"] == (tmp_path / "runs" / f"{poison.job_id}.html").resolve().as_uri()
    for name in ("job", "flow", "step", "attempts", "error", "report"):
        assert f"\n{name}: " in body["text"]
    swept = by_job[expired]
    assert (swept["step"], swept["attempts"]) == ("a", 1)
    assert "lease expired during the last allowed attempt" in swept["error"]

    logs = "".join(p.output() for p in procs)
    assert logs.count("ALERT dead letter: ") == 2, "the log sink, once per alert"
    assert SECRET_PATH not in logs and "xoxsecrettoken42" not in logs


def test_worker__a_sink_without_its_setting_refuses_to_start(settings: Settings) -> None:
    with pytest.raises(Exception, match="ENGINE_ALERT_WEBHOOK_URL"):
        Worker(fast_settings(settings, alert_sinks=["webhook"]), flows_registry())
    proc = start_worker(
        env=worker_env(settings, alert_sinks=["log", "sns"]), output="pipe", log_level="INFO"
    )
    try:
        assert proc.wait(timeout=60) == 3
        assert proc.stdout is not None
        assert "ENGINE_ALERT_SNS_TOPIC_ARN is not set" in proc.stdout.read()
    finally:
        if proc.alive():
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
