"""The ERP month end: seed a real-size month, cost it and post it through the engine.

One run per size, each in a fresh scratch database (``engine_bench_erp``):

1. **Seed** with :func:`flows.tools.seed.seed` (one transaction, COPY), then
   ``VACUUM ANALYZE`` the ERP tables (as autovacuum would have done by month
   end), so neither the engine nor the floor pays for first-touch hint bits.
2. Start ``BENCH_ERP_WORKERS`` (2) processes of ``python -m engine worker
   --concurrency 1`` with the default flow modules (every module of ``flows/``;
   ``ENGINE_FLOW_MODULES`` is removed from their environment) and wait until
   each has logged its start, so process start-up is not timed.
3. **Costing**: submit ``costing --period P``; the time is from just before the
   submit to the poll of ``engine_jobs`` that sees the job finished (polls every
   50 ms; the database's own created -> finished span is reported beside it).
   Rate: stock moves of the period per second.
4. **Floor** (full size only): the SQL of the ``item_costs_insert_for_store``
   block of ``flows/erp/sql/costing.sql`` (read with ``engine.load_queries``),
   retargeted at ``floor_item_costs`` (``LIKE erp_item_costs INCLUDING ALL``,
   so no foreign keys), run on one connection in one transaction with JIT
   off, as the costing step runs it:
   ``per_store_loop`` executes it once per store; ``one_statement`` is the same
   text with the store filter removed and the store added to every grouping and
   join key (derived from the block by exact replacements; skipped with a
   message if the block no longer has the expected shape). Both results are
   compared to what the engine wrote in ``erp_item_costs``.
5. **Posting** (full size only): submit ``posting --period P``; rates are the
   period's unposted documents and their lines per second.
6. **Memory**: each worker's ``VmHWM`` (peak resident set) from
   ``/proc/<pid>/status``, read after costing and at the end, before SIGTERM.

Sizes (environment): ``BENCH_ERP_STORES`` 50, ``BENCH_ERP_BRANDS`` 4,
``BENCH_ERP_EMPLOYEES`` 500, ``BENCH_ERP_ITEMS`` 2000 (per brand),
``BENCH_ERP_DOCUMENTS`` 100000, ``BENCH_ERP_PERIOD`` 2026-11, ``BENCH_ERP_SEED``
1, ``BENCH_ERP_WORKERS`` 2, ``BENCH_ERP_HALF`` 1 (also run at half the items,
costing only, for the memory comparison; 0 skips it), ``BENCH_ERP_TIMEOUT_S``
900 (bound on one job; a figure is reported as null, never failed, on time).
"""

from __future__ import annotations

import os
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
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
from flows.tools.seed import seed

# its own scratch database: ``engine_bench`` (the runtime parts) may be in use by
# another run on the same server, and a drop WITH (FORCE) would cut it off
SCRATCH_DB = "engine_bench_erp"
COSTING_SQL = ROOT / "flows" / "erp" / "sql" / "costing.sql"
COSTING_BLOCK = "item_costs_insert_for_store"
FLOOR_TABLE = "floor_item_costs"
ERP_TABLES = (
    "erp_brands",
    "erp_stores",
    "erp_employees",
    "erp_items",
    "erp_periods",
    "erp_opening_balances",
    "erp_stock_moves",
    "erp_documents",
    "erp_document_lines",
)

JOB = """
SELECT status,
       extract(epoch FROM finished_at - created_at)::float8 AS db_s
FROM engine_jobs WHERE id = %s
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

STORES = "SELECT id FROM erp_stores ORDER BY id"

# rows of one table not in the other, both ways (the same costing, to the cent)
DIFF = """
SELECT (SELECT count(*) FROM (SELECT * FROM erp_item_costs WHERE period = %(period)s
                              EXCEPT ALL SELECT * FROM {floor}) AS a)
     + (SELECT count(*) FROM (SELECT * FROM {floor} EXCEPT ALL
                              SELECT * FROM erp_item_costs WHERE period = %(period)s) AS b)
