"""Concurrency keys on the SQS transport (moto in process, real PostgreSQL, a worker thread).

A refused step run over its limit must not burn SQS receives: with a redrive
after a single receive, a copy returned to the queue (rather than replaced)
would end in the dead-letter queue. The holder's checkpoint announces the
waiter through the outbox, relayed after its commit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, run_of, thread_worker, wait_job_ended, wait_until

from engine import submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.transports.sqs import SqsTransport
from engine.transports.sqs_queues import Queues

REGISTRY = Registry.load(["testflows", "keyedflows"])


@pytest.fixture
def max_receive_count() -> int:
    # SQS moves a message to the dead-letter queue on its second receive
    return 1


def test_sqs__a_step_run_over_its_limit_waits_without_burning_receives(
    settings: Settings,
    conn: psycopg.Connection[Any],
    queues: Queues,
    transports: Callable[[], SqsTransport],
    tmp_path: Path,
) -> None:
    fast = fast_settings(
        settings,
        concurrency=2,
        transport="sqs",
        flow_modules=["testflows", "keyedflows"],
        over_limit_delay_s=1.0,  # refused again and again while the holder runs
    )
    publisher = transports()
    hold = tmp_path / "hold"
    holder = submit(
        "keyed",
        {"group": "q", "hold_file": str(hold)},
        settings=fast,
        registry=REGISTRY,
        publisher=publisher,
    ).job_id
    with thread_worker(fast, REGISTRY, transport=transports()) as worker:
        wait_until(lambda: (tmp_path / "hold.started").exists(), what="the holder to start")
        waiter = submit(
            "keyed", {"group": "q", "n": 1}, settings=fast, registry=REGISTRY, publisher=publisher
        ).job_id
        wait_until(lambda: (worker.outcomes.get("refused") or 0) >= 3, what="three refusals")
        hold.with_suffix(".release").touch()
        assert wait_job_ended(conn, holder) == "done"
        assert wait_job_ended(conn, waiter) == "done"
    b = run_of(conn, waiter, "b")
    assert b["attempts"] == 1, "the refusals used no attempt"
    refusals = conn.execute(
        "SELECT detail FROM engine_history WHERE job_id = %s AND kind = 'claim_refused'",
        (waiter,),
    ).fetchall()
    reasons = [r["detail"]["reason"] for r in refusals]
    assert reasons.count("over_limit") >= 3
    # a delayed copy arriving after the waiter ran is refused as finished and deleted
    assert set(reasons) <= {"over_limit", "finished"}
    # nothing reached SQS's dead-letter queue (the sweeper records what it finds there)
    dead = conn.execute("SELECT count(*) AS n FROM engine_dead_letters").fetchone()
    assert dead is not None and dead["n"] == 0
    # the holder's checkpoint announced the waiter, relayed once committed (the
    # refusals' delayed copies are outbox rows too, each due later than made)
    announcements = conn.execute(
        "SELECT count(*) FILTER (WHERE published_at IS NOT NULL) AS published, count(*) AS n "
        "FROM engine_outbox WHERE step_run_id = %s AND deliver_at < created_at + interval '0.5 s'",
        (b["id"],),
    ).fetchone()
    assert announcements == {"published": 2, "n": 2}
