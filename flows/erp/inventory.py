"""Inventory costing (flows/erp/sql/costing.sql) behind typed functions.

:func:`solve_averages` solves, once per period, the averages of every item
that moves between stores (:mod:`flows.erp.average`, exactly);
:func:`cost_store` then costs one store in one statement, and
:func:`post_costing` puts its result in the ledger (:mod:`flows.erp.ledger`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
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
    opening_value: Decimal = Decimal(0)  # absent from summaries of costing version 3
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


SOLVE_BATCH = 2000
"""Moving items read, solved and written at a time: the solve's memory does not grow with
the month."""


def solve_averages(conn: psycopg.Connection[Any], period: str) -> Solved:
    """Solve the averages of ``period``'s items that move between stores, once.

    Claims the period's solve first (a rerun, or a second job, finds it and
    writes nothing), then, :data:`SOLVE_BATCH` moving items at a time, reads
    each item's transfer graph and its stores' figures, solves it exactly
    (:func:`flows.erp.average.solve_item`) and writes the rounded average of
    every store of the graph (a sender or a receiver), all in the caller's
    transaction. The other stores of an item are costed from their own
    figures alone, by the same rule.
    """
    params = {"period": period}
    if _q.first(conn, "average_solve_claim", params) is None:
        return _solved(_q.one(conn, "average_solve_select", params), solved_now=False)
    codes = {s.id: s.code for s in stores(conn, None)}
    items = [
        (int(r["id"]), str(r["sku"]), r["standard_cost"])
        for r in _q.rows(conn, "average_transfer_items", params)
    ]
    loops = 0
    fallbacks: list[FallbackGroup] = []
    for start in range(0, len(items), SOLVE_BATCH):
        batch = items[start : start + SOLVE_BATCH]
        found, fell_back = _solve_batch(conn, period, batch, codes)
        loops += found
        fallbacks += fell_back
    _q.execute(
        conn,
        "average_solve_record",
        {
            "period": period,
            "items": len(items),
            "loops": loops,
            "fallback_groups": json.dumps([g.model_dump() for g in fallbacks]),
        },
    )
    return Solved(
        period=period, items=len(items), loops=loops, fallback_groups=fallbacks, solved_now=True
    )


AverageRow = tuple[str, int, int, Decimal, str, str | None]
"""One solved average as written: (period, item, store, average, where from, loop id)."""


def _solve_batch(
    conn: psycopg.Connection[Any],
    period: str,
    batch: list[tuple[int, str, Decimal]],
    codes: dict[int, str],
) -> tuple[int, list[FallbackGroup]]:
    """Solve and write one batch of moving items; its loops, and the loops that fell back."""
    rows, loops, fallbacks = solve_items(conn, period, batch, codes)
    with _q.copy(conn, "average_copy") as copy:
        for row in rows:
            copy.write_row(row)
    return loops, fallbacks


def solve_items(
    conn: psycopg.Connection[Any],
    period: str,
    batch: list[tuple[int, str, Decimal]],
    codes: dict[int, str],
) -> tuple[list[AverageRow], int, list[FallbackGroup]]:
    """Solve a batch of moving items (id, sku, standard cost) from the facts as they are now.

    Every store of each item's transfer graph gets its average (a sender or a
    receiver); returns those rows, the loops found and the loops that fell
    back. Writes nothing: the solve copies the rows in, a recost
    (:mod:`flows.erp.recost`) replaces the ones it had.
    """
    edges: dict[int, list[Transfer]] = defaultdict(list)
    nodes: set[tuple[int, int]] = set()  # (item, store): the stores of each item's graph
    ids = {"period": period, "items": [item for item, _, _ in batch]}
    for r in _q.rows(conn, "average_transfer_edges", ids):
        edges[r["item_id"]].append(
            Transfer(sender=r["sender"], receiver=r["receiver"], qty=r["qty"])
        )
        nodes.update(((r["item_id"], r["sender"]), (r["item_id"], r["receiver"])))
    pairs = sorted(nodes)
    graph = {"period": period, "items": [i for i, _ in pairs], "stores": [s for _, s in pairs]}
    figures: dict[int, dict[int, Figures]] = defaultdict(dict)
    for r in _q.rows(conn, "average_figures_of_transfer_items", graph):
        figures[r["item_id"]][r["store_id"]] = Figures(
            opening_qty=r["opening_qty"],
            opening_value=r["opening_value"],
            receipt_qty=r["receipt_qty"],
            receipt_value=r["receipt_value"],
        )
    loops: set[tuple[int, tuple[int, ...]]] = set()
    fallbacks: list[FallbackGroup] = []
    rows: list[AverageRow] = []
    for item_id, sku, standard in batch:
        solved: dict[int, Average] = solve_item(figures[item_id], edges[item_id], standard)
        for store_id, avg in sorted(solved.items()):
            group = None if avg.group is None else group_id(avg.group, codes)
            rows.append((period, item_id, store_id, avg.cost, avg.source, group))
            if avg.group is not None and (item_id, avg.group) not in loops:
                loops.add((item_id, avg.group))
                if avg.singular:
                    fallbacks.append(FallbackGroup(sku=sku, stores=[codes[s] for s in avg.group]))
    return rows, len(loops), fallbacks


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
    return store_totals_of(totals_of_stores(conn, period, [store_id]).get(store_id))


def store_totals_of(found: StoreTotals | None) -> StoreTotals:
    """``found``, or the totals of a store with no item costs: nothing."""
    if found is not None:
        return found
    zero = Decimal(0)
    return StoreTotals(
        items=0,
        receipt_value=zero,
        transfer_in_value=zero,
        cogs_value=zero,
        transfer_out_value=zero,
        closing_value=zero,
        negative_items=0,
    )


def totals_of_stores(
    conn: psycopg.Connection[Any], period: str, store_ids: Sequence[int]
) -> dict[int, StoreTotals]:
    """The totals of each given store with item costs in ``period``, in one statement."""
    rows = _q.rows(conn, "store_costs_totals", {"period": period, "stores": list(store_ids)})
    return {int(r.pop("store_id")): StoreTotals.model_validate(r) for r in rows}


def negative_stock(conn: psycopg.Connection[Any], period: str) -> tuple[int, int]:
    """(store, item) pairs of ``period`` that closed below zero, and how many were costed."""
    row = _q.one(conn, "period_negative_stock", {"period": period})
    return int(row["negative"]), int(row["costed"])


def top_movers(
    conn: psycopg.Connection[Any], period: str, store_id: int, limit: int = 5
) -> list[Mover]:
    return top_movers_of_stores(conn, period, [store_id], limit).get(store_id, [])


def top_movers_of_stores(
    conn: psycopg.Connection[Any], period: str, store_ids: Sequence[int], limit: int = 5
) -> dict[int, list[Mover]]:
    """The ``limit`` items with the largest COGS of each given store, in one statement."""
    params = {"period": period, "stores": list(store_ids), "limit": limit}
    movers: dict[int, list[Mover]] = {}
    for r in _q.rows(conn, "store_top_movers", params):
        movers.setdefault(int(r["store_id"]), []).append(
            Mover(sku=r["sku"], cogs_value=r["cogs_value"])
        )
    return movers


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
    if start is not None and start["loaded"] and totals.opening_value != 0:
        journals.append(
            Journal(
                period=period,
                source="opening",
                source_key=f"opening:{period}:{store.code}",
                store_id=s,
                memo=f"opening stock of {store.code}, books start {period}",
                lines=ledger.transfer(inv, ACCOUNTS["equity"], s, totals.opening_value),
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


def costing_journal_keys(period: str, store: StoreRef) -> list[str]:
    """The source keys of the store's costing (and opening) journals of ``period``."""
    return [f"costing:{period}:{store.code}", f"opening:{period}:{store.code}"]