"""

# the per-store block -> one statement for every store (whitespace-normalised
# text, comments removed); each pattern must occur exactly once
ALL_STORES_EDITS = (
    ("SELECT m.item_id,", "SELECT m.store_id, m.item_id,"),
    (
        "WHERE m.period = %(period)s AND m.store_id = %(store_id)s GROUP BY m.item_id",
        "WHERE m.period = %(period)s GROUP BY m.store_id, m.item_id",
    ),
    (
        "SELECT item_id, qty, value FROM erp_opening_balances "
        "WHERE period = %(period)s AND store_id = %(store_id)s",
        "SELECT store_id, item_id, qty, value FROM erp_opening_balances WHERE period = %(period)s",
    ),
    (
        "SELECT i.id AS item_id, i.standard_cost,",
        "SELECT k.store_id, i.id AS item_id, i.standard_cost,",
    ),
    (
        "(SELECT item_id FROM opening UNION SELECT item_id FROM moves)",
        "(SELECT store_id, item_id FROM opening UNION SELECT store_id, item_id FROM moves)",
    ),
    (
        "LEFT JOIN opening AS o ON o.item_id = k.item_id",
        "LEFT JOIN opening AS o ON o.store_id = k.store_id AND o.item_id = k.item_id",
    ),
    (
        "LEFT JOIN moves AS mv ON mv.item_id = k.item_id",
        "LEFT JOIN moves AS mv ON mv.store_id = k.store_id AND mv.item_id = k.item_id",
    ),
    ("SELECT %(period)s, %(store_id)s, item_id,", "SELECT %(period)s, store_id, item_id,"),
)


@dataclass(frozen=True)
class Sizes:
    stores: int
    brands: int
    employees: int
    items: int
    documents: int
    period: str
    seed: int

    @classmethod
    def from_env(cls) -> Sizes:
        return cls(
            stores=env_int("BENCH_ERP_STORES", 50),
            brands=env_int("BENCH_ERP_BRANDS", 4),
            employees=env_int("BENCH_ERP_EMPLOYEES", 500),
            items=env_int("BENCH_ERP_ITEMS", 2000),
            documents=env_int("BENCH_ERP_DOCUMENTS", 100_000),
            period=os.environ.get("BENCH_ERP_PERIOD") or "2026-11",
            seed=env_int("BENCH_ERP_SEED", 1),
        )


@dataclass
class JobResult:
    status: str | None
    wall_s: float | None
    db_s: float | None
    steps: list[tuple[Any, ...]] = field(default_factory=list)


# -- worker processes ------------------------------------------------------------------


class FlowWorkers(Workers):
    """:class:`~bench.common.Workers`, but with the engine's default flow modules.

    ``Workers`` always sets ``ENGINE_FLOW_MODULES``; here it is removed from the
    workers' environment, so they load every module of ``flows/`` as in
    production (costing, posting, ...).
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


# -- phases ----------------------------------------------------------------------------


def seed_month(info: str, sizes: Sizes, items: int, documents: int, bench: str) -> int:
    """Seed, VACUUM ANALYZE; the period's stock moves."""
    log(
        f"{bench}: seeding {sizes.stores} stores, {sizes.brands} brands, "
        f"{sizes.employees} employees, {items} items per brand, {documents} documents ..."
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
            documents=documents,
            seed=sizes.seed,
        )
        seeded = time.perf_counter() - started
        started = time.perf_counter()
        conn.execute(
            sql.SQL("VACUUM (ANALYZE) {}").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in ERP_TABLES)
            )
        )
        vacuumed = time.perf_counter() - started
    counts = report.table_counts()
    rows = sum(counts.values())
    emit(bench, "seed_s", seeded, "s")
    emit(bench, "seed_rows", rows, "rows")
    emit(bench, "seed_rows_per_s", rows / seeded, "rows/s")
    emit(bench, "seed_stock_moves", report.stock_moves, "rows")
    emit(bench, "seed_documents", report.documents, "rows")
    emit(bench, "seed_document_lines", report.document_lines, "rows")
    emit(bench, "vacuum_analyze_s", vacuumed, "s")
    log(
        f"{bench}: seeded {rows} rows in {seeded:.1f} s ({report.stock_moves} stock moves, "
        f"{report.documents} documents, {report.document_lines} document lines; "
        f"bad documents {report.bad_documents}); VACUUM ANALYZE {vacuumed:.1f} s"
    )
    return report.stock_moves


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
    registry = Registry.load(["flows.costing", "flows.posting"])
    log(f"{bench}: {flow} --period {period} ...")
    started = time.perf_counter()
    job = submit(registry.get(flow), {"period": period}, settings=settings_for(info))
    deadline = time.monotonic() + timeout_s
    status: str | None = None
    wall: float | None = None
    while True:
        row = conn.execute(JOB, (job.job_id,)).fetchone()
        status = row[0] if row else None
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
    db_s = row[1] if row else None
    steps = conn.execute(STEPS, (job.job_id,)).fetchall()
    if status != "done":
        for step, key, st, error in conn.execute(JOB_ERRORS, (job.job_id,)).fetchall():
            log(f"{bench}: {flow} step {step}[{key}] {st}: {error[:500]}")
        if status in ("failed", "cancelled"):
            workers.show_logs()
        wall = None
    for step, runs, total, longest, first, last, attempts in steps:
        log(
            f"  {flow}.{step}: {runs} run(s), claim->finish sum {total or 0:.2f} s, "
            f"max {longest or 0:.3f} s; first claim at +{first or 0:.2f} s, "
            f"last finish at +{last or 0:.2f} s; max attempts {attempts}"
        )
    return JobResult(status, wall, db_s, steps)


