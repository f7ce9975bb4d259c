"""Versions in flight (issue 14, item 5): the roster, `engine flows show`, the orphan alert.

Time is moved by ageing rows (``last_seen_at``, ``created_at``), never by
sleeping; races between sweepers start behind a barrier.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import testflows
from harness import engine_cli, fast_settings, flows_registry, run_of, thread_worker, wait_until

from engine import store, submit
from engine.alerts import Alert, AlertRecorder
from engine.config import Settings
from engine.flow.registry import Registry
from engine.runner import StepRunner
from engine.runner.delivery import HANDOFF_S
from engine.runner.lease import Heartbeat
from engine.runner.services import SlotServices
from engine.store import db
from engine.store.rows import ClaimedDelivery
from engine.transports.postgres import PostgresTransport
from engine.worker.roster import Roster
from engine.worker.sweeper import Sweeper
from engine.worker.worker import connect_worker

CHAIN_V1 = "chain:1"


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings)


def workers(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: dict(r) for r in conn.execute("SELECT * FROM engine_workers").fetchall()}


def version_alerts(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in conn.execute(
            "SELECT * FROM engine_alerts WHERE source = 'version' ORDER BY id"
        ).fetchall()
    ]


def register(settings: Settings, worker_id: str, runnable: list[str]) -> Roster:
    roster = Roster(settings, worker_id, runnable)
    with db.connect(settings, autocommit=True) as c:
        roster.register(c)
    return roster


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of a table the CLI printed (rich's box drawing stripped)."""
    return [
        [cell.strip() for cell in line.strip().strip("│").split("│")]
        for line in text.splitlines()
        if line.strip().startswith("│")
    ]


def age_worker(conn: psycopg.Connection[Any], worker_id: str, seconds: float) -> None:
    conn.execute(
        "UPDATE engine_workers SET last_seen_at = last_seen_at - make_interval(secs => %s),"
        " started_at = started_at - make_interval(secs => %s) WHERE id = %s",
        (seconds, seconds, worker_id),
    )


def age_jobs(conn: psycopg.Connection[Any], seconds: float) -> None:
    conn.execute(
        "UPDATE engine_jobs SET created_at = created_at - make_interval(secs => %s)", (seconds,)
    )


