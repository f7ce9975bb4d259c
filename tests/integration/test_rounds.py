"""A round of pure steps checkpointed in one message (engine.runner.rounds), on real PostgreSQL.

fan's ``plan`` takes no StepContext: a batch of fan jobs runs its plans as one
round. The promise under test is the issue's: a step fenced in the batch rolls
back its own effects only, a neighbour's survive; a step raising is handled
alone; a failed statement or a lost connection loses nothing that was not
committed, and runs nothing twice in the books.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from harness import flows_registry, wait_job_ended
from test_group_commit import fast, group_order, one_runner, receive_all

from engine import store, submit
from engine.config import Settings
from engine.infra import faults
from engine.reports.timeline import attempts
from engine.runner import rounds
from engine.runner.attempt import Attempt
from engine.runner.execution import Executor
from engine.runner.lease import Lease
from engine.store import prepared
from engine.store.models import Event
from engine.store.queries import load

STEP_RUNS = load("engine/store/sql/step_runs.sql")

__all__ = ["fast"]  # the fixture, shared with the group commit tests


def plans(conn: psycopg.Connection[Any]) -> dict[uuid.UUID, dict[str, Any]]:
    rows = conn.execute(
        "SELECT job_id, status, attempts, lease_owner, output IS NOT NULL AS has_output "
        "FROM engine_step_runs WHERE step = 'plan'"
    ).fetchall()
    return {r.pop("job_id"): r for r in rows}


def parts(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM engine_step_runs WHERE job_id = %s AND step = 'part'",
        (job_id,),
    ).fetchone()
    assert row is not None
    return int(row["n"])


@pytest.fixture
def messages(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of checkpoints in each many-checkpoint message sent."""
    sizes: list[int] = []
    real = store.checkpoint_put_many_if_leased

    def counted(conn: Any, checkpoints: Any, worker: str) -> Any:
        sizes.append(len(checkpoints))
        return real(conn, checkpoints, worker)

    monkeypatch.setattr(store, "checkpoint_put_many_if_leased", counted)
    return sizes


def before_plan(
    monkeypatch: pytest.MonkeyPatch, job_id: uuid.UUID | None, then: Callable[[Lease], None]
) -> None:
    """``then(lease)`` before the plan of ``job_id`` (``None``: of every job) is called."""
    compute = Executor.compute

    def hooked(self: Executor, attempt: Attempt) -> Any:
        if attempt.step.name == "plan" and job_id in (None, attempt.claimed.job_id):
            then(attempt.lease)
        return compute(self, attempt)

    monkeypatch.setattr(Executor, "compute", hooked)


def fail_plan(lease: Lease) -> None:
    raise RuntimeError("plan failed (test)")


def test_round__a_fenced_step_in_a_batch_rolls_back_only_its_own_checkpoint(
    fast: Settings,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    messages: list[int],
) -> None:
    jobs = [submit("fan", {"n": n}, settings=fast, registry=flows_registry()) for n in (2, 3, 4)]
    with one_runner(fast) as (runner, transport):
        batch = receive_all(transport, 3)
        first, victim, last = group_order(batch)

        def steal(lease: Lease) -> None:
            # another worker reclaims the middle plan while it runs
            conn.execute(
                "UPDATE engine_step_runs SET lease_token = gen_random_uuid(), "
                "lease_owner = 'thief' WHERE id = %s",
                (lease.claimed.id,),
            )

        before_plan(monkeypatch, victim, steal)
        outcomes = runner.handle_batch(batch)
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    assert messages[0] == 3, "the three plans were checkpointed in one message"
    assert "fenced" in [o.kind for o in outcomes]
    assert [o.kind for o in outcomes].count("fenced") == 1
    state = plans(conn)
    assert state[victim] == {
        "status": "running",
        "attempts": 1,
        "lease_owner": "thief",
        "has_output": False,
    }, "the thief's step run is untouched"
    assert parts(conn, victim) == 0, "nothing scheduled from a refused checkpoint"
    for job, n in zip(jobs, (2, 3, 4), strict=True):
        if job.job_id == victim:
            continue
        assert state[job.job_id]["status"] == "done"
        assert parts(conn, job.job_id) == n, "the neighbours' checkpoints and parts survive"
    fenced = conn.execute(
        "SELECT count(*) AS n FROM engine_history e JOIN engine_step_runs s "
        "ON s.id = e.step_run_id WHERE e.kind = 'fenced' AND s.job_id = %s",
        (victim,),
    ).fetchone()
    assert fenced == {"n": 1}
    assert first != last


def test_round__a_step_raising_is_retried_alone_after_the_rounds_commit(
    fast: Settings,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    messages: list[int],
) -> None:
    jobs = [submit("fan", {"n": n}, settings=fast, registry=flows_registry()) for n in (2, 3, 4)]
    with one_runner(fast) as (runner, transport):
        batch = receive_all(transport, 3)
        victim = group_order(batch)[0]
        before_plan(monkeypatch, victim, fail_plan)
        outcomes = runner.handle_batch(batch)

    assert messages[0] == 2, "the two that returned were checkpointed together"
    assert [o.kind for o in outcomes].count("retried") == 1
    state = plans(conn)
    assert state[victim] == {
        "status": "pending",
        "attempts": 1,
        "lease_owner": None,
        "has_output": False,
    }
    for job, n in zip(jobs, (2, 3, 4), strict=True):
        if job.job_id != victim:
            assert state[job.job_id]["status"] == "done"
            assert parts(conn, job.job_id) == n


