"""The engine: submit ``noop`` jobs, then time worker processes draining them.

Steps/s is ``3 * jobs done`` over the span from the first claim to the last
``job_done`` (both database times from ``engine_history``: events and the claims and
successes folded into the step runs), so worker start-up
is not counted. Claim-to-commit latency is, per step run, its ``claimed``
event to its ``succeeded`` event (the latter is written in the checkpoint
transaction, before its scheduling, relay and commit: the commit itself is
not timestamped anywhere). ``slot_cycle_p50`` is one slot's claim to its next
claim, everything included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench import noop
from bench.common import Backends, Workers, emit, fresh_database, log, settings_for
from engine import submit
from engine.flow.registry import Registry
from engine.store import db
from engine.transports.outbox import relay
from engine.transports.postgres import PostgresTransport

STEPS_PER_JOB = 3

ELAPSED = """
SELECT extract(epoch FROM max(at) FILTER (WHERE kind = 'job_done')
                        - min(at) FILTER (WHERE kind IN ('claimed', 'reclaimed')))::float8
FROM engine_history
"""

LATENCY = """
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY ms),
       count(*)
FROM (SELECT extract(epoch FROM s.at - c.at)::float8 * 1000 AS ms
      FROM engine_history AS c
      JOIN engine_history AS s ON s.step_run_id = c.step_run_id AND s.kind = 'succeeded'
      WHERE c.kind = 'claimed') AS per_step
"""

# one executor slot's full cycle: from one of its claims to its next one
# (the step, the rest of the checkpoint transaction and its commit, the hand-off
# back to the receiving thread, the next receive)
SLOT_CYCLE = """
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)
FROM (SELECT extract(epoch FROM lead(at) OVER (PARTITION BY worker ORDER BY at, id) - at)::float8
             * 1000 AS ms
      FROM engine_history WHERE kind = 'claimed') AS cycles
WHERE ms IS NOT NULL
"""

PROGRESS = """
SELECT count(*) FILTER (WHERE status = 'done'),
       count(*) FILTER (WHERE status IN ('failed', 'cancelled'))
FROM engine_jobs
"""

# what the database did per step, from its own statistics (read after the
# workers exited, so every backend has flushed its counters)
DB_STATS = """
SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()
"""
TABLE_WRITES = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_del
FROM pg_stat_user_tables
WHERE relname LIKE 'engine%%' AND relname <> 'engine_migrations' ORDER BY relname
"""


@dataclass(frozen=True)
class Result:
    steps_per_s: float | None
    jobs_done: int
    rows_per_step: float | None = None  # rows inserted, updated or deleted in engine tables
    commits_per_step: float | None = None
    # CPU the workers used per step, and their child processes (a traced worker's exporter),
    # from the first poll that saw a job done to the last: less bent by the machine's other
    # load than steps/s, which waits on the database too
    cpu_us_per_step: float | None = None
    child_cpu_us_per_step: float | None = None
    # and the database's backends serving them (None: the server's processes are not here)
    db_cpu_us_per_step: float | None = None


def submit_jobs(info: str, jobs: int, bench: str = "submit") -> None:
    """Submit in one transaction on our connection, then relay the outbox ourselves."""
    settings = settings_for(info)
    flow = Registry([noop.flow]).get("noop")
    transport = PostgresTransport(settings)
    try:
        started = time.monotonic()
        with db.connect(settings) as conn:
            with conn.transaction():
                for i in range(jobs):
                    submit(flow, {"i": i}, conn=conn, settings=settings, publisher=transport)
            submitted = time.monotonic()
            published = 0
            while n := relay(conn, transport, limit=1000):
                published += n
        relayed = time.monotonic()
    finally:
        transport.close()
    emit(bench, "jobs_per_s", jobs / (submitted - started), "jobs/s")
    emit(bench, "relay_messages_per_s", published / (relayed - submitted), "messages/s")
    log(
        f"submitted {jobs} jobs in {submitted - started:.2f} s (one transaction), "
        f"relayed {published} messages in {relayed - submitted:.2f} s"
    )


def bench_name(procs: int, concurrency: int, eager: bool) -> str:
    return f"engine/procs={procs},concurrency={concurrency}" + ("" if eager else ",eager=false")


