"""Value-only corrections to goods already partly sold (issue 36; migration 1014).

A landed cost or a supplier's price correction for a receipt of a closed
period is a ``cost_correction`` document: it names the purchase invoice it
corrects (``erp_documents.corrects_id``) and carries, per item of that
receipt, an amount on 1300 (a debit adds, a credit takes away) and no
quantity, against its counter account (2000, payable). It posts in the first
open period P (dated in a closed month, it is redated into P as it is
entered): the closed period never changes (invariant 22).

Posting (:mod:`flows.posting`) judges it with the other documents: it is
rejected, with its reason and never retried, when it names no document, or
one that is not a posted purchase invoice, a receipt of an open period (that
one is corrected itself, or requeued), another store's receipt, an item not
on the receipt, a line with a quantity or an amount of 0. A valid one is
split by quantity, per item line, the way SAP's material ledger splits a
price difference (:func:`split`): received ``R``, still on hand ``H =
min(R, max(0, the pair's opening quantity of P))`` (the closing of the last
closed period, carried forward), on hand ``round(amount x H / R, 2)`` to
1300, the rest to 5000 (cost of goods sold); its journal is Dr 1300 + Dr 5000
/ Cr 2000 (signs reversed for a negative amount). :func:`record` keeps the
split (``erp_value_corrections``) and writes the on-hand share as a
value-only stock move (kind ``revaluation``, qty 0) of the receipt's store
and item in P, which costing adds to the receipts' value: it enters P's
average. Into a costed P the move marks the pair stale like any backdated
document (:func:`flows.erp.recost.mark_documents`), and the next costing
recosts it. The posting's report, ``engine books documents`` and the checks'
ties (each document to its journal and stock moves) read the kept split.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel, Field, computed_field

from flows.erp.books import Money
from flows.erp.queries import NamedQueries

__all__ = ["LISTED", "ValueSplit", "journal_amounts", "listed", "record", "split"]

_q = NamedQueries("value_corrections")

LISTED = 200
"""Value correction lines listed per period (``engine books documents``, the reports)."""

INVENTORY, COGS = "1300", "5000"


class ValueSplit(BaseModel):
    """One item line of a cost correction, split between stock on hand and COGS."""

    document_id: int
    line_no: int
    number: str
    receipt_id: int
    receipt: str = Field(description="the number of the purchase invoice corrected")
    period: str = Field(description="the period it posts in (P)")
    store_id: int
    store: str
    item_id: int
    sku: str
    received_qty: Decimal
    on_hand_qty: Decimal = Field(description="min(received, max(0, the pair's opening of P))")
    amount: Money
    on_hand_value: Money = Field(description="round(amount x on hand / received, 2): to 1300")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sold_qty(self) -> Decimal:
        """The received quantity no longer on hand."""
        return self.received_qty - self.on_hand_qty

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cogs_value(self) -> Money:
        """The rest of the amount: to 5000."""
        return self.amount - self.on_hand_value

    def line(self) -> str:
        """One line for people."""
        return (
            f"{self.number} line {self.line_no}: {self.amount:.2f} on receipt {self.receipt} "
            f"({self.store} {self.sku}): on hand {self.on_hand_qty.normalize():f} of "
            f"{self.received_qty.normalize():f}: {self.on_hand_value:.2f} to 1300; "
            f"sold {self.sold_qty.normalize():f}: {self.cogs_value:.2f} to 5000"
        )


def split(conn: psycopg.Connection[Any], period: str, documents: list[int]) -> list[ValueSplit]:
    """The split of every item line of the (judged valid) cost corrections ``documents``
    posting in ``period``, in document and line order."""
    if not documents:
        return []
    rows = _q.rows(conn, "value_corrections_split", {"period": period, "documents": documents})
    return [ValueSplit.model_validate(r) for r in rows]


def journal_amounts(
    amounts: list[tuple[str, Decimal]], splits: list[ValueSplit]
) -> list[tuple[str, Decimal]]:
    """A cost correction's net amount per account with the sold share of its 1300 lines
    moved to 5000 (its journal), the accounts in the order given, 5000 added after them."""
    sold = sum((s.cogs_value for s in splits), Decimal(0))
    net = dict(amounts)
    net[INVENTORY] = net.get(INVENTORY, Decimal(0)) - sold
    net[COGS] = net.get(COGS, Decimal(0)) + sold
    return [(account, amount) for account, amount in net.items() if amount != 0]


def record(conn: psycopg.Connection[Any], splits: list[ValueSplit]) -> int:
    """Keep the splits of the cost corrections posted in the caller's transaction and write
    their on-hand shares as value-only stock moves; the moves written (none twice)."""
    if not splits:
        return 0
    row = _q.one(
        conn,
        "value_corrections_record_and_move",
        {
            "documents": [s.document_id for s in splits],
            "lines": [s.line_no for s in splits],
            "receipts": [s.receipt_id for s in splits],
            "periods": [s.period for s in splits],
            "stores": [s.store_id for s in splits],
            "items": [s.item_id for s in splits],
            "received": [s.received_qty for s in splits],
            "on_hand": [s.on_hand_qty for s in splits],
            "amounts": [s.amount for s in splits],
            "on_hand_values": [s.on_hand_value for s in splits],
        },
    )
    return int(row["moved"])


def listed(conn: psycopg.Connection[Any], period: str) -> tuple[list[ValueSplit], int]:
    """The value corrections posted in ``period`` (the first :data:`LISTED` lines), and how
    many lines there are."""
    rows = _q.rows(conn, "value_corrections_select_period", {"period": period, "limit": LISTED})
    return [ValueSplit.model_validate(r) for r in rows], (int(rows[0]["total"]) if rows else 0)
