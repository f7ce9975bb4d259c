"""Approvals bind the period, not a job (issue 35, invariant 21).

A period's rejected documents without an approval, every job's, pass its
limit: no new close, cancel or looser limit closes it; `engine books close`
refuses naming the count; an approval in the posting's wait records a
decision on exactly the documents it showed, and the close then proceeds.
The month end counts every document of the period, not one job's batch.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from erp_books import post
from harness import engine_cli, fast_settings, thread_worker, wait_job_ended, wait_until
from test_posting import insert_erp

from engine import Refused, Registry, awaiting_approval, signal, submit
from engine.config import Settings
from engine.jobs.admin import cancel
from engine.reports import render_job_report
from flows.erp import approvals, periods
from flows.erp.documents import period_documents
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


def waiting_posting(conn: psycopg.Connection[Any], parent: uuid.UUID | None = None) -> Any:
    """The posting (the close's child when ``parent``) waiting for its approval, or None."""
    for a in awaiting_approval(conn):
        if a.flow == "posting" and (parent is None or a.parent_job_id == parent):
            return a
    return None


def rejected_ids(conn: psycopg.Connection[Any]) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM erp_documents WHERE status = 'rejected' AND date_period = %s ORDER BY id",
        (PERIOD,),
    ).fetchall()
    return [r["id"] for r in rows]


