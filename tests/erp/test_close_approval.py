"""A close whose posting child awaits approval: the inbox and the close's report show what is
decided on; a rejection of the posting ends the close rejected (no dead letter, no alert, no
retry) naming who rejected it and why."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, thread_worker, wait_job_ended, wait_until

from engine import ApprovalRefused, Refused, Registry, awaiting_approval, signal, submit
from engine.config import Settings
from engine.jobs import admin
from engine.reports import render_job_report
from flows.erp import periods
from flows.tools.seed import seed

PERIOD = "2026-11"
FLOWS = ["flows.close", "flows.costing", "flows.posting"]


@pytest.fixture
def registry() -> Registry:
    return Registry.load(FLOWS)


@pytest.fixture
def fast(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("ERP_POSTING_CHUNK_SIZE", "100")
    return fast_settings(
        settings, flow_modules=FLOWS, concurrency=2, reports_dir=tmp_path / "reports"
    )


def posting_child(conn: psycopg.Connection[Any], close: uuid.UUID) -> uuid.UUID | None:
    """The close's posting child once its batch waits for the approval."""
    row = conn.execute(
        "SELECT j.id FROM engine_jobs AS j JOIN engine_step_runs AS s ON s.job_id = j.id "
        "WHERE j.parent_job_id = %s AND j.child_key = 'posting' AND s.step = 'reconcile' "
        "AND s.status = 'waiting'",
        (close,),
    ).fetchone()
    return None if row is None else row["id"]


def test_close__shows_its_waiting_postings_summary_and_fails_when_the_posting_is_rejected(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed(conn, stores=3, brands=1, employees=6, items=6, period=PERIOD, seed=4)
    close = submit(
        "close",
        {"period": PERIOD, "approve_rejects_over": 0},
        settings=fast,
        registry=registry,
        submitted_by="ann@erp",
    ).job_id
    with thread_worker(fast, registry):
        wait_until(
            lambda: posting_child(conn, close), timeout=120, what="the posting child to wait"
        )
        kid = posting_child(conn, close)
        assert kid is not None
        # the inbox: the posting, as the close's child, with what it rejected
        [waiting] = [a for a in awaiting_approval(conn) if a.job_id == kid]
        assert (waiting.parent_job_id, waiting.parent_flow) == (close, "close")
        assert waiting.summary is not None and waiting.summary["rejected"] > 0
        first = waiting.summary["rejections"][0]
        assert close not in {a.job_id for a in awaiting_approval(conn)}, "the close waits for a job"
        # a job's page asks for its own and its children's waits only
        assert [a.job_id for a in awaiting_approval(conn, job_id=close)] == [kid]
        assert [a.job_id for a in awaiting_approval(conn, job_id=kid)] == [kid]
        assert awaiting_approval(conn, job_id=uuid.uuid4()) == []  # no such job
        # the close's report: its child's wait and summary, linked to the child
        page = Path(render_job_report(fast, close, out_dir=tmp_path / "w", registry=registry))
        text = page.read_text()
        assert f'<a href="../runs/{kid}.html">posting job {kid}</a>' in text
        assert f"engine signal {kid} approve" in text
        assert "What it shows the approver" in text
        assert f"<td>{first['number']}</td>" in text
        # who submitted the close cannot decide on its posting, admins included
        with pytest.raises(ApprovalRefused, match=f"ann@erp submitted job {close}, its parent"):
            signal(kid, "approve", {"reason": "mine"}, settings=fast, sent_by="ann@erp")
        signal(
            kid,
            "approve",
            {"decision": "reject", "reason": "count the stock again"},
            settings=fast,
            sent_by="controller",
        )
        assert wait_job_ended(conn, close, timeout=120) == "failed"
    error = conn.execute("SELECT error FROM engine_jobs WHERE id = %s", (close,)).fetchone()
    assert error is not None
    assert f"posting child job {kid} (posting) rejected: " in error["error"]
    assert f"posting {PERIOD} rejected by controller at " in error["error"]
    assert "count the stock again" in error["error"]
    # the accountant's decision ends the close rejected: no dead letter, no alert, no retry
    rows = conn.execute(
        "SELECT id, rejected FROM engine_jobs WHERE id = ANY(%s)", ([close, kid],)
    ).fetchall()
    assert {(r["id"], r["rejected"]) for r in rows} == {(close, True), (kid, True)}
    for table in ("engine_dead_letters", "engine_alerts"):
        assert conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone() == {"n": 0}, table
    for job in (close, kid):
        with pytest.raises(Refused, match="a rejection is the data's decision"):
            admin.retry_job(fast, job)
    # the period stays open, its history says who rejected the posting and why
    status = conn.execute("SELECT status FROM erp_periods WHERE period = %s", (PERIOD,)).fetchone()
    assert status == {"status": "open"}
    events = [(e.action, e.actor) for e in periods.history(conn, PERIOD)]
    # the close's limit became the period's, set by its posting child before it waited
    assert events == [
        ("approval threshold", f"posting job {kid}"),
        ("posting rejected", "controller"),
    ]
    page = Path(render_job_report(fast, close, out_dir=tmp_path / "f", registry=registry))
    assert "rejected by controller" in page.read_text()
