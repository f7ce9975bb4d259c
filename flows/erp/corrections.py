"""Corrections: rejected documents come back, late documents post forward (issue 36).

**Requeue** (:func:`requeue`, ``engine books requeue DOCUMENT... --reason R``,
the console's posting page). Once the ERP has fixed a rejected document's
lines, it goes back to ``unposted`` and the next posting of its period judges
it again. Its count of rejections (``erp_documents.rejections``, migration
1008) is kept, so if it is rejected again that is a new rejection, which
needs a new decision (:mod:`flows.erp.approvals`). Refused (nothing changed)
for an unknown document, one not rejected, one whose period is closed (redate
it first), and without a reason.

**Redate** (:func:`redate`, ``engine books redate DOCUMENT... --into P
--reason R``). A document dated in a closed month is never posted there
(:mod:`flows.erp.dated`); redated, it posts in ``P``, the first period not
closed of the stores it moves (its store and a transfer's receiver), after
its own month: it keeps its date (``issued_on``, ``date_period``), and its
``posting_period`` (migration 1011) becomes ``P``, the period of its journal
and stock moves. It then leaves the waiting list; the reports show it as
late, with both months. Any other ``P`` is refused naming the valid one. A
rejected document waiting in a closed month may be redated too (it stays
rejected: requeue it then).

**History** (``erp_document_events``): every verdict of posting (rejected,
why, by which job, each time; posted, by which job: :func:`record_verdicts`,
in the chunk's transaction) and every correction (requeued, redated: by whom
and why). :func:`corrected` lists the documents of a period with a history
beyond being posted once, for ``engine books documents``, the console and the
close's report.

**Approvals** (invariant 21). A requeued or redated document posting in
``P`` counts for ``P``'s limit of rejected documents like any other, and
whoever requeued or redated a document a posting judges may not approve that
posting (:func:`correctors`: the posting bars them, ``ctx.bar_approvers``).

Each correction is recorded in the engine's audit trail, one entry per
document with its reason, in the correction's own transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from pydantic import BaseModel, Field

from engine import BadInput, record_action
from flows.erp import periods
from flows.erp.queries import NamedQueries

__all__ = [
    "Corrected",
    "Correction",
    "DocumentEvent",
    "DocumentHistory",
    "Rejected",
    "corrected",
    "correctors",
    "record_verdicts",
    "redate",
    "rejected",
    "requeue",
]

_q = NamedQueries("corrections")

SHOWN = 200
"""Documents with a history listed per period (the counts stay exact)."""


class Correction(BaseModel):
    """One document corrected: requeued or redated, into which period, by whom, why."""

    number: str
    action: str
    period: str = Field(description="the period it now posts in")
    date_period: str = Field(description="the month it is dated in")
    actor: str
    reason: str


class DocumentEvent(BaseModel):
    """One event of a document's history."""

    action: str
    period: str
    actor: str
    reason: str = ""
    job_id: uuid.UUID | None = None
    at: datetime

    @property
    def line(self) -> str:
        """One line for people: what, when, by whom (or which job), why."""
        who = f"job {self.job_id}" if self.job_id else self.actor
        into = f" into {self.period}" if self.action == "redated" else ""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.action}{into} by {who} at {self.at:%Y-%m-%d %H:%M:%S}{why}"


class DocumentHistory(BaseModel):
    """A document posting in the period whose history is more than being posted once."""

    number: str
    status: str
    date: str = Field(description="its own date (issued_on)")
    date_period: str
    posting_period: str
    events: list[DocumentEvent]

    @property
    def late(self) -> bool:
        """Dated in an earlier, closed month; posted in this one."""
        return self.posting_period != self.date_period


class Corrected(BaseModel):
    """The documents of a period with a history: counts, and the first :data:`SHOWN`."""

    period: str
    corrected: int
    late: int
    documents: list[DocumentHistory]


def _reason(reason: str) -> str:
    text = reason.strip()
    if not text:
        raise BadInput("--reason: required: say why the documents are corrected (it is recorded)")
    return text


def _named(conn: psycopg.Connection[Any], numbers: Sequence[str]) -> list[dict[str, Any]]:
    """The documents named; :class:`BadInput` naming every unknown number."""
    wanted = [n.strip() for n in numbers if n.strip()]
    if not wanted:
        raise BadInput("name at least one document by its number (e.g. SI-2026-11-000123)")
    rows = _q.rows(conn, "documents_select_by_number", {"numbers": wanted})
    unknown = [r["number"] for r in rows if r["id"] is None]
    if unknown:
        raise BadInput(f"no such document: {', '.join(unknown)} (give document numbers)")
    return rows


def _audit(
    conn: psycopg.Connection[Any], done: Correction, doc: dict[str, Any], source: str
) -> None:
    record_action(
        conn,
        "requeue" if done.action == "requeued" else "redate",
        "document",
        done.number,
        actor=done.actor,
        source=source,
        reason=done.reason,
        detail={"period": done.period, "date_period": done.date_period, "id": doc["id"]},
    )


def _apply(
    conn: psycopg.Connection[Any],
    rows: list[dict[str, Any]],
    query: str,
    params: dict[str, Any],
    *,
    action: str,
    changed: str,
    source: str,
) -> list[Correction]:
    """Apply ``query`` to each document of ``rows`` (checked as read), audited one by one;
    a document that changed since it was read refuses them all (the caller's transaction)."""
    done: list[Correction] = []
    for r in rows:
        moved = _q.first(conn, query, {"id": r["id"], **params})
        if moved is None:  # changed since it was read: refused, all of them
            raise BadInput(f"{r['number']} {changed}")
        c = Correction(
            number=r["number"],
            action=action,
            period=moved["period"],
            date_period=r["date_period"],
            actor=params["actor"],
            reason=params["reason"],
        )
        _audit(conn, c, r, source)
        done.append(c)
    return done