def emit_steps(bench: str, flow: str, result: JobResult) -> None:
    for step, runs, total, longest, _, _, _ in result.steps:
        emit(bench, f"{flow}_step_{step}_runs", runs, "step runs")
        emit(bench, f"{flow}_step_{step}_sum_s", total, "s")
        if runs > 1:
            emit(bench, f"{flow}_step_{step}_max_s", longest, "s")


def all_stores_sql(block: str) -> str | None:
    """The per-store block as one statement for every store; None if its shape changed."""
    text = " ".join(re.sub(r"--[^\n]*", "", block).split())
    for old, new in ALL_STORES_EDITS:
        if text.count(old) != 1:
            log(f"floor one_statement skipped: {old!r} is not in the costing block once")
            return None
        text = text.replace(old, new)
    if "%(store_id)s" in text:
        log("floor one_statement skipped: the block still filters on store_id")
        return None
    return text


def run_floor(
    conn: psycopg.Connection[Any], period: str, moves: int, bench: str
) -> dict[str, float]:
    """The plain-SQL floor of costing: per-store loop and one statement; their seconds."""
    block = load_queries(str(COSTING_SQL))[COSTING_BLOCK]
    target = "INSERT INTO erp_item_costs"
    if block.count(target) != 1:
        log(f"floor skipped: {COSTING_BLOCK} does not contain {target!r} exactly once")
        return {}
    per_store = block.replace(target, f"INSERT INTO {FLOOR_TABLE}")
    variants: dict[str, str | None] = {
        "per_store_loop": per_store,
        "one_statement": all_stores_sql(per_store),
    }
    conn.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
    conn.execute(f"CREATE TABLE {FLOOR_TABLE} (LIKE erp_item_costs INCLUDING ALL)")
    stores = [r[0] for r in conn.execute(STORES).fetchall()]
    diff = sql.SQL(DIFF).format(floor=sql.Identifier(FLOOR_TABLE))
    times: dict[str, float] = {}
    for name, text in variants.items():
        if text is None:
            continue
        conn.execute(f"TRUNCATE {FLOOR_TABLE}")
        started = time.perf_counter()
        with conn.transaction():
            # as the costing step does (see the block's comment)
            conn.execute(load_queries(str(COSTING_SQL))["jit_off_for_transaction"])
            if name == "per_store_loop":
                for store in stores:
                    conn.execute(text, {"period": period, "store_id": store})
            else:
                conn.execute(text, {"period": period})
        elapsed = times[name] = time.perf_counter() - started
        rows = conn.execute(f"SELECT count(*)::int FROM {FLOOR_TABLE}").fetchone()[0]  # type: ignore[index]
        differs = conn.execute(diff, {"period": period}).fetchone()[0]  # type: ignore[index]
        emit(bench, f"floor_{name}_s", elapsed, "s")
        emit(bench, f"floor_{name}_stock_moves_per_s", moves / elapsed, "moves/s")
        emit(bench, f"floor_{name}_rows_differing_from_engine", differs, "rows")
        log(
            f"{bench}: floor {name}: {rows} item costs in {elapsed:.2f} s "
            f"({moves / elapsed:.0f} moves/s); rows differing from the engine's: {differs}"
        )
    conn.execute(f"DROP TABLE {FLOOR_TABLE}")
    return times


