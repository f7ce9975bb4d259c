"""Commit-to-claim latency: from the caller's COMMIT of a submit to the first claim.

For each connection kind a caller can submit on, and for each transport, one
worker process (``engine worker``, the default sweep interval) runs ``noop``
jobs one at a time: submit, wait until the job is done, wait a random gap,
submit the next. The gap is drawn uniformly over one sweep interval, so a kind
that relies on the sweeper's relay is measured at every phase of the sweep
(a fixed gap would land on the same phase each time), and every submit finds
the worker idle. Kinds take turns, so they see the same conditions.

Both ends are read from the database clock. The start is ``clock_timestamp()``
read on the caller's connection as the last statement before its COMMIT
(psycopg, SQLAlchemy ``Connection``, ``Session``); where the commit is not the
caller's (a psycopg connection in autocommit mode, or no connection: the
engine opens its own) it is the ``submitted`` event's ``at``, the last row
submit writes before that commit. The end is the first ``claimed`` event of
one of the job's step runs (``engine_step_runs.claimed_at`` if there is none).
Both starts come a moment before the commit, so the figure is, if anything, a
little long.

    BENCH_LATENCY_N=20                      submits per (transport, connection kind)
    BENCH_LATENCY_TRANSPORTS=postgres,sqs   sqs: moto's server on 127.0.0.1
    BENCH_LATENCY_TIMEOUT_S=60              bound on one submit's wait (never a failure)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

from bench import noop
from bench.common import (
    Workers,
    drop_database,
    env_float,
    env_int,
    fresh_database,
    log,
    settings_for,
)
from engine import submit
from engine.config import Settings
from engine.flow import Flow
from engine.flow.registry import Registry
from engine.store import db
from engine.transports.outbox import Publisher

KINDS = ("psycopg", "psycopg_autocommit", "sqlalchemy_connection", "sqlalchemy_session", "none")

SUBMITTED_AT = "SELECT min(at) FROM engine_events WHERE job_id = %s AND kind = 'submitted'"
FIRST_CLAIM = """
SELECT coalesce(
    (SELECT min(e.at) FROM engine_history AS e JOIN engine_step_runs AS r ON r.id = e.step_run_id
     WHERE r.job_id = %(job)s AND e.kind IN ('claimed', 'reclaimed')),
    (SELECT min(claimed_at) FROM engine_step_runs WHERE job_id = %(job)s))
"""
JOB_STATUS = "SELECT status FROM engine_jobs WHERE id = %s"

# one submit on one connection kind: the job id, and the caller's clock read before
# its commit (None when the commit is not the caller's)
_PARAMS = itertools.count()  # a fresh noop parameter (so a fresh fingerprint) per submit

Submitter = Callable[[int], tuple[uuid.UUID, dt.datetime | None]]


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (PostgreSQL's percentile_cont)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def report(transport: str, kind: str, samples: list[float]) -> None:
    """One JSON line per (transport, connection kind); ``value`` is the p50."""
    p50 = round(percentile(samples, 0.5), 3) if samples else None
    line = {
        "bench": f"latency/{transport}/{kind}",
        "metric": "commit_to_claim",
        "value": p50,
        "unit": "ms",
        "n": len(samples),
        "p50_ms": p50,
        "p95_ms": round(percentile(samples, 0.95), 3) if samples else None,
        "max_ms": round(max(samples), 3) if samples else None,
    }
    print(json.dumps(line), flush=True)


@contextlib.contextmanager
def submitters(
    settings: Settings, flow: Flow, publisher: Publisher
) -> Iterator[dict[str, Submitter]]:
    """A submit function per connection kind; connections stay open across submits."""
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    from engine.store.read import sqlalchemy_engine

    def params(i: int) -> dict[str, int]:
        return {"i": i}

    with contextlib.ExitStack() as stack:
        plain = stack.enter_context(db.connect(settings))
        auto = stack.enter_context(db.connect(settings, autocommit=True))
        sa_engine = sqlalchemy_engine(settings)
        stack.callback(sa_engine.dispose)

        def on_psycopg(i: int) -> tuple[uuid.UUID, dt.datetime | None]:
            job = submit(flow, params(i), conn=plain, settings=settings, publisher=publisher)
            at = plain.execute("SELECT clock_timestamp() AS at").fetchone()["at"]  # type: ignore[index]
            plain.commit()
            return job.job_id, at

        def on_autocommit(i: int) -> tuple[uuid.UUID, dt.datetime | None]:
            job = submit(flow, params(i), conn=auto, settings=settings, publisher=publisher)
            return job.job_id, None

        def on_sa_connection(i: int) -> tuple[uuid.UUID, dt.datetime | None]:
            with sa_engine.connect() as conn:
                job = submit(flow, params(i), conn=conn, settings=settings, publisher=publisher)
                at = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
                conn.commit()
            return job.job_id, at

        def on_sa_session(i: int) -> tuple[uuid.UUID, dt.datetime | None]:
            with Session(sa_engine) as session:
                job = submit(flow, params(i), conn=session, settings=settings, publisher=publisher)
                at = session.execute(text("SELECT clock_timestamp()")).scalar_one()
                session.commit()  # its after_commit hook (if any) runs inside this call
            return job.job_id, at

        def on_none(i: int) -> tuple[uuid.UUID, dt.datetime | None]:
            job = submit(flow, params(i), settings=settings, publisher=publisher)
            return job.job_id, None

        yield {
            "psycopg": on_psycopg,
            "psycopg_autocommit": on_autocommit,
            "sqlalchemy_connection": on_sa_connection,
            "sqlalchemy_session": on_sa_session,
            "none": on_none,
        }


def wait_done(conn: psycopg.Connection[Any], job_id: uuid.UUID, timeout_s: float) -> bool:
    """Until the job ended (the worker is idle again); False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = conn.execute(JOB_STATUS, (job_id,)).fetchone()
        if row and row[0] in ("done", "failed", "cancelled"):
            return True
        time.sleep(0.02)
    return False


