"""``python -m bench``: floor, engine throughput and latency, recovery, ratio.

Sizes (environment):

    BENCH_JOBS=2000          noop jobs per engine run (3 steps each)
    BENCH_FLOOR_ROWS=3*JOBS  rows of the floor table
    BENCH_PROCS=1,2          worker process counts to try (floor and engine)
    BENCH_CONCURRENCY=1,2    slots per worker process to try
    BENCH_TIMEOUT_S=150      bound on one run (figures are reported, never failed, on time)
    BENCH_ONLY=floor,engine,recovery
    BENCH_VERBOSE=1          show the worker logs
"""

from __future__ import annotations

import os
import sys
import time

from bench import floor, recovery, throughput
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
    only = set((os.environ.get("BENCH_ONLY") or "floor,engine,recovery").split(","))
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
    finally:
        try:
            drop_database()
        except Exception as exc:
            log(f"could not drop the scratch database: {exc}")
    log(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
