"""The checks that tie a period to its neighbours (part of ``engine books check``).

- ``opening = last closing``: the period's opening balances, per account and
  store, are the closing balances the previous period's close kept (its
  income and expense in 3100 when the period starts a fiscal year);
- ``openings = closings``: the next period's opening stock of every costed
  store is this period's closing stock, item by item;
- ``closed books unchanged``: no journal of a closed period was posted after
  it closed, and its closing balances are still those its close kept.

:func:`flows.erp.checks.check_period` runs them with the period's own checks.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg

from flows.erp import books
from flows.erp.check import Check, examples, skipped
from flows.erp.config import ErpSettings
from flows.erp.ledger import ACCOUNTS
from flows.erp.queries import NamedQueries
from flows.erp.types import fiscal_year_start, previous_period

__all__ = ["Balances", "Kept", "after_close", "last_closing", "openings"]

_q = NamedQueries("checks")

# by (account code, store id): the trial balance's rows, and (store code, balance) kept by a close
Balances = dict[tuple[str, int | None], books.Balance]
Kept = dict[tuple[str, int | None], tuple[str | None, Decimal]]


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


def last_closing(conn: psycopg.Connection[Any], period: str, balances: Balances) -> Check:
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
                f"closing: {examples(diffs)}",
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
        return skipped(name, f"{before} does not exist")
    if prev["status"] != "closed":
        return skipped(name, f"{before} is {prev['status']}, not closed: its closing may change")
    return skipped(name, f"{before} was closed before closes kept their balances")


def openings(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> Check:
    name = f"openings of {params['next']} = closings"
    if not costed:
        return skipped(name, "no store costed")
    rows = _q.rows(conn, "openings_vs_closings", params)
    if rows:
        diffs = [f"{r['code']} ({r['items']} items)" for r in rows]
        return Check(name=name, ok=False, detail=f"{len(rows)} store(s) differ: {examples(diffs)}")
    return Check(name=name, ok=True, detail=f"{costed} costed stores carried exactly")


def after_close(
    conn: psycopg.Connection[Any], params: dict[str, Any], status: str, balances: Balances
) -> Check:
    name = "closed books unchanged"
    if status != "closed":
        return skipped(name, f"period is {status}")
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
                f"{len(diffs)} account/store balance(s) differ from the close's: " + examples(diffs)
            )
    if problems:
        return Check(name=name, ok=False, detail="; ".join(problems))
    also = "; closing balances as the close kept them" if kept else ""
    return Check(name=name, ok=True, detail=f"no journal posted after the close{also}")
