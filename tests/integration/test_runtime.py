"""The worker runtime on PostgreSQL: claim, lease, fencing, scheduling, retries."""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
import testflows
from harness import (
    ExternalQueue,
    fast_settings,
    flows_registry,
    recorded_alerts,
    thread_worker,
    wait_job_ended,
    wait_until,
)

from engine import submit
from engine.config import Settings
from engine.errors import ConfigError, Refused
from engine.runner import claim
from engine.store import Claimed, ClaimRefused, db
from engine.transports.message import StepMessage
from engine.transports.postgres import PostgresTransport
from engine.worker.worker import Worker, check_startup

RUNNABLE = flows_registry().runnable()  # every test flow, at its version


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings)


def effects(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[tuple[str, str, int]]:
    rows = conn.execute(
        "SELECT step, fanout_key, attempt FROM test_effects WHERE job_id = %s "
        "ORDER BY step, fanout_key",
        (job_id,),
    ).fetchall()
    return [(r["step"], r["fanout_key"], r["attempt"]) for r in rows]


def steps(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        "SELECT step, fanout_key, status, attempts, output, error FROM engine_step_runs "
        "WHERE job_id = %s",
        (job_id,),
    ).fetchall()
    return {r["step"] + (f"[{r['fanout_key']}]" if r["fanout_key"] else ""): r for r in rows}


def events(conn: psycopg.Connection[Any], job_id: uuid.UUID, kind: str) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT * FROM engine_history WHERE job_id = %s AND kind = %s ORDER BY at, id",
        (job_id, kind),
    ).fetchall()


def step_run_id(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str) -> uuid.UUID:
    row = conn.execute(
        "SELECT id FROM engine_step_runs WHERE job_id = %s AND step = %s", (job_id, step)
    ).fetchone()
    assert row is not None
    return uuid.UUID(str(row["id"]))


# -- end to end ------------------------------------------------------------------------


def test_worker__runs_a_chain_to_done_with_each_effect_once(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {"n": 7}, settings=fast, registry=flows_registry())
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert effects(conn, job.job_id) == [("a", "", 1), ("b", "", 1), ("c", "", 1)]
    assert {s["status"] for s in steps(conn, job.job_id).values()} == {"done"}
    assert steps(conn, job.job_id)["c"]["output"] == {"step": "c", "n": 7}
    queue = conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone()
    assert queue == {"n": 0}, "every delivery was deleted with its checkpoint"


def test_worker__fan_out_and_gather(fast: Settings, conn: psycopg.Connection[Any]) -> None:
    job = submit("fan", {"n": 12}, settings=fast, registry=flows_registry())
    with thread_worker(fast.model_copy(update={"concurrency": 4})):
        assert wait_job_ended(conn, job.job_id) == "done"
    runs = steps(conn, job.job_id)
    assert sorted(k for k in runs if k.startswith("part")) == sorted(
        f"part[{i}]" for i in range(12)
    )
    assert runs["gather"]["output"] == {"total": sum(i * i for i in range(12)), "count": 12}


