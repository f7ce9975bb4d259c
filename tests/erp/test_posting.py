"""The posting flow on real PostgreSQL: end to end through a worker, and one chunk directly."""

from __future__ import annotations

import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from cli_zygote import run_engine
from harness import fast_settings, thread_worker, wait_job_ended, wait_until

from engine import Refused, Registry, connect, submit
from engine.config import Settings
from flows.erp.document_posting import post_documents

EVIL_MEMO = "'; DROP TABLE erp_documents; -- <script>alert(1)</script>"

# id -> (number, kind, period, memo, lines as (account, debit, credit[, item, qty, unit cost]))
DOCUMENTS: dict[int, tuple[str, str, str, str, list[tuple[Any, ...]]]] = {
    1: (
        "SI-1",
        "sales_invoice",
        "2026-11",
        "",
        [("1100", "120.00", "0"), ("4000", "0", "100.00", 1, 4), ("2100", "0", "20.00")],
    ),
    2: (
        "PI-2",
        "purchase_invoice",
        "2026-11",
        "",
        [("1300", "50.00", "0", 1, 5, "10.0000"), ("2000", "0", "50.00")],
    ),
    3: ("SI-3", "sales_invoice", "2026-11", "", [("1000", "120.00", "0"), ("4000", "0", "100.00")]),
    4: ("SI-4", "sales_invoice", "2026-11", "", [("1000", "10.00", "0"), ("9999", "0", "10.00")]),
    5: (
        "SI-5",
        "sales_invoice",
        "2026-11",
        EVIL_MEMO,
        [("1000", "30.00", "0"), ("4000", "0", "30.00")],
    ),
    6: ("CN-6", "credit_note", "2026-11", "", [("4100", "15.00", "0"), ("1000", "0", "15.00")]),
    7: ("ST-7", "stock_transfer", "2026-11", "", []),
    8: ("SI-8", "sales_invoice", "2026-11", "", [("1000", "7.50", "0"), ("4000", "0", "7.50")]),
    9: ("SI-9", "sales_invoice", "2026-10", "", [("1000", "10.00", "0"), ("4000", "0", "10.00")]),
    10: ("SI-10", "sales_invoice", "2026-12", "", [("1000", "1.00", "0"), ("4000", "0", "1.00")]),
}
GOOD = {1, 2, 5, 6, 8}
REJECTED = {
    3: "unbalanced: debit 120.00 != credit 100.00",
    4: "unknown account 9999 on line 2",
    7: "no lines; a stock transfer names no receiving store",
}


def insert_erp(conn: psycopg.Connection[Any]) -> None:
    """A tiny ERP: one brand, two stores, employees, an item, three periods, the documents."""
    conn.execute("INSERT INTO erp_brands (id, code, name) VALUES (1, 'B1', 'Brand one')")
    conn.execute(
        "INSERT INTO erp_stores (id, code, brand_id, name, size) VALUES "
        "(1, 'ST001', 1, 'Store one', 'small'), (2, 'ST002', 1, 'Store two', 'large')"
    )
    conn.execute(
        "INSERT INTO erp_employees (id, store_id, name, role) VALUES "
        "(1, 1, 'Ann', 'clerk'), (2, 2, 'Bob', 'manager')"
    )
    conn.execute(
        "INSERT INTO erp_items (id, brand_id, sku, name, standard_cost, price) "
        "VALUES (1, 1, 'SKU1', 'Shirt', 10, 25)"
    )
    conn.execute(
        "INSERT INTO erp_periods (period, status, costed_at, closed_at, closed_by) VALUES "
        "('2026-10', 'closed', now(), now(), 'test'), ('2026-11', 'open', NULL, NULL, NULL), "
        "('2026-12', 'open', NULL, NULL, NULL)"
    )
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO erp_documents "
            "(id, number, kind, period, store_id, employee_id, issued_on, memo) "
            # each dated in the month it is entered under (posting takes a month's by date)
            "VALUES (%s, %s, %s, %s, %s, %s, (%s || '-15')::date, %s)",
            [
                (i, number, kind, period, 1 + i % 2, 1 + i % 2, period, memo)
                for i, (number, kind, period, memo, _) in DOCUMENTS.items()
            ],
        )
        cur.executemany(
            "INSERT INTO erp_document_lines "
            "(document_id, line_no, account_code, debit, credit, item_id, qty, unit_cost) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (i, n, account, Decimal(debit), Decimal(credit), *(list(rest) + [None] * 3)[:3])
                for i, (*_, lines) in DOCUMENTS.items()
                for n, (account, debit, credit, *rest) in enumerate(lines, start=1)
            ],
        )


