"""``python -m bench``: floor, engine throughput and latency, recovery, ratio; ERP month end.

Sizes (environment):

    BENCH_JOBS=2000          noop jobs per engine run (3 steps each)
    BENCH_FLOOR_ROWS=3*JOBS  rows of the floor table
    BENCH_PROCS=1,2          worker process counts to try (floor and engine)
    BENCH_CONCURRENCY=1,2    slots per worker process to try
    BENCH_TIMEOUT_S=150      bound on one run (figures are reported, never failed, on time)
    BENCH_ONLY=floor,engine,recovery,erp,sqs
    BENCH_VERBOSE=1          show the worker logs

The ERP month end (``erp``, see ``bench/erp.py``): seed, costing and posting
through two worker processes, the plain-SQL costing floor, worker memory.

    BENCH_ERP_ITEMS=2000         items per brand (~1M stock moves at 50 stores)
    BENCH_ERP_DOCUMENTS=100000   accounting documents to post
    BENCH_ERP_STORES=50 BENCH_ERP_BRANDS=4 BENCH_ERP_EMPLOYEES=500 BENCH_ERP_PERIOD=2026-11
    BENCH_ERP_HALF=1             also cost a month at half the items (memory: flat or not)
    BENCH_ERP_WORKERS=2          worker processes (one slot each)
    BENCH_ERP_TIMEOUT_S=900      bound on one job
"""

from __future__ import annotations

import os
import sys
import time

from bench import erp, floor, recovery, sqs, throughput
from bench.common import (
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


def main() -> int:
    jobs = env_int("BENCH_JOBS", 2000)
    floor_rows = env_int("BENCH_FLOOR_ROWS", 3 * jobs)
    procs_list = env_ints("BENCH_PROCS", "1,2")
    concurrency_list = env_ints("BENCH_CONCURRENCY", "1,2")
    timeout_s = env_float("BENCH_TIMEOUT_S", 150)
    only = set((os.environ.get("BENCH_ONLY") or "floor,engine,recovery,erp,sqs").split(","))
    started = time.monotonic()
    log(f"server: {masked(server_conninfo())}; scratch database engine_bench")
    log(f"jobs {jobs}, floor rows {floor_rows}, procs {procs_list}, concurrency {concurrency_list}")
    emit("config", "jobs", jobs, "jobs")
    emit("config", "cpus", os.cpu_count() or 0, "cpus")

    floor_rates: dict[int, float | None] = {}
    engine_rates: dict[tuple[int, int], float | None] = {}
    try:
        if "floor" in only:
            info = fresh_database(migrate=False)
            for procs in procs_list:
                floor_rates[procs] = floor.run(info, floor_rows, procs, timeout_s)
        if "engine" in only:
            for procs in procs_list:
                for concurrency in concurrency_list:
                    result = throughput.run(jobs, procs, concurrency, timeout_s)
                    engine_rates[procs, concurrency] = result.steps_per_s
        for (procs, concurrency), rate in engine_rates.items():
            base = floor_rates.get(procs)
            if rate and base:
                emit(
                    "ratio",
                    f"engine_over_floor/procs={procs},concurrency={concurrency}",
                    rate / base,
                    "x",
                )
        if "recovery" in only:
            recovery.run()
        if "erp" in only:
            erp.run_all()
        if "sqs" in only:  # moto's server on 127.0.0.1; sizes: BENCH_SQS_* (bench/sqs.py)
            sqs.run()
    finally:
        try:
            if only & {"floor", "engine", "recovery"}:  # erp drops its own (engine_bench_erp)
                drop_database()
        except Exception as exc:
            log(f"could not drop the scratch database: {exc}")
    log(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
