"""Inventory costing SQL (flows/erp/sql/costing.sql) behind typed functions."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel

from flows.erp.queries import NamedQueries

_q = NamedQueries("costing")


class StoreRef(BaseModel):
    """A store to cost (one step run each)."""

    id: int
    code: str
    brand: str


class Mover(BaseModel):
    sku: str
    cogs_value: Decimal


class StoreTotals(BaseModel):
    items: int
    receipt_value: Decimal
    transfer_in_value: Decimal
    cogs_value: Decimal
    transfer_out_value: Decimal
    closing_value: Decimal
    negative_items: int


def stores(conn: psycopg.Connection[Any], store: str | None) -> list[StoreRef]:
    rows = _q.rows(conn, "stores_select", {"store": store})
    return [StoreRef(id=r["id"], code=r["code"], brand=r["brand"]) for r in rows]


def cost_store(
    conn: psycopg.Connection[Any], period: str, store_id: int, next_period: str | None = None
) -> bool:
    """Write the store's item costs (and carry its closing balances to ``next_period``).

    ``False`` if they were already there (a rerun), in which case nothing is written.
    """
    params = {"period": period, "store_id": store_id}
    if _q.one(conn, "item_costs_exist_for_store", params)["costed"]:
        return False
    _q.execute(conn, "jit_off_for_transaction")
    _q.execute(conn, "item_costs_insert_for_store", params)
    if next_period is not None:
        _q.execute(conn, "opening_carry_forward_for_store", {**params, "next": next_period})
    return True


def store_totals(conn: psycopg.Connection[Any], period: str, store_id: int) -> StoreTotals:
    params = {"period": period, "store_id": store_id}
    return StoreTotals.model_validate(_q.one(conn, "store_costs_totals", params))


def top_movers(
    conn: psycopg.Connection[Any], period: str, store_id: int, limit: int = 5
) -> list[Mover]:
    rows = _q.rows(
        conn, "store_top_movers", {"period": period, "store_id": store_id, "limit": limit}
    )
    return [Mover(sku=r["sku"], cogs_value=r["cogs_value"]) for r in rows]


def post_cogs_journal(
    conn: psycopg.Connection[Any], period: str, store_id: int, source_key: str, amount: Decimal
) -> int:
    """Post Dr COGS / Cr inventory once per ``source_key``; the journal id."""
    row = _q.first(
        conn,
        "journal_insert_if_absent",
        {
            "period": period,
            "store_id": store_id,
            "source_key": source_key,
            "memo": f"cost of goods sold {period}",
        },
    )
    if row is None:
        return int(_q.one(conn, "journal_select_by_key", {"source_key": source_key})["id"])
    _q.execute(
        conn,
        "journal_lines_insert_cogs",
        {"journal_id": row["id"], "store_id": store_id, "amount": amount},
    )
    return int(row["id"])
