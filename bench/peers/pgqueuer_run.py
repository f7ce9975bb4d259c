"""pgqueuer: N no-op jobs drained by PROCS processes, BATCH jobs per dequeue.

    BENCH_PEER_URL=URL python pgqueuer_run.py run JOBS PROCS BATCH TIMEOUT_S

The schema is installed and the jobs enqueued in one call before the workers
start. Each worker is one ``QueueManager`` on one psycopg async connection in
autocommit mode (as pgqueuer's own ``PgQueuer.from_psycopg_connection``
requires) running ``qm.run(batch_size=BATCH)`` with pgqueuer's defaults
otherwise (no cap on concurrent tasks; completions are logged in buffers of
BATCH). ``BATCH=1`` is one job per round trip and per completion write.
Timed from ``pgqueuer_log``: the first ``picked`` to the last ``successful``
(``created`` is the database's clock).
"""

from __future__ import annotations

import asyncio

import peer_common
import psycopg
from pgqueuer import PsycopgDriver, Queries, QueueManager
from pgqueuer.models import Job

PROGRESS = "SELECT count(*) FROM pgqueuer_log WHERE status IN ('successful', 'exception')"
ELAPSED = """
SELECT extract(epoch FROM max(created) FILTER (WHERE status = 'successful')
                        - min(created) FILTER (WHERE status = 'picked'))::float8
FROM pgqueuer_log
"""


def run(args: list[str]) -> None:
    url, jobs, procs, batch, timeout_s = (
        args[0],
        int(args[1]),
        int(args[2]),
        int(args[3]),
        float(args[4]),
    )

    async def prepare() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            queries = Queries(PsycopgDriver(conn))
            await queries.install()
            for start in range(0, jobs, 1000):
                n = min(jobs, start + 1000) - start
                await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
        finally:
            await conn.close()

    asyncio.run(prepare())
    drained = peer_common.drain(__file__, [str(batch)], procs, url, PROGRESS, jobs, timeout_s)
    peer_common.report(
        "pgqueuer",
        "jobs/s",
        1,
        drained,
        peer_common.elapsed_s(url, ELAPSED),
        "pgqueuer_log: first picked to last successful",
        done_unit="jobs",
        procs=procs,
        batch_size=batch,
    )


def worker(index: int, args: list[str]) -> None:
    url, batch = args[0], int(args[1])

    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        qm = QueueManager(Queries(PsycopgDriver(conn)))

        @qm.entrypoint("noop")
        async def noop(job: Job) -> None:
            return None

        await asyncio.to_thread(peer_common.wait_for_go)
        await qm.run(batch_size=batch)

    asyncio.run(main())


if __name__ == "__main__":
    peer_common.main(run, worker)