def test_round__a_statement_failing_rolls_the_round_back_and_each_goes_again_alone(
    fast: Settings,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    messages: list[int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = [submit("fan", {"n": n}, settings=fast, registry=flows_registry()) for n in (2, 3, 4)]
    fired: list[str] = []

    def once(point: str) -> None:
        # the round's batch fails once, after its checkpoints were written
        if point == "in_commit" and not fired:
            fired.append(point)
            raise faults.FaultInjected("fault injected at in_commit (test)")

    monkeypatch.setattr(faults, "hit", once)
    with one_runner(fast) as (runner, transport):
        outcomes = runner.handle_batch(receive_all(transport, 3))
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    assert fired == ["in_commit"]
    assert messages == [3], "one round, then one by one"
    assert "rolled back" in caplog.text
    assert all(o.kind == "done" for o in outcomes)
    state = plans(conn)
    for job, n in zip(jobs, (2, 3, 4), strict=True):
        assert state[job.job_id]["status"] == "done"
        assert parts(conn, job.job_id) == n, "each part made once"
    assert {s["attempts"] for s in state.values()} == {1}, "no attempt spent on the rollback"
    succeeded = conn.execute(
        "SELECT count(*) AS n FROM engine_history e JOIN engine_step_runs s "
        "ON s.id = e.step_run_id WHERE e.kind = 'succeeded' AND s.step = 'plan'"
    ).fetchone()
    assert succeeded == {"n": 3}, "the rolled back round left no succeeded event behind"


def test_round__a_lost_connection_commits_nothing_of_the_round(
    fast: Settings,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    messages: list[int],
) -> None:
    [submit("fan", {"n": n}, settings=fast, registry=flows_registry()) for n in (2, 3, 4)]
    with one_runner(fast) as (runner, transport):
        backend = runner.conn.info.backend_pid

        def cut(point: str) -> None:
            if point == "in_commit":
                conn.execute("SELECT pg_terminate_backend(%s)", (backend,))

        monkeypatch.setattr(faults, "hit", cut)
        outcomes = runner.handle_batch(receive_all(transport, 3))

    assert messages == [3]
    assert [o.kind for o in outcomes] == ["fenced"] * 3
    for state in plans(conn).values():
        # still leased: the sweeper hands them out again once the leases lapse
        assert state["status"] == "running" and not state["has_output"]
    made = conn.execute("SELECT count(*) AS n FROM engine_step_runs WHERE step = 'part'")
    assert made.fetchone() == {"n": 0}


def test_round__steps_with_a_context_take_the_one_by_one_path(
    fast: Settings, conn: psycopg.Connection[Any], messages: list[int]
) -> None:
    chains = [submit("chain", {"n": i}, settings=fast, registry=flows_registry()) for i in range(3)]
    with one_runner(fast) as (runner, transport):
        outcomes = runner.handle_batch(receive_all(transport, 3))
    assert [o.kind for o in outcomes] == ["done"] * 9
    assert messages == [], "chain's steps take a StepContext"
    for job in chains:
        assert wait_job_ended(conn, job.job_id) == "done"
    assert rounds.pure(flows_registry().get("fan").steps["plan"])
    assert not rounds.pure(flows_registry().get("fan").steps["part"])


def test_round__every_step_raising_leaves_nothing_to_checkpoint(
    fast: Settings,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [submit("fan", {"n": n}, settings=fast, registry=flows_registry()) for n in (2, 3)]

    before_plan(monkeypatch, None, fail_plan)
    with one_runner(fast) as (runner, transport):
        outcomes = runner.handle_batch(receive_all(transport, 2))
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert [o.kind for o in outcomes] == ["retried", "retried"]
    assert {s["status"] for s in plans(conn).values()} == {"pending"}


@pytest.mark.parametrize("how", ["cancel request", "statement timeout"])
def test_round__a_members_failed_input_read_charges_no_neighbour(
    fast: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # fan's gather takes no StepContext and reads its parts' checkpoints: a round
    # of gathers reads each one's inputs in the round's shared transaction, and a
    # read that fails aborts it; the members after it (whose reads would fail on
    # the aborted transaction) must go on in a fresh one, uncharged
    fast = fast.model_copy(update={"eager_successors": False})  # one step a batch
    registry = flows_registry()
    jobs = [
        submit("fan", {"n": 1, "fail_step": f"none{i}"}, settings=fast, registry=registry).job_id
        for i in range(3)
    ]
    with one_runner(fast) as (runner, transport):
        runner.handle_batch(receive_all(transport, 3))  # the plans
        runner.handle_batch(receive_all(transport, 3))  # the parts
        batch = receive_all(transport, 3)  # the gathers, one round
        first, victim, last = group_order(batch)
        real = store.step_outputs_select

        def failing_read(c: Any, job_id: uuid.UUID, *args: Any) -> Any:
            if job_id == victim:
                if how == "cancel request":
                    c.execute("SELECT pg_cancel_backend(pg_backend_pid()), pg_sleep(5)")
                else:
                    c.execute("SET LOCAL statement_timeout = '50ms'")
                    c.execute("SELECT pg_sleep(5)")
            return real(c, job_id, *args)

        monkeypatch.setattr(store, "step_outputs_select", failing_read)
        outcomes = runner.handle_batch(batch)
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    assert [o.kind for o in outcomes].count("retried") == 1, "the victim alone pays"
    gathers = {
        r["job_id"]: (r["status"], r["attempts"])
        for r in conn.execute(
            "SELECT job_id, status, attempts FROM engine_step_runs WHERE step = 'gather'"
        ).fetchall()
    }
    assert gathers[victim] == ("pending", 1)
    for job in (first, last):
        assert gathers[job] == ("done", 1), job
    failures = conn.execute(
        "SELECT e.job_id FROM engine_history e WHERE e.kind IN ('failed', 'retried')"
    ).fetchall()
    assert {f["job_id"] for f in failures} <= {victim}
    assert len(jobs) == 3


def test_round__each_member_s_events_record_when_its_own_step_ran(
    fast: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [submit("fan", {"n": n}, settings=fast, registry=flows_registry()) for n in (1, 2, 3)]
    with one_runner(fast) as (runner, transport):
        batch = receive_all(transport, 3)
        failing = group_order(batch)[1]

        step_call = Executor._compute

        def slow_or_fail(self: Executor, attempt: Attempt) -> Any:
            if attempt.step.name == "plan":  # the step's own run: long enough to tell them apart
                time.sleep(0.05)
                if attempt.claimed.job_id == failing:
                    fail_plan(attempt.lease)
            return step_call(self, attempt)

        monkeypatch.setattr(Executor, "_compute", slow_or_fail)
        outcomes = runner.handle_batch(batch)
    assert [o.kind for o in outcomes].count("retried") == 1  # then the parts ran
    ids = [j.job_id for j in jobs]
    events = [
        Event(**row)
        for row in conn.execute(
            "SELECT e.* FROM engine_history AS e JOIN engine_step_runs AS s ON s.id = e.step_run_id"
            " WHERE s.step = 'plan' AND e.job_id = ANY(%s) ORDER BY e.at, e.id",
            (ids,),
        ).fetchall()
    ]
    bars = attempts(events, {})
    assert sorted(a.outcome for a in bars) == ["retried", "succeeded", "succeeded"]
    for a in bars:
        assert a.start_recorded and a.stopped is not None and a.end is not None, a
        slack = timedelta(milliseconds=50)  # how far the slot's clock may err
        assert a.claimed_at - slack <= a.start < a.stopped <= a.end + slack, a
        assert (a.stopped - a.start).total_seconds() >= 0.04, "its own step's run, slept in"
    # one after another on the slot, though their outcomes were written together later
    ordered = sorted(bars, key=lambda a: a.start)
    for before, after in itertools.pairwise(ordered):
        assert before.stopped is not None and before.stopped <= after.start, (before, after)
    done = [a for a in bars if a.outcome == "succeeded"]
    assert done[0].end is not None and done[1].end is not None
    assert abs((done[0].end - done[1].end).total_seconds()) < 0.04, "one message for both"


def test_round__its_eager_successors_are_created_by_one_statement(
    fast: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # each statement pays executor start-up and the table's CHECK constraints read again:
    # a round's keyless eager successors go as one set-based insert, not one each
    many = prepared.statement(STEP_RUNS["step_run_insert_claimed_many"]).name
    single = prepared.statement(STEP_RUNS["step_run_insert_claimed"]).name
    sent: list[list[str]] = []
    send = prepared.send

    def spied(cur: Any, statements: list[str]) -> None:
        sent.append(list(statements))
        send(cur, statements)

    monkeypatch.setattr(prepared, "send", spied)
    jobs = [submit("fan", {"n": n}, settings=fast, registry=flows_registry()) for n in (2, 3, 4)]
    with one_runner(fast) as (runner, transport):
        runner.handle_batch(receive_all(transport, 3))
    inserts = [[s for s in message if s.startswith(f"EXECUTE {many}(")] for message in sent]
    first = next(found for found in inserts if found)
    assert len(first) == 1, "the round's three successors in one statement"
    assert not any(s.startswith(f"EXECUTE {single}(") for m in sent for s in m)
    for job in jobs:
        eager = conn.execute(
            "SELECT count(*) AS n FROM engine_step_runs WHERE job_id = %s AND step = 'part'"
            " AND started_detail = '{\"eager\": true}' AND attempts = 1",
            (job.job_id,),
        ).fetchone()
        assert eager == {"n": 1}, "each job's first part created leased to the slot"
