"""The ERP month end: seed a real-size month, post it, close it (costing) through the engine.

One run per size, each in a fresh scratch database (``engine_bench_erp``):

1. **Seed** with :func:`flows.tools.seed.seed`: the documents the stores
   produce in a month (sales invoices of daily takings, credit notes,
   purchase invoices, transfers, a stock count) and no stock moves; then
   ``VACUUM ANALYZE`` the ERP tables (as autovacuum would have done by month
   end), so neither the engine nor the floor pays for first-touch hint bits.
2. Start ``BENCH_ERP_WORKERS`` (2) processes of ``python -m engine worker
   --concurrency 1`` with the default flow modules (every module of ``flows/``;
   ``ENGINE_FLOW_MODULES`` is removed from their environment) and wait until
   each has logged its start, so process start-up is not timed.
3. **Posting**: submit ``posting --period P``; it writes every document's
   journal and its stock moves (~1M at full size). The time is from just
   before the submit to the poll of ``engine_jobs`` that sees the job finished
   (polls every 50 ms; the database's own created -> finished span beside it).
   Rates: documents, document lines and stock moves written per second.
   Posting is its own job, not the close's child, so that the moves it wrote
   can be ``VACUUM ANALYZE``d before costing reads them (``BENCH_ERP_VACUUM``;
   a worker cannot, and autovacuum may or may not have come by in a real
   close): costing and the floors below then read the same, settled tables.
4. **Close**: submit ``close --period P``: its posting child finds nothing left
   to post, its costing child (steps ``check_period``, ``solve``, ``cost_store``
   per store, ``mark_costed``, ``summarize``) costs the period, then the books
   are checked and the period closed. ``costing_s`` is the costing child's
   created -> finished span (database clock); the solve step's time is its
   claim -> finish; each child's steps are reported from ``engine_step_runs``.
   Items moving between stores and their loops come from ``erp_average_solves``.
5. **Floors** (full size only; ``bench/erp_floor.sql``), each on one
   connection in one transaction with JIT off, as the costing step runs:
   ``old_one_statement`` is today's method before the exact solve (transfers at
   the sender's opening average, one statement for every store) into a scratch
   table: the fixed floor of the performance goal, costing within 1.5x of it;
   ``per_store_loop`` is the current ``item_costs_insert_for_store`` block of
   ``flows/erp/sql/costing.sql``, once per store with the averages the close
   solved, compared row for row with what the engine wrote.
6. **Memory**: each worker's ``VmHWM`` (peak resident set) from
   ``/proc/<pid>/status``: at start, after posting and after the close. The
   month end is first run at a smaller size (``BENCH_ERP_SMALL_ITEMS``, half
   by default) and the peaks after the close compared: a flat footprint stays
   near 1.0x while the stock moves grow.

Sizes (environment): ``BENCH_ERP_STORES`` 50, ``BENCH_ERP_BRANDS`` 4,
``BENCH_ERP_EMPLOYEES`` 500, ``BENCH_ERP_ITEMS`` 2000 (per brand; ~1M stock
moves at 50 stores; 20000 for the goal's 10x), ``BENCH_ERP_PERIOD`` 2026-11,
``BENCH_ERP_SEED`` 1, ``BENCH_ERP_WORKERS`` 2, ``BENCH_ERP_HALF`` 1 (0 skips the
smaller run), ``BENCH_ERP_SMALL_ITEMS`` (default ``BENCH_ERP_ITEMS // 2``),
``BENCH_ERP_VACUUM`` 1 (0 leaves the posted moves to autovacuum),
``BENCH_ERP_TIMEOUT_S`` 900 (bound on one job; a figure is reported as null,
never failed, on time).
"""

from __future__ import annotations

import os
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.common import (
    ROOT,
    Workers,
    emit,
    env_float,
    env_int,
    log,
    masked,
    server_conninfo,
    settings_for,
)
from engine import load_queries, submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.store import migrations
from flows.tools.seed import SeedReport, seed

