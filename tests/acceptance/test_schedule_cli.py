"""``engine schedule`` as a user runs it, and a schedule firing once with three workers up."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_zygote import run_engine
from harness import wait_until, worker_env

from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.flow.registry import Registry
from engine.schedules.firer import ScheduleFirer
from engine.worker.processes import WorkerProcess, start_worker, stop_all

pytestmark = pytest.mark.acceptance


def engine(
    settings: Settings, *args: str, modules: tuple[str, ...] = ("testflows",)
) -> subprocess.CompletedProcess[str]:
    """``python -m engine ARGS`` with the test flows (``chain``) on the test's database."""
    return run_engine(
        args,
        # wide enough that a table row is one line per cell
        env={**worker_env(settings, flow_modules=list(modules)), "COLUMNS": "250"},
    )


def add_nightly(settings: Settings, *extra: str) -> subprocess.CompletedProcess[str]:
    return engine(
        settings,
        "schedule",
        "add",
        "nightly",
        "--flow",
        "chain",
        "--cron",
        "0 2 * * *",
        "--timezone",
        "Europe/Istanbul",
        "--param",
        "n=7",
        *extra,
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--flow", "nope", "--cron", "0 2 * * *"], "unknown flow 'nope'; known flows: chain"),
        (["--flow", "chain", "--cron", "0 25 * * *"], "invalid cron expression '0 25 * * *'"),
        (["--flow", "chain", "--cron", "0 2 * *"], "expected 5 fields"),
        (
            ["--flow", "chain", "--cron", "0 2 * * *", "--timezone", "Europe/Istambul"],
            "unknown timezone 'Europe/Istambul' (did you mean Europe/Istanbul",
        ),
        (["--flow", "chain", "--cron", "0 2 * * *", "--param", "n=many"], "'many'"),
        (["--flow", "chain", "--cron", "0 2 * * *", "--param", "n"], "invalid --param 'n'"),
        (["--flow", "chain", "--cron", "0 2 * * *", "--param", "x=1"], "unknown parameter 'x'"),
        (
            ["--flow", "chain", "--cron", "0 2 * * *", "--param", "hold_file=@today"],
            "unknown fire-time value",
        ),
        (["--flow", "chain", "--cron", "0 2 * * *", "--catch-up", "some"], "'some'"),
    ],
)
def test_schedule_add__bad_input_exits_2_naming_the_value(
    settings: Settings, conn: psycopg.Connection[Any], args: list[str], named: str
) -> None:
    result = engine(settings, "schedule", "add", "nightly", *args)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert conn.execute("SELECT count(*) AS n FROM engine_schedules").fetchone() == {"n": 0}


def test_schedule__add_list_remove(settings: Settings) -> None:
    added = add_nightly(settings, "--json")
    assert added.returncode == 0, added.stderr
    spec = json.loads(added.stdout)
    assert spec["next_fire_local"].endswith("T02:00:00+03:00")
    assert spec["next_fire_at"].endswith("T23:00:00+00:00")
    again = add_nightly(settings)
    assert again.returncode == 2 and "a schedule named 'nightly' exists" in again.stderr
    listed = engine(settings, "schedule", "list", "--json")
    [row] = json.loads(listed.stdout)["schedules"]
    assert (row["flow"], row["cron"], row["params"]) == ("chain", "0 2 * * *", {"n": "7"})
    assert row["last_fired_for"] is None and row["last_job_id"] is None
    assert engine(settings, "schedule", "remove", "nightly").returncode == 0
    gone = engine(settings, "schedule", "remove", "nightly")
    assert gone.returncode == 2 and "no schedule named 'nightly'" in gone.stderr


def test_schedule__fires_once_with_three_workers_up(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    assert add_nightly(settings).returncode == 0
    workers: list[WorkerProcess] = []
    try:
        for i in range(3):
            workers.append(
                start_worker(
                    env=worker_env(settings),
                    output=tmp_path / f"worker{i}.log",
                    log_level="INFO",
                    name=f"worker{i}",
                )
            )
        for w in workers:
            wait_until(lambda w=w: "started with" in w.output(), what=f"{w.name} to start")
        before = json.loads(engine(settings, "schedule", "list", "--json").stdout)
        assert before["schedules"][0]["last_job_id"] is None
        slot = conn.execute(
            "UPDATE engine_schedules SET next_fire_at = now() - interval '1 minute' "
            "RETURNING next_fire_at"
        ).fetchone()
        assert slot is not None
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM engine_jobs WHERE status = 'done' AND submitted_by = %s",
                ("schedule nightly",),
            ).fetchone(),
            timeout=60,
            what="the scheduled job to finish",
        )
    finally:
        stop_all(workers, settings.shutdown_grace_s + 10)
    jobs = conn.execute("SELECT id, flow, params, status FROM engine_jobs").fetchall()
    assert [(j["flow"], j["params"]["n"], j["status"]) for j in jobs] == [("chain", 7, "done")]
    fires = conn.execute("SELECT scheduled_for, job_id FROM engine_schedule_fires").fetchall()
    assert [(f["scheduled_for"], f["job_id"]) for f in fires] == [
        (slot["next_fire_at"], jobs[0]["id"])
    ]
    after = json.loads(engine(settings, "schedule", "list", "--json").stdout)["schedules"][0]
    assert after["last_job_id"] == str(jobs[0]["id"])
    assert after["next_fire_local"].endswith("T02:00:00+03:00")
    fired_by = {w.name for w in workers if "schedule nightly fired for" in w.output()}
    assert len(fired_by) == 1