def requeue(
    conn: psycopg.Connection[Any],
    numbers: Sequence[str],
    *,
    actor: str,
    reason: str,
    source: str = "api",
) -> list[Correction]:
    """Put the rejected documents ``numbers`` back as unposted, audited; all or none.

    In the caller's transaction. :class:`BadInput` (nothing changed) naming
    the first document that cannot be requeued, and why.
    """
    why = _reason(reason)
    rows = _named(conn, numbers)
    for r in rows:
        if r["status"] != "rejected":
            raise BadInput(
                f"{r['number']} is {r['status']}, not rejected: only a rejected document is "
                "requeued"
            )
        if r["posting_status"] == "closed":
            into = r["first_open"] or "the first open period"
            raise BadInput(
                f"{r['number']} posts in {r['posting_period']}, which is closed: redate it into "
                f"the first open period first (engine books redate {r['number']} --into {into} "
                "--reason ...), then requeue it"
            )
    return _apply(
        conn,
        rows,
        "document_requeue_if_rejected",
        {"actor": actor, "reason": why},
        action="requeued",
        changed="changed meanwhile (no longer rejected, or its period closed): nothing was "
        "requeued; try again",
        source=source,
    )


def redate(
    conn: psycopg.Connection[Any],
    numbers: Sequence[str],
    *,
    into: str,
    actor: str,
    reason: str,
    source: str = "api",
) -> list[Correction]:
    """Mark the documents ``numbers``, waiting in a closed month, to post in ``into``; audited.

    All or none, in the caller's transaction; :class:`BadInput` (nothing
    changed) naming the first document that cannot be redated into ``into``,
    and the period that would be valid.
    """
    why = _reason(reason)
    rows = _named(conn, numbers)
    for r in rows:
        number = r["number"]
        if r["status"] == "posted":
            raise BadInput(f"{number} is posted (in {r['posting_period']}): it cannot be redated")
        if r["posting_status"] != "closed":
            raise BadInput(
                f"{number} posts in {r['posting_period']}, which is "
                f"{r['posting_status'] or 'not in the books'}: only a document waiting in a "
                "closed month is redated (engine submit posting --period "
                f"{r['posting_period']} posts it)"
            )
        first = r["first_open"]
        if first is None:
            raise BadInput(
                f"--into {into}: no period after {r['date_period']} is open for {number}'s "
                "store(s); open the next period first (cost the last one)"
            )
        if into != first:
            raise BadInput(
                f"--into {into}: {number} (dated {r['date_period']}) goes forward into the "
                f"first open period of its store(s), {first}; give --into {first}"
            )
    # posting refuses a document that moves stock into a period while it (or a later one)
    # is being costed (flows.erp.document_posting.check_postable): redated there, posting
    # could not take it
    stock = periods.stock_state(conn, into)
    moving = [r["number"] for r in rows if r["moves_stock"]]
    busy = (
        into
        if stock.valued and not stock.costed
        else (stock.later_being_costed[0] if stock.later_being_costed else None)
    )
    if moving and busy is not None:
        raise BadInput(
            f"--into {into}: {busy} is being costed (averages solved, not every store "
            f"costed), and {', '.join(moving)} move(s) stock: posting could not take them "
            f"now; finish that costing (engine submit costing --period {busy}) and redate "
            "them again, or redate only documents without stock lines"
        )
    return _apply(
        conn,
        rows,
        "document_redate_if_waiting",
        {"into": into, "actor": actor, "reason": why},
        action="redated",
        changed=f"or {into} changed meanwhile (posted, redated or closed): nothing was "
        "redated; try again",
        source=source,
    )


def record_verdicts(
    conn: psycopg.Connection[Any],
    *,
    posted: Sequence[int],
    rejected: Sequence[int],
    reasons: Sequence[str],
    job_id: uuid.UUID | None,
) -> None:
    """A posting's verdicts on a chunk, in its transaction: each document's event."""
    _q.execute(
        conn,
        "document_events_insert_verdicts",
        {
            "posted": list(posted),
            "rejected": list(rejected),
            "reasons": list(reasons),
            "actor": "posting" if job_id is None else f"posting job {job_id}",
            "job_id": job_id,
        },
    )


def corrected(conn: psycopg.Connection[Any], period: str, limit: int = SHOWN) -> Corrected:
    """The documents posting in ``period`` with a history beyond being posted once."""
    counts = _q.one(conn, "document_events_count_corrected", {"period": period})
    rows = _q.rows(conn, "document_events_select_corrected", {"period": period, "limit": limit})
    return Corrected(
        period=period,
        corrected=counts["corrected"],
        late=counts["late"],
        documents=[DocumentHistory.model_validate(r) for r in rows],
    )


class Rejected(BaseModel):
    """A rejected document of a period: why, and how many times it was rejected."""

    number: str
    reason: str
    rejections: int
    date_period: str
    posting_period: str
    total: int = Field(description="rejected documents of the period, all of them")


def rejected(conn: psycopg.Connection[Any], period: str, limit: int = SHOWN) -> list[Rejected]:
    """The rejected documents posting in ``period``, by id, the first ``limit``."""
    rows = _q.rows(conn, "documents_select_rejected", {"period": period, "limit": limit})
    return [Rejected.model_validate(r) for r in rows]


def correctors(conn: psycopg.Connection[Any], period: str) -> list[str]:
    """Who requeued or redated the documents posting ``period`` judges now."""
    return [r["actor"] for r in _q.rows(conn, "document_correctors_select", {"period": period})]
