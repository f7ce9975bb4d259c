"""Bulk actions on a frozen preview (``bulk``): an outage's dead letters replayed in one action.

Seeds a scratch database with ``BENCH_BULK_N`` failed posting jobs, each with one
dead step run and its dead letter (and a tenth as many of another flow, outside
the filter), set-based (``bench/bulk.sql``); then times the preview
(:func:`engine.bulk_preview` of ``replay`` by flow and error text) and its apply
(:func:`engine.bulk_apply`), while a thread replays a slice of the previewed
dead letters one by one. Prints the items acted on, skipped (changed meanwhile) and acted on
outside the preview (0 is the invariant). Figures are reported, never failed.

    BENCH_BULK_N=10000          dead letters in the preview (the issue's figure)
    BENCH_BULK_RACE=100         of them replayed one by one during the apply
    BENCH_BULK_DATABASE=engine_bench_bulk  the scratch database (dropped at the end)
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psycopg
from pydantic import SecretStr

from bench.common import drop_database, emit, env_int, fresh_database, log
from engine import BulkFilter, bulk_apply, bulk_preview
from engine.config import Settings
from engine.jobs import admin
from engine.jobs.bulk import BulkItem
from engine.store import queries

_q = queries.load(str(Path(__file__).with_name("bulk.sql")))


def run() -> None:
    n = env_int("BENCH_BULK_N", 10_000)
    race = min(env_int("BENCH_BULK_RACE", 100), n)
    dbname = os.environ.get("BENCH_BULK_DATABASE") or "engine_bench_bulk"
    info = fresh_database(dbname=dbname)
    try:
        with psycopg.connect(info, autocommit=True) as conn:
            started = time.monotonic()
            for name in ("bulk_seed_jobs", "bulk_seed_step_runs", "bulk_seed_dead_letters"):
                conn.execute(_q[name], {"n": n})
            conn.execute("ANALYZE")
            log(f"bulk: seeded {n} dead letters in {time.monotonic() - started:.1f} s")
        settings = Settings(database_url=SecretStr(info), flow_modules=[], transport="postgres")
        where = BulkFilter(flow="posting", error="db down")

        started = time.monotonic()
        made = bulk_preview(settings, "replay", where, actor="bench")
        preview_s = time.monotonic() - started
        emit("bulk", "preview_s", preview_s, "s")
        emit("bulk", "previewed", made.total, "dead letters")
        log(f"bulk: preview of {made.total} dead letters in {preview_s:.2f} s")

        go, done = threading.Event(), threading.Event()
        raced: list[str] = []
        waited: list[float] = []

        def replay_some() -> None:  # another operator, one by one, during the apply
            go.wait(60)
            with psycopg.connect(info, autocommit=True) as conn:
                rows = conn.execute(_q["bulk_select_some_open"], {"n": race}).fetchall()
            for (letter,) in rows:
                admin.replay(settings, letter, actor="other", reason="by hand")
                raced.append(str(letter))
            done.set()

        other = threading.Thread(target=replay_some)
        other.start()

        def before_item(item: BulkItem) -> None:
            if not go.is_set():
                go.set()
                began = time.monotonic()
                done.wait(120)
                waited.append(time.monotonic() - began)

        started = time.monotonic()
        applied = bulk_apply(
            settings, made.id, reason="db back", actor="bench", before_item=before_item
        )
        apply_s = time.monotonic() - started - sum(waited)  # not the other's replays
        other.join()
        with psycopg.connect(info, autocommit=True) as conn:
            outside = conn.execute(_q["bulk_acted_outside"], {"preview": str(made.id)}).fetchone()
        emit("bulk", "apply_s", apply_s, "s")
        emit("bulk", "acted", len(applied.done), "dead letters")
        emit("bulk", "skipped_changed", len(applied.skipped), "dead letters")
        emit("bulk", "acted_outside_preview", outside[0] if outside else None, "dead letters")
        log(
            f"bulk: apply in {apply_s:.2f} s (not counting the {len(raced)} single replays "
            f"it waited for): {len(applied.done)} acted, {len(applied.skipped)} skipped, "
            f"{len(applied.refused)} refused, {outside[0] if outside else '?'} outside"
        )
    finally:
        drop_database(dbname)
