"""Posting: turn a period's unposted accounting documents into journals.

``engine submit posting --period 2026-11 [--wait]``

Method:

The documents of a period are those *dated* in it (``date_period``, the month
of ``issued_on``), whatever month entered them: their journal and stock moves
belong to that month. One dated in a closed month is never posted there: it
waits, listed by :mod:`flows.erp.dated` (the check, the close report, the
console's Periods page), until it is redated into the first open period
(:mod:`flows.erp.corrections`: its ``posting_period``, which posting reads);
one dated in a later month waits for its posting.

1. ``select_documents`` splits the period's unposted documents into chunks of
   ``ERP_POSTING_CHUNK_SIZE`` (500) by id range (first id, last id, count);
   the period must exist and not be closed: a submit for a closed period is
   refused (exit 2), and every chunk share-locks the period's row, so a
   period closed while the job ran fails the job with its documents still
   unposted rather than writing into closed books (see
   :mod:`flows.erp.periods`). Documents that move stock are refused too while
   the period's stock (or a later period's) is being costed
   (:func:`check_postable`); into a costed period they are posted and what
   they change is marked stale, in the chunk's transaction, for the next
   costing to recost (:mod:`flows.erp.recost`).
2. ``post_chunk`` runs once per chunk in the step's fenced transaction
   (``ctx.conn``), so a chunk's journals, stock moves and status changes
   commit together with its checkpoint, or not at all. One statement locks
   and judges every unposted document of the range: its lines balance (total
   debit = total credit, and more than zero), every account exists in
   ``erp_accounts``, no line is both debit and credit, a purchase line's
   amount is its quantity x unit cost, only stock received is posted to 1300
   (the rest of Inventory is costing's), a transfer names another store, a
   stock line has an item and a quantity. An invalid document is marked
   ``rejected`` with every problem in its reason (``unbalanced: debit 120.00
   != credit 100.00``, ``unknown account 9999 on line 2``); it never blocks
   the others. A valid one gets one journal through
   :func:`flows.erp.ledger.post` (source ``document``, source key
   ``document:<id>``: the net amount per account, on the document's store),
   its stock moves (a sale, a return, a receipt at its unit cost, a count
   difference, both sides of a transfer) and status ``posted``. A cost
   correction (a value-only correction of a closed period's receipt) is judged
   the same way and its 1300 amount split between stock on hand and COGS by
   quantity, its on-hand share a value-only stock move into the period's
   average (:mod:`flows.erp.value_corrections`).
3. ``reconcile`` checks that this job's journals balance, that every document
   journal of the period balances in the database, and that posted + rejected
   equals the number selected; it fails the job loudly otherwise. When the
   period's rejected documents without an approval (every job's, dated in
   the period) pass the period's limit (:mod:`flows.erp.approvals`:
   ``--approve-rejects-over N`` sets or tightens it in ``select_documents``),
   it then waits for an accountant's decision, recorded per document, the
   signal ``approve`` (``engine signal JOB_ID approve --data '{"decision":
   "approve", "reason": "..."}'``, or ``'{"decision": "reject", "reason":
   "..."}'``; no decision: approve; a reason either way, from someone other
   than who submitted the posting or its close: the engine refuses it
   otherwise, :mod:`engine.waits.approvals`), holding no worker
   while it waits. Before it parks it publishes what is decided on
   (:class:`AwaitingApproval`: the counts, the totals, the rejected documents
   with their reasons, the limit), which the run report and the approvals
   inbox (:func:`engine.awaiting_approval`) show. The decision, who sent it
   (the signal's sender: the CLI's OS user or ``--by``, the console's user),
   when and why, is in the summary (:class:`Approval`) and in the period's
   history (``engine books history``), written with this step's checkpoint.
4. ``decide`` returns the summary, or fails the job (:class:`engine.Reject`:
   the data is at fault; no retry, no dead letter) when the accountant
   rejected the batch, naming who and why. The documents posted stay posted;
   the rejected ones stay rejected for a fix and a new posting.

A posting job holds the period's concurrency key with the costing and close
jobs of that period (:data:`flows.erp.periods.PERIOD_KEY`: its chunks run
side by side, no step of another book job of the period beside them).
Chunks are id ranges, not stores, so they carry no ``store`` key.

Posting twice is impossible: the source key is unique (``ON CONFLICT DO
NOTHING``), only documents whose journal the statement inserted are marked
posted, and every update restates ``status = 'unposted'``. A retried chunk, a
duplicate delivery or a second job for the period therefore posts nothing again.
A document added to a chunk's id range after the selection is posted with the
chunk and makes ``reconcile`` report the count mismatch.

Each chunk tags its job with the number of every document it posted or
rejected (``ctx.tag("document", ...)``, one statement, in the chunk's
transaction): the runs page finds the job that posted a document by its number.

Selecting, judging and posting a range are :mod:`flows.erp.document_posting`'s
(the close and the tests post through it too); this module is the flow: its
steps, the approval wait and the summary.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

import psycopg
from pydantic import BaseModel, Field

from engine import Fail, Flow, Refused, Reject, Signal, StepContext
from flows.erp import approvals, corrections, periods
from flows.erp.books import Money
from flows.erp.document_posting import (
    MAX_REJECTIONS,
    Chunk,
    ChunkResult,
    Rejection,
    Selection,
    check_postable,
    post_one_chunk,
    select_chunks,
)
from flows.erp.queries import NamedQueries
from flows.erp.types import Period
from flows.erp.value_corrections import ValueSplit

__all__ = [
    "APPROVAL_SIGNAL",
    "DOCUMENT_TAG",
    "Approval",
    "AwaitingApproval",
    "PostingParams",
    "PostingSummary",
    "flow",
]

_q = NamedQueries("posting")

APPROVAL_SIGNAL = "approve"
"""The signal a batch with too many rejections waits for: ``{"decision": "approve"|"reject",
"reason": "..."}``."""


class PostingParams(BaseModel):
    """Parameters of a posting job."""

    period: Period
    approve_rejects_over: int | None = Field(
        default=None,
        ge=0,
        description=(
            "the period's limit: wait for the signal 'approve' while more of the period's "
            "rejected documents than this have no approval (sets or tightens the period's "
            "limit, never loosens it; default: the period's, else ERP_APPROVE_REJECTS_OVER, "
            "else never wait)"
        ),
    )


Decision = Literal["approve", "reject"]


class Approval(BaseModel):
    """An accountant's decision on a batch with many rejections: who, when, what, why.

    From the signal ``approve``: ``by`` is who sent it (the CLI's OS user or
    ``--by``, the console's signed-in user; a ``by`` in its data only when
    the sender is unknown), ``at`` when (the database clock), ``decision``
    and ``reason`` its data's (``{"decision": "reject", "reason": "..."}``;
    no decision: approve).
    """

    by: str
    at: datetime
    threshold: int
    decision: Decision = "approve"
    reason: str = ""
    documents: int = Field(
        default=0, description="rejected documents of the period decided on (each recorded)"
    )


class PostingSummary(BaseModel):
    """The job's result: counts, totals and the rejected documents."""

    period: str
    chunks: int
    selected: int
    posted: int
    rejected: int
    debit: Money
    credit: Money
    period_journals: int = Field(description="document journals of the period, all jobs")
    period_debit: Money
    period_credit: Money
    rejections: list[Rejection] = Field(
        description=f"the first {MAX_REJECTIONS} by id; `rejected` is the full count"
    )
    approval: Approval | None = Field(
        default=None, description="set when the rejections needed an approval"
    )
    value_corrections: list[ValueSplit] = Field(
        default_factory=list,
        description=f"the cost corrections posted by this job, each item line's split between "
        f"stock on hand and COGS (the first {MAX_REJECTIONS})",
    )


