"""The books: money, and the trial balance of a period with its opening and closing.

The trial balance of period P reads every journal line up to P, whatever
wrote its journal (posting, costing, openings), per account (and store):

- **opening**: the closing balance of the periods before P. Balance-sheet
  accounts (asset, liability, equity) carry every earlier line; income and
  expense carry only the lines of P's fiscal year (``ERP_FISCAL_YEAR_START_MONTH``,
  the calendar year by default), the earlier years' result being in 3100
  Retained earnings, so the opening column balances. A store's opening
  stock, posted in its first period by an ``opening`` journal of P, is part
  of P's opening too, not of its movements;
- **debit** and **credit**: P's other journal lines;
- **closing** = opening + debit - credit.

Each amount is signed debit-minus-credit. Double entry means the opening and
closing columns each sum to zero and total debit equals total credit;
``engine books trial-balance --period 2026-11 [--by-store]`` shows it
(:mod:`flows.tools.books`). The close keeps the closing column per account
and store (:func:`flows.erp.periods.close`), and
:mod:`flows.erp.checks` compares the next period's opening with it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

import psycopg
from pydantic import BaseModel, Field, PlainSerializer

from engine import BadInput
from flows.erp.config import ErpSettings
from flows.erp.ledger import ACCOUNTS
from flows.erp.queries import NamedQueries
from flows.erp.types import fiscal_year_start

__all__ = [
    "AccountBalance",
    "Balance",
    "Money",
    "TrialBalance",
    "balances",
    "cents",
    "trial_balance",
]

_q = NamedQueries("books")

CENT = Decimal("0.01")
ZERO = Decimal(0)


def cents(value: Decimal) -> str:
    """``value`` as text with 2 decimals (``"120.00"``), as the books show money."""
    return str(value.quantize(CENT))


Money = Annotated[Decimal, PlainSerializer(cents, return_type=str, when_used="json")]
"""An amount of money: a Decimal, written to JSON as a string with 2 decimals ("120.00")."""


class Balance(BaseModel):
    """One account and store in a period: what it carries in, opens with, and moves."""

    code: str
    name: str
    kind: str
    store_id: int | None
    store: str | None = Field(description="the store's code; None for lines without a store")
    carried: Decimal = Field(description="closing balance of the periods before")
    opened: Decimal = Field(description="opening journals of the period (a store's first)")
    debit: Decimal
    credit: Decimal
    lines: int = Field(description="journal lines of the period itself")

    @property
    def opening(self) -> Decimal:
        return self.carried + self.opened

    @property
    def closing(self) -> Decimal:
        return self.opening + self.debit - self.credit


class AccountBalance(BaseModel):
    """One row of the trial balance: an account (and its store, by store).

    ``balance`` = debit - credit of the period; closing = opening + balance.
    """

    code: str
    name: str
    store: str | None = None
    opening: Money
    debit: Money
    credit: Money
    balance: Money
    closing: Money


class TrialBalance(BaseModel):
    """A period's trial balance: the column totals, and a row per account (and store)."""

    period: str
    by_store: bool = False
    opening: Money
    debit: Money
    credit: Money
    closing: Money
    lines: int = Field(description="journal lines of the period, its opening journals' included")
    accounts: list[AccountBalance]

    @property
    def balanced(self) -> bool:
        """The opening and closing columns sum to zero and total debit equals total credit."""
        return self.opening == 0 and self.debit == self.credit and self.closing == 0


def balances(
    conn: psycopg.Connection[Any], period: str, *, fiscal_year_start_month: int | None = None
) -> list[Balance]:
    """Every account and store with a journal line up to ``period``, as the trial balance
    counts it (by account code, stores without one first); :class:`engine.BadInput` if the
    period does not exist. ``fiscal_year_start_month`` defaults to the ERP setting."""
    if _q.first(conn, "period_select", {"period": period}) is None:
        raise BadInput(f"period {period} does not exist in erp_periods")
    month = fiscal_year_start_month or ErpSettings().fiscal_year_start_month
    rows = _q.rows(
        conn,
        "journal_line_select_balances",
        {
            "period": period,
            "fiscal_year_start": fiscal_year_start(period, month),
            "retained": ACCOUNTS["retained"],
        },
    )
    return [Balance.model_validate(r) for r in rows]


def trial_balance(
    conn: psycopg.Connection[Any],
    period: str,
    *,
    by_store: bool = False,
    fiscal_year_start_month: int | None = None,
) -> TrialBalance:
    """The trial balance of ``period``, one row per account or, ``by_store``, per account
    and store; :class:`engine.BadInput` if the period does not exist."""
    found = balances(conn, period, fiscal_year_start_month=fiscal_year_start_month)
    rows: dict[tuple[str, str | None], list[Balance]] = {}
    for b in found:
        rows.setdefault((b.code, b.store if by_store else None), []).append(b)
    accounts = []
    for (code, store), parts in rows.items():
        opening = sum((b.opening for b in parts), ZERO)
        debit = sum((b.debit for b in parts), ZERO)
        credit = sum((b.credit for b in parts), ZERO)
        accounts.append(
            AccountBalance(
                code=code,
                name=parts[0].name,
                store=store,
                opening=opening,
                debit=debit,
                credit=credit,
                balance=debit - credit,
                closing=opening + debit - credit,
            )
        )
    return TrialBalance(
        period=period,
        by_store=by_store,
        opening=sum((a.opening for a in accounts), ZERO),
        debit=sum((a.debit for a in accounts), ZERO),
        credit=sum((a.credit for a in accounts), ZERO),
        closing=sum((a.closing for a in accounts), ZERO),
        lines=sum(b.lines for b in found),
        accounts=accounts,
    )