# its own scratch database: ``engine_bench`` (the runtime parts) may be in use by
# another run on the same server, and a drop WITH (FORCE) would cut it off
SCRATCH_DB = "engine_bench_erp"
COSTING_SQL = ROOT / "flows" / "erp" / "sql" / "costing.sql"
COSTING_BLOCK = "item_costs_insert_for_store"
FLOOR_SQL = Path(__file__).with_name("erp_floor.sql")
FLOOR_TABLE = "floor_item_costs"
FLOOR_OLD_TABLE = "floor_old_item_costs"
GOAL_COSTING_OVER_FLOOR = 1.5
SEEDED_TABLES = (
    "erp_brands",
    "erp_stores",
    "erp_employees",
    "erp_items",
    "erp_periods",
    "erp_opening_balances",
    "erp_documents",
    "erp_document_lines",
)
# what posting wrote (and the documents it marked)
POSTED_TABLES = ("erp_stock_moves", "erp_documents", "erp_journals", "erp_journal_lines")

JOB = """
SELECT status,
       extract(epoch FROM finished_at - created_at)::float8 AS db_s
FROM engine_jobs WHERE id = %s
"""

# the child jobs of a job (the close's posting and costing), their span on the db clock
CHILDREN = """
SELECT id, flow, child_key, status,
       extract(epoch FROM finished_at - created_at)::float8 AS db_s
FROM engine_jobs WHERE parent_job_id = %s ORDER BY created_at
"""

# per step of the job: how many step runs, their claim -> finish time summed and
# the largest, and when the first was claimed / the last finished (job-relative)
STEPS = """
SELECT s.step, count(*)::int,
       sum(extract(epoch FROM s.finished_at - s.claimed_at))::float8,
       max(extract(epoch FROM s.finished_at - s.claimed_at))::float8,
       extract(epoch FROM min(s.claimed_at) - j.created_at)::float8,
       extract(epoch FROM max(s.finished_at) - j.created_at)::float8,
       max(s.attempts)::int
FROM engine_step_runs AS s JOIN engine_jobs AS j ON j.id = s.job_id
WHERE s.job_id = %s
GROUP BY s.step, j.created_at
ORDER BY min(s.claimed_at)
"""

JOB_ERRORS = """
SELECT step, fanout_key, status, error::text FROM engine_step_runs
WHERE job_id = %s AND error IS NOT NULL ORDER BY created_at LIMIT 5
"""

STOCK_MOVES = "SELECT count(*)::int FROM erp_stock_moves WHERE period = %s"

UNPOSTED = """
SELECT count(DISTINCT d.id)::int, count(l.document_id)::int
FROM erp_documents AS d LEFT JOIN erp_document_lines AS l ON l.document_id = d.id
WHERE d.period = %s AND d.status = 'unposted'
"""

POSTED = """
SELECT count(*) FILTER (WHERE status = 'posted')::int,
       count(*) FILTER (WHERE status = 'rejected')::int
FROM erp_documents WHERE period = %s
"""

SOLVES = "SELECT items, loops FROM erp_average_solves WHERE period = %s"

# did autovacuum analyze the posted moves before the bench did (how a real close finds them)
AUTOANALYZED = """
SELECT last_autoanalyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'erp_stock_moves'
"""

STORES = "SELECT id FROM erp_stores ORDER BY id"

# rows of one table not in the other, both ways (the same costing, to the cent)
DIFF = """
SELECT (SELECT count(*) FROM (SELECT * FROM erp_item_costs WHERE period = %(period)s
                              EXCEPT ALL SELECT * FROM {floor}) AS a)
     + (SELECT count(*) FROM (SELECT * FROM {floor} EXCEPT ALL
                              SELECT * FROM erp_item_costs WHERE period = %(period)s) AS b)
"""


@dataclass(frozen=True)
class Sizes:
    stores: int
    brands: int
    employees: int
    items: int
    period: str
    seed: int

    @classmethod
    def from_env(cls) -> Sizes:
        return cls(
            stores=env_int("BENCH_ERP_STORES", 50),
            brands=env_int("BENCH_ERP_BRANDS", 4),
            employees=env_int("BENCH_ERP_EMPLOYEES", 500),
            items=env_int("BENCH_ERP_ITEMS", 2000),
            period=os.environ.get("BENCH_ERP_PERIOD") or "2026-11",
            seed=env_int("BENCH_ERP_SEED", 1),
        )


Step = tuple[Any, ...]


@dataclass
class JobResult:
    job_id: Any
    status: str | None
    wall_s: float | None
    db_s: float | None
    steps: list[Step] = field(default_factory=list)


@dataclass
class SizeResult:
    """What one size's run is compared on: its stock moves and the workers' peaks."""

    items: int
    moves: int | None = None
    peak_after_posting: float | None = None
    peak_after_close: float | None = None


