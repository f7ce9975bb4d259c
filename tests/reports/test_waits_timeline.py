"""The run report's timeline draws a wait as a wait: no worker's bar, from the park to the wake."""

from __future__ import annotations

from typing import Any

import psycopg
from harness import fast_settings, thread_worker, wait_job_ended, wait_until

from engine import Registry, signal, submit
from engine.config import Settings
from engine.reports.context import build_run_report
from engine.reports.render import render_run_html
from engine.reports.svg import WAITS_LANE
from engine.store.read import sqlalchemy_engine

MODULES = ["testflows", "waitflows"]


def _waiting(conn: psycopg.Connection[Any], job: Any) -> bool:
    row = conn.execute(
        "SELECT 1 FROM engine_step_runs WHERE job_id = %s AND status = 'waiting'", (job,)
    ).fetchone()
    return row is not None


def test_timeline__a_wait_is_drawn_from_its_park_to_its_wake_apart_from_the_workers(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    fast = fast_settings(settings, flow_modules=MODULES)
    registry = Registry.load(MODULES)
    approval = submit("approval", {"n": 1}, settings=fast, registry=registry).job_id
    nap = submit("nap", {"n": 2}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry, worker_id="w1"):
        wait_until(lambda: _waiting(conn, approval) and _waiting(conn, nap), what="both waiting")
        signal(approval, "go", {"by": "ann"}, settings=fast)
        assert wait_job_ended(conn, approval) == "done"
    engine = sqlalchemy_engine(fast)

    report = build_run_report(engine, approval, registry)
    (wait,) = report.wait_spans
    assert (wait.label, wait.what, wait.outcome) == ("gate", "signal go", "woken")
    gate = [a for a in report.attempts if a.label == "gate"]
    assert [a.outcome for a in gate] == ["waiting", "succeeded"]
    assert wait.end is not None and gate[0].end is not None
    assert gate[0].end <= wait.start < wait.end <= gate[1].start, "between the two attempts"
    assert WAITS_LANE not in report.lanes, "no worker holds a wait"
    html = render_run_html(report)
    assert html.count('<g class="wait">') == 1
    assert f">{WAITS_LANE}</text>" in html
    assert "gate waiting for signal go: woken" in html

    (still,) = build_run_report(engine, nap, registry).wait_spans
    assert (still.label, still.outcome, still.end) == ("nap", "waiting", None)
    assert still.what.startswith("until ")
