"""Books built the way the flows build them, without a worker: seed, post, cost, close."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import psycopg
from dbpool import built_once

from flows import costing
from flows.erp import periods, recost
from flows.erp.document_posting import post_documents
from flows.tools.seed import seed


def post(conn: psycopg.Connection[Any], period: str) -> None:
    """Post every unposted document of ``period`` (one transaction, as one chunk would)."""
    with conn.transaction():
        post_documents(conn, period, 1, 10**9)


def cost(conn: psycopg.Connection[Any], period: str) -> None:
    """Cost every store for ``period`` as the costing steps do (a costed period's stale pairs
    recosted forward first), and mark the period costed."""
    with conn.transaction():
        plan = costing.plan_costing(conn, period, None)
        periods.ensure_period(conn, plan.next_period)
        costing.solve_period(conn, period)
        recost.recost(conn, period, job=uuid.uuid4())  # a job of its own
        for store in plan.stores:
            costing.cost_one_store(conn, period, store)
        periods.mark_costed_if_complete(conn, period, "test")


def close(conn: psycopg.Connection[Any], period: str) -> None:
    with conn.transaction():
        periods.close(conn, period, actor="test")


def seeded(conn: psycopg.Connection[Any], period: str = "2026-11") -> None:
    """Three stores seeded for ``period`` (one transfer between two of them), posted and costed.

    Built once per xdist worker; later tests get its rows copied in (tests/support/dbpool.py).
    """

    def build(c: psycopg.Connection[Any]) -> None:
        seed(c, stores=3, brands=1, employees=3, items=5, period=period, seed=9, new_stores=1)
        post(c, period)
        cost(c, period)

    built_once(conn, f"erp_books.seeded {period}", build)


def money(conn: psycopg.Connection[Any], sql: str, *params: Any) -> Decimal:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return Decimal(next(iter(row.values())))