# -- worker processes ------------------------------------------------------------------


class FlowWorkers(Workers):
    """:class:`~bench.common.Workers`, but with the engine's default flow modules.

    ``Workers`` always sets ``ENGINE_FLOW_MODULES``; here it is removed from the
    workers' environment, so they load every module of ``flows/`` as in
    production (costing, posting, close, ...).
    """

    def __init__(self, info: str, *, count: int) -> None:
        super().__init__(info, count=count, concurrency=1, modules="")

    def env(self) -> dict[str, str]:
        # the default flow modules (flows.*), and reports rendered as in production
        env = super().env()
        env.pop("ENGINE_FLOW_MODULES", None)
        env.pop("ENGINE_REPORT_ON_END", None)
        return env

    def wait_started(self, timeout_s: float = 60.0) -> bool:
        """Until every worker has logged ``worker ... started``; False on timeout or exit."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.exited():
                return False
            texts = [p.read_text(errors="replace") if p.exists() else "" for p in self.logs]
            # the CLI prints "worker <id>: N slot(s), ..." once its flows are loaded,
            # just before the receive loop starts (whose "started" is logged at INFO)
            if all(re.search(r"^worker \S+: \d+ slot", t, re.MULTILINE) for t in texts):
                time.sleep(1.0)  # its slots connect and start receiving
                return True
            time.sleep(0.1)
        return False

    def peak_rss_mb(self) -> float | None:
        """The largest VmHWM (peak resident set) of the live workers, in MiB."""
        peaks = [kb for p in self.procs if p.poll() is None and (kb := _vm_hwm_kb(p.pid))]
        return max(peaks) / 1024 if peaks else None


def _vm_hwm_kb(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        pass
    else:
        if found := re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE):
            return int(found[1])
    try:
        import psutil  # type: ignore[import-untyped]

        return int(psutil.Process(pid).memory_info().rss // 1024)  # current, not peak
    except Exception:
        return None


# -- the scratch database (as bench.common, under another name) -----------------------


def _admin_conninfo() -> str:
    base = server_conninfo()
    if conninfo_to_dict(base).get("dbname") == SCRATCH_DB:
        return make_conninfo(base, dbname="postgres")
    return base


def fresh_database(name: str) -> str:
    """Drop and re-create the database ``name``, migrated; its connection string."""
    with psycopg.connect(_admin_conninfo(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    info = make_conninfo(server_conninfo(), dbname=name)
    with psycopg.connect(info, autocommit=True) as conn:
        migrations.apply(conn, Settings().migration_dirs)
    return info


def drop_database(name: str) -> None:
    with psycopg.connect(_admin_conninfo(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def vacuum_analyze(conn: psycopg.Connection[Any], tables: tuple[str, ...]) -> float:
    """``VACUUM (ANALYZE)`` of ``tables``; its seconds."""
    started = time.perf_counter()
    conn.execute(
        sql.SQL("VACUUM (ANALYZE) {}").format(sql.SQL(", ").join(sql.Identifier(t) for t in tables))
    )
    return time.perf_counter() - started


def scalar(conn: psycopg.Connection[Any], query: str | sql.Composed, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    return row[0] if row else None


# -- phases ----------------------------------------------------------------------------


def seed_month(info: str, sizes: Sizes, items: int, bench: str) -> SeedReport:
    """Seed the month's documents, VACUUM ANALYZE; what the seed wrote."""
    log(
        f"{bench}: seeding {sizes.stores} stores, {sizes.brands} brands, "
        f"{sizes.employees} employees, {items} items per brand ..."
    )
    with psycopg.connect(info, autocommit=True) as conn:
        started = time.perf_counter()
        report = seed(
            conn,
            stores=sizes.stores,
            brands=sizes.brands,
            employees=sizes.employees,
            items=items,
            period=sizes.period,
            seed=sizes.seed,
        )
        seeded = time.perf_counter() - started
        vacuumed = vacuum_analyze(conn, SEEDED_TABLES)
    rows = sum(report.table_counts().values())
    emit(bench, "seed_s", seeded, "s")
    emit(bench, "seed_rows", rows, "rows")
    emit(bench, "seed_rows_per_s", rows / seeded, "rows/s")
    emit(bench, "seed_items", report.items, "items")
    emit(bench, "seed_documents", report.documents, "rows")
    for kind, n in report.documents_by_kind.items():
        emit(bench, f"seed_documents_{kind}", n, "rows")
    emit(bench, "seed_document_lines", report.document_lines, "rows")
    emit(bench, "seed_stock_moves_to_post", report.stock_moves, "rows")
    emit(bench, "seed_loop_items", report.loop_items, "items")
    emit(bench, "seed_loop_items_share", report.loop_items / report.items, "fraction")
    emit(bench, "seed_new_stores", len(report.new_stores), "stores")
    emit(bench, "vacuum_analyze_s", vacuumed, "s")
    docs = ", ".join(f"{k} {v}" for k, v in report.documents_by_kind.items())
    log(
        f"{bench}: seeded {rows} rows in {seeded:.1f} s ({report.documents} documents: {docs}; "
        f"{report.document_lines} lines; {report.stock_moves} stock moves to post; "
        f"{report.loop_items} of {report.items} items move in loops; "
        f"{len(report.new_stores)} new stores; bad documents {report.bad_documents}); "
        f"VACUUM ANALYZE {vacuumed:.1f} s"
    )
    return report


