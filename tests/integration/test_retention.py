"""Retention (issue 38, item 1): finished jobs leave the live tables, their evidence stays.

Real jobs run by a worker in a thread; time moves by ageing ``finished_at``
(never by sleeping). Each case names the rule it holds.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, thread_worker, wait_job_ended, wait_until
from pydantic import BaseModel
from testflows import Params, chain

from engine import BadInput, Flow, Retention, StepContext, pin_job, prune
from engine.config import Settings
from engine.errors import NoSuchJob
from engine.flow.registry import Registry
from engine.jobs import admin
from engine.jobs.submit import submit
from engine.reports import render_index
from engine.retention import pruned_job
from engine.store import db
from engine.store.job_summaries import job_retire_many
from engine.worker.pruner import Pruner
from engine.worker.worker import connect_worker

# a flow that keeps its done jobs longer than the engine's default
keeper = Flow("keeper", params=Params, retention=Retention(done=timedelta(days=30)))


class Kept(BaseModel):
    n: int


@keeper.step
def only(params: Params, ctx: StepContext) -> Kept:
    ctx.tag("note", f"n{params.n}")
    return Kept(n=params.n)


LIVE = ("engine_jobs", "engine_step_runs", "engine_events", "engine_job_tags")


@pytest.fixture
def fast(settings: Settings, tmp_path: Path) -> Settings:
    return fast_settings(
        settings,
        reports_dir=tmp_path / "reports",
        retention_done_days=14,
        retention_failed_days=400,
        retention_cancelled_days=10,
        prune_batch=2,  # several batches even for a handful of jobs
        lock_timeout_s=5,
    )


@pytest.fixture
def registry() -> Registry:
    return Registry([chain, keeper])


def run_jobs(
    settings: Settings, registry: Registry, *submits: tuple[Flow, dict[str, Any]]
) -> list[uuid.UUID]:
    """Submit each job, run them all to their end with one worker; their ids."""
    ids = [submit(f, p, settings=settings).job_id for f, p in submits]
    with thread_worker(settings, registry), db.connect(settings, autocommit=True) as c:
        for job in ids:
            wait_job_ended(c, job)
    return ids


def age(conn: psycopg.Connection[Any], job: uuid.UUID, days: float) -> None:
    conn.execute(
        "UPDATE engine_jobs SET finished_at = now() - make_interval(secs => %s) WHERE id = %s",
        (days * 86_400, job),
    )


def live(conn: psycopg.Connection[Any], job: uuid.UUID) -> bool:
    return conn.execute("SELECT 1 FROM engine_jobs WHERE id = %s", (job,)).fetchone() is not None


def rows(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in LIVE}  # type: ignore[index]


def test_prune__policy_per_flow_and_end_state(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    done, failed, kept, young = run_jobs(
        fast,
        registry,
        (chain, {"n": 1}),
        (chain, {"n": 2, "fail_times": 99}),
        (keeper, {"n": 3}),
        (chain, {"n": 4}),
    )
    cancelled = submit(chain, {"n": 5}, settings=fast).job_id
    admin.cancel(fast, cancelled, "not needed")
    for job in (done, failed, kept, cancelled):
        age(conn, job, 20)
    age(conn, young, 13.9)  # the default's horizon is 14 days: one side of it each
    report = prune(fast, registry=registry)
    assert {k: c.jobs for k, c in report.counts.items()} == {
        ("chain", "done"): 1,
        ("chain", "cancelled"): 1,
    }
    assert not live(conn, done) and not live(conn, cancelled)
    # failed: 400 days by default; keeper's done: its own 30 days; young: 13.9 < 14
    assert live(conn, failed) and live(conn, kept) and live(conn, young)


def test_prune__pinned_job_is_kept_until_its_date_and_the_pin_is_audited(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    (job,) = run_jobs(fast, registry, (chain, {"n": 1}))
    age(conn, job, 30)
    until = datetime.now(UTC) + timedelta(days=1)
    pinned = pin_job(fast, job, until, "tax audit 2026", actor="ana")
    assert pinned.until == until
    assert prune(fast, registry=registry).total.jobs == 0
    assert live(conn, job)
    entry = conn.execute(
        "SELECT actor, action, reason, detail FROM engine_audit WHERE job_id = %s", (job,)
    ).fetchone()
    assert entry == {
        "actor": "ana",
        "action": "pin",
        "reason": "tax audit 2026",
        "detail": {"until": until.isoformat()},
    }
    # the pin's date passed: the flow's policy applies again
    conn.execute(
        "UPDATE engine_jobs SET pinned_until = now() - interval '1 s' WHERE id = %s", (job,)
    )
    assert prune(fast, registry=registry).total.jobs == 1
    with pytest.raises(BadInput, match="was pruned on"):
        pin_job(fast, job, until, "too late")
    with pytest.raises(NoSuchJob):
        pin_job(fast, uuid.uuid4(), until, "no such job")
    with pytest.raises(BadInput, match="needs a reason"):
        pin_job(fast, job, until, " ")


def test_prune__an_active_job_is_never_touched_however_old(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    job = submit(chain, {"n": 1}, settings=fast).job_id  # pending: no worker runs it
    conn.execute(
        "UPDATE engine_jobs SET created_at = now() - interval '1000 days' WHERE id = %s", (job,)
    )
    before = rows(conn)
    assert prune(fast, registry=registry).total.jobs == 0
    # even asked directly, with a horizon in the future, the retirement refuses it
    with conn.transaction():
        assert job_retire_many(conn, [job], [datetime.now(UTC) + timedelta(days=1)], {}) == []
    assert rows(conn) == before


def test_prune__dry_run_counts_equal_what_the_prune_removes(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    jobs = run_jobs(
        fast,
        registry,
        (chain, {"n": 1}),
        (chain, {"n": 2}),
        (chain, {"n": 3, "fail_times": 1}),  # a retried step: more events
        (keeper, {"n": 4}),
        (keeper, {"n": 5}),
    )
    for job in jobs:
        age(conn, job, 40)
    as_of = datetime.now(UTC)
    before = rows(conn)
    planned = prune(fast, registry=registry, dry_run=True, as_of=as_of)
    assert rows(conn) == before  # a dry run changes nothing
    done = prune(fast, registry=registry, as_of=as_of)
    after = rows(conn)
    assert planned.counts == done.counts
    assert planned.total.jobs == 5 and done.skipped == 0
    gone = {t: before[t] - after[t] for t in LIVE}
    total = done.total
    assert gone == {
        "engine_jobs": total.jobs,
        "engine_step_runs": total.step_runs,
        "engine_events": total.events,
        "engine_job_tags": total.tags,
    }
    assert total.tags >= 2  # keeper's tags went too, and stay in the summaries
    assert planned.as_json()["by_flow"] == done.as_json()["by_flow"]


def test_prune__summary_and_report_stay_after_the_rows_go(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    (job,) = run_jobs(fast, registry, (keeper, {"n": 7}))
    age(conn, job, 31)
    assert prune(fast, registry=registry).total.jobs == 1
    summary = pruned_job(fast, job)
    assert summary is not None
    assert (summary.flow, summary.status, summary.params["n"]) == ("keeper", "done", 7)
    assert summary.tags == {"note": ["n7"]}
    assert (summary.step_runs, summary.step_runs_done, summary.attempts) == (1, 1, 1)
    # a clean run's events are all folded into its rows (its submit, first claims, successes
    # and end: migrations 0035 and 0037): not one event row was removed
    assert summary.events == 0 and summary.report is not None
    page = Path(summary.report).read_text(encoding="utf-8")
    assert str(job) in page
    assert "pruned on" in summary.note


def test_prune__skips_a_job_another_session_holds_without_waiting(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    held, free = run_jobs(fast, registry, (chain, {"n": 1}), (chain, {"n": 2}))
    for job in (held, free):
        age(conn, job, 20)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        # as a retry would: the job row first, in a transaction left open
        with db.connect(fast) as other, other.transaction():
            other.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR NO KEY UPDATE", (held,))
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30)
        report = prune(fast, registry=registry)  # lock_timeout 5 s: a wait would raise
        assert report.total.jobs == 1 and report.skipped == 1
        assert live(conn, held) and not live(conn, free)
    finally:
        release.set()
        holder.join()
    assert prune(fast, registry=registry).total.jobs == 1  # the next prune takes it
    assert not live(conn, held)


def test_prune__a_worker_claims_and_finishes_while_a_retirement_holds_its_rows(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    old = run_jobs(fast, registry, (chain, {"n": 1}), (chain, {"n": 2}))
    for job in old:
        age(conn, job, 20)
    in_batch = threading.Barrier(2, timeout=30)
    go_on = threading.Event()

    paused = threading.Event()

    def pause() -> None:
        if not paused.is_set():  # the first batch only
            paused.set()
            # the batch's rows deleted and locked, not committed: the test runs a job meanwhile
            in_batch.wait()
            assert go_on.wait(30)

    results: list[Any] = []

    def run_prune() -> None:
        try:
            results.append(prune(fast, registry=registry, on_batch=pause))
        except BaseException as exc:
            results.append(exc)
            in_batch.abort()

    pruner = threading.Thread(target=run_prune)
    pruner.start()
    try:
        in_batch.wait()
        # the retirement's transaction is open; a worker claims, runs and ends new work
        (new,) = run_jobs(fast, registry, (chain, {"n": 3}))
        with db.connect(fast, autocommit=True) as c:
            assert wait_job_ended(c, new) == "done"
    finally:
        go_on.set()
        pruner.join(60)
    (report,) = results
    assert report.total.jobs == 2 and report.skipped == 0
    assert live(conn, new)
    assert conn.execute(
        "SELECT count(*) AS n FROM engine_step_runs WHERE job_id = %s AND status = 'done'", (new,)
    ).fetchone() == {"n": 3}


def test_pruner__prunes_on_its_interval_a_few_batches_a_round_in_the_workers_role(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    jobs = run_jobs(fast, registry, *((chain, {"n": n}) for n in range(3)))
    for job in jobs:
        age(conn, job, 20)
    now = [1000.0]  # the pruner's monotonic clock, moved by the test
    settings = fast.model_copy(
        update={"prune_interval_s": 3600, "prune_batch": 1, "session_role": "engine_worker"}
    )
    pruner = Pruner(settings, registry, clock=lambda: now[0])
    with connect_worker(settings) as c:
        c.autocommit = True
        assert pruner.round(c) == 0  # not due before one interval
        now[0] += 3600
        # due: two batches of one job a round (a stop is seen between rounds), the next
        # round going on from where this one stopped, until none is left
        assert [pruner.round(c) for _ in range(3)] == [2, 1, 0]
        assert not any(live(conn, job) for job in jobs)
        assert pruner.cursor is None and pruner.next_prune == now[0] + 3600
    off = Pruner(fast.model_copy(update={"prune_interval_s": 0}), registry, clock=lambda: 1e12)
    with db.connect(fast, autocommit=True) as c:
        assert off.round(c) == 0


def test_worker__a_prune_rendering_reports_does_not_hold_up_claims(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    old = run_jobs(fast, registry, (chain, {"n": 1}))
    age(conn, old[0], 20)
    rendering, release = threading.Event(), threading.Event()

    def slow_reports(settings: Settings, jobs: Any) -> dict[uuid.UUID, str]:
        rendering.set()  # the prune is due and storing its first batch's reports
        assert release.wait(60)
        return {job: f"test://{job}.html" for job in jobs}

    settings = fast.model_copy(update={"prune_interval_s": 3600})
    with thread_worker(settings, registry) as worker:
        worker.pruner.write_reports = slow_reports
        worker.pruner.next_prune = 0.0  # due now (its thread looks at least once a second)
        try:
            assert rendering.wait(30)
            # while the prune renders, the worker receives, claims and ends new work
            new = submit(chain, {"n": 2}, settings=settings).job_id
            assert wait_job_ended(conn, new) == "done"
        finally:
            release.set()
        wait_until(lambda: not live(conn, old[0]), 30, "the old job to be pruned")


def test_prune__a_family_goes_with_its_top_level_job_and_only_once_all_of_it_ended(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    import childflows

    family = Registry.load(["testflows", "childflows"])
    parent = submit(childflows.brood, {"children": 2}, settings=fast).job_id
    with thread_worker(fast, family):
        wait_job_ended(conn, parent)
    kids = [
        r["id"]
        for r in conn.execute("SELECT id FROM engine_jobs WHERE parent_job_id = %s", (parent,))
    ]
    assert len(kids) == 2
    conn.execute("UPDATE engine_jobs SET finished_at = now() - interval '20 days'")
    # a child's own horizon passed, but a child goes with its top-level job only
    conn.execute(
        "UPDATE engine_jobs SET status = 'running', finished_at = NULL WHERE id = %s", (kids[0],)
    )
    assert prune(fast, registry=family).total.jobs == 0  # one child is active: all stay
    conn.execute(
        "UPDATE engine_jobs SET status = 'done', finished_at = now() - interval '20 days'"
        " WHERE id = %s",
        (kids[0],),
    )
    planned = prune(fast, registry=family, dry_run=True)
    done = prune(fast, registry=family)
    assert planned.counts == done.counts
    assert {k: c.jobs for k, c in done.counts.items()} == {("brood", "done"): 1, ("kid", "done"): 2}
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone() == {"n": 0}
    assert pruned_job(fast, kids[1]) is not None
    summary = pruned_job(fast, kids[1])
    assert summary is not None and summary.parent_job_id == parent


def test_prune__vacuums_the_live_tables_after_its_walk_without_waiting_for_a_writer(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    old, busy = run_jobs(fast, registry, (chain, {"n": 1}), (chain, {"n": 2}))
    age(conn, old, 20)
    writing, release = threading.Event(), threading.Event()

    def write() -> None:
        # a claim's kind of write on the claim's table, its transaction left open
        with db.connect(fast) as other, other.transaction():
            other.execute(
                "UPDATE engine_step_runs SET attempts = attempts WHERE job_id = %s", (busy,)
            )
            writing.set()
            release.wait(30)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert writing.wait(30)
        # lock_timeout 5 s: a VACUUM that waited for the writer would raise
        conn.execute("SET vacuum_cost_delay = '7ms'")  # the session's own
        report = prune(fast, registry=registry, conn=conn)
        assert report.total.jobs == 1 and report.vacuum_s is not None
        # it went at the prune's pace (autovacuum's), and the session's own is given back
        assert fast.prune_vacuum_delay_ms == 2.0
        assert conn.execute("SHOW vacuum_cost_delay").fetchone() == {"vacuum_cost_delay": "7ms"}
    finally:
        release.set()
        writer.join()
    assert prune(fast, registry=registry).vacuum_s is None  # nothing retired: no VACUUM
    assert prune(fast, registry=registry, dry_run=True).vacuum_s is None


def test_retention__live_tables_are_autovacuumed_at_one_percent_dead(
    conn: psycopg.Connection[Any],
) -> None:
    for table in LIVE:
        options = conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (table,)
        ).fetchone()
        assert options is not None
        assert "autovacuum_vacuum_scale_factor=0.01" in options["reloptions"], table


def test_prune__the_report_index_lists_a_pruned_job_linking_its_stored_page(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    pruned, kept = run_jobs(fast, registry, (chain, {"n": 1}), (chain, {"n": 2}))
    age(conn, pruned, 20)
    assert prune(fast, registry=registry).total.jobs == 1
    index = Path(render_index(fast))
    rows = {
        job: next(
            tr
            for tr in index.read_text(encoding="utf-8").split("<tr ")
            if tr.startswith("data-flow") and str(job) in tr
        )
        for job in (pruned, kept)
    }
    # the pruned job's row: its summary, marked, linking the page stored before its rows went
    assert f'href="runs/{pruned}.html"' in rows[pruned] and ">pruned</span>" in rows[pruned]
    assert (index.parent / "runs" / f"{pruned}.html").is_file()
    assert f'href="runs/{kept}.html"' in rows[kept] and ">pruned</span>" not in rows[kept]


class FakeClock:
    """A monotonic clock that moves only when told; what each rest asked for."""

    def __init__(self) -> None:
        self.now = 0.0
        self.rests: list[float] = []

    def __call__(self) -> float:
        return self.now

    def rest(self, seconds: float) -> None:
        self.rests.append(seconds)


def test_prune__a_slow_transaction_makes_the_next_batch_smaller_and_a_rest_follows_it(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    jobs = run_jobs(fast, registry, *[(keeper, {"n": n}) for n in range(7)])
    for job in jobs:
        age(conn, job, 31)
    paced = fast.model_copy(update={"prune_batch": 4, "prune_batch_s": 1.0, "prune_rest": 0.5})
    clock = FakeClock()

    def slow() -> None:  # each retirement transaction takes 2 s: twice the aim
        clock.now += 2.0

    report = prune(paced, registry=registry, batch=4, on_batch=slow, clock=clock, rest=clock.rest)
    # 4 families, then 4 * 1 / 2 = 2, then 1: each transaction halves the next
    assert (report.total.jobs, report.batches, report.batch) == (7, 3, 1)
    assert report.longest_batch_s == 2.0
    # half of the 2 s each took, before the next one (none after the last)
    assert clock.rests == [1.0, 1.0]
    assert rows(conn)["engine_jobs"] == 0


def test_prune__starts_at_one_job_and_quick_transactions_double_it_up_to_prune_batch(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    jobs = run_jobs(fast, registry, *[(keeper, {"n": n}) for n in range(7)])
    for job in jobs:
        age(conn, job, 31)
    paced = fast.model_copy(update={"prune_batch": 4, "prune_batch_s": 1.0, "prune_rest": 1.0})
    clock = FakeClock()  # never moves: each transaction takes no time
    report = prune(paced, registry=registry, clock=clock, rest=clock.rest)
    # a walk starts at one: 1, 2, then 4 (the ceiling): 7 families in three transactions
    assert (report.total.jobs, report.batches, report.batch) == (7, 3, 4)
    assert clock.rests == []


def test_prune__its_closing_vacuum_leaves_the_statistics_to_autovacuum(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    # a day's retirement moves about 1% of the rows: re-sampling every table (30,000 rows
    # each, 3.6 s of I/O at 10M step runs) would refresh statistics it did not move
    (old,) = run_jobs(fast, registry, (chain, {"n": 1}))
    age(conn, old, 20)
    counts = """
        SELECT relname, vacuum_count, analyze_count FROM pg_stat_user_tables
        WHERE relname IN ('engine_jobs', 'engine_step_runs', 'engine_events', 'engine_job_tags')
    """
    conn.execute("SELECT pg_stat_clear_snapshot()")
    before = {r["relname"]: r for r in conn.execute(counts).fetchall()}
    report = prune(fast, registry=registry, conn=conn)
    assert report.total.jobs == 1 and report.vacuum_s is not None
    conn.execute("SELECT pg_stat_clear_snapshot()")
    after = {r["relname"]: r for r in conn.execute(counts).fetchall()}
    assert len(after) == 4
    for table, row in after.items():
        assert row["vacuum_count"] == before[table]["vacuum_count"] + 1, table
        assert row["analyze_count"] == before[table]["analyze_count"], table
