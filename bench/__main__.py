"""``python -m bench``: floor, engine throughput and latency, recovery, ratio; ERP month end;
commit-to-claim latency per connection kind; searching runs; sign-in under attack.

Sizes (environment):

    BENCH_JOBS=2000          noop jobs per engine run (3 steps each)
    BENCH_FLOOR_ROWS=3*JOBS  rows of the floor table
    BENCH_PROCS=1,2          worker process counts to try (floor and engine)
    BENCH_CONCURRENCY=1,2    slots per worker process to try
    BENCH_ROUNDS=3           floor and engine runs alternate this many times; medians
                             and the ratio of medians are reported (the disk's fsync
                             latency swings the floor by 2x from one minute to the next)
    BENCH_QUEUE_HOP=1        also run the most concurrent engine set-up with
                             ENGINE_EAGER_SUCCESSORS=false (every step through the queue)
    BENCH_TIMEOUT_S=150      bound on one run (figures are reported, never failed, on time)
    BENCH_ONLY=floor,engine,single,recovery,erp,recost,sqs,latency,runs,signin,tracing,bulk,retention,sweep
    BENCH_VERBOSE=1          show the worker logs
    BENCH_DATABASE=engine_bench  the scratch database (dropped and re-created)

The ERP month end (``erp``, see ``bench/erp.py``): seed a month of documents, post them
(journals and ~1M stock moves), then the close (costing with the exact solve, checks)
through two worker processes; the costing floors (the old one-statement method, the
current per-store statement) and worker memory at two sizes.

    BENCH_ERP_ITEMS=2000         items per brand (~1M stock moves at 50 stores; 20000: 10x)
    BENCH_ERP_STORES=50 BENCH_ERP_BRANDS=4 BENCH_ERP_EMPLOYEES=500 BENCH_ERP_PERIOD=2026-11
    BENCH_ERP_HALF=1             first run the month end at BENCH_ERP_SMALL_ITEMS (default
                                 half the items) too, for the memory comparison; 0 skips it
    BENCH_ERP_VACUUM=1           VACUUM ANALYZE the posted moves before the close (0: autovacuum)
    BENCH_ERP_WORKERS=2          worker processes (one slot each)
    BENCH_ERP_TIMEOUT_S=900      bound on one job

Backdated documents (``recost``, see ``bench/recost.py``): one backdated receipt into P-2
with P-1 and P costed, recosted, against a full costing of the three periods; 100
documents on one item, then one recost (one recompute); a correction reaching every pair.

    BENCH_RECOST_STORES=50 BENCH_RECOST_BRANDS=4 BENCH_RECOST_ITEMS=200 (per brand)
    BENCH_RECOST_ROUNDS=3 BENCH_RECOST_DOCS=100

Commit-to-claim latency (``latency``, see ``bench/latency.py``): from the caller's
COMMIT of a submit to the claim of its first step run, per connection kind (psycopg,
psycopg autocommit, SQLAlchemy Connection and Session, none), on each transport.

    BENCH_LATENCY_N=20                      submits per (transport, connection kind)
    BENCH_LATENCY_TRANSPORTS=postgres,sqs

Searching runs (``runs``, see ``bench/runs_search.py``): p50 and p95 of the runs page's
searches (first page, a deep page, by flow, waiting, period, store, document, id prefix)
on a seeded history, and whether any plan scans the jobs or step runs sequentially.

    BENCH_RUNS_JOBS=100000 BENCH_RUNS_STEPS=1000000 BENCH_RUNS_TAGS=5000 BENCH_RUNS_N=200

Tracing's cost (``tracing``, see ``bench/tracing.py``): no-op steps/s with tracing off
and on (OTLP to a collector on 127.0.0.1), alternating; medians and their ratio, and the
median of each round's own ratio.

    BENCH_TRACING_JOBS=3000 BENCH_TRACING_ROUNDS=5 BENCH_TRACING_CONCURRENCY=2

Sign-in under attack (``signin``, see ``bench/signin.py``): the console process's RSS and
a real user's sign-in time while wrong attempts hit it from one address, from many, and
with the limits lifted (``BENCH_ONLY=signin make bench``).

    BENCH_SIGNIN_RATE=50 BENCH_SIGNIN_S=10 BENCH_SIGNIN_USER_N=10

Bulk actions on a frozen preview (``bulk``, see ``bench/bulk.py``): an outage's dead
letters previewed and replayed in one action, with single replays racing it.

    BENCH_BULK_N=10000 BENCH_BULK_RACE=100

Retention (``retention``, see ``bench/retention.py``): retiring the oldest day of finished
step runs while a claimer claims: claim p99 during vs without (alternated windows in one
run), the longest retirement transaction, dead tuples after, dry-run counts against what
was removed. The issue's size: RUNS=10000000 DAYS=90 (seed once with STAGE=seed, then
measure with STAGE=reuse; MAX_S bounds the retirement).

    BENCH_RETENTION_RUNS=30000 BENCH_RETENTION_DAYS=10 BENCH_RETENTION_ACTIVE=3000
    BENCH_RETENTION_WINDOW=5 BENCH_RETENTION_QUIET=1.0 BENCH_RETENTION_MAX_S=3600
    BENCH_RETENTION_STAGE=(seed|reuse)

A sweep round under a deep queue (``sweep``, see ``bench/sweep.py``): the median round
with the engine's ENGINE_SWEEP_SCAN against one checking the whole queue, alternated.

    BENCH_SWEEP_QUEUE=100000 BENCH_SWEEP_HISTORY=300000 BENCH_SWEEP_ROUNDS=5
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from bench import (
    bulk,
    erp,
    floor,
    latency,
    recost,
    recovery,
    retention,
    runs_search,
    signin,
    single,
    sqs,
    sweep,
    throughput,
)
from bench import tracing as tracing_bench
from bench.common import (
    SCRATCH_DB,
    drop_database,
    emit,
    env_float,
    env_int,
    env_ints,
    fresh_database,
    log,
    masked,
    server_conninfo,
)


def report_medians(
    floor_rates: dict[int, list[float]], engine_rates: dict[tuple[int, int, bool], list[float]]
) -> None:
    """Medians over the rounds, and each engine set-up's median over its floor's median."""
    for procs, rates in floor_rates.items():
        if rates:
            emit(f"floor/procs={procs}", "rows_per_s_median", statistics.median(rates), "rows/s")
    for (procs, concurrency, eager), rates in engine_rates.items():
        name = throughput.bench_name(procs, concurrency, eager)
        emit(name, "steps_per_s_median", statistics.median(rates), "steps/s")
        base = floor_rates.get(procs)
        if base:
            ratio = statistics.median(rates) / statistics.median(base)
            emit("ratio", f"engine_over_floor/{name.removeprefix('engine/')}", ratio, "x")
            log(
                f"{name}: median {statistics.median(rates):.0f} steps/s over {len(rates)} runs, "
                f"floor median {statistics.median(base):.0f} rows/s: {ratio:.2f}x"
            )


def main() -> int:
    jobs = env_int("BENCH_JOBS", 2000)
    floor_rows = env_int("BENCH_FLOOR_ROWS", 3 * jobs)
    procs_list = env_ints("BENCH_PROCS", "1,2")
    concurrency_list = env_ints("BENCH_CONCURRENCY", "1,2")
    timeout_s = env_float("BENCH_TIMEOUT_S", 150)
    rounds = max(1, env_int("BENCH_ROUNDS", 3))
    queue_hop = env_int("BENCH_QUEUE_HOP", 1) > 0
    only = set(
        (
            os.environ.get("BENCH_ONLY")
            or "floor,engine,single,recovery,erp,recost,sqs,latency,runs,signin,"
            "tracing,bulk,retention,sweep"
        ).split(",")
    )
    started = time.monotonic()
    log(f"server: {masked(server_conninfo())}; scratch database {SCRATCH_DB}")
    log(f"jobs {jobs}, floor rows {floor_rows}, procs {procs_list}, concurrency {concurrency_list}")
    emit("config", "jobs", jobs, "jobs")
    emit("config", "cpus", os.cpu_count() or 0, "cpus")

    floor_rates: dict[int, list[float]] = {p: [] for p in procs_list}
    engine_rates: dict[tuple[int, int, bool], list[float]] = {}
    setups = [(p, c, True) for p in procs_list for c in concurrency_list]
    if queue_hop:
        setups.append((max(procs_list), max(concurrency_list), False))
    try:
        for n in range(1, rounds + 1):
            if only & {"floor", "engine"}:
                log(f"round {n} of {rounds}")
            if "floor" in only:
                info = fresh_database(migrate=False)
                for procs in procs_list:
                    if (rate := floor.run(info, floor_rows, procs, timeout_s)) is not None:
                        floor_rates[procs].append(rate)
            if "engine" in only:
                for procs, concurrency, eager in setups:
                    result = throughput.run(jobs, procs, concurrency, timeout_s, eager=eager)
                    if result.steps_per_s is not None:
                        engine_rates.setdefault((procs, concurrency, eager), []).append(
                            result.steps_per_s
                        )
        report_medians(floor_rates, engine_rates)
        if "single" in only:  # one job at a time: latency at low load (bench/single.py)
            single.run()
        if "recovery" in only:
            recovery.run()
        if "erp" in only:
            erp.run_all()
        if "recost" in only:  # backdated documents recosted; BENCH_RECOST_* (bench/recost.py)
            recost.run()
        if "sqs" in only:  # moto's server on 127.0.0.1; sizes: BENCH_SQS_* (bench/sqs.py)
            sqs.run()
        if "latency" in only:  # one worker at a time; sizes: BENCH_LATENCY_* (bench/latency.py)
            latency.run()
        if "runs" in only:  # the runs page's searches; sizes: BENCH_RUNS_* (bench/runs_search.py)
            runs_search.run()
        if "signin" in only:  # the console under a sign-in flood; BENCH_SIGNIN_* (bench/signin.py)
            signin.run()
        if "tracing" in only:  # off vs on, a local collector; BENCH_TRACING_* (bench/tracing.py)
            tracing_bench.run()
        if "bulk" in only:  # an outage's dead letters in one action; BENCH_BULK_* (bench/bulk.py)
            bulk.run()
        if "retention" in only:  # a day retired under claims; BENCH_RETENTION_* (retention.py)
            retention.run()
        if "sweep" in only:  # a sweep round under a deep queue; BENCH_SWEEP_* (bench/sweep.py)
            sweep.run()
    finally:
        try:
            # erp drops its own (engine_bench_erp)
            if only & {"floor", "engine", "single", "recovery", "tracing"}:
                drop_database()
        except Exception as exc:
            log(f"could not drop the scratch database: {exc}")
    log(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
