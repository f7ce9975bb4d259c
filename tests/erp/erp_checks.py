"""Oracles for the ERP books, read straight from the database."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg
from reference_costing import Move, cost_period


def reference_costs_from_db(
    conn: psycopg.Connection[Any], period: str
) -> dict[tuple[int, int], Any]:
    opening = {
        (r["store_id"], r["item_id"]): (r["qty"], r["value"])
        for r in conn.execute(
            "SELECT store_id, item_id, qty, value FROM erp_opening_balances WHERE period = %s",
            (period,),
        )
    }
    moves = [
        Move(r["store_id"], r["item_id"], r["kind"], r["qty"], r["unit_cost"], r["cp"], r["value"])
        for r in conn.execute(
            "SELECT store_id, item_id, kind, qty, unit_cost, counterpart_store_id AS cp, value "
            "FROM erp_stock_moves WHERE period = %s ORDER BY id",
            (period,),
        )
    ]
    standard = {
        r["id"]: r["standard_cost"] for r in conn.execute("SELECT id, standard_cost FROM erp_items")
    }
    return cost_period(opening, moves, standard)


def assert_costs_equal_reference(conn: psycopg.Connection[Any], period: str) -> int:
    expected = reference_costs_from_db(conn, period)
    rows = {
        (r["store_id"], r["item_id"]): r
        for r in conn.execute("SELECT * FROM erp_item_costs WHERE period = %s", (period,))
    }
    assert set(rows) == set(expected)
    for key, cost in expected.items():
        for name in (
            "opening_qty",
            "opening_value",
            "receipt_qty",
            "receipt_value",
            "transfer_in_qty",
            "transfer_in_value",
            "average_cost",
            "issue_qty",
            "cogs_value",
            "transfer_out_qty",
            "transfer_out_value",
            "closing_qty",
            "closing_value",
        ):
            assert rows[key][name] == getattr(cost, name), f"{key} {name}"
    return len(rows)


def assert_books_balance(conn: psycopg.Connection[Any]) -> None:
    unbalanced = conn.execute(
        "SELECT journal_id, sum(debit) AS d, sum(credit) AS c FROM erp_journal_lines "
        "GROUP BY journal_id HAVING sum(debit) <> sum(credit)"
    ).fetchall()
    assert unbalanced == []
    total = conn.execute(
        "SELECT coalesce(sum(debit), 0) AS d, coalesce(sum(credit), 0) AS c FROM erp_journal_lines"
    ).fetchone()
    assert total is not None and total["d"] == total["c"]


def books_snapshot(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """What "the same books" means: costs, journals and the trial balance, by value."""

    def md5(sql: str) -> str:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return str(row["h"])

    return {
        "item_costs": md5(
            "SELECT md5(coalesce(string_agg(c::text, ',' ORDER BY period, store_id, item_id), '')) "
            "AS h FROM erp_item_costs c"
        ),
        "journal_lines": md5(
            "SELECT md5(coalesce(string_agg(concat_ws('|', j.source_key, l.line_no, "
            "l.account_code, l.store_id, l.debit, l.credit), ',' ORDER BY j.source_key, "
            "l.line_no), '')) AS h "
            "FROM erp_journal_lines l JOIN erp_journals j ON j.id = l.journal_id"
        ),
        "opening": md5(
            "SELECT md5(coalesce(string_agg(o::text, ',' ORDER BY period, store_id, item_id), '')) "
            "AS h FROM erp_opening_balances o"
        ),
        "periods": md5(
            "SELECT md5(string_agg(period || status, ',' ORDER BY period)) AS h FROM erp_periods"
        ),
    }


ZERO = Decimal(0)
