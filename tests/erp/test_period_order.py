"""Month-end order (issue 35): costing from fresh facts, periods in order, posting by date.

Each test is a finding of the audit, tried as the accountant (or a bug, in
SQL) did: an opening or a standard cost migrated while a period is being
costed, a fact changed behind costing's back, a period closed or reopened
out of order, a store opened in December, documents dated in a closed month
or a later one. Real PostgreSQL; the flows' own functions, and the migration
flow through a worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbpool import built_once
from erp_books import close, cost, post
from harness import engine_cli, fast_settings, run_of, thread_worker, wait_job_ended

from engine import Fail, Refused, Registry, submit
from engine.config import Settings
from engine.reports import render_job_report
from flows import costing
from flows.erp import checks, dated, periods
from flows.erp.document_posting import select_chunks
from flows.tools.seed import seed

OCT, NOV, DEC, JAN = "2026-10", "2026-11", "2026-12", "2027-01"
FLOWS = ["flows.costing", "flows.posting", "flows.close", "flows.migration"]


@pytest.fixture
def books(conn: psycopg.Connection[Any]) -> None:
    """Three stores (the third opened this month, stocked by a transfer), November posted;
    October closed with a few sales invoices dated in it, unposted."""

    def build(c: psycopg.Connection[Any]) -> None:
        seed(c, stores=3, brands=1, employees=3, items=5, period=NOV, seed=9, new_stores=1)
        post(c, NOV)

    built_once(conn, "test_period_order.books", build)


@pytest.fixture
def registry() -> Registry:
    return Registry.load(FLOWS)


@pytest.fixture
def fast(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("ENGINE_REPORTS_DIR", str(tmp_path / "reports"))
    return fast_settings(
        settings, flow_modules=FLOWS, concurrency=2, reports_dir=tmp_path / "reports"
    )


@pytest.fixture
def worker(fast: Settings, registry: Registry, books: None) -> Iterator[None]:
    with thread_worker(fast, registry):
        yield


def migrate(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], source: Path, kind: str
) -> dict[str, Any]:
    job = submit(
        "migration", {"source": str(source), "kind": kind}, settings=fast, registry=registry
    )
    assert wait_job_ended(conn, job.job_id, timeout=120) == "done"
    return dict(run_of(conn, job.job_id, "report")["output"])


def rejects(conn: psycopg.Connection[Any]) -> dict[int, str]:
    rows = conn.execute("SELECT row_number, reason FROM erp_migration_rejects").fetchall()
    return {r["row_number"]: r["reason"] for r in rows}


def cost_one(conn: psycopg.Connection[Any], period: str, code: str) -> None:
    """Cost one store as ``engine submit costing --store CODE`` does: the solve is the
    period's (every store's averages), then that store."""
    with conn.transaction():
        plan = costing.plan_costing(conn, period, code)
        periods.ensure_period(conn, plan.next_period)
        costing.solve_period(conn, period)
        for store in plan.stores:
            costing.cost_one_store(conn, period, store)


def moving(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """An item moving between stores in November, its receiver and its sender."""
    row = conn.execute(
        "SELECT i.id, i.sku, m.store_id AS receiver, m.counterpart_store_id AS sender, "
        "r.code AS receiver_code, s.code AS sender_code "
        "FROM erp_stock_moves m JOIN erp_items i ON i.id = m.item_id "
        "JOIN erp_stores r ON r.id = m.store_id JOIN erp_stores s ON s.id = m.counterpart_store_id "
        "WHERE m.period = %s AND m.kind = 'transfer_in' ORDER BY m.id LIMIT 1",
        (NOV,),
    ).fetchone()
    assert row is not None, "the seed moves an item between stores"
    return dict(row)


def status(conn: psycopg.Connection[Any], period: str) -> str | None:
    row = conn.execute("SELECT status FROM erp_periods WHERE period = %s", (period,)).fetchone()
    return None if row is None else str(row["status"])


# -- 4. costing never uses stale facts ---------------------------------------------------


def test_stale_facts__an_opening_migrated_into_an_uncosted_store_while_costing_is_refused(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None, tmp_path: Path
) -> None:
    item = moving(conn)
    sender = item["sender_code"]
    other = "ST001" if sender != "ST001" else "ST002"
    cost_one(conn, NOV, other)  # solves every store's averages, costs one store
    averages = conn.execute("SELECT * FROM erp_item_averages ORDER BY 1, 2, 3").fetchall()
    source = tmp_path / "openings.csv"
    source.write_text(f"store_code,sku,period,qty,value\n{sender},{item['sku']},{NOV},40,8000\n")
    before = conn.execute("SELECT * FROM erp_opening_balances ORDER BY 1, 2, 3").fetchall()

    summary = migrate(fast, registry, conn, source, "opening-balances")

    assert (summary["inserted"], summary["updated"], summary["rejected"]) == (0, 0, 1)
    reason = rejects(conn)[1]
    assert reason.startswith(f"period {NOV} is being costed (its averages were solved at ")
    assert "an opening loaded now would be costed with stale averages" in reason
    assert conn.execute("SELECT * FROM erp_opening_balances ORDER BY 1, 2, 3").fetchall() == before
    # the rest of the stores are costed from the facts the averages were solved from
    cost(conn, NOV)
    assert status(conn, NOV) == "costed"
    assert conn.execute("SELECT * FROM erp_item_averages ORDER BY 1, 2, 3").fetchall() == averages
    assert checks.check_period(conn, NOV).ok


def test_stale_facts__an_opening_changed_in_sql_after_the_solve_is_named_never_costed(
    conn: psycopg.Connection[Any], books: None
) -> None:
    item = moving(conn)
    other = "ST001" if item["sender_code"] != "ST001" else "ST002"
    cost_one(conn, NOV, other)
    # a bug, or an attacker, writes the sender's opening behind costing's back
    conn.execute(
        "INSERT INTO erp_opening_balances (store_id, item_id, period, qty, value) "
        "VALUES (%s, %s, %s, 40, 8000) ON CONFLICT (store_id, item_id, period) "
        "DO UPDATE SET qty = 40, value = 8000",
        (item["sender"], item["id"], NOV),
    )
    costed = conn.execute("SELECT count(*) AS n FROM erp_item_costs").fetchone()

    with pytest.raises(Fail) as failed:
        cost(conn, NOV)

    message = str(failed.value)
    assert f"the facts of {NOV} changed after its averages were solved at " in message
    assert f"items moving between stores at {item['sender_code']}" in message
    assert "nothing is costed" in message
    assert conn.execute("SELECT count(*) AS n FROM erp_item_costs").fetchone() == costed
    report = checks.check_period(conn, NOV)
    assert not report.ok
    [problem] = [p for p in report.problems if p.startswith("facts unchanged since the solve")]
    assert item["sender_code"] in problem and "its costs are stale" in problem


def test_stale_facts__a_standard_cost_change_waits_until_the_period_is_costed(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None, tmp_path: Path
) -> None:
    cost_one(conn, NOV, "ST001")
    item = conn.execute(
        "SELECT i.sku, b.code AS brand, i.name, i.standard_cost, i.price FROM erp_items i "
        "JOIN erp_brands b ON b.id = i.brand_id ORDER BY i.id LIMIT 1"
    ).fetchone()
    assert item is not None
    source = tmp_path / "items.csv"
    new_cost = item["standard_cost"] + 1
    source.write_text(
        "sku,brand_code,name,standard_cost,price\n"
        f"{item['sku']},{item['brand']},{item['name']},{new_cost},{item['price']}\n"
    )

    refused = migrate(fast, registry, conn, source, "items")

    assert (refused["updated"], refused["rejected"], refused["cost_changed"]) == (0, 1, 0)
    reason = rejects(conn)[1]
    assert reason.startswith(f"standard cost of {item['sku']} {item['standard_cost']} -> ")
    assert f"period {NOV} is being costed" in reason
    assert f"engine submit costing --period {NOV}" in reason
    cost(conn, NOV)  # every store with one standard cost
    loaded = migrate(fast, registry, conn, source, "items")
    assert (loaded["updated"], loaded["cost_changed"]) == (1, 1)
    assert checks.check_period(conn, NOV).ok, "a costed period's costs do not go stale"


def test_stale_facts__a_new_item_loaded_while_costing_does_not_stale_the_period(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None, tmp_path: Path
) -> None:
    """An item the period never moved is not a fact of its costing: loading it mid-costing
    (a nightly items migration beside month-end) leaves the solve fresh."""
    cost_one(conn, NOV, "ST001")
    brand = conn.execute("SELECT code FROM erp_brands ORDER BY id LIMIT 1").fetchone()
    assert brand is not None
    source = tmp_path / "items.csv"
    source.write_text(
        f"sku,brand_code,name,standard_cost,price\nNEW-0001,{brand['code']},New shirt,12.5,29.90\n"
    )

    loaded = migrate(fast, registry, conn, source, "items")

    assert (loaded["inserted"], loaded["rejected"]) == (1, 0)
    cost(conn, NOV)
    assert status(conn, NOV) == "costed"
    assert checks.check_period(conn, NOV).ok


def test_stale_facts__a_document_that_moves_stock_is_not_posted_once_the_period_is_solved(
    conn: psycopg.Connection[Any], books: None
) -> None:
    item = moving(conn)
    other = "ST001" if item["sender_code"] != "ST001" else "ST002"
    cost_one(conn, NOV, other)
    doc = _document(conn, "SI-LATE-STOCK", NOV, "2026-11-29")
    conn.execute(
        "UPDATE erp_document_lines SET item_id = %s, qty = 1 "
        "WHERE document_id = %s AND line_no = 2",
        (item["id"], doc),
    )
    with (
        pytest.raises(
            Refused, match=f"cannot post 1 document.* into {NOV}: its stock is being costed"
        ),
        conn.transaction(),
    ):
        select_chunks(conn, NOV)
    assert checks.check_period(conn, NOV).ok


# -- 5. periods in order -----------------------------------------------------------------


def three_months(conn: psycopg.Connection[Any]) -> None:
    """November, December and January costed (December and January have no documents)."""
    cost(conn, NOV)
    cost(conn, DEC)
    cost(conn, JAN)


def test_order__december_does_not_close_while_november_is_only_costed(
    conn: psycopg.Connection[Any], books: None
) -> None:
    three_months(conn)
    with pytest.raises(Refused) as refused:
        close(conn, DEC)
    assert str(refused.value) == (
        f"cannot close {DEC}: periods close in order and {NOV} is costed (stores ST001, "
        f"ST002, ST003): close {NOV} first (engine books close --period {NOV})"
    )
    assert status(conn, DEC) == "costed"
    close(conn, NOV)
    close(conn, DEC)
    assert status(conn, DEC) == "closed"


def test_order__the_close_flow_is_refused_at_submit_while_an_earlier_period_is_open(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], books: None
) -> None:
    cost(conn, NOV)
    with pytest.raises(Refused, match=f"cannot close {DEC}: periods close in order and {NOV}"):
        submit("close", {"period": DEC}, settings=fast, registry=registry)
    count = conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone()
    assert count == {"n": 0}, "a refused submit makes no job"


def test_order__a_reopen_with_later_periods_closed_is_refused_or_cascades_latest_first(
    conn: psycopg.Connection[Any], books: None
) -> None:
    three_months(conn)
    for period in (NOV, DEC, JAN):
        close(conn, period)

    with pytest.raises(Refused) as refused, conn.transaction():
        periods.reopen(conn, NOV, actor="ann", reason="a late supplier invoice")
    assert str(refused.value) == (
        f"cannot reopen {NOV}: later period(s) {DEC}, {JAN} are closed and kept balances that "
        "start from it; reopen them first, latest first, or all at once with --cascade "
        f"(engine books reopen --period {NOV} --cascade --reason ...)"
    )
    assert [status(conn, p) for p in (NOV, DEC, JAN)] == ["closed"] * 3

    with conn.transaction():
        events = periods.reopen_all(
            conn, NOV, actor="ann", reason="a late supplier invoice", cascade=True
        )
    assert [(e.period, e.action, e.reason) for e in events] == [
        (JAN, "reopened", f"a late supplier invoice (with {NOV})"),
        (DEC, "reopened", f"a late supplier invoice (with {NOV})"),
        (NOV, "reopened", "a late supplier invoice"),
    ]
    assert [status(conn, p) for p in (NOV, DEC, JAN)] == ["costed"] * 3
    # and they close again, in order
    for period in (NOV, DEC, JAN):
        close(conn, period)


def test_order__the_cli_reopen_cascade(
    settings: Settings, conn: psycopg.Connection[Any], books: None
) -> None:
    cost(conn, NOV)
    cost(conn, DEC)
    close(conn, NOV)
    close(conn, DEC)
    refused = engine_cli(settings, "books", "reopen", "--period", NOV, "--reason", "fix")
    assert refused.returncode == 2, refused.stderr
    assert f"later period(s) {DEC} are closed" in refused.stderr
    done = engine_cli(
        settings, "books", "reopen", "--period", NOV, "--reason", "fix", "--cascade", "--by", "ann"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"period {DEC} reopened by ann: fix (with {NOV})",
        f"period {NOV} reopened by ann: fix",
    ]


def test_order__a_period_with_an_unposted_document_dated_in_it_does_not_close(
    conn: psycopg.Connection[Any], books: None
) -> None:
    cost(conn, NOV)
    conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on) "
        "SELECT max(id) + 1, 'SI-LATE-1', 'sales_invoice', %s, 1, "
        "(SELECT min(id) FROM erp_employees WHERE store_id = 1), '2026-11-30' FROM erp_documents",
        (DEC,),  # entered under December, dated in November
    )
    with pytest.raises(Refused) as refused:
        close(conn, NOV)
    assert str(refused.value) == (
        f"cannot close {NOV}: 1 unposted document(s) are dated in it (SI-LATE-1): post them "
        f"(engine submit posting --period {NOV}) or correct their dates first"
    )
    assert status(conn, NOV) == "costed"


def test_order__a_store_opened_in_december_does_not_block_november(
    conn: psycopg.Connection[Any], books: None
) -> None:
    conn.execute("INSERT INTO erp_periods (period) VALUES (%s)", (DEC,))
    conn.execute("INSERT INTO erp_stores VALUES (9, 'ST009', 1, 'New store', 'small')")
    conn.execute(
        "INSERT INTO erp_store_periods (store_id, period, opening) VALUES (9, %s, 'loaded')", (DEC,)
    )
    cost(conn, NOV)
    assert status(conn, NOV) == "costed"
    close(conn, NOV)
    assert status(conn, NOV) == "closed"
    # its books start in December: costed there with the others
    cost(conn, DEC)
    close(conn, DEC)
    assert checks.check_period(conn, DEC).ok


# -- 6. posting by date ------------------------------------------------------------------


def _document(conn: psycopg.Connection[Any], number: str, entered: str, dated_on: str) -> int:
    row = conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on) "
        "SELECT max(id) + 1, %s, 'sales_invoice', %s, 1, "
        "(SELECT min(id) FROM erp_employees WHERE store_id = 1), %s FROM erp_documents "
        "RETURNING id",
        (number, entered, dated_on),
    ).fetchone()
    assert row is not None
    conn.execute(
        "INSERT INTO erp_document_lines (document_id, line_no, account_code, debit, credit) "
        "VALUES (%s, 1, '1000', 12.00, 0), (%s, 2, '4000', 0, 12.00)",
        (row["id"], row["id"]),
    )
    return int(row["id"])


def test_by_date__documents_dated_in_a_closed_or_later_month_are_not_posted_into_november(
    conn: psycopg.Connection[Any], books: None
) -> None:
    conn.execute("INSERT INTO erp_periods (period) VALUES (%s)", (DEC,))
    late = _document(conn, "SI-OCT-1", NOV, "2026-10-15")  # dated in closed October
    early = _document(conn, "SI-MAR-1", NOV, "2027-03-01")  # dated in a month not yet open
    december = _document(conn, "SI-DEC-NOV", DEC, "2026-11-20")  # entered later, dated here

    post(conn, NOV)

    rows = conn.execute(
        "SELECT d.id, d.status, j.period FROM erp_documents d "
        "LEFT JOIN erp_journals j ON j.source_key = 'document:' || d.id "
        "WHERE d.id IN (%s, %s, %s) ORDER BY d.id",
        (late, early, december),
    ).fetchall()
    assert rows == [
        {"id": late, "status": "unposted", "period": None},
        {"id": early, "status": "unposted", "period": None},
        {"id": december, "status": "posted", "period": NOV},
    ]
    waiting = dated.waiting(conn)
    assert [(w.period, w.documents) for w in waiting] == [(OCT, waiting[0].documents)]
    assert "SI-OCT-1" in waiting[0].examples or waiting[0].documents > 5
    assert waiting[0].text.startswith(
        f"{waiting[0].documents} document(s) dated in closed {OCT} wait ("
    )
    assert f"reopen {OCT} to post them (engine books reopen --period {OCT}" in waiting[0].text
    # the check lists them, and still passes: they inform, they do not fail
    report = checks.check_period(conn, NOV)
    assert report.ok, report.problems
    assert report.waiting == waiting


def test_by_date__stock_moves_are_in_the_month_the_document_is_dated_in(
    conn: psycopg.Connection[Any], books: None
) -> None:
    # the seed dates every document in the month it is entered under: the demo's books stay
    elsewhere = conn.execute(
        "SELECT count(*) AS n FROM erp_documents WHERE period <> date_period"
    ).fetchone()
    assert elsewhere == {"n": 0}
    wrong = conn.execute(
        "SELECT count(*) AS n FROM erp_stock_moves m JOIN erp_documents d ON d.id = m.document_id "
        "WHERE m.period <> d.date_period"
    ).fetchone()
    assert wrong == {"n": 0}
    journals = conn.execute(
        "SELECT count(*) AS n FROM erp_journals j JOIN erp_documents d "
        "ON j.source_key = 'document:' || d.id WHERE j.period <> d.date_period"
    ).fetchone()
    assert journals == {"n": 0}


def test_by_date__books_check_lists_the_waiting_documents_and_exits_0(
    settings: Settings, conn: psycopg.Connection[Any], books: None
) -> None:
    result = engine_cli(settings, "books", "check", "--period", NOV)
    assert result.returncode == 0, result.stderr
    [line] = [x for x in result.stdout.splitlines() if x.startswith("  wait  ")]
    assert f"document(s) dated in closed {OCT} wait" in line
    assert f"engine books reopen --period {OCT}" in line


def test_by_date__a_closed_month_is_never_posted(
    conn: psycopg.Connection[Any], books: None
) -> None:
    waiting = {w.period: w.documents for w in dated.waiting(conn)}
    with pytest.raises(Refused, match=f"period {OCT} is closed"), conn.transaction():
        select_chunks(conn, OCT)
    assert {w.period: w.documents for w in dated.waiting(conn)} == waiting


def test_by_date__the_close_report_lists_the_documents_waiting_in_closed_months(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None
) -> None:
    waiting = dated.waiting(conn)
    assert [w.period for w in waiting] == [OCT], "the seed dates a few invoices in October"
    job = submit("close", {"period": NOV}, settings=fast, registry=registry)
    assert wait_job_ended(conn, job.job_id, timeout=180) == "done"
    month_end = run_of(conn, job.job_id, "month_end")["output"]
    assert month_end["waiting"] == [w.model_dump() for w in waiting]
    page = Path(render_job_report(fast, job.job_id, registry=registry)).read_text(encoding="utf-8")
    assert "Documents waiting in closed months" in page
    assert f"documents dated in closed {OCT} wait: reopen {OCT}" in page
