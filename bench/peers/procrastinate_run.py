"""Procrastinate: N no-op jobs drained by PROCS worker processes x CONCURRENCY.

    BENCH_PEER_URL=URL python procrastinate_run.py run JOBS PROCS CONCURRENCY TIMEOUT_S

The jobs are deferred in one batch before the workers start. Each worker is
``App.run_worker_async(concurrency=CONCURRENCY)`` over a psycopg pool of
CONCURRENCY + 2 connections (the fetch loop and the LISTEN connection besides
the jobs), keeping its jobs (``delete_jobs="never"``, the default). Timed from
``procrastinate_events``: the first ``started`` to the last ``succeeded``
(``at`` is ``now()`` of the transaction that wrote it).
"""

from __future__ import annotations

import asyncio
import logging

import peer_common
from procrastinate import App, PsycopgConnector

# the app is defined in the script that runs (``__main__``) on both sides, and the task
# is named explicitly: procrastinate's warning about that does not apply
logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)

PROGRESS = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('succeeded', 'failed')"
ELAPSED = """
SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')
                        - min(at) FILTER (WHERE type = 'started'))::float8
FROM procrastinate_events
"""


def make_app(url: str, pool_size: int = 2) -> App:
    app = App(connector=PsycopgConnector(conninfo=url, min_size=pool_size, max_size=pool_size))

    @app.task(name="noop")
    async def noop(i: int) -> None:
        return None

    return app


def run(args: list[str]) -> None:
    url, jobs, procs, concurrency, timeout_s = (
        args[0],
        int(args[1]),
        int(args[2]),
        int(args[3]),
        float(args[4]),
    )

    async def prepare() -> None:
        app = make_app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            task = app.tasks["noop"]
            for start in range(0, jobs, 1000):
                await task.batch_defer_async(
                    *({"i": i} for i in range(start, min(jobs, start + 1000)))
                )

    asyncio.run(prepare())
    drained = peer_common.drain(__file__, [str(concurrency)], procs, url, PROGRESS, jobs, timeout_s)
    peer_common.report(
        "procrastinate",
        "jobs/s",
        1,
        drained,
        peer_common.elapsed_s(url, ELAPSED),
        "procrastinate_events: first started to last succeeded",
        done_unit="jobs",
        procs=procs,
        concurrency=concurrency,
    )


def worker(index: int, args: list[str]) -> None:
    url, concurrency = args[0], int(args[1])
    app = make_app(url, pool_size=concurrency + 2)

    async def main() -> None:
        async with app.open_async():
            await asyncio.to_thread(peer_common.wait_for_go)
            await app.run_worker_async(
                concurrency=concurrency, name=f"bench-{index}", delete_jobs="never"
            )

    asyncio.run(main())


if __name__ == "__main__":
    peer_common.main(run, worker)
