"""Corrections (issue 36): rejected documents come back, late documents post forward.

The tiny ERP of ``test_posting`` (November: SI-3 unbalanced, SI-4 an unknown
account, ST-7 no lines are rejected; SI-9 is dated in closed October; SI-10
in December), a late stock document added where stock moves matter. Real
PostgreSQL; the flows' own functions, the CLI, and the posting flow through
a worker for the approval rules.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from erp_books import close, cost, post
from harness import engine_cli, fast_settings, thread_worker, wait_job_ended, wait_until
from test_posting import insert_erp

from engine import ApprovalRefused, BadInput, Registry, signal, submit
from engine.config import Settings
from engine.reports import render_job_report
from flows import costing
from flows.erp import approvals, checks, corrections, dated
from flows.erp.documents import period_documents

OCT, NOV, DEC = "2026-10", "2026-11", "2026-12"


@pytest.fixture
def books(conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """insert_erp's three months, November posted once (SI-3, SI-4, ST-7 rejected); its
    sales outrun its one receipt, so 1300 in credit only warns."""
    monkeypatch.setenv("ERP_FLAG_INVENTORY_CREDIT", "warn")
    insert_erp(conn)
    conn.execute(
        "INSERT INTO erp_store_periods (store_id, period, opening) "
        "VALUES (1, %s, 'loaded'), (2, %s, 'loaded')",
        (NOV, NOV),
    )
    post(conn, NOV)


def status(conn: psycopg.Connection[Any], number: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT status, reject_reason, rejections, date_period, posting_period "
        "FROM erp_documents WHERE number = %s",
        (number,),
    ).fetchone()
    assert row is not None
    return dict(row)


def fix_si3(conn: psycopg.Connection[Any]) -> None:
    """The ERP fixes SI-3's lines (it was unbalanced: VAT missing)."""
    conn.execute(
        "INSERT INTO erp_document_lines (document_id, line_no, account_code, debit, credit) "
        "VALUES (3, 3, '2100', 0, 20.00)"
    )


def audit(conn: psycopg.Connection[Any], action: str) -> list[tuple[str, str, str, str]]:
    rows = conn.execute(
        "SELECT actor, source, target_id, reason FROM engine_audit WHERE action = %s ORDER BY id",
        (action,),
    ).fetchall()
    return [(r["actor"], r["source"], r["target_id"], r["reason"]) for r in rows]


def requeue(conn: psycopg.Connection[Any], *numbers: str, by: str = "ann") -> Any:
    with conn.transaction():
        return corrections.requeue(conn, numbers, actor=by, reason="fixed in the ERP")


def redate(conn: psycopg.Connection[Any], *numbers: str, into: str = NOV, by: str = "ann") -> Any:
    with conn.transaction():
        return corrections.redate(conn, numbers, into=into, actor=by, reason="late invoice")


# -- 1. rejected documents come back -----------------------------------------------------


def test_requeue__a_fixed_rejected_document_is_posted_by_the_next_posting(
    conn: psycopg.Connection[Any], books: None
) -> None:
    fix_si3(conn)
    [done] = requeue(conn, "SI-3")
    assert (done.number, done.action, done.period, done.actor) == ("SI-3", "requeued", NOV, "ann")
    assert status(conn, "SI-3")["status"] == "unposted"
    assert status(conn, "SI-3")["reject_reason"] is None
    assert audit(conn, "requeue") == [("ann", "api", "SI-3", "fixed in the ERP")]
    post(conn, NOV)
    assert status(conn, "SI-3")["status"] == "posted"
    [history] = [d for d in corrections.corrected(conn, NOV).documents if d.number == "SI-3"]
    assert [(e.action, e.actor, e.reason) for e in history.events] == [
        ("rejected", "posting", "unbalanced: debit 120.00 != credit 100.00"),
        ("requeued", "ann", "fixed in the ERP"),
        ("posted", "posting", ""),
    ]
    assert checks.check_period(conn, NOV).ok, checks.check_period(conn, NOV).problems


