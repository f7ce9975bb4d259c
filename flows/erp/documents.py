"""Every document of a period, counted: what the month-end pages say about documents.

A document belongs to the period it is dated in (``date_period``, see
migration 1007), or, late, to the one it was redated into (``posting_period``,
migration 1011, :mod:`flows.erp.corrections`). :func:`period_documents`
counts the documents posting in P by status: posted, unposted, rejected (split
by the accountant's decision on their current rejection: approved, rejected
by the accountant, undecided; :mod:`flows.erp.approvals`), the late ones
(dated in an earlier, closed month), and those entered under P but posting in
another month (``period = P AND posting_period <> P``, counted in their own
month); and lists the documents whose history is more than being posted once
(rejected, requeued, redated: :func:`flows.erp.corrections.corrected`), and
the value corrections posted in P, each with its receipt and its split
between stock on hand and COGS (:mod:`flows.erp.value_corrections`).
The close's month-end report, the console's Periods page and ``engine books
documents`` read it, never one job's batch: a close whose posting found
nothing left to post still shows the month's documents.
"""

from __future__ import annotations

from typing import Any

import psycopg
from pydantic import BaseModel, Field

from flows.erp import approvals, corrections, value_corrections
from flows.erp.corrections import Corrected
from flows.erp.queries import NamedQueries
from flows.erp.value_corrections import ValueSplit

__all__ = ["PeriodDocuments", "period_documents"]

_q = NamedQueries("documents")


class PeriodDocuments(BaseModel):
    """The documents of a period by what became of them."""

    period: str
    dated: int = Field(
        description="documents posting in the period (its documents): dated in it, or late"
    )
    posted: int
    unposted: int
    rejected: int
    rejected_approved: int = Field(description="rejected; the accountant approved the rejection")
    rejected_refused: int = Field(description="rejected; the accountant rejected them too")
    rejected_undecided: int = Field(description="rejected; no decision on this rejection yet")
    late: int = Field(
        default=0, description="dated in an earlier, closed month and redated into the period"
    )
    dated_elsewhere: int = Field(description="entered under the period, posting in another month")
    approve_rejects_over: int | None = Field(
        description="the period's limit of rejected documents without an approval (None: none)"
    )
    history: Corrected | None = Field(
        default=None,
        description="the documents with a history beyond being posted once (rejected, "
        "requeued, redated), each event",
    )
    value_corrections: list[ValueSplit] = Field(
        default_factory=list,
        description="cost corrections posted in the period, each item line with its receipt, "
        f"amount and split (the first {value_corrections.LISTED})",
    )
    value_correction_lines: int = Field(
        default=0, description="item lines of cost corrections posted in the period, all"
    )

    @property
    def unapproved(self) -> int:
        """Rejected documents whose rejection has no approval: what the limit counts."""
        return self.rejected_refused + self.rejected_undecided

    def lines(self) -> list[tuple[str, int]]:
        """(what, how many) in the order the pages show them."""
        return [
            ("of the period (dated in it, or late)", self.dated),
            ("posted", self.posted),
            ("rejected", self.rejected),
            ("rejected, approved", self.rejected_approved),
            ("rejected, refused by an accountant", self.rejected_refused),
            ("rejected, undecided", self.rejected_undecided),
            ("unposted", self.unposted),
            ("late: dated earlier, redated here", self.late),
            ("entered here, dated elsewhere", self.dated_elsewhere),
        ]

    def sentence(self) -> str:
        """One line for people."""
        limit = (
            "no limit of rejected documents"
            if self.approve_rejects_over is None
            else f"limit {self.approve_rejects_over} rejected without an approval"
        )
        return (
            f"{self.dated} document(s) dated in {self.period}: {self.posted} posted, "
            f"{self.rejected} rejected ({self.rejected_approved} approved, "
            f"{self.rejected_refused} refused, {self.rejected_undecided} undecided), "
            f"{self.unposted} unposted; {self.late} late (dated earlier); "
            f"{self.dated_elsewhere} entered under it dated elsewhere; {limit}"
        )


def period_documents(conn: psycopg.Connection[Any], period: str) -> PeriodDocuments:
    """Every document of ``period`` counted (one statement), with the period's limit."""
    row = _q.one(conn, "documents_count_period", {"period": period})
    splits, lines = value_corrections.listed(conn, period)
    return PeriodDocuments(
        period=period,
        approve_rejects_over=approvals.threshold(conn, period),
        history=corrections.corrected(conn, period),
        value_corrections=splits,
        value_correction_lines=lines,
        **row,
    )
