"""Latency at low load: one ``noop`` job at a time through 2 worker processes x 2 slots.

Each job is submitted (one transaction, its message in it) only once the one
before it is done, so no step ever waits behind another: what batching and
group commit must not slow down. Figures, from ``engine_events`` (database
times): per step run, its claim to its ``succeeded`` event (written in the
checkpoint's transaction, as in :mod:`bench.throughput`), p50 and p99; and
per job, its submit to its end, p50.

    BENCH_SINGLE_JOBS=40   jobs, one after the other
"""

from __future__ import annotations

import time

import psycopg

from bench import noop
from bench.common import Workers, emit, env_int, fresh_database, log, settings_for
from bench.throughput import LATENCY
from engine import submit
from engine.flow.registry import Registry
from engine.store import db
from engine.transports.postgres import PostgresTransport

JOB_SPAN = """
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY
           extract(epoch FROM finished_at - created_at)::float8 * 1000)
FROM engine_jobs WHERE status = 'done'
"""


def run(timeout_s: float = 120.0) -> None:
    jobs = env_int("BENCH_SINGLE_JOBS", 40)
    info = fresh_database()
    settings = settings_for(info)
    flow = Registry([noop.flow]).get("noop")
    transport = PostgresTransport(settings)
    bench = "single/procs=2,concurrency=2"
    log(f"{bench}: {jobs} jobs, one at a time ...")
    try:
        with (
            psycopg.connect(info, autocommit=True) as watch,
            Workers(info, count=2, concurrency=2, modules="bench.noop") as workers,
            db.connect(settings, autocommit=True) as conn,
        ):
            for i in range(jobs):
                job = submit(flow, {"i": i}, conn=conn, settings=settings, publisher=transport)
                deadline = time.monotonic() + timeout_s
                while True:
                    row = watch.execute(
                        "SELECT status FROM engine_jobs WHERE id = %s", (job.job_id,)
                    ).fetchone()
                    if row is not None and row[0] == "done":
                        break
                    if time.monotonic() > deadline or workers.exited():
                        log(f"{bench}: job {i} not done; stopping")
                        return
                    time.sleep(0.002)
            p50, p99, measured = watch.execute(LATENCY).fetchone() or (None, None, 0)
            span = (watch.execute(JOB_SPAN).fetchone() or (None,))[0]
    finally:
        transport.close()
    emit(bench, "claim_to_commit_p50", p50, "ms")
    emit(bench, "claim_to_commit_p99", p99, "ms")
    emit(bench, "job_submit_to_done_p50", span, "ms")
    log(
        f"{bench}: claim->succeeded p50 {p50 or 0:.2f} ms, p99 {p99 or 0:.2f} ms over "
        f"{measured} step runs; a job's submit to its end p50 {span or 0:.1f} ms"
    )