def test_requeue__rejected_again_needs_a_new_decision(
    conn: psycopg.Connection[Any], books: None
) -> None:
    [si4] = [d for d in approvals.unapproved(conn, NOV) if d.number == "SI-4"]
    approvals.record_decisions(
        conn, [si4], decision="approve", by="acct", reason="ok", job_id=uuid.uuid4()
    )
    assert "SI-4" not in [d.number for d in approvals.unapproved(conn, NOV)]
    requeue(conn, "SI-4")  # not fixed: rejected again
    assert "SI-4" not in [d.number for d in approvals.unapproved(conn, NOV)]
    post(conn, NOV)
    assert status(conn, "SI-4")["rejections"] == 2
    [again] = [d for d in approvals.unapproved(conn, NOV) if d.number == "SI-4"]
    assert (again.rejection, again.decision) == (2, None)
    [history] = [d for d in corrections.corrected(conn, NOV).documents if d.number == "SI-4"]
    assert [e.action for e in history.events] == ["rejected", "requeued", "rejected"]


@pytest.mark.parametrize(
    ("numbers", "reason", "message"),
    [
        (["SI-404"], "x", "no such document: SI-404"),
        (["SI-3", "SI-1"], "x", "SI-1 is posted, not rejected: only a rejected document"),
        (["SI-9"], "x", "SI-9 is unposted, not rejected"),
        (["SI-3"], "  ", "--reason: required"),
    ],
)
def test_requeue__refused_changes_nothing(
    conn: psycopg.Connection[Any], books: None, numbers: list[str], reason: str, message: str
) -> None:
    with pytest.raises(BadInput, match=message), conn.transaction():
        corrections.requeue(conn, numbers, actor="ann", reason=reason)
    assert status(conn, "SI-3")["status"] == "rejected"
    assert audit(conn, "requeue") == []


def test_requeue__in_a_closed_period_says_to_redate_it(
    conn: psycopg.Connection[Any], books: None
) -> None:
    cost(conn, NOV)
    close(conn, NOV)
    with pytest.raises(BadInput) as refused, conn.transaction():
        corrections.requeue(conn, ["SI-3"], actor="ann", reason="fixed")
    assert str(refused.value) == (
        f"SI-3 posts in {NOV}, which is closed: redate it into the first open period first "
        f"(engine books redate SI-3 --into {DEC} --reason ...), then requeue it"
    )
    # and so it goes: redated into December (still rejected), then requeued there
    redate(conn, "SI-3", into=DEC)
    assert status(conn, "SI-3")["status"] == "rejected"
    fix_si3(conn)
    requeue(conn, "SI-3")
    post(conn, DEC)
    assert status(conn, "SI-3") | {"reject_reason": None} == {
        "status": "posted",
        "reject_reason": None,
        "rejections": 1,
        "date_period": NOV,
        "posting_period": DEC,
    }


def test_requeue__the_cli_exits_2_naming_the_document_and_audits_each(
    settings: Settings, conn: psycopg.Connection[Any], books: None
) -> None:
    refused = engine_cli(settings, "books", "requeue", "SI-3", "SI-1", "--reason", "fixed")
    assert refused.returncode == 2, refused.stderr
    assert "SI-1 is posted, not rejected" in refused.stderr
    assert status(conn, "SI-3")["status"] == "rejected"
    fix_si3(conn)
    done = engine_cli(
        settings, "books", "requeue", "SI-3", "SI-4", "--reason", "fixed", "--by", "bo", "--json"
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["corrections"]
    assert [(c["number"], c["action"], c["period"]) for c in shown] == [
        ("SI-3", "requeued", NOV),
        ("SI-4", "requeued", NOV),
    ]
    assert audit(conn, "requeue") == [
        ("bo", "cli", "SI-3", "fixed"),
        ("bo", "cli", "SI-4", "fixed"),
    ]


# -- 2. late documents for a closed period -----------------------------------------------


def late_stock_invoice(conn: psycopg.Connection[Any]) -> None:
    """SI-11: a sale of two shirts at store 1, dated in closed October, entered now."""
    conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on) "
        "VALUES (11, 'SI-11', 'sales_invoice', %s, 1, 1, '2026-10-30')",
        (NOV,),
    )
    conn.execute(
        "INSERT INTO erp_document_lines "
        "(document_id, line_no, account_code, debit, credit, item_id, qty) VALUES "
        "(11, 1, '1000', 50.00, 0, NULL, NULL), (11, 2, '4000', 0, 50.00, 1, 2)"
    )


