"""A real ``engine worker`` watched as operations do: its /metrics, its JSON log lines.

The worker runs as a process with ``--metrics-port 0`` (it logs the port it
took) and ``ENGINE_LOG_FORMAT=json``; the test scrapes its metrics over HTTP on
127.0.0.1 once the job's counts are in, and reads its log file line by line.
Its database URL carries a password (the test server trusts local
connections), which must appear in no line.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from harness import fast_settings, flows_registry, wait_job_ended, wait_until, worker_env
from prometheus_client.parser import text_string_to_metric_families
from psycopg.conninfo import conninfo_to_dict

from engine import submit
from engine.config import Settings
from engine.worker.processes import start_worker

pytestmark = pytest.mark.acceptance

PASSWORD = f"pw-OBS-{uuid.uuid4().hex[:12]}"


def url_with_password(settings: Settings) -> str:
    assert settings.database_url is not None
    parts = {
        k: str(v) for k, v in conninfo_to_dict(settings.database_url.get_secret_value()).items()
    }
    query = f"host={quote(parts['host'], safe='')}"
    if parts.get("port"):
        query += f"&port={parts['port']}"
    return f"postgresql://{quote(parts['user'])}:{PASSWORD}@/{parts['dbname']}?{query}"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return sum(
        v
        for (n, ls), v in samples.items()
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items())
    )


def json_lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def test_worker_metrics_and_json_logs__a_job_with_one_retry(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    env = {
        **worker_env(settings, log_format="json", metrics_host="127.0.0.1"),
        "ENGINE_DATABASE_URL": url_with_password(settings),
    }
    proc = start_worker("--metrics-port", "0", env=env, output=log, log_level="INFO")
    try:
        banner = wait_until(
            lambda: next(
                (
                    line
                    for line in json_lines(log)
                    if log.exists() and "metrics on http://" in line["message"]
                ),
                None,
            ),
            what="the worker to log its metrics address",
        )
        found = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", banner["message"])
        assert found, banner
        url = found[1]
        job = submit(
            "chain",
            {"fail_times": 1, "fail_step": "b"},
            settings=fast_settings(settings),
            registry=flows_registry(),
        )
        assert wait_job_ended(conn, job.job_id) == "done"
        # the counters move just after the commit the test saw
        samples = wait_until(
            lambda: (s := scrape(url)) and total(s, "engine_steps_succeeded_total") == 3 and s,
            what="three steps counted as succeeded",
        )
        # queue lag: nothing claimable once the job is done
        wait_until(lambda: total(scrape(url), "engine_queue_lag_seconds") == 0.0, what="a lag of 0")
    finally:
        proc.stop(grace_s=15)

    # -- metrics: a -> b (fails once, retried) -> c
    chain = {"flow": "chain"}
    assert total(samples, "engine_steps_started_total", **chain) == 4
    for step in ("a", "b", "c"):
        assert total(samples, "engine_steps_succeeded_total", step=step, **chain) == 1
    assert total(samples, "engine_steps_failed_total", step="b", **chain) == 1
    assert total(samples, "engine_steps_retried_total", **chain) == 1
    assert total(samples, "engine_steps_retried_total", step="b", **chain) == 1
    assert total(samples, "engine_steps_dead_lettered_total") == 0
    assert total(samples, "engine_steps_fenced_total") == 0
    assert total(samples, "engine_steps_reclaimed_total") == 0
    assert total(samples, "engine_step_duration_seconds_count", **chain) == 4
    assert total(samples, "engine_step_duration_seconds_count", outcome="retried") == 1
    assert total(samples, "engine_database_up") == 1
    assert total(samples, "engine_database_outages_total") == 0

    # -- logs: every line one JSON object; the step's own lines carry its run's context
    text = log.read_text()
    assert PASSWORD not in text
    lines = json_lines(log)
    assert len(lines) == len(text.splitlines())
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    steps = [line for line in lines if line["logger"] == "testflows"]
    assert [(s["step"], s["attempt"]) for s in steps] == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]
    runs = {
        r["step"]: r
        for r in conn.execute(
            "SELECT step, id, lease_owner FROM engine_step_runs WHERE job_id = %s", (job.job_id,)
        ).fetchall()
    }
    for line in steps:
        assert line["job_id"] == str(job.job_id)
        assert line["flow"] == "chain"
        assert line["step_run_id"] == str(runs[line["step"]]["id"])
        assert line["lease_owner"].startswith(line["worker"] + "/")
    retry = next(line for line in lines if "failed (retried)" in line["message"])
    assert (retry["step"], retry["attempt"]) == ("b", 1)