def test_schedule_list__shows_a_refusal_and_a_flow_no_worker_loads_instead_of_job_none(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    gate = tmp_path / "period-not-costed"
    gate.touch()
    modules = ("testflows", "scheduleflows")
    added = engine(
        settings,
        "schedule",
        "add",
        "gated-nightly",
        "--flow",
        "gated",
        "--cron",
        "0 2 * * *",
        "--param",
        f"refuse_while={gate}",
        modules=modules,
    )
    assert added.returncode == 0, added.stderr
    conn.execute("UPDATE engine_schedules SET next_fire_at = now() - interval '1 minute'")
    # due, and no worker is up: the list says so rather than "never"
    waiting = engine(settings, "schedule", "list", modules=modules)
    assert "no worker loads flow gated" in waiting.stdout, waiting.stdout
    # a worker with the flow fires it; its admission refuses
    registry = Registry.load(list(modules))
    firer = ScheduleFirer(settings, registry, worker="w1", alerts=AlertRecorder(["log"]))
    try:
        [fired] = firer.fire_due()
    finally:
        firer.close(1)
    assert fired.outcome == "refused"
    listed = engine(settings, "schedule", "list", modules=modules)
    assert listed.returncode == 0, listed.stderr
    flat = " ".join(listed.stdout.split())
    assert "refused: period-not-costed says the period is not ready" in flat, listed.stdout
    assert "job None" not in flat
    [row] = json.loads(engine(settings, "schedule", "list", "--json", modules=modules).stdout)[
        "schedules"
    ]
    assert (row["last_outcome"], row["last_job_id"]) == ("refused", None)
    assert row["last_error"] == "period-not-costed says the period is not ready"
    alerts = json.loads(engine(settings, "alerts", "list", "--json", modules=modules).stdout)
    [alert] = [a for a in alerts["alerts"] if a["source"] == "schedule"]
    assert alert["schedule"] == "gated-nightly"
    assert alert["error_line"] == "refused: period-not-costed says the period is not ready"


def test_schedule__pause_resume_and_run_now_are_audited(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    assert add_nightly(settings).returncode == 0
    paused = engine(settings, "schedule", "pause", "nightly", "--by", "alice", "--reason", "count")
    assert paused.returncode == 0, paused.stderr
    assert "schedule nightly paused" in paused.stdout
    again = engine(settings, "schedule", "pause", "nightly", "--by", "carol")
    assert again.returncode == 0, again.stderr
    assert "schedule nightly is paused already (since" in again.stdout
    assert "by alice: count); nothing recorded" in again.stdout
    [row] = json.loads(engine(settings, "schedule", "list", "--json").stdout)["schedules"]
    assert (row["paused"], row["paused_by"], row["paused_reason"]) == (True, "alice", "count")
    listed = engine(settings, "schedule", "list")
    assert "paused (local)" in listed.stdout, listed.stdout
    assert "since " in listed.stdout and "by alice: count" in listed.stdout, listed.stdout

    # run now: the job id in full, and the same job while it is active
    ran = engine(settings, "schedule", "run", "nightly", "--by", "dave")
    assert ran.returncode == 0, ran.stderr
    job = conn.execute("SELECT id, params, submitted_by FROM engine_jobs").fetchone()
    assert job is not None and job["params"]["n"] == 7
    assert f"submitted chain job {job['id']}" in ran.stdout
    twice = engine(settings, "schedule", "run", "nightly", "--json")
    assert twice.returncode == 0, twice.stderr
    doc = json.loads(twice.stdout)
    assert (doc["job_id"], doc["created"], doc["schedule"]) == (str(job["id"]), False, "nightly")
    human = engine(settings, "schedule", "run", "nightly")
    assert f"job {job['id']} is already active" in human.stdout, human.stdout

    resumed = engine(settings, "schedule", "resume", "nightly", "--by", "bob")
    assert resumed.returncode == 0, resumed.stderr
    assert "schedule nightly resumed; next" in resumed.stdout
    not_paused = engine(settings, "schedule", "resume", "nightly")
    assert not_paused.returncode == 0 and "schedule nightly is not paused" in not_paused.stdout
    [row] = json.loads(engine(settings, "schedule", "list", "--json").stdout)["schedules"]
    assert (row["paused"], row["paused_at"], row["paused_by"]) == (False, None, None)
    assert "paused" not in engine(settings, "schedule", "list").stdout

    trail = json.loads(engine(settings, "audit", "--json").stdout)["entries"]
    acted = [
        (e["action"], e["actor"], e["source"], e["target_id"], e["reason"], e["job_id"])
        for e in reversed(trail)
        if e["action"] != "schedule_add"
    ]
    assert acted == [
        ("schedule_pause", "alice", "cli", "nightly", "count", None),
        ("schedule_run", "dave", "cli", "nightly", None, str(job["id"])),
        ("schedule_resume", "bob", "cli", "nightly", None, None),
    ]


@pytest.mark.parametrize("action", ["pause", "resume", "run"])
def test_schedule_action__an_unknown_name_exits_2_naming_the_schedules(
    settings: Settings, action: str
) -> None:
    assert add_nightly(settings).returncode == 0
    result = engine(settings, "schedule", action, "nope")
    assert result.returncode == 2, result.stderr
    assert "no schedule named 'nope'; schedules: nightly" in result.stderr
