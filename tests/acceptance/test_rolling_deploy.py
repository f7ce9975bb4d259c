"""A rolling deploy with worker processes: old (v1) and new (v2) workers side by side.

Jobs are submitted under both versions of the ``rolling`` test flow
(``tests/support/rolling_v1.py``, ``rolling_v2.py``: one flow name, two
versions); each worker process loads one of them through
``ENGINE_FLOW_MODULES``. Every job of both versions finishes, each step run
by a worker of its job's version, with one attempt (a refusal costs none).
Once only v2 workers run, a v1 job waits (refused, at no attempt, shown
as orphaned by ``engine flows show``), then finishes when a v1 worker
starts. Both transports: the PostgreSQL queue, and SQS (moto's server on
127.0.0.1).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import rolling_v1
import rolling_v2
from harness import fast_settings, start_worker_process, wait_until, worker_env
from sqs_support import fast_moto_clock, moto_server, queue_name, server_env

from engine import submit
from engine.config import Settings
from engine.transports.outbox import Publisher
from engine.transports.postgres import PostgresTransport
from engine.transports.sqs import SqsSettings, SqsTransport
from engine.transports.sqs_queues import create_queues
from engine.worker.processes import WorkerProcess, stop_all

pytestmark = pytest.mark.acceptance

JOBS_PER_VERSION = 4
PARTS = 3
# one plan, a work per part, a total (and, in v2, an audit)
STEPS = {1: 1 + PARTS + 1, 2: 1 + PARTS + 2}
# SQS visibility of a received copy (above the FAST heartbeat of 5 s)
HELD_S = 10.0


class Output:
    """Drains a worker's pipe as it comes (a full pipe would block the worker)."""

    def __init__(self, proc: WorkerProcess) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: WorkerProcess) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)


