"""Searching runs (the console's runs page): p50 and p95 per kind of search on a big history.

Seeds a scratch database with set-based statements (``bench/runs_search.sql``):
jobs of a mix of flows, periods, stores and statuses (three per minute, so
pages cut through equal ``created_at``), step runs spread over them (a
costing's fan-out keyed by store code, a running job's last run running or
waiting for a signal), a few thousand document tags, and the tags of the
searchable parameters (period; a costing's store) as submit writes them; then ANALYZE, and times
``BENCH_RUNS_N`` calls of :func:`engine.jobs.search.search_runs` per kind: the
first page, a page halfway down through its cursor, by flow, by the derived
state ``waiting``, by period, by store, by document number (the ERP's search
fields, ``flows.tools.search``: a searchable parameter, a tag, a fan-out key),
by id prefix.
Each kind's plan is checked for a sequential scan of ``engine_jobs`` or
``engine_step_runs`` (reported, never failed). Figures are reported, never failed, on time.

    BENCH_RUNS_JOBS=100000     jobs
    BENCH_RUNS_STEPS=1000000   step runs
    BENCH_RUNS_TAGS=5000       document tags
    BENCH_RUNS_N=200           searches per kind
    BENCH_RUNS_DATABASE=engine_bench_runs  the scratch database (dropped at the end)
    BENCH_RUNS_KEEP=0          1: keep it, to look at the plans
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from bench.common import drop_database, emit, env_int, fresh_database, log
from engine import store
from engine.jobs.search import RunQuery, encode_cursor, search_filters, search_runs
from engine.store import queries
from flows.tools.search import search_fields

_q = queries.load(str(Path(__file__).with_name("runs_search.sql")))

KINDS = ("first_page", "deep_page", "flow", "waiting", "period", "store", "document", "id_prefix")


def _erp(**given: Any) -> RunQuery:
    """A query with the ERP's search fields (``flows.tools.search``: period, store, document)."""
    fields = {f.name: f for f in search_fields}
    matches = tuple(fields[k].match(given.pop(k)) for k in list(given) if k in fields)
    return RunQuery(**given, matches=matches)


def _form(query: RunQuery) -> dict[str, str]:
    """The console's form values of a query of :func:`_erp` (its fields by name)."""
    values = {k: str(getattr(query, k)) for k in ("text", "flow", "status", "before")}
    for m in query.matches:
        if m.keys:
            values["store"] = m.keys[0]
        elif m.params:
            values["period"] = m.params[0][1]
        else:
            values["document"] = m.tags[0][1]
    return {k: v for k, v in values.items() if v and v != "None"}


def seed(conn: psycopg.Connection[Any], jobs: int, steps: int, tags: int) -> None:
    """Jobs, step runs and tags, each in one statement; then ANALYZE."""
    sizes = {"jobs": jobs, "runs": steps, "tags": tags}
    for name in ("runs_seed_jobs", "runs_seed_step_runs", "runs_seed_tags", "runs_seed_params"):
        started = time.monotonic()
        count = conn.execute(_q[name], sizes).rowcount
        log(f"{name}: {count} rows in {time.monotonic() - started:.1f} s")
    conn.execute("VACUUM ANALYZE engine_jobs")
    conn.execute("VACUUM ANALYZE engine_step_runs")
    conn.execute("VACUUM ANALYZE engine_job_tags")


def queries_by_kind(conn: psycopg.Connection[Any], n: int) -> dict[str, list[RunQuery]]:
    """``n`` searches of each kind, over values drawn from the seeded rows."""
    with conn.cursor(row_factory=dict_row) as cur:
        sample = cur.execute(_q["runs_sample"]).fetchone()
    assert sample is not None
    rng = random.Random(7)
    ids: list[uuid.UUID] = sample["ids"]
    docs: list[str] = sample["documents"]
    deep = [
        encode_cursor(at, i) for at, i in zip(sample["deep_at"], sample["deep_id"], strict=True)
    ]
    flows = ["posting", "costing", "close", "migration"]
    periods = [f"{y}-{m:02d}" for y in (2024, 2025, 2026) for m in range(1, 13)]
    stores = [f"ST{s:03d}" for s in range(1, 51)]

    def pick(values: list[Any]) -> Any:
        return values[rng.randrange(len(values))]

    make: dict[str, Callable[[], RunQuery]] = {
        "first_page": lambda: RunQuery(),
        "deep_page": lambda: RunQuery(before=pick(deep)),
        "flow": lambda: RunQuery(flow=pick(flows)),
        "waiting": lambda: RunQuery(status="waiting"),
        "period": lambda: _erp(period=pick(periods)),
        "store": lambda: _erp(store=pick(stores)),
        "document": lambda: _erp(document=pick(docs)),
        "id_prefix": lambda: RunQuery(text=str(pick(ids))[:6]),
    }
    return {kind: [make[kind]() for _ in range(n)] for kind in KINDS}