def period_status(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT status FROM erp_periods WHERE period = %s", (PERIOD,)).fetchone()
    assert row is not None
    return str(row["status"])


def reject_a_posting(fast: Settings, registry: Registry, conn: psycopg.Connection[Any]) -> None:
    """Seed November; a posting over the limit 0 is rejected by the controller."""
    seed(conn, stores=3, brands=1, employees=6, items=6, period=PERIOD, seed=4)
    job = submit(
        "posting", {"period": PERIOD, "approve_rejects_over": 0}, settings=fast, registry=registry
    ).job_id
    with thread_worker(fast, registry):
        wait_until(lambda: waiting_posting(conn), timeout=120, what="the posting to wait")
        signal(
            job,
            "approve",
            {"decision": "reject", "reason": "count the stock again"},
            settings=fast,
            sent_by="controller",
        )
        assert wait_job_ended(conn, job, timeout=120) == "failed"
    assert rejected_ids(conn), "the seed has documents posting rejects"


def test_period_approvals__a_new_close_after_a_rejection_waits_and_closes_once_approved(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    reject_a_posting(fast, registry, conn)
    ids = rejected_ids(conn)
    # the bypass of the issue: nothing left to post, the rejected ones are not counted again
    refused = engine_cli(fast, "books", "close", "--period", PERIOD)
    assert refused.returncode == 2, refused.stdout
    assert f"{len(ids)} rejected document(s) dated in it have no approval" in refused.stderr
    assert f"({len(ids)} of them rejected by an accountant)" in refused.stderr
    assert "over the period's limit of 0" in refused.stderr
    assert f"engine submit posting --period {PERIOD}" in refused.stderr
    close = submit(
        "close", {"period": PERIOD, "approve_rejects_over": 0}, settings=fast, registry=registry
    ).job_id
    with thread_worker(fast, registry):
        wait_until(
            lambda: waiting_posting(conn, close), timeout=120, what="the close's posting to wait"
        )
        kid = waiting_posting(conn, close)
        s = kid.summary
        # it selected nothing: the wait is for the period's documents, not its batch
        assert (s["selected"], s["rejected"], s["unapproved"], s["threshold"]) == (
            0,
            0,
            len(ids),
            0,
        )
        assert [r["id"] for r in s["rejections"]] == ids
        assert period_status(conn) == "open"
        waiting = Path(
            render_job_report(fast, kid.job_id, out_dir=tmp_path / "w", registry=registry)
        )
        assert (
            f"{len(ids)} rejected document(s) dated in {PERIOD}, this batch's and earlier"
            in waiting.read_text()
        )
        signal(
            kid.job_id, "approve", {"reason": "known till errors"}, settings=fast, sent_by="acct"
        )
        assert wait_job_ended(conn, close, timeout=180) == "done"
    assert period_status(conn) == "closed"
    decisions = conn.execute(
        "SELECT document_id, rejection, decision, decided_by, reason, job_id "
        "FROM erp_rejection_decisions ORDER BY id"
    ).fetchall()
    rejects, approves = decisions[: len(ids)], decisions[len(ids) :]
    assert [(d["document_id"], d["decision"], d["decided_by"]) for d in rejects] == [
        (i, "reject", "controller") for i in ids
    ]
    assert [
        (d["document_id"], d["rejection"], d["decision"], d["decided_by"]) for d in approves
    ] == [(i, 1, "approve", "acct") for i in ids]
    assert {d["job_id"] for d in approves} == {kid.job_id}
    # the month end counts the period's documents, not the close's empty batch
    row = conn.execute(
        "SELECT output FROM engine_step_runs WHERE job_id = %s AND step = 'month_end'", (close,)
    ).fetchone()
    assert row is not None
    month = row["output"]
    assert (month["documents_selected"], month["documents_rejected"]) == (0, 0)
    docs = month["documents"]
    posted = conn.execute(
        "SELECT count(*) AS n FROM erp_documents WHERE status = 'posted' AND date_period = %s",
        (PERIOD,),
    ).fetchone()
    assert posted is not None and posted["n"] > 0
    assert (docs["posted"], docs["rejected"], docs["rejected_approved"]) == (
        posted["n"],
        len(ids),
        len(ids),
    )
    assert (docs["rejected_undecided"], docs["rejected_refused"], docs["unposted"]) == (0, 0, 0)
    page = Path(render_job_report(fast, close, out_dir=tmp_path / "r", registry=registry))
    text = page.read_text()
    assert '<div class="k">documents posted</div><div class="v">0</div>' not in text
    assert f'<div class="k">documents rejected</div><div class="v bad">{len(ids)}</div>' in text
    assert "approved by an accountant" in text


def test_period_approvals__a_cancelled_close_or_a_looser_limit_does_not_skip_the_wait(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    seed(conn, stores=3, brands=1, employees=6, items=6, period=PERIOD, seed=4)
    first = submit(
        "close", {"period": PERIOD, "approve_rejects_over": 0}, settings=fast, registry=registry
    ).job_id
    with thread_worker(fast, registry):
        wait_until(lambda: waiting_posting(conn, first), timeout=120, what="the posting to wait")
        cancel(fast, first, "not today", actor="ops")
        assert wait_job_ended(conn, first, timeout=60) == "cancelled"
        ids = rejected_ids(conn)
        assert ids
        # the limit is the period's: a close naming a looser one (or none) waits all the same
        second = submit(
            "close",
            {"period": PERIOD, "approve_rejects_over": len(ids) + 5},
            settings=fast,
            registry=registry,
        ).job_id
        wait_until(lambda: waiting_posting(conn, second), timeout=120, what="the second to wait")
        s = waiting_posting(conn, second).summary
        assert (s["threshold"], s["unapproved"]) == (0, len(ids))
        assert [r["id"] for r in s["rejections"]] == ids
        cancel(fast, second, "still not today", actor="ops")
        assert wait_job_ended(conn, second, timeout=60) == "cancelled"
    assert period_status(conn) == "open"
    assert conn.execute("SELECT count(*) AS n FROM erp_rejection_decisions").fetchone() == {"n": 0}
    limits = [
        (e.action, e.actor)
        for e in periods.history(conn, PERIOD)
        if e.action == "approval threshold"
    ]
    assert len(limits) == 1 and limits[0][1].startswith("posting job ")
    assert "limit none -> 0" in periods.history(conn, PERIOD)[0].reason


def test_period_approvals__a_document_rejected_again_needs_a_new_decision(
    conn: psycopg.Connection[Any],
) -> None:
    insert_erp(conn)
    post(conn, PERIOD)
    assert approvals.claim_threshold(conn, PERIOD, 0, actor="test") == 0
    docs = approvals.unapproved(conn, PERIOD)
    assert [(d.id, d.rejection, d.decision) for d in docs] == [
        (3, 1, None),
        (4, 1, None),
        (7, 1, None),
    ]
    with pytest.raises(Refused, match=r"cannot close 2026-11: 3 rejected document\(s\)"):
        periods.close(conn, PERIOD, actor="acct")
    approvals.record_decisions(
        conn, docs, decision="approve", by="acct", reason="ok", job_id=uuid.uuid4()
    )
    assert approvals.unapproved(conn, PERIOD) == []
    assert approvals.close_refusal(conn, PERIOD) is None
    # document 4 corrected by hand and rejected again (as a requeue and a new posting would):
    # its approval was for its first rejection, not this one
    conn.execute("UPDATE erp_documents SET status = 'unposted', reject_reason = NULL WHERE id = 4")
    conn.execute(
        "UPDATE erp_documents SET status = 'rejected', reject_reason = 'again' WHERE id = 4"
    )
    [again] = approvals.unapproved(conn, PERIOD)
    assert (again.id, again.rejection, again.decision) == (4, 2, None)
    # the count is the trigger's: an UPDATE back to the approved rejection is ignored
    conn.execute("UPDATE erp_documents SET rejections = 1, rejected_at = NULL WHERE id = 4")
    assert [(d.id, d.rejection) for d in approvals.unapproved(conn, PERIOD)] == [(4, 2)]
    refusal = approvals.close_refusal(conn, PERIOD)
    assert refusal is not None and "1 rejected document(s)" in refusal
    # an attacker's decision for an old rejection does not count for the new one
    approvals.record_decisions(
        conn,
        [again.model_copy(update={"rejection": 1})],
        decision="approve",
        by="mallory",
        reason="",
        job_id=uuid.uuid4(),
    )
    assert [d.id for d in approvals.unapproved(conn, PERIOD)] == [4]


def test_period_approvals__a_submit_tightens_the_limit_never_loosens_it_the_setting_a_default(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    insert_erp(conn)
    assert approvals.threshold(conn, PERIOD) is None
    assert approvals.claim_threshold(conn, PERIOD, None, actor="posting job a") is None
    monkeypatch.setenv("ERP_APPROVE_REJECTS_OVER", "4")
    assert approvals.threshold(conn, PERIOD) == 4  # the setting, not pinned yet
    assert approvals.claim_threshold(conn, PERIOD, None, actor="posting job b") == 4
    monkeypatch.setenv("ERP_APPROVE_REJECTS_OVER", "9")
    assert approvals.threshold(conn, PERIOD) == 4  # pinned on the period
    assert approvals.claim_threshold(conn, PERIOD, 7, actor="posting job c") == 4
    assert approvals.claim_threshold(conn, PERIOD, 1, actor="posting job d") == 1
    with pytest.raises(Exception, match="--reason: required"):
        approvals.set_threshold(conn, PERIOD, 10, actor="controller", reason=" ")
    assert approvals.set_threshold(conn, PERIOD, 10, actor="controller", reason="year end") == 1
    assert approvals.threshold(conn, PERIOD) == 10
    events = [(e.actor, e.reason) for e in periods.history(conn, PERIOD)]
    assert [a for a, _ in events] == ["posting job b", "posting job d", "controller"]
    assert events[0][1].startswith("rejected documents without an approval: limit none -> 4")
    assert "ERP_APPROVE_REJECTS_OVER" in events[0][1]
    assert events[2][1].endswith("limit 1 -> 10; year end")


def test_period_documents__counts_every_document_of_the_period_by_what_became_of_it(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)
    conn.execute("UPDATE erp_documents SET issued_on = '2026-10-20' WHERE id = 9")
    conn.execute("UPDATE erp_documents SET issued_on = '2026-12-02' WHERE id IN (8, 10)")
    post(conn, PERIOD)
    # entered under December, dated in November: November's, unposted
    conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on) "
        "VALUES (11, 'SI-11', 'sales_invoice', '2026-12', 1, 1, '2026-11-20')"
    )
    approvals.record_decisions(
        conn,
        [d for d in approvals.unapproved(conn, PERIOD) if d.id == 3],
        decision="approve",
        by="acct",
        reason="",
        job_id=uuid.uuid4(),
    )
    approvals.record_decisions(
        conn,
        [d for d in approvals.unapproved(conn, PERIOD) if d.id == 4],
        decision="reject",
        by="acct",
        reason="fix it",
        job_id=uuid.uuid4(),
    )
    docs = period_documents(conn, PERIOD)
    assert docs.history is not None
    assert (docs.history.corrected, docs.history.late) == (3, 0)  # the three rejected
    assert docs.model_dump(exclude={"history", "value_corrections", "value_correction_lines"}) == {
        "period": PERIOD,
        "dated": 8,  # 1-7 and 11
        "posted": 4,  # 1, 2, 5, 6
        "unposted": 1,  # 11
        "rejected": 3,
        "rejected_approved": 1,
        "rejected_refused": 1,
        "rejected_undecided": 1,
        "late": 0,
        "dated_elsewhere": 1,  # 8, dated in December
        "approve_rejects_over": None,
    }
    assert docs.unapproved == 2
    december = period_documents(conn, "2026-12")
    assert (december.dated, december.dated_elsewhere) == (2, 1)  # 8 and 10; 11
    shown = engine_cli(settings, "books", "documents", "--period", PERIOD, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == docs.model_dump(mode="json")
    text = engine_cli(settings, "books", "documents", "--period", PERIOD).stdout
    assert "rejected, undecided" in text and "entered here, dated elsewhere" in text
