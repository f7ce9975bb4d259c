"""The month-end close as one job: ``engine submit close --period 2026-11``.

Steps, each a step run with its own checkpoint, so a worker killed at any
point leaves the job to resume where it stopped. The job holds the
period's concurrency key (``period:{period}``, limit 1 per job, as posting
and costing do) from its first step to its last, waiting included; the
posting and costing it runs are its **child jobs**, which inherit that slot
(:mod:`engine.flow.concurrency`), so they run while every other posting, costing
or close job of the period waits. Its ``close`` step, waiting for another
job of the period, retries (freeing the slot) rather than waits.

1. ``books``: submits the posting of the period as a child job
   (:mod:`flows.posting`) and waits for it, holding no worker; then the
   costing of the period (:mod:`flows.costing`), which must follow the
   posting, and waits for it. Each child is submitted once per step run (a
   rerun finds it); a failed or cancelled child fails the close naming the
   child job and its error. The posting child waits for an accountant's
   ``approve`` signal (sent to the child job) while the period's rejected
   documents without an approval, every job's, pass the period's limit
   (``--approve-rejects-over N`` sets or tightens it, never loosens it:
   :mod:`flows.erp.approvals`). Their summaries are this step's checkpoint.
2. ``check``: marks the period costed, takes its trial balance and runs
   every cross-check of :mod:`flows.erp.checks`; the job fails naming each
   broken identity or refusing flag (:mod:`flows.erp.flags`; warnings are
   shown in the report), and the period stays open for a fix.
3. ``close``: closes the period (:func:`flows.erp.periods.close`: under the
   period's exclusive row lock, again checked). Another posting, costing or
   close job of the period still active (one submitted during the close has
   waited for its slot until now) makes it give the slot back and try again
   (:data:`CLOSE_RETRY`: for up to ~25 minutes).
4. ``month_end``: the whole month end on one page (the report): every
   document of the period (posted, rejected approved or not, unposted, dated
   elsewhere: :mod:`flows.erp.documents`), the posting batch and COGS per
   brand and store (from the children's summaries), the trial balance, the
   checks, and who closed the period when; the report links the child jobs.

A submit for a period that is closed, or whose stores cannot be costed, is
refused (exit 2).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import psycopg
from pydantic import BaseModel, Field

from engine import (
    Child,
    Fail,
    Flow,
    Refused,
    Reject,
    Retry,
    RetryPolicy,
    StepContext,
    active_jobs,
    job_info,
    record_action,
)
from flows import costing, posting
from flows.erp import checks, dated, period_order, periods
from flows.erp.books import Money, TrialBalance, trial_balance
from flows.erp.checks import BooksCheck
from flows.erp.document_posting import MAX_REJECTIONS, Rejection, check_postable
from flows.erp.documents import PeriodDocuments, period_documents
from flows.erp.periods import PeriodEvent
from flows.erp.types import Period
from flows.posting import Approval, PostingSummary

__all__ = ["Books", "CloseParams", "MonthEnd", "flow"]


class CloseParams(BaseModel):
    """Parameters of a month-end close."""

    period: Period
    approve_rejects_over: int | None = Field(
        default=None,
        ge=0,
        description=(
            "the period's limit: the posting child waits for the signal 'approve' while "
            "more of the period's rejected documents than this have no approval (sets or "
            "tightens the period's limit, never loosens it; default: the period's, else "
            "ERP_APPROVE_REJECTS_OVER, else never wait)"
        ),
    )


class Books(BaseModel):
    """What the close's child jobs did: the period posted, then costed."""

    period: str
    posting_job: uuid.UUID
    costing_job: uuid.UUID
    posting: PostingSummary
    costing: costing.CostingSummary


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
    posting_job: uuid.UUID
    costing_job: uuid.UUID
    approval: Approval | None = None
    documents_selected: int
    documents_posted: int
    documents_rejected: int
    posted_debit: Money
    posted_credit: Money
    rejections: list[Rejection]
    documents: PeriodDocuments | None = Field(
        default=None, description="every document of the period when it closed, not the batch"
    )
    stores: int
    cogs_value: Money
    closing_value: Money
    brands: list[costing.BrandTotal]
    per_store: list[costing.StoreCost]
    trial_balance: TrialBalance
    checks: BooksCheck
    history: list[PeriodEvent]
    waiting: list[dated.Waiting] = Field(
        default=[], description="unposted documents dated in closed months: they wait"
    )