@cache
def registry() -> Registry:
    return Registry.load(["flows.posting", "flows.costing", "flows.close"])


def run_job(
    conn: psycopg.Connection[Any],
    info: str,
    workers: FlowWorkers,
    flow: str,
    period: str,
    timeout_s: float,
    bench: str,
) -> JobResult:
    """Submit ``flow --period`` and poll ``engine_jobs`` until it finishes (or time runs out)."""
    log(f"{bench}: {flow} --period {period} ...")
    started = time.perf_counter()
    job = submit(registry().get(flow), {"period": period}, settings=settings_for(info))
    deadline = time.monotonic() + timeout_s
    status: str | None = None
    wall: float | None = None
    while True:
        status = scalar(conn, JOB, (job.job_id,))
        if status in ("done", "failed", "cancelled"):
            wall = time.perf_counter() - started
            break
        if time.monotonic() > deadline:
            log(f"{bench}: {flow} not finished after {timeout_s:g} s (status {status})")
            break
        if crashed := workers.exited():
            log(f"{bench}: worker(s) {[p.pid for p in crashed]} exited early")
            workers.show_logs()
            break
        time.sleep(0.05)
    row = conn.execute(JOB, (job.job_id,)).fetchone()
    result = JobResult(job.job_id, status, wall, row[1] if row else None)
    result.steps = job_steps(conn, result, flow, bench)
    if status != "done":
        if status in ("failed", "cancelled"):
            workers.show_logs()
        result.wall_s = None
    return result


def job_steps(conn: psycopg.Connection[Any], job: JobResult, flow: str, bench: str) -> list[Step]:
    """The job's steps from ``engine_step_runs``, logged; its errors logged if it failed."""
    if job.status != "done":
        for step, key, st, error in conn.execute(JOB_ERRORS, (job.job_id,)).fetchall():
            log(f"{bench}: {flow} step {step}[{key}] {st}: {error[:500]}")
    steps = conn.execute(STEPS, (job.job_id,)).fetchall()
    for step, runs, total, longest, first, last, attempts in steps:
        log(
            f"  {flow}.{step}: {runs} run(s), claim->finish sum {total or 0:.2f} s, "
            f"max {longest or 0:.3f} s; first claim at +{first or 0:.2f} s, "
            f"last finish at +{last or 0:.2f} s; max attempts {attempts}"
        )
    return steps


def children(conn: psycopg.Connection[Any], parent: JobResult, bench: str) -> dict[str, JobResult]:
    """The child jobs of ``parent`` by key (the close's ``posting`` and ``costing``)."""
    found: dict[str, JobResult] = {}
    for job_id, flow, key, status, db_s in conn.execute(CHILDREN, (parent.job_id,)).fetchall():
        log(f"  child {key} ({flow} {job_id}): {status}, created -> finished {db_s or 0:.2f} s")
        child = JobResult(job_id, status, db_s if status == "done" else None, db_s)
        child.steps = job_steps(conn, child, f"{flow} (child)", bench)
        found[key] = child
    return found


def emit_steps(bench: str, flow: str, result: JobResult) -> None:
    for step, runs, total, longest, _, _, _ in result.steps:
        emit(bench, f"{flow}_step_{step}_runs", runs, "step runs")
        emit(bench, f"{flow}_step_{step}_sum_s", total, "s")
        if runs > 1:
            emit(bench, f"{flow}_step_{step}_max_s", longest, "s")


