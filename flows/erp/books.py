"""The books: money, and the trial balance of a period.

A trial balance sums every journal line of a period by account, whatever
wrote the journal (posting, costing). Double entry means total debit equals
total credit; ``engine books trial-balance --period 2026-11`` shows it::

    engine books trial-balance --period 2026-11          # a table for people
    engine books trial-balance --period 2026-11 --json   # one JSON object
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import click
import psycopg
from pydantic import BaseModel, PlainSerializer, TypeAdapter, ValidationError

from engine import BadInput, EngineError, Settings, StoreError, connect, load_queries
from flows.types import Period

__all__ = ["AccountBalance", "Money", "TrialBalance", "books", "trial_balance"]

_q = load_queries(str(Path(__file__).parent / "sql" / "books.sql"))

CENT = Decimal("0.01")


def _cents(value: Decimal) -> str:
    return str(value.quantize(CENT))


Money = Annotated[Decimal, PlainSerializer(_cents, return_type=str, when_used="json")]
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
    if conn.execute(_q["period_select"], {"period": period}).fetchone() is None:
        raise BadInput(f"period {period} does not exist in erp_periods")
    rows = conn.execute(_q["journal_line_select_totals_by_account"], {"period": period}).fetchall()
    accounts = [AccountBalance.model_validate(r) for r in rows]
    return TrialBalance(
        period=period,
        debit=sum((a.debit for a in accounts), Decimal(0)),
        credit=sum((a.credit for a in accounts), Decimal(0)),
        lines=sum(r["lines"] for r in rows),
        accounts=accounts,
    )


def _table(tb: TrialBalance) -> str:
    rows = [
        (a.code, a.name, _cents(a.debit), _cents(a.credit), _cents(a.balance)) for a in tb.accounts
    ]
    rows.append(("", "total", _cents(tb.debit), _cents(tb.credit), _cents(tb.debit - tb.credit)))
    header = ("account", "name", "debit", "credit", "balance")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        left = [cell.ljust(w) for cell, w in zip(row[:2], widths[:2], strict=True)]
        right = [cell.rjust(w) for cell, w in zip(row[2:], widths[2:], strict=True)]
        return "  ".join(left + right)

    verdict = "balanced" if tb.balanced else f"NOT BALANCED by {_cents(tb.debit - tb.credit)}"
    return "\n".join(
        [
            f"Trial balance {tb.period}",
            line(header),
            *(line(r) for r in rows),
            f"{tb.lines} journal lines, {verdict}",
        ]
    )


@click.group()
def books() -> None:
    """The ERP's books: trial balance, checks, and a period's close and reopen."""


@books.command("trial-balance")
@click.option("--period", required=True, show_envvar=True, help="accounting period, YYYY-MM")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def trial_balance_command(period: str, as_json: bool) -> None:
    """Total debit and credit of a period's journal lines, per account."""
    try:
        period = TypeAdapter(Period).validate_python(period)
    except ValidationError as exc:
        raise BadInput(exc.errors()[0]["msg"]) from None
    try:
        with connect(Settings()) as conn:
            tb = trial_balance(conn, period)
    except BadInput:
        raise
    except (EngineError, psycopg.Error) as exc:
        # psycopg's errors reach here unwrapped: flows run their own SQL
        raise StoreError(f"cannot read the books: {exc}") from exc
    if as_json:
        click.echo(tb.model_dump_json())
    else:
        click.echo(_table(tb))