flow = Flow(
    "close",
    params=CloseParams,
    # 2: holds the period's concurrency key, like the posting and costing it runs
    # 3: posting and costing run as child jobs (step books), costing after posting
    # 4: the check carries the books' flags; a refusing flag fails it (issue 35)
    # 4 (same release): a rejected child (the accountant's decision) ends the close rejected
    # 4: the month end counts every document of the period (flows.erp.documents)
    # 4: periods close in order; the month end lists documents dated in closed months
    version=4,
    description="Month-end close: post, then cost (child jobs), check the books, close the period.",
    searchable=("period",),  # engine runs --period (flows.tools.search)
    concurrency=periods.PERIOD_KEY,
    retention=periods.BOOKS_RETENTION,  # kept live for a year and more (engine prune)
)


@flow.admit
def admit(params: CloseParams, conn: psycopg.Connection[Any]) -> None:
    """The period is not closed, nor any earlier one open, its documents can be posted and
    every store can be costed."""
    check_postable(conn, params.period)
    period_order.refuse_before_earlier(conn, params.period)  # periods close in order
    points = periods.starting_points(conn, params.period, None)
    why = periods.missing_starting_points(params.period, points)
    if why is not None:
        raise Refused(why)


def _run_child(ctx: StepContext, what: str, flow_name: str, params: dict[str, Any]) -> Child:
    """The child ``what`` of this step run once it ended well; a durable wait until then.

    Submitted once (a rerun of the step finds it); the step parks until it
    ends. A failed or cancelled child fails the close, naming it; `engine retry`
    of the close retries that child (the same job, under the same key), and
    this step waits for it again. A rejected child (an accountant rejected
    the posting: the data's decision) ends the close with ``Reject``: no dead
    letter, no alert, and no retry replays the decision.
    """
    try:
        ctx.submit_child(flow_name, params, key=what)
    except Refused as exc:
        raise Fail(f"cannot run the {what} of {params['period']} as a child job: {exc}") from exc
    ended = {c.key: c for c in ctx.wait_for_children()}
    child = ended[what]
    if child.rejected:
        raise Reject(f"{what} child job {child.job_id} ({child.flow}) rejected: {child.error}")
    if not child.ok:
        raise Fail(
            f"{what} child job {child.job_id} ({child.flow}) {child.status.value}: "
            f"{child.error or 'no error recorded'}"
        )
    return child


@flow.step()
def books(params: CloseParams, ctx: StepContext) -> Books:
    """Post the period's documents, then cost every store: two child jobs, one after the other."""
    posted = _run_child(
        ctx,
        "posting",
        posting.flow.name,
        {"period": params.period, "approve_rejects_over": params.approve_rejects_over},
    )
    # costing follows the posting: submitted only once the posting ended well
    costed = _run_child(ctx, "costing", costing.flow.name, {"period": params.period})
    return Books(
        period=params.period,
        posting_job=posted.job_id,
        costing_job=costed.job_id,
        posting=PostingSummary.model_validate(posted.output),
        costing=costing.CostingSummary.model_validate(costed.output),
    )


@flow.step(after=["books"])
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


# Every other job of the period waited for the close's slot until here: the step gives
# the slot back (a retry) until they ended, for up to ~25 minutes, then fails.
CLOSE_RETRY = RetryPolicy(max_attempts=30, base_delay_s=2.0, max_delay_s=60.0)


@flow.step(after=["check"], retry=CLOSE_RETRY)
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
    # the audit trail's entry commits with the close, in the step's fenced transaction
    record_action(
        ctx.conn,
        "close",
        "period",
        params.period,
        # in the submitter's name, else the job's own: the only names the worker's role
        # may write an entry in (migration 0026)
        actor=(me.submitted_by if me is not None and me.submitted_by else f"job {ctx.job_id}"),
        source="api",
        job_id=ctx.job_id,
        detail={"period_event": event.id, "by_job": str(ctx.job_id)},
    )
    return Closed(period=params.period, closed_by=event.actor, closed_at=event.at)


@flow.step(after=["close", "check", "books"])
def month_end(closed: Closed, verified: Verified, done: Books, ctx: StepContext) -> MonthEnd:
    """The whole month end on one page, from the children's summaries and the books."""
    posted, costed = done.posting, done.costing
    return MonthEnd(
        period=done.period,
        closed_by=closed.closed_by,
        closed_at=closed.closed_at,
        posting_job=done.posting_job,
        costing_job=done.costing_job,
        approval=posted.approval,
        documents_selected=posted.selected,
        documents_posted=posted.posted,
        documents_rejected=posted.rejected,
        posted_debit=posted.debit,
        posted_credit=posted.credit,
        rejections=posted.rejections[:MAX_REJECTIONS],
        documents=period_documents(ctx.conn, done.period),
        stores=costed.stores,
        cogs_value=costed.cogs_value,
        closing_value=costed.closing_value,
        brands=costed.brands,
        per_store=costed.per_store,
        trial_balance=verified.trial_balance,
        checks=verified.checks,
        history=periods.history(ctx.conn, done.period),
        waiting=dated.waiting(ctx.conn),
    )
