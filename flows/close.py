"""The month-end close as one job: ``engine submit close --period 2026-11``.

Steps, each a step run with its own checkpoint, so a worker killed at any
point leaves the job to resume where it stopped. The job holds the
period's concurrency key (``period:{period}``, limit 1 per job, as posting
and costing do): its own chunks and stores run side by side, and never
beside a posting or costing job of the period. It cannot deadlock on its
own key: its step runs share one slot, and its ``close`` step, waiting for
another job of the period, retries (freeing the slot) rather than waits.

1. ``plan``: the period exists and is not closed, every store has its
   starting point for it (as :mod:`flows.costing` requires); the period's
   unposted documents in chunks and the stores to cost. A submit that
   fails these is refused (exit 2).
2. ``post_chunk`` (one per chunk) and ``cost_store`` (one per store), in
   parallel: the posting and costing flows' own fenced writes, so a
   re-delivered or retried chunk or store posts and costs nothing twice.
3. ``check``: marks the period costed, takes its trial balance and runs
   every cross-check of :mod:`flows.erp.checks`; the job fails naming each
   broken identity, and the period stays open for a fix.
4. ``close``: closes the period (:func:`flows.erp.periods.close`: under the
   period's exclusive row lock, again checked). Another posting, costing or
   close job of the period still active makes it wait and try again.
5. ``month_end``: the whole month end on one page (the report): documents
   posted and rejected, COGS per brand and store, the trial balance, the
   checks, and who closed the period when.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel

from engine import Fail, Flow, Refused, Retry, StepContext, active_jobs, job_info
from flows import costing, posting
from flows.erp import checks, periods
from flows.erp.books import Money, TrialBalance, trial_balance
from flows.erp.checks import BooksCheck
from flows.erp.inventory import StoreRef
from flows.erp.periods import PeriodEvent
from flows.posting import MAX_REJECTIONS, Chunk, ChunkResult, Rejection
from flows.types import Period

__all__ = ["CloseParams", "ClosePlan", "MonthEnd", "flow"]


class CloseParams(BaseModel):
    """Parameters of a month-end close."""

    period: Period


class ClosePlan(BaseModel):
    """What the close will do: post these chunks, cost these stores."""

    period: str
    next_period: str
    selected: int
    chunks: list[Chunk]
    stores: list[StoreRef]


class Verified(BaseModel):
    """The books of the period once posted and costed: they balance and check."""

    period: str
    marked_costed: bool
    trial_balance: TrialBalance
    checks: BooksCheck


class Closed(BaseModel):
    """Who closed the period, and when."""

    period: str
    closed_by: str
    closed_at: datetime


class MonthEnd(BaseModel):
    """The month end on one page."""

    period: str
    closed_by: str
    closed_at: datetime
    documents_selected: int
    documents_posted: int
    documents_rejected: int
    posted_debit: Money
    posted_credit: Money
    rejections: list[Rejection]
    stores: int
    cogs_value: Money
    closing_value: Money
    brands: list[costing.BrandTotal]
    per_store: list[costing.StoreCost]
    trial_balance: TrialBalance
    checks: BooksCheck
    history: list[PeriodEvent]


flow = Flow(
    "close",
    params=CloseParams,
    # 2: holds the period's concurrency key, like the posting and costing it runs
    version=2,
    description="Month-end close: post, cost every store, check the books, close the period.",
    concurrency=periods.PERIOD_KEY,
)


def _plan(conn: psycopg.Connection[Any], period: str) -> ClosePlan:
    costs = costing.plan_costing(conn, period, None)
    selection = posting.select_chunks(conn, period)
    return ClosePlan(
        period=period,
        next_period=costs.next_period,
        selected=selection.selected,
        chunks=selection.chunks,
        stores=costs.stores,
    )


@flow.admit
def admit(params: CloseParams, conn: psycopg.Connection[Any]) -> None:
    """The period is not closed and every store can be costed for it."""
    costing.plan_costing(conn, params.period, None)


@flow.step()
def plan(params: CloseParams, ctx: StepContext) -> ClosePlan:
    """The documents to post and the stores to cost; fail if the period cannot close."""
    try:
        found = _plan(ctx.conn, params.period)
    except Refused as exc:
        raise Fail(str(exc)) from exc
    periods.ensure_period(ctx.conn, found.next_period)
    return found


@flow.step(map_over="plan.chunks")
def post_chunk(chunk: Chunk, params: CloseParams, ctx: StepContext) -> ChunkResult:
    """Post or reject one chunk of the period's documents (as the posting flow does)."""
    return posting.post_one_chunk(ctx.conn, params.period, chunk)


