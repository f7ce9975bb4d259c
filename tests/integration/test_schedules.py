"""Schedules on real PostgreSQL: each scheduled time fires once, whatever the race or fault.

Time is moved by ageing ``engine_schedules.next_fire_at``, never by sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from harness import ExternalQueue, fast_settings, thread_worker, wait_until
from pydantic import BaseModel, Field

from engine import (
    BadInput,
    Flow,
    InvalidParameters,
    Refused,
    Registry,
    StoreError,
    UnknownFlow,
    add_schedule,
    list_schedules,
    pause_schedule,
    remove_schedule,
    resume_schedule,
    run_schedule_now,
    store,
)
from engine.alerts import Alert, AlertRecorder
from engine.config import Settings
from engine.infra import faults as engine_faults
from engine.infra.faults import FaultInjected
from engine.jobs.audit import operator
from engine.jobs.fingerprint import job_fingerprint
from engine.jobs.submit import submit
from engine.schedules.firer import Fired, ScheduleFirer
from engine.store import db
from engine.store.schedules import SlotTaken
from engine.transports.postgres import PostgresTransport
from engine.worker.roster import Roster
from engine.worker.sweeper import Sweeper

REFUSED: set[str] = set()  # periods the flow's admission check refuses
BROKEN: set[str] = set()  # periods whose admission check raises (a bug, not a refusal)


class MonthParams(BaseModel):
    period: str = Field(pattern=r"^\d{4}-\d{2}$")
    n: int = 0


class Out(BaseModel):
    period: str


def make_flow() -> Flow:
    flow = Flow("monthly", params=MonthParams)

    @flow.admit
    def admit(params: MonthParams, conn: psycopg.Connection[Any]) -> None:
        """The period is ready."""
        if params.period in REFUSED:
            raise Refused(f"period {params.period} is not ready: cost it first")
        if params.period in BROKEN:
            raise RuntimeError(f"admission of {params.period} crashed")

    @flow.step()
    def only(params: MonthParams) -> Out:
        return Out(period=params.period)

    return flow


@pytest.fixture
def registry() -> Registry:
    return Registry([make_flow()])


@pytest.fixture(autouse=True)
def _no_faults() -> Any:
    yield
    REFUSED.clear()
    BROKEN.clear()
    engine_faults.enable("")


def add(settings: Settings, registry: Registry, **kwargs: Any) -> None:
    spec: dict[str, Any] = {
        "name": "nightly",
        "flow": "monthly",
        "cron": "0 2 * * *",
        "timezone": "Europe/Istanbul",
        "params": {"period": "2026-11"},
    }
    spec.update(kwargs)
    add_schedule(
        spec.pop("name"),
        spec.pop("flow"),
        spec.pop("cron"),
        settings=settings,
        registry=registry,
        **spec,
    )


def age(conn: psycopg.Connection[Any], to: str, name: str = "nightly") -> datetime:
    """Make the schedule due: its next time becomes ``to`` (an SQL expression over now())."""
    row = conn.execute(
        f"UPDATE engine_schedules SET next_fire_at = {to} WHERE name = %s RETURNING next_fire_at",
        (name,),
    ).fetchone()
    assert row is not None
    value: datetime = row["next_fire_at"]
    return value


def schedule_row(conn: psycopg.Connection[Any], name: str = "nightly") -> dict[str, Any]:
    row = conn.execute("SELECT * FROM engine_schedules WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return dict(row)


def jobs(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute("SELECT * FROM engine_jobs ORDER BY created_at")]


def fires(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return [
        dict(r) for r in conn.execute("SELECT * FROM engine_schedule_fires ORDER BY scheduled_for")
    ]


def schedule_alerts(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in conn.execute(
            "SELECT * FROM engine_alerts WHERE source = 'schedule' ORDER BY id"
        ).fetchall()
    ]


def sinks_of(conn: psycopg.Connection[Any], alert_id: int) -> list[str]:
    rows = conn.execute(
        "SELECT sink FROM engine_alert_deliveries WHERE alert_id = %s ORDER BY sink", (alert_id,)
    ).fetchall()
    return [r["sink"] for r in rows]


def fire_once(
    settings: Settings, registry: Registry, worker: str = "w1", sinks: list[str] | None = None
) -> list[Fired]:
    firer = ScheduleFirer(
        settings, registry, worker=worker, alerts=AlertRecorder(sinks or ["log", "webhook"])
    )
    try:
        return firer.fire_due()
    finally:
        firer.close(1)


def test_schedule_fire__workers_racing_on_one_due_time_fire_one_job(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    slot = age(conn, "now() - interval '1 minute'")
    n = 8
    barrier = threading.Barrier(n)
    outcomes: list[list[Fired] | SlotTaken] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def race(i: int) -> None:
        firer = ScheduleFirer(settings, registry, worker=f"w{i}")
        try:
            with db.connect(settings) as own:
                due = firer.due(own)
                assert [d.next_fire_at for d in due] == [slot]
                barrier.wait(timeout=30)  # every racer read the same due time
                outcome = firer.fire(own, due[0])
            with lock:
                outcomes.append(outcome)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    won = [o for o in outcomes if not isinstance(o, SlotTaken)]
    assert len(won) == 1 and len(outcomes) == n
    assert [(f.scheduled_for, f.created) for f in won[0]] == [(slot, True)]
    assert [j["id"] for j in jobs(conn)] == [won[0][0].job_id]
    assert [(f["scheduled_for"], f["job_id"]) for f in fires(conn)] == [(slot, won[0][0].job_id)]
    row = schedule_row(conn)
    assert row["next_fire_at"] > slot and row["last_job_id"] == won[0][0].job_id
    assert row["last_fired_for"] == slot and row["last_error"] is None


def test_schedule_fire__a_time_not_due_yet_fires_nothing(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    age(conn, "now() + interval '1 second'")
    assert fire_once(settings, registry) == []
    assert jobs(conn) == []


def test_schedule_fire__the_job_fingerprint_includes_the_scheduled_time(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    slot = age(conn, "now() - interval '1 minute'")
    [fired] = fire_once(settings, registry)
    [job] = jobs(conn)
    params = MonthParams(period="2026-11")
    assert job["fingerprint"] == job_fingerprint("monthly", 1, params, slot)
    assert job["fingerprint"] != job_fingerprint("monthly", 1, params)
    assert job["submitted_by"] == "schedule nightly"
    event = conn.execute(
        "SELECT detail FROM engine_history WHERE job_id = %s AND kind = 'submitted'", (job["id"],)
    ).fetchone()
    assert event is not None and event["detail"]["scheduled_for"] == slot.isoformat()
    # the same parameters by hand, while the scheduled job is active, are another job
    by_hand = submit("monthly", {"period": "2026-11"}, settings=settings, registry=registry)
    assert by_hand.created and by_hand.job_id != fired.job_id


def test_schedule_fire__with_an_external_queue_messages_wait_in_the_outbox_for_the_commit(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    age(conn, "now() - interval '1 minute'")
    # ExternalQueue fails the test if anything is published before the relay
    firer = ScheduleFirer(settings, registry, worker="w1", transport=ExternalQueue())
    try:
        [fired] = firer.fire_due()
    finally:
        firer.close(1)
    outbox = conn.execute(
        "SELECT o.published_at FROM engine_outbox AS o "
        "JOIN engine_step_runs AS s ON s.id = o.step_run_id WHERE s.job_id = %s",
        (fired.job_id,),
    ).fetchall()
    assert [r["published_at"] for r in outbox] == [None]


def test_schedule_fire__missed_times_fire_once_on_return_as_the_latest(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry, cron="0 * * * *", timezone="UTC")
    age(conn, "date_trunc('hour', now()) - interval '5 hours'")
    latest = conn.execute("SELECT date_trunc('hour', now()) AS t").fetchone()
    assert latest is not None
    fired = fire_once(settings, registry)
    assert [f.scheduled_for for f in fired] == [latest["t"]]
    assert len(jobs(conn)) == 1
    assert fire_once(settings, registry, worker="w2") == []  # the next time is ahead
    assert schedule_row(conn)["next_fire_at"] == latest["t"] + timedelta(hours=1)


def test_schedule_fire__catch_up_all_fires_each_missed_time_once(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry, cron="0 * * * *", timezone="UTC", catch_up="all")
    first = age(conn, "date_trunc('hour', now()) - interval '5 hours'")
    fired = fire_once(settings, registry)
    assert len(fired) == 6 and fired[0].scheduled_for == first
    assert len({f.job_id for f in fired}) == 6
    assert {j["id"] for j in jobs(conn)} == {f.job_id for f in fired}
    assert [f["scheduled_for"] for f in fires(conn)] == [f.scheduled_for for f in fired]
    assert fire_once(settings, registry, worker="w2") == []


def test_schedule_fire__a_refused_submit_is_recorded_and_the_schedule_moves_on(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    REFUSED.add("2026-11")
    add(settings, registry)
    slot = age(conn, "now() - interval '1 minute'")
    [fired] = fire_once(settings, registry)
    assert fired.job_id is None and "period 2026-11 is not ready" in (fired.error or "")
    assert jobs(conn) == []
    [fire] = fires(conn)
    assert fire["scheduled_for"] == slot and fire["job_id"] is None
    assert fire["error"] == fired.error
    row = schedule_row(conn)
    assert row["last_error"] == fired.error and row["next_fire_at"] > slot
    # once the period is ready, the next time fires a job and clears the error
    REFUSED.clear()
    age(conn, "now() - interval '1 second'")
    [again] = fire_once(settings, registry)
    assert again.job_id is not None and schedule_row(conn)["last_error"] is None


@pytest.mark.parametrize("point", ["schedule_after_claim", "schedule_before_commit"])
def test_schedule_fire__a_failure_between_claim_and_commit_rolls_the_claim_back(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry, point: str
) -> None:
    add(settings, registry)
    slot = age(conn, "now() - interval '1 minute'")
    firer = ScheduleFirer(settings, registry, worker="w1")
    engine_faults.enable(f"{point}=raise")
    with db.connect(settings) as own:
        [due] = firer.due(own)
        with pytest.raises(FaultInjected):
            firer.fire(own, due)
    assert jobs(conn) == [] and fires(conn) == []
    assert schedule_row(conn)["next_fire_at"] == slot  # still due at the same time
    engine_faults.enable("")
    [fired] = fire_once(settings, registry, worker="w2")
    assert fired.scheduled_for == slot and [j["id"] for j in jobs(conn)] == [fired.job_id]


def test_schedule_fire__fire_time_parameters_are_resolved_in_the_timezone(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry, cron="30 1 1 * *", params={"period": "@previous_month"})
    # 2026-12-01 01:30 in Istanbul (UTC+3)
    age(conn, "'2026-11-30T22:30:00+00:00'::timestamptz")
    fire_once(settings, registry)
    [job] = jobs(conn)
    assert job["params"] == {"period": "2026-11", "n": 0}


def test_schedule_fire__a_flow_this_worker_lacks_is_left_for_another(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    age(conn, "now() - interval '1 minute'")
    assert fire_once(settings, Registry([])) == []
    assert schedule_row(conn)["last_fired_for"] is None


def test_schedule_fire__under_the_worker_role(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    age(conn, "now() - interval '1 minute'")
    as_worker = settings.model_copy(update={"session_role": "engine_worker"})
    [fired] = fire_once(as_worker, registry)
    assert fired.job_id is not None and len(jobs(conn)) == 1


def test_schedule_fire__a_refusal_is_recorded_and_alerted_under_the_worker_role(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    REFUSED.add("2026-11")
    add(settings, registry)
    age(conn, "now() - interval '1 minute'")
    as_worker = settings.model_copy(update={"session_role": "engine_worker"})
    [fired] = fire_once(as_worker, registry)
    assert fired.outcome == "refused" and len(schedule_alerts(conn)) == 1
    add(settings, registry, name="unloaded")
    age(conn, "now() - interval '2 hours'", name="unloaded")
    sweep(as_worker)
    assert [a["schedule"] for a in schedule_alerts(conn)] == ["nightly", "unloaded"]


def test_worker__fires_a_due_schedule_and_runs_its_job(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    with thread_worker(fast_settings(settings), registry):
        age(conn, "now() - interval '1 minute'")
        wait_until(
            lambda: [j["status"] for j in jobs(conn)] == ["done"], what="the scheduled job done"
        )
    assert len(fires(conn)) == 1


def test_add_schedule__bad_input_names_the_value(settings: Settings, registry: Registry) -> None:
    with pytest.raises(UnknownFlow, match=r"'nope'.*known flows: monthly"):
        add(settings, registry, flow="nope")
    with pytest.raises(InvalidParameters, match="period"):
        add(settings, registry, params={"period": "november"})
    with pytest.raises(InvalidParameters, match="unknown parameter 'store'"):
        add(settings, registry, params={"period": "2026-11", "store": "ST001"})
    with pytest.raises(BadInput, match="invalid schedule name 'no spaces'"):
        add(settings, registry, name="no spaces")
    with pytest.raises(BadInput, match="invalid catch-up 'some'"):
        add(settings, registry, catch_up="some")
    add(settings, registry)
    with pytest.raises(BadInput, match="a schedule named 'nightly' exists"):
        add(settings, registry)


def test_schedules__list_and_remove(settings: Settings, registry: Registry) -> None:
    add(settings, registry)
    [listed] = list_schedules(settings)
    assert (listed.name, listed.flow, listed.timezone) == ("nightly", "monthly", "Europe/Istanbul")
    assert listed.next_fire_local.hour == 2 and listed.next_fire_local.minute == 0
    assert listed.next_fire_at.astimezone(UTC).hour == 23
    remove_schedule("nightly", settings)
    assert list_schedules(settings) == []
    with pytest.raises(BadInput, match="no schedule named 'nightly'"):
        remove_schedule("nightly", settings)


# -- schedules that cannot fire: one alert per schedule and scheduled time ------------------


def test_schedule_fire__a_refused_time_is_alerted_once_and_the_next_time_again(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    REFUSED.add("2026-11")
    add(settings, registry)
    slot = age(conn, "now() - interval '1 minute'")
    [fired] = fire_once(settings, registry)
    assert fired.outcome == "refused" and fired.job_id is None
    [alert] = schedule_alerts(conn)
    assert (alert["schedule"], alert["scheduled_for"], alert["flow"]) == (
        "nightly",
        slot,
        "monthly",
    )
    assert alert["error_line"] == "refused: period 2026-11 is not ready: cost it first"
    assert sinks_of(conn, alert["id"]) == ["log", "webhook"]
    assert fires(conn)[0]["outcome"] == "refused"
    # a duplicate firing of the same time (a worker that read it before the claim moved on)
    age(conn, f"'{slot.isoformat()}'::timestamptz")
    assert fire_once(settings, registry, worker="w2") == []
    assert len(schedule_alerts(conn)) == 1
    # the next time is refused too: its own alert
    nxt = age(conn, "now() - interval '1 second'")
    [again] = fire_once(settings, registry, worker="w3")
    assert again.outcome == "refused"
    assert [(a["scheduled_for"]) for a in schedule_alerts(conn)] == [slot, nxt]
    [listed] = list_schedules(settings)
    assert listed.last_outcome == "refused" and listed.last_fired_for == nxt
    assert listed.as_json()["last_outcome"] == "refused"


def test_schedule_fire__racing_workers_on_a_refused_time_make_one_alert(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    REFUSED.add("2026-11")
    add(settings, registry)
    age(conn, "now() - interval '1 minute'")
    n = 6
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def race(i: int) -> None:
        firer = ScheduleFirer(settings, registry, worker=f"w{i}", alerts=AlertRecorder(["log"]))
        try:
            with db.connect(settings) as own:
                [due] = firer.due(own)
                barrier.wait(timeout=30)
                firer.fire(own, due)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(schedule_alerts(conn)) == 1 and len(fires(conn)) == 1


def test_schedule_fire__a_submit_that_raises_is_recorded_alerted_and_the_schedule_moves_on(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    BROKEN.add("2026-11")
    add(settings, registry)
    slot = age(conn, "now() - interval '1 minute'")
    [fired] = fire_once(settings, registry)
    assert fired.outcome == "error" and fired.job_id is None
    assert fired.error == "RuntimeError: admission of 2026-11 crashed"
    assert jobs(conn) == []
    [fire] = fires(conn)
    assert (fire["outcome"], fire["error"], fire["job_id"]) == ("error", fired.error, None)
    row = schedule_row(conn)
    assert row["next_fire_at"] > slot and row["last_error"] == fired.error
    [alert] = schedule_alerts(conn)
    assert alert["error_line"] == "error: RuntimeError: admission of 2026-11 crashed"
    assert alert["scheduled_for"] == slot
    [listed] = list_schedules(settings)
    assert listed.last_outcome == "error"


def test_schedule_fire__a_submitted_job_is_not_alerted(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    age(conn, "now() - interval '1 minute'")
    [fired] = fire_once(settings, registry)
    assert fired.outcome == "job" and schedule_alerts(conn) == []
    [listed] = list_schedules(settings)
    assert listed.last_outcome == "job" and listed.last_job_id == fired.job_id
    assert listed.unloaded is False


def sweep(settings: Settings) -> None:
    with db.connect(settings, autocommit=True) as c:
        Sweeper(settings, PostgresTransport(settings), "sweeper", AlertRecorder(["log"])).sweep(c)


def test_unloaded_schedule__alerted_once_per_time_after_the_bound_on_both_sides(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    bound = settings.schedule_unloaded_alert_s
    add(settings, registry)
    Roster(settings, "w-old", ["monthly:1"]).register(conn)
    # due for long, but a worker that had the flow was seen not long ago
    slot = age(conn, "now() - interval '2 hours'")
    conn.execute(
        "UPDATE engine_workers SET last_seen_at = now() - make_interval(secs => %s)",
        (bound - 10,),
    )
    sweep(settings)
    assert schedule_alerts(conn) == []
    [listed] = list_schedules(settings)
    assert listed.unloaded  # no live worker: the list says so at once
    conn.execute(
        "UPDATE engine_workers SET last_seen_at = now() - make_interval(secs => %s)",
        (bound + 10,),
    )
    sweep(settings)
    sweep(settings)  # a later sweep of the same time adds nothing
    [alert] = schedule_alerts(conn)
    assert (alert["schedule"], alert["scheduled_for"]) == ("nightly", slot)
    assert alert["error_line"] == "no worker loads flow monthly"
    # a schedule due since less than the bound is not alerted yet
    add(settings, registry, name="recent")
    age(conn, f"now() - make_interval(secs => {bound - 10})", name="recent")
    sweep(settings)
    assert len(schedule_alerts(conn)) == 1


def test_unloaded_schedule__not_while_a_live_worker_loads_its_flow(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    age(conn, "now() - interval '2 hours'")
    Roster(settings, "w-other", ["chain:1"]).register(conn)
    sweep(settings)
    assert len(schedule_alerts(conn)) == 1  # a live worker, of other flows only
    add(settings, registry, name="loaded")
    age(conn, "now() - interval '2 hours'", name="loaded")
    Roster(settings, "w-monthly", ["monthly:1"]).register(conn)
    sweep(settings)
    assert [a["schedule"] for a in schedule_alerts(conn)] == ["nightly"]
    assert [s.unloaded for s in list_schedules(settings)] == [False, False]


def test_unloaded_schedule__alert_says_which_schedule_and_flow(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    age(conn, "now() - interval '2 hours'")
    sweep(settings)
    [claimed] = [
        d
        for d in store.alert_delivery_claim_due_many(
            conn, owner="d", sinks=["log"], limit=10, claim_s=60
        )
        if d.source == "schedule"
    ]
    alert = Alert.of_delivery(claimed, None)
    assert alert.title.startswith("schedule nightly: no worker loads flow monthly")
    assert alert.fields()["schedule"] == "nightly"
    assert alert.fields()["scheduled_for"] is not None
    assert "schedule: nightly" in alert.text()


# -- an operator pauses, resumes and runs a schedule now (issue 28) -------------------------


def audit_rows(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in conn.execute(
            "SELECT actor, source, action, target_kind, target_id, job_id, reason, detail "
            "FROM engine_audit WHERE target_kind = 'schedule' AND action <> 'schedule_add' "
            "ORDER BY id"
        ).fetchall()
    ]


def test_pause_schedule__a_paused_schedule_is_not_fired_and_resume_fires_no_missed_time(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    # catch-up all would fire each missed time: a pause's times are skipped even so
    add(settings, registry, cron="0 * * * *", timezone="UTC", catch_up="all")
    assert pause_schedule("nightly", settings=settings, actor="alice", reason="stock count")
    age(conn, "date_trunc('hour', now()) - interval '5 hours'")
    assert fire_once(settings, registry) == []
    assert jobs(conn) == [] and fires(conn) == []
    [listed] = list_schedules(settings)
    assert listed.paused_by == "alice" and listed.paused_at is not None
    assert listed.paused_reason == "stock count"
    assert listed.as_json()["paused_by"] == "alice"
    assert listed.as_json()["paused_at"] == listed.paused_at.isoformat()
    assert resume_schedule("nightly", settings=settings, actor="bob")
    nxt = conn.execute("SELECT date_trunc('hour', now()) + interval '1 hour' AS t").fetchone()
    assert nxt is not None
    row = schedule_row(conn)
    assert row["next_fire_at"] == nxt["t"] and row["paused_at"] is None
    assert row["paused_by"] is None and row["paused_reason"] is None
    assert fire_once(settings, registry) == []  # no burst of the missed times
    # the next time, once due, fires as usual
    slot = age(conn, "now() - interval '1 second'")
    [fired] = fire_once(settings, registry)
    assert fired.scheduled_for == slot and len(jobs(conn)) == 1
    entries = audit_rows(conn)
    assert [
        (a["actor"], a["source"], a["action"], a["target_id"], a["reason"]) for a in entries
    ] == [
        ("alice", "api", "schedule_pause", "nightly", "stock count"),
        ("bob", "api", "schedule_resume", "nightly", None),
    ]
    assert datetime.fromisoformat(entries[1]["detail"]["next_fire_at"]) == nxt["t"]
    assert entries[1]["detail"]["paused_by"] == "alice"


def test_resume_schedule__a_time_still_ahead_is_kept(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    before = schedule_row(conn)["next_fire_at"]
    pause_schedule("nightly", settings=settings)
    resume_schedule("nightly", settings=settings)
    assert schedule_row(conn)["next_fire_at"] == before
    assert [a["actor"] for a in audit_rows(conn)] == [operator(), operator()]


def test_pause_schedule__twice_is_a_no_op_that_records_nothing_and_so_is_resume(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    assert not resume_schedule("nightly", settings=settings, actor="bob")  # never paused
    assert pause_schedule("nightly", settings=settings, actor="alice", reason="first")
    paused = schedule_row(conn)
    assert not pause_schedule("nightly", settings=settings, actor="carol", reason="second")
    again = schedule_row(conn)
    assert (again["paused_by"], again["paused_at"], again["paused_reason"]) == (
        "alice",
        paused["paused_at"],
        "first",
    )
    assert resume_schedule("nightly", settings=settings, actor="bob")
    assert not resume_schedule("nightly", settings=settings, actor="bob")
    assert [a["action"] for a in audit_rows(conn)] == ["schedule_pause", "schedule_resume"]


def test_schedule_actions__an_unknown_name_is_bad_input_naming_the_known_ones(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    add(settings, registry, name="weekly")
    for act in (pause_schedule, resume_schedule):
        with pytest.raises(BadInput, match=r"no schedule named 'nope'; schedules: nightly, weekly"):
            act("nope", settings=settings)
    with pytest.raises(BadInput, match=r"no schedule named 'nope'; schedules: nightly, weekly"):
        run_schedule_now("nope", settings=settings, registry=registry)
    assert audit_rows(conn) == [] and jobs(conn) == []


def test_pause_schedule__wins_over_a_firer_that_read_it_as_due_before(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    slot = age(conn, "now() - interval '1 minute'")
    firer = ScheduleFirer(settings, registry, worker="w1")
    with db.connect(settings) as own:
        [due] = firer.due(own)
        pause_schedule("nightly", settings=settings)
        assert isinstance(firer.fire(own, due), SlotTaken)
    assert jobs(conn) == [] and fires(conn) == []
    assert schedule_row(conn)["next_fire_at"] == slot


def test_pause_schedule__a_paused_schedule_is_not_alerted_as_unloaded(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    age(conn, "now() - interval '2 hours'")
    pause_schedule("nightly", settings=settings)
    [listed] = list_schedules(settings)
    assert not listed.unloaded
    sweep(settings)
    assert schedule_alerts(conn) == []


def test_run_schedule_now__submits_its_job_like_the_firer_and_records_it(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry, params={"period": "@current_month", "n": 3})
    before = schedule_row(conn)
    ran = run_schedule_now(
        "nightly", settings=settings, registry=registry, actor="alice", reason="rerun"
    )
    assert ran.created and ran.flow == "monthly"
    [job] = jobs(conn)
    month = conn.execute(
        "SELECT to_char(now() AT TIME ZONE 'Europe/Istanbul', 'YYYY-MM') AS m"
    ).fetchone()
    assert month is not None
    assert job["id"] == ran.job_id and job["params"] == {"period": month["m"], "n": 3}
    assert job["submitted_by"] == "schedule nightly (run now by alice)"
    # the calendar is untouched: the next scheduled time still fires
    after = schedule_row(conn)
    assert after["next_fire_at"] == before["next_fire_at"] and after["last_fired_for"] is None
    [entry] = audit_rows(conn)
    assert (entry["action"], entry["actor"], entry["job_id"], entry["reason"]) == (
        "schedule_run",
        "alice",
        ran.job_id,
        "rerun",
    )
    # the same job still active: it is returned, not submitted twice, and nothing is recorded
    again = run_schedule_now("nightly", settings=settings, registry=registry, actor="bob")
    assert (again.job_id, again.created) == (ran.job_id, False)
    assert len(jobs(conn)) == 1 and len(audit_rows(conn)) == 1


def test_run_schedule_now__the_flows_admission_refuses_it_and_nothing_is_recorded(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    REFUSED.add("2026-11")
    with pytest.raises(Refused, match="period 2026-11 is not ready"):
        run_schedule_now("nightly", settings=settings, registry=registry)
    assert jobs(conn) == [] and audit_rows(conn) == []


def test_run_schedule_now__a_paused_schedule_runs_and_stays_paused(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    pause_schedule("nightly", settings=settings)
    ran = run_schedule_now("nightly", settings=settings, registry=registry)
    assert ran.created and [j["id"] for j in jobs(conn)] == [ran.job_id]
    assert schedule_row(conn)["paused_at"] is not None
    assert audit_rows(conn)[-1]["detail"]["paused"] is True


def test_schedule_actions__under_the_worker_role_are_refused(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    add(settings, registry)
    as_worker = settings.model_copy(update={"session_role": "engine_worker"})
    with pytest.raises(StoreError):
        pause_schedule("nightly", settings=as_worker)
    assert schedule_row(conn)["paused_at"] is None


@pytest.mark.parametrize("act", ["pause", "resume"])
def test_schedule_actions__two_operators_at_once_make_one_change_and_one_entry(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry, act: str
) -> None:
    add(settings, registry)
    if act == "resume":
        pause_schedule("nightly", settings=settings, actor="first")
    do = pause_schedule if act == "pause" else resume_schedule
    n = 4
    barrier = threading.Barrier(n)
    results: list[bool] = []
    errors: list[BaseException] = []

    def race(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results.append(do("nightly", settings=settings, actor=f"op{i}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert sorted(results) == [False] * (n - 1) + [True]
    assert [a["action"] for a in audit_rows(conn)].count(f"schedule_{act}") == 1
