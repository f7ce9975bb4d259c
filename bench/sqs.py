"""The engine on the SQS transport, against moto's server on 127.0.0.1.

Submits ``noop`` jobs (three steps each), then times worker processes
draining them through one queue. Each worker is ``python -m bench.sqs
worker``: the engine's own ``Worker`` with an :class:`SqsTransport` whose
HTTP requests to SQS are counted through botocore's events (retries
included); each writes its counts to a file when it stops. Figures: steps
per second and SQS calls per step (receive, delete, visibility changes,
send). moto, not SQS, is the slow part here (one Python process serving
every worker), so steps/s is a floor; calls per step is what carries over.

    BENCH_SQS_JOBS=500          noop jobs
    BENCH_SQS_PROCS=2           worker processes
    BENCH_SQS_CONCURRENCY=4     slots per worker
    BENCH_SQS_TIMEOUT_S=300     bound on the run
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from bench import noop
from bench.common import (
    ROOT,
    drop_database,
    emit,
    env_float,
    env_int,
    fresh_database,
    log,
    settings_for,
)
from bench.throughput import ELAPSED, PROGRESS, STEPS_PER_JOB
from engine import submit
from engine.flow.registry import Registry
from engine.store import db
from engine.transports.outbox import relay
from engine.transports.sqs import SqsSettings, SqsTransport
from engine.transports.sqs_queues import create_queues
from engine.worker.processes import start_worker, stop_all

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# the calls the budget counts (at most 3 per step), and the sends beside them
COUNTED = {
    "receive": ("ReceiveMessage",),
    "delete": ("DeleteMessageBatch", "DeleteMessage"),
    "visibility": ("ChangeMessageVisibilityBatch", "ChangeMessageVisibility"),
    "send": ("SendMessageBatch", "SendMessage"),
}


def _speed_up_moto() -> None:
    """moto's SQS reads the clock through datetime arithmetic several times per queued
    message on every receive; the same clock without it keeps moto from being all we time."""
    from moto.sqs import models

    models.unix_time = lambda dt=None: time.time()  # type: ignore[assignment]
    models.unix_time_millis = lambda dt=None: time.time() * 1000.0  # type: ignore[assignment]


def _submit(info: str, queue_url: str, jobs: int) -> None:
    settings = settings_for(info)
    flow = Registry([noop.flow]).get("noop")
    publisher = SqsTransport(SqsSettings(queue_url=queue_url))
    try:
        with db.connect(settings) as conn:
            with conn.transaction():
                for i in range(jobs):
                    submit(flow, {"i": i}, conn=conn, settings=settings, publisher=publisher)
            while relay(conn, publisher, limit=1000):
                pass
    finally:
        publisher.close()


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's SQS server on 127.0.0.1, boto3 pointed at it (the environment restored after)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    _speed_up_moto()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in [*AWS_ENV, "AWS_ENDPOINT_URL"]}
    try:
        _, port = server.get_host_and_port()
        endpoint = f"http://127.0.0.1:{port}"
        os.environ.update(AWS_ENV, AWS_ENDPOINT_URL=endpoint)
        yield endpoint
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run() -> None:
    jobs = env_int("BENCH_SQS_JOBS", 500)
    procs = env_int("BENCH_SQS_PROCS", 2)
    concurrency = env_int("BENCH_SQS_CONCURRENCY", 4)
    timeout_s = env_float("BENCH_SQS_TIMEOUT_S", 300)
    bench = f"sqs/procs={procs},concurrency={concurrency}"
    try:
        with moto_server() as endpoint:
            queues = create_queues(SqsSettings(), visibility_s=120, name="engine-bench")
            info = fresh_database()
            _submit(info, queues.url, jobs)
            log(f"{bench}: draining {jobs} jobs through moto at {endpoint} ...")
            counts, done = _drain(info, queues.url, jobs, procs, concurrency, timeout_s, bench)
            with psycopg.connect(info, autocommit=True) as conn:
                elapsed = conn.execute(ELAPSED).fetchone()[0]  # type: ignore[index]
            steps = STEPS_PER_JOB * done
            rate = steps / elapsed if elapsed else None
            emit(bench, "steps_per_s", rate, "steps/s")
            emit(bench, "jobs_done", done, "jobs")
            if steps:
                budget = 0
                for name, operations in COUNTED.items():
                    n = sum(counts.get(op, 0) for op in operations)
                    emit(bench, f"{name}_calls_per_step", n / steps, "calls/step")
                    budget += n if name != "send" else 0
                emit(
                    bench, "receive_delete_visibility_calls_per_step", budget / steps, "calls/step"
                )
                emit(bench, "all_calls_per_step", sum(counts.values()) / steps, "calls/step")
            calls = dict(sorted(counts.items()))
            log(f"{bench}: {steps} steps in {elapsed or 0:.2f} s; SQS calls {calls}")
    finally:
        drop_database()


def _drain(
    info: str, queue_url: str, jobs: int, procs: int, concurrency: int, timeout_s: float, bench: str
) -> tuple[dict[str, int], int]:
    """Run the workers until every job ended; their SQS call counts, summed, and jobs done."""
    env = {
        "ENGINE_DATABASE_URL": info,
        "ENGINE_FLOW_MODULES": "bench.noop",
        "ENGINE_TRANSPORT": "sqs",
        "ENGINE_SQS_QUEUE_URL": queue_url,
        "ENGINE_CONCURRENCY": str(concurrency),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    done = 0
    with tempfile.TemporaryDirectory(prefix="bench-sqs-") as tmp:
        files = [Path(tmp) / f"calls-{i}.json" for i in range(procs)]
        workers = [
            # the engine's worker wrapped to count its SQS calls: python -m bench.sqs worker FILE
            start_worker(
                str(calls),
                env=env,
                output=Path(tmp) / f"worker-{i}.log",
                cwd=ROOT,
                module="bench.sqs",
            )
            for i, calls in enumerate(files)
        ]
        try:
            deadline = time.monotonic() + timeout_s
            with psycopg.connect(info, autocommit=True) as conn:
                while True:
                    done, ended = conn.execute(PROGRESS).fetchone() or (0, 0)
                    if done + ended >= jobs:
                        break
                    if time.monotonic() > deadline or any(not w.alive() for w in workers):
                        log(f"{bench}: stopped early with {done}/{jobs} jobs done")
                        break
                    time.sleep(0.2)
        finally:
            stop_all(workers, grace_s=30)
            for w in workers:
                if w.returncode != 0 or os.environ.get("BENCH_VERBOSE"):
                    log(f"--- worker {w.pid} (exit {w.returncode})")
                    print(w.output()[-4000:], file=sys.stderr)
        counts: dict[str, int] = {}
        for calls in files:
            if calls.exists():
                for op, n in json.loads(calls.read_text()).items():
                    counts[op] = counts.get(op, 0) + n
    return counts, done


def worker(calls_file: str) -> int:
    """``engine worker`` on the SQS transport, writing its SQS call counts on exit."""
    from engine.config import Settings
    from engine.worker.worker import Worker

    logging.basicConfig(level=logging.WARNING)
    settings = Settings()
    transport = SqsTransport(SqsSettings())
    w = Worker(settings, Registry.load(settings.flow_modules), transport=transport)
    w.install_signal_handlers()
    try:
        return w.run()
    finally:
        Path(calls_file).write_text(json.dumps(transport.api_calls()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        sys.exit(worker(sys.argv[2]))
    run()
