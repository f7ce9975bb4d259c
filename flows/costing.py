"""Inventory costing: periodic weighted average cost per store and item.

``engine submit costing --period 2026-11 [--store ST001]``

Method, per store and item, for one period:

- **Opening** balances come from ``erp_opening_balances`` of the period (loaded
  by the migration flow for the first period, carried forward by the previous
  costing afterwards).
- **Receipts** are valued at their purchase unit cost.
- **Transfers** between stores are valued at the *sending* store's opening
  average cost (opening value / opening quantity, 4 decimals; the item's
  standard cost when the sender had no stock). Both sides use the same
  per-move value, so the company's inventory value is unchanged by a
  transfer, and stores can be costed independently and in parallel.
- **Average cost** = (opening + receipts + transfers in) value / quantity,
  rounded to 4 decimals; when that quantity is not positive, the opening
  average, else the standard cost.
- **Issues** are sales net of customer returns and stock adjustments (a
  return or a positive count difference is a negative issue); COGS = issue
  quantity x average cost, to the cent.
- **Closing value** = opening + receipts + transfers in - COGS - transfers
  out: the remainder, so value is conserved to the cent (a CHECK enforces
  it). **Negative stock** is not refused: issues beyond what was available
  are costed at the average, the closing quantity is negative and carries the
  remainder as its value; the summary counts such items.

Each store's item costs, its COGS journal (Dr 5000 COGS, Cr 1300 Inventory,
keyed by period and store) and its closing balances carried forward as the
next period's opening balances are written in the step's fenced transaction,
so they commit exactly once, together with its checkpoint. The period is
marked costed once every store is, by whichever job costs the last one.

Costing, posting and the close of one period never run side by side: they
share the concurrency key ``period:{period}`` with limit 1, counted per job
(:data:`flows.erp.periods.PERIOD_KEY`), so a job's stores are costed in
parallel, another period's jobs run meanwhile, and a posting of the same
period waits for a free slot (no attempt used) and is announced when it frees.

Periods are costed in order, per store (:mod:`flows.erp.periods`): a store
is costed for P only from its starting point for P, loaded for its first
period or carried forward by costing P-1 for it. A submit whose scope holds
a store without one is refused (exit 2) naming the stores and the period
each still needs; the plan step checks again (for a retried job). A closed
period is never written: every writing step share-locks the period's row.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel, Field

from engine import Fail, Flow, Refused, StepContext
from flows.erp import inventory, periods
from flows.erp.inventory import Mover, StoreRef, StoreTotals
from flows.erp.types import Period


class CostingParams(BaseModel):
    period: Period
    store: str | None = Field(default=None, description="only this store (code, e.g. ST001)")


class CostingPlan(BaseModel):
    period: str
    next_period: str
    already_costed: bool
    stores: list[StoreRef]


class StoreCost(StoreTotals):
    store: StoreRef
    journal_id: int | None
    top_movers: list[Mover]


class PeriodCosted(BaseModel):
    period: str
    marked_costed: bool


class BrandTotal(BaseModel):
    brand: str
    stores: int
    cogs_value: Decimal
    closing_value: Decimal


class CostingSummary(BaseModel):
    period: str
    stores: int
    items_costed: int
    value_moved: Decimal
    cogs_value: Decimal
    closing_value: Decimal
    negative_items: int
    brands: list[BrandTotal]
    per_store: list[StoreCost]
    largest_movers: list[Mover]
    note: str = ""


flow = Flow(
    "costing",
    params=CostingParams,
    # 3: holds the period's concurrency key (a job of version 2 in flight runs without it)
    version=3,
    description="Periodic weighted-average inventory costing per store; COGS journals.",
    concurrency=periods.PERIOD_KEY,
)


def plan_costing(conn: psycopg.Connection[Any], period: str, store: str | None) -> CostingPlan:
    """The stores to cost for ``period``, or :class:`engine.Refused` naming what is missing.

    The period must exist and not be closed (its row is share-locked for the
    caller's transaction), and every store in scope must have its starting
    point for it. Used by the admission check, the plan step and the close flow.
    """
    status = periods.lock_for_writing(conn, period, doing="costing")
    points = periods.starting_points(conn, period, store)
    if store is not None and not points:
        raise Refused(f"unknown store {store!r}: no store has that code")
    why = periods.missing_starting_points(period, points)
    if why is not None:
        raise Refused(why)
    return CostingPlan(
        period=period,
        next_period=periods.next_period(period),
        already_costed=status != "open" or all(p.costed for p in points),
        stores=inventory.stores(conn, store),
    )


@flow.admit
def admit(params: CostingParams, conn: psycopg.Connection[Any]) -> None:
    """The period is not closed and every store in scope can be costed for it (in order)."""
    plan_costing(conn, params.period, params.store)


@flow.step()
def check_period(params: CostingParams, ctx: StepContext) -> CostingPlan:
    """Check again what admission checked (a retried job skips it); open the next period."""
    try:
        plan = plan_costing(ctx.conn, params.period, params.store)
    except Refused as exc:
        raise Fail(str(exc)) from exc
    periods.ensure_period(ctx.conn, plan.next_period)
    return plan


def cost_one_store(conn: psycopg.Connection[Any], period: str, store: StoreRef) -> StoreCost:
    """Cost ``store`` for ``period`` once, in the caller's (fenced) transaction; a rerun reads.

    Takes the period's row ``FOR SHARE`` (a close waits, or has happened and
    nothing is written) and the store's period row ``FOR UPDATE`` (two
    costings of the store, or one and a migration of its openings, serialise).
    """
    try:
        periods.lock_for_writing(conn, period, doing=f"costing store {store.code}")
        first = periods.mark_store_costed(conn, period, store.id)
        if first:
            following = periods.open_next_for_store(conn, period, store.id)
            inventory.cost_store(conn, period, store.id, following)
    except Refused as exc:
        raise Fail(str(exc)) from exc
    totals = inventory.store_totals(conn, period, store.id)
    journal = None
    if totals.cogs_value != 0:
        journal = inventory.post_cogs_journal(
            conn, period, store.id, f"costing:{period}:{store.code}", totals.cogs_value
        )
    return StoreCost(
        store=store,
        journal_id=journal,
        top_movers=inventory.top_movers(conn, period, store.id),
        **totals.model_dump(),
    )


@flow.step(map_over="check_period.stores")
def cost_store(store: StoreRef, params: CostingParams, ctx: StepContext) -> StoreCost:
    """Cost one store in one statement and post its COGS journal (once)."""
    return cost_one_store(ctx.conn, params.period, store)


@flow.step(after=["cost_store", "check_period"])
def mark_costed(
    costs: list[StoreCost], plan: CostingPlan, params: CostingParams, ctx: StepContext
) -> PeriodCosted:
    """Mark the period costed once every store is, whichever jobs costed them."""
    marked = periods.mark_costed_if_complete(ctx.conn, plan.period, f"costing job {ctx.job_id}")
    return PeriodCosted(period=plan.period, marked_costed=marked)


def brand_totals(costs: list[StoreCost]) -> list[BrandTotal]:
    """COGS and closing stock value per brand, by brand code."""
    brands: dict[str, BrandTotal] = {}
    for cost in costs:
        total = brands.setdefault(
            cost.store.brand,
            BrandTotal(
                brand=cost.store.brand, stores=0, cogs_value=Decimal(0), closing_value=Decimal(0)
            ),
        )
        total.stores += 1
        total.cogs_value += cost.cogs_value
        total.closing_value += cost.closing_value
    return sorted(brands.values(), key=lambda b: b.brand)


@flow.step(after=["mark_costed", "cost_store", "check_period"])
def summarize(closed: PeriodCosted, costs: list[StoreCost], plan: CostingPlan) -> CostingSummary:
    """Totals per brand and store, and the largest movers."""
    brands = brand_totals(costs)
    movers = sorted((m for c in costs for m in c.top_movers), key=lambda m: (-m.cogs_value, m.sku))[
        :10
    ]
    note = "already costed: figures are those of the first run" if plan.already_costed else ""
    if closed.marked_costed:
        note = f"period costed; closing balances carried to {plan.next_period}"
    return CostingSummary(
        period=plan.period,
        stores=len(costs),
        items_costed=sum(c.items for c in costs),
        value_moved=sum((c.receipt_value + c.transfer_in_value for c in costs), Decimal(0)),
        cogs_value=sum((c.cogs_value for c in costs), Decimal(0)),
        closing_value=sum((c.closing_value for c in costs), Decimal(0)),
        negative_items=sum(c.negative_items for c in costs),
        brands=brands,
        per_store=costs,
        largest_movers=movers,
        note=note,
    )
