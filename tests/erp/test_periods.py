"""Period integrity: costing in period order per store, closed periods never written.

Every sequence an accountant could try, through submits and workers on real
PostgreSQL: single-store then all-store costing in both orders, the next
period before the previous one, close refused and then done, a close racing
a posting chunk behind a barrier (both ways), and migration into periods
the books have moved past.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbpool import built_once
from harness import fast_settings, run_of, thread_worker, wait_job_ended, wait_until

from engine import BadInput, Fail, Refused, Registry, submit
from engine.config import Settings
from engine.store.db import connect
from flows.erp import checks, document_posting, periods
from flows.tools.seed import seed

NOV, DEC, JAN = "2026-11", "2026-12", "2027-01"
FLOWS = ["flows.costing", "flows.posting", "flows.close", "flows.migration"]


@pytest.fixture
def registry() -> Registry:
    return Registry.load(FLOWS)


@pytest.fixture
def fast(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("ENGINE_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("ERP_POSTING_CHUNK_SIZE", "20")
    return fast_settings(
        settings, flow_modules=FLOWS, concurrency=3, reports_dir=tmp_path / "reports"
    )


@pytest.fixture
def books(conn: psycopg.Connection[Any]) -> None:
    """Four stores of two brands, November seeded (open, openings loaded) and its documents
    posted (costing values posted moves), October closed."""

    def build(c: psycopg.Connection[Any]) -> None:
        seed(c, stores=4, brands=2, employees=8, items=10, period=NOV, seed=11)
        document_posting.post_documents(c, NOV, 1, 10**9)

    built_once(conn, "test_periods.books", build)


@pytest.fixture
def worker(fast: Settings, registry: Registry, books: None) -> Iterator[None]:
    with thread_worker(fast, registry):
        yield


def run(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], flow: str, **params: Any
) -> uuid.UUID:
    job = submit(flow, params, settings=fast, registry=registry)
    assert wait_job_ended(conn, job.job_id, timeout=120) == "done", flow
    return job.job_id


def output(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str) -> Any:
    return run_of(conn, job_id, step)["output"]


def snapshot(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Everything costing and posting write, to compare before and after."""
    return {
        name: conn.execute(query).fetchall()
        for name, query in {
            "costs": "SELECT * FROM erp_item_costs ORDER BY period, store_id, item_id",
            "openings": "SELECT * FROM erp_opening_balances ORDER BY period, store_id, item_id",
            "journals": "SELECT id, source_key FROM erp_journals ORDER BY id",
            "lines": "SELECT * FROM erp_journal_lines ORDER BY journal_id, line_no",
        }.items()
    }


def assert_books_check(conn: psycopg.Connection[Any], *periods_: str) -> None:
    for period in periods_:
        report = checks.check_period(conn, period)
        assert report.ok, report.problems


def stores_costed(conn: psycopg.Connection[Any], period: str) -> list[str]:
    rows = conn.execute(
        "SELECT s.code FROM erp_store_periods sp JOIN erp_stores s ON s.id = sp.store_id "
        "WHERE sp.period = %s AND sp.costed_at IS NOT NULL ORDER BY s.code",
        (period,),
    ).fetchall()
    return [r["code"] for r in rows]


def period_status(conn: psycopg.Connection[Any], period: str) -> str | None:
    row = conn.execute("SELECT status FROM erp_periods WHERE period = %s", (period,)).fetchone()
    return None if row is None else str(row["status"])


# -- costing order -----------------------------------------------------------------------


def test_accountant__one_store_then_the_next_period_for_all_is_refused_naming_them(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None
) -> None:
    run(fast, registry, conn, "costing", period=NOV, store="ST001")
    assert stores_costed(conn, NOV) == ["ST001"]
    assert period_status(conn, NOV) == "open", "one store does not make the period costed"
    before = snapshot(conn)
    with pytest.raises(Refused) as refused:
        submit("costing", {"period": DEC}, settings=fast, registry=registry)
    assert str(refused.value) == (
        "cannot cost 2026-12: 3 store(s) have no starting point for it; stores ST002, ST003, "
        "ST004 need 2026-11 costed first (engine submit costing --period 2026-11)"
    )
    assert snapshot(conn) == before, "a refused submit writes nothing"

    # in order, it goes through: ST001 is not costed twice, the rest are costed
    nov = run(fast, registry, conn, "costing", period=NOV)
    assert stores_costed(conn, NOV) == ["ST001", "ST002", "ST003", "ST004"]
    assert period_status(conn, NOV) == "costed"
    assert output(conn, nov, "mark_costed") == {"period": NOV, "marked_costed": True}
    run(fast, registry, conn, "costing", period=DEC)
    assert period_status(conn, DEC) == "costed"
    assert_books_check(conn, NOV, DEC)