class AwaitingApproval(BaseModel):
    """What the accountant sees while the batch waits: the wait's summary.

    The chunks are posted; the rejected documents stay rejected whatever the
    decision. Approving lets the batch close; rejecting fails the job.
    """

    period: str
    selected: int
    posted: int
    rejected: int
    debit: Money
    credit: Money
    threshold: int = Field(description="more rejections than this need an approval")
    unapproved: int = Field(
        default=0,
        description="rejected documents dated in the period without an approval (every "
        "job's): what is decided on",
    )
    rejections: list[Rejection] = Field(
        description=f"the unapproved documents, the first {MAX_REJECTIONS} by id"
    )


flow = Flow(
    "posting",
    params=PostingParams,
    # 3: holds the period's concurrency key (a job of version 2 in flight runs without it)
    # 4: the approval wait (approve_rejects_over) and PostingSummary.approval
    # 5: the wait shows what is approved; approve or reject; the last step is `decide`
    # 6: the approval is an engine approval: not by the submitter (or the close's), with a reason
    # 6: the limit is the period's; the wait counts the period's unapproved rejections
    # 6: keeps what each document posted (erp_document_postings) for the ties of the check
    # 6: posts the documents dated in the period (date_period), whatever month entered them
    # 7: posts the documents redated into the period too (posting_period), records each
    #    verdict in the document's history, bars who requeued or redated from approving
    # 8: posts cost corrections (value only, split between stock on hand and COGS), listed in
    #    ChunkResult/PostingSummary.value_corrections
    version=8,
    description="Post a period's documents to journals in chunks; reject invalid ones.",
    searchable=("period",),  # engine runs --period (flows.tools.search)
    concurrency=periods.PERIOD_KEY,
    retention=periods.BOOKS_RETENTION,  # kept live for a year and more (engine prune)
    signals=(APPROVAL_SIGNAL,),  # an accountant's go-ahead when too many were rejected
    approvals=(APPROVAL_SIGNAL,),  # segregation of duties: engine.waits.approvals
)


