"""Inventory costing (flows/erp/sql/costing.sql) behind typed functions.

:func:`solve_averages` solves, once per period, the averages of every item
that moves between stores (:mod:`flows.erp.average`, exactly);
:func:`cost_store` then costs one store in one statement, and
:func:`post_costing` puts its result in the ledger (:mod:`flows.erp.ledger`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel, Field

from flows.erp import ledger
from flows.erp.average import Average, Figures, Transfer, solve_item
from flows.erp.ledger import ACCOUNTS, Journal
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
    opening_value: Decimal = Decimal(0)
    receipt_value: Decimal
    transfer_in_value: Decimal
    cogs_value: Decimal
    adjustment_value: Decimal = Field(
        default=Decimal(0), description="the stock counts' share of cogs_value (to 5100)"
    )
    transfer_out_value: Decimal
    closing_value: Decimal
    negative_items: int
    loop_items: int = 0
    fallback_items: int = 0


class FallbackGroup(BaseModel):
    """A loop of stores whose averages have no unique solution: each store took its fallback."""

    sku: str
    stores: list[str]


class Solved(BaseModel):
    """What the period's solve found: the moving items, their loops, the groups that fell back."""

    period: str
    items: int = Field(description="items that move between stores, solved exactly")
    loops: int = Field(description="loops (strongly connected groups of stores) among them")
    fallback_groups: list[FallbackGroup]
    solved_now: bool = Field(description="False when an earlier run had solved the period")


def stores(conn: psycopg.Connection[Any], store: str | None) -> list[StoreRef]:
    rows = _q.rows(conn, "stores_select", {"store": store})
    return [StoreRef(id=r["id"], code=r["code"], brand=r["brand"]) for r in rows]


def group_id(stores: tuple[int, ...], codes: dict[int, str]) -> str:
    """A loop's id, as the reports and exports show it: its stores' codes, ``ST001+ST007``."""
    return "+".join(codes[s] for s in stores)


def solve_averages(conn: psycopg.Connection[Any], period: str) -> Solved:
    """Solve the averages of ``period``'s items that move between stores, once.

    Reads each moving item's store figures and transfer graph, solves it
    exactly (:func:`flows.erp.average.solve_item`) and writes every store's
    rounded average, in the caller's transaction. A second call (a rerun, a
    second job) finds the period solved and writes nothing.
    """
    params = {"period": period}
    done = _q.first(conn, "average_solve_select", params)
    if done is not None:
        return _solved(done, solved_now=False)
    codes = {s.id: s.code for s in stores(conn, None)}
    items = {
        r["id"]: (r["sku"], r["standard_cost"])
        for r in _q.rows(conn, "average_transfer_items", params)
    }
    figures: dict[int, dict[int, Figures]] = defaultdict(dict)
    for r in _q.rows(conn, "average_figures_of_transfer_items", params):
        figures[r["item_id"]][r["store_id"]] = Figures(
            opening_qty=r["opening_qty"],
            opening_value=r["opening_value"],
            receipt_qty=r["receipt_qty"],
            receipt_value=r["receipt_value"],
        )
    edges: dict[int, list[Transfer]] = defaultdict(list)
    for r in _q.rows(conn, "average_transfer_edges", params):
        edges[r["item_id"]].append(
            Transfer(sender=r["sender"], receiver=r["receiver"], qty=r["qty"])
        )
    rows: list[tuple[Any, ...]] = []
    loops: set[tuple[int, tuple[int, ...]]] = set()
    fallbacks: dict[tuple[int, tuple[int, ...]], FallbackGroup] = {}
    for item_id, (sku, standard) in items.items():
        solved: dict[int, Average] = solve_item(figures.get(item_id, {}), edges[item_id], standard)
        for store_id, avg in sorted(solved.items()):
            group = None if avg.group is None else group_id(avg.group, codes)
            rows.append((period, item_id, store_id, avg.cost, avg.source, group))
            if avg.group is not None:
                loops.add((item_id, avg.group))
                if avg.singular:
                    fallbacks[item_id, avg.group] = FallbackGroup(
                        sku=sku, stores=[codes[s] for s in avg.group]
                    )
    groups = [fallbacks[k] for k in sorted(fallbacks)]
    claimed = _q.first(
        conn,
        "average_solve_claim",
        {
            "period": period,
            "items": len(items),
            "loops": len(loops),
            "fallback_groups": json.dumps([g.model_dump() for g in groups]),
        },
    )
    if claimed is None:  # solved meanwhile by another transaction: its averages stand
        return _solved(_q.one(conn, "average_solve_select", params), solved_now=False)
    with _q.copy(conn, "average_copy") as copy:
        for row in rows:
            copy.write_row(row)
    return Solved(
        period=period, items=len(items), loops=len(loops), fallback_groups=groups, solved_now=True
    )