@pytest.fixture
def runner_of(fast: Settings) -> Iterator[Any]:
    """A StepRunner (one slot) with only the flows given: a worker of some deploy."""
    opened: list[Any] = []

    def make(
        registry: Registry, settings: Settings | None = None
    ) -> tuple[StepRunner, PostgresTransport]:
        settings = fast if settings is None else settings
        transport = PostgresTransport(settings)
        heartbeat = Heartbeat(settings, transport, "slot")
        conn = connect_worker(settings)
        conn.autocommit = True
        opened.append((transport, heartbeat, conn))
        runner = StepRunner(
            SlotServices(
                settings=settings,
                registry=registry,
                transport=transport,
                worker="slot",
                conn=conn,
                heartbeat=heartbeat,
                alerts=AlertRecorder(["log"]),
                may_continue=lambda: False,
            )
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


@pytest.mark.parametrize(
    ("capable", "handed_on"),
    [("live", True), ("seen too long ago", False), ("stopped", False), ("none", False)],
)
def test_refusal__a_step_run_a_live_worker_can_run_is_handed_on_not_held_for_the_refusal_delay(
    fast: Settings, conn: psycopg.Connection[Any], runner_of: Any, capable: str, handed_on: bool
) -> None:
    # Issue 34, item 10: a worker without the flow (the chaos run's reduced
    # worker) received the copy of a step run a reclaim had just announced; its
    # fresh copy came back after ENGINE_REFUSAL_DELAY_S (10 s), hidden from the
    # live workers that had the flow and were waiting: recovery took 12.8 s
    # against its 11 s bound. The refusal delay is for a deploy that left no live
    # worker with the version; while one has it, the copy is due within a handoff.
    settings = fast.model_copy(update={"refusal_delay_s": 60.0})
    job = submit("chain", {}, settings=settings, registry=flows_registry())
    a = run_of(conn, job.job_id, "a")["id"]
    if capable != "none":
        roster = register(settings, "w-new", [CHAIN_V1])  # has chain:1 loaded
        if capable == "seen too long ago":
            age_worker(conn, "w-new", settings.worker_live_s + 5)
        elif capable == "stopped":
            roster.stop(conn)
    register(settings, "w-old", ["fan:1"])  # the refusing worker's own row, without chain
    runner, transport = runner_of(Registry([testflows.fan]), settings)
    [received] = transport.receive(1, 30, 1)
    assert runner.handle(received).kind == "refused"
    [copy] = conn.execute(
        "SELECT body, receive_count, extract(epoch FROM visible_at - clock_timestamp())::float8"
        " AS due_in_s FROM engine_queue"
    ).fetchall()
    assert json.loads(copy["body"])["step_run_id"] == str(a)
    assert copy["receive_count"] == 0, "a fresh copy, never the same one again (SQS redrive)"
    if handed_on:
        assert copy["due_in_s"] <= HANDOFF_S
    else:
        assert copy["due_in_s"] > settings.refusal_delay_s - 5, "no live worker can run it"
    assert run_of(conn, job.job_id, "a")["attempts"] == 0


# -- the roster ------------------------------------------------------------------------


def test_roster__a_worker_registers_at_start_beats_and_is_marked_stopped_on_shutdown(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    registry = flows_registry()
    with thread_worker(fast, registry, worker_id="w-roster"):
        row = wait_until(lambda: workers(conn).get("w-roster"), what="the registration")
        assert row["status"] == "running" and row["stopped_at"] is None
        assert row["runnable"] == sorted(registry.runnable())
        assert (row["transport"], row["concurrency"]) == ("postgres", 1)
        # time moves: the row looks ten minutes old, then the next beat renews it
        age_worker(conn, "w-roster", 600)
        wait_until(
            lambda: conn.execute(
                "SELECT last_seen_at > clock_timestamp() - interval '60 s' AS fresh"
                " FROM engine_workers WHERE id = 'w-roster'"
            ).fetchone()["fresh"],
            what="a beat",
        )
        again = workers(conn)["w-roster"]
        assert again["started_at"] == row["started_at"] - timedelta(seconds=600), (
            "a beat keeps started_at"
        )
    stopped = workers(conn)["w-roster"]
    assert stopped["status"] == "stopped" and stopped["stopped_at"] is not None


def test_roster__live_means_seen_within_worker_live_s_by_the_database_clock(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    register(fast, "w-fresh", [CHAIN_V1])
    register(fast, "w-just-live", [CHAIN_V1])
    register(fast, "w-just-gone", [CHAIN_V1])
    stopped = register(fast, "w-stopped", [CHAIN_V1])
    age_worker(conn, "w-just-live", fast.worker_live_s - 5)
    age_worker(conn, "w-just-gone", fast.worker_live_s + 5)
    stopped.stop(conn)
    live = store.worker_select_live(conn, live_s=fast.worker_live_s)
    assert [w.id for w in live] == ["w-fresh", "w-just-live"]


def test_roster__a_restart_under_the_same_id_reuses_the_row_with_its_new_versions(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    register(fast, "w", [CHAIN_V1]).stop(conn)
    register(fast, "w", ["chain:2"])
    row = workers(conn)["w"]
    assert (row["status"], row["runnable"], row["stopped_at"]) == ("running", ["chain:2"], None)


def test_roster__a_worker_whose_sweeps_are_rare_still_beats_within_worker_live_s(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    rare = fast.model_copy(update={"sweep_interval_s": 600.0, "worker_live_s": 2.0})
    with thread_worker(rare, flows_registry(), worker_id="w-rare"):
        wait_until(lambda: workers(conn).get("w-rare"), what="the registration")
        for _ in range(3):  # each time the row looks old, a beat renews it (no sweep came)
            age_worker(conn, "w-rare", 600)
            wait_until(
                lambda: [w.id for w in store.worker_select_live(conn, live_s=2.0)] == ["w-rare"],
                what="a beat",
            )


def test_worker_role__registers_beats_and_stops_under_its_role(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    role = fast.model_copy(update={"session_role": "engine_worker"})
    roster = register(role, "w-role", [CHAIN_V1])
    with db.connect(role, autocommit=True) as c:
        roster.beat(c)
        assert roster.stop(c)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("DELETE FROM engine_workers")
    assert workers(conn)["w-role"]["status"] == "stopped"


# -- versions in flight: engine flows show ---------------------------------------------


@pytest.fixture
def in_flight(fast: Settings, conn: psycopg.Connection[Any]) -> dict[str, uuid.UUID]:
    """chain: two v1 jobs (an old worker has v1), one v2 job (a new worker), one v3 job (none)."""
    registry = flows_registry()
    jobs = {}
    for name, version in (("v1a", 1), ("v1b", 1), ("v2", 2), ("v3", 3)):
        job = submit("chain", {"n": len(jobs)}, settings=fast, registry=registry)
        conn.execute(
            "UPDATE engine_jobs SET flow_version = %s, created_at = clock_timestamp()"
            " - make_interval(secs => %s) WHERE id = %s",
            (version, 100 * (4 - len(jobs)), job.job_id),
        )
        jobs[name] = job.job_id
    done = submit("chain", {"n": 99}, settings=fast, registry=registry)  # not active: not counted
    conn.execute(
        "UPDATE engine_jobs SET status = 'done', finished_at = now() WHERE id = %s", (done.job_id,)
    )
    register(fast, "w-old", [CHAIN_V1, "fan:1"])
    register(fast, "w-new", ["chain:2", "fan:1"])
    register(fast, "w-gone", ["chain:3"])
    age_worker(conn, "w-gone", 3600)
    return jobs


def test_flows_show__lists_each_version_with_active_jobs_and_the_live_workers_that_have_it(
    fast: Settings, in_flight: dict[str, uuid.UUID]
) -> None:
    shown = engine_cli(fast, "flows", "show", "chain", "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["flow"] == "chain" and data["version_here"] is None  # not a module of flows/
    versions = {v["version"]: v for v in data["versions"]}
    assert sorted(versions) == [1, 2, 3]
    assert (versions[1]["active_jobs"], versions[1]["workers"]) == (2, ["w-old"])
    assert (versions[2]["active_jobs"], versions[2]["workers"]) == (1, ["w-new"])
    assert (versions[3]["active_jobs"], versions[3]["workers"]) == (1, [])
    assert [v["orphaned"] for v in (versions[1], versions[2], versions[3])] == [False, False, True]
    assert versions[3]["last_loaded_at"] is not None  # w-gone had it, an hour ago
    # the oldest active v1 job was created 400 s ago, the v2 one 200 s ago
    assert versions[1]["oldest_age_s"] >= 400
    assert 200 <= versions[2]["oldest_age_s"] < versions[1]["oldest_age_s"] - 150

    text = engine_cli(fast, "flows", "show", "chain")
    assert text.returncode == 0, text.stderr
    rows = {r[0]: r for r in table_rows(text.stdout)}
    assert (rows["1"][1], rows["1"][3]) == ("2", "w-old")
    assert (rows["2"][1], rows["2"][3]) == ("1", "w-new")
    assert re.fullmatch(r"\d+m\d\ds", rows["1"][2]), "the oldest job's age, in minutes"
    assert re.fullmatch(r"none \(last seen 1h0\dm ago\)", rows["3"][3]), rows["3"]


def test_flows_show__a_registered_flow_shows_its_steps_and_versions_only_loaded(
    fast: Settings, in_flight: dict[str, uuid.UUID]
) -> None:
    register(fast, "w-example", ["example:1"])
    shown = engine_cli(fast, "flows", "show", "example", "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert (data["version_here"], data["steps"]) == (1, ["plan", "work", "total"])
    assert [(v["version"], v["active_jobs"], v["workers"]) for v in data["versions"]] == [
        (1, 0, ["w-example"])
    ]
    assert engine_cli(fast, "flows", "show", "nope").returncode == 2


def test_workers__lists_live_workers_and_their_versions(
    fast: Settings, in_flight: dict[str, uuid.UUID]
) -> None:
    listed = engine_cli(fast, "workers", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["workers"]
    assert [(w["id"], w["runnable"]) for w in rows] == [
        ("w-new", ["chain:2", "fan:1"]),
        ("w-old", ["chain:1", "fan:1"]),
    ]
    text = engine_cli(fast, "workers").stdout
    assert "w-old" in text and "chain:1" in text and "w-gone" not in text


# -- the orphaned-version alert --------------------------------------------------------


def sweep(settings: Settings, sinks: list[str] | None = None) -> None:
    with db.connect(settings, autocommit=True) as c:
        Sweeper(
            settings, PostgresTransport(settings), "sweeper", AlertRecorder(sinks or ["log"])
        ).sweep(c)


def test_orphan_alert__not_while_a_live_worker_has_the_version(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    submit("chain", {}, settings=fast, registry=flows_registry())
    age_jobs(conn, 3600)
    register(fast, "w-old", [CHAIN_V1])
    age_worker(conn, "w-old", fast.worker_live_s - 5)  # late, still live
    sweep(fast)
    assert version_alerts(conn) == []


def test_orphan_alert__only_after_version_orphan_alert_s_on_both_sides(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    submit("chain", {}, settings=fast, registry=flows_registry())
    register(fast, "w-old", [CHAIN_V1])
    age_worker(conn, "w-old", fast.version_orphan_alert_s - 10)  # gone, not for long enough
    age_jobs(conn, 3600)
    sweep(fast)
    assert version_alerts(conn) == []
    age_worker(conn, "w-old", 20)
    sweep(fast)
    assert len(version_alerts(conn)) == 1


def test_orphan_alert__once_per_episode_with_several_sweepers_behind_a_barrier(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    old = submit("chain", {"n": 1}, settings=fast, registry=flows_registry())
    submit("chain", {"n": 2}, settings=fast, registry=flows_registry())
    age_jobs(conn, 3600)
    conn.execute(
        "UPDATE engine_jobs SET created_at = created_at - interval '1 s' WHERE id = %s",
        (old.job_id,),
    )
    register(fast, "w-old", [CHAIN_V1])
    age_worker(conn, "w-old", 2 * fast.version_orphan_alert_s)
    n = 6
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def race(i: int) -> None:
        try:
            with db.connect(fast, autocommit=True) as c:
                recorder = AlertRecorder(["log", "webhook"])
                barrier.wait()
                if i % 2:
                    # the statement itself, no sweep lock in front of it
                    recorder.record_orphaned_versions(
                        c, live_s=fast.worker_live_s, alert_after_s=fast.version_orphan_alert_s
                    )
                else:
                    Sweeper(fast, PostgresTransport(fast), f"s{i}", recorder).sweep(c)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    for _ in range(3):  # later sweeps of the same episode add nothing
        sweep(fast)
    [alert] = version_alerts(conn)
    seen = workers(conn)["w-old"]["last_seen_at"]
    assert (alert["flow"], alert["flow_version"], alert["episode"]) == ("chain", 1, seen)
    assert alert["job_id"] == old.job_id  # the oldest job that waits
    assert "2 active job(s)" in alert["error_line"]
    deliveries = conn.execute(
        "SELECT sink, status FROM engine_alert_deliveries WHERE alert_id = %s ORDER BY sink",
        (alert["id"],),
    ).fetchall()
    assert deliveries == [
        {"sink": "log", "status": "pending"},
        {"sink": "webhook", "status": "pending"},
    ]


def test_orphan_alert__a_new_episode_after_a_worker_had_it_again(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    submit("chain", {}, settings=fast, registry=flows_registry())
    age_jobs(conn, 7200)
    sweep(fast)  # never loaded by anyone
    [first] = version_alerts(conn)
    assert "loaded by no live worker ever" in first["error_line"]
    register(fast, "w-back", [CHAIN_V1])  # a v1 worker came back...
    sweep(fast)
    assert len(version_alerts(conn)) == 1
    age_worker(conn, "w-back", 2 * fast.version_orphan_alert_s)  # ... and went again
    sweep(fast)
    sweep(fast)
    assert len(version_alerts(conn)) == 2


def test_orphan_alert__no_alert_for_a_version_no_active_job_needs(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    conn.execute(
        "UPDATE engine_jobs SET status = 'cancelled', finished_at = now() WHERE id = %s",
        (job.job_id,),
    )
    age_jobs(conn, 7200)
    sweep(fast)
    assert version_alerts(conn) == []


def test_orphan_alert__delivered_with_its_flow_and_version(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    submit("chain", {}, settings=fast, registry=flows_registry())
    age_jobs(conn, 7200)
    sweep(fast)
    [claimed] = store.alert_delivery_claim_due_many(
        conn, owner="d", sinks=["log"], limit=10, claim_s=60
    )
    alert = Alert.of_delivery(claimed, None)
    assert alert.title == "flow chain version 1: loaded by no live worker"
    assert alert.fields()["flow_version"] == 1 and alert.fields()["source"] == "version"
    assert "start a worker that has it loaded" in alert.text()
    assert isinstance(claimed, ClaimedDelivery)
    listed = engine_cli(fast, "alerts", "list")
    assert "flow chain version 1 loaded by no live worker" in listed.stdout
