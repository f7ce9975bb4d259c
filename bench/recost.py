"""Backdated documents recosted forward (issue 36): the recost against a full costing.

One scratch database (``engine_bench_recost``): a month of documents seeded
in P-2 at ``BENCH_RECOST_STORES`` stores and posted; P-2, P-1 and P costed
(P-1 and P carry P-2's closings: every pair has a row in each). Then, on one
connection, each in one transaction as the costing step runs it (JIT off):

1. **one receipt**: one backdated purchase invoice into P-2 (one store, one
   item moving between stores), posted (its chunk marks the pairs it reaches
   in P-2, P-1 and P), then the recost (:func:`flows.erp.recost.recost`),
   against the full costing of the three periods from scratch (the facts
   kept, every costing undone in SQL first). ``BENCH_RECOST_ROUNDS`` rounds;
   medians, and the pairs the recost touched out of all pairs. Then the same
   through worker processes: the costing job of P-2 (its ``recost_stale``
   step) against the costing jobs of P-2, P-1 and P from scratch, each timed
   from its submit to the poll that sees it finished; and when the books
   were corrected (the recost step's commit, from the job's creation), and
   the recost step alone (its claim to its finish).
2. **100 documents, one item**: ``BENCH_RECOST_DOCS`` backdated receipts and
   sales of one item at several stores, then one recost: how many items were
   solved again (one) and pairs recosted, and its time.
3. **every pair**: every pair of P-2 marked stale (a correction reaching
   them all), then the recost of P-2 and forward, against the full costing.

Sizes: ``BENCH_RECOST_STORES`` 50, ``BENCH_RECOST_BRANDS`` 4,
``BENCH_RECOST_ITEMS`` 200 (per brand; ``BENCH_ERP_ITEMS`` 2000 is the ~1M
moves month), ``BENCH_RECOST_ROUNDS`` 3, ``BENCH_RECOST_DOCS`` 100,
``BENCH_RECOST_WORKERS`` 2 (worker processes for the same receipt through
the costing job, step 1b; 0 skips it), ``BENCH_RECOST_TIMEOUT_S`` 900. The
figures are printed, never asserted.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench.common import drop_database, emit, env_int, fresh_database, log
from bench.erp import FlowWorkers, run_job
from flows import costing
from flows.erp import periods, recost
from flows.erp.document_posting import post_documents
from flows.tools.seed import seed

DATABASE = "engine_bench_recost"
P2, P1, P = "2026-09", "2026-10", "2026-11"
NAME = "recost"


def _cost(conn: psycopg.Connection[Any], period: str) -> None:
    """Cost ``period`` as the costing steps do (recost first), in one transaction."""
    with conn.transaction():
        conn.execute("SET LOCAL jit = off")
        plan = costing.plan_costing(conn, period, None)
        periods.ensure_period(conn, plan.next_period)
        costing.solve_period(conn, period)
        recost.recost(conn, period, job=uuid.uuid4())
        for store in plan.stores:
            costing.cost_one_store(conn, period, store)
        periods.mark_costed_if_complete(conn, period, "bench")


def _recost(conn: psycopg.Connection[Any]) -> recost.RecostReport:
    with conn.transaction():
        conn.execute("SET LOCAL jit = off")
        return recost.recost(conn, P2, job=uuid.uuid4())


def _uncost(conn: psycopg.Connection[Any]) -> None:
    """Undo every costing from P-2 on, keeping the facts (as the owner, in SQL)."""
    with conn.transaction():
        conn.execute("DELETE FROM erp_stale_pairs")
        conn.execute(
            "DELETE FROM erp_journal_lines WHERE journal_id IN (SELECT id FROM erp_journals "
            "WHERE source IN ('costing', 'opening') AND period >= %s)",
            (P2,),
        )
        conn.execute(
            "DELETE FROM erp_journals WHERE source IN ('costing', 'opening') AND period >= %s",
            (P2,),
        )
        conn.execute("DELETE FROM erp_item_costs WHERE period >= %s", (P2,))
        conn.execute("DELETE FROM erp_item_averages WHERE period >= %s", (P2,))
        conn.execute("DELETE FROM erp_average_solves WHERE period >= %s", (P2,))
        conn.execute(
            "DELETE FROM erp_opening_balances AS o USING erp_store_periods AS sp "
            "WHERE sp.store_id = o.store_id AND sp.period = o.period AND sp.opening = 'carried' "
            "AND o.period > %s",
            (P2,),
        )
        conn.execute(
            "DELETE FROM erp_store_periods WHERE opening = 'carried' AND period > %s", (P2,)
        )
        conn.execute("UPDATE erp_store_periods SET costed_at = NULL WHERE period >= %s", (P2,))
        conn.execute(
            "UPDATE erp_periods SET status = 'open', costed_at = NULL WHERE period >= %s", (P2,)
        )


def _full(conn: psycopg.Connection[Any]) -> float:
    """Seconds to cost P-2, P-1 and P from scratch (the undo is not timed)."""
    _uncost(conn)
    started = time.perf_counter()
    for period in (P2, P1, P):
        _cost(conn, period)
    return time.perf_counter() - started


def _document(
    conn: psycopg.Connection[Any], kind: str, store: int, item: int, qty: int, unit: Decimal
) -> int:
    row = conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on) "
        "SELECT max(id) + 1, 'LATE-' || (max(id) + 1), %s, %s, %s, "
        "(SELECT min(id) FROM erp_employees), %s::date FROM erp_documents RETURNING id",
        (kind, P2, store, f"{P2}-07"),
    ).fetchone()
    assert row is not None
    doc = int(row["id"])
    amount = Decimal(qty) * unit
    if kind == "purchase_invoice":
        lines = [("1300", item, qty, amount, 0, unit), ("2000", None, None, 0, amount, None)]
    else:
        lines = [("1000", None, None, amount, 0, None), ("4000", item, qty, 0, amount, None)]
    for n, (account, it, q, debit, credit, cost) in enumerate(lines, 1):
        conn.execute(
            "INSERT INTO erp_document_lines (document_id, line_no, account_code, item_id, qty, "
            "debit, credit, unit_cost) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (doc, n, account, it, q, debit, credit, cost),
        )
    return doc


def _post(conn: psycopg.Connection[Any], docs: list[int]) -> float:
    started = time.perf_counter()
    with conn.transaction():
        post_documents(conn, P2, min(docs), max(docs))
    return time.perf_counter() - started


def _timed(run: Callable[[], recost.RecostReport]) -> tuple[float, recost.RecostReport]:
    started = time.perf_counter()
    report = run()
    return time.perf_counter() - started, report


def _through_workers(
    conn: psycopg.Connection[Any],
    info: str,
    sender: int,
    item: int,
    rounds: int,
    workers_n: int,
    timeout_s: float,
) -> None:
    """One backdated receipt, then ``engine submit costing --period P-2`` through
    ``workers_n`` worker processes (submit to finished, as the month-end bench times jobs),
    against the three costing jobs of a full costing from scratch."""
    workers = FlowWorkers(info, count=workers_n)
    with psycopg.connect(info, autocommit=True) as plain, workers:
        if not workers.wait_started():
            log(f"{NAME}: workers did not start")
            workers.show_logs()
            return
        recosts, fulls, corrected, steps = [], [], [], []
        for n in range(rounds):
            doc = _document(conn, "purchase_invoice", sender, item, 2 + n, Decimal("2.75"))
            _post(conn, [doc])
            job = run_job(plain, info, workers, "costing", P2, timeout_s, NAME)
            if job.wall_s is not None:
                recosts.append(job.wall_s)
                # the books are corrected when the recost step commits: its last finish, from
                # the job's creation (the steps after it read the stores' figures for the report)
                step = next((s for s in job.steps if s[0] == "recost_stale"), None)
                if step is not None and step[5] is not None:
                    corrected.append(float(step[5]))
                if step is not None and step[2] is not None:
                    steps.append(float(step[2]))  # the step alone: its claim to its finish
            _uncost(conn)
            walls = [run_job(plain, info, workers, "costing", p, timeout_s, NAME).wall_s
                     for p in (P2, P1, P)]  # fmt: skip
            if all(w is not None for w in walls):
                fulls.append(sum(w for w in walls if w is not None))
        if recosts and fulls:
            emit(NAME, "workers/one_receipt_costing_job_s_median", statistics.median(recosts), "s")
            if corrected:
                emit(
                    NAME,
                    "workers/one_receipt_books_corrected_s_median",
                    statistics.median(corrected),
                    "s",
                )
            if steps:
                emit(
                    NAME, "workers/one_receipt_recost_step_s_median", statistics.median(steps), "s"
                )
            emit(NAME, "workers/full_costing_jobs_s_median", statistics.median(fulls), "s")
            emit(
                NAME,
                "workers/recost_over_full",
                statistics.median(recosts) / statistics.median(fulls),
                "x",
            )


def run() -> None:
    stores = env_int("BENCH_RECOST_STORES", 50)
    brands = env_int("BENCH_RECOST_BRANDS", 4)
    items = env_int("BENCH_RECOST_ITEMS", 200)
    rounds = max(1, env_int("BENCH_RECOST_ROUNDS", 3))
    docs = env_int("BENCH_RECOST_DOCS", 100)
    workers_n = env_int("BENCH_RECOST_WORKERS", 2)
    timeout_s = float(env_int("BENCH_RECOST_TIMEOUT_S", 900))
    info = fresh_database(dbname=DATABASE)
    try:
        with psycopg.connect(info, autocommit=True, row_factory=dict_row) as conn:
            report = seed(
                conn, stores=stores, brands=brands, employees=stores * 4, items=items,
                period=P2, seed=1,
            )  # fmt: skip
            log(f"{NAME}: seeded {report.model_dump()}")
            with conn.transaction():
                post_documents(conn, P2, 1, 10**12)
            conn.execute("VACUUM ANALYZE")
            for period in (P2, P1, P):
                _cost(conn, period)
            moves = conn.execute("SELECT count(*) AS n FROM erp_stock_moves").fetchone()
            pairs = conn.execute(
                "SELECT count(*) AS n FROM erp_item_costs WHERE period >= %s", (P2,)
            ).fetchone()
            assert moves is not None and pairs is not None
            emit(NAME, "stock_moves", moves["n"], "moves")
            emit(NAME, "pairs_all_periods", pairs["n"], "pairs")
            moving = conn.execute(
                "SELECT item_id, counterpart_store_id AS sender FROM erp_stock_moves "
                "WHERE period = %s AND kind = 'transfer_in' ORDER BY id LIMIT 1",
                (P2,),
            ).fetchone()
            assert moving is not None, "the seed moves items between stores"
            item, sender = moving["item_id"], moving["sender"]

            # 1. one backdated receipt vs a full costing of the three periods
            recosts, fulls, touched = [], [], []
            for n in range(rounds):
                doc = _document(conn, "purchase_invoice", sender, item, 3 + n, Decimal("2.5"))
                _post(conn, [doc])
                seconds, done = _timed(lambda: _recost(conn))
                recosts.append(seconds)
                touched.append(done.pairs)
                fulls.append(_full(conn))
            emit(NAME, "one_receipt/recost_s_median", statistics.median(recosts), "s")
            emit(NAME, "one_receipt/full_costing_s_median", statistics.median(fulls), "s")
            emit(NAME, "one_receipt/pairs_recosted", statistics.median(touched), "pairs")
            emit(
                NAME,
                "one_receipt/recost_over_full",
                statistics.median(recosts) / statistics.median(fulls),
                "x",
            )

            # 1b. the same through workers: the costing job of P-2 (its recost step) against
            # the costing jobs of the three periods from scratch
            if workers_n > 0:
                _through_workers(conn, info, sender, item, rounds, workers_n, timeout_s)

            # 2. many documents on one item, then one costing: one recompute
            stores_of = [r["id"] for r in conn.execute("SELECT id FROM erp_stores ORDER BY id")]
            late = [
                _document(
                    conn,
                    "purchase_invoice" if n % 2 == 0 else "sales_invoice",
                    stores_of[n % len(stores_of)],
                    item,
                    1 + n % 3,
                    Decimal("3.1") if n % 2 == 0 else Decimal("9.9"),
                )
                for n in range(docs)
            ]
            posting_s = _post(conn, late)
            seconds, done = _timed(lambda: _recost(conn))
            emit(NAME, "many_docs/documents", docs, "documents")
            emit(NAME, "many_docs/posting_s", posting_s, "s")
            emit(NAME, "many_docs/items_solved", done.items_solved, "items")
            emit(NAME, "many_docs/pairs_recosted", done.pairs, "pairs")
            emit(NAME, "many_docs/recost_s", seconds, "s")

            # 3. a correction reaching every pair vs a full costing
            recosts, fulls = [], []
            for _ in range(rounds):
                with conn.transaction():
                    rows = conn.execute(
                        "SELECT store_id, item_id FROM erp_item_costs WHERE period = %s", (P2,)
                    ).fetchall()
                    recost.mark_pairs(conn, P2, [(r["store_id"], r["item_id"]) for r in rows])
                seconds, done = _timed(lambda: _recost(conn))
                recosts.append(seconds)
                fulls.append(_full(conn))
            emit(NAME, "every_pair/pairs_recosted", done.pairs, "pairs")
            emit(NAME, "every_pair/recost_s_median", statistics.median(recosts), "s")
            emit(NAME, "every_pair/full_costing_s_median", statistics.median(fulls), "s")
            emit(
                NAME,
                "every_pair/recost_over_full",
                statistics.median(recosts) / statistics.median(fulls),
                "x",
            )
    finally:
        try:
            drop_database(DATABASE)
        except Exception as exc:
            log(f"could not drop {DATABASE}: {exc}")
