"""Approvals bind the period: its limit of rejected documents, and a decision per document.

Invariant 21 (``DESIGN.md``): a period whose rejected documents pass the
limit closes only after an accountant has decided on *those* documents; no
new job, cancel or retry skips it.

**The limit belongs to the period** (``erp_periods.approve_rejects_over``).
The first posting (or close, through its posting) that names
``--approve-rejects-over N`` sets it; with none named, the setting
``ERP_APPROVE_REJECTS_OVER`` is pinned on the period the same way. A later
submit may tighten it, never loosen it: a job naming a looser limit runs
with the period's (:func:`claim_threshold`). Loosening is
:func:`set_threshold` (``engine books approval-threshold --period P --over N
--reason R``), with a reason. Every change is in the period's history
(action ``approval threshold``). A period with no limit and no setting asks
no one (the behaviour before issue 35).

**Decisions are per document and per rejection.** ``erp_documents.rejections``
counts the times a document was rejected (a trigger, whoever writes the
status); a decision (``erp_rejection_decisions``) names the document and
that number, so a document corrected and rejected again needs a new one.
Decisions are append-only; the latest on a rejection counts.

**What blocks the close** (:func:`unapproved`): the rejected documents dated
in the period (``date_period = P``) whose current rejection has no approval,
undecided or rejected by the accountant. Posting's wait counts them
period-wide, not its own batch, so a new close after a rejection or a cancel
waits again; approving in that wait records an approval for exactly the
documents it showed (:func:`record_decisions`); :func:`close_refusal` makes
:func:`flows.erp.periods.close` (``engine books close``, the console, the
close job) refuse while they are over the limit.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

import psycopg
from pydantic import BaseModel

from engine import BadInput
from flows.erp.config import ErpSettings
from flows.erp.queries import NamedQueries

__all__ = [
    "THRESHOLD_ACTION",
    "UnapprovedRejection",
    "claim_threshold",
    "close_refusal",
    "record_decisions",
    "set_threshold",
    "threshold",
    "unapproved",
]

_q = NamedQueries("approvals")
_periods = NamedQueries("periods")

THRESHOLD_ACTION = "approval threshold"
"""The period history's action for a change of the period's limit."""

Decision = Literal["approve", "reject"]


class UnapprovedRejection(BaseModel):
    """A rejected document of the period whose current rejection is not approved."""

    id: int
    number: str
    reason: str
    rejection: int
    decision: Decision | None = None
    amount: Decimal | None = None  # the document's debit total
    store: str | None = None  # the store's code
    issued_on: date | None = None


def _row(conn: psycopg.Connection[Any], period: str) -> dict[str, Any]:
    row = _q.first(conn, "period_threshold_select", {"period": period})
    if row is None:
        raise BadInput(f"period {period} does not exist in erp_periods")
    return row


def threshold(conn: psycopg.Connection[Any], period: str) -> int | None:
    """The period's limit: its own, else ``ERP_APPROVE_REJECTS_OVER``; ``None``: no limit."""
    own = _row(conn, period)["approve_rejects_over"]
    return ErpSettings().approve_rejects_over if own is None else int(own)


def _event(
    conn: psycopg.Connection[Any], period: str, actor: str, was: int | None, now: int, why: str
) -> None:
    before = "none" if was is None else str(was)
    _periods.execute(
        conn,
        "period_event_insert",
        {
            "period": period,
            "action": THRESHOLD_ACTION,
            "actor": actor,
            "reason": f"rejected documents without an approval: limit {before} -> {now}; {why}",
        },
    )


def claim_threshold(
    conn: psycopg.Connection[Any], period: str, asked: int | None, *, actor: str
) -> int | None:
    """Set or tighten the period's limit to ``asked`` (or the setting); the limit in force.

    In the caller's transaction (posting's first step: it commits with the
    step's checkpoint, before any wait). A looser ``asked`` changes nothing.
    """
    pin = ErpSettings().approve_rejects_over if asked is None else asked
    if pin is not None:
        row = _q.first(conn, "period_threshold_set_if_tighter", {"period": period, "over": pin})
        if row is not None:
            source = "the setting ERP_APPROVE_REJECTS_OVER" if asked is None else actor
            _event(conn, period, actor, row["was"], pin, f"set by {source}")
    return threshold(conn, period)


def set_threshold(
    conn: psycopg.Connection[Any], period: str, over: int, *, actor: str, reason: str
) -> int | None:
    """Change the period's limit to ``over`` (looser too), recorded with ``reason``; the old one."""
    if over < 0:
        raise BadInput(f"--over: {over} is negative; give 0 or more rejected documents")
    if not reason.strip():
        raise BadInput("--reason: required: say why the period's limit changes (it is recorded)")
    row = _row(conn, period)
    if row["status"] == "closed":
        raise BadInput(f"period {period} is closed: its limit no longer matters")
    changed = _q.one(conn, "period_threshold_set", {"period": period, "over": over})
    _event(conn, period, actor, changed["was"], over, reason.strip())
    return None if changed["was"] is None else int(changed["was"])


def unapproved(
    conn: psycopg.Connection[Any], period: str, *, before: datetime | None = None
) -> list[UnapprovedRejection]:
    """The rejected documents dated in ``period`` without an approval, by id.

    ``before``: only those rejected no later (a wait woken by a signal
    decides on nothing rejected after the signal was sent).
    """
    rows = _q.rows(conn, "rejection_select_unapproved", {"period": period, "before": before})
    return [UnapprovedRejection.model_validate(r) for r in rows]


def record_decisions(
    conn: psycopg.Connection[Any],
    documents: list[UnapprovedRejection],
    *,
    decision: Decision,
    by: str,
    reason: str,
    job_id: uuid.UUID,
) -> None:
    """Record ``decision`` on exactly ``documents`` (their rejection as shown), once per job."""
    _q.execute(
        conn,
        "rejection_decisions_insert",
        {
            "ids": [d.id for d in documents],
            "rejections": [d.rejection for d in documents],
            "decision": decision,
            "by": by,
            "reason": reason,
            "job_id": job_id,
        },
    )


def close_refusal(conn: psycopg.Connection[Any], period: str) -> str | None:
    """Why ``period`` cannot close for want of an approval; ``None`` if it can."""
    limit = threshold(conn, period)
    if limit is None:
        return None
    waiting = unapproved(conn, period)
    if len(waiting) <= limit:
        return None
    refused = sum(1 for d in waiting if d.decision == "reject")
    how = f" ({refused} of them rejected by an accountant)" if refused else ""
    return (
        f"cannot close {period}: {len(waiting)} rejected document(s) dated in it have no "
        f"approval{how}, over the period's limit of {limit}; correct them and post again, or "
        f"have an accountant approve them: engine submit posting --period {period} waits for "
        "the signal 'approve' (engine signal JOB_ID approve)"
    )
