"""The floor: what bare psycopg does with the same claim/complete pattern.

Per row, two transactions on a table shaped like ``engine_step_runs``: a
conditional-update claim (SKIP LOCKED, fresh lease token, attempts + 1) and a
completion fenced by that token. No queue, no events, no scheduling: this is
as fast as a claim-and-fence protocol gets on this server, from Python.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from bench.common import emit, log

CREATE = """
CREATE TABLE bench_floor (
    id               bigserial,
    status           text NOT NULL DEFAULT 'pending',
    lease_token      uuid,
    lease_expires_at timestamptz,
    attempts         int NOT NULL DEFAULT 0,
    output           jsonb
);
-- "Next pending" must walk only pending rows: were id a b-tree primary key,
-- the planner could walk it in id order past every finished row (a quadratic
-- floor). The completion finds its row by a hash index.
CREATE INDEX bench_floor_pending ON bench_floor (id) WHERE status = 'pending';
CREATE INDEX bench_floor_id ON bench_floor USING hash (id);
"""

CLAIM = """
UPDATE bench_floor
SET status = 'running', lease_token = gen_random_uuid(),
    lease_expires_at = clock_timestamp() + interval '30 s', attempts = attempts + 1
WHERE id = (SELECT id FROM bench_floor WHERE status = 'pending'
            ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, lease_token
"""

COMPLETE = """
UPDATE bench_floor SET status = 'done', output = %s, lease_token = NULL, lease_expires_at = NULL
WHERE id = %s AND lease_token = %s
"""


def _loop(info: str, barrier: Any, results: Any) -> None:
    """One process: claim and complete until nothing is pending."""
    with psycopg.connect(info) as conn:
        barrier.wait(timeout=60)
        started = time.monotonic()
        done = 0
        while True:
            row = conn.execute(CLAIM).fetchone()
            conn.commit()
            if row is None:
                break
            conn.execute(COMPLETE, (Jsonb({"i": row[0]}), row[0], row[1]))
            conn.commit()
            done += 1
        results.put((started, time.monotonic(), done))


def prepare(info: str, rows: int) -> None:
    with psycopg.connect(info, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_floor")
        conn.execute(CREATE)
        conn.execute(
            "INSERT INTO bench_floor (status) SELECT 'pending' FROM generate_series(1, %s)", (rows,)
        )
        conn.execute("VACUUM ANALYZE bench_floor")


def run(info: str, rows: int, procs: int, timeout_s: float) -> float | None:
    """Rows per second with ``procs`` processes started together; None if it timed out."""
    prepare(info, rows)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    results = ctx.Queue()
    workers = [ctx.Process(target=_loop, args=(info, barrier, results)) for _ in range(procs)]
    try:
        for w in workers:
            w.start()
        outcomes = [results.get(timeout=timeout_s) for _ in workers]
    except Exception as exc:
        log(f"floor with {procs} process(es) did not finish: {type(exc).__name__} {exc}")
        return None
    finally:
        for w in workers:
            w.join(timeout=5)
            if w.is_alive():
                w.kill()
                w.join(timeout=5)
    elapsed = max(o[1] for o in outcomes) - min(o[0] for o in outcomes)
    done = sum(o[2] for o in outcomes)
    if done != rows:
        log(f"floor: {done} rows completed of {rows}")
    rate = done / elapsed
    bench = f"floor/procs={procs}"
    emit(bench, "rows_per_s", rate, "rows/s")
    emit(bench, "rows", done, "rows")
    log(f"floor, {procs} process(es): {done} rows in {elapsed:.2f} s = {rate:.0f} rows/s")
    return rate