def test_worker__fan_out_over_nothing_still_gathers(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("fan", {"n": 0}, settings=fast, registry=flows_registry())
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert steps(conn, job.job_id)["gather"]["output"] == {"total": 0, "count": 0}


def test_fan_in__two_branches_finishing_together_schedule_the_join_once(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    testflows.HOOKS["diamond"] = threading.Barrier(2)
    try:
        job = submit("diamond", {"n": 1}, settings=fast, registry=flows_registry())
        with thread_worker(fast.model_copy(update={"concurrency": 2})):
            assert wait_job_ended(conn, job.job_id) == "done"
    finally:
        testflows.HOOKS.pop("diamond")
    runs = steps(conn, job.job_id)
    assert sorted(runs) == ["a", "join", "left", "right"]
    assert runs["join"]["output"] == {"total": 2}
    assert effects(conn, job.job_id).count(("join", "", 1)) == 1


# -- claim -----------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
def test_claim__racing_claimers_behind_a_barrier_one_winner(
    fast: Settings, conn: psycopg.Connection[Any], isolation: str
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    message = StepMessage(job_id=job.job_id, step_run_id=step_run_id(conn, job.job_id, "a"))
    n = 8
    barrier = threading.Barrier(n, timeout=30)

    def one(i: int) -> Claimed | ClaimRefused:
        with db.connect(fast) as c:
            c.execute(f"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {isolation}")
            c.commit()
            barrier.wait()
            return claim(c, message, f"w{i}", 30, RUNNABLE)

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))
    winners = [r for r in results if isinstance(r, Claimed)]
    assert len(winners) == 1
    assert winners[0].attempt == 1
    assert {r.reason for r in results if isinstance(r, ClaimRefused)} <= {"held", "race"}
    row = conn.execute(
        "SELECT attempts, lease_owner FROM engine_step_runs WHERE id = %s", (message.step_run_id,)
    ).fetchone()
    assert row is not None and row["attempts"] == 1


def test_claim__expired_lease_is_reclaimed_with_attempt_2(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    message = StepMessage(job_id=job.job_id, step_run_id=step_run_id(conn, job.job_id, "a"))
    with db.connect(fast) as c:
        first = claim(c, message, "w1", 30, RUNNABLE)
        assert isinstance(first, Claimed)
        refused = claim(c, message, "w2", 30, RUNNABLE)
        assert isinstance(refused, ClaimRefused) and refused.reason == "held"
        # boundary on both sides: a lease expiring in a second is still live ...
        conn.execute(
            "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() + interval '1 s' "
            "WHERE id = %s",
            (message.step_run_id,),
        )
        assert isinstance(claim(c, message, "w2", 30, RUNNABLE), ClaimRefused)
        # ... one that expired a second ago is not
        conn.execute(
            "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
            "WHERE id = %s",
            (message.step_run_id,),
        )
        second = claim(c, message, "w2", 30, RUNNABLE)
    assert isinstance(second, Claimed)
    assert (second.attempt, second.reclaimed_from) == (2, "w1")
    assert second.token != first.token
    assert [e["worker"] for e in events(conn, job.job_id, "reclaimed")] == ["w2"]


def test_claim__foreign_or_unknown_ids_are_dropped(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    real = step_run_id(conn, job.job_id, "a")
    with db.connect(fast) as c:
        foreign = claim(c, StepMessage(job_id=uuid.uuid4(), step_run_id=real), "w", 30, RUNNABLE)
        unknown = claim(
            c, StepMessage(job_id=job.job_id, step_run_id=uuid.uuid4()), "w", 30, RUNNABLE
        )
    assert foreign == ClaimRefused("unknown")
    assert unknown == ClaimRefused("unknown")


# -- fencing and heartbeat -------------------------------------------------------------


def test_fencing__a_stolen_lease_stops_the_step_and_commits_nothing(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Any
) -> None:
    hold = str(tmp_path / "hold")
    settings = fast.model_copy(update={"heartbeat_s": 0.1})
    job = submit("chain", {"hold_file": hold}, settings=settings, registry=flows_registry())
    with thread_worker(settings) as worker:
        wait_until(lambda: (tmp_path / "hold.started").exists(), what="step b to start")
        b = step_run_id(conn, job.job_id, "b")
        # another worker took it over (as after an expiry): the token changes
        conn.execute(
            "UPDATE engine_step_runs SET lease_token = gen_random_uuid(), lease_owner = 'thief' "
            "WHERE id = %s",
            (b,),
        )
        wait_until(lambda: worker.outcomes.get("fenced"), what="the step to be fenced")
    assert ("b", "", 1) not in effects(conn, job.job_id), "a fenced step's writes roll back"
    assert events(conn, job.job_id, "lease_lost")
    assert events(conn, job.job_id, "fenced")
    assert steps(conn, job.job_id)["b"]["lease_owner" if False else "status"] == "running"


def test_heartbeat__keeps_a_step_alive_past_its_lease(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Any
) -> None:
    hold = tmp_path / "hold"
    settings = fast.model_copy(update={"lease_s": 1.0, "heartbeat_s": 0.2})
    job = submit("chain", {"hold_file": str(hold)}, settings=settings, registry=flows_registry())
    with thread_worker(settings):
        wait_until(lambda: (tmp_path / "hold.started").exists())
        b = step_run_id(conn, job.job_id, "b")
        # held for at least three whole leases' worth of renewals
        wait_until(
            lambda: (
                len(
                    conn.execute(
                        "SELECT 1 FROM engine_history WHERE step_run_id = %s AND kind = 'renewed'",
                        (b,),
                    ).fetchall()
                )
                >= 15
            ),
            what="renewals",
        )
        (tmp_path / "hold.release").touch()
        assert wait_job_ended(conn, job.job_id) == "done"
    assert steps(conn, job.job_id)["b"]["attempts"] == 1
    assert not events(conn, job.job_id, "reclaimed")


def test_startup__heartbeat_not_shorter_than_lease_or_visibility_is_refused(
    fast: Settings,
) -> None:
    with pytest.raises(ConfigError, match=r"heartbeat interval 30 s.*lease duration 30 s"):
        check_startup(fast.model_copy(update={"heartbeat_s": 30.0}))
    with pytest.raises(ConfigError, match="ENGINE_VISIBILITY_S"):
        check_startup(fast, queue_visibility_s=5.0)
    with pytest.raises(ConfigError):
        Worker(fast.model_copy(update={"heartbeat_s": 60.0}), flows_registry()).run()


# -- retries and dead letters ----------------------------------------------------------


def test_retry__backoff_follows_the_policy_then_dead_letter_and_alert(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    # step c: RetryPolicy(max_attempts=3, base 10 s, no jitter): delays 10 s, 20 s
    job = submit(
        "chain", {"fail_step": "c", "fail_times": 99}, settings=fast, registry=flows_registry()
    )
    c_id: uuid.UUID | None = None
    with thread_worker(fast):
        for attempt in (1, 2):
            wait_until(lambda a=attempt: len(events(conn, job.job_id, "retried")) >= a)
            c_id = step_run_id(conn, job.job_id, "c")
            row = conn.execute(
                "SELECT status, extract(epoch FROM available_at - clock_timestamp()) AS due_in "
                "FROM engine_step_runs WHERE id = %s",
                (c_id,),
            ).fetchone()
            assert row is not None and row["status"] == "pending"
            assert 0 < row["due_in"] <= 10 * 2 ** (attempt - 1)
            # move time: the backoff is over
            conn.execute(
                "UPDATE engine_step_runs SET available_at = clock_timestamp() WHERE id = %s",
                (c_id,),
            )
            conn.execute(
                "UPDATE engine_outbox SET deliver_at = clock_timestamp() "
                "WHERE step_run_id = %s AND published_at IS NULL",
                (c_id,),
            )
            conn.execute("UPDATE engine_queue SET visible_at = clock_timestamp() - interval '1 s'")
        assert wait_job_ended(conn, job.job_id) == "failed"
    delays = [e["detail"]["delay_s"] for e in events(conn, job.job_id, "retried")]
    assert delays == [10.0, 20.0]
    run = steps(conn, job.job_id)["c"]
    assert (run["status"], run["attempts"]) == ("dead", 3)
    assert "planned failure 3" in run["error"]["message"]
    assert "Traceback" in run["error"]["traceback"]
    dead = conn.execute("SELECT * FROM engine_dead_letters").fetchall()
    assert [(d["source"], d["step_run_id"]) for d in dead] == [("step", c_id)]
    [alert] = recorded_alerts(conn)
    assert (alert["dead_letter_id"], alert["job_id"]) == (dead[0]["id"], job.job_id)
    assert (alert["flow"], alert["step"], alert["attempts"]) == ("chain", "c", 3)
    assert alert["error_line"].startswith("ValueError: planned failure 3")
    assert effects(conn, job.job_id) == [("a", "", 1), ("b", "", 1)], "failed attempts roll back"


def test_retry__a_step_that_fails_twice_then_succeeds(
    fast: Settings, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    job = submit("chain", {"fail_times": 2}, settings=fast, registry=flows_registry())
    with caplog.at_level(logging.INFO), thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert steps(conn, job.job_id)["b"]["attempts"] == 3
    # the error's first line is logged; a line quoting a document's values is not
    failed = [r.getMessage() for r in caplog.records if "failed (retried)" in r.getMessage()]
    assert len(failed) == 2 and all("planned failure" in m for m in failed)
    assert not any(testflows.DOCUMENT_IN_ERROR in r.getMessage() for r in caplog.records)
    retried = events(conn, job.job_id, "retried")
    assert testflows.DOCUMENT_IN_ERROR in str(retried[0]["detail"]), "the database keeps it"
    assert effects(conn, job.job_id) == [("a", "", 1), ("b", "", 3), ("c", "", 1)]


def test_poison__a_step_that_always_fails_does_not_block_other_jobs(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    poison = submit("chain", {"fail_times": 99, "n": 1}, settings=fast, registry=flows_registry())
    healthy = [
        submit("chain", {"n": i}, settings=fast, registry=flows_registry()) for i in range(2, 7)
    ]
    with thread_worker(fast.model_copy(update={"max_attempts": 3})):
        for job in healthy:
            assert wait_job_ended(conn, job.job_id) == "done"
        assert wait_job_ended(conn, poison.job_id) == "failed"
    assert steps(conn, poison.job_id)["b"]["attempts"] == 3


# -- malformed messages ----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "",
        "   ",
        '{"v": 2, "job_id": "x"}',
        '{"v": 1, "job_id": "00000000-0000-0000-0000-000000000000", "step_run_id": 1e999}',
        # (a NUL byte cannot travel through this queue's text column, nor through
        # SQS; StepMessage.decode refuses it: tests/unit/test_config.py)
        '{"v": 1, "job_id": "00000000-0000-0000-0000-000000000000"}',
        '{"v": 1, "job_id": "<script>", "step_run_id": "\'; DROP TABLE engine_jobs; --"}',
        "[" * 10_000,
        "9" * 5000,
    ],
)
def test_malformed__bodies_are_dead_lettered_and_the_worker_stays_up(
    fast: Settings, conn: psycopg.Connection[Any], body: str
) -> None:
    transport = PostgresTransport(fast)
    transport.send_raw(body)
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    with thread_worker(fast) as worker:
        assert wait_job_ended(conn, job.job_id) == "done"
        wait_until(lambda: worker.outcomes.get("malformed"))
    dead = conn.execute("SELECT source, reason FROM engine_dead_letters").fetchall()
    assert len(dead) == 1 and dead[0]["source"] == "message"
    assert conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone() == {"n": 0}
    transport.close()


def test_unknown_and_finished_step_messages_are_dropped(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"
    transport = PostgresTransport(fast)
    transport.send_raw(StepMessage(job_id=job.job_id, step_run_id=uuid.uuid4()).encode())
    a = step_run_id(conn, job.job_id, "a")
    transport.send_raw(StepMessage(job_id=job.job_id, step_run_id=a).encode())
    with thread_worker(fast) as worker:
        wait_until(lambda: worker.outcomes.get("dropped") and worker.outcomes.get("refused"))
    assert conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone() == {"n": 0}
    assert conn.execute("SELECT count(*) AS n FROM engine_dead_letters").fetchone() == {"n": 0}
    assert effects(conn, job.job_id).count(("a", "", 1)) == 1
    transport.close()


# -- delivery: duplicates, lost messages, outbox crash points --------------------------


def test_every_message_sent_three_times__no_double_effect(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    jobs = [
        submit("fan", {"n": 3, "hold_step": "none"}, settings=fast, registry=flows_registry())
        for _ in range(1)
    ] + [submit("chain", {"n": i}, settings=fast, registry=flows_registry()) for i in range(5)]
    # duplicate every message already queued, twice
    conn.execute(
        "INSERT INTO engine_queue (body) SELECT body FROM engine_queue, generate_series(1, 2)"
    )
    with thread_worker(fast.model_copy(update={"concurrency": 4})):
        for job in jobs:
            assert wait_job_ended(conn, job.job_id) == "done"
    dup = conn.execute(
        "SELECT job_id, step, fanout_key, count(*) AS n FROM test_effects "
        "GROUP BY 1, 2, 3 HAVING count(*) > 1"
    ).fetchall()
    assert dup == []
    attempts = conn.execute("SELECT max(attempts) AS m FROM engine_step_runs").fetchone()
    assert attempts == {"m": 1}, "a duplicate never makes a second attempt"


def test_outbox__committed_but_never_published_is_relayed_by_the_sweeper(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    with db.connect(fast) as c:
        job = submit(
            "chain",
            {"n": 3},
            conn=c,
            settings=fast,
            registry=flows_registry(),
            publisher=ExternalQueue(),
        )
        c.commit()
    # the process that committed "crashed" before publishing: nothing in the queue
    assert conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone() == {"n": 0}
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"


def test_outbox__published_but_not_marked_makes_a_harmless_duplicate(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    with db.connect(fast) as c:
        job = submit("chain", {"n": 3}, conn=c, settings=fast, registry=flows_registry())
        c.commit()
    # published, then crashed before marking: the relay will send it again
    a = step_run_id(conn, job.job_id, "a")
    PostgresTransport(fast).send_raw(StepMessage(job_id=job.job_id, step_run_id=a).encode())
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert effects(conn, job.job_id) == [("a", "", 1), ("b", "", 1), ("c", "", 1)]


def test_sweeper__a_lost_message_delays_work_but_never_loses_it(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    conn.execute("DELETE FROM engine_queue")  # the message is lost
    # republish_after is the bound on how long a lost message delays work
    with thread_worker(fast.model_copy(update={"republish_after_s": 0.5})):
        assert wait_job_ended(conn, job.job_id) == "done"


def test_sweeper__expired_lease_of_a_dead_worker_is_reclaimed_once(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    a = step_run_id(conn, job.job_id, "a")
    with db.connect(fast) as c:
        assert isinstance(
            claim(c, StepMessage(job_id=job.job_id, step_run_id=a), "dead", 30, RUNNABLE), Claimed
        )
    conn.execute("DELETE FROM engine_queue")  # the dead worker's message is gone too
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE id = %s",
        (a,),
    )
    # several workers sweeping at the same boundary
    with thread_worker(fast), thread_worker(fast), thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert len(events(conn, job.job_id, "reclaimed")) == 1
    assert steps(conn, job.job_id)["a"]["attempts"] == 2
    assert effects(conn, job.job_id)[0] == ("a", "", 2)


def test_sweeper__worker_died_on_the_last_attempt_is_dead_lettered(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    a = step_run_id(conn, job.job_id, "a")
    conn.execute("UPDATE engine_step_runs SET max_attempts = 1 WHERE id = %s", (a,))
    with db.connect(fast) as c:
        assert isinstance(
            claim(c, StepMessage(job_id=job.job_id, step_run_id=a), "dead", 30, RUNNABLE), Claimed
        )
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE id = %s",
        (a,),
    )
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "failed"
    assert steps(conn, job.job_id)["a"]["status"] == "dead"
    [alert] = recorded_alerts(conn)
    assert (alert["job_id"], alert["step"], alert["attempts"]) == (job.job_id, "a", 1)
    assert "lease expired during the last allowed attempt" in alert["error_line"]


# -- cancel and retry ------------------------------------------------------------------


def test_cancel__a_running_step_stops_and_commits_nothing(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Any
) -> None:
    from engine.jobs import admin

    settings = fast.model_copy(update={"heartbeat_s": 0.1})
    job = submit(
        "chain", {"hold_file": str(tmp_path / "hold")}, settings=settings, registry=flows_registry()
    )
    with thread_worker(settings) as worker:
        wait_until(lambda: (tmp_path / "hold.started").exists())
        admin.cancel(settings, job.job_id)
        wait_until(lambda: worker.outcomes.get("fenced") or worker.outcomes.get("cancelled"))
    assert job_status_of(conn, job.job_id) == "cancelled"
    assert effects(conn, job.job_id) == [("a", "", 1)]
    assert {s["status"] for s in steps(conn, job.job_id).values()} == {"done", "cancelled"}


def job_status_of(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str:
    row = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row["status"])


def test_retry_job__a_failed_job_resumes_from_its_checkpoints(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    from engine.jobs import admin

    settings = fast.model_copy(update={"max_attempts": 2})
    job = submit("chain", {"fail_times": 2}, settings=settings, registry=flows_registry())
    with thread_worker(settings):
        assert wait_job_ended(conn, job.job_id) == "failed"
        reopened = admin.retry_job(settings, job.job_id)
        assert reopened.step_runs == 1
        wait_until(lambda: job_status_of(conn, job.job_id) == "done")
    # a ran once; b failed twice (rolled back) and succeeded on its third attempt
    assert effects(conn, job.job_id) == [("a", "", 1), ("b", "", 3), ("c", "", 1)]
    assert conn.execute(
        "SELECT replayed_at IS NOT NULL AS r FROM engine_dead_letters"
    ).fetchall() == [{"r": True}]


def test_retry_job__a_job_cancelled_before_it_started_records_its_start_when_retried(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    from engine.jobs import admin

    job = submit("chain", {}, settings=fast, registry=flows_registry()).job_id
    admin.cancel(fast, job, "wrong period")  # still pending: it never started
    admin.retry_job(fast, job)
    with thread_worker(fast):
        assert wait_job_ended(conn, job) == "done"
    row = conn.execute(
        "SELECT started_at IS NOT NULL AND started_at <= finished_at AS ok "
        "FROM engine_jobs WHERE id = %s",
        (job,),
    ).fetchone()
    assert row == {"ok": True}


def test_reject__the_job_fails_once_with_the_reason_no_dead_letter_no_alert(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Any
) -> None:
    from engine.jobs import admin

    bad = tmp_path / "bad-data"
    bad.touch()
    job = submit("chain", {"reject_while": str(bad)}, settings=fast, registry=flows_registry())
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "failed"
        run = steps(conn, job.job_id)["b"]
        # one attempt: no retry, though the policy allows five
        assert (run["status"], run["attempts"]) == ("dead", 1)
        assert run["error"]["type"] == "Reject"
        assert "b refuses its input" in run["error"]["message"]
        failed = conn.execute(
            "SELECT error FROM engine_jobs WHERE id = %s", (job.job_id,)
        ).fetchone()
        assert failed is not None
        assert failed["error"].startswith("step b: Reject: b refuses its input")
        dead = conn.execute("SELECT count(*) AS n FROM engine_dead_letters").fetchone()
        assert dead == {"n": 0}, "no dead letter"
        assert recorded_alerts(conn) == [], "no alert"
        rejected = events(conn, job.job_id, "rejected")
        assert [e["step_run_id"] for e in rejected] == [step_run_id(conn, job.job_id, "b")]
        assert events(conn, job.job_id, "retried") == []
        assert events(conn, job.job_id, "dead_lettered") == []
        assert len(events(conn, job.job_id, "job_failed")) == 1
        assert effects(conn, job.job_id) == [("a", "", 1)], "the rejected attempt rolled back"
        assert "c" not in steps(conn, job.job_id)

        # a rejection is the data's decision: `engine retry` would only repeat it (issue 35);
        # once the data is fixed, a new job runs it
        bad.unlink()
        with pytest.raises(Refused, match="submit a new job"):
            admin.retry_job(fast, job.job_id)
        assert job_status_of(conn, job.job_id) == "failed"
        params = {"reject_while": str(bad)}
        again = submit("chain", params, settings=fast, registry=flows_registry())
        assert again.job_id != job.job_id
        wait_until(lambda: job_status_of(conn, again.job_id) == "done")
    assert effects(conn, again.job_id) == [("a", "", 1), ("b", "", 1), ("c", "", 1)]


def test_visibility_shorter_than_the_step__the_copy_backs_off_then_is_deleted(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Any
) -> None:
    hold = tmp_path / "hold"
    job = submit("chain", {"hold_file": str(hold)}, settings=fast, registry=flows_registry())
    # step b must come as a delivery (an eager successor has no message to copy)
    settings = fast.model_copy(
        update={"concurrency": 2, "heartbeat_s": 25.0, "eager_successors": False}
    )
    with thread_worker(settings) as worker:
        wait_until(lambda: (tmp_path / "hold.started").exists())
        # the delivery's visibility runs out while the step still runs (no heartbeat yet)
        conn.execute("UPDATE engine_queue SET visible_at = clock_timestamp() - interval '1 s'")
        wait_until(lambda: worker.outcomes.get("refused"), what="the copy to be refused")
        refusal = events(conn, job.job_id, "claim_refused")
        assert [e["detail"]["reason"] for e in refusal] == ["held"]
        left = conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone()
        assert left == {"n": 1}, "the copy is left, not deleted: it backs up the holder"
        (tmp_path / "hold.release").touch()
        assert wait_job_ended(conn, job.job_id) == "done"
        # the leftover copy comes back, finds its step done and is deleted
        conn.execute("UPDATE engine_queue SET visible_at = clock_timestamp() - interval '1 s'")
        wait_until(
            lambda: conn.execute("SELECT count(*) AS n FROM engine_queue").fetchone() == {"n": 0},
            what="the leftover copy to be deleted",
        )
    assert steps(conn, job.job_id)["b"]["attempts"] == 1


def test_report__rendered_when_the_job_ends(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Any
) -> None:
    settings = fast.model_copy(update={"report_on_end": True, "reports_dir": tmp_path})
    job = submit("chain", {"n": 5}, settings=settings, registry=flows_registry())
    with thread_worker(settings):
        assert wait_job_ended(conn, job.job_id) == "done"
        page = wait_until(lambda: (p := tmp_path / "runs" / f"{job.job_id}.html").exists() and p)
    assert "chain" in page.read_text(encoding="utf-8")
    assert (tmp_path / "index.html").exists()