DOCUMENT_TAG = "document"
"""The tag under which a posting job carries the numbers of the documents it posted or rejected."""


@flow.admit
def admit(params: PostingParams, conn: psycopg.Connection[Any]) -> None:
    """The period exists, is not closed, and its stock is not costed while documents wait."""
    check_postable(conn, params.period)


@flow.step()
def select_documents(params: PostingParams, ctx: StepContext) -> Selection:
    """Split the period's unposted documents into id-range chunks; fail if it is closed."""
    try:
        selection = select_chunks(ctx.conn, params.period)
    except Refused as exc:
        raise Fail(str(exc)) from exc
    # the period's limit, set or tightened here: it commits with this checkpoint, before any wait
    approvals.claim_threshold(
        ctx.conn, params.period, params.approve_rejects_over, actor=f"posting job {ctx.job_id}"
    )
    # whoever requeued or redated what this job judges may not approve it (invariant 21)
    ctx.bar_approvers(corrections.correctors(ctx.conn, params.period))
    return selection


@flow.step(map_over="select_documents.chunks")
def post_chunk(chunk: Chunk, params: PostingParams, ctx: StepContext) -> ChunkResult:
    """Post or reject one chunk's documents in the step's fenced transaction; tag the job
    with their numbers."""
    return post_one_chunk(
        ctx.conn,
        params.period,
        chunk,
        tag=lambda numbers: ctx.tag(DOCUMENT_TAG, numbers),
        job_id=ctx.job_id,
    )


@flow.step(after=["post_chunk", "select_documents"])
def reconcile(
    results: list[ChunkResult], selection: Selection, params: PostingParams, ctx: StepContext
) -> PostingSummary:
    """Check the job's and the period's journals balance and every document was accounted for."""
    posted = sum(r.posted for r in results)
    rejected = sum(r.rejected for r in results)
    debit = sum((r.debit for r in results), Decimal(0))
    credit = sum((r.credit for r in results), Decimal(0))
    books = _q.one(ctx.conn, "journal_select_document_totals", {"period": params.period})
    problems: list[str] = []
    if debit != credit:
        problems.append(f"the journals posted do not balance: debit {debit} != credit {credit}")
    if books["unbalanced"]:
        problems.append(
            f"{books['unbalanced']} document journal(s) of period {params.period} do not balance"
        )
    if posted + rejected != selection.selected:
        problems.append(
            f"posted {posted} + rejected {rejected} != selected {selection.selected} "
            "(documents of the period changed while posting)"
        )
    if problems:
        raise Fail(f"posting {params.period} does not reconcile: " + "; ".join(problems))
    rejections = sorted((j for r in results for j in r.rejections), key=lambda j: j.id)
    approval = None
    # the period's limit and its unapproved rejections, every job's (flows.erp.approvals)
    threshold = approvals.threshold(ctx.conn, params.period)
    unapproved = approvals.unapproved(ctx.conn, params.period)
    if threshold is not None and len(unapproved) > threshold:
        # the accountant sees the documents while it waits (no worker held); once the signal
        # has come this step runs again from the top and the wait returns it
        waiting = AwaitingApproval(
            period=params.period,
            selected=selection.selected,
            posted=posted,
            rejected=rejected,
            debit=debit,
            credit=credit,
            threshold=threshold,
            unapproved=len(unapproved),
            rejections=[
                Rejection(
                    id=d.id,
                    number=d.number,
                    reason=d.reason,
                    amount=d.amount,
                    store=d.store,
                    date=d.issued_on,
                )
                for d in unapproved[:MAX_REJECTIONS]
            ],
        )
        approval = _decided(ctx, waiting, ctx.wait_for_signal(APPROVAL_SIGNAL, summary=waiting))
    return PostingSummary(
        period=params.period,
        chunks=len(results),
        selected=selection.selected,
        posted=posted,
        rejected=rejected,
        debit=debit,
        credit=credit,
        period_journals=books["journals"],
        period_debit=books["debit"],
        period_credit=books["credit"],
        rejections=rejections[:MAX_REJECTIONS],
        approval=approval,
        value_corrections=[s for r in results for s in r.value_corrections][:MAX_REJECTIONS],
    )


