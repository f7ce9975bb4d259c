"""Durable waits and signals on PostgreSQL: a waiting step holds no slot, lease or attempt."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import waitflows
from harness import fast_settings, thread_worker, wait_job_ended, wait_until

from engine import StepContext, signal, submit
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.errors import BadInput, NoSuchJob
from engine.flow.registry import Registry
from engine.jobs import admin
from engine.store import db
from engine.transports.postgres import PostgresTransport
from engine.worker.sweeper import Sweeper

MODULES = ["testflows", "waitflows"]


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings, flow_modules=MODULES)


@pytest.fixture
def registry() -> Registry:
    return Registry.load(MODULES)


@pytest.fixture(autouse=True)
def _no_hooks() -> Iterator[None]:
    yield
    waitflows.HOOKS.clear()


def run_of(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM engine_step_runs WHERE job_id = %s AND step = %s", (job_id, step)
    ).fetchone()
    assert row is not None, f"no step run {step}"
    return dict(row)


def kinds(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[str]:
    rows = conn.execute(
        "SELECT kind FROM engine_history WHERE job_id = %s ORDER BY at, id", (job_id,)
    ).fetchall()
    return [r["kind"] for r in rows]


def waiting(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str = "gate") -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM engine_step_runs WHERE job_id = %s AND step = %s AND status = 'waiting'",
            (job_id, step),
        ).fetchone()
        is not None
    )


def submit_approval(fast: Settings, registry: Registry, **params: Any) -> uuid.UUID:
    return submit("approval", params, settings=fast, registry=registry).job_id


def test_wait__frees_its_slot_and_resumes_on_the_signal_with_its_attempt_unchanged(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry)
    with thread_worker(fast, registry, worker_id="one-slot"):  # concurrency 1
        wait_until(lambda: waiting(conn, job), what="the gate to wait")
        gate = run_of(conn, job, "gate")
        assert (gate["attempts"], gate["lease_token"], gate["wait_signal"]) == (0, None, "go")
        assert gate["wait_until"] is None
        # the one slot is free: another job runs to the end meanwhile
        other = submit("chain", {"n": 1}, settings=fast, registry=registry).job_id
        assert wait_job_ended(conn, other) == "done"
        assert waiting(conn, job)
        sent = signal(job, "go", {"by": "acct"}, settings=fast, sent_by="tester")
        assert (sent.created, sent.woken) == (True, 1)
        assert wait_job_ended(conn, job) == "done"
    gate = run_of(conn, job, "gate")
    assert gate["attempts"] == 1, "waiting costs no attempt"
    assert gate["output"]["data"] == {"by": "acct"}
    assert gate["output"]["sent_by"] == "tester"
    assert gate["output"]["attempt"] == 1
    history = kinds(conn, job)
    assert history.count("waiting") == 1
    assert history.index("waiting") < history.index("signalled") < history.index("woken")
    # the finish step's effect committed once; the gate's first run wrote nothing
    effects = conn.execute(
        "SELECT step FROM test_effects WHERE job_id = %s ORDER BY step", (job,)
    ).fetchall()
    assert [r["step"] for r in effects] == ["finish", "prepare"]


def test_signal__sent_before_the_step_asks_is_kept_and_found_without_waiting(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry)
    sent = signal(job, "go", {"by": "early"}, settings=fast)
    assert (sent.created, sent.woken) == (True, 0)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    assert run_of(conn, job, "gate")["output"]["data"] == {"by": "early"}
    assert "waiting" not in kinds(conn, job)


def test_signal__arriving_between_the_look_and_the_wait_is_not_missed(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry)

    def send(ctx: StepContext) -> None:
        # the step found nothing; the signal commits before its step run is parked
        waitflows.HOOKS.pop("before_wait")
        signal(ctx.job_id, "go", {"by": "racer"}, settings=fast)

    waitflows.HOOKS["before_wait"] = send
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    detail = conn.execute(
        "SELECT detail FROM engine_history WHERE job_id = %s AND kind = 'waiting'", (job,)
    ).fetchone()
    assert detail is not None and detail["detail"]["resumed"] is True
    gate = run_of(conn, job, "gate")
    assert (gate["attempts"], gate["output"]["data"]) == (1, {"by": "racer"})


def test_signal__a_second_send_is_idempotent_and_other_data_is_refused(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry)
    signal(job, "go", {"by": "a"}, settings=fast, sent_by="first")
    again = signal(job, "go", {"by": "a"}, settings=fast, sent_by="second")
    assert (again.created, again.sent_by) == (False, "first")
    with pytest.raises(BadInput, match=r"signal 'go' was sent to job .* already.*\"by\": \"a\""):
        signal(job, "go", {"by": "b"}, settings=fast)
    rows = conn.execute("SELECT count(*) AS n FROM engine_signals").fetchone()
    assert rows is not None and rows["n"] == 1


def test_signal__bad_input_names_the_value(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry)
    with pytest.raises(NoSuchJob, match="no job with id"):
        signal(uuid.uuid4(), "go", settings=fast)
    with pytest.raises(BadInput, match="invalid signal name 'Go!'"):
        signal(job, "Go!", settings=fast)
    with pytest.raises(BadInput, match="data of signal 'go' is not JSON"):
        signal(job, "go", {"when": datetime.now(UTC)}, settings=fast)
    admin.cancel(fast, job)
    with pytest.raises(BadInput, match=f"job {job} is cancelled; only a pending or running"):
        signal(job, "go", settings=fast)


def test_signal__in_the_callers_transaction_rolled_back_leaves_nothing(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting(conn, job), what="the gate to wait")
        queued = conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone()
        with db.connect(fast) as caller:
            signal(job, "go", {"by": "request"}, conn=caller, settings=fast)
            caller.rollback()
        assert conn.execute("SELECT * FROM engine_signals").fetchall() == []
        assert waiting(conn, job), "nothing woke it"
        assert conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone() == queued
        # committed, it wakes the step (its message left in the caller's commit)
        with db.connect(fast) as caller:
            signal(job, "go", {"by": "request"}, conn=caller, settings=fast)
            caller.commit()
        assert wait_job_ended(conn, job) == "done"


def test_wait__timeout_aged_by_sql_raises_signal_timeout_which_the_step_handles(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry, timeout_s=3 * 86400, handle_timeout=True)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting(conn, job), what="the gate to wait")
        gate = run_of(conn, job, "gate")
        assert gate["wait_until"] - gate["claimed_at"] > timedelta(days=2, hours=23)
        conn.execute(
            "UPDATE engine_step_runs SET wait_until = now() - interval '1 s' WHERE id = %s",
            (gate["id"],),
        )
        assert wait_job_ended(conn, job) == "done"
    gate = run_of(conn, job, "gate")
    assert gate["output"]["timed_out"] is True
    assert gate["attempts"] == 1
    woken = conn.execute(
        "SELECT detail FROM engine_history WHERE job_id = %s AND kind = 'woken'", (job,)
    ).fetchone()
    assert woken is not None and woken["detail"]["by"] == "timeout"


def test_wait__timeout_left_unhandled_fails_the_step_at_once(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry, timeout_s=3600)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting(conn, job), what="the gate to wait")
        conn.execute(
            "UPDATE engine_step_runs SET wait_until = now() - interval '1 s' "
            "WHERE job_id = %s AND step = 'gate'",
            (job,),
        )
        assert wait_job_ended(conn, job) == "failed"
    gate = run_of(conn, job, "gate")
    assert (gate["status"], gate["attempts"]) == ("dead", 1)
    assert gate["error"]["type"] == "SignalTimeout"
    assert "signal 'go' did not arrive by" in gate["error"]["message"]


def test_sleep_until__waits_durably_until_the_time_then_runs_again(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit("nap", {"sleep_s": 3600}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        wait_until(lambda: waiting(conn, job, "nap"), what="the nap to wait")
        nap = run_of(conn, job, "nap")
        created = conn.execute(
            "SELECT created_at FROM engine_jobs WHERE id = %s", (job,)
        ).fetchone()
        assert created is not None
        assert nap["wait_until"] == created["created_at"] + timedelta(hours=1)
        assert (nap["wait_signal"], nap["attempts"], nap["lease_token"]) == (None, 0, None)
        # an hour passes: the job was submitted an hour ago, the nap is due
        conn.execute(
            "UPDATE engine_jobs SET created_at = created_at - interval '1 hour' WHERE id = %s",
            (job,),
        )
        conn.execute(
            "UPDATE engine_step_runs SET wait_until = now() - interval '1 s' WHERE id = %s",
            (nap["id"],),
        )
        assert wait_job_ended(conn, job) == "done"
    assert run_of(conn, job, "nap")["output"] == {"attempt": 1}


def test_cancel__a_waiting_job_is_cancelled_with_its_waiting_step_run(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting(conn, job), what="the gate to wait")
        admin.cancel(fast, job)
    assert run_of(conn, job, "gate")["status"] == "cancelled"
    # a retry waits again (a fresh wait), and the signal then finishes it
    admin.retry_job(fast, job)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting(conn, job), what="the gate to wait again")
        signal(job, "go", settings=fast)
        assert wait_job_ended(conn, job) == "done"


def test_wait__a_stale_attempt_cannot_park_its_step_run(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry)

    def steal(ctx: StepContext) -> None:
        # another worker reclaimed the step run (its lease expired): the token changed
        waitflows.HOOKS.pop("before_wait")
        with db.connect(fast, autocommit=True) as other:
            other.execute(
                "UPDATE engine_step_runs SET lease_token = gen_random_uuid(), "
                "lease_owner = 'thief' WHERE id = %s",
                (ctx.step_run_id,),
            )

    waitflows.HOOKS["before_wait"] = steal
    with thread_worker(fast, registry) as worker:
        wait_until(lambda: worker.outcomes.get("fenced"), what="the wait to be fenced")
    gate = run_of(conn, job, "gate")
    assert (gate["status"], gate["lease_owner"], gate["attempts"]) == ("running", "thief", 1)
    assert gate["wait_signal"] is None
    assert "waiting" not in kinds(conn, job)
    assert "fenced" in kinds(conn, job)


def test_sweeper__wakes_only_waits_past_their_deadline(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    due = submit_approval(fast, registry, n=1, timeout_s=60)
    later = submit_approval(fast, registry, n=2, timeout_s=60)
    forever = submit_approval(fast, registry, n=3)
    with thread_worker(fast, registry):
        for job in (due, later, forever):
            wait_until(lambda j=job: waiting(conn, j), what="every gate to wait")
    conn.execute(
        "UPDATE engine_step_runs SET wait_until = now() - interval '1 s' "
        "WHERE job_id = %s AND step = 'gate'",
        (due,),
    )
    with db.connect(fast, autocommit=True) as c:
        report = Sweeper(fast, PostgresTransport(fast), "sweeper", AlertRecorder([])).sweep(c)
    assert report.woken == 1
    assert run_of(conn, due, "gate")["status"] == "pending"
    assert waiting(conn, later) and waiting(conn, forever)


def test_signal__an_undeclared_name_is_refused_naming_the_valid_ones_and_writes_nothing(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry)  # approval declares "go"
    with pytest.raises(
        BadInput,
        match=r"signal 'og' is not declared by flow approval \(version 1\) of job .*: "
        r"valid signals: 'go'",
    ):
        signal(job, "og", {"by": "typo"}, settings=fast)
    assert conn.execute("SELECT * FROM engine_signals").fetchall() == []
    assert "signalled" not in kinds(conn, job)
    declared = conn.execute("SELECT signals FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert declared is not None and declared["signals"] == ["go"]
    # a flow that declares no signals receives none
    napping = submit("nap", {}, settings=fast, registry=registry).job_id
    with pytest.raises(BadInput, match="it declares no signals"):
        signal(napping, "go", settings=fast)
    assert conn.execute("SELECT * FROM engine_signals").fetchall() == []


def test_signal__a_job_submitted_before_signals_were_declared_accepts_any_valid_name(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry)
    conn.execute("UPDATE engine_jobs SET signals = NULL WHERE id = %s", (job,))  # as migrated
    assert signal(job, "anything", settings=fast).created


def test_wait__for_an_undeclared_signal_is_a_definition_error_that_fails_the_step_at_once(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry, signal="nope")
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "failed"
    gate = run_of(conn, job, "gate")
    assert (gate["status"], gate["attempts"], gate["wait_signal"]) == ("dead", 1, None)
    assert gate["error"]["type"] == "DefinitionError"
    assert (
        "step 'gate' waits for signal 'nope', which its flow does not declare: "
        "valid signals: 'go'" in gate["error"]["message"]
    )
    assert "waiting" not in kinds(conn, job)


def _age_wait(conn: psycopg.Connection[Any], step_run_id: uuid.UUID) -> None:
    conn.execute(
        "UPDATE engine_step_runs SET wait_until = now() - interval '1 s' WHERE id = %s",
        (step_run_id,),
    )


def _waiting_until_later_than(
    conn: psycopg.Connection[Any], job: uuid.UUID, step: str, later: timedelta
) -> bool:
    row = conn.execute(
        "SELECT 1 FROM engine_step_runs WHERE job_id = %s AND step = %s AND status = 'waiting' "
        "AND wait_until > now() + %s",
        (job, step, later),
    ).fetchone()
    return row is not None


def test_wait__again_after_a_caught_signal_timeout_with_a_new_deadline_then_the_signal_comes(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry, timeout_s=3600, rewait_s=3 * 86400)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting(conn, job), what="the gate to wait")
        first = run_of(conn, job, "gate")
        assert first["wait_until"] - first["claimed_at"] < timedelta(hours=2)
        _age_wait(conn, first["id"])
        # woken at its deadline, the step catches the timeout and waits again
        wait_until(
            lambda: _waiting_until_later_than(conn, job, "gate", timedelta(days=2)),
            what="the gate to wait again, with the new deadline",
        )
        again = run_of(conn, job, "gate")
        assert (again["wait_signal"], again["attempts"]) == ("go", 0)
        assert len(again["wait_past"]) == 1, "the first wait's deadline, to replay its timeout"
        sent = signal(job, "go", {"by": "late"}, settings=fast)
        assert sent.woken == 1
        assert wait_job_ended(conn, job) == "done"
    gate = run_of(conn, job, "gate")
    assert (gate["output"]["data"], gate["output"]["timed_out"]) == ({"by": "late"}, False)
    assert gate["attempts"] == 1
    assert kinds(conn, job).count("waiting") == 2


def test_wait__again_after_a_caught_signal_timeout_times_out_on_its_own_deadline(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit_approval(fast, registry, timeout_s=3600, rewait_s=3 * 86400, handle_timeout=True)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting(conn, job), what="the gate to wait")
        _age_wait(conn, run_of(conn, job, "gate")["id"])
        wait_until(
            lambda: _waiting_until_later_than(conn, job, "gate", timedelta(days=2)),
            what="the gate to wait again",
        )
        # the second deadline passes too: the rerun replays the first timeout, then its own
        _age_wait(conn, run_of(conn, job, "gate")["id"])
        assert wait_job_ended(conn, job) == "done"
    gate = run_of(conn, job, "gate")
    assert gate["output"]["timed_out"] is True
    assert kinds(conn, job).count("woken") == 2
