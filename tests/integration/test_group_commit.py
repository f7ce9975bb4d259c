"""Batched claims and group commit: one statement claims a batch, one COMMIT for quick steps.

The promise under test: a step run in a group keeps its exact fencing. A
step fenced, failing or waiting in the middle of a group rolls back its own
effects (its savepoint) and nothing of its neighbours', whose checkpoints
commit; and the group really shares one commit (a neighbour's checkpoint is
invisible to another session until the group's last step is done).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from harness import fast_settings, flows_registry, thread_worker, wait_job_ended

from engine import store, submit
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.flow.registry import Registry
from engine.infra import faults
from engine.runner import Outcome, StepRunner
from engine.runner.claim import claim_many
from engine.runner.group import GroupCommit
from engine.runner.lease import Heartbeat
from engine.runner.services import SlotServices
from engine.store import db
from engine.transports.base import Received
from engine.transports.message import StepMessage
from engine.transports.postgres import PostgresTransport
from engine.worker.worker import connect_worker


@pytest.fixture
def fast(settings: Settings) -> Settings:
    # a window no loaded machine reaches: the groups here end with their rounds
    return fast_settings(settings, group_commit_ms=5000)


@contextmanager
def one_runner(
    settings: Settings, registry: Registry | None = None, quick: tuple[str, ...] = ("chain", "fan")
) -> Iterator[tuple[StepRunner, PostgresTransport]]:
    """A bare executor slot that knows the steps of ``quick`` flows as quick (seen finishing)."""
    transport = PostgresTransport(settings)
    heartbeat = Heartbeat(settings, transport, "slot")
    conn = connect_worker(settings)
    conn.autocommit = True
    try:
        runner = StepRunner(
            SlotServices(
                settings=settings,
                registry=registry or flows_registry(),
                transport=transport,
                worker="slot",
                conn=conn,
                heartbeat=heartbeat,
                alerts=AlertRecorder(["log"]),
            )
        )
        for flow in quick:
            for step in runner.services.registry.get(flow).steps:
                runner.executor.group.times.record(flow, step, 0.001)
        yield runner, transport
    finally:
        heartbeat.close()
        conn.close()
        transport.close()


def receive_all(transport: PostgresTransport, n: int) -> list[Received]:
    batch: list[Received] = []
    for _ in range(20):
        batch += transport.receive(n - len(batch), 60, 1.0)
        if len(batch) == n:
            return batch
    raise AssertionError(f"received {len(batch)} of {n} deliveries")


def effects(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[str]:
    rows = conn.execute(
        "SELECT step FROM test_effects WHERE job_id = %s ORDER BY step", (job_id,)
    ).fetchall()
    return [r["step"] for r in rows]


def group_order(batch: list[Received]) -> list[uuid.UUID]:
    """The jobs of ``batch`` in the order a group runs them (job id: the one lock order)."""
    return sorted((StepMessage.decode(r.body).job_id for r in batch), key=lambda j: j.bytes)


def test_group__a_fenced_step_rolls_back_only_its_own_effects(
    fast: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [submit("chain", {"n": i}, settings=fast, registry=flows_registry()) for i in range(3)]
    with one_runner(fast) as (runner, transport):
        batch = receive_all(transport, 3)
        order = group_order(batch)
        victim, last = order[1], order[2]
        seen_uncommitted: list[bool] = []
        run_member = StepRunner._run_member

        def steal_or_look(self: StepRunner, member: Any) -> Outcome:
            claimed = member.lease.claimed
            if claimed.job_id == victim and claimed.step == "a":
                # another worker reclaims the middle step run while it is running
                conn.execute(
                    "UPDATE engine_step_runs SET lease_token = gen_random_uuid(), "
                    "lease_owner = 'thief' WHERE id = %s",
                    (claimed.id,),
                )
            if claimed.job_id == last and claimed.step == "a":
                # the first neighbour's checkpoint is written but not committed yet
                row = conn.execute(
                    "SELECT status FROM engine_step_runs WHERE job_id = %s AND step = 'a'",
                    (order[0],),
                ).fetchone()
                seen_uncommitted.append(row == {"status": "running"})
            return run_member(self, member)

        monkeypatch.setattr(StepRunner, "_run_member", steal_or_look)
        outcomes = runner.handle_batch(batch)
        # the group's session is not left in a transaction
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    kinds = sorted(o.kind for o in outcomes)
    assert kinds == ["done"] * 6 + ["fenced"], "a, b, c of two jobs; the victim's a fenced"
    assert seen_uncommitted == [False], "the first step was committed before the fenced one ran"
    # the fence made the group commit what it had; the second group (a of the
    # last job) committed with nothing of the victim's
    for job in jobs:
        expected = [] if job.job_id == victim else ["a", "b", "c"]
        assert effects(conn, job.job_id) == expected
    stolen = conn.execute(
        "SELECT status, lease_owner, output FROM engine_step_runs WHERE job_id = %s AND step = 'a'",
        (victim,),
    ).fetchone()
    assert stolen == {"status": "running", "lease_owner": "thief", "output": None}


def test_group__quick_neighbours_share_one_commit(
    fast: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [submit("chain", {"n": i}, settings=fast, registry=flows_registry()) for i in range(3)]
    with one_runner(fast) as (runner, transport):
        batch = receive_all(transport, 3)
        order = group_order(batch)
        seen: list[int] = []
        run_member = StepRunner._run_member

        def look(self: StepRunner, member: Any) -> Outcome:
            claimed = member.lease.claimed
            if claimed.step == "a" and claimed.job_id == order[-1]:
                # the two before it have checkpointed, in the group's open transaction
                row = conn.execute(
                    "SELECT count(*) AS n FROM engine_step_runs "
                    "WHERE job_id = ANY(%s) AND status = 'done'",
                    (order[:-1],),
                ).fetchone()
                assert row is not None
                seen.append(row["n"])
            return run_member(self, member)

        monkeypatch.setattr(StepRunner, "_run_member", look)
        outcomes = runner.handle_batch(batch)

    assert [o.kind for o in outcomes] == ["done"] * 9
    assert seen == [0], "another session sees none of the group before its one commit"
    for job in jobs:
        assert effects(conn, job.job_id) == ["a", "b", "c"]
        assert wait_job_ended(conn, job.job_id) == "done"


def test_group__a_failing_step_retries_alone_and_its_neighbours_commit(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    # the middle job's a writes its effect, then raises
    jobs = [
        submit(
            "chain",
            {"n": i, "fail_step": "a", "fail_times": 1 if i == 1 else 0},
            settings=fast,
            registry=flows_registry(),
        )
        for i in range(3)
    ]
    failing = jobs[1].job_id
    with one_runner(fast) as (runner, transport):
        outcomes = runner.handle_batch(receive_all(transport, 3))
    assert sorted(o.kind for o in outcomes) == ["done"] * 6 + ["retried"]
    for job in jobs:
        assert effects(conn, job.job_id) == ([] if job.job_id == failing else ["a", "b", "c"])
    a = conn.execute(
        "SELECT status, attempts FROM engine_step_runs WHERE job_id = %s AND step = 'a'",
        (failing,),
    ).fetchone()
    assert a == {"status": "pending", "attempts": 1}, "retried, with its own attempt only"


def test_group__a_batch_of_deliveries_is_claimed_in_one_statement_exactly_once(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    jobs = [submit("chain", {"n": i}, settings=fast, registry=flows_registry()) for i in range(8)]
    messages = [
        StepMessage(job_id=j.job_id, step_run_id=r["id"])
        for j in jobs
        for r in conn.execute(
            "SELECT id FROM engine_step_runs WHERE job_id = %s", (j.job_id,)
        ).fetchall()
    ]
    barrier = threading.Barrier(4)
    won: list[list[store.Claimed]] = []
    lock = threading.Lock()

    def racer(i: int) -> None:
        with db.connect(fast, autocommit=True) as c:
            barrier.wait(timeout=30)
            got = claim_many(c, messages[i % 2 :] + messages[: i % 2], f"w{i}", 30, ["chain:1"])
            with lock:
                won.append(got)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    claimed = [c.id for got in won for c in got]
    assert sorted(claimed) == sorted(m.step_run_id for m in messages), "each claimed once"
    events = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE kind = 'claimed'"
    ).fetchone()
    assert events == {"n": 8}
    started = conn.execute(
        "SELECT count(*) AS n FROM engine_jobs WHERE status = 'running' AND started_at IS NOT NULL"
    ).fetchone()
    assert started == {"n": 8}


def test_group__a_worker_drains_many_jobs_in_batches_with_one_effect_each(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    settings = fast.model_copy(update={"concurrency": 2})
    jobs = [
        submit("chain", {"n": i}, settings=settings, registry=flows_registry()) for i in range(40)
    ]
    with thread_worker(settings):
        for job in jobs:
            assert wait_job_ended(conn, job.job_id, timeout=60) == "done"
    rows = conn.execute(
        "SELECT count(*) AS n, count(DISTINCT (job_id, step)) AS distinct_steps FROM test_effects"
    ).fetchone()
    assert rows == {"n": 120, "distinct_steps": 120}
    # some deliveries were claimed together: a first claim (folded into its step run,
    # migration 0035) says the batch of deliveries one statement claimed it in
    batched = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE kind = 'claimed' "
        "AND coalesce((detail ->> 'batch')::int, 1) > 1"
    ).fetchone()
    assert batched is not None and batched["n"] > 0


def test_group__a_step_without_context_failing_after_its_checkpoint_keeps_neighbours(
    fast: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # fan's plan takes no StepContext: in a group its savepoint is set with its
    # checkpoint; a failure after that (here: injected between the checkpoint
    # and the statements that commit with it) must undo its checkpoint only
    # one by one, each in its savepoint, as a round that failed goes again
    # (a round of pure steps checkpointing together: tests/integration/test_rounds.py)
    monkeypatch.setattr(StepRunner, "_together", lambda self, quick: ([], quick))
    jobs = [submit("fan", {"n": n}, settings=fast, registry=flows_registry()) for n in (2, 3, 4)]
    with one_runner(fast) as (runner, transport):
        batch = receive_all(transport, 3)
        victim = group_order(batch)[1]
        current: list[uuid.UUID] = []
        run_member = StepRunner._run_member

        def note(self: StepRunner, member: Any) -> Outcome:
            current[:] = [member.lease.claimed.job_id]
            return run_member(self, member)

        def hit(point: str) -> None:
            if point == "in_commit" and current == [victim]:
                raise faults.FaultInjected("fault injected at in_commit (test)")

        monkeypatch.setattr(StepRunner, "_run_member", note)
        monkeypatch.setattr(faults, "hit", hit)
        outcomes = runner.handle_batch(batch)
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    assert "retried" in [o.kind for o in outcomes]
    for job in jobs:
        runs = conn.execute(
            "SELECT step, status, attempts, output IS NOT NULL AS has_output "
            "FROM engine_step_runs WHERE job_id = %s ORDER BY step, fanout_key",
            (job.job_id,),
        ).fetchall()
        if job.job_id == victim:
            # its checkpoint rolled back with its savepoint: retried, no parts made
            assert runs == [
                {"step": "plan", "status": "pending", "attempts": 1, "has_output": False}
            ]
        else:
            assert runs[-1] == {"step": "plan", "status": "done", "attempts": 1, "has_output": True}
            assert [r["step"] for r in runs if r["step"] == "part"], "its parts were made"


def test_group__a_failed_input_read_rolls_back_its_own_savepoint_only(
    fast: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # fan's gather takes no StepContext and reads its parts' checkpoints: in a
    # group it reads them in its own savepoint, so a read that fails (a cancel
    # request here, as a statement timeout would) is its own failure, and its
    # neighbours' checkpoints commit (a round of pure steps checkpointing
    # together: tests/integration/test_rounds.py)
    monkeypatch.setattr(StepRunner, "_together", lambda self, quick: ([], quick))
    fast = fast.model_copy(update={"eager_successors": False})  # one step a batch
    registry = flows_registry()
    jobs = [
        submit("fan", {"n": 1, "fail_step": f"none{i}"}, settings=fast, registry=registry).job_id
        for i in range(3)
    ]
    with one_runner(fast) as (runner, transport):
        runner.handle_batch(receive_all(transport, 3))  # the plans
        runner.handle_batch(receive_all(transport, 3))  # the parts
        batch = receive_all(transport, 3)  # the gathers
        first, victim, last = group_order(batch)
        real = store.step_outputs_select

        def failing_read(c: Any, job_id: uuid.UUID, *args: Any) -> Any:
            if job_id == victim:
                c.execute("SELECT pg_cancel_backend(pg_backend_pid()), pg_sleep(5)")
            return real(c, job_id, *args)

        monkeypatch.setattr(store, "step_outputs_select", failing_read)
        outcomes = runner.handle_batch(batch)
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    assert [o.kind for o in outcomes].count("retried") == 1
    gathers = {
        r["job_id"]: (r["status"], r["attempts"], r["has_output"])
        for r in conn.execute(
            "SELECT job_id, status, attempts, output IS NOT NULL AS has_output "
            "FROM engine_step_runs WHERE step = 'gather'"
        ).fetchall()
    }
    assert gathers[first] == ("done", 1, True), "its checkpoint committed with the group"
    assert gathers[victim] == ("pending", 1, False), "its failure recorded on its own"
    assert gathers[last] == ("done", 1, True)
    assert len(jobs) == 3


def test_group__a_group_lost_to_a_statement_outside_the_savepoints_charges_no_member(
    fast: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # whatever aborts the group's transaction outside every savepoint loses the
    # checkpoints before it: their step runs go again at once, at no charge,
    # and the eager successors they claimed in it (never created) are not run
    registry = flows_registry()
    jobs = [submit("chain", {"n": n}, settings=fast, registry=registry).job_id for n in range(3)]
    with one_runner(fast) as (runner, transport):
        batch = receive_all(transport, 3)
        order = group_order(batch)
        run_member = StepRunner._run_member

        def break_before_last(self: StepRunner, member: Any) -> Outcome:
            claimed = member.lease.claimed
            if claimed.job_id == order[2] and claimed.step == "a":
                with contextlib.suppress(psycopg.errors.DivisionByZero):
                    self.conn.execute("SELECT 1 / 0")  # outside every member's savepoint
            return run_member(self, member)

        monkeypatch.setattr(StepRunner, "_run_member", break_before_last)
        runner.handle_batch(batch)
        assert runner.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        monkeypatch.setattr(StepRunner, "_run_member", run_member)
    lost = conn.execute(
        "SELECT job_id, status, attempts FROM engine_step_runs "
        "WHERE step = 'a' AND job_id = ANY(%s)",
        (order[:2],),
    ).fetchall()
    assert {(r["status"], r["attempts"]) for r in lost} == {("pending", 0)}, lost
    released = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE kind = 'released' AND job_id = ANY(%s)",
        (order[:2],),
    ).fetchone()
    assert released == {"n": 2}
    with thread_worker(fast):
        for job in jobs:
            assert wait_job_ended(conn, job) == "done"
    attempts = conn.execute(
        "SELECT DISTINCT attempts FROM engine_step_runs WHERE job_id = ANY(%s)", (jobs,)
    ).fetchall()
    assert attempts == [{"attempts": 1}], "no step run paid for the lost group"
    for job in jobs:
        assert effects(conn, job) == ["a", "b", "c"]


# -- bounded by time, keyed checkpoints alone -------------------------------------------


def test_group__a_keyed_checkpoint_commits_before_any_neighbour_runs(
    fast: Settings, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a keyed checkpoint holds its key's lock until it commits: left in a group
    # behind a neighbour slower this time than its median, its lease lapses,
    # and the key's next claim waits for it (or, before, admitted a second holder)
    registry = Registry.load(["testflows", "keyedflows"])
    keyed = submit("keyed", {"group": "grouped"}, settings=fast, registry=registry).job_id
    after: list[uuid.UUID] = []
    for n in itertools.count():  # neighbours the group runs after the keyed one (job order)
        job = submit("chain", {"n": n}, settings=fast, registry=registry).job_id
        if job.bytes > keyed.bytes:
            after.append(job)
        if len(after) == 2:
            break
    queued = conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone()
    assert queued is not None
    seen: list[str] = []
    run_member = StepRunner._run_member

    def look(self: StepRunner, member: Any) -> Outcome:
        if member.lease.claimed.job_id in after and not seen:
            row = conn.execute(
                "SELECT status FROM engine_step_runs WHERE job_id = %s", (keyed,)
            ).fetchone()
            assert row is not None
            seen.append(row["status"])
        return run_member(self, member)

    monkeypatch.setattr(StepRunner, "_run_member", look)
    with one_runner(fast, registry, quick=("chain", "keyed")) as (runner, transport):
        outcomes = runner.handle_batch(receive_all(transport, int(queued["n"])))
    assert seen == ["done"], "the keyed checkpoint was committed before its neighbours ran"
    assert all(o.kind == "done" for o in outcomes)


def test_group__a_step_joins_by_its_worst_recent_run_not_its_median(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    with db.connect(fast, autocommit=True) as c:
        group = GroupCommit(c, PostgresTransport(fast), window_s=0.05)
        for _ in range(15):
            group.times.record("f", "usually_quick", 0.001)
        group.times.record("f", "usually_quick", 1.0)  # slow once lately
        group.times.record("f", "quick", 0.03)
        assert not group.quick("f", "usually_quick"), "its worst passes the window"
        assert group.quick("f", "quick")
        group.begin("f", "quick")
        c.execute("CREATE TEMPORARY TABLE IF NOT EXISTS t (n int)")
        c.execute("INSERT INTO t VALUES (1)")
        group.begin("f", "quick")  # open 0 s + worst 0.03 s: within the window, joins
        assert group.open and c.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        # the group has been open 30 ms: this step's worst (30 ms) would pass 50 ms
        group._opened_at -= 0.03
        group.begin("f", "quick")
        assert group.open
        group.rollback()
        row = c.execute("SELECT count(*) AS n FROM t").fetchone()
    assert row == {"n": 1}, "the first group committed before the step that would overrun it"