@flow.step(after=["reconcile"])
def decide(summary: PostingSummary, ctx: StepContext) -> PostingSummary:
    """The batch's summary; the job fails here if the accountant rejected the batch.

    A step of its own so that the rejection, recorded in the period's history
    by ``reconcile``, commits with that step's checkpoint before the job fails.
    """
    approval = summary.approval
    if approval is not None and approval.decision == "reject":
        why = approval.reason or "no reason given"
        raise Reject(
            f"posting {summary.period} rejected by {approval.by} at "
            f"{approval.at:%Y-%m-%d %H:%M:%S %Z}: {why} ({approval.documents} document(s) "
            f"rejected, over the limit of {approval.threshold}; the {summary.posted} posted "
            "stay posted)"
        )
    return summary


def _decided(ctx: StepContext, waiting: AwaitingApproval, signal: Signal) -> Approval:
    """The decision, recorded on each document shown and in the period's history.

    In the step's fenced transaction: recorded once, with its checkpoint. The
    documents are the period's unapproved rejections as the wait showed them
    (the job holds the period's key while it waits, so no posting of the
    period rejects another meanwhile; one rejected after the signal was sent
    is not decided on). Past the first :data:`MAX_REJECTIONS` listed, the rest
    stay undecided: the next posting of the period asks about them.
    """
    listed = {r.id for r in waiting.rejections}
    shown = [
        d
        for d in approvals.unapproved(ctx.conn, waiting.period, before=signal.at)
        if d.id in listed
    ]
    approval = _approval(signal, waiting.threshold).model_copy(update={"documents": len(shown)})
    approvals.record_decisions(
        ctx.conn,
        shown,
        decision=approval.decision,
        by=approval.by,
        reason=approval.reason,
        job_id=ctx.job_id,
    )
    periods.record_posting_decision(
        ctx.conn,
        waiting.period,
        approved=approval.decision == "approve",
        actor=approval.by,
        reason=_decision_text(ctx.job_id, waiting, approval),
    )
    return approval


def _approval(signal: Signal, threshold: int) -> Approval:
    """The decision the signal carries; :class:`engine.Reject` for one that is not valid.

    The sender recorded by the engine (``sent_by``) is the approver; ``by`` in
    the data counts only when the sender is unknown (a signal from code).
    """
    data = signal.data if isinstance(signal.data, dict) else {}
    decision = data.get("decision", "approve")
    if decision not in ("approve", "reject"):
        # a signal is sent once: this one cannot be corrected, so the batch cannot close
        raise Reject(
            f"signal {APPROVAL_SIGNAL!r} has decision {decision!r}: expected 'approve' or "
            '\'reject\' (e.g. {"decision": "reject", "reason": "..."}); nothing was '
            "approved"
        )
    by = signal.sent_by or data.get("by") or "unknown"
    reason = data.get("reason")
    return Approval(
        by=str(by),
        # to the second: the report shows it as written
        at=signal.at.replace(microsecond=0),
        threshold=threshold,
        decision=decision,
        reason="" if reason is None else str(reason),
    )


def _decision_text(job_id: uuid.UUID, waiting: AwaitingApproval, approval: Approval) -> str:
    """The period history's reason: the job, what was decided on, and the approver's words."""
    text = (
        f"posting job {job_id}: {waiting.unapproved} document(s) rejected, over the limit "
        f"of {waiting.threshold}"
    )
    return f"{text}; {approval.reason}" if approval.reason else text
