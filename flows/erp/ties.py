"""Ties: every figure of a period's books against its source, for ``engine books check``.

The identities of :mod:`flows.erp.checks` compare totals; a tamper that keeps
the totals (a journal changed by a balanced pair of cents, a document's lines
edited after posting, an average changed in its fourth decimal) passes them.
These checks tie each figure to the record it comes from, document by
document, move by move, item by item, and name the document, store or item
that breaks:

- ``document journals = document lines``: each posted document of the
  period (its accounting month is ``posting_period``: the month it is dated
  in, or for a late document the one it was redated into,
  :mod:`flows.erp.corrections`) has a journal that is its lines as posting
  writes them: per account, the net amount on the document's store, in that
  month, on its store;
- ``posted documents unchanged``: a document's fingerprint now
  (``erp_document_fingerprints``, the SQL function posting used: its kind,
  store, counterpart, date and every line's account, item, quantity, unit
  cost, debit and credit) equals the one kept when it was posted
  (``erp_document_postings``, written by posting in the statement that
  marks it posted);
- ``document journals = posted documents``: one to one, both ways: a posted
  document has its journal, the very one its posting recorded; a document
  journal of the period has a posted document dated in it;
- ``stock moves = document lines``: one to one, both ways: each item line of
  a posted document has its stock moves (kind, store, item, quantity, unit
  cost, counterpart, date) in the period, and every move of the period is
  one of them (a move deleted between posting and costing is named by its
  document, store and item);
- ``item costs recomputed from the stock moves``: each item cost's figures
  from openings and moves, each move valued as costing values it (receipts
  at their unit cost, transfers at the sender's solved average), the average
  as costing finds it (to its 4th decimal), COGS and closing to the cent; a
  solved average satisfies its equation within its rounding;
- ``standard costs kept with the item costs``: costing keeps the standard
  cost it used in ``erp_item_costs.standard_cost`` (the exports read it, so
  a closed period's figures never change when an items migration changes
  ``erp_items``), and an average that fell back to it equals it.

Each check is one set-based statement (``flows/erp/sql/ties.sql``) that
returns the first few breaks and how many there are. :func:`check_ties` is
called by :func:`flows.erp.checks.check_period`, so the close refuses a
period whose books do not tie.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import pq
from pydantic import BaseModel

from flows.erp.queries import NamedQueries

__all__ = ["Tie", "check_ties"]

_q = NamedQueries("ties")

SHOWN = 5
"""Breaks named per check (the statements' LIMIT); the count is always exact."""


class Tie(BaseModel):
    """One tie: whether it holds, and what broke (or why it was skipped)."""

    name: str
    ok: bool
    skipped: bool = False
    detail: str


def check_ties(conn: psycopg.Connection[Any], period: str, costed: int) -> list[Tie]:
    """Every tie of ``period``'s books to their sources (``costed``: stores costed for it)."""
    jit = _q.one(conn, "jit_select")["jit"]
    _q.one(conn, "jit_set", {"jit": "off"})
    try:
        return _ties(conn, {"period": period}, costed)
    finally:
        # an aborted transaction rolls the setting back with everything else
        if conn.info.transaction_status != pq.TransactionStatus.INERROR:
            _q.one(conn, "jit_set", {"jit": jit})


def _ties(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> list[Tie]:
    return [
        _documents(
            conn,
            params,
            "document journals = document lines",
            "document_journals_vs_lines",
            "posted documents' journals are their lines",
            lambda r: f"{r['number']} ({r['store']}): {r['problems']}",
        ),
        _documents(
            conn,
            params,
            "posted documents unchanged",
            "document_postings_vs_lines",
            "posted documents hold what was posted",
            lambda r: f"{r['number']} ({r['store']}) changed since it was posted",
        ),
        _documents(
            conn,
            params,
            "document journals = posted documents",
            "document_journals_vs_postings",
            "posted documents and document journals match one to one",
            lambda r: f"{r['document']} ({r['store'] or 'no store'}): {r['problem']}",
        ),
        _documents(
            conn,
            params,
            "stock moves = document lines",
            "stock_moves_vs_document_lines",
            "stock moves and document lines match one to one",
            lambda r: (
                f"{r['document'] or 'no document'} line {r['line_no']} {r['kind']} "
                f"({r['store']} {r['sku']}): {r['problem']}"
            ),
        ),
        _item_costs(conn, params, costed),
        _standard_costs(conn, params, costed),
    ]


def _documents(
    conn: psycopg.Connection[Any],
    params: dict[str, Any],
    name: str,
    query: str,
    held: str,
    describe: Callable[[dict[str, Any]], str],
) -> Tie:
    rows = _q.rows(conn, query, params)
    if not rows:
        return Tie(name=name, ok=True, detail=f"{held} in {params['period']}")
    return Tie(name=name, ok=False, detail=_breaks(rows, [describe(r) for r in rows]))


def _breaks(rows: list[dict[str, Any]], shown: list[str]) -> str:
    differ = rows[0]["differ"]
    more = f" and {differ - len(shown)} more" if differ > len(shown) else ""
    return f"{differ} differ: " + "; ".join(shown) + more


def _item_costs(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> Tie:
    name = "item costs recomputed from the stock moves"
    if not costed:
        return Tie(name=name, ok=True, skipped=True, detail="skipped: no store costed")
    rows = _q.rows(conn, "item_costs_recomputed", params)
    if not rows:
        return Tie(
            name=name,
            ok=True,
            detail=f"{costed} costed stores' item costs recomputed from openings and moves",
        )
    shown = [f"{r['store']} {r['sku']}: {r['problem']}" for r in rows]
    return Tie(name=name, ok=False, detail="store/items: " + _breaks(rows, shown))


def _standard_costs(conn: psycopg.Connection[Any], params: dict[str, Any], costed: int) -> Tie:
    name = "standard costs kept with the item costs"
    if not costed:
        return Tie(name=name, ok=True, skipped=True, detail="skipped: no store costed")
    row = _q.one(conn, "item_costs_standard_cost", params)
    if row["broken"]:
        more = row["broken"] - len(row["examples"])
        return Tie(
            name=name,
            ok=False,
            detail=f"{row['broken']} item cost(s): "
            + "; ".join(row["examples"])
            + (f" and {more} more" if more > 0 else ""),
        )
    changed = (
        f"; {row['changed_since']} differ from erp_items today (the period keeps the one it used)"
        if row["changed_since"]
        else ""
    )
    return Tie(
        name=name,
        ok=True,
        detail=f"{row['kept']} of {row['costs']} item costs keep their standard cost, "
        f"{row['fell_back']} fell back to it{changed}",
    )
