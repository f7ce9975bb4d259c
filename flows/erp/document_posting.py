"""A period's documents posted as journals: selected in id-range chunks, judged, posted.

The work of the posting flow (:mod:`flows.posting`, whose docstring gives
the method), callable on its own in a caller's transaction: the close, the
tests and the bench post through it. :func:`check_postable` says whether a
period's documents may be posted now (it exists, is not closed, its stock
is not being costed); :func:`select_chunks` splits its unposted documents
into id ranges; :func:`post_documents` locks and judges a range, posts the
valid documents' journals through :func:`flows.erp.ledger.post` and rejects
the others with their reasons, all or nothing, and posts nothing twice.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel, Field

from engine import Fail, Refused
from flows.erp import corrections, ledger, periods, recost, value_corrections
from flows.erp.books import Money
from flows.erp.config import ErpSettings
from flows.erp.ledger import Journal, signed
from flows.erp.queries import NamedQueries
from flows.erp.value_corrections import ValueSplit

__all__ = [
    "MAX_REJECTIONS",
    "Chunk",
    "ChunkResult",
    "Rejection",
    "Selection",
    "Tagger",
    "check_postable",
    "post_documents",
    "post_one_chunk",
    "select_chunks",
]

_q = NamedQueries("posting")

MAX_REJECTIONS = 200
"""Rejected documents listed per chunk result and in the summary (counts stay exact)."""

Tagger = Callable[[Sequence[str]], object]
"""Given the numbers of the documents a chunk marked (the posting flow gives ``ctx.tag`` under its
``DOCUMENT_TAG``)."""


class Chunk(BaseModel):
    """An id range of unposted documents of the period: one step run."""

    first_id: int
    last_id: int
    count: int = Field(ge=1, description="unposted documents in the range when selected")


class Selection(BaseModel):
    """What the job will post: the period's unposted documents, in chunks."""

    period: str
    period_status: str
    selected: int
    chunks: list[Chunk]


class Rejection(BaseModel):
    """A document posting refused, and why; what an approver reads it by (the wait's)."""

    id: int
    number: str
    reason: str
    amount: Money | None = Field(default=None, description="the document's debit total")
    store: str | None = Field(default=None, description="the store's code")
    date: datetime.date | None = Field(default=None, description="the day it was issued")


class ChunkResult(BaseModel):
    """What posting one chunk did."""

    first_id: int
    last_id: int
    posted: int
    rejected: int
    stock_moves: int = Field(default=0, description="stock moves written from the posted lines")
    debit: Money
    credit: Money
    rejections: list[Rejection] = Field(description=f"at most {MAX_REJECTIONS}, by id")
    value_corrections: list[ValueSplit] = Field(
        default_factory=list,
        description=f"the cost corrections posted, each item line's split (at most "
        f"{MAX_REJECTIONS}, by document and line)",
    )


def post_documents(
    conn: psycopg.Connection[Any],
    period: str,
    first_id: int,
    last_id: int,
    *,
    tag: Tagger | None = None,
    job_id: uuid.UUID | None = None,
) -> ChunkResult:
    """Validate and post (or reject) the unposted documents of ``period`` in an id range.

    In the caller's transaction: the documents are locked and judged, the
    valid ones' journals posted through :func:`flows.erp.ledger.post` (one per
    document, the net amount per account on the document's store), then
    those documents marked posted with their stock moves written, and the
    invalid ones rejected with their reasons; ``tag`` is given the numbers of
    the documents marked, once, in the same transaction, and each verdict is in
    the document's history, naming ``job_id`` (:mod:`flows.erp.corrections`). Calling it again for
    the same range posts nothing more (see the module docstring).
    """
    params = {"period": period, "first_id": first_id, "last_id": last_id}
    judged = _q.rows(conn, "documents_lock_and_judge", params)
    # a cost correction's 1300 amount is split between stock on hand and COGS
    splits = value_corrections.split(
        conn,
        period,
        [d["id"] for d in judged if d["reason"] is None and d["kind"] == "cost_correction"],
    )
    journals = [
        Journal(
            period=period,
            source="document",
            source_key=f"document:{d['id']}",
            store_id=d["store_id"],
            memo=d["memo"],
            lines=[
                line
                for account, amount in _amounts(d, splits)
                for line in signed(account, d["store_id"], amount)
            ],
        )
        for d in judged
        if d["reason"] is None
    ]
    posted = ledger.post(conn, journals)
    fresh = set(posted.keys)
    done = [j for j in journals if j.source_key in fresh]
    bad = [d for d in judged if d["reason"] is not None]
    row = _q.one(
        conn,
        "documents_mark_and_move_if_unposted",
        {
            "posted": [int(j.source_key.split(":", 1)[1]) for j in done],
            "rejected": [d["id"] for d in bad],
            "reasons": [d["reason"] for d in bad],
        },
    )
    corrections.record_verdicts(
        conn,
        posted=[int(j.source_key.split(":", 1)[1]) for j in done],
        rejected=[d["id"] for d in bad],
        reasons=[d["reason"] for d in bad],
        job_id=job_id,
    )
    posted_ids = {int(j.source_key.split(":", 1)[1]) for j in done}
    kept = [s for s in splits if s.document_id in posted_ids]
    moved = value_corrections.record(conn, kept)
    # a backdated document into a costed period: what it changes is recosted next time
    recost.mark_documents(conn, sorted(posted_ids))
    if tag is not None and row["numbers"]:
        tag(row["numbers"])
    return ChunkResult(
        first_id=first_id,
        last_id=last_id,
        posted=row["posted"],
        rejected=row["rejected"],
        stock_moves=row["moves"] + moved,
        debit=sum((j.debit for j in done), Decimal(0)),
        credit=sum((j.credit for j in done), Decimal(0)),
        rejections=[
            Rejection(id=d["id"], number=d["number"], reason=d["reason"])
            for d in bad[:MAX_REJECTIONS]
        ],
        value_corrections=kept[:MAX_REJECTIONS],
    )


