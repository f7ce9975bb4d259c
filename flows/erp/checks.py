"""The cross-checks an auditor runs on a period's books: ``engine books check --period P``.

Each check is an identity that must hold to the cent; its terms are read
from the table that owns them (openings as loaded or carried, receipts from
the stock moves, COGS from the item costs and from the journals, the kept
closing balances of a closed period), so a check compares two records of one
fact rather than a number with itself:

- ``journals balance``: debit = credit for every journal of the period, and
  in total (the database refuses an unbalanced one at commit too:
  ``erp_journal_balanced``);
- ``inventory conservation``: opening + receipts + transfers in = COGS +
  transfers out + closing, per costed store and company-wide;
- ``transfers net to zero``: company-wide, transfers in = transfers out in
  value (once every store is costed; a transfer's two sides are costed with
  their two stores);
- ``item costs = stock moves``: per costed store and item, the quantities
  and the receipt value costing used are the sums of the posted stock moves;
- ``COGS journals = item costs``: per store, the costing journal's net debit
  to 5000 + 5100 equals the COGS of its item costs, and to 1350 its
  transfers out - transfers in;
- ``GL inventory = stock ledger``: per costed store, the ledger's 1300 at
  the end of the period equals its item costs' closing value; company-wide
  once every store is costed;
- ``inter-store account nets to zero``: the period's 1350 lines, company-wide,
  once every store is costed;
- ``opening = last closing``: the period's opening balances, per account and
  store, are the closing balances the previous period's close kept (its
  income and expense in 3100 when the period starts a fiscal year);
- ``openings = closings``: the next period's opening stock of every costed
  store is this period's closing stock, item by item;
- ``closed books unchanged``: no journal of a closed period was posted after
  it closed, and its closing balances are still those its close kept;
- and the ties of every figure to its source (:mod:`flows.erp.ties`).

The three that tie a period to its neighbours live in :mod:`flows.erp.continuity`.

A check that cannot apply yet (no store costed, the previous period not
closed) is reported as skipped, not as passed. The close of a period
(:func:`flows.erp.periods.close`, the close flow) refuses to close while any
check fails. The result also carries the flags the books raise
(:mod:`flows.erp.flags`): a refusing one fails the check, a warning passes.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg
from pydantic import BaseModel

from engine import BadInput
from flows.erp import books, continuity, dated, facts, recost, ties
from flows.erp.books import Money
from flows.erp.check import Check, examples, skipped
from flows.erp.flags import Flag, raised
from flows.erp.queries import NamedQueries
from flows.erp.types import next_period

__all__ = ["BooksCheck", "Check", "check_period"]

_q = NamedQueries("checks")


class Reconciled(BaseModel):
    """One costed store's inventory in both records: the ledger's 1300 and the stock ledger."""

    store: str
    gl_inventory: Money
    stock_ledger: Money
    difference: Money


class BooksCheck(BaseModel):
    """Every check of one period, and the inventory reconciliation per costed store."""

    period: str
    status: str
    stores: int
    stores_costed: int
    checks: list[Check]
    reconciliation: list[Reconciled] = []
    flags: list[Flag] = []
    waiting: list[dated.Waiting] = []
    """Documents dated in closed months, waiting: listed, not a failed check."""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks) and not any(f.refuses for f in self.flags)

    @property
    def problems(self) -> list[str]:
        broken = [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]
        return broken + [f"flag {f.line}" for f in self.flags if f.refuses]


def check_period(conn: psycopg.Connection[Any], period: str) -> BooksCheck:
    """Run every check of ``period``; :class:`engine.BadInput` if the period does not exist."""
    params = {"period": period, "next": next_period(period)}
    head = _q.first(conn, "period_stores", params)
    if head is None:
        raise BadInput(f"period {period} does not exist in erp_periods")
    costed = head["costed"]
    all_costed = head["stores"] > 0 and costed == head["stores"]
    uncosted = head["stores"] - costed
    balances = {(b.code, b.store_id): b for b in books.balances(conn, period)}
    reconciled: list[Reconciled] = []
    checks = [
        _journals(conn, params),
        *_inventory(conn, params, costed),
        _transfers(conn, params, all_costed, uncosted),
        _moves(conn, params, costed),
        _cogs(conn, params, costed),
        *_gl_inventory(conn, params, costed, all_costed, uncosted, reconciled),
        _inter_store(conn, params, all_costed, uncosted),
        continuity.last_closing(conn, period, balances),
        continuity.openings(conn, params, costed),
        continuity.after_close(conn, params, head["status"], balances),
        # every figure tied to its source, document by document, item by item
        *(Check(**t.model_dump()) for t in ties.check_ties(conn, period, costed)),
        _facts(conn, period),
        _stale(conn, period),
    ]
    return BooksCheck(
        period=period,
        status=head["status"],
        stores=head["stores"],
        stores_costed=costed,
        checks=checks,
        reconciliation=reconciled,
        flags=raised(conn, period),
        waiting=dated.waiting(conn),
    )


def _facts(conn: psycopg.Connection[Any], period: str) -> Check:
    """The facts the period's averages were solved from are still its facts."""
    name = "facts unchanged since the solve"
    why = facts.stale_reason(conn, period)
    if why is not None:
        return Check(name=name, ok=False, detail=f"{why}: its costs are stale")
    return Check(name=name, ok=True, detail="the solve's fingerprint matches (or not solved)")


