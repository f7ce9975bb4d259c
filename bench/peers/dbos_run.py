"""DBOS (dbos-transact): N workflows of three no-op steps, PROCS processes.

    BENCH_PEER_URL=URL python dbos_run.py run WORKFLOWS PROCS CONCURRENCY TIMEOUT_S POLL_S

The system database is migrated (``DBOS.migrate``), a queue is registered with
``worker_concurrency=CONCURRENCY`` and ``polling_interval_sec=POLL_S`` (DBOS's
default of 1 s would cap each process at CONCURRENCY workflows a second), and
all workflows are enqueued in one transaction through ``DBOSClient`` before the
workers start. Each worker is one launched DBOS process (its own executor id)
running the workflow ``noop_flow``: three ``@DBOS.step`` calls that return
their input. Timed from ``dbos.workflow_status``: the first dequeue
(``started_at_epoch_ms``) to the last ``SUCCESS`` (``updated_at``); steps/s is
three times workflows/s.
"""

from __future__ import annotations

import peer_common
import sqlalchemy as sa
from dbos import DBOS, DBOSClient

APP = "bench"
VERSION = "bench"
QUEUE = "bench_noop"

PROGRESS = "SELECT count(*) FROM dbos.workflow_status WHERE status IN ('SUCCESS', 'ERROR')"
ELAPSED = """
SELECT (max(updated_at) FILTER (WHERE status = 'SUCCESS') - min(started_at_epoch_ms)) / 1000.0
FROM dbos.workflow_status
"""
STEPS = "SELECT count(*) FROM dbos.operation_outputs"


def run(args: list[str]) -> None:
    url, workflows, procs, concurrency, timeout_s, poll_s = (
        args[0],
        int(args[1]),
        int(args[2]),
        int(args[3]),
        float(args[4]),
        float(args[5]),
    )
    DBOS.migrate(url)
    client = DBOSClient(system_database_url=url, application_name=APP)
    try:
        client.register_queue(
            QUEUE, worker_concurrency=concurrency, polling_interval_sec=poll_s, application_name=APP
        )
        engine = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"))
        with engine.begin() as conn:
            for i in range(workflows):
                client.enqueue_in_transaction(
                    conn,
                    {
                        "workflow_name": "noop_flow",
                        "queue_name": QUEUE,
                        "app_version": VERSION,
                        "application_name": APP,
                    },
                    i,
                )
        engine.dispose()
    finally:
        client.destroy()
    drained = peer_common.drain(__file__, [], procs, url, PROGRESS, workflows, timeout_s)
    with sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg")).connect() as c:
        steps = c.execute(sa.text(STEPS)).scalar()
    peer_common.report(
        "dbos",
        "steps/s",
        3,
        drained,
        peer_common.elapsed_s(url, ELAPSED),
        "dbos.workflow_status: first started_at_epoch_ms to last SUCCESS updated_at",
        done_unit="workflows",
        procs=procs,
        worker_concurrency=concurrency,
        polling_interval_s=poll_s,
        step_rows=steps,
    )


@DBOS.step()
def step_a(i: int) -> int:
    return i


@DBOS.step()
def step_b(i: int) -> int:
    return i


@DBOS.step()
def step_c(i: int) -> int:
    return i


@DBOS.workflow(name="noop_flow")
def noop_flow(i: int) -> int:
    return step_c(step_b(step_a(i)))


def worker(index: int, args: list[str]) -> None:
    url = args[0]
    DBOS(
        config={
            "name": APP,
            "system_database_url": url,
            "application_version": VERSION,
            "executor_id": f"bench-{index}",
            "log_level": "WARNING",
        }
    )
    peer_common.wait_for_go()
    DBOS.launch()
    try:
        peer_common.wait_forever()
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    peer_common.main(run, worker)