def _amounts(judged: dict[str, Any], splits: list[ValueSplit]) -> list[tuple[str, Decimal]]:
    """A judged document's net amount per account; a cost correction's with the sold share
    of its value moved from 1300 to 5000 (:mod:`flows.erp.value_corrections`)."""
    amounts = [(a["account"], Decimal(a["amount"])) for a in judged["amounts"]]
    if judged["kind"] != "cost_correction":
        return amounts
    return value_corrections.journal_amounts(
        amounts, [s for s in splits if s.document_id == judged["id"]]
    )


def check_postable(
    conn: psycopg.Connection[Any], period: str, *, doing: str = "posting its documents"
) -> str:
    """The period's status, or :class:`engine.Refused` if its documents cannot be posted.

    Refused when the period does not exist or is closed (its row is
    share-locked for the caller's transaction), and when it has unposted
    documents that move stock while its stock, or a later period's, is being
    costed (averages solved, not every store costed): the solve froze those
    facts. Into a costed period they are posted, and mark what they change
    stale for the next costing to recost (:mod:`flows.erp.recost`). A
    document without stock lines (a service invoice) can always be posted.
    """
    status = periods.lock_for_writing(conn, period, doing=doing)
    stock = periods.stock_state(conn, period)
    if stock.unposted and stock.valued and not stock.costed:
        raise Refused(
            f"cannot post {stock.unposted} document(s) that move stock into {period}: "
            f"its stock is being costed ({stock.costed_stores} store(s) costed, averages "
            f"{'solved' if stock.solved else 'not solved'}); finish its costing (engine "
            f"submit costing --period {period}) and post again: they are then recosted"
        )
    if stock.unposted and stock.later_being_costed:
        later = stock.later_being_costed[0]
        raise Refused(
            f"cannot post {stock.unposted} document(s) that move stock into {period}: "
            f"{later} is being costed and {period}'s closings are its openings; finish its "
            f"costing (engine submit costing --period {later}) and post again"
        )
    return status


def select_chunks(conn: psycopg.Connection[Any], period: str) -> Selection:
    """The period's unposted documents in id-range chunks; :class:`engine.Refused` if they
    cannot be posted (:func:`check_postable`)."""
    status = check_postable(conn, period)
    rows = _q.rows(
        conn,
        "document_select_unposted_chunks",
        {"period": period, "chunk_size": ErpSettings().posting_chunk_size},
    )
    chunks = [Chunk.model_validate(r) for r in rows]
    return Selection(
        period=period,
        period_status=status,
        selected=sum(c.count for c in chunks),
        chunks=chunks,
    )


def post_one_chunk(
    conn: psycopg.Connection[Any],
    period: str,
    chunk: Chunk,
    *,
    tag: Tagger | None = None,
    job_id: uuid.UUID | None = None,
) -> ChunkResult:
    """Post one chunk in the caller's (fenced) transaction, under the period's share lock."""
    try:
        check_postable(conn, period, doing=f"posting documents {chunk.first_id}-{chunk.last_id}")
    except Refused as exc:
        raise Fail(f"{exc}; the documents stay unposted") from exc
    return post_documents(conn, period, chunk.first_id, chunk.last_id, tag=tag, job_id=job_id)
