"""The cross-checks an auditor runs on a period's books: ``engine books check --period P``.

Each check is an identity that must hold to the cent; its terms are read
from the table that owns them (openings as loaded or carried, receipts from
the stock moves, COGS from the item costs and from the journals), so a
check compares two records of one fact rather than a number with itself:

- ``journals balance``: debit = credit for every journal of the period, and in total;
- ``inventory conservation``: opening + receipts + transfers in = COGS +
  transfers out + closing, per costed store and company-wide;
- ``transfers net to zero``: company-wide, transfers in = transfers out in
  value (once every store is costed; a transfer's two sides are costed with
  their two stores);
- ``COGS journals = item costs``: per store, the costing journal's net debit
  to 5000 equals the COGS of its item costs;
- ``openings = closings``: the next period's opening balances of every
  costed store are this period's closing balances, item by item;
- ``closed books unchanged``: no journal of a closed period was posted after it closed.

A check that cannot apply yet (no store costed) is reported as skipped, not
as passed. The close of a period (:func:`flows.erp.periods.close`, the close
flow) refuses to close while any check fails.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel

from engine import BadInput
from flows.erp.queries import NamedQueries
from flows.erp.types import next_period

__all__ = ["BooksCheck", "Check", "check_period"]

_q = NamedQueries("checks")


class Check(BaseModel):
    """One identity: whether it holds, and what was compared (or why it was skipped)."""

    name: str
    ok: bool
    skipped: bool = False
    detail: str


class BooksCheck(BaseModel):
    """Every check of one period."""

    period: str
    status: str
    stores: int
    stores_costed: int
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def problems(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]


def _examples(items: list[str], shown: int = 5) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def check_period(conn: psycopg.Connection[Any], period: str) -> BooksCheck:
    """Run every check of ``period``; :class:`engine.BadInput` if the period does not exist."""
    params = {"period": period, "next": next_period(period)}
    head = _q.first(conn, "period_stores", params)
    if head is None:
        raise BadInput(f"period {period} does not exist in erp_periods")
    costed = head["costed"]
    all_costed = head["stores"] > 0 and costed == head["stores"]
    checks = [
        _journals(conn, params),
        *_inventory(conn, params, costed),
        _transfers(conn, params, all_costed, head["stores"] - costed),
        _cogs(conn, params, costed),
        _openings(conn, params, costed),
        _after_close(conn, params, head["status"]),
    ]
    return BooksCheck(
        period=period,
        status=head["status"],
        stores=head["stores"],
        stores_costed=costed,
        checks=checks,
    )


def _skipped(name: str, why: str) -> Check:
    return Check(name=name, ok=True, skipped=True, detail=f"skipped: {why}")


def _journals(conn: psycopg.Connection[Any], params: dict[str, Any]) -> Check:
    row = _q.one(conn, "journals_unbalanced", params)
    name = "journals balance"
    totals = f"{row['journals']} journals, debit {row['debit']}, credit {row['credit']}"
    if row["unbalanced"]:
        return Check(
            name=name,
            ok=False,
            detail=f"{row['unbalanced']} journal(s) do not balance "
            f"({_examples(row['examples'])}); {totals}",
        )
    if row["debit"] != row["credit"]:
        return Check(name=name, ok=False, detail=f"the totals differ: {totals}")
    return Check(name=name, ok=True, detail=totals)


def _inventory(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> list[Check]:
    per_store, company = "inventory conservation per store", "inventory conservation company-wide"
    if not costed:
        return [_skipped(per_store, "no store costed"), _skipped(company, "no store costed")]
    rows = _q.rows(conn, "inventory_by_store", params)
    broken = []
    sums = dict.fromkeys(
        ("opening", "receipts", "transfer_in", "cogs", "transfer_out", "closing"), Decimal(0)
    )
    for r in rows:
        inflow = r["opening"] + r["receipts"] + r["transfer_in"]
        outflow = r["cogs"] + r["transfer_out"] + r["closing"]
        for key in sums:
            sums[key] += r[key]
        if inflow != outflow:
            broken.append(f"{r['code']} in {inflow} != out {outflow}")
    inflow = sums["opening"] + sums["receipts"] + sums["transfer_in"]
    outflow = sums["cogs"] + sums["transfer_out"] + sums["closing"]
    terms = (
        f"opening {sums['opening']} + receipts {sums['receipts']} + transfers in "
        f"{sums['transfer_in']} = COGS {sums['cogs']} + transfers out {sums['transfer_out']} "
        f"+ closing {sums['closing']}"
    )
    return [
        Check(
            name=per_store,
            ok=not broken,
            detail=f"{len(broken)} of {len(rows)} stores: {_examples(broken)}"
            if broken
            else f"{len(rows)} costed stores hold",
        ),
        Check(
            name=company,
            ok=inflow == outflow,
            detail=terms if inflow == outflow else f"in {inflow} != out {outflow}: {terms}",
        ),
    ]


def _transfers(
    conn: psycopg.Connection[Any], params: dict[str, Any], all_costed: bool, uncosted: int
) -> Check:
    name = "transfers net to zero"
    if not all_costed:
        return _skipped(name, f"{uncosted} store(s) not costed; a transfer has two sides")
    row = _q.one(conn, "transfers_company_wide", params)
    detail = f"transfers in {row['transfer_in']}, transfers out {row['transfer_out']}"
    return Check(name=name, ok=row["transfer_in"] == row["transfer_out"], detail=detail)


def _cogs(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> Check:
    name = "COGS journals = item costs"
    rows = _q.rows(conn, "cogs_journals_vs_costs", params)
    if not costed and not rows:
        return _skipped(name, "no store costed")
    if rows:
        diffs = [f"{r['code']} journal {r['journal']} != costs {r['costs']}" for r in rows]
        return Check(name=name, ok=False, detail=f"{len(rows)} store(s): {_examples(diffs)}")
    return Check(name=name, ok=True, detail=f"{costed} costed stores agree")


def _openings(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> Check:
    name = f"openings of {params['next']} = closings"
    if not costed:
        return _skipped(name, "no store costed")
    rows = _q.rows(conn, "openings_vs_closings", params)
    if rows:
        diffs = [f"{r['code']} ({r['items']} items)" for r in rows]
        return Check(name=name, ok=False, detail=f"{len(rows)} store(s) differ: {_examples(diffs)}")
    return Check(name=name, ok=True, detail=f"{costed} costed stores carried exactly")


def _after_close(conn: psycopg.Connection[Any], params: dict[str, Any], status: str) -> Check:
    name = "closed books unchanged"
    if status != "closed":
        return _skipped(name, f"period is {status}")
    row = _q.one(conn, "journals_after_close", params)
    if row["late"]:
        return Check(name=name, ok=False, detail=f"{row['late']} journal(s) posted after the close")
    return Check(name=name, ok=True, detail="no journal posted after the close")
