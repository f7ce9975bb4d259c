"""Backdated documents for the recost tests: a receipt, a sale, a transfer, dated any day."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg

CENT = Decimal("0.01")


def _header(
    conn: psycopg.Connection[Any], kind: str, store: int, on: str, to: int | None = None
) -> int:
    row = conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on, "
        "counterpart_store_id) "
        "SELECT coalesce(max(id), 0) + 1, 'BD-' || (coalesce(max(id), 0) + 1), %s, "
        "to_char(%s::date, 'YYYY-MM'), %s, (SELECT min(id) FROM erp_employees), %s, %s "
        "FROM erp_documents RETURNING id",
        (kind, on, store, on, to),
    ).fetchone()
    assert row is not None
    return int(row["id"])


def _lines(conn: psycopg.Connection[Any], doc: int, lines: list[tuple[Any, ...]]) -> None:
    for n, (account, item, qty, debit, credit, unit) in enumerate(lines, 1):
        conn.execute(
            "INSERT INTO erp_document_lines (document_id, line_no, account_code, item_id, qty, "
            "debit, credit, unit_cost) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (doc, n, account, item, qty, debit, credit, unit),
        )


def receipt(
    conn: psycopg.Connection[Any], store: int, item: int, qty: Decimal, unit: Decimal, on: str
) -> int:
    """A purchase invoice: ``qty`` of ``item`` received at ``store`` at ``unit`` each."""
    doc = _header(conn, "purchase_invoice", store, on)
    amount = (qty * unit).quantize(CENT)
    _lines(conn, doc, [("1300", item, qty, amount, 0, unit), ("2000", None, None, 0, amount, None)])
    return doc


def sale(
    conn: psycopg.Connection[Any], store: int, item: int, qty: Decimal, price: Decimal, on: str
) -> int:
    """A sales invoice: ``qty`` of ``item`` sold at ``store`` (cash)."""
    doc = _header(conn, "sales_invoice", store, on)
    amount = (qty * price).quantize(CENT)
    _lines(conn, doc, [("1000", None, None, amount, 0, None), ("4000", item, qty, 0, amount, None)])
    return doc


def transfer(
    conn: psycopg.Connection[Any], sender: int, receiver: int, item: int, qty: Decimal, on: str
) -> int:
    """A stock transfer of ``qty`` of ``item`` from ``sender`` to ``receiver``."""
    doc = _header(conn, "stock_transfer", sender, on, receiver)
    _lines(conn, doc, [("1300", item, qty, 0, 0, None)])
    return doc


def count(conn: psycopg.Connection[Any], store: int, item: int, qty: Decimal, on: str) -> int:
    """A stock count: ``qty`` (signed) of ``item`` found at ``store`` beyond the books."""
    doc = _header(conn, "stock_count", store, on)
    _lines(conn, doc, [("1300", item, qty, 0, 0, None)])
    return doc


def stale_pairs(conn: psycopg.Connection[Any]) -> set[tuple[str, int, int]]:
    rows = conn.execute("SELECT period, store_id, item_id FROM erp_stale_pairs").fetchall()
    return {(r["period"], r["store_id"], r["item_id"]) for r in rows}


def figures(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The costed books by value: item costs and openings (all-zero rows left out: a recost
    keeps a carried row it zeroes, a full costing never carries one), the ledger per period,
    account and store."""
    costs = {
        (r["period"], r["store_id"], r["item_id"]): tuple(r.values())[3:]
        for r in conn.execute(
            "SELECT period, store_id, item_id, opening_qty, opening_value, receipt_qty, "
            "receipt_value, transfer_in_qty, transfer_in_value, average_cost, average_from, "
            "loop_group, issue_qty, cogs_value, transfer_out_qty, transfer_out_value, "
            "closing_qty, closing_value FROM erp_item_costs "
            "WHERE opening_qty <> 0 OR opening_value <> 0 OR receipt_qty <> 0 "
            "OR transfer_in_qty <> 0 OR issue_qty <> 0 OR transfer_out_qty <> 0"
        )
    }
    openings = {
        (r["period"], r["store_id"], r["item_id"]): (r["qty"], r["value"])
        for r in conn.execute(
            "SELECT period, store_id, item_id, qty, value FROM erp_opening_balances "
            "WHERE qty <> 0 OR value <> 0"
        )
    }
    ledger = {
        (r["period"], r["account_code"], r["store_id"]): r["balance"]
        for r in conn.execute(
            "SELECT j.period, l.account_code, l.store_id, sum(l.debit - l.credit) AS balance "
            "FROM erp_journals AS j JOIN erp_journal_lines AS l ON l.journal_id = j.id "
            "GROUP BY 1, 2, 3 HAVING sum(l.debit - l.credit) <> 0"
        )
    }
    return {"costs": costs, "openings": openings, "ledger": ledger}


def uncost(conn: psycopg.Connection[Any], first: str) -> None:
    """Undo every costing from period ``first`` on (as the owner, in SQL), keeping the facts:
    documents, their journals and stock moves, and the loaded openings."""
    with conn.transaction():
        conn.execute("DELETE FROM erp_stale_pairs")
        conn.execute(
            "DELETE FROM erp_journal_lines WHERE journal_id IN (SELECT id FROM erp_journals "
            "WHERE source IN ('costing', 'opening') AND period >= %s)",
            (first,),
        )
        conn.execute(
            "DELETE FROM erp_journals WHERE source IN ('costing', 'opening') AND period >= %s",
            (first,),
        )
        for table in ("erp_item_costs", "erp_item_averages", "erp_average_solves"):
            conn.execute(f"DELETE FROM {table} WHERE period >= %s", (first,))
        conn.execute(
            "DELETE FROM erp_opening_balances AS o USING erp_store_periods AS sp "
            "WHERE sp.store_id = o.store_id AND sp.period = o.period AND sp.opening = 'carried' "
            "AND o.period > %s",
            (first,),
        )
        conn.execute(
            "DELETE FROM erp_store_periods WHERE opening = 'carried' AND period > %s", (first,)
        )
        conn.execute("UPDATE erp_store_periods SET costed_at = NULL WHERE period >= %s", (first,))
        conn.execute(
            "UPDATE erp_periods SET status = 'open', costed_at = NULL WHERE period >= %s",
            (first,),
        )