def seq_scans(conn: psycopg.Connection[Any], query: RunQuery) -> list[str]:
    """The engine tables the plan of ``query`` scans sequentially (none, hopefully)."""
    statement, params = store.job_search_statement(
        search_filters(query, conn), limit=query.limit + 1
    )
    explain = sql.SQL("EXPLAIN (FORMAT JSON) {}").format(statement)
    row = conn.execute(explain, params, prepare=False).fetchone()
    assert row is not None
    found: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") in (
            "engine_jobs",
            "engine_step_runs",
            "engine_job_tags",
        ):
            found.append(str(node["Relation Name"]))
        for child in node.get("Plans", []):
            walk(child)

    plan = row[0] if isinstance(row, tuple) else next(iter(row.values()))
    walk((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
    return found


def other_queries(deep: str) -> dict[str, RunQuery]:
    """Searches not timed, whose plans are checked too: each state, text, filters together."""
    return {
        "status_running": RunQuery(status="running"),
        "status_pending": RunQuery(status="pending"),
        "status_done": RunQuery(status="done"),
        "status_failed_deep": RunQuery(status="failed", before=deep),
        "waiting_deep": RunQuery(status="waiting", before=deep),
        "flow_deep": RunQuery(flow="close", before=deep),
        "period_deep": _erp(period="2025-03", before=deep),
        "store_deep": _erp(store="ST004", before=deep),
        "param_and_tag": RunQuery(params=(("period", "2025-03"),), tags=(("store", "ST004"),)),
        "text_flow": RunQuery(text="posting"),
        "text_store": RunQuery(text="ST011"),
        "text_document": RunQuery(text="SI-000077"),
        "text_nothing": RunQuery(text="zzz-nothing"),
        "combined": _erp(flow="costing", period="2025-03", status="done", store="ST004"),
        "flow_and_store": _erp(flow="posting", store="ST001"),
        "limit_200": RunQuery(flow="migration", limit=200),
    }


def run() -> None:
    jobs = env_int("BENCH_RUNS_JOBS", 100_000)
    steps = env_int("BENCH_RUNS_STEPS", 1_000_000)
    tags = env_int("BENCH_RUNS_TAGS", 5000)
    n = env_int("BENCH_RUNS_N", 200)
    dbname = os.environ.get("BENCH_RUNS_DATABASE", "engine_bench_runs")
    emit("runs_search", "jobs", jobs, "jobs")
    emit("runs_search", "step_runs", steps, "step runs")
    info = fresh_database(dbname=dbname)
    try:
        with psycopg.connect(info, autocommit=True) as conn:
            started = time.monotonic()
            seed(conn, jobs, steps, tags)
            emit("runs_search", "seed_s", time.monotonic() - started, "s")
            by_kind = queries_by_kind(conn, n)
            bad = 0
            others = other_queries(by_kind["deep_page"][0].before or "")
            for name, query in others.items():
                if scans := seq_scans(conn, query):
                    bad += 1
                    log(f"{name}: the plan scans {', '.join(scans)} sequentially")
            emit("runs_search/other_plans", "checked", len(others), "plans")
            emit("runs_search/other_plans", "with_seq_scans", bad, "plans")
            for kind, searches in by_kind.items():
                scans = seq_scans(conn, searches[0])
                if scans:
                    log(f"{kind}: the plan scans {', '.join(scans)} sequentially")
                emit(f"runs_search/{kind}", "seq_scans", len(scans), "scans")
                times: list[float] = []
                found = 0
                for query in searches:
                    t0 = time.perf_counter()
                    page = search_runs(conn, query)
                    times.append((time.perf_counter() - t0) * 1000)
                    found += len(page.rows)
                times.sort()
                p50 = statistics.median(times)
                p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
                emit(f"runs_search/{kind}", "p50_ms", p50, "ms")
                emit(f"runs_search/{kind}", "p95_ms", p95, "ms")
                log(
                    f"{kind}: p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
                    f"{found / len(searches):.1f} rows a page"
                )
            console_pages(info, by_kind, max(10, n // 4))
    finally:
        if not env_int("BENCH_RUNS_KEEP", 0):
            drop_database(dbname)


def console_pages(info: str, by_kind: dict[str, list[RunQuery]], n: int) -> None:
    """The runs page as a signed-in person gets it: the search, the template, the session.

    In process through Starlette's TestClient (no network in the figure), one
    request at a time: ``n`` pages per kind of search, and a job's live version
    as browsers poll it (cached per console process for one refresh interval).
    """
    from pydantic import SecretStr
    from starlette.testclient import TestClient

    from engine.config import Settings
    from engine.console.app import create_app
    from engine.console.settings import ConsoleSettings
    from engine.console.users import add_user
    from engine.flow.registry import Registry

    settings = Settings(database_url=SecretStr(info), flow_modules=[])
    registry = Registry.load(["flows.tools"])  # the ERP's search fields on the runs page
    add_user(settings, "bench", "viewer", "bench-password-1", actor="bench")
    # plain http on 127.0.0.1, as `engine console` serves it there (no Secure cookie)
    app = create_app(settings, ConsoleSettings(secret="b" * 40, secure_cookie=False), registry)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get("/signin").text
        token = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        client.post(
            "/signin", data={"name": "bench", "password": "bench-password-1", "csrf": token}
        )
        for kind, searches in by_kind.items():
            times: list[float] = []
            for query in searches[:n]:
                values = _form(query)
                t0 = time.perf_counter()
                r = client.get("/", params=values)
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text[:500]
            times.sort()
            p50 = statistics.median(times)
            p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
            emit(f"console_runs_page/{kind}", "p50_ms", p50, "ms")
            emit(f"console_runs_page/{kind}", "p95_ms", p95, "ms")
            log(f"console runs page, {kind}: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
        job = _some_job(client)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            client.get(f"/runs/{job}/version")
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        queries = app.state.shared.versions.queries
        emit("console_live_version", "p95_ms", times[int(len(times) * 0.95)], "ms")
        emit("console_live_version", "database_queries", queries, "queries")
        log(f"live version: {n} polls, {queries} database queries")


def _some_job(client: Any) -> str:
    page = client.get("/").text
    return page.split('<a href="/runs/', 1)[1].split(".html", 1)[0]
