"""The books of a run, to compare the chaos run with the clean run to the cent (oracle 3).

A snapshot holds the trial balance of each period (``engine books
trial-balance``'s own function), every item cost, every carried-forward
opening balance, what posting did to each document, and every journal line
keyed by its journal's source key (journal ids differ between runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from engine import load_queries
from flows.erp.books import trial_balance

_q = load_queries(str(Path(__file__).with_name("chaos.sql")))

SECTIONS = ("item_costs", "opening_balances", "documents", "journal_lines", "periods")


def _rows(conn: psycopg.Connection[Any], name: str) -> list[tuple[str, ...]]:
    # text of every value: Decimal('1.10') and Decimal('1.1') are the same cents
    return [tuple(str(v) for v in row.values()) for row in conn.execute(_q[name]).fetchall()]


def snapshot(conn: psycopg.Connection[Any], periods: list[str]) -> dict[str, Any]:
    known = {r["period"] for r in conn.execute("SELECT period FROM erp_periods").fetchall()}
    # a period costing has not opened yet has no trial balance, in either run
    books: dict[str, Any] = {
        f"trial_balance {p}": trial_balance(conn, p).model_dump(mode="json")
        for p in periods
        if p in known
    }
    for section in SECTIONS:
        books[section] = _rows(conn, f"books_{section}")
    return books


def differences(chaos: dict[str, Any], clean: dict[str, Any], limit: int = 3) -> list[str]:
    """What differs, section by section (a few rows each); empty when the books are equal."""
    found: list[str] = []
    for section in sorted(set(chaos) | set(clean)):
        a, b = chaos.get(section), clean.get(section)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            only_chaos = sorted(set(a) - set(b))[:limit]
            only_clean = sorted(set(b) - set(a))[:limit]
            found.append(
                f"{section}: {len(a)} rows vs {len(b)} clean; "
                f"only in chaos {only_chaos}, only in clean {only_clean}"
            )
        else:
            found.append(f"{section}: chaos {a} != clean {b}")
    return found