@flow.step(map_over="plan.stores")
def cost_store(store: StoreRef, params: CloseParams, ctx: StepContext) -> costing.StoreCost:
    """Cost one store for the period (as the costing flow does)."""
    return costing.cost_one_store(ctx.conn, params.period, store)


@flow.step(after=["post_chunk", "cost_store"])
def check(params: CloseParams, ctx: StepContext) -> Verified:
    """Mark the period costed, take its trial balance and run every cross-check."""
    marked = periods.mark_costed_if_complete(ctx.conn, params.period, f"close job {ctx.job_id}")
    tb = trial_balance(ctx.conn, params.period)
    report = checks.check_period(ctx.conn, params.period)
    problems = report.problems
    if not tb.balanced:
        problems.insert(0, f"trial balance: debit {tb.debit} != credit {tb.credit}")
    if problems:
        raise Fail(f"the books of {params.period} do not check: " + "; ".join(problems))
    return Verified(period=params.period, marked_costed=marked, trial_balance=tb, checks=report)


@flow.step(after=["check"])
def close(params: CloseParams, ctx: StepContext) -> Closed:
    """Close the period; wait while another job of the period is still active."""
    busy = active_jobs(
        ctx.conn, flows=periods.BOOK_FLOWS, params={"period": params.period}, exclude=ctx.job_id
    )
    if busy:
        names = ", ".join(f"{j.flow} {j.id}" for j in busy[:5])
        raise Retry(reason=f"waiting for {len(busy)} active job(s) of {params.period}: {names}")
    me = job_info(ctx.conn, ctx.job_id)
    by = f" for {me.submitted_by}" if me is not None and me.submitted_by else ""
    try:
        event = periods.close(
            ctx.conn, params.period, actor=f"close job {ctx.job_id}{by}", job=ctx.job_id
        )
    except Refused as exc:
        raise Fail(str(exc)) from exc
    return Closed(period=params.period, closed_by=event.actor, closed_at=event.at)


@flow.step(after=["close", "check", "post_chunk", "cost_store", "plan"])
def month_end(
    closed: Closed,
    verified: Verified,
    posted: list[ChunkResult],
    costs: list[costing.StoreCost],
    found: ClosePlan,
    ctx: StepContext,
) -> MonthEnd:
    """The whole month end on one page."""
    rejections = sorted((j for r in posted for j in r.rejections), key=lambda j: j.id)
    return MonthEnd(
        period=found.period,
        closed_by=closed.closed_by,
        closed_at=closed.closed_at,
        documents_selected=found.selected,
        documents_posted=sum(r.posted for r in posted),
        documents_rejected=sum(r.rejected for r in posted),
        posted_debit=sum((r.debit for r in posted), Decimal(0)),
        posted_credit=sum((r.credit for r in posted), Decimal(0)),
        rejections=rejections[:MAX_REJECTIONS],
        stores=len(costs),
        cogs_value=sum((c.cogs_value for c in costs), Decimal(0)),
        closing_value=sum((c.closing_value for c in costs), Decimal(0)),
        brands=costing.brand_totals(costs),
        per_store=costs,
        trial_balance=verified.trial_balance,
        checks=verified.checks,
        history=periods.history(ctx.conn, found.period),
    )
