"""The books: money, and the trial balance of a period.

A trial balance sums every journal line of a period by account, whatever
wrote the journal (posting, costing). Double entry means total debit equals
total credit; ``engine books trial-balance --period 2026-11`` shows it
(:mod:`flows.tools.books`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

import psycopg
from pydantic import BaseModel, PlainSerializer

from engine import BadInput
from flows.erp.queries import NamedQueries

__all__ = ["AccountBalance", "Money", "TrialBalance", "cents", "trial_balance"]

_q = NamedQueries("books")

CENT = Decimal("0.01")


def cents(value: Decimal) -> str:
    """``value`` as text with 2 decimals (``"120.00"``), as the books show money."""
    return str(value.quantize(CENT))


Money = Annotated[Decimal, PlainSerializer(cents, return_type=str, when_used="json")]
"""An amount of money: a Decimal, written to JSON as a string with 2 decimals ("120.00")."""


class AccountBalance(BaseModel):
    """One account's movements in the period; balance = debit - credit."""

    code: str
    name: str
    debit: Money
    credit: Money
    balance: Money


class TrialBalance(BaseModel):
    """Totals of a period's journal lines, overall and per account (accounts with lines only)."""

    period: str
    debit: Money
    credit: Money
    lines: int
    accounts: list[AccountBalance]

    @property
    def balanced(self) -> bool:
        """True when total debit equals total credit."""
        return self.debit == self.credit


def trial_balance(conn: psycopg.Connection[Any], period: str) -> TrialBalance:
    """The trial balance of ``period``; :class:`engine.BadInput` if the period does not exist."""
    if _q.first(conn, "period_select", {"period": period}) is None:
        raise BadInput(f"period {period} does not exist in erp_periods")
    rows = _q.rows(conn, "journal_line_select_totals_by_account", {"period": period})
    accounts = [AccountBalance.model_validate(r) for r in rows]
    return TrialBalance(
        period=period,
        debit=sum((a.debit for a in accounts), Decimal(0)),
        credit=sum((a.credit for a in accounts), Decimal(0)),
        lines=sum(r["lines"] for r in rows),
        accounts=accounts,
    )
