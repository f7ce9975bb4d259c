"""The general ledger: the one place journals are posted.

Posting (documents), costing (cost of goods sold, transfers between stores)
and openings (a store's first period) all post through :func:`post`, which
keeps three rules:

- **One journal per source key, ever.** The key names what the journal
  comes from (``document:<id>``, ``costing:<period>:<store>``,
  ``opening:<period>:<store>``); a key posted already is skipped with all
  its lines, so a retried step, a duplicate delivery or a second job posts
  nothing twice.
- **Every journal balances, enforced by the database.** A deferred
  constraint trigger (``erp_journal_balanced``, migration 1004) refuses at
  commit any transaction that leaves a journal with debit != credit, whoever
  wrote its lines; :func:`post` also refuses to send one.
- **Lines carry account, store and amount.** Inventory (1300) and the
  inter-store account (1350) always carry their store, so the ledger ties to
  the stock ledger store by store (:mod:`flows.erp.checks`).

A journal is written with one statement for any number of journals (arrays,
no round trip per line), in the caller's transaction: a step's fenced
``ctx.conn`` commits its journals with its checkpoint, or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any, Literal

import psycopg
from pydantic import BaseModel, Field

from flows.erp.queries import NamedQueries

__all__ = [
    "ACCOUNTS",
    "Journal",
    "Line",
    "Posted",
    "Source",
    "UnbalancedJournal",
    "journal_ids",
    "post",
    "signed",
    "transfer",
]

_q = NamedQueries("ledger")

Source = Literal["document", "costing", "opening"]

ACCOUNTS = {
    "cash": "1000",
    "receivable": "1100",
    "inventory": "1300",
    "inter_store": "1350",
    "payable": "2000",
    "vat": "2100",
    "equity": "3000",
    "retained": "3100",
    "sales": "4000",
    "returns": "4100",
    "cogs": "5000",
    "adjustments": "5100",
}
"""The accounts the flows post to, by role (the chart is ``erp_accounts``)."""


class UnbalancedJournal(ValueError):
    """A journal whose lines do not balance was about to be posted (a bug, not data)."""


class Line(BaseModel):
    """One journal line: an account, the store it concerns (or none), debit or credit."""

    account: str
    store_id: int | None = None
    debit: Decimal = Field(default=Decimal(0), ge=0)
    credit: Decimal = Field(default=Decimal(0), ge=0)


class Journal(BaseModel):
    """A balanced set of lines from one source, posted once per ``source_key``."""

    period: str
    source: Source
    source_key: str
    store_id: int | None = None
    memo: str = ""
    lines: list[Line]

    @property
    def debit(self) -> Decimal:
        return sum((line.debit for line in self.lines), Decimal(0))

    @property
    def credit(self) -> Decimal:
        return sum((line.credit for line in self.lines), Decimal(0))


class Posted(BaseModel):
    """What one call of :func:`post` wrote (journals whose key was new) and skipped."""

    journals: int
    lines: int
    skipped: int
    keys: list[str] = Field(description="source keys of the journals posted by this call")


def signed(account: str, store_id: int | None, amount: Decimal) -> list[Line]:
    """A debit line for a positive ``amount``, a credit line for a negative one, none for 0."""
    if amount > 0:
        return [Line(account=account, store_id=store_id, debit=amount)]
    if amount < 0:
        return [Line(account=account, store_id=store_id, credit=-amount)]
    return []


def transfer(
    debit_account: str, credit_account: str, store_id: int | None, amount: Decimal
) -> list[Line]:
    """Dr ``debit_account`` / Cr ``credit_account`` of one store by ``amount`` (reversed when
    negative; none when 0)."""
    return [*signed(debit_account, store_id, amount), *signed(credit_account, store_id, -amount)]


def post(conn: psycopg.Connection[Any], journals: Iterable[Journal]) -> Posted:
    """Post each journal whose source key is new, in the caller's transaction.

    Raises :class:`UnbalancedJournal` before writing anything if a journal
    does not balance or carries a line with both debit and credit.
    """
    todo = list(journals)
    for j in todo:
        if j.debit != j.credit:
            raise UnbalancedJournal(
                f"journal {j.source_key} does not balance: debit {j.debit} != credit {j.credit}"
            )
        two_sided = [n for n, line in enumerate(j.lines, 1) if line.debit and line.credit]
        if two_sided:
            raise UnbalancedJournal(f"journal {j.source_key}: line(s) {two_sided} are two-sided")
    if not todo:
        return Posted(journals=0, lines=0, skipped=0, keys=[])
    lines = [(j.source_key, n, line) for j in todo for n, line in enumerate(j.lines, 1)]
    row = _q.one(
        conn,
        "journals_post_if_absent",
        {
            "periods": [j.period for j in todo],
            "stores": [j.store_id for j in todo],
            "sources": [j.source for j in todo],
            "keys": [j.source_key for j in todo],
            "memos": [j.memo for j in todo],
            "line_keys": [key for key, _, _ in lines],
            "line_nos": [n for _, n, _ in lines],
            "accounts": [line.account for _, _, line in lines],
            "line_stores": [line.store_id for _, _, line in lines],
            "debits": [line.debit for _, _, line in lines],
            "credits": [line.credit for _, _, line in lines],
        },
    )
    return Posted(
        journals=row["journals"],
        lines=row["lines"],
        skipped=len(todo) - row["journals"],
        keys=sorted(row["posted"]),
    )


def journal_ids(conn: psycopg.Connection[Any], keys: Sequence[str]) -> dict[str, int]:
    """The ids of the journals posted under ``keys`` (now or by an earlier run)."""
    rows = _q.rows(conn, "journal_ids_by_key", {"keys": list(keys)})
    return {r["source_key"]: int(r["id"]) for r in rows}
