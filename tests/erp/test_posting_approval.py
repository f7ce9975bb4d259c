"""Posting with --approve-rejects-over: a batch with too many rejections waits for `approve`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, thread_worker, wait_job_ended, wait_until
from test_posting import insert_erp, output

from engine import ApprovalRefused, Refused, Registry, awaiting_approval, signal, submit
from engine.config import Settings
from engine.jobs import admin
from engine.reports import render_job_report
from flows.erp import periods

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
        "SELECT count(*) AS n FROM engine_history WHERE job_id = %s AND kind = 'waiting'", (job,)
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
        # what the accountant decides on is on the page while it waits
        assert "What it shows the approver" in text
        for number in ("SI-3", "SI-4", "ST-7"):
            assert f"<td>{number}</td>" in text
        # the sender recorded by the engine is the approver, not a name typed in the data
        signal(
            job,
            "approve",
            {"by": "acct", "reason": "known till errors"},
            settings=fast,
            sent_by="acct@erp",
        )
        assert wait_job_ended(conn, job) == "done"
    summary = output(conn, job, "decide")
    assert summary == output(conn, job, "reconcile")
    assert summary["rejected"] == 3
    approval = summary["approval"]
    assert (approval["by"], approval["decision"], approval["reason"]) == (
        "acct@erp",
        "approve",
        "known till errors",
    )
    assert approval["threshold"] == 2
    [event] = [e for e in periods.history(conn, "2026-11") if e.action == "posting approved"]
    assert event.actor == "acct@erp"
    assert str(job) in event.reason and event.reason.endswith("; known till errors")
    assert "3 document(s) rejected, over the limit of 2" in event.reason
    page = Path(render_job_report(fast, job, out_dir=tmp_path / "d", registry=registry))
    text = page.read_text()
    assert "Approved by <strong>acct@erp</strong>" in text
    assert "Reason: known till errors" in text
    assert "over the limit of 2" in text
    assert "is waiting for signal" not in text
    # what was approved stays on the page after the approval
    assert "showed its approver while it waited for signal <code>approve</code>" in text
    assert "Signal sent by <strong>acct@erp</strong>" in text
    assert "<td>SI-4</td>" in text


def test_posting__the_inbox_lists_the_waiting_batch_with_its_rejected_documents(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)
    job = submit(
        "posting",
        {"period": "2026-11", "approve_rejects_over": 1},
        settings=fast,
        registry=registry,
    ).job_id
    with thread_worker(fast, registry):
        wait_until(lambda: reconcile_status(conn, job) == "waiting", what="reconcile to wait")
        [waiting] = [a for a in awaiting_approval(conn) if a.job_id == job]
    assert (waiting.flow, waiting.step, waiting.signal) == ("posting", "reconcile", "approve")
    assert waiting.parent_job_id is None and waiting.deadline is None
    assert waiting.params["period"] == "2026-11"
    s = waiting.summary
    assert s is not None
    assert (s["period"], s["selected"], s["posted"], s["rejected"], s["threshold"]) == (
        "2026-11",
        8,
        5,
        3,
        1,
    )
    assert s["debit"] == s["credit"]
    assert [(r["number"], bool(r["reason"])) for r in s["rejections"]] == [
        ("SI-3", True),
        ("SI-4", True),
        ("ST-7", True),
    ]
    assert "unknown account 9999" in s["rejections"][1]["reason"]


HOSTILE_NUMBER = '<script>alert("SI-4")</script>'
HOSTILE_REASON = "<img src=x onerror=alert(1)> & not these"


def test_posting__a_rejection_fails_the_job_naming_who_and_why_and_the_page_escapes_it(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    insert_erp(conn)
    conn.execute("UPDATE erp_documents SET number = %s WHERE id = 4", (HOSTILE_NUMBER,))
    job = submit(
        "posting",
        {"period": "2026-11", "approve_rejects_over": 2},
        settings=fast,
        registry=registry,
    ).job_id
    with thread_worker(fast, registry):
        wait_until(lambda: reconcile_status(conn, job) == "waiting", what="reconcile to wait")
        waiting = Path(render_job_report(fast, job, out_dir=tmp_path / "w", registry=registry))
        text = waiting.read_text()
        assert HOSTILE_NUMBER not in text
        assert "&lt;script&gt;alert(&#34;SI-4&#34;)&lt;/script&gt;" in text
        signal(
            job,
            "approve",
            {"decision": "reject", "reason": HOSTILE_REASON},
            settings=fast,
            sent_by="controller",
        )
        assert wait_job_ended(conn, job) == "failed"
    error = conn.execute("SELECT error FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert error is not None
    assert "posting 2026-11 rejected by controller at " in error["error"]
    assert HOSTILE_REASON in error["error"]
    # the decision was recorded once, with reconcile's checkpoint, before decide failed the job
    assert output(conn, job, "reconcile")["approval"]["decision"] == "reject"
    decide = conn.execute(
        "SELECT status FROM engine_step_runs WHERE job_id = %s AND step = 'decide'", (job,)
    ).fetchone()
    assert decide == {"status": "dead"}
    dead_letters = conn.execute(
        "SELECT count(*) AS n FROM engine_dead_letters WHERE job_id = %s", (job,)
    ).fetchone()
    assert dead_letters == {"n": 0}, "a rejection is a decision, not a fault"
    alerts = conn.execute("SELECT count(*) AS n FROM engine_alerts").fetchone()
    assert alerts == {"n": 0}, "an accountant's decision pages no one"
    with pytest.raises(Refused, match="a rejection is the data's decision"):
        admin.retry_job(fast, job)
    [event] = [e for e in periods.history(conn, "2026-11") if e.action.startswith("posting")]
    assert (event.action, event.actor) == ("posting rejected", "controller")
    assert event.reason.endswith(f"; {HOSTILE_REASON}")
    page = Path(render_job_report(fast, job, out_dir=tmp_path / "f", registry=registry))
    text = page.read_text()
    assert "<img src=x" not in text and HOSTILE_NUMBER not in text
    assert "&lt;img src=x onerror=alert(1)&gt; &amp; not these" in text
    assert "Signal sent by <strong>controller</strong>" in text


def test_posting__a_decision_that_is_neither_approve_nor_reject_fails_the_job_naming_it(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
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
        maybe = {"decision": "maybe", "reason": "unsure"}
        signal(job, "approve", maybe, settings=fast, sent_by="acct")
        assert wait_job_ended(conn, job) == "failed"
    error = conn.execute("SELECT error FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert error is not None
    assert "has decision 'maybe': expected 'approve' or 'reject'" in error["error"]
    assert [e for e in periods.history(conn, "2026-11") if e.action.startswith("posting")] == []


def test_posting__its_submitter_cannot_approve_and_an_approval_needs_a_reason(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)
    job = submit(
        "posting",
        {"period": "2026-11", "approve_rejects_over": 2},
        settings=fast,
        registry=registry,
        submitted_by="ann@erp",
    ).job_id
    with thread_worker(fast, registry):
        wait_until(lambda: reconcile_status(conn, job) == "waiting", what="reconcile to wait")
        with pytest.raises(ApprovalRefused) as own:
            signal(job, "approve", {"reason": "mine"}, settings=fast, sent_by="ann@erp")
        assert own.value.rule == "submitter"
        with pytest.raises(ApprovalRefused) as bare:
            signal(job, "approve", {"decision": "approve"}, settings=fast, sent_by="bob@erp")
        assert bare.value.rule == "reason"
        assert reconcile_status(conn, job) == "waiting"
        signal(job, "approve", {"reason": "known till errors"}, settings=fast, sent_by="bob@erp")
        assert wait_job_ended(conn, job) == "done"
    assert output(conn, job, "decide")["approval"]["by"] == "bob@erp"
    refused = conn.execute(
        "SELECT actor, detail->>'rule' AS rule FROM engine_audit "
        "WHERE job_id = %s AND action = 'signal_refused' ORDER BY id",
        (job,),
    ).fetchall()
    assert [(r["actor"], r["rule"]) for r in refused] == [
        ("ann@erp", "submitter"),
        ("bob@erp", "reason"),
    ]