def run(
    jobs: int,
    procs: int,
    concurrency: int,
    timeout_s: float,
    *,
    eager: bool = True,
    env: dict[str, str] | None = None,
    name: str | None = None,
) -> Result:
    """Drain ``jobs`` with ``procs`` workers (``env`` added to theirs); figures as ``name``."""
    bench = name or bench_name(procs, concurrency, eager)
    info = fresh_database()
    submit_jobs(info, jobs, "submit" if name is None else f"{name}/submit")
    log(f"{bench}: draining {jobs} jobs ...")
    done = ended = 0
    with psycopg.connect(info, autocommit=True) as conn:
        with Workers(
            info,
            count=procs,
            concurrency=concurrency,
            modules="bench.noop",
            env={"ENGINE_EAGER_SUCCESSORS": "true" if eager else "false", **(env or {})},
        ) as workers:
            deadline = time.monotonic() + timeout_s
            backends = Backends(conn, conninfo_to_dict(info)["dbname"])
            first: tuple[float, float, int, float] | None = None
            last: tuple[float, float, int, float] | None = None
            while True:
                done, ended = conn.execute(PROGRESS).fetchone() or (0, 0)
                if done:
                    last = (*workers.cpu_s(), done, backends.cpu_s())
                    first = first or last
                if done + ended >= jobs:
                    break
                if time.monotonic() > deadline:
                    log(f"{bench}: timed out after {timeout_s:g} s with {done}/{jobs} jobs done")
                    break
                if crashed := workers.exited():
                    log(f"{bench}: worker(s) {[p.pid for p in crashed]} exited early")
                    workers.show_logs()
                    break
                time.sleep(0.2)
        # workers are stopped here: their statistics are flushed
        elapsed = conn.execute(ELAPSED).fetchone()[0]  # type: ignore[index]
        p50, p99, measured = conn.execute(LATENCY).fetchone()  # type: ignore[misc]
        cycle = conn.execute(SLOT_CYCLE).fetchone()[0]  # type: ignore[index]
        commits, rollbacks = conn.execute(DB_STATS).fetchone()  # type: ignore[misc]
        writes = conn.execute(TABLE_WRITES).fetchall()
    if ended:
        log(f"{bench}: {ended} jobs failed or were cancelled")
    steps = STEPS_PER_JOB * done
    rate = steps / elapsed if elapsed else None
    emit(bench, "steps_per_s", rate, "steps/s")
    emit(bench, "jobs_done", done, "jobs")
    emit(bench, "claim_to_commit_p50", p50, "ms")
    emit(bench, "claim_to_commit_p99", p99, "ms")
    emit(bench, "slot_cycle_p50", cycle, "ms")
    rows = sum(ins + upd + dele for _, ins, upd, dele in writes)
    if steps:
        emit(bench, "db_commits_per_step", commits / steps, "commits/step")
        emit(bench, "rows_written_per_step", rows / steps, "rows/step")
    log(
        f"{bench}: {steps} steps in {elapsed or 0:.2f} s = {rate or 0:.0f} steps/s; "
        f"claim->succeeded p50 {p50 or 0:.1f} ms, p99 {p99 or 0:.1f} ms over {measured} step runs; "
        f"one slot's claim to its next claim p50 {cycle or 0:.1f} ms"
    )
    if steps:
        log(
            f"  per step: {commits / steps:.2f} commits, {rollbacks / steps:.2f} rollbacks, "
            f"{rows / steps:.2f} rows written"
        )
        for name, ins, upd, dele in writes:
            per = [
                f"{n / steps:5.2f} {what}"
                for n, what in ((ins, "ins"), (upd, "upd"), (dele, "del"))
            ]
            log(f"  per step: {name:<18} " + " ".join(per))
    cpu = child_cpu = db_cpu = None
    if first is not None and last is not None and last[2] > first[2]:
        measured_steps = STEPS_PER_JOB * (last[2] - first[2])
        cpu = (last[0] - first[0]) / measured_steps * 1e6
        child_cpu = (last[1] - first[1]) / measured_steps * 1e6
        db_cpu = (last[3] - first[3]) / measured_steps * 1e6 or None
        emit(bench, "worker_cpu_per_step", cpu, "us")
        emit(bench, "worker_children_cpu_per_step", child_cpu, "us")
        emit(bench, "database_backends_cpu_per_step", db_cpu, "us")
        log(
            f"  per step: {cpu:.0f} us of the workers' CPU, {child_cpu:.0f} us of their "
            f"child processes', {db_cpu or 0:.0f} us of the database's backends "
            f"(over {measured_steps} steps)"
        )
    if not steps:
        return Result(
            rate,
            done,
            cpu_us_per_step=cpu,
            child_cpu_us_per_step=child_cpu,
            db_cpu_us_per_step=db_cpu,
        )
    return Result(rate, done, rows / steps, commits / steps, cpu, child_cpu, db_cpu)
