"""Counts: queue lag (rows aged by SQL, never slept through), status --json, lease metrics."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import (
    engine_cli,
    fast_settings,
    flows_registry,
    thread_worker,
    wait_job_ended,
    wait_until,
)
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from engine import store, submit
from engine.config import Settings
from engine.infra import metrics


def submitted(settings: Settings, **params: Any) -> uuid.UUID:
    """A chain job nobody works on: its step a is pending, due now."""
    params.setdefault("n", uuid.uuid4().int % 1_000_000)  # a new fingerprint each time
    return submit("chain", params, settings=settings, registry=flows_registry()).job_id


def age(conn: psycopg.Connection[Any], job_id: uuid.UUID, column: str, interval: str) -> None:
    conn.execute(
        f"UPDATE engine_step_runs SET {column} = now() - %s::interval WHERE job_id = %s",
        (interval, job_id),
    )


def test_queue_lag__the_oldest_claimable_run_from_when_it_became_claimable(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    assert store.step_select_queue_lag(conn) == 0.0  # nothing waits
    due = submitted(settings)
    age(conn, due, "available_at", "90 s")
    older_but_later = submitted(settings)  # due in the future: not claimable, not lag
    age(conn, older_but_later, "available_at", "-1 hour")
    lag = store.step_select_queue_lag(conn)
    assert 90 <= lag < 90 + 60
    # a running step run whose lease expired 300 s ago is claimable since then
    expired = submitted(settings)
    conn.execute(
        "UPDATE engine_step_runs SET status = 'running', attempts = 1, lease_owner = 'gone', "
        "lease_token = gen_random_uuid(), lease_expires_at = now() - interval '300 s' "
        "WHERE job_id = %s",
        (expired,),
    )
    assert 300 <= store.step_select_queue_lag(conn) < 300 + 60
    # a live lease is not waiting; a job that ended has nothing claimable
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = now() + interval '1 hour' "
        "WHERE job_id = %s",
        (expired,),
    )
    conn.execute(
        "UPDATE engine_jobs SET status = 'cancelled', finished_at = now() WHERE id = %s", (due,)
    )
    assert store.step_select_queue_lag(conn) == 0.0


@pytest.fixture
def served(settings: Settings) -> Iterator[metrics.MetricsServer]:
    server = metrics.serve(fast_settings(settings), "127.0.0.1", 0)
    try:
        yield server
    finally:
        server.close()
        metrics.disable()


def gauge(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return next(
        s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
    )


def test_queue_lag_gauge__served_from_the_periodic_query(
    settings: Settings, conn: psycopg.Connection[Any], served: metrics.MetricsServer
) -> None:
    job = submitted(settings)
    age(conn, job, "available_at", "120 s")
    lag = wait_until(
        lambda: (v := gauge(served.url, "engine_queue_lag_seconds")) >= 120 and v,
        what="the gauge to read the aged row",
    )
    assert lag < 120 + 60
    assert gauge(served.url, "engine_database_up") == 1


def test_status_json__counts_from_the_database(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    fast = fast_settings(settings)
    ok = submit("chain", {"fail_times": 1}, settings=fast, registry=flows_registry()).job_id
    dead = submit(
        "chain",
        {"fail_times": 99, "fail_step": "a"},
        settings=fast_settings(settings, max_attempts=2),
        registry=flows_registry(),
    ).job_id
    with thread_worker(fast):
        assert wait_job_ended(conn, ok) == "done"
        assert wait_job_ended(conn, dead) == "failed"
    waiting = submitted(settings)
    age(conn, waiting, "available_at", "45 s")

    done = engine_cli(settings, "status", "--json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert {str(j["id"]) for j in printed["jobs"]} == {str(ok), str(dead), str(waiting)}
    counts = printed["counts"]
    assert counts["step_runs"] == {
        "pending": 1,
        "running": 0,
        "waiting": 0,
        "done": 3,
        "dead": 1,
        "cancelled": 0,
    }
    assert counts["dead_letters"] == {"step": 1, "message": 0, "total": 1}
    assert 45 <= counts["queue_lag_seconds"] < 45 + 60
    steps = {(s["flow"], s["step"]): s for s in counts["steps"]}
    assert set(steps) == {("chain", "a"), ("chain", "b"), ("chain", "c")}
    a, b, c = steps["chain", "a"], steps["chain", "b"], steps["chain", "c"]
    # a: once for the good job, twice (then dead) for the other
    assert (a["claimed"], a["succeeded"], a["failed"], a["retried"], a["dead_lettered"]) == (
        3,
        1,
        2,
        1,
        1,
    )
    # b failed once, was retried once (counted once), then succeeded
    assert (b["claimed"], b["succeeded"], b["failed"], b["retried"], b["dead_lettered"]) == (
        2,
        1,
        1,
        1,
        0,
    )
    assert (c["claimed"], c["succeeded"], c["failed"]) == (1, 1, 0)
    assert all(s["fenced"] == 0 and s["reclaimed"] == 0 for s in steps.values())


def test_lease_metrics__renewals_then_a_lost_lease_and_the_fenced_attempt(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    metrics.enable(registry)
    hold = tmp_path / "hold"
    labels = {"flow": "chain", "step": "b"}

    def counted(name: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    try:
        fast = fast_settings(settings, heartbeat_s=0.1)
        job = submit("chain", {"hold_file": str(hold)}, settings=fast, registry=flows_registry())
        with thread_worker(fast):
            wait_until(lambda: Path(f"{hold}.started").exists(), what="step b to start")
            wait_until(lambda: counted("engine_lease_renewals_total") >= 2, what="two renewals")
            # another attempt takes the lease over (as a reclaim would)
            conn.execute(
                "UPDATE engine_step_runs SET lease_token = gen_random_uuid() "
                "WHERE job_id = %s AND step = 'b'",
                (job.job_id,),
            )
            wait_until(lambda: counted("engine_steps_fenced_total") == 1, what="b fenced")
        assert counted("engine_lease_losses_total") >= 1
        assert counted("engine_steps_succeeded_total") == 0
        assert counted("engine_steps_started_total") == 1
    finally:
        metrics.disable()