def test_redate__a_late_document_posts_in_the_first_open_period_keeping_its_date(
    conn: psycopg.Connection[Any], books: None
) -> None:
    late_stock_invoice(conn)
    assert [(w.period, w.documents) for w in dated.waiting(conn)] == [(OCT, 2)]
    [done] = redate(conn, "SI-11")
    assert (done.action, done.period, done.date_period) == ("redated", NOV, OCT)
    assert [(w.period, w.documents) for w in dated.waiting(conn)] == [(OCT, 1)]
    post(conn, NOV)
    row = conn.execute(
        "SELECT d.status, d.issued_on::text AS issued_on, j.period AS journal, "
        "array_agg(DISTINCT m.period) AS moves, array_agg(DISTINCT m.moved_on::text) AS moved_on "
        "FROM erp_documents d JOIN erp_journals j ON j.source_key = 'document:' || d.id "
        "JOIN erp_stock_moves m ON m.document_id = d.id WHERE d.number = 'SI-11' "
        "GROUP BY d.status, d.issued_on, j.period"
    ).fetchone()
    assert row == {
        "status": "posted",
        "issued_on": "2026-10-30",
        "journal": NOV,
        "moves": [NOV],
        "moved_on": ["2026-10-30"],
    }
    docs = period_documents(conn, NOV)
    assert docs.late == 1
    assert docs.history is not None
    [late] = [d for d in docs.history.documents if d.late]
    assert (late.number, late.date, late.posting_period) == ("SI-11", "2026-10-30", NOV)
    assert [(e.action, e.period) for e in late.events] == [("redated", NOV), ("posted", NOV)]
    assert audit(conn, "redate") == [("ann", "api", "SI-11", "late invoice")]
    cost(conn, NOV)
    report = checks.check_period(conn, NOV)
    assert report.ok, report.problems


def test_redate__a_redated_journal_moved_to_another_period_is_named(
    conn: psycopg.Connection[Any], books: None
) -> None:
    redate(conn, "SI-9")
    post(conn, NOV)
    assert checks.check_period(conn, NOV).ok
    conn.execute("UPDATE erp_journals SET period = %s WHERE source_key = 'document:9'", (DEC,))
    problems = checks.check_period(conn, NOV).problems
    assert any("SI-9" in p and f"journal in {DEC}, document posts in {NOV}" in p for p in problems)
    assert any("SI-9" in p for p in checks.check_period(conn, DEC).problems)


@pytest.mark.parametrize(
    ("number", "into", "message"),
    [
        (
            "SI-9",
            DEC,
            f"--into {DEC}: SI-9 \\(dated {OCT}\\) goes forward into the first open "
            f"period of its store\\(s\\), {NOV}; give --into {NOV}",
        ),
        ("SI-9", OCT, f"--into {OCT}: .*give --into {NOV}"),
        ("SI-9", "2026-09", f"give --into {NOV}"),
        ("SI-10", "2027-01", f"SI-10 posts in {DEC}, which is open: only a document waiting"),
        ("SI-1", DEC, "SI-1 is posted"),
        ("SI-404", NOV, "no such document: SI-404"),
    ],
)
def test_redate__refused_changes_nothing(
    conn: psycopg.Connection[Any], books: None, number: str, into: str, message: str
) -> None:
    with pytest.raises(BadInput, match=message), conn.transaction():
        corrections.redate(conn, [number], into=into, actor="ann", reason="late")
    assert status(conn, "SI-9")["posting_period"] == OCT
    assert audit(conn, "redate") == []


