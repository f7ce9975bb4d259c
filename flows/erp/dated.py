"""Documents by their date: the month a document is dated in is the month it posts to.

Posting P takes only the unposted documents dated in P (``date_period``,
:mod:`flows.posting`), or redated into it (``posting_period``). A document
dated in a *closed* month is never posted there: it waits, and
:func:`waiting` lists those months (``12 documents dated in closed 2026-10
wait``) with what to do, for ``engine books check``, the close report and
the console's Periods page, until it is redated into the first open period
(``engine books redate``, :mod:`flows.erp.corrections`): then it leaves the
list. One dated
in a later, or not yet open, month simply waits for that month's posting.
A period with unposted documents dated in it does not close
(:func:`unposted_in`, used by :func:`flows.erp.periods.close`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from pydantic import BaseModel

from flows.erp.queries import NamedQueries

__all__ = ["Unposted", "Waiting", "unposted_in", "waiting"]

_q = NamedQueries("dated")


class Waiting(BaseModel):
    """Unposted documents dated in a closed month: how many, a few numbers, what to do."""

    period: str
    documents: int
    examples: list[str]
    entered_under: list[str]

    @property
    def text(self) -> str:
        more = " ..." if self.documents > len(self.examples) else ""
        return (
            f"{self.documents} document(s) dated in closed {self.period} wait "
            f"({', '.join(self.examples)}{more}): {self.todo}"
        )

    @property
    def todo(self) -> str:
        return (
            f"reopen {self.period} to post them (engine books reopen --period {self.period} "
            "--reason ...; then engine submit posting --period "
            f"{self.period}), or redate them into the first open period (engine books redate "
            "DOCUMENT... --into PERIOD --reason ...)"
        )


class Unposted(BaseModel):
    """Unposted documents dated in one period."""

    documents: int
    examples: list[str]


def waiting(conn: psycopg.Connection[Any]) -> list[Waiting]:
    """Every closed month with unposted documents dated in it, oldest first."""
    return [Waiting.model_validate(r) for r in _q.rows(conn, "documents_waiting_in_closed_periods")]


def unposted_in(conn: psycopg.Connection[Any], period: str) -> Unposted:
    """The unposted documents dated in ``period`` (a count and the first numbers)."""
    row = _q.one(conn, "documents_unposted_dated_in", {"period": period})
    return Unposted(documents=row["documents"], examples=row["examples"] or [])
