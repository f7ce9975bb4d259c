"""Worker processes sharing one SQS queue (moto's server on 127.0.0.1) and one database.

Every message is sent a second time by the test and one worker is killed with
SIGKILL mid-run. Checked on database rows, never on delivery counts (moto's
server itself delivers duplicates under concurrent receives).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, flows_registry, start_worker_process, wait_until
from sqs_support import env_int, fast_moto_clock, moto_server, queue_name, server_env

from engine import submit
from engine.config import Settings
from engine.store import db
from engine.transports.base import Outgoing
from engine.transports.message import StepMessage
from engine.transports.outbox import relay
from engine.transports.sqs import SqsSettings, SqsTransport
from engine.transports.sqs_queues import create_queues
from engine.worker.processes import WorkerProcess, stop_all

pytestmark = pytest.mark.acceptance

JOBS = env_int("ENGINE_TEST_SQS_JOBS", 200)
WORKERS = 4


class Duplicator:
    """Sends every message the engine published (its outbox rows) a second time."""

    def __init__(self, settings: Settings, transport: SqsTransport) -> None:
        self.settings = settings
        self.transport = transport
        self.sent = 0
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="duplicator", daemon=True)

    def _run(self) -> None:
        # ids, not a high-water mark: rows commit (and get published) out of id order
        seen: list[int] = []
        try:
            with db.connect(self.settings, autocommit=True) as conn:
                while True:
                    rows = conn.execute(
                        "SELECT o.id, s.job_id, o.step_run_id FROM engine_outbox AS o"
                        " JOIN engine_step_runs AS s ON s.id = o.step_run_id"
                        " WHERE o.published_at IS NOT NULL AND o.id <> ALL (%s)"
                        " ORDER BY o.id LIMIT 100",
                        (seen,),
                    ).fetchall()
                    if not rows:
                        if self.stop.is_set():  # drained: everything published was sent again
                            return
                        self.stop.wait(0.05)
                        continue
                    seen.extend(r["id"] for r in rows)
                    self.transport.publish(
                        None,
                        [
                            Outgoing(StepMessage(job_id=r["job_id"], step_run_id=r["step_run_id"]))
                            for r in rows
                        ],
                    )
                    self.sent += len(rows)
        except BaseException as exc:
            self.errors.append(exc)

    def __enter__(self) -> Duplicator:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


class Output:
    """Reads a worker's output as it comes, so a full pipe never blocks the worker."""

    def __init__(self, proc: WorkerProcess) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: WorkerProcess) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)


def count(conn: psycopg.Connection[Any], query: str, *params: Any) -> int:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(next(iter(row.values())))


@pytest.fixture
def sqs_queue_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    fast_moto_clock(monkeypatch)
    with moto_server() as endpoint, server_env(monkeypatch, endpoint):
        made = create_queues(SqsSettings(), visibility_s=60, name=queue_name("procs"))
        yield made.url


def test_processes__duplicates_and_a_kill9_every_job_finishes_and_no_effect_commits_twice(
    settings: Settings, conn: psycopg.Connection[Any], sqs_queue_url: str, tmp_path: Path
) -> None:
    publisher = SqsTransport(SqsSettings(queue_url=sqs_queue_url))
    fast = fast_settings(settings)
    flow = flows_registry().get("chain")
    hold = tmp_path / "hold"
    held = None
    with db.connect(fast) as own:
        with own.transaction():
            for n in range(JOBS):
                # one job's step b waits on its first attempt until the test lets it go
                params = {"n": n, "hold_file": str(hold)} if n == JOBS // 2 else {"n": n}
                job = submit(flow, params, conn=own, settings=fast, publisher=publisher)
                held = job.job_id if n == JOBS // 2 else held
        while relay(own, publisher, limit=1000):
            pass
    t0 = time.monotonic()
    # every step's message is sent three times, so every step must have one:
    # no eager successors here (they run without a message)
    overrides = {"transport": "sqs", "sqs_queue_url": sqs_queue_url, "eager_successors": False}
    procs = [
        start_worker_process(settings, "--concurrency", "2", **overrides) for _ in range(WORKERS)
    ]
    outputs = [Output(p) for p in procs]
    victim = procs[0]
    try:
        with Duplicator(fast, SqsTransport(SqsSettings(queue_url=sqs_queue_url))) as duplicator:
            wait_until(
                lambda: (
                    count(conn, "SELECT count(*) FROM engine_jobs WHERE status = 'done'")
                    >= JOBS // 4
                ),
                timeout=120,
                what="a quarter of the jobs",
            )
            # the victim is whoever runs the held step: killed mid-step, for sure
            holder = wait_until(
                lambda: conn.execute(
                    "SELECT lease_owner FROM engine_step_runs WHERE job_id = %s AND step = 'b'"
                    " AND status = 'running'",
                    (held,),
                ).fetchone(),
                timeout=60,
                what="the held step to start",
            )["lease_owner"]
            victim = next(p for p in procs if f":{p.pid}/" in holder)
            victim.kill()
            # time moves past the victim's leases instead of waiting them out
            killed_holding = conn.execute(
                "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s'"
                " WHERE status = 'running' AND lease_owner LIKE %s",
                (f"%:{victim.pid}/%",),
            ).rowcount
            started = time.monotonic()
            killed_at = started - t0
            wait_until(
                lambda: (
                    count(
                        conn,
                        "SELECT count(*) FROM engine_jobs WHERE status NOT IN ('done', 'failed')",
                    )
                    == 0
                ),
                timeout=180,
                what="every job to end",
            )
            recovery_s = time.monotonic() - started
        assert not duplicator.errors
        survivors = [p for p in procs if p is not victim]
        assert all(p.poll() is None for p in survivors), "a surviving worker exited"
    except BaseException:
        for proc, out in zip(procs, outputs, strict=True):
            print(f"--- worker {proc.pid}:\n" + "".join(out.lines[-40:]))
        raise
    finally:
        stop_all(procs, grace_s=30)
        publisher.close()

    assert killed_holding >= 1
    assert duplicator.sent >= 3 * JOBS
    assert count(conn, "SELECT count(*) FROM engine_jobs WHERE status = 'done'") == JOBS
    # one effect per step run: committed once, by the attempt that finished it
    assert count(conn, "SELECT count(*) FROM test_effects") == 3 * JOBS
    assert (
        count(
            conn,
            "SELECT count(*) FROM test_effects AS e"
            " JOIN engine_step_runs AS s ON s.job_id = e.job_id AND s.step = e.step"
            " WHERE s.status = 'done' AND s.attempts = e.attempt",
        )
        == 3 * JOBS
    )
    assert (
        count(
            conn,
            "SELECT count(*) FROM (SELECT step_run_id FROM engine_history WHERE kind = 'succeeded'"
            " GROUP BY step_run_id HAVING count(*) > 1) AS twice",
        )
        == 0
    )
    assert count(conn, "SELECT count(*) FROM engine_step_runs WHERE error IS NOT NULL") == 0
    reclaimed = count(
        conn, "SELECT count(*) FROM engine_step_runs WHERE attempts = 2 AND status = 'done'"
    )
    assert reclaimed >= 1, "the victim's step run was finished by another worker"
    held_b = "SELECT attempts FROM engine_step_runs WHERE job_id = %s AND step = 'b'"
    assert count(conn, held_b, held) == 2
    print(
        f"{JOBS} jobs; {duplicator.sent} duplicates; killed at {killed_at:.1f} s;"
        f" recovered in {recovery_s:.1f} s"
    )