def step_seconds(result: JobResult, name: str) -> float | None:
    """The claim -> finish seconds of step ``name``, summed over its runs."""
    return next((s[2] for s in result.steps if s[0] == name), None)


def post_month(
    conn: psycopg.Connection[Any],
    info: str,
    workers: FlowWorkers,
    sizes: Sizes,
    timeout_s: float,
    bench: str,
) -> int | None:
    """Post the period's documents (journals and stock moves); the moves written."""
    documents, lines = conn.execute(UNPOSTED, (sizes.period,)).fetchone()  # type: ignore[misc]
    posting = run_job(conn, info, workers, "posting", sizes.period, timeout_s, bench)
    posted, rejected = conn.execute(POSTED, (sizes.period,)).fetchone()  # type: ignore[misc]
    moves: int = scalar(conn, STOCK_MOVES, (sizes.period,))
    wall = posting.wall_s
    emit(bench, "posting_s", wall, "s")
    emit(bench, "posting_job_db_s", posting.db_s, "s")
    emit(bench, "posting_documents", documents, "rows")
    emit(bench, "posting_document_lines", lines, "rows")
    emit(bench, "posting_posted", posted, "rows")
    emit(bench, "posting_rejected", rejected, "rows")
    emit(bench, "posting_stock_moves_written", moves, "rows")
    emit(bench, "posting_documents_per_s", documents / wall if wall else None, "docs/s")
    emit(bench, "posting_document_lines_per_s", lines / wall if wall else None, "lines/s")
    emit(bench, "posting_stock_moves_per_s", moves / wall if wall else None, "moves/s")
    emit_steps(bench, "posting", posting)
    if wall:
        log(
            f"{bench}: posting {documents} documents ({lines} lines) in {wall:.2f} s "
            f"= {documents / wall:.0f} documents/s, {lines / wall:.0f} lines/s; "
            f"{moves} stock moves written ({moves / wall:.0f}/s); "
            f"posted {posted}, rejected {rejected} (goal: >= 20000 lines/s)"
        )
    return moves if posting.status == "done" else None


def close_month(
    conn: psycopg.Connection[Any],
    info: str,
    workers: FlowWorkers,
    sizes: Sizes,
    moves: int,
    total: int,
    timeout_s: float,
    bench: str,
) -> JobResult | None:
    """The close job (posting child, costing child, checks, close); the costing child.

    ``total`` is the number of items, for the share of them that move between stores.
    """
    close = run_job(conn, info, workers, "close", sizes.period, timeout_s, bench)
    emit(bench, "close_s", close.wall_s, "s")
    emit(bench, "close_done", int(close.status == "done"), "bool")
    emit(bench, "close_job_db_s", close.db_s, "s")
    emit_steps(bench, "close", close)
    kids = children(conn, close, bench)
    for key, child in kids.items():
        emit(bench, f"close_child_{key}_s", child.db_s, "s")
    costing = kids.get("costing")
    if costing is None:
        log(f"{bench}: the close ran no costing child (status {close.status})")
        return None
    if "posting" in kids:
        emit_steps(bench, "close_child_posting", kids["posting"])
    emit_steps(bench, "costing", costing)
    wall = costing.wall_s
    solve = step_seconds(costing, "solve")
    emit(bench, "costing_s", wall, "s")
    emit(bench, "costing_solve_s", solve, "s")
    emit(bench, "costing_stock_moves", moves, "rows")
    emit(bench, "costing_stock_moves_per_s", moves / wall if wall else None, "moves/s")
    if solved := conn.execute(SOLVES, (sizes.period,)).fetchone():
        items, loops = solved
        emit(bench, "costing_moving_items", items, "items")
        emit(bench, "costing_moving_items_share", items / total, "fraction")
        emit(bench, "costing_loops", loops, "loops")
        log(
            f"{bench}: {items} of {total} items move between stores "
            f"({items / total:.1%}); {loops} loops (erp_average_solves)"
        )
    if wall:
        log(
            f"{bench}: costing {moves} stock moves in {wall:.2f} s = {moves / wall:.0f} moves/s "
            f"(solve {solve or 0:.2f} s)"
        )
    ended = f"in {close.wall_s:.2f} s" if close.wall_s else f"{close.status} (see above)"
    log(f"{bench}: the close ended {ended}")
    return costing


