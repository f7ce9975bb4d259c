"""Posting with --approve-rejects-over: a batch with too many rejections waits for `approve`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, thread_worker, wait_job_ended, wait_until
from test_posting import insert_erp, output

from engine import Registry, signal, submit
from engine.config import Settings
from engine.reports import render_job_report

# insert_erp's November: 5 documents post, 3 are rejected


@pytest.fixture
def registry() -> Registry:
    return Registry.load(["flows.posting"])


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings, concurrency=2, flow_modules=["flows.posting"])


def reconcile_status(conn: psycopg.Connection[Any], job_id: Any) -> str | None:
    row = conn.execute(
        "SELECT status FROM engine_step_runs WHERE job_id = %s AND step = 'reconcile'", (job_id,)
    ).fetchone()
    return None if row is None else str(row["status"])


def test_posting__rejections_up_to_the_limit_close_without_waiting(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)
    job = submit(
        "posting",
        {"period": "2026-11", "approve_rejects_over": 3},
        settings=fast,
        registry=registry,
    ).job_id
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    summary = output(conn, job, "reconcile")
    assert (summary["rejected"], summary["approval"]) == (3, None)
    waits = conn.execute(
        "SELECT count(*) AS n FROM engine_events WHERE job_id = %s AND kind = 'waiting'", (job,)
    ).fetchone()
    assert waits == {"n": 0}


def test_posting__over_the_limit_waits_for_approval_and_the_report_shows_who(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    insert_erp(conn)
    job = submit(
        "posting",
        {"period": "2026-11", "approve_rejects_over": 2},
        settings=fast,
        registry=registry,
    ).job_id
    with thread_worker(fast, registry):
        wait_until(lambda: reconcile_status(conn, job) == "waiting", what="reconcile to wait")
        waiting_page = Path(render_job_report(fast, job, out_dir=tmp_path / "w", registry=registry))
        text = waiting_page.read_text()
        assert "is waiting for signal <code>approve</code>" in text
        assert f"engine signal {job} approve" in text
        # the chunks are posted; only closing the batch waits
        posted = conn.execute(
            "SELECT count(*) AS n FROM erp_documents WHERE status = 'posted'"
        ).fetchone()
        assert posted == {"n": 5}
        signal(job, "approve", {"by": "acct"}, settings=fast, sent_by="acct@erp")
        assert wait_job_ended(conn, job) == "done"
    summary = output(conn, job, "reconcile")
    assert summary["rejected"] == 3
    assert summary["approval"]["by"] == "acct"
    assert summary["approval"]["threshold"] == 2
    page = Path(render_job_report(fast, job, out_dir=tmp_path / "d", registry=registry))
    text = page.read_text()
    assert "Approved by <strong>acct</strong>" in text
    assert "over the limit of 2" in text
    assert "is waiting for signal" not in text
