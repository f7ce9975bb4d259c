"""Versions in flight (issue 14, item 5): the roster, `engine flows show`, the orphan alert.

Time is moved by ageing rows (``last_seen_at``, ``created_at``), never by
sleeping; races between sweepers start behind a barrier.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import testflows
from harness import fast_settings, flows_registry, run_of

from engine import submit
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.heartbeat import Heartbeat
from engine.registry import Registry
from engine.runner import StepRunner
from engine.sweeper import Sweeper
from engine.transports.postgres import PostgresTransport
from engine.worker import connect_worker


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings)


@pytest.fixture
def runner_of(fast: Settings) -> Iterator[Any]:
    """A StepRunner (one slot) with only the flows given: a worker of some deploy."""
    opened: list[Any] = []

    def make(registry: Registry) -> tuple[StepRunner, PostgresTransport]:
        transport = PostgresTransport(fast)
        heartbeat = Heartbeat(fast, transport, "slot")
        conn = connect_worker(fast)
        conn.autocommit = True
        opened.append((transport, heartbeat, conn))
        runner = StepRunner(
            settings=fast,
            registry=registry,
            transport=transport,
            worker="slot",
            conn=conn,
            heartbeat=heartbeat,
            alerts=AlertRecorder(["log"]),
            may_continue=lambda: False,
        )
        return runner, transport

    yield make
    for transport, heartbeat, conn in opened:
        heartbeat.close()
        conn.close()
        transport.close()


# -- refusals and the sweeper's re-announcements ---------------------------------------


def test_refusal__a_waiting_step_run_keeps_one_copy_going_round_not_one_per_sweep(
    fast: Settings, conn: psycopg.Connection[Any], runner_of: Any
) -> None:
    # A v1 job waits while only workers of another deploy run. Each refusal
    # sends a fresh delayed copy; the sweeper must read that as "announced",
    # or it adds a copy every republish_after_s, each refused and sent round
    # again forever: copies (and claim attempts) grow for as long as it waits.
    settings = fast.model_copy(update={"refusal_delay_s": 60.0})
    job = submit("chain", {}, settings=settings, registry=flows_registry())
    a = run_of(conn, job.job_id, "a")["id"]
    # it has waited longer than republish_after_s already
    conn.execute(
        "UPDATE engine_step_runs SET available_at = available_at - interval '1 hour',"
        " created_at = created_at - interval '1 hour'"
    )
    conn.execute("UPDATE engine_outbox SET deliver_at = deliver_at - interval '1 hour'")
    runner, transport = runner_of(Registry([testflows.fan]))
    [received] = transport.receive(1, 30, 1)
    assert runner.handle(received).kind == "refused"
    Sweeper(settings, transport, "sweeper", AlertRecorder([])).sweep(conn)
    queue = conn.execute("SELECT body FROM engine_queue").fetchall()
    assert [json.loads(q["body"])["step_run_id"] for q in queue] == [str(a)]
    assert run_of(conn, job.job_id, "a")["attempts"] == 0