def one_round(
    transport: str,
    by_kind: dict[str, Submitter],
    watch: psycopg.Connection[Any],
    workers: Workers,
    samples: dict[str, list[float]],
    rng: random.Random,
    sweep_s: float,
    timeout_s: float,
) -> bool:
    """One submit per kind, each after a random gap on an idle worker; False if it died."""
    for kind in KINDS:
        if workers.exited():
            log(f"latency/{transport}: the worker exited early")
            workers.show_logs()
            return False
        time.sleep(0.05 + rng.uniform(0.0, sweep_s))
        job_id, before_commit = by_kind[kind](next(_PARAMS))
        if not wait_done(watch, job_id, timeout_s):
            log(f"latency/{transport}/{kind}: job {job_id} not done in {timeout_s:g} s")
            continue
        if before_commit is None:
            before_commit = watch.execute(SUBMITTED_AT, (job_id,)).fetchone()[0]  # type: ignore[index]
        claimed = watch.execute(FIRST_CLAIM, {"job": job_id}).fetchone()[0]  # type: ignore[index]
        if before_commit is None or claimed is None:
            log(f"latency/{transport}/{kind}: job {job_id} has no submit or claim time")
            continue
        samples[kind].append((claimed - before_commit).total_seconds() * 1000)
    return True


def measure(
    transport: str,
    info: str,
    publisher: Publisher,
    n: int,
    timeout_s: float,
    worker_env: dict[str, str],
) -> None:
    settings = settings_for(info)
    sweep_s = settings.sweep_interval_s
    flow = Registry([noop.flow]).get("noop")
    rng = random.Random(10)
    samples: dict[str, list[float]] = {k: [] for k in KINDS}
    log(
        f"latency/{transport}: {n} submits per connection kind, one worker, "
        f"sweep every {sweep_s:g} s, a random gap of up to {sweep_s:g} s between submits ..."
    )
    started = time.monotonic()
    with (
        psycopg.connect(info, autocommit=True) as watch,
        Workers(info, count=1, concurrency=1, modules="bench.noop", env=worker_env) as workers,
        submitters(settings, flow, publisher) as by_kind,
    ):
        # warm-up (not counted): the worker is up and has claimed once
        warm, _ = by_kind["none"](next(_PARAMS))
        if not wait_done(watch, warm, timeout_s + 30):
            log(f"latency/{transport}: the worker did not finish a first job; skipped")
            workers.show_logs()
            return
        for _ in range(n):
            if not one_round(transport, by_kind, watch, workers, samples, rng, sweep_s, timeout_s):
                break
    for kind in KINDS:
        report(transport, kind, samples[kind])
    summary = ", ".join(f"{k} p50 {percentile(v, 0.5):.0f} ms" for k, v in samples.items() if v)
    log(f"latency/{transport}: {summary} ({time.monotonic() - started:.0f} s)")


def run_postgres(n: int, timeout_s: float) -> None:
    from engine.transports.postgres import PostgresTransport

    info = fresh_database()
    publisher = PostgresTransport(settings_for(info))
    try:
        measure("postgres", info, publisher, n, timeout_s, {"ENGINE_TRANSPORT": "postgres"})
    finally:
        publisher.close()


def run_sqs(n: int, timeout_s: float) -> None:
    from bench.sqs import AWS_ENV, moto_server
    from engine.transports.sqs import SqsSettings, SqsTransport
    from engine.transports.sqs_queues import create_queues

    with moto_server() as endpoint:
        queues = create_queues(SqsSettings(), visibility_s=120, name="engine-bench-latency")
        info = fresh_database()
        publisher = SqsTransport(SqsSettings(queue_url=queues.url))
        env = {
            **AWS_ENV,
            "AWS_ENDPOINT_URL": endpoint,
            "ENGINE_TRANSPORT": "sqs",
            "ENGINE_SQS_QUEUE_URL": queues.url,
        }
        try:
            measure("sqs", info, publisher, n, timeout_s, env)
        finally:
            publisher.close()


def run() -> None:
    n = max(1, env_int("BENCH_LATENCY_N", 20))
    timeout_s = env_float("BENCH_LATENCY_TIMEOUT_S", 60)
    transports = (os.environ.get("BENCH_LATENCY_TRANSPORTS") or "postgres,sqs").split(",")
    try:
        for transport in (t.strip() for t in transports if t.strip()):
            if transport == "postgres":
                run_postgres(n, timeout_s)
            elif transport == "sqs":
                run_sqs(n, timeout_s)
            else:
                log(f"BENCH_LATENCY_TRANSPORTS: {transport!r} is not postgres or sqs")
    finally:
        drop_database()


if __name__ == "__main__":
    run()