def run_floors(
    conn: psycopg.Connection[Any], period: str, moves: int, *, per_store: bool, bench: str
) -> dict[str, float]:
    """The plain-SQL floors of costing: the old one statement, the current per-store loop."""
    costing = load_queries(str(COSTING_SQL))
    floor = load_queries(str(FLOOR_SQL))
    times: dict[str, float] = {}
    stores = [r[0] for r in conn.execute(STORES).fetchall()]

    def timed(name: str, run: Callable[[], object]) -> float:
        started = time.perf_counter()
        with conn.transaction():
            conn.execute(costing["jit_off_for_transaction"])  # as the costing step does
            run()
        elapsed = times[name] = time.perf_counter() - started
        emit(bench, f"floor_{name}_s", elapsed, "s")
        emit(bench, f"floor_{name}_stock_moves_per_s", moves / elapsed, "moves/s")
        return elapsed

    params = {"period": period}
    conn.execute(f"DROP TABLE IF EXISTS {FLOOR_OLD_TABLE}")
    conn.execute(floor["floor_old_item_costs_create"])
    elapsed = timed(
        "old_one_statement", lambda: conn.execute(floor["floor_old_item_costs_insert"], params)
    )
    rows, unmatched, average_differs, closing_differs = conn.execute(  # type: ignore[misc]
        floor["floor_old_item_costs_compare"], params
    ).fetchone()
    emit(bench, "floor_old_one_statement_rows", rows, "rows")
    emit(bench, "floor_old_one_statement_rows_unmatched", unmatched, "rows")
    emit(bench, "floor_old_one_statement_average_differs", average_differs, "rows")
    log(
        f"{bench}: floor old_one_statement (transfers at the sender's opening average): "
        f"{rows} item costs in {elapsed:.2f} s ({moves / elapsed:.0f} moves/s); "
        f"rows on one side only {unmatched}; average changed by the exact solve "
        f"{average_differs}, closing value {closing_differs}"
    )
    conn.execute(f"DROP TABLE {FLOOR_OLD_TABLE}")

    block = costing[COSTING_BLOCK]
    target = "INSERT INTO erp_item_costs"
    if not per_store:
        return times
    if block.count(target) != 1:
        log(f"floor per_store_loop skipped: {COSTING_BLOCK} has not {target!r} exactly once")
        return times
    text = block.replace(target, f"INSERT INTO {FLOOR_TABLE}")
    conn.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
    conn.execute(f"CREATE TABLE {FLOOR_TABLE} (LIKE erp_item_costs INCLUDING ALL)")

    def loop() -> None:
        for store in stores:
            conn.execute(text, {"period": period, "store_id": store})

    elapsed = timed("per_store_loop", loop)
    rows = scalar(conn, f"SELECT count(*)::int FROM {FLOOR_TABLE}")
    diff = sql.SQL(DIFF).format(floor=sql.Identifier(FLOOR_TABLE))
    differs = scalar(conn, diff, params)
    emit(bench, "floor_per_store_loop_rows_differing_from_engine", differs, "rows")
    log(
        f"{bench}: floor per_store_loop (current block, solved averages): {rows} item costs "
        f"in {elapsed:.2f} s ({moves / elapsed:.0f} moves/s); "
        f"rows differing from the engine's: {differs}"
    )
    conn.execute(f"DROP TABLE {FLOOR_TABLE}")
    return times


