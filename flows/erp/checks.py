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
from flows.erp import books, dated, facts, recost, ties
from flows.erp.books import Money
from flows.erp.config import ErpSettings
from flows.erp.flags import Flag, raised
from flows.erp.ledger import ACCOUNTS
from flows.erp.queries import NamedQueries
from flows.erp.types import fiscal_year_start, next_period, previous_period

__all__ = ["BooksCheck", "Check", "check_period"]

_q = NamedQueries("checks")

# by (account code, store id): the trial balance's rows, and (store code, balance) kept by a close
Balances = dict[tuple[str, int | None], books.Balance]
Kept = dict[tuple[str, int | None], tuple[str | None, Decimal]]


class Check(BaseModel):
    """One identity: whether it holds, and what was compared (or why it was skipped)."""

    name: str
    ok: bool
    skipped: bool = False
    detail: str


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
        _last_closing(conn, period, balances),
        _openings(conn, params, costed),
        _after_close(conn, params, head["status"], balances),
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
        return _skipped(name, "no store costed")
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
    detail = f"{rows[0]['differ']} store/item(s) differ: {_examples(diffs)}"
    if rows[0]["differ"] > len(rows):
        detail += f" and {rows[0]['differ'] - len(rows)} more"
    return Check(name=name, ok=False, detail=detail)


def _cogs(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> Check:
    name = "COGS journals = item costs"
    rows = _q.rows(conn, "cogs_journals_vs_costs", params)
    if not costed and not rows:
        return _skipped(name, "no store costed")
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
        return Check(name=name, ok=False, detail=f"{len(rows)} store(s): {_examples(diffs)}")
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
        return [_skipped(per_store, "no store costed"), _skipped(company, "no store costed")]
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
            detail=f"{len(broken)} of {len(rows)} stores: {_examples(broken)}"
            if broken
            else f"{len(rows)} costed stores agree",
        )
    ]
    if not all_costed:
        checks.append(_skipped(company, f"{uncosted} store(s) not costed"))
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
        return _skipped(name, f"{uncosted} store(s) not costed; a transfer has two sides")
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
        + _examples(stores, shown=10),
    )


def _kept(conn: psycopg.Connection[Any], period: str, *, roll: bool) -> Kept:
    """The closing balances ``period``'s close kept: (account, store id) -> (store, balance)."""
    rows = _q.rows(
        conn,
        "period_balances_select",
        {"period": period, "roll": roll, "retained": ACCOUNTS["retained"]},
    )
    return {(r["code"], r["store_id"]): (r["store"], r["balance"]) for r in rows}


def _differences(now: Kept, kept: Kept, labels: tuple[str, str]) -> list[str]:
    """Each account and store whose balance ``now`` is not the ``kept`` one (absent = 0)."""
    found = []
    nothing = (None, Decimal(0))
    for key in sorted(now.keys() | kept.keys(), key=lambda k: (k[0], k[1] or 0)):
        (store, value), (kept_store, was) = now.get(key, nothing), kept.get(key, nothing)
        if value != was:
            found.append(
                f"{key[0]} {store or kept_store or '-'} {labels[0]} {value} != {labels[1]} {was}"
            )
    return found


def _last_closing(conn: psycopg.Connection[Any], period: str, balances: Balances) -> Check:
    """The opening carried from before ``period`` = what the previous period's close kept.

    When the previous period is closed with no journal line up to it, its
    closing balances are empty (the seed's closed month): the opening
    carries nothing, and the check holds. A previous period that is not
    closed has no final balances yet (skipped), nor one closed before the
    close kept them (skipped, saying so).
    """
    name = "opening = last closing"
    before = previous_period(period)
    standing = _q.one(conn, "period_standing", {"of": period})
    prev = _q.one(conn, "period_standing", {"of": before})
    if prev["status"] == "closed" and prev["kept"]:
        roll = fiscal_year_start(period, ErpSettings().fiscal_year_start_month) == period
        carried = {k: (b.store, b.carried) for k, b in balances.items()}
        diffs = _differences(carried, _kept(conn, before, roll=roll), ("opening", "closing"))
        if diffs:
            return Check(
                name=name,
                ok=False,
                detail=f"{len(diffs)} account/store balance(s) differ from {before}'s "
                f"closing: {_examples(diffs)}",
            )
        rolled = ", its income and expense in 3100 (a new fiscal year)" if roll else ""
        return Check(
            name=name,
            ok=True,
            detail=f"{len(carried)} account/store balance(s) carried as {before} closed{rolled}",
        )
    if not standing["lines_before"] and prev["status"] in (None, "closed"):
        return Check(
            name=name, ok=True, detail=f"no journal before {period}: the opening carries nothing"
        )
    if prev["status"] is None:
        return _skipped(name, f"{before} does not exist")
    if prev["status"] != "closed":
        return _skipped(name, f"{before} is {prev['status']}, not closed: its closing may change")
    return _skipped(name, f"{before} was closed before closes kept their balances")


def _openings(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> Check:
    name = f"openings of {params['next']} = closings"
    if not costed:
        return _skipped(name, "no store costed")
    rows = _q.rows(conn, "openings_vs_closings", params)
    if rows:
        diffs = [f"{r['code']} ({r['items']} items)" for r in rows]
        return Check(name=name, ok=False, detail=f"{len(rows)} store(s) differ: {_examples(diffs)}")
    return Check(name=name, ok=True, detail=f"{costed} costed stores carried exactly")


def _after_close(
    conn: psycopg.Connection[Any], params: dict[str, Any], status: str, balances: Balances
) -> Check:
    name = "closed books unchanged"
    if status != "closed":
        return _skipped(name, f"period is {status}")
    problems = []
    row = _q.one(conn, "journals_after_close", params)
    if row["late"]:
        problems.append(f"{row['late']} journal(s) posted after the close")
    kept = _q.one(conn, "period_standing", {"of": params["period"]})["kept"]
    if kept:
        closing = {k: (b.store, b.closing) for k, b in balances.items()}
        diffs = _differences(
            closing, _kept(conn, params["period"], roll=False), ("closing", "kept")
        )
        if diffs:
            problems.append(
                f"{len(diffs)} account/store balance(s) differ from the close's: "
                + _examples(diffs)
            )
    if problems:
        return Check(name=name, ok=False, detail="; ".join(problems))
    also = "; closing balances as the close kept them" if kept else ""
    return Check(name=name, ok=True, detail=f"no journal posted after the close{also}")
