"""Inventory costing SQL (flows/erp/sql/costing.sql) behind typed functions."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from pydantic import BaseModel

from engine import load_queries

_q = load_queries(str(Path(__file__).parent / "sql" / "costing.sql"))


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


def _one(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q[name], params)
        row = cur.fetchone()
    assert row is not None, name
    return row


def stores(conn: psycopg.Connection[Any], store: str | None) -> list[StoreRef]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["stores_select"], {"store": store})
        return [StoreRef(id=r["id"], code=r["code"], brand=r["brand"]) for r in cur]


def cost_store(
    conn: psycopg.Connection[Any], period: str, store_id: int, next_period: str | None = None
) -> bool:
    """Write the store's item costs (and carry its closing balances to ``next_period``).

    ``False`` if they were already there (a rerun), in which case nothing is written.
    """
    params = {"period": period, "store_id": store_id}
    if _one(conn, "item_costs_exist_for_store", params)["costed"]:
        return False
    conn.execute(_q["jit_off_for_transaction"])
    conn.execute(_q["item_costs_insert_for_store"], params)
    if next_period is not None:
        conn.execute(_q["opening_carry_forward_for_store"], {**params, "next": next_period})
    return True


def store_totals(conn: psycopg.Connection[Any], period: str, store_id: int) -> StoreTotals:
    return StoreTotals(**_one(conn, "store_costs_totals", {"period": period, "store_id": store_id}))


def top_movers(
    conn: psycopg.Connection[Any], period: str, store_id: int, limit: int = 5
) -> list[Mover]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q["store_top_movers"], {"period": period, "store_id": store_id, "limit": limit}
        )
        return [Mover(sku=r["sku"], cogs_value=r["cogs_value"]) for r in cur]


def post_cogs_journal(
    conn: psycopg.Connection[Any], period: str, store_id: int, source_key: str, amount: Decimal
) -> int:
    """Post Dr COGS / Cr inventory once per ``source_key``; the journal id."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q["journal_insert_if_absent"],
            {
                "period": period,
                "store_id": store_id,
                "source_key": source_key,
                "memo": f"cost of goods sold {period}",
            },
        )
        row = cur.fetchone()
        if row is None:
            cur.execute(_q["journal_select_by_key"], {"source_key": source_key})
            existing = cur.fetchone()
            assert existing is not None
            return int(existing["id"])
        cur.execute(
            _q["journal_lines_insert_cogs"],
            {"journal_id": row["id"], "store_id": store_id, "amount": amount},
        )
        return int(row["id"])