def test_accountant__all_stores_then_one_store_again_reads_what_is_there(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None
) -> None:
    first = run(fast, registry, conn, "costing", period=NOV)
    before = snapshot(conn)
    again = run(fast, registry, conn, "costing", period=NOV, store="ST002")
    assert snapshot(conn) == before
    [store] = output(conn, again, "summarize")["per_store"]
    [same] = [
        s for s in output(conn, first, "summarize")["per_store"] if s["store"]["code"] == "ST002"
    ]
    assert store == same
    assert output(conn, again, "mark_costed")["marked_costed"] is False
    assert_books_check(conn, NOV)


def test_accountant__single_stores_one_by_one_mark_the_period_costed_with_the_last(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None
) -> None:
    for code in ("ST003", "ST001", "ST004"):
        run(fast, registry, conn, "costing", period=NOV, store=code)
        assert period_status(conn, NOV) == "open"
    run(fast, registry, conn, "costing", period=NOV, store="ST002")
    assert period_status(conn, NOV) == "costed"
    history = periods.history(conn, NOV)
    assert [e.action for e in history] == ["costed"]
    assert history[0].actor.startswith("costing job ")
    # each store's closing balances carried to December: every store can cost it
    run(fast, registry, conn, "costing", period=DEC)
    assert_books_check(conn, NOV, DEC)


def test_accountant__a_period_two_ahead_is_refused_and_an_unknown_store_too(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None
) -> None:
    with pytest.raises(Refused, match="period 2026-12 does not exist in erp_periods"):
        submit("costing", {"period": DEC}, settings=fast, registry=registry)
    run(fast, registry, conn, "costing", period=NOV)
    conn.execute("INSERT INTO erp_periods (period) VALUES (%s)", (JAN,))
    with pytest.raises(
        Refused, match=r"stores ST001, ST002, ST003, ST004 need 2026-12 costed first"
    ):
        submit("costing", {"period": JAN}, settings=fast, registry=registry)
    with pytest.raises(Refused, match="unknown store 'ST999'"):
        submit("costing", {"period": NOV, "store": "ST999"}, settings=fast, registry=registry)


def test_plan_step__checks_again_when_admission_was_passed_earlier(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], books: None
) -> None:
    """A job admitted while a store had its start, retried after it lost it, fails in plan."""
    job = submit("costing", {"period": NOV}, settings=fast, registry=registry)
    conn.execute("DELETE FROM erp_opening_balances WHERE store_id = 2")
    conn.execute("DELETE FROM erp_store_periods WHERE store_id = 2")
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id, timeout=60) == "failed"
    error = conn.execute(
        "SELECT error FROM engine_step_runs WHERE job_id = %s AND step = 'check_period'",
        (job.job_id,),
    ).fetchone()
    assert error is not None and "store ST002 needs opening balances" in error["error"]["message"]
    assert conn.execute("SELECT count(*) AS n FROM erp_item_costs").fetchone() == {"n": 0}


# -- close and reopen --------------------------------------------------------------------


def close(conn: psycopg.Connection[Any], period: str, by: str = "ann") -> periods.PeriodEvent:
    with conn.transaction():
        return periods.close(conn, period, actor=by)


def test_close__refused_until_every_store_is_costed_and_no_job_of_the_period_runs(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], books: None
) -> None:
    with pytest.raises(
        Refused, match=r"cannot close 2026-11: stores ST001, ST002, ST003, ST004 not costed"
    ):
        close(conn, NOV)
    with thread_worker(fast, registry):
        run(fast, registry, conn, "posting", period=NOV)
        run(fast, registry, conn, "costing", period=NOV)
    held = submit("posting", {"period": NOV}, settings=fast, registry=registry)  # no worker
    with pytest.raises(
        Refused, match=f"1 job\\(s\\) of the period are active: posting {held.job_id}"
    ):
        close(conn, NOV)
    conn.execute(
        "UPDATE engine_jobs SET status = 'cancelled', finished_at = now() WHERE id = %s",
        (held.job_id,),
    )
    event = close(conn, NOV)
    assert (event.action, event.actor) == ("closed", "ann")
    assert period_status(conn, NOV) == "closed"
    with pytest.raises(Refused, match="period 2026-11 is closed already \\(by ann at "):
        close(conn, NOV)
    assert_books_check(conn, NOV)


