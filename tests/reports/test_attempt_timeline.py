"""The timeline draws each attempt from when its step started running to when it stopped.

A slot claims a batch of step runs in one statement and runs them one after
another: each waits its turn on the worker after its claim, and that wait is
not running. The worker records when the step started (the event that ends
the attempt carries it, on the database's clock); events of an older engine,
without it, still draw from the claim.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from harness import fast_settings, flows_registry, thread_worker, wait_job_ended, wait_until

from engine import Registry, signal, submit
from engine.config import Settings
from engine.reports.context import build_run_report
from engine.reports.render import render_run_html
from engine.reports.svg import gantt_svg
from engine.reports.timeline import Attempt, attempts
from engine.runner import claim
from engine.store import Claimed, db
from engine.store.models import Event, EventKind
from engine.store.read import sqlalchemy_engine
from engine.transports.message import StepMessage

RUNNABLE = flows_registry().runnable()
SLACK = timedelta(milliseconds=50)  # how far a slot's clock may err from the database's


def _overlaps(bars: list[Attempt]) -> list[tuple[str, str]]:
    """Pairs of bars of one lane that overlap in time (bar: its start to its stop)."""
    found: list[tuple[str, str]] = []
    ordered = sorted(bars, key=lambda a: a.start)
    for before, after in itertools.pairwise(ordered):
        assert before.stopped is not None
        if after.start < before.stopped:
            found.append((before.label, after.label))
    return found


def test_timeline__a_batch_claimed_fan_out_on_one_slot_runs_one_bar_after_another(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    # one slot, batches of ten, quick parts grouped under one commit
    fast = fast_settings(settings, concurrency=1, claim_batch=10, group_commit_ms=2000)
    job = submit("fan", {"n": 24}, settings=fast, registry=flows_registry()).job_id
    with thread_worker(fast, worker_id="w1"):
        assert wait_job_ended(conn, job, timeout=60) == "done"

    report = build_run_report(sqlalchemy_engine(fast), job, flows_registry())
    (lane,) = report.lanes  # its one slot
    bars = report.attempts
    assert all(a.outcome == "succeeded" for a in bars), [(a.label, a.outcome) for a in bars]
    assert len(bars) == 24 + 2
    # claimed in batches: some were claimed before the one ahead of them stopped
    queued = [a for a in bars if a.start > a.claimed_at]
    assert queued, "no attempt waited its turn after its claim: the batch was not exercised"
    behind = [
        a
        for a in bars
        if any(b is not a and a.claimed_at < (b.stopped or b.start) <= a.start for b in bars)
    ]
    assert behind, "no attempt was claimed while another of its slot still ran"
    for a in bars:
        assert a.start_recorded, a
        assert a.stopped is not None and a.end is not None
        # within its claim and its end, but for the slot's clock error (milliseconds)
        assert a.claimed_at - SLACK <= a.start <= a.stopped <= a.end + SLACK, a
    assert _overlaps(bars) == [], "one slot runs one step at a time"

    # the step runs' table: started when their step did, not at their claim
    starts = {a.step_run_id: a.start for a in bars}
    # (never after it finished: the slot's clock may be a few milliseconds late)
    assert all(
        v.started_at == min(starts[v.id], v.finished_at or starts[v.id]) for v in report.steps
    ), "started when it ran"
    html = render_run_html(report)
    assert f"queued on {lane}" in html  # a bar's title tells the wait after its claim


def test_timeline__a_reclaimed_attempt_starts_when_it_ran_and_the_lost_one_at_its_claim(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    fast = fast_settings(settings)
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    a = conn.execute(
        "SELECT id FROM engine_step_runs WHERE job_id = %s AND step = 'a'", (job.job_id,)
    ).fetchone()
    assert a is not None
    with db.connect(fast) as c:
        message = StepMessage(job_id=job.job_id, step_run_id=a["id"])
        assert isinstance(claim(c, message, "vanished-worker", 30, RUNNABLE), Claimed)
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE id = %s",
        (a["id"],),
    )
    with thread_worker(fast, worker_id="w1"):
        assert wait_job_ended(conn, job.job_id) == "done"

    report = build_run_report(sqlalchemy_engine(fast), job.job_id, flows_registry())
    first, second = [x for x in report.attempts if x.label == "a"]
    assert (first.worker, first.outcome, first.start_recorded) == ("vanished-worker", "lost", False)
    assert first.start == first.claimed_at, "nothing says when it ran: drawn from its claim"
    assert second.worker.startswith("w1/"), "a slot of w1"
    assert (second.outcome, second.reclaimed_from) == ("succeeded", "vanished-worker")
    assert second.start_recorded
    assert second.end is not None and second.stopped is not None
    assert second.claimed_at - SLACK <= second.start <= second.stopped <= second.end + SLACK
    row = conn.execute(
        "SELECT detail FROM engine_history WHERE step_run_id = %s AND kind = 'succeeded'",
        (a["id"],),
    ).fetchone()
    assert row is not None and set(row["detail"]) >= {"started_at", "ran_s"}


T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RUN = uuid.uuid4()
JOB = uuid.uuid4()


def _event(n: int, kind: EventKind, at_s: float, detail: dict[str, Any] | None = None) -> Event:
    return Event(
        id=n,
        at=T0 + timedelta(seconds=at_s),
        kind=kind,
        job_id=JOB,
        step_run_id=RUN,
        worker="w1",
        attempt=1,
        detail=detail or {},
    )


def test_attempts__an_older_engine_s_events_without_a_start_draw_from_the_claim() -> None:
    (old,) = attempts([_event(1, EventKind.CLAIMED, 0), _event(2, EventKind.SUCCEEDED, 5)], {})
    assert (old.claimed_at, old.start, old.stopped, old.end) == (
        T0,
        T0,
        T0 + timedelta(seconds=5),
        T0 + timedelta(seconds=5),
    )
    assert not old.start_recorded


def test_attempts__a_recorded_start_and_run_time_make_the_bar() -> None:
    started = (T0 + timedelta(seconds=3)).isoformat()
    (new,) = attempts(
        [
            _event(1, EventKind.CLAIMED, 0),
            _event(2, EventKind.SUCCEEDED, 5, {"started_at": started, "ran_s": 1.5}),
        ],
        {},
    )
    assert new.start_recorded
    assert (new.claimed_at, new.start, new.stopped, new.end) == (
        T0,
        T0 + timedelta(seconds=3),
        T0 + timedelta(seconds=4.5),
        T0 + timedelta(seconds=5),
    )


def test_attempts__an_attempt_given_back_before_its_step_started_did_not_run() -> None:
    (released,) = attempts(
        [
            _event(1, EventKind.CLAIMED, 0),
            _event(2, EventKind.RELEASED, 2, {"reason": "worker stopping", "started_at": None}),
        ],
        {},
    )
    assert released.start_recorded and not released.ran
    assert released.start == released.stopped == released.end == T0 + timedelta(seconds=2)
    title = "; its step never started"
    assert title in str(gantt_svg([released], ["w1"], T0, T0 + timedelta(seconds=3)))


def test_attempts__a_live_attempt_is_queued_until_a_renewal_says_its_step_started() -> None:
    claimed = _event(1, EventKind.CLAIMED, 0)
    waiting = _event(2, EventKind.RENEWED, 5, {"n": 1, "started_at": None, "ran_s": None})
    (queued,) = attempts([claimed, waiting], {})
    assert (queued.outcome, queued.start, queued.stopped) == ("queued", T0, None)

    started = (T0 + timedelta(seconds=7)).isoformat()
    running = _event(3, EventKind.RENEWED, 10, {"n": 2, "started_at": started, "ran_s": None})
    (live,) = attempts([claimed, waiting, running], {})
    assert (live.outcome, live.start, live.stopped) == ("running", T0 + timedelta(seconds=7), None)
    assert live.start_recorded

    svg = str(gantt_svg([queued], ["w1"], T0, T0 + timedelta(seconds=10)))
    assert "queued on w1 since its claim, not started yet" in svg
    assert 'stroke-dasharray="2 2"' in svg, "drawn hollow, not as a running bar"


def test_timeline__a_running_step_s_renewals_record_its_start(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    fast = fast_settings(settings, heartbeat_s=0.1)
    hold = tmp_path / "hold"
    params = {"hold_file": str(hold), "hold_step": "a"}
    job = submit("chain", params, settings=fast, registry=flows_registry()).job_id
    engine = sqlalchemy_engine(fast)
    with thread_worker(fast, worker_id="w1"):
        wait_until(lambda: Path(f"{hold}.started").exists(), what="step a started")
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM engine_history WHERE job_id = %s AND kind = 'renewed' "
                "AND detail->>'started_at' IS NOT NULL",
                (job,),
            ).fetchone(),
            what="a renewal of step a, running",
        )
        (live,) = build_run_report(engine, job, flows_registry()).attempts
        assert (live.label, live.outcome, live.start_recorded) == ("a", "running", True)
        assert live.claimed_at - SLACK <= live.start
        Path(f"{hold}.release").touch()
        assert wait_job_ended(conn, job) == "done"


ENDINGS = ("succeeded", "retried", "dead_lettered", "rejected", "waiting", "cancelled", "fenced")


def test_timeline__every_attempt_a_worker_ends_records_when_its_step_ran(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    modules = ["testflows", "waitflows"]
    fast = fast_settings(settings, flow_modules=modules, max_attempts=2)
    registry = Registry.load(modules)
    bad = tmp_path / "bad-data"
    bad.touch()
    jobs = {
        "retried": {"fail_times": 1},
        "dead_lettered": {"fail_times": 99},
        "rejected": {"reject_while": str(bad)},
    }
    ids = [submit("chain", p, settings=fast, registry=registry).job_id for p in jobs.values()]
    approval = submit("approval", {"n": 1}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry, worker_id="w1"):
        for job in ids:
            wait_job_ended(conn, job)
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM engine_step_runs WHERE job_id = %s AND status = 'waiting'",
                (approval,),
            ).fetchone(),
            what="the gate waiting",
        )
        signal(approval, "go", {"by": "ann"}, settings=fast)
        assert wait_job_ended(conn, approval) == "done"
    rows = conn.execute(
        "SELECT kind, detail FROM engine_history WHERE job_id = ANY(%s) AND kind = ANY(%s)",
        ([*ids, approval], list(ENDINGS)),
    ).fetchall()
    kinds = {r["kind"] for r in rows}
    assert kinds >= {"succeeded", "retried", "dead_lettered", "rejected", "waiting"}, kinds
    untimed = [r for r in rows if not isinstance(r["detail"].get("started_at"), str)]
    assert untimed == [], "every attempt a worker ended says when its step started"
    assert all(isinstance(r["detail"].get("ran_s"), int | float) for r in rows)