def test_redate__the_cli_refuses_a_bad_period_and_redates(
    settings: Settings, conn: psycopg.Connection[Any], books: None
) -> None:
    bad = engine_cli(settings, "books", "redate", "SI-9", "--into", "2026-13", "--reason", "x")
    assert bad.returncode == 2 and "--into" in bad.stderr, bad.stderr
    wrong = engine_cli(settings, "books", "redate", "SI-9", "--into", DEC, "--reason", "x")
    assert wrong.returncode == 2 and f"give --into {NOV}" in wrong.stderr, wrong.stderr
    done = engine_cli(
        settings, "books", "redate", "SI-9", "--into", NOV, "--reason", "late", "--by", "bo"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"SI-9 redated by bo: dated in {OCT}, posts in {NOV} (late)"
    assert dated.waiting(conn) == []
    post(conn, NOV)
    shown = engine_cli(settings, "books", "documents", "--period", NOV)
    assert shown.returncode == 0, shown.stderr
    assert "SI-9 (posted; dated 2026-10-15, late: posted in 2026-11)" in shown.stdout
    assert f"redated into {NOV} by bo at " in shown.stdout


def test_redate__a_redated_document_rejected_counts_for_the_periods_limit(
    conn: psycopg.Connection[Any], books: None
) -> None:
    conn.execute(
        "UPDATE erp_document_lines SET credit = 9.00 WHERE document_id = 9 AND line_no = 2"
    )
    before = len(approvals.unapproved(conn, NOV))
    redate(conn, "SI-9")
    post(conn, NOV)
    unapproved = approvals.unapproved(conn, NOV)
    assert len(unapproved) == before + 1
    assert "SI-9" in [d.number for d in unapproved]
    assert period_documents(conn, NOV).rejected_undecided == before + 1


# -- approvals: who corrected may not approve --------------------------------------------


def test_approval__whoever_requeued_or_redated_cannot_approve_that_posting(
    settings: Settings, conn: psycopg.Connection[Any], books: None
) -> None:
    registry = Registry.load(["flows.posting"])
    fast = fast_settings(settings, concurrency=2, flow_modules=["flows.posting"])
    requeue(conn, "SI-4", by="ann@erp")  # not fixed: rejected again
    redate(conn, "SI-9", by="cyd@erp")
    job = submit(
        "posting",
        {"period": NOV, "approve_rejects_over": 0},
        settings=fast,
        registry=registry,
        submitted_by="sub@erp",
    ).job_id
    with thread_worker(fast, registry):
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT status FROM engine_step_runs WHERE job_id = %s AND step = 'reconcile'",
                    (job,),
                ).fetchone()
                == {"status": "waiting"}
            ),
            what="reconcile to wait",
        )
        for who in ("ann", "cyd@erp"):
            with pytest.raises(ApprovalRefused) as refused:
                signal(job, "approve", {"reason": "mine"}, settings=fast, sent_by=who)
            assert refused.value.rule == "barred"
            assert "is barred from approving it" in str(refused.value)
        signal(job, "approve", {"reason": "checked"}, settings=fast, sent_by="bob@erp")
        assert wait_job_ended(conn, job) == "done"


def test_close_report__lists_the_late_and_requeued_documents_with_their_history(
    settings: Settings, conn: psycopg.Connection[Any], books: None, tmp_path: Path
) -> None:
    flows = ["flows.posting", "flows.costing", "flows.close"]
    registry = Registry.load(flows)
    fast = fast_settings(
        settings, concurrency=2, flow_modules=flows, reports_dir=tmp_path / "reports"
    )
    fix_si3(conn)
    requeue(conn, "SI-3")
    redate(conn, "SI-9")
    job = submit("close", {"period": NOV}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job, timeout=120) == "done"
    page = Path(render_job_report(fast, job, registry=registry)).read_text(encoding="utf-8")
    assert "late: dated in an earlier, closed month, redated into 2026-11" in page
    assert "were rejected, requeued or redated (1 late)" in page
    for text in ("SI-9", "SI-3", "requeued by ann", "redated into 2026-11 by ann", "late"):
        assert text in page, text


def test_redate__a_stock_document_into_a_costed_period_is_posted_and_recosted(
    conn: psycopg.Connection[Any], books: None
) -> None:
    late_stock_invoice(conn)
    cost(conn, NOV)
    [done] = redate(conn, "SI-11")
    assert done.period == NOV
    post(conn, NOV)
    assert status(conn, "SI-11")["status"] == "posted"
    stale = checks.check_period(conn, NOV)
    assert not stale.ok, "its pairs are stale until the next costing recosts them"
    cost(conn, NOV)
    assert checks.check_period(conn, NOV).ok, checks.check_period(conn, NOV).problems


def test_redate__a_stock_document_into_a_period_being_costed_is_refused(
    conn: psycopg.Connection[Any], books: None
) -> None:
    late_stock_invoice(conn)
    with conn.transaction():
        costing.solve_period(conn, NOV)  # solved, no store costed yet
    with pytest.raises(BadInput, match=f"--into {NOV}: {NOV} is being costed"):
        redate(conn, "SI-11")
    assert status(conn, "SI-11")["posting_period"] == OCT
    [done] = redate(conn, "SI-9")  # no stock lines: posting can still take it
    assert done.period == NOV