def run(sizes: Sizes, items: int, *, full: bool, workers_n: int, timeout_s: float) -> float | None:
    """One size: seed, costing (and at full size the floor and posting).

    Returns the workers' peak RSS (MiB) after costing: the figure compared across sizes.
    """
    bench = f"erp/items={items}"
    # the half-size month has half the documents too (it only costs them; seed()
    # refuses fewer than five valid documents: HOSTILE_MEMOS are zipped strictly)
    documents = sizes.documents if full else sizes.documents // 2
    info = fresh_database(SCRATCH_DB)
    log(f"{bench}: scratch database {masked(info)}")
    moves = seed_month(info, sizes, items, documents, bench)
    after_costing: float | None = None
    with (
        psycopg.connect(info, autocommit=True) as conn,
        FlowWorkers(info, count=workers_n) as workers,
    ):
        if not workers.wait_started():
            log(f"{bench}: workers did not start")
            workers.show_logs()
            return None
        idle = workers.peak_rss_mb()
        emit(bench, "worker_rss_at_start", idle, "MiB")

        moves = conn.execute(STOCK_MOVES, (sizes.period,)).fetchone()[0]  # type: ignore[index]
        costing = run_job(conn, info, workers, "costing", sizes.period, timeout_s, bench)
        emit(bench, "costing_s", costing.wall_s, "s")
        emit(bench, "costing_job_db_s", costing.db_s, "s")
        emit(bench, "costing_stock_moves", moves, "rows")
        emit(
            bench,
            "costing_stock_moves_per_s",
            moves / costing.wall_s if costing.wall_s else None,
            "moves/s",
        )
        emit_steps(bench, "costing", costing)
        after_costing = workers.peak_rss_mb()
        emit(bench, "worker_peak_rss_after_costing", after_costing, "MiB")
        if costing.wall_s:
            log(
                f"{bench}: costing {moves} stock moves in {costing.wall_s:.2f} s "
                f"= {moves / costing.wall_s:.0f} moves/s; "
                f"worker peak RSS {after_costing or 0:.0f} MiB"
            )

        if full:
            floor = run_floor(conn, sizes.period, moves, bench)
            for name, seconds in floor.items():
                ratio = costing.wall_s / seconds if costing.wall_s and seconds else None
                emit(bench, f"costing_over_floor_{name}", ratio, "x")

            documents, lines = conn.execute(UNPOSTED, (sizes.period,)).fetchone()  # type: ignore[misc]
            posting = run_job(conn, info, workers, "posting", sizes.period, timeout_s, bench)
            posted, rejected = conn.execute(POSTED, (sizes.period,)).fetchone()  # type: ignore[misc]
            wall = posting.wall_s
            emit(bench, "posting_s", wall, "s")
            emit(bench, "posting_job_db_s", posting.db_s, "s")
            emit(bench, "posting_documents", documents, "rows")
            emit(bench, "posting_document_lines", lines, "rows")
            emit(bench, "posting_posted", posted, "rows")
            emit(bench, "posting_rejected", rejected, "rows")
            emit(bench, "posting_documents_per_s", documents / wall if wall else None, "docs/s")
            emit(bench, "posting_document_lines_per_s", lines / wall if wall else None, "lines/s")
            emit_steps(bench, "posting", posting)
            if wall:
                log(
                    f"{bench}: posting {documents} documents ({lines} lines) in {wall:.2f} s "
                    f"= {lines / wall:.0f} lines/s, {documents / wall:.0f} documents/s; "
                    f"posted {posted}, rejected {rejected} (goal: >= 20000 lines/s)"
                )
            peak = workers.peak_rss_mb()
            emit(bench, "worker_peak_rss", peak, "MiB")
            log(f"{bench}: worker peak RSS {peak or 0:.0f} MiB (costing and posting)")
    return after_costing


def run_all() -> None:
    sizes = Sizes.from_env()
    workers_n = env_int("BENCH_ERP_WORKERS", 2)
    timeout_s = env_float("BENCH_ERP_TIMEOUT_S", 900)
    half = env_int("BENCH_ERP_HALF", 1)
    for name, value in (
        ("stores", sizes.stores),
        ("brands", sizes.brands),
        ("employees", sizes.employees),
        ("items_per_brand", sizes.items),
        ("documents", sizes.documents),
        ("workers", workers_n),
    ):
        emit("erp/config", name, value, name)
    half_peak: float | None = None
    if half and sizes.items >= 2:
        half_items = sizes.items // 2
        half_peak = _guarded(
            half_items,
            lambda: run(sizes, half_items, full=False, workers_n=workers_n, timeout_s=timeout_s),
        )
    try:
        full_peak = _guarded(
            sizes.items,
            lambda: run(sizes, sizes.items, full=True, workers_n=workers_n, timeout_s=timeout_s),
        )
    finally:
        try:
            drop_database(SCRATCH_DB)
        except Exception as exc:
            log(f"could not drop the scratch database {SCRATCH_DB}: {exc}")
    if half_peak and full_peak:
        # double the items (and stock moves): a flat footprint stays near 1.0x
        ratio = full_peak / half_peak
        emit("erp/memory", "worker_peak_rss_after_costing_full_over_half", ratio, "x")
        log(
            f"worker peak RSS after costing: {half_peak:.0f} MiB at {sizes.items // 2} items, "
            f"{full_peak:.0f} MiB at {sizes.items} items ({ratio:.2f}x)"
        )


def _guarded(items: int, size_run: Callable[[], float | None]) -> float | None:
    """One size's run; an error is logged (with its traceback) and the next size still runs."""
    try:
        return size_run()
    except Exception:
        log(f"erp/items={items}: the run failed:\n{traceback.format_exc()}")
        emit(f"erp/items={items}", "error", 1, "errors")
        return None
