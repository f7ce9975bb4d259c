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
so they commit exactly once, together with its checkpoint. The last step only
marks the period costed, once every store is.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, Field

from engine import Fail, Flow, StepContext
from flows.erp import inventory
from flows.erp.inventory import Mover, StoreRef, StoreTotals
from flows.types import Period


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


class PeriodClosed(BaseModel):
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
    description="Periodic weighted-average inventory costing per store; COGS journals.",
)


def _shift(period: str, months: int) -> str:
    year, month = int(period[:4]), int(period[5:])
    index = year * 12 + (month - 1) + months
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


@flow.step()
def check_period(params: CostingParams, ctx: StepContext) -> CostingPlan:
    """The period must be open (or already costed: a rerun) and have a starting point."""
    status = inventory.period_status(ctx.conn, params.period)
    if status is None:
        raise Fail(f"period {params.period} does not exist in erp_periods")
    if status == "closed":
        raise Fail(f"period {params.period} is closed; costing would change closed books")
    previous = _shift(params.period, -1)
    if status == "open" and not inventory.has_starting_point(ctx.conn, params.period, previous):
        raise Fail(
            f"period {params.period} has no opening balances and the previous period "
            f"{previous} is not costed; load opening balances (migration flow) first"
        )
    stores = inventory.stores(ctx.conn, params.store)
    if params.store is not None and not stores:
        raise Fail(f"unknown store {params.store!r}")
    inventory.ensure_period(ctx.conn, _shift(params.period, 1))
    return CostingPlan(
        period=params.period,
        next_period=_shift(params.period, 1),
        already_costed=status == "costed",
        stores=stores,
    )


@flow.step(map_over="check_period.stores")
def cost_store(store: StoreRef, params: CostingParams, ctx: StepContext) -> StoreCost:
    """Cost one store in one statement and post its COGS journal (once)."""
    if inventory.period_status(ctx.conn, params.period) == "closed":
        # closed while the job waited: never write to closed books
        raise Fail(f"period {params.period} was closed before store {store.code} was costed")
    inventory.cost_store(ctx.conn, params.period, store.id, _shift(params.period, 1))
    totals = inventory.store_totals(ctx.conn, params.period, store.id)
    journal = None
    if totals.cogs_value != 0:
        journal = inventory.post_cogs_journal(
            ctx.conn,
            params.period,
            store.id,
            f"costing:{params.period}:{store.code}",
            totals.cogs_value,
        )
    return StoreCost(
        store=store,
        journal_id=journal,
        top_movers=inventory.top_movers(ctx.conn, params.period, store.id),
        **totals.model_dump(),
    )


@flow.step(after=["cost_store", "check_period"])
def close_period(
    costs: list[StoreCost], plan: CostingPlan, params: CostingParams, ctx: StepContext
) -> PeriodClosed:
    """Mark the period costed (all stores only; each store carried its balances forward)."""
    if params.store is not None or plan.already_costed:
        return PeriodClosed(period=plan.period, marked_costed=False)
    return PeriodClosed(
        period=plan.period, marked_costed=inventory.mark_costed(ctx.conn, plan.period)
    )


@flow.step(after=["close_period", "cost_store", "check_period"])
def summarize(closed: PeriodClosed, costs: list[StoreCost], plan: CostingPlan) -> CostingSummary:
    """Totals per brand and store, and the largest movers."""
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
        brands=sorted(brands.values(), key=lambda b: b.brand),
        per_store=costs,
        largest_movers=movers,
        note=note,
    )