def _solved(row: dict[str, Any], *, solved_now: bool) -> Solved:
    return Solved(
        period=row["period"],
        items=row["items"],
        loops=row["loops"],
        fallback_groups=[FallbackGroup.model_validate(g) for g in row["fallback_groups"]],
        solved_now=solved_now,
    )


def cost_store(
    conn: psycopg.Connection[Any], period: str, store_id: int, next_period: str | None = None
) -> bool:
    """Write the store's item costs (and carry its closing balances to ``next_period``).

    The period's averages must be solved (:func:`solve_averages`) first.
    ``False`` if the costs were already there (a rerun), in which case nothing is written.
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


def costing_journals(
    conn: psycopg.Connection[Any], period: str, store: StoreRef, totals: StoreTotals
) -> list[Journal]:
    """The store's journals for the period, from its item costs.

    ``costing:<period>:<store>``: Dr 5000 COGS (sales net of returns) and
    Dr 5100 adjustments (stock counts), Cr 1300 Inventory; Dr 1300 / Cr 1350
    Inter-store for transfers in, Dr 1350 / Cr 1300 for transfers out (the
    two sides of a transfer book the same value, so 1350 nets to zero
    company-wide). ``opening:<period>:<store>``, for a store whose books
    start in the period: Dr 1300 / Cr 3000 Equity by its opening stock.
    """
    inv, inter = ACCOUNTS["inventory"], ACCOUNTS["inter_store"]
    s = store.id
    lines = [
        *ledger.transfer(ACCOUNTS["cogs"], inv, s, totals.cogs_value - totals.adjustment_value),
        *ledger.transfer(ACCOUNTS["adjustments"], inv, s, totals.adjustment_value),
        *ledger.transfer(inv, inter, s, totals.transfer_in_value),
        *ledger.transfer(inter, inv, s, totals.transfer_out_value),
    ]
    journals = []
    if lines:
        journals.append(
            Journal(
                period=period,
                source="costing",
                source_key=f"costing:{period}:{store.code}",
                store_id=s,
                memo=f"cost of goods sold and transfers {period}",
                lines=lines,
            )
        )
    start = _q.first(conn, "store_opening_loaded", {"period": period, "store_id": s})
    if start is not None and start["loaded"] and start["value"] != 0:
        journals.append(
            Journal(
                period=period,
                source="opening",
                source_key=f"opening:{period}:{store.code}",
                store_id=s,
                memo=f"opening stock of {store.code}, books start {period}",
                lines=ledger.transfer(inv, ACCOUNTS["equity"], s, start["value"]),
            )
        )
    return journals


def post_costing(
    conn: psycopg.Connection[Any], period: str, store: StoreRef, totals: StoreTotals
) -> dict[str, int]:
    """Post the store's costing (and opening) journals once; their ids by source key."""
    journals = costing_journals(conn, period, store, totals)
    ledger.post(conn, journals)
    return ledger.journal_ids(conn, [j.source_key for j in journals])
