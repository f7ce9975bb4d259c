"""The flags an accountant expects on a period's books, each a warning or a refusal.

A check (:mod:`flows.erp.checks`) is an identity between two records of one
fact; a flag is a figure that can be right to the cent and still wrong for
the business. Each is raised with what it found, named (store, item,
document) and valued as the books value it:

- ``inventory in credit``: Inventory (1300) at the end of the period is a
  credit in a store, or company-wide (the ledger up to the period's end);
- ``negative stock``: a costed store item closed below zero quantity (sold
  beyond what was there), with its closing value and the average it took;
- ``negative average``: an average cost below zero (its sales then cost a
  negative COGS), from the item costs, else from the period's solve;
- ``direct COGS``: the ledger's COGS (5000 + 5100) differs from the item
  costs' because lines were posted there other than by costing (a document's,
  listed by number);
- ``empty month``: no document dated in or entered under the period, and no
  journal posted from one.

Whether a raised flag only warns or refuses the close is the setting
``ERP_FLAG_<NAME>`` (:class:`flows.erp.config.ErpSettings`): ``warn`` or
``refuse``. :func:`raised` returns the flags raised, each with its action;
the check's result carries them (``BooksCheck.flags``), a refusing one fails
the check, and so the close refuses (:func:`flows.erp.periods.close`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel, Field

from flows.erp.config import ErpSettings, FlagAction
from flows.erp.queries import NamedQueries

__all__ = ["FLAGS", "Flag", "raised"]

_q = NamedQueries("flags")

SHOWN = 10
"""How many stores, items or documents a flag names (and says how many more)."""

FLAGS = {
    "inventory in credit": "flag_inventory_credit",
    "inventory in credit company-wide": "flag_inventory_credit",
    "negative stock": "flag_negative_stock",
    "negative average": "flag_negative_average",
    "direct COGS": "flag_direct_cogs",
    "empty month": "flag_empty_month",
}
"""Each flag's name and the :class:`~flows.erp.config.ErpSettings` field deciding its action."""


class Flag(BaseModel):
    """One raised flag: what it found, and whether it warns or refuses the close."""

    name: str
    action: FlagAction
    setting: str = Field(description="the environment variable deciding the action")
    detail: str
    found: list[str] = Field(description="what it names: stores, store items or documents")

    @property
    def refuses(self) -> bool:
        return self.action == "refuse"

    @property
    def line(self) -> str:
        return f"{self.name} ({self.setting}={self.action}): {self.detail}"


def raised(
    conn: psycopg.Connection[Any], period: str, settings: ErpSettings | None = None
) -> list[Flag]:
    """Every flag ``period``'s books raise now, in a fixed order; ``[]`` when none."""
    settings = settings or ErpSettings()
    params = {"period": period, "shown": SHOWN}
    found = [
        *_inventory_credit(conn, params),
        _negative_stock(conn, params),
        _negative_average(conn, params),
        _direct_cogs(conn, params),
        _empty_month(conn, params),
    ]
    return [
        Flag(
            name=name,
            action=getattr(settings, FLAGS[name]),
            setting=f"ERP_{FLAGS[name].upper()}",
            detail=detail,
            found=names,
        )
        for name, detail, names in (f for f in found if f is not None)
    ]


Raised = tuple[str, str, list[str]] | None


def _more(names: list[str], found: int) -> str:
    return ", ".join(names) + (f" and {found - len(names)} more" if found > len(names) else "")


def _inventory_credit(conn: psycopg.Connection[Any], params: dict[str, Any]) -> list[Raised]:
    rows = _q.rows(conn, "inventory_by_store", params)
    name = "inventory in credit"
    credit = [r for r in rows if r["balance"] < 0]
    flags: list[Raised] = []
    if credit:
        stores = [r["code"] or "-" for r in credit]
        shown = [f"{r['code'] or '-'} {r['balance']}" for r in credit[:SHOWN]]
        flags.append(
            (
                name,
                f"1300 closes as a credit in {len(credit)} store(s): {_more(shown, len(credit))}; "
                "find the sales and transfers out beyond the stock received (negative stock) "
                "or a document crediting 1300",
                stores,
            )
        )
    total = sum((r["balance"] for r in rows), Decimal(0))
    if total < 0:
        flags.append(
            (
                f"{name} company-wide",
                f"1300 closes as a credit company-wide: {total}",
                ["company-wide"],
            )
        )
    return flags


def _negative_stock(conn: psycopg.Connection[Any], params: dict[str, Any]) -> Raised:
    rows = _q.rows(conn, "item_costs_select_negative_stock", params)
    if not rows:
        return None
    shown = [
        f"{r['store']} {r['sku']} qty {r['closing_qty']} valued {r['closing_value']} "
        f"at {r['average_cost']} ({r['average_from']})"
        for r in rows
    ]
    return (
        "negative stock",
        f"{rows[0]['found']} store item(s) closed below zero: {_more(shown, rows[0]['found'])}; "
        "post the missing receipts or transfers in, or count the stock",
        [f"{r['store']} {r['sku']}" for r in rows],
    )


def _negative_average(conn: psycopg.Connection[Any], params: dict[str, Any]) -> Raised:
    rows = _q.rows(conn, "averages_select_negative", params)
    if not rows:
        return None
    shown = []
    for r in rows:
        valued = (
            f"; issued {r['issue_qty']} at COGS {r['cogs_value']}"
            if r["cogs_value"] is not None
            else "; store not costed yet"
        )
        shown.append(
            f"{r['store']} {r['sku']} average {r['average_cost']} ({r['average_from']}){valued}"
        )
    return (
        "negative average",
        f"{rows[0]['found']} average(s) below zero: {_more(shown, rows[0]['found'])}; "
        "correct the opening value or the receipt's cost that made it negative, then cost again",
        [f"{r['store']} {r['sku']}" for r in rows],
    )


def _direct_cogs(conn: psycopg.Connection[Any], params: dict[str, Any]) -> Raised:
    totals = _q.one(conn, "cogs_gl_vs_item_costs", params)
    rows = _q.rows(conn, "cogs_direct_postings", params)
    if not rows:
        return None
    shown = [f"{r['source']} ({r['store'] or '-'}) {r['account_code']} {r['amount']}" for r in rows]
    return (
        "direct COGS",
        f"GL COGS (5000 + 5100) {totals['gl']} != item costs' COGS {totals['costs']} "
        f"(difference {totals['gl'] - totals['costs']}); {rows[0]['found']} posting(s) not by "
        f"costing: {_more(shown, rows[0]['found'])}; post stock through item lines and let "
        "costing value it, or move the amount to another account",
        [r["source"] for r in rows],
    )


def _empty_month(conn: psycopg.Connection[Any], params: dict[str, Any]) -> Raised:
    row = _q.one(conn, "period_activity", params)
    if row["dated"] or row["entered"] or row["posted"] or row["moved"]:
        return None
    return (
        "empty month",
        f"no document dated in or entered under {params['period']}, no journal posted from "
        "one and no stock move; load the month's documents before closing it",
        [params["period"]],
    )
