"""A seeded month closed through the workers: the books are right."""

from __future__ import annotations

from typing import Any

import psycopg
from erp_checks import assert_books_balance, assert_costs_equal_reference, books_snapshot
from harness import fast_settings, thread_worker, wait_job_ended

from engine import Registry, submit
from engine.config import Settings
from flows.erp.books import trial_balance
from flows.tools.seed import seed

PERIOD = "2026-11"


def test_month_end__seeded_month_costs_equal_the_reference_and_books_balance(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    made = seed(conn, stores=6, brands=2, employees=12, items=40, period=PERIOD, seed=3)
    registry = Registry.load(["flows.costing", "flows.posting"])
    fast = fast_settings(settings, flow_modules=["flows.costing", "flows.posting"], concurrency=3)
    with thread_worker(fast, registry):
        # posting writes the stock moves that costing values: posting first
        for name in ("posting", "costing"):
            job = submit(name, {"period": PERIOD}, settings=fast, registry=registry)
            assert wait_job_ended(conn, job.job_id, timeout=120) == "done"
        books = books_snapshot(conn)
        # the whole month end again: nothing changes
        for name in ("posting", "costing"):
            job = submit(name, {"period": PERIOD}, settings=fast, registry=registry)
            assert wait_job_ended(conn, job.job_id, timeout=120) == "done"
    assert books_snapshot(conn) == books

    assert assert_costs_equal_reference(conn, PERIOD) > 0
    assert_books_balance(conn)
    tb = trial_balance(conn, PERIOD)
    assert tb.debit == tb.credit
    rejected = conn.execute(
        "SELECT reject_reason FROM erp_documents WHERE status = 'rejected'"
    ).fetchall()
    bad_in_period = made.bad_documents.get("unbalanced", 0) + made.bad_documents.get(
        "unknown_account", 0
    )
    assert len(rejected) == bad_in_period
    assert conn.execute(
        "SELECT count(*) AS n FROM erp_documents WHERE period = %s AND status = 'unposted'",
        (PERIOD,),
    ).fetchone() == {"n": 0}
    negative = conn.execute(
        "SELECT count(*) AS n FROM erp_item_costs WHERE closing_qty < 0"
    ).fetchone()
    assert negative == {"n": made.negative_stock_items}
