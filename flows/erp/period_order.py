"""Periods close and reopen in order.

A period closes only once every earlier period of each store is closed
(:func:`refuse_close`): a store's periods are its rows in
``erp_store_periods``, from its first (where its books start: its opening
``loaded``), so a store opened in December does not hold back November for
the others. And it closes only with no unposted document dated in it
(:mod:`flows.erp.dated`). A reopen of P while later periods are closed
would change the balances they kept: it is refused naming them, or, asked
to cascade, reopens them latest first with the same reason
(:func:`flows.erp.periods.reopen`).
"""

from __future__ import annotations

from typing import Any

import psycopg

from engine import Refused
from flows.erp import dated
from flows.erp.queries import NamedQueries

__all__ = [
    "closed_after",
    "later_closed",
    "refuse_before_earlier",
    "refuse_close",
    "refuse_reopen",
]

_q = NamedQueries("period_order")


def _stores(codes: list[str], shown: int = 8) -> str:
    more = f" and {len(codes) - shown} more" if len(codes) > shown else ""
    return f"store{'s' if len(codes) > 1 else ''} {', '.join(codes[:shown])}{more}"


def refuse_close(conn: psycopg.Connection[Any], period: str) -> None:
    """:class:`engine.Refused` unless every earlier period of each store is closed and no
    unposted document is dated in ``period``."""
    refuse_before_earlier(conn, period)
    unposted = dated.unposted_in(conn, period)
    if unposted.documents:
        more = " ..." if unposted.documents > len(unposted.examples) else ""
        raise Refused(
            f"cannot close {period}: {unposted.documents} unposted document(s) are dated in it "
            f"({', '.join(unposted.examples)}{more}): post them (engine submit posting "
            f"--period {period}) or correct their dates first"
        )


def refuse_before_earlier(conn: psycopg.Connection[Any], period: str) -> None:
    """:class:`engine.Refused` naming the earlier periods of the stores that are not closed
    (the close flow's admission asks this before it posts and costs)."""
    earlier = _q.rows(conn, "store_periods_before_not_closed", {"period": period})
    if earlier:
        parts = [f"{r['period']} is {r['status']} ({_stores(r['stores'])})" for r in earlier]
        first = earlier[0]["period"]
        raise Refused(
            f"cannot close {period}: periods close in order and "
            + "; ".join(parts)
            + f": close {first} first (engine books close --period {first})"
        )


def later_closed(conn: psycopg.Connection[Any], period: str) -> list[str]:
    """The closed periods after ``period``, locked, latest first."""
    rows = _q.rows(conn, "periods_after_closed_lock", {"period": period})
    return [r["period"] for r in reversed(rows)]


def closed_after(conn: psycopg.Connection[Any], period: str) -> list[str]:
    """The closed periods after ``period``, latest first (read only, no lock)."""
    return [r["period"] for r in _q.rows(conn, "periods_after_closed", {"period": period})]


def refuse_reopen(period: str, later: list[str]) -> None:
    """:class:`engine.Refused` naming the later closed periods a reopen of ``period`` needs."""
    if later:
        names = ", ".join(sorted(later))
        raise Refused(
            f"cannot reopen {period}: later period(s) {names} are closed and kept balances "
            f"that start from it; reopen them first, latest first, or all at once with "
            f"--cascade (engine books reopen --period {period} --cascade --reason ...)"
        )