def test_close__a_closed_period_refuses_every_writer_until_reopened_with_a_reason(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None, tmp_path: Path
) -> None:
    run(fast, registry, conn, "posting", period=NOV)
    run(fast, registry, conn, "costing", period=NOV)
    close(conn, NOV)
    before = snapshot(conn)
    for flow, params in (
        ("posting", {}),
        ("costing", {}),
        ("costing", {"store": "ST001"}),
        ("close", {}),
    ):
        with pytest.raises(Refused, match="period 2026-11 is closed"):
            submit(flow, {"period": NOV, **params}, settings=fast, registry=registry)
    source = tmp_path / "openings.csv"
    source.write_text("store_code,sku,period,qty,value\nST001,BR1-0001,2026-11,5,50\n")
    migrated = run(fast, registry, conn, "migration", source=str(source), kind="opening-balances")
    assert output(conn, migrated, "report")["rejected"] == 1
    assert snapshot(conn) == before

    with conn.transaction(), pytest.raises(BadInput, match="--reason: required"):
        periods.reopen(conn, NOV, actor="ann", reason="  ")
    with conn.transaction():
        periods.reopen(conn, NOV, actor="bob", reason="late supplier invoice")
    assert period_status(conn, NOV) == "costed"
    run(fast, registry, conn, "posting", period=NOV)  # allowed again (nothing left to post)
    close(conn, NOV, by="bob")
    history = [(e.action, e.actor, e.reason) for e in periods.history(conn, NOV)]
    assert history[1:] == [
        ("closed", "ann", ""),
        ("reopened", "bob", "late supplier invoice"),
        ("closed", "bob", ""),
    ]
    assert_books_check(conn, NOV)


def _costed_and_posted_but_one_chunk(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> document_posting.Chunk:
    """November posted and costed; three late service invoices (no stock lines) wait in
    one chunk, which the test posts itself."""
    with thread_worker(fast, registry):
        run(fast, registry, conn, "posting", period=NOV)
        run(fast, registry, conn, "costing", period=NOV)
    _late_service_invoices(conn)
    with connect(fast) as c:
        selection = document_posting.select_chunks(c, NOV)
    return selection.chunks[-1]


def _late_service_invoices(conn: psycopg.Connection[Any]) -> None:
    """Three service invoices (no stock lines) dated in November, unposted."""
    conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on) "
        "SELECT m + n, 'SI-LATE-' || n, 'sales_invoice', %s, 1, "
        "(SELECT min(id) FROM erp_employees WHERE store_id = 1), '2026-11-30' "
        "FROM (SELECT max(id) AS m FROM erp_documents) AS d, generate_series(1, 3) AS n",
        (NOV,),
    )
    conn.execute(
        "INSERT INTO erp_document_lines (document_id, line_no, account_code, debit, credit) "
        "SELECT id, 1, '1000', 12.00, 0 FROM erp_documents WHERE number LIKE 'SI-LATE-%%' "
        "UNION ALL SELECT id, 2, '4000', 0, 12.00 FROM erp_documents "
        "WHERE number LIKE 'SI-LATE-%%'"
    )


def _waiting_on_lock(conn: psycopg.Connection[Any], query_start: str) -> bool:
    # statements reach the server with their leading comment (flows/erp/sql/periods.sql)
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query LIKE %s",
        (query_start + "%",),
    ).fetchone()
    return row is not None and row["n"] > 0


def test_close_racing_a_posting_chunk__close_waits_for_the_chunk_in_flight(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], books: None
) -> None:
    chunk = _costed_and_posted_but_one_chunk(fast, registry, conn)
    chunk_written, close_waiting = threading.Event(), threading.Event()

    def post() -> document_posting.ChunkResult:
        with connect(fast) as c:  # one transaction, as a step's fenced one
            result = document_posting.post_one_chunk(c, NOV, chunk)
            chunk_written.set()
            assert close_waiting.wait(30)
            return result  # commits on leaving

    def close_period() -> periods.PeriodEvent:
        assert chunk_written.wait(30)
        with connect(fast) as c:
            return periods.close(c, NOV, actor="ann")

    with ThreadPoolExecutor(2) as pool:
        posted, closed = pool.submit(post), pool.submit(close_period)
        wait_until(
            lambda: (
                closed.done()
                or _waiting_on_lock(conn, "-- Close and reopen take the period's row exclusively")
            ),
            what="close to wait",
        )
        if closed.done():
            closed.result()
        assert not closed.done()
        close_waiting.set()
        assert posted.result(timeout=30).posted > 0
        event = closed.result(timeout=30)
    late = conn.execute(
        "SELECT count(*) AS n FROM erp_journals WHERE period = %s AND posted_at > %s",
        (NOV, event.at),
    ).fetchone()
    assert late == {"n": 0}
    assert_books_check(conn, NOV)


