"""``engine alerts list|retry`` as an operator runs them (subprocess, real database)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from harness import engine_cli as engine
from harness import fast_settings, flows_registry, run_of

from engine import store, submit
from engine.alerts import AlertRecorder
from engine.config import Settings

pytestmark = pytest.mark.acceptance


def an_abandoned_alert(settings: Settings, conn: psycopg.Connection[Any]) -> int:
    job = submit("chain", {}, settings=fast_settings(settings), registry=flows_registry())
    a = run_of(conn, job.job_id, "a")["id"]
    conn.execute("UPDATE engine_step_runs SET status = 'dead' WHERE id = %s", (a,))
    with conn.transaction():
        dl = store.dead_letter_insert_step(
            conn, job_id=job.job_id, step_run_id=a, reason="boom", error=None
        )
        assert AlertRecorder(["log", "webhook"]).record(conn, dl)
    conn.execute(
        "UPDATE engine_alert_deliveries SET status = 'delivered', attempts = 1, "
        "delivered_at = clock_timestamp() WHERE sink = 'log'"
    )
    conn.execute(
        "UPDATE engine_alert_deliveries SET status = 'abandoned', attempts = 10, "
        "last_error = 'AlertSendFailed: webhook answered HTTP 500' WHERE sink = 'webhook'"
    )
    [alert] = conn.execute("SELECT id FROM engine_alerts").fetchall()
    return int(alert["id"])


def test_cli__alerts_list_shows_each_sinks_state_and_retry_resends_the_abandoned(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    alert_id = an_abandoned_alert(settings, conn)

    listed = engine(settings, "alerts", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [alert] = json.loads(listed.stdout)["alerts"]
    assert (alert["id"], alert["flow"], alert["step"]) == (alert_id, "chain", "a")
    assert [(d["sink"], d["status"]) for d in alert["deliveries"]] == [
        ("log", "delivered"),
        ("webhook", "abandoned"),
    ]
    table = engine(settings, "alerts", "list", "--pending")
    assert table.returncode == 0, table.stderr
    assert f"alert {alert_id} " in table.stdout and "chain/a" in table.stdout
    assert "webhook: abandoned (10 sends): AlertSendFailed: webhook answered HTTP 500" in (
        table.stdout
    )

    missing = engine(settings, "alerts", "retry", "999")
    assert missing.returncode == 2 and "no alert with id 999" in missing.stderr
    retried = engine(settings, "alerts", "retry", str(alert_id))
    assert retried.returncode == 0, retried.stderr
    assert "1 abandoned delivery pending again" in retried.stdout
    again = engine(settings, "alerts", "retry", str(alert_id))
    assert again.returncode == 2
    assert f"alert {alert_id} has no abandoned delivery (log delivered, webhook pending)" in (
        again.stderr
    )
    [pending] = json.loads(engine(settings, "alerts", "list", "--pending", "--json").stdout)[
        "alerts"
    ]
    webhook = pending["deliveries"][1]
    assert (webhook["sink"], webhook["status"], webhook["attempts"]) == ("webhook", "pending", 0)