def _stale(conn: psycopg.Connection[Any], period: str) -> Check:
    """No stale pairs wait for their recost (backdated documents: :mod:`flows.erp.recost`)."""
    name = "costs up to date (no stale pairs)"
    found = recost.stale(conn, period)
    if found is not None:
        return Check(name=name, ok=False, detail=found.why())
    return Check(name=name, ok=True, detail="no backdated document waits for its recost")


def _journals(conn: psycopg.Connection[Any], params: dict[str, Any]) -> Check:
    row = _q.one(conn, "journals_unbalanced", params)
    name = "journals balance"
    totals = f"{row['journals']} journals, debit {row['debit']}, credit {row['credit']}"
    if row["unbalanced"]:
        return Check(
            name=name,
            ok=False,
            detail=f"{row['unbalanced']} journal(s) do not balance "
            f"({examples(row['examples'])}); {totals}",
        )
    if row["debit"] != row["credit"]:
        return Check(name=name, ok=False, detail=f"the totals differ: {totals}")
    return Check(name=name, ok=True, detail=totals)


def _inventory(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> list[Check]:
    per_store, company = "inventory conservation per store", "inventory conservation company-wide"
    if not costed:
        return [skipped(per_store, "no store costed"), skipped(company, "no store costed")]
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
            detail=f"{len(broken)} of {len(rows)} stores: {examples(broken)}"
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
        return skipped(name, f"{uncosted} store(s) not costed; a transfer has two sides")
    row = _q.one(conn, "transfers_company_wide", params)
    detail = f"transfers in {row['transfer_in']}, transfers out {row['transfer_out']}"
    return Check(name=name, ok=row["transfer_in"] == row["transfer_out"], detail=detail)


_MOVED = {
    "receipt_qty": "receipt qty",
    "receipt_value": "receipt value",
    "transfer_in_qty": "transfer in qty",
    "transfer_out_qty": "transfer out qty",
    "issue_qty": "issue qty",
}


def _moves(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> Check:
    name = "item costs = stock moves"
    if not costed:
        return skipped(name, "no store costed")
    rows = _q.rows(conn, "item_costs_vs_stock_moves", params)
    if not rows:
        return Check(name=name, ok=True, detail=f"{costed} costed stores agree with their moves")
    diffs = [
        f"{r['store']} {r['sku']} "
        + ", ".join(
            f"{label} {r['costs_' + field]} != stock moves {r['moves_' + field]}"
            for field, label in _MOVED.items()
            if r["costs_" + field] != r["moves_" + field]
        )
        for r in rows
    ]
    detail = f"{rows[0]['differ']} store/item(s) differ: {examples(diffs)}"
    if rows[0]["differ"] > len(rows):
        detail += f" and {rows[0]['differ'] - len(rows)} more"
    return Check(name=name, ok=False, detail=detail)


def _cogs(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> Check:
    name = "COGS journals = item costs"
    rows = _q.rows(conn, "cogs_journals_vs_costs", params)
    if not costed and not rows:
        return skipped(name, "no store costed")
    if rows:
        diffs = []
        for r in rows:
            parts = []
            if r["journal"] != r["costs"]:
                parts.append(f"5000+5100 journal {r['journal']} != COGS {r['costs']}")
            if r["journal_transfers"] != r["transfers"]:
                parts.append(
                    f"1350 journal {r['journal_transfers']} != transfers out - in {r['transfers']}"
                )
            diffs.append(f"{r['code']} " + " and ".join(parts))
        return Check(name=name, ok=False, detail=f"{len(rows)} store(s): {examples(diffs)}")
    return Check(name=name, ok=True, detail=f"{costed} costed stores agree")


def _gl_inventory(
    conn: psycopg.Connection[Any],
    params: dict[str, Any],
    costed: int,
    all_costed: bool,
    uncosted: int,
    reconciled: list[Reconciled],
) -> list[Check]:
    per_store, company = (
        "GL inventory = stock ledger per store",
        "GL inventory = stock ledger company-wide",
    )
    if not costed:
        return [skipped(per_store, "no store costed"), skipped(company, "no store costed")]
    rows = _q.rows(conn, "inventory_gl_vs_stock_ledger_by_store", params)
    reconciled += [
        Reconciled(
            store=r["code"],
            gl_inventory=r["gl"],
            stock_ledger=r["stock"],
            difference=r["gl"] - r["stock"],
        )
        for r in rows
    ]
    broken = [
        f"{r['code']} GL 1300 {r['gl']} != stock ledger {r['stock']}"
        for r in rows
        if r["gl"] != r["stock"]
    ]
    checks = [
        Check(
            name=per_store,
            ok=not broken,
            detail=f"{len(broken)} of {len(rows)} stores: {examples(broken)}"
            if broken
            else f"{len(rows)} costed stores agree",
        )
    ]
    if not all_costed:
        checks.append(skipped(company, f"{uncosted} store(s) not costed"))
        return checks
    row = _q.one(conn, "inventory_gl_vs_stock_ledger_company_wide", params)
    held = row["gl"] == row["stock"]
    detail = f"GL 1300 {row['gl']} {'=' if held else '!='} stock ledger {row['stock']}"
    checks.append(Check(name=company, ok=held, detail=detail))
    return checks


def _inter_store(
    conn: psycopg.Connection[Any], params: dict[str, Any], all_costed: bool, uncosted: int
) -> Check:
    name = "inter-store account nets to zero"
    if not all_costed:
        return skipped(name, f"{uncosted} store(s) not costed; a transfer has two sides")
    rows = _q.rows(conn, "inter_store_by_store", params)
    debit = sum((r["debit"] for r in rows), Decimal(0))
    credit = sum((r["credit"] for r in rows), Decimal(0))
    period = params["period"]
    if debit == credit:
        return Check(name=name, ok=True, detail=f"1350 of {period}: debit {debit}, credit {credit}")
    stores = [f"{r['code'] or '-'} out - in {r['debit'] - r['credit']}" for r in rows]
    return Check(
        name=name,
        ok=False,
        detail=f"1350 of {period}: net {debit - credit} != 0 (debit {debit}, credit {credit}); "
        + examples(stores, shown=10),
    )