def test_close_racing_a_posting_chunk__a_chunk_after_the_close_writes_nothing(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], books: None
) -> None:
    with thread_worker(fast, registry):
        run(fast, registry, conn, "posting", period=NOV)
        run(fast, registry, conn, "costing", period=NOV)
    before = snapshot(conn)
    last = conn.execute("SELECT max(id) AS m FROM erp_documents").fetchone()
    assert last is not None
    chunk = document_posting.Chunk(first_id=last["m"] + 1, last_id=last["m"] + 3, count=3)
    closed_uncommitted, chunk_waiting = threading.Event(), threading.Event()

    def close_period() -> None:
        with connect(fast) as c:
            periods.close(c, NOV, actor="ann")
            # a period with unposted documents dated in it does not close: the late ones come
            # in the close's transaction, seen by the chunk only once the close has committed
            _late_service_invoices(c)
            closed_uncommitted.set()
            assert chunk_waiting.wait(30)

    def post() -> document_posting.ChunkResult:
        assert closed_uncommitted.wait(30)
        with connect(fast) as c:
            return document_posting.post_one_chunk(c, NOV, chunk)

    with ThreadPoolExecutor(2) as pool:
        closed, posted = pool.submit(close_period), pool.submit(post)
        wait_until(
            lambda: _waiting_on_lock(conn, "-- Every step that writes a period's books takes this"),
            what="the chunk to wait",
        )
        assert not posted.done()
        chunk_waiting.set()
        closed.result(timeout=30)
        with pytest.raises(
            Fail,
            match=r"period 2026-11 is closed; posting documents .* the documents stay unposted",
        ):
            posted.result(timeout=30)
    assert snapshot(conn) == before
    assert_books_check(conn, NOV)


# -- migration respects the books --------------------------------------------------------


def test_migration__openings_into_a_costed_or_carried_period_are_rejected_with_reasons(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None, tmp_path: Path
) -> None:
    run(fast, registry, conn, "costing", period=NOV, store="ST001")
    conn.execute("INSERT INTO erp_stores VALUES (9, 'ST009', 1, 'New store', 'small')")
    sku = conn.execute(
        "SELECT sku FROM erp_items WHERE brand_id = 1 ORDER BY id LIMIT 1"
    ).fetchone()
    assert sku is not None
    source = tmp_path / "openings.csv"
    source.write_text(
        "store_code,sku,period,qty,value\n"
        f"ST001,{sku['sku']},2026-11,5,50\n"  # ST001 is costed for November
        f"ST001,{sku['sku']},2026-12,5,50\n"  # carried forward by that costing
        f"ST002,{sku['sku']},2026-12,5,50\n"  # ST002's books start in November
        f"ST002,{sku['sku']},2026-10,5,50\n"  # October is closed
        f"ST009,{sku['sku']},2026-11,7,70\n"  # November is being costed: too late to start
        f"ST009,{sku['sku']},2026-12,7,70\n"  # a new store starts in December: loaded
    )
    before = snapshot(conn)
    job = run(fast, registry, conn, "migration", source=str(source), kind="opening-balances")
    summary = output(conn, job, "report")
    assert (summary["inserted"], summary["rejected"]) == (1, 5)
    reasons = {
        r["row_number"]: r["reason"]
        for r in conn.execute("SELECT row_number, reason FROM erp_migration_rejects")
    }
    assert reasons == {
        1: "store ST001 is costed for 2026-11; its opening balances are never overwritten",
        2: "store ST001's 2026-12 opening balances were carried forward by costing the "
        "period before; they are never overwritten",
        3: "store ST002's books start in 2026-11: opening balances are loaded only into a "
        "store's first period",
        4: "period 2026-10 is closed; its opening balances are never overwritten",
        5: reasons[5],
    }
    assert reasons[5].startswith(
        "period 2026-11 is being costed (its averages were solved at "
    ) and reasons[5].endswith(
        "an opening loaded now would be costed with stale averages; opening balances are "
        "loaded before a period's costing starts"
    )
    after = snapshot(conn)
    assert after["costs"] == before["costs"]
    new = [o for o in after["openings"] if o not in before["openings"]]
    assert [(o["store_id"], o["period"], o["qty"]) for o in new] == [(9, DEC, 7)]
    # the new store's books start in December: November is costed for every other store
    run(fast, registry, conn, "costing", period=NOV)
    assert period_status(conn, NOV) == "costed"
    assert_books_check(conn, NOV)


def test_migration__a_costed_period_rejects_every_opening(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None, tmp_path: Path
) -> None:
    run(fast, registry, conn, "costing", period=NOV)
    conn.execute("INSERT INTO erp_stores VALUES (9, 'ST009', 1, 'New store', 'small')")
    source = tmp_path / "openings.csv"
    sku = conn.execute("SELECT sku FROM erp_items ORDER BY id LIMIT 1").fetchone()
    assert sku is not None
    source.write_text(f"store_code,sku,period,qty,value\nST009,{sku['sku']},2026-11,7,70\n")
    before = snapshot(conn)
    job = run(fast, registry, conn, "migration", source=str(source), kind="opening-balances")
    assert output(conn, job, "report")["rejected"] == 1
    reason = conn.execute("SELECT reason FROM erp_migration_rejects").fetchone()
    assert reason == {
        "reason": "period 2026-11 is costed; its opening balances are never overwritten"
    }
    assert snapshot(conn) == before
