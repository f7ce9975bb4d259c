"""A sweep round under a deep queue (``BENCH_ONLY=sweep``).

Seeds a scratch database as the retention bench does (``bench.retention.seed``:
``BENCH_SWEEP_HISTORY`` finished step runs over 10 days and ``BENCH_SWEEP_QUEUE``
pending jobs of one due step run each), announces every one of them (published
outbox rows, as after a backlog's messages all went out), then times
``BENCH_SWEEP_ROUNDS`` sweep rounds (:class:`engine.worker.sweeper.Sweeper`) with the
engine's ``ENGINE_SWEEP_SCAN`` and as many with a scan as deep as the queue (every
step run checked each round, as before slices), alternating. Prints each one's median
round and their ratio; nothing is announced or relayed in either while the
announcements are younger than ``ENGINE_REPUBLISH_AFTER_S``. Figures are printed,
never failed.

    BENCH_SWEEP_QUEUE=100000     pending step runs (1.5M: the retention bench's 10M seed)
    BENCH_SWEEP_HISTORY=300000   finished step runs beside them
    BENCH_SWEEP_ROUNDS=5         rounds of each scan
    BENCH_SWEEP_DATABASE=engine_bench_sweep  the scratch database (dropped at the end)
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from bench.common import drop_database, emit, env_int, fresh_database, log, settings_for
from bench.retention import seed
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.store import db, queries
from engine.transports.postgres import PostgresTransport
from engine.worker.sweeper import Sweeper

_q = queries.load(str(Path(__file__).with_name("sweep.sql")))
NAME = "sweep"


def run() -> None:
    queue = env_int("BENCH_SWEEP_QUEUE", 100_000)
    history = env_int("BENCH_SWEEP_HISTORY", 300_000)
    rounds = max(1, env_int("BENCH_SWEEP_ROUNDS", 5))
    dbname = os.environ.get("BENCH_SWEEP_DATABASE", "engine_bench_sweep")
    info = fresh_database(dbname=dbname)
    try:
        settings = settings_for(info, flow_modules=[])
        with db.connect(settings, autocommit=True) as conn:
            seed(conn, history, 10, queue)
            started = time.monotonic()
            conn.execute(_q["sweep_announce_all"])
            conn.execute("VACUUM ANALYZE engine_outbox")
            log(f"sweep: {queue} step runs announced in {time.monotonic() - started:.1f} s")
            whole = settings.model_copy(update={"sweep_scan": max(1, queue)})
            sweepers = {
                f"scan={settings.sweep_scan}": _sweeper(settings),
                "scan=queue": _sweeper(whole),
            }
            took: dict[str, list[float]] = {name: [] for name in sweepers}
            for _ in range(rounds):
                for name, sweeper in sweepers.items():
                    started = time.perf_counter()
                    sweeper.sweep(conn)
                    took[name].append(time.perf_counter() - started)
        medians = {name: statistics.median(times) for name, times in took.items()}
        for name, median in medians.items():
            emit(NAME, f"round_ms_median/{name}", median * 1000, "ms")
        sliced, whole_s = medians.values()
        emit(NAME, "whole_over_sliced", whole_s / sliced, "x")
        emit(NAME, "queue", queue, "step runs")
        log(
            f"sweep: a round at {queue} queued step runs: {sliced * 1000:.0f} ms with a scan of "
            f"{settings.sweep_scan}, {whole_s * 1000:.0f} ms checking the whole queue"
        )
    finally:
        drop_database(dbname)


def _sweeper(settings: Settings) -> Sweeper:
    return Sweeper(settings, PostgresTransport(settings), "bench/sweeper", AlertRecorder([]))