def run(
    sizes: Sizes, items: int, *, full: bool, workers_n: int, timeout_s: float, vacuum: bool
) -> SizeResult:
    """One size: seed, post, close (and at full size the floors); what memory is compared on."""
    bench = f"erp/items={items}"
    result = SizeResult(items)
    info = fresh_database(SCRATCH_DB)
    log(f"{bench}: scratch database {masked(info)}")
    report = seed_month(info, sizes, items, bench)
    workers = FlowWorkers(info, count=workers_n)
    with psycopg.connect(info, autocommit=True) as conn, workers:
        if not workers.wait_started():
            log(f"{bench}: workers did not start")
            workers.show_logs()
            return result
        emit(bench, "worker_rss_at_start", workers.peak_rss_mb(), "MiB")

        moves = result.moves = post_month(conn, info, workers, sizes, timeout_s, bench)
        result.peak_after_posting = workers.peak_rss_mb()
        emit(bench, "worker_peak_rss_after_posting", result.peak_after_posting, "MiB")
        if moves is None:
            return result
        autoanalyzed = bool(scalar(conn, AUTOANALYZED))
        emit(bench, "stock_moves_autoanalyzed_before_close", int(autoanalyzed), "bool")
        if vacuum:
            vacuumed = vacuum_analyze(conn, POSTED_TABLES)
            emit(bench, "vacuum_analyze_after_posting_s", vacuumed, "s")
            log(
                f"{bench}: VACUUM ANALYZE of the posted tables {vacuumed:.1f} s "
                f"(autovacuum had analyzed the moves already: {autoanalyzed})"
            )

        costing = close_month(conn, info, workers, sizes, moves, report.items, timeout_s, bench)
        result.peak_after_close = workers.peak_rss_mb()
        emit(bench, "worker_peak_rss_after_close", result.peak_after_close, "MiB")
        log(
            f"{bench}: worker peak RSS {result.peak_after_posting or 0:.0f} MiB after posting, "
            f"{result.peak_after_close or 0:.0f} MiB after the close"
        )

        if full:
            if not vacuum:  # the floors' plans: with or without the moves' statistics
                analyzed = int(bool(scalar(conn, AUTOANALYZED)))
                emit(bench, "stock_moves_autoanalyzed_before_floors", analyzed, "bool")
            floors = run_floors(
                conn, sizes.period, moves, per_store=costing is not None, bench=bench
            )
            wall = costing.wall_s if costing else None
            for name, seconds in floors.items():
                emit(bench, f"costing_over_floor_{name}", wall / seconds if wall else None, "x")
            if wall and (old := floors.get("old_one_statement")):
                verdict = "within" if wall / old <= GOAL_COSTING_OVER_FLOOR else "NOT within"
                log(
                    f"{bench}: costing {wall:.2f} s / old one-statement floor {old:.2f} s = "
                    f"{wall / old:.2f}x: {verdict} the goal's {GOAL_COSTING_OVER_FLOOR}x"
                )
    return result


def run_all() -> None:
    sizes = Sizes.from_env()
    workers_n = env_int("BENCH_ERP_WORKERS", 2)
    timeout_s = env_float("BENCH_ERP_TIMEOUT_S", 900)
    small_items = env_int("BENCH_ERP_SMALL_ITEMS", sizes.items // 2)
    if not env_int("BENCH_ERP_HALF", 1):
        small_items = 0
    vacuum = env_int("BENCH_ERP_VACUUM", 1) > 0
    for name, value in (
        ("stores", sizes.stores),
        ("brands", sizes.brands),
        ("employees", sizes.employees),
        ("items_per_brand", sizes.items),
        ("small_items_per_brand", small_items),
        ("workers", workers_n),
    ):
        emit("erp/config", name, value, name)
    small: SizeResult | None = None
    try:
        if 0 < small_items < sizes.items:
            small = _guarded(
                small_items,
                lambda: run(
                    sizes,
                    small_items,
                    full=False,
                    workers_n=workers_n,
                    timeout_s=timeout_s,
                    vacuum=vacuum,
                ),
            )
        full = _guarded(
            sizes.items,
            lambda: run(
                sizes,
                sizes.items,
                full=True,
                workers_n=workers_n,
                timeout_s=timeout_s,
                vacuum=vacuum,
            ),
        )
    finally:
        try:
            drop_database(SCRATCH_DB)
        except Exception as exc:
            log(f"could not drop the scratch database {SCRATCH_DB}: {exc}")
    if small and full and small.peak_after_close and full.peak_after_close:
        # more items, more stock moves: a flat footprint stays near 1.0x
        ratio = full.peak_after_close / small.peak_after_close
        moves = full.moves / small.moves if full.moves and small.moves else None
        emit("erp/memory", "worker_peak_rss_after_close_full_over_small", ratio, "x")
        emit("erp/memory", "stock_moves_full_over_small", moves, "x")
        log(
            f"worker peak RSS after the close: {small.peak_after_close:.0f} MiB at "
            f"{small.items} items, {full.peak_after_close:.0f} MiB at {full.items} items "
            f"({ratio:.2f}x for {moves or 0:.1f}x the stock moves)"
        )


def _guarded(items: int, size_run: Callable[[], SizeResult]) -> SizeResult | None:
    """One size's run; an error is logged (with its traceback) and the next size still runs."""
    try:
        return size_run()
    except Exception:
        log(f"erp/items={items}: the run failed:\n{traceback.format_exc()}")
        emit(f"erp/items={items}", "error", 1, "errors")
        return None
