"""Inventory costing: periodic weighted average cost per store and item.

``engine submit costing --period 2026-11 [--store ST001]``

Method, per period, item and store (:mod:`flows.erp.average` states it in
full, with its proof obligations in the tests):

- **Opening** balances come from ``erp_opening_balances`` of the period
  (loaded for the store's first period, carried forward by the previous
  costing afterwards). **Receipts** are valued at their purchase unit cost,
  each to the cent; a cost correction's on-hand share is a value-only move
  (qty 0) added to the receipts' value (:mod:`flows.erp.value_corrections`).
  Moves are the posted documents' (:mod:`flows.posting`).
- With A = opening + receipts + transfers-in quantity, each store with A > 0
  has its average a, defined exactly by a x A = opening value + receipts
  value + the sum over its transfers in of (quantity x the sender's a). A
  transfer is valued at the sender's average **of the period**, so a store
  opened this month that forwards what it received passes on what it cost,
  and stores that send each other goods in a loop depend on each other:
  each item's system is solved exactly (strongly connected groups of the
  transfer graph, in topological order, with rationals: no iteration).
- **Fallback**: a store with A <= 0 takes its opening average (when its
  opening quantity is positive), else the item's standard cost; so does
  every store of a loop whose system has no unique solution (stores that
  only supply each other); the report names those loops.
- **Rounding**: the average to 4 decimals, half away from zero; a transfer
  move's value = quantity x the sender's rounded average, to the cent, the
  same on both sides; COGS = net issue quantity (sales net of returns and
  stock-count differences) x the rounded average, to the cent; closing value
  = opening + receipts + transfers in - COGS - transfers out: the remainder,
  so value is conserved to the cent per store and company-wide (a CHECK
  enforces it). **Negative stock** is not refused: issues beyond what was
  available are costed at the average, the closing quantity is negative and
  carries the remainder as its value; the summary counts such items.

Steps: ``check_period``; ``solve`` (the period's averages of the items that
move between stores, once per period, written to ``erp_item_averages``);
``recost_stale`` (a costed period's stale pairs, marked by backdated
documents, recosted forward with delta journals: :mod:`flows.erp.recost`;
nothing for a period costed afresh); ``cost_store`` per store not costed yet,
in parallel (one statement each, using the solved averages); ``costed_before``
(the stores costed before, read in one step: a recost's job, a rerun); ``mark_costed``;
``summarize`` (with the recost's pairs, old and new, and its journals).

A period is costed from fresh openings only: while an earlier period has
stale pairs, its costing is refused naming it (recost that one first).

Each store's item costs, its journals (:func:`flows.erp.inventory.costing_journals`:
COGS, stock-count adjustments and transfers through the inter-store account,
keyed by period and store, and its opening stock in its first period) and
its closing balances carried forward as the next period's opening balances
are written in the step's fenced transaction,
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
from flows.erp import facts, inventory, ledger, periods, recost
from flows.erp.inventory import FallbackGroup, Mover, Solved, StoreRef, StoreTotals
from flows.erp.recost import RecostReport
from flows.erp.types import Period


class CostingParams(BaseModel):
    period: Period
    store: str | None = Field(default=None, description="only this store (code, e.g. ST001)")


class CostingPlan(BaseModel):
    period: str
    next_period: str
    already_costed: bool
    stores: list[StoreRef]  # every store in scope, in order
    to_cost: list[StoreRef]  # those not costed for the period yet: one step each


class StoreCost(StoreTotals):
    store: StoreRef
    journal_ids: dict[str, int]
    top_movers: list[Mover]


class CostedBefore(BaseModel):
    stores: list[StoreCost]


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
    moving_items: int = 0
    loops: int = 0
    fallback_groups: list[FallbackGroup] = []
    method: str = ""
    brands: list[BrandTotal]
    per_store: list[StoreCost]
    largest_movers: list[Mover]
    note: str = ""
    recost: RecostReport | None = None


flow = Flow(
    "costing",
    params=CostingParams,
    # 3: holds the period's concurrency key (a job of version 2 in flight runs without it)
    # 4: the exact multi-store average (step solve); journals through flows.erp.ledger
    # 5: keeps the standard cost it used with the item costs (erp_item_costs.standard_cost)
    # 5: the solve fingerprints its facts; a store is not costed from stale averages
    # 6: step recost: a costed period's stale pairs (backdated documents) recosted forward
    # 7: stores costed before are read in one step (costed_before), not one step each
    version=7,
    description="Periodic weighted average per store, solved exactly across stores; journals.",
    searchable=("period", "store"),  # engine runs --period, --store (flows.tools.search)
    concurrency=periods.PERIOD_KEY,
)


STORE_TAG = "store"
"""The tag under which a costing job carries the code of each store it costed."""


def plan_costing(conn: psycopg.Connection[Any], period: str, store: str | None) -> CostingPlan:
    """The stores to cost for ``period``, or :class:`engine.Refused` naming what is missing.

    The period must exist and not be closed (its row is share-locked for the
    caller's transaction), no document that moves stock may wait unposted
    (costing values the posted moves, once), and every store in scope must
    have its starting point for it. Used by the admission check, the plan step and the close flow.
    """
    status = periods.lock_for_writing(conn, period, doing="costing")
    stock = periods.stock_state(conn, period)
    if stock.unposted and not stock.valued:
        raise Refused(
            f"cannot cost {period}: {stock.unposted} document(s) that move stock are not "
            f"posted yet (engine submit posting --period {period}, or the month end: "
            f"engine submit close --period {period})"
        )
    points = periods.starting_points(conn, period, store)
    if store is not None and not points:
        raise Refused(f"unknown store {store!r}: no store has that code")
    why = periods.missing_starting_points(period, points)
    if why is not None:
        raise Refused(why)
    recost.refuse_if_earlier_stale(conn, period)
    started = {p.store_id for p in periods.in_books(points, period)}  # not a store opened later
    costed = {p.store_id for p in points if p.costed}
    if store is not None and not started:
        raise Refused(
            f"store {store}'s books start in {points[0].first_period}: "
            f"it has nothing to cost in {period}"
        )
    stores = [s for s in inventory.stores(conn, store) if store is not None or s.id in started]
    return CostingPlan(
        period=period,
        next_period=periods.next_period(period),
        already_costed=status != "open" or all(p.costed for p in points if p.store_id in started),
        stores=stores,
        to_cost=[s for s in stores if s.id not in costed],
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
    first = False
    try:
        periods.lock_for_writing(conn, period, doing=f"costing store {store.code}")
        first = periods.mark_store_costed(conn, period, store.id)
        if first:
            # a store costed before is not costed again: nothing to verify (a recost's costing
            # job runs this for every store; the fingerprint reads the period's facts)
            facts.verify(conn, period, doing=f"costing store {store.code}")
            following = periods.open_next_for_store(conn, period, store.id)
            inventory.cost_store(conn, period, store.id, following)
    except Refused as exc:
        raise Fail(str(exc)) from exc
    if not first:
        return costed_stores(conn, period, [store])[0]
    totals = inventory.store_totals(conn, period, store.id)
    return StoreCost(
        store=store,
        journal_ids=inventory.post_costing(conn, period, store, totals),
        top_movers=inventory.top_movers(conn, period, store.id),
        **totals.model_dump(),
    )


def costed_stores(
    conn: psycopg.Connection[Any], period: str, stores: list[StoreRef]
) -> list[StoreCost]:
    """The figures of stores costed before, read in three statements whatever their number.

    Their costing journals are those of their first costing (one transaction with it): a
    store whose first costing had nothing to journal gets none now from figures a recost
    changed since, whose differences its delta journals carry."""
    totals = inventory.totals_of_stores(conn, period, [s.id for s in stores])
    movers = inventory.top_movers_of_stores(conn, period, [s.id for s in stores])
    keys = {s.id: inventory.costing_journal_keys(period, s) for s in stores}
    found = ledger.journal_ids(conn, [k for ks in keys.values() for k in ks])
    empty = inventory.store_totals_of(None)
    return [
        StoreCost(
            store=s,
            journal_ids={k: found[k] for k in keys[s.id] if k in found},
            top_movers=movers.get(s.id, []),
            **totals.get(s.id, empty).model_dump(),
        )
        for s in stores
    ]


def solve_period(conn: psycopg.Connection[Any], period: str) -> Solved:
    """Solve the period's averages once, under the period's share lock (a close waits)."""
    try:
        facts.lock_for_solve(conn, period)  # writers of its facts wait, or come after and see it
        periods.lock_for_writing(conn, period, doing="solving its averages")
        recost.refuse_if_earlier_stale(conn, period)  # its openings would be stale
    except Refused as exc:
        raise Fail(str(exc)) from exc
    solved = inventory.solve_averages(conn, period)
    if solved.solved_now:
        facts.record(conn, period)
    return solved


@flow.step(after=["check_period"])
def solve(params: CostingParams, ctx: StepContext) -> Solved:
    """Solve, exactly and once per period, the averages of the items that move between stores."""
    return solve_period(ctx.conn, params.period)


@flow.step(after=["solve"])
def recost_stale(params: CostingParams, ctx: StepContext) -> RecostReport:
    """Recost the stale pairs of the period and of each later period, forward (one fenced
    transaction: :mod:`flows.erp.recost`); nothing to do for a period costed afresh."""
    try:
        # its own row locks (recost.recost): a share lock first would be upgraded, and two
        # upgrades of one row deadlock
        return recost.recost(ctx.conn, params.period, job=ctx.job_id)
    except Refused as exc:
        raise Fail(str(exc)) from exc


@flow.step(map_over="check_period.to_cost", after=["recost_stale"], label="{code}")
def cost_store(store: StoreRef, params: CostingParams, ctx: StepContext) -> StoreCost:
    """Cost one store in one statement with the solved averages; post its journals (once).

    Tags the job with the store's code (``store``), with the checkpoint: the
    runs search finds a costing of every store by any one of them."""
    ctx.tag(STORE_TAG, store.code)
    return cost_one_store(ctx.conn, params.period, store)


@flow.step(after=["check_period", "recost_stale"])
def costed_before(
    plan: CostingPlan, recosted: RecostReport, params: CostingParams, ctx: StepContext
) -> CostedBefore:
    """The figures of the stores costed before this job (after its recost), read in one step:
    a recost's costing job, or a rerun, writes nothing for them, so one step per store
    would only pay a claim and a checkpoint each. Tags the job with their codes too."""
    pending = {s.id for s in plan.to_cost}
    before = [s for s in plan.stores if s.id not in pending]
    for store in before:
        ctx.tag(STORE_TAG, store.code)
    return CostedBefore(stores=costed_stores(ctx.conn, plan.period, before))


@flow.step(after=["cost_store", "costed_before", "check_period"])
def mark_costed(
    costs: list[StoreCost],
    before: CostedBefore,
    plan: CostingPlan,
    params: CostingParams,
    ctx: StepContext,
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


METHOD = (
    "periodic weighted average per store and item; transfers at the sender's average of "
    "the period, solved exactly across stores (loops included); average rounded to 4 "
    "decimals, values to the cent, half away from zero; fallback: opening average, else "
    "standard cost; closing value is the remainder"
)


@flow.step(
    after=["mark_costed", "cost_store", "costed_before", "check_period", "solve", "recost_stale"]
)
def summarize(
    closed: PeriodCosted,
    costed_now: list[StoreCost],
    before: CostedBefore,
    plan: CostingPlan,
    solved: Solved,
    recosted: RecostReport,
) -> CostingSummary:
    """Totals per brand and store (in the plan's order), and the largest movers."""
    order = {s.id: n for n, s in enumerate(plan.stores)}
    costs = sorted([*costed_now, *before.stores], key=lambda c: order.get(c.store.id, len(order)))
    brands = brand_totals(costs)
    movers = sorted((m for c in costs for m in c.top_movers), key=lambda m: (-m.cogs_value, m.sku))[
        :10
    ]
    note = "already costed: figures are those of the first run" if plan.already_costed else ""
    if closed.marked_costed:
        note = f"period costed; closing balances carried to {plan.next_period}"
    if recosted.periods:
        note = (
            f"recosted {recosted.pairs} stale pair(s) in {', '.join(recosted.periods)} "
            f"({len(recosted.journals)} delta journal(s)); figures after the recost"
        )
    return CostingSummary(
        period=plan.period,
        stores=len(costs),
        items_costed=sum(c.items for c in costs),
        value_moved=sum((c.receipt_value + c.transfer_in_value for c in costs), Decimal(0)),
        cogs_value=sum((c.cogs_value for c in costs), Decimal(0)),
        closing_value=sum((c.closing_value for c in costs), Decimal(0)),
        negative_items=sum(c.negative_items for c in costs),
        moving_items=solved.items,
        loops=solved.loops,
        fallback_groups=solved.fallback_groups,
        method=METHOD,
        brands=brands,
        per_store=costs,
        largest_movers=movers,
        note=note,
        recost=recosted if recosted.periods else None,
    )