class Deploy:
    """Starts workers of one version or the other; stops them all at the end."""

    def __init__(self, settings: Settings, overrides: dict[str, Any]) -> None:
        self.settings = settings
        self.overrides = overrides
        self.procs: list[tuple[WorkerProcess, Output]] = []

    def worker(self, version: int) -> WorkerProcess:
        proc = start_worker_process(
            self.settings,
            "--concurrency",
            "2",
            flow_modules=[f"rolling_v{version}"],
            refusal_delay_s=0.5,
            **self.overrides,
        )
        self.procs.append((proc, Output(proc)))
        return proc

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``engine ARGS`` as an operator runs it (the new deploy's flow modules)."""
        env = worker_env(self.settings, flow_modules=["rolling_v2"], **self.overrides)
        result = subprocess.run(
            [sys.executable, "-m", "engine", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        print(f"$ engine {' '.join(args)}\n{result.stdout}")  # the transcript (pytest -s)
        return result

    def show(self) -> dict[int, dict[str, Any]]:
        shown = json.loads(self.cli("flows", "show", "rolling", "--json").stdout)
        self.cli("flows", "show", "rolling")
        return {v["version"]: v for v in shown["versions"]}

    def dump(self) -> None:
        for proc, out in self.procs:
            print(f"--- worker {proc.pid}:\n" + "".join(out.lines[-60:]))

    def stop(self) -> None:
        stop_all([p for p, _ in self.procs], grace_s=30)


def worker_id(conn: psycopg.Connection[Any], proc: WorkerProcess) -> str:
    row = wait_until(
        lambda: conn.execute(
            "SELECT id FROM engine_workers WHERE pid = %s AND status = 'running'", (proc.pid,)
        ).fetchone(),
        timeout=60,
        what=f"worker {proc.pid} to register",
    )
    return str(row["id"])


def scalar(conn: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return next(iter(row.values()))


@pytest.fixture(params=["postgres", "sqs"])
def transport(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> Iterator[tuple[dict[str, Any], Publisher]]:
    """The settings a worker of this transport needs, and a publisher for submits."""
    if request.param == "postgres":
        publisher = PostgresTransport(settings)
        yield {}, publisher
        publisher.close()
        return
    fast_moto_clock(monkeypatch)
    with moto_server() as endpoint, server_env(monkeypatch, endpoint):
        # A copy received by a worker the test pauses (SIGSTOP below) is hidden until its
        # visibility timeout ends: short, so that wait stays well inside the test's bound.
        made = create_queues(SqsSettings(), visibility_s=HELD_S, name=queue_name("rolling"))
        sqs = SqsTransport(SqsSettings(queue_url=made.url))
        yield {"transport": "sqs", "sqs_queue_url": made.url, "visibility_s": HELD_S}, sqs
        sqs.close()


def test_rolling_deploy__jobs_of_both_versions_finish_each_on_its_version_at_one_attempt(
    settings: Settings,
    conn: psycopg.Connection[Any],
    transport: tuple[dict[str, Any], Publisher],
) -> None:
    overrides, publisher = transport
    fast = fast_settings(settings, **overrides)
    deploy = Deploy(settings, overrides)

    def submit_as(version: int, n: int) -> Any:
        flow = (rolling_v1 if version == 1 else rolling_v2).flow
        return submit(flow, {"n": n, "parts": PARTS}, settings=fast, publisher=publisher).job_id

    try:
        # the old deploy's worker and the new one's, side by side
        old, new = deploy.worker(1), deploy.worker(2)
        old_id, new_id = worker_id(conn, old), worker_id(conn, new)
        jobs = {
            version: [submit_as(version, n) for n in range(JOBS_PER_VERSION)] for version in (1, 2)
        }
        before = deploy.show()
        assert before[1]["workers"] == [old_id] and before[2]["workers"] == [new_id]
        wait_until(
            lambda: scalar(conn, "SELECT count(*) FROM engine_jobs WHERE status <> 'done'") == 0,
            timeout=180,
            what="every job of both versions to finish",
        )
        deploy.cli("runs", "--flow", "rolling")
        for version, owner in ((1, old_id), (2, new_id)):
            for job in jobs[version]:
                effects = conn.execute(
                    "SELECT step, worker FROM test_effects WHERE job_id = %s", (job,)
                ).fetchall()
                assert len(effects) == STEPS[version]
                assert {e["step"].split(".")[0] for e in effects} == {f"v{version}"}
                assert {e["worker"].rsplit("/", 1)[0] for e in effects} == {owner}
        # a worker that cannot run a step refused it at no attempt
        assert scalar(conn, "SELECT count(*) FROM engine_step_runs WHERE attempts <> 1") == 0
        assert scalar(conn, "SELECT count(*) FROM engine_step_runs") == JOBS_PER_VERSION * (
            STEPS[1] + STEPS[2]
        )
        assert scalar(conn, "SELECT count(*) FROM test_effects") == JOBS_PER_VERSION * (
            STEPS[1] + STEPS[2]
        )
        assert scalar(conn, "SELECT count(*) FROM engine_history WHERE kind = 'claim_refused'") > 0

        # the old deploy is gone: only v2 workers run
        stop_all([old], grace_s=30)
        assert scalar(conn, "SELECT status FROM engine_workers WHERE id = %s", old_id) == "stopped"
        late = submit_as(1, 100)
        refusals = "SELECT count(*) FROM engine_events WHERE job_id = %s AND kind = 'claim_refused'"
        wait_until(
            lambda: scalar(conn, refusals, late) >= 2,
            timeout=60,
            what="the v2 worker to refuse the v1 job (twice: its copy goes round)",
        )
        assert scalar(conn, "SELECT status FROM engine_jobs WHERE id = %s", late) == "pending"
        assert (
            scalar(conn, "SELECT sum(attempts) FROM engine_step_runs WHERE job_id = %s", late) == 0
        )
        waiting = deploy.show()
        assert (waiting[1]["active_jobs"], waiting[1]["workers"], waiting[1]["orphaned"]) == (
            1,
            [],
            True,
        )
        assert waiting[2]["workers"] == [new_id]

        # a v1 worker starts again: the waiting job finishes
        again = deploy.worker(1)
        again_id = worker_id(conn, again)
        if overrides.get("transport") == "sqs":
            # moto's long poll looks at a delayed copy only when a poll starts (a
            # copy coming visible wakes no poll in flight), and the v2 worker's
            # polls start in step with the copies it sends round itself: it would
            # win every copy (SQS answers a long poll as soon as a copy is
            # visible). Paused until the v1 worker has claimed the job's first step.
            # Paused while it holds the job's copy (received, not yet refused and sent
            # round: a poll answered as it stopped, or mid-refusal), that copy comes back
            # only when its visibility ends: HELD_S, well inside this wait (it was the
            # whole 60 s once, and the wait timed out).
            os.kill(new.pid, signal.SIGSTOP)
            try:
                claimed = (
                    "SELECT count(*) FROM engine_history WHERE job_id = %s AND kind = 'claimed'"
                )
                wait_until(
                    lambda: scalar(conn, claimed, late) > 0,
                    timeout=60,
                    what="the v1 worker to claim the v1 job",
                )
            finally:
                os.kill(new.pid, signal.SIGCONT)
        wait_until(
            lambda: scalar(conn, "SELECT status FROM engine_jobs WHERE id = %s", late) == "done",
            timeout=120,
            what="the v1 job to finish once a v1 worker runs",
        )
        workers = {
            e["worker"].rsplit("/", 1)[0]
            for e in conn.execute(
                "SELECT worker FROM test_effects WHERE job_id = %s", (late,)
            ).fetchall()
        }
        assert workers == {again_id}
        assert scalar(conn, "SELECT count(*) FROM engine_step_runs WHERE attempts <> 1") == 0
        after = deploy.show()
        assert (after[1]["active_jobs"], after[1]["workers"]) == (0, [again_id])
        assert (after[2]["active_jobs"], after[2]["workers"]) == (0, [new_id])
        deploy.cli("workers")
    except BaseException:
        deploy.dump()
        raise
    finally:
        deploy.stop()