def documents(conn: psycopg.Connection[Any]) -> dict[int, dict[str, Any]]:
    rows = conn.execute("SELECT id, status, reject_reason FROM erp_documents").fetchall()
    return {r["id"]: r for r in rows}


def output(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str) -> Any:
    row = conn.execute(
        "SELECT output FROM engine_step_runs WHERE job_id = %s AND step = %s", (job_id, step)
    ).fetchone()
    assert row is not None
    return row["output"]


def journal_count(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) AS n FROM erp_journals").fetchone()
    assert row is not None
    return int(row["n"])


@pytest.fixture
def registry() -> Registry:
    return Registry.load(["flows.posting"])


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings, concurrency=3)


def run_posting(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], *periods: str
) -> list[uuid.UUID]:
    jobs = [
        submit("posting", {"period": p}, settings=fast, registry=registry).job_id for p in periods
    ]
    with thread_worker(fast, registry):
        for job_id in jobs:
            assert wait_job_ended(conn, job_id) == "done"
    return jobs


def test_posting__posts_good_documents_once_and_rejects_bad_ones_with_reasons(
    fast: Settings,
    registry: Registry,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERP_POSTING_CHUNK_SIZE", "2")
    insert_erp(conn)
    (november,) = run_posting(fast, registry, conn, "2026-11")
    with pytest.raises(Refused, match="period 2026-10 is closed; posting its documents would"):
        submit("posting", {"period": "2026-10"}, settings=fast, registry=registry)

    selection = output(conn, november, "select_documents")
    assert selection["selected"] == 8
    assert [(c["first_id"], c["last_id"], c["count"]) for c in selection["chunks"]] == [
        (1, 2, 2),
        (3, 4, 2),
        (5, 6, 2),
        (7, 8, 2),
    ]
    summary = output(conn, november, "reconcile")
    assert (summary["selected"], summary["posted"], summary["rejected"]) == (8, 5, 3)
    assert summary["debit"] == summary["credit"] == "222.50"
    assert {r["id"]: r["reason"] for r in summary["rejections"]} == {
        i: REJECTED[i] for i in (3, 4, 7)
    }

    docs = documents(conn)
    assert {i for i, d in docs.items() if d["status"] == "posted"} == GOOD
    assert {i: d["reject_reason"] for i, d in docs.items() if d["status"] == "rejected"} == REJECTED
    assert docs[10]["status"] == "unposted", "another period is left alone"
    assert docs[9]["status"] == "unposted", "a closed period's document waits for a reopen"

    journals = conn.execute(
        "SELECT j.source_key, j.store_id, j.memo, count(l.line_no) AS lines, "
        "sum(l.debit) AS debit, sum(l.credit) AS credit, "
        "bool_and(l.store_id = j.store_id) AS line_stores "
        "FROM erp_journals j JOIN erp_journal_lines l ON l.journal_id = j.id "
        "GROUP BY j.id"
    ).fetchall()
    assert sorted(j["source_key"] for j in journals) == sorted(f"document:{i}" for i in GOOD)
    for j in journals:
        assert j["debit"] == j["credit"] > 0, j
        assert j["line_stores"], j
        number = int(j["source_key"].split(":")[1])
        assert j["lines"] == len(DOCUMENTS[number][4])
        assert j["store_id"] == 1 + number % 2
    assert {j["memo"] for j in journals if j["source_key"] == "document:5"} == {EVIL_MEMO}

    total = conn.execute(
        "SELECT sum(debit) AS debit, sum(credit) AS credit FROM erp_journal_lines"
    ).fetchone()
    assert total == {"debit": Decimal("222.50"), "credit": Decimal("222.50")}


def test_posting__resubmitted_after_done_selects_nothing_and_changes_nothing(
    fast: Settings,
    registry: Registry,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERP_POSTING_CHUNK_SIZE", "2")
    insert_erp(conn)
    (first,) = run_posting(fast, registry, conn, "2026-11")
    before = (documents(conn), journal_count(conn))

    (second,) = run_posting(fast, registry, conn, "2026-11")

    assert second != first, "the first job was done, so this is a new job"
    assert output(conn, second, "select_documents")["chunks"] == []
    summary = output(conn, second, "reconcile")
    assert (summary["selected"], summary["posted"], summary["rejected"]) == (0, 0, 0)
    assert summary["period_journals"] == len(GOOD)
    assert (documents(conn), journal_count(conn)) == before


def test_posting__unknown_period_is_refused_naming_it(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)
    with pytest.raises(Refused, match="period 2031-01 does not exist in erp_periods"):
        submit("posting", {"period": "2031-01"}, settings=fast, registry=registry)


def test_posting__a_period_closed_after_submit_fails_the_job_and_posts_nothing(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)
    job = submit("posting", {"period": "2026-11"}, settings=fast, registry=registry)
    conn.execute(
        "UPDATE erp_periods SET status = 'closed', closed_at = now(), closed_by = 'test' "
        "WHERE period = '2026-11'"
    )
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "failed"
    row = conn.execute(
        "SELECT error FROM engine_step_runs WHERE job_id = %s AND status = 'dead'", (job.job_id,)
    ).fetchone()
    assert row is not None and "period 2026-11 is closed" in str(row["error"])
    assert journal_count(conn) == 0
    assert {d["status"] for d in documents(conn).values()} == {"unposted"}


def test_post_documents__twice_on_the_same_range_posts_nothing_more(
    conn: psycopg.Connection[Any],
) -> None:
    insert_erp(conn)
    first = post_documents(conn, "2026-11", 1, 8)
    assert (first.posted, first.rejected, first.debit, first.credit) == (
        5,
        3,
        Decimal("222.50"),
        Decimal("222.50"),
    )

    again = post_documents(conn, "2026-11", 1, 8)
    assert (again.posted, again.rejected, again.debit) == (0, 0, Decimal(0))
    assert journal_count(conn) == len(GOOD)


def test_post_documents__existing_journal_is_never_duplicated(
    conn: psycopg.Connection[Any],
) -> None:
    insert_erp(conn)
    post_documents(conn, "2026-11", 1, 2)
    # as if a document's status were lost after its journal committed
    conn.execute("UPDATE erp_documents SET status = 'unposted' WHERE id = 1")

    result = post_documents(conn, "2026-11", 1, 2)

    assert (result.posted, result.rejected) == (0, 0)
    row = conn.execute(
        "SELECT count(*) AS n FROM erp_journals WHERE source_key = 'document:1'"
    ).fetchone()
    assert row == {"n": 1}
    assert documents(conn)[1]["status"] == "unposted", "only a journal inserted now marks it"


@pytest.mark.acceptance
def test_books_cli__trial_balance_json_after_posting(
    fast: Settings,
    registry: Registry,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERP_POSTING_CHUNK_SIZE", "2")
    insert_erp(conn)
    run_posting(fast, registry, conn, "2026-11")
    assert fast.database_url is not None
    env = {**os.environ, "ENGINE_DATABASE_URL": fast.database_url.get_secret_value()}
    env.pop("ENGINE_FLOW_MODULES", None)

    result = run_engine(
        ["books", "trial-balance", "--period", "2026-11", "--json"], env=env, timeout=60
    )

    assert result.returncode == 0, result.stderr
    tb = json.loads(result.stdout)
    assert set(tb) == {
        "period", "by_store", "opening", "debit", "credit", "closing", "lines", "accounts",
        "flags",
    }  # fmt: skip
    assert (tb["period"], tb["debit"], tb["credit"], tb["lines"]) == (
        "2026-11",
        "222.50",
        "222.50",
        11,
    )
    accounts = {a["code"]: a for a in tb["accounts"]}
    assert accounts["1100"] == {
        "code": "1100",
        "name": "Accounts receivable",
        "store": None,
        "opening": "0.00",
        "debit": "120.00",
        "credit": "0.00",
        "balance": "120.00",
        "closing": "120.00",
    }
    assert accounts["4000"]["balance"] == "-137.50"
    assert "9999" not in accounts


def test_post_documents__two_transactions_on_one_range_post_once(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)
    with connect(settings) as first, connect(settings) as second:
        posted_first = post_documents(first, "2026-11", 1, 8)  # holds its row locks, uncommitted
        with ThreadPoolExecutor(1) as pool:
            racing = pool.submit(post_documents, second, "2026-11", 1, 8)
            wait_until(
                lambda: conn.execute(
                    "SELECT 1 FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone(),
                what="the second posting to wait on the first one's row locks",
            )
            first.commit()
            posted_second = racing.result(timeout=30)
        second.commit()

    assert (posted_first.posted, posted_first.rejected) == (5, 3)
    assert (posted_second.posted, posted_second.rejected) == (0, 0)
    assert journal_count(conn) == len(GOOD)


def test_post_documents__a_posted_document_writes_its_stock_moves_once(
    conn: psycopg.Connection[Any],
) -> None:
    insert_erp(conn)
    conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on, "
        "counterpart_store_id) VALUES (11, 'TR-11', 'stock_transfer', '2026-11', 1, 1, "
        "'2026-11-20', 2), (12, 'SC-12', 'stock_count', '2026-11', 2, 2, '2026-11-30', NULL)"
    )
    conn.execute(
        "INSERT INTO erp_document_lines (document_id, line_no, account_code, item_id, qty) "
        "VALUES (11, 1, '1300', 1, 3), (12, 1, '1300', 1, -2)"
    )
    post_documents(conn, "2026-11", 1, 12)
    post_documents(conn, "2026-11", 1, 12)  # again: nothing more
    moves = conn.execute(
        "SELECT document_id, line_no, store_id, kind, qty, unit_cost, counterpart_store_id AS cp, "
        "moved_on::text AS day FROM erp_stock_moves ORDER BY document_id, kind"
    ).fetchall()
    assert [
        (m["document_id"], m["store_id"], m["kind"], m["qty"], m["unit_cost"], m["cp"])
        for m in moves
    ] == [
        (1, 2, "sale", Decimal("-4.000"), None, None),
        (2, 1, "receipt", Decimal("5.000"), Decimal("10.0000"), None),
        (11, 2, "transfer_in", Decimal("3.000"), None, 1),
        (11, 1, "transfer_out", Decimal("-3.000"), None, 2),
        (12, 2, "adjustment", Decimal("-2.000"), None, None),
    ]
    assert {m["day"] for m in moves} == {"2026-11-15", "2026-11-20", "2026-11-30"}
    # a transfer or a count has no amount of its own: its journal has no lines
    empty = conn.execute(
        "SELECT count(*) AS n FROM erp_journals j "
        "WHERE source_key IN ('document:11', 'document:12') "
        "AND NOT EXISTS (SELECT 1 FROM erp_journal_lines l WHERE l.journal_id = j.id)"
    ).fetchone()
    assert empty == {"n": 2}


@pytest.mark.parametrize(
    ("kind", "counterpart", "lines", "reason"),
    [
        (
            "purchase_invoice",
            None,
            [("1300", "50.01", "0", 1, 5, "10.0000"), ("2000", "0", "50.01")],
            "line 1: debit 50.01 != quantity 5.000 x unit cost 10.0000 = 50.00",
        ),
        (
            "purchase_invoice",
            None,
            [("1300", "50.00", "0", 1, 5, None), ("2000", "0", "50.00")],
            "line 1: a purchase line needs a unit cost >= 0",
        ),
        (
            "sales_invoice",
            None,
            [("1000", "10.00", "0"), ("1300", "0", "10.00")],
            "line 2: 1300 is kept by stock moves and costing: a sales invoice cannot post to it",
        ),
        (
            "sales_invoice",
            None,
            [("1000", "10.00", "0"), ("4000", "0", "10.00", 1, -1)],
            "line 2: item quantity must be > 0, got -1.000",
        ),
        (
            "stock_transfer",
            1,
            [("1300", "0", "0", 1, 2)],
            "a stock transfer to its own store",
        ),
        (
            "stock_transfer",
            2,
            [("1300", "5.00", "0", 1, 2)],
            "line 1: a stock transfer carries no amount (costing values it), got debit 5.00 "
            "credit 0.00",
        ),
        (
            "stock_count",
            None,
            [("1300", "0", "0", 1, 0)],
            "line 1: a count difference must not be 0",
        ),
    ],
)
def test_post_documents__rejects_a_document_that_would_move_stock_wrongly_naming_why(
    conn: psycopg.Connection[Any],
    kind: str,
    counterpart: int | None,
    lines: list[tuple[Any, ...]],
    reason: str,
) -> None:
    insert_erp(conn)
    conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on, "
        "counterpart_store_id) VALUES (20, 'X-20', %s, '2026-11', 1, 1, '2026-11-20', %s)",
        (kind, counterpart),
    )
    for n, (account, debit, credit, *rest) in enumerate(lines, 1):
        item, qty, unit = (list(rest) + [None] * 3)[:3]
        conn.execute(
            "INSERT INTO erp_document_lines (document_id, line_no, account_code, debit, credit, "
            "item_id, qty, unit_cost) VALUES (20, %s, %s, %s, %s, %s, %s, %s)",
            (n, account, Decimal(debit), Decimal(credit), item, qty, unit),
        )
    result = post_documents(conn, "2026-11", 20, 20)
    assert (result.posted, result.rejected) == (0, 1)
    assert result.rejections[0].reason.startswith(reason), result.rejections[0].reason
    moves = conn.execute("SELECT count(*) AS n FROM erp_stock_moves").fetchone()
    assert moves == {"n": 0}


def test_posting__refused_once_the_period_stock_is_costed_while_documents_wait(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)
    conn.execute("INSERT INTO erp_average_solves (period, items, loops) VALUES ('2026-11', 0, 0)")
    with pytest.raises(
        Refused, match=r"cannot post 2 document\(s\) that move stock into 2026-11: its stock"
    ):
        submit("posting", {"period": "2026-11"}, settings=fast, registry=registry)
    assert journal_count(conn) == 0
