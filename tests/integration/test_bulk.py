"""Bulk actions on a frozen preview (issue 38 item 2): the set is the preview's, each item
re-checked under its lock, one audit entry per item; an expired or applied preview refused."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from typing import Any

import psycopg
import pytest
from harness import fast_settings, flows_registry, thread_worker, wait_job_ended, wait_until

from engine import (
    BadInput,
    BulkFilter,
    PreviewClosed,
    Registry,
    bulk_apply,
    bulk_preview,
    signal,
    submit,
)
from engine.config import Settings
from engine.jobs import admin
from engine.jobs.bulk import BulkItem
from engine.store import dead_letter_insert_message_if_new, dead_letter_insert_step


def _cancelled(settings: Settings, n: int, why: str, first: int = 0) -> list[uuid.UUID]:
    """``n`` chain jobs, cancelled (so retriable) with ``why`` in their error."""
    jobs = []
    for i in range(first, first + n):
        job = submit("chain", {"n": i}, settings=settings, registry=flows_registry()).job_id
        admin.cancel(settings, job, why, actor="ann")
        jobs.append(job)
    return jobs


def _status(conn: psycopg.Connection[Any], job: uuid.UUID) -> str:
    row = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert row is not None
    return str(row["status"])


def _bulk_entries(conn: psycopg.Connection[Any], action: str) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in conn.execute(
            "SELECT actor, action, target_id, job_id, reason, detail FROM engine_audit "
            "WHERE action = %s AND detail ? 'preview' ORDER BY id",
            (action,),
        ).fetchall()
    ]


def test_bulk__preview_counts_by_flow_and_state_and_changes_nothing(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    jobs = _cancelled(settings, 3, "outage 7")
    _cancelled(settings, 2, "unrelated", first=10)
    made = bulk_preview(settings, "retry", BulkFilter(error="OUTAGE 7"), actor="ann")
    assert made.total == 3
    assert made.counts == [{"flow": "chain", "state": "cancelled", "n": 3}]
    assert {i.id for i in made.sample} == {str(j) for j in jobs}
    assert made.created_by == "ann"
    assert all(_status(conn, j) == "cancelled" for j in jobs)
    assert _bulk_entries(conn, "retry") == []


def test_bulk__race_acts_only_on_the_preview_and_lists_the_changed_ones(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    jobs = _cancelled(settings, 6, "outage 7")
    made = bulk_preview(settings, "retry", BulkFilter(flow="chain", state="cancelled"))
    assert made.total == 6
    outside = _cancelled(settings, 2, "outage 7", first=20)  # after the preview: not in it
    admin.retry_job(settings, jobs[2], actor="bob")  # changed before the apply: running again
    go, changed = threading.Event(), threading.Event()

    def change_others() -> None:
        go.wait(30)
        admin.retry_job(settings, jobs[4], actor="bob")  # now running
        admin.retry_job(settings, jobs[5], actor="bob")
        admin.cancel(settings, jobs[5], "again", actor="bob")  # cancelled again: another end
        changed.set()

    other = threading.Thread(target=change_others)
    other.start()

    def before_item(item: BulkItem) -> None:
        if not go.is_set():  # the apply has begun, and holds no job yet
            go.set()
            assert changed.wait(30)

    applied = bulk_apply(
        settings, made.id, reason="db back", actor="cat", action="retry", before_item=before_item
    )
    other.join()
    assert sorted(applied.done) == sorted(str(j) for j in (jobs[0], jobs[1], jobs[3]))
    assert {s.id for s in applied.skipped} == {str(jobs[2]), str(jobs[4]), str(jobs[5])}
    assert all("changed since the preview" in s.why for s in applied.skipped)
    assert applied.refused == []
    assert [_status(conn, j) for j in outside] == ["cancelled", "cancelled"]
    assert _status(conn, jobs[5]) == "cancelled"
    entries = _bulk_entries(conn, "retry")
    assert sorted(e["target_id"] for e in entries) == sorted(applied.done)
    assert {(e["actor"], e["reason"], e["detail"]["preview"]) for e in entries} == {
        ("cat", "db back", str(made.id))
    }


def test_bulk__an_expired_or_applied_preview_is_refused_and_changes_nothing(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    jobs = _cancelled(settings, 2, "outage")
    made = bulk_preview(settings, "retry", BulkFilter(error="outage"))
    conn.execute(
        "UPDATE engine_bulk_previews SET created_at = created_at - interval '1 hour', "
        "expires_at = clock_timestamp() - interval '1 second' WHERE id = %s",
        (made.id,),
    )
    with pytest.raises(PreviewClosed, match="expired"):
        bulk_apply(settings, made.id, reason="late")
    assert [_status(conn, j) for j in jobs] == ["cancelled", "cancelled"]
    fresh = bulk_preview(settings, "retry", BulkFilter(error="outage"))
    assert len(bulk_apply(settings, fresh.id, reason="now").done) == 2
    with pytest.raises(PreviewClosed, match="applied already"):
        bulk_apply(settings, fresh.id, reason="twice")
    assert len(_bulk_entries(conn, "retry")) == 2


def test_bulk__apply_needs_a_reason_and_the_preview_s_own_action(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    _cancelled(settings, 1, "outage")
    made = bulk_preview(settings, "retry", BulkFilter(error="outage"))
    with pytest.raises(BadInput, match="needs a reason"):
        bulk_apply(settings, made.id, reason=" ")
    with pytest.raises(BadInput, match="is a retry preview, not cancel"):
        bulk_apply(settings, made.id, reason="r", action="cancel")
    with pytest.raises(BadInput, match="bad state 'done' for retry: one of failed, cancelled"):
        bulk_preview(settings, "retry", BulkFilter(state="done"))


def test_bulk__cancel_by_parameter_cancels_each_with_its_own_audit_entry(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    registry = flows_registry()
    jobs = [submit("chain", {"n": i}, settings=settings, registry=registry).job_id for i in (1, 2)]
    made = bulk_preview(settings, "cancel", BulkFilter(flow="chain", state="pending"))
    assert made.total == 2
    applied = bulk_apply(settings, made.id, reason="bad batch", actor="dan")
    assert sorted(applied.done) == sorted(map(str, jobs))
    assert [_status(conn, j) for j in jobs] == ["cancelled", "cancelled"]
    assert len(_bulk_entries(conn, "cancel")) == 2


def test_bulk__dead_letters_replay_and_purge_only_the_previewed_ones(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    jobs = _cancelled(settings, 3, "outage")
    letters = []
    for job in jobs:
        run = conn.execute(
            "SELECT id FROM engine_step_runs WHERE job_id = %s LIMIT 1", (job,)
        ).fetchone()
        assert run is not None
        letters.append(
            dead_letter_insert_step(
                conn, job_id=job, step_run_id=run["id"], reason="db down", error=None
            )
        )
    poison = dead_letter_insert_message_if_new(conn, "m-1", "not json", "malformed")
    made = bulk_preview(settings, "replay", BulkFilter(flow="chain", error="DB DOWN"))
    assert made.total == 3 and made.counts == [{"flow": "chain", "state": "open", "n": 3}]
    admin.replay(settings, letters[0], actor="bob")  # replayed singly meanwhile
    applied = bulk_apply(settings, made.id, reason="db back")
    assert sorted(applied.done) == sorted(str(x) for x in letters[1:])
    assert [s.id for s in applied.skipped] == [str(letters[0])]
    purge = bulk_preview(settings, "purge", BulkFilter(flow="chain"))
    assert purge.total == 3  # replayed now; the poison message is not of flow chain
    assert len(bulk_apply(settings, purge.id, reason="tidy").done) == 3
    left = conn.execute("SELECT id FROM engine_dead_letters").fetchall()
    assert [r["id"] for r in left] == [poison]
    assert len(_bulk_entries(conn, "purge")) == 3


def test_bulk__a_rejected_job_in_the_set_is_refused_as_a_single_retry_is(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    modules = ["approvalflows"]
    fast = fast_settings(settings, flow_modules=modules)
    registry = Registry.load(modules)
    job = submit("gated", {"n": 1}, settings=fast, registry=registry, submitted_by="ann").job_id
    signal(job, "approve", {"decision": "reject", "reason": "wrong"}, settings=fast, sent_by="bob")
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "failed"
    made = bulk_preview(fast, "retry", BulkFilter(flow="gated"))
    assert made.total == 1
    applied = bulk_apply(fast, made.id, reason="try again")
    assert applied.done == [] and [r.id for r in applied.refused] == [str(job)]
    assert "a rejection is the data's decision" in applied.refused[0].why
    assert _status(conn, job) == "failed"
    assert _bulk_entries(conn, "retry") == []


_APPLIER = """
import sys, uuid
from engine import bulk_apply
from engine.config import Settings

preview, chunk = uuid.UUID(sys.argv[1]), int(sys.argv[2])
seen = []

def before_item(item):
    seen.append(item.id)
    if len(seen) == chunk + 1:  # the first chunk's transactions committed
        print("chunk 1 committed", flush=True)

bulk_apply(Settings(), preview, reason="db back", actor="kim", before_item=before_item, chunk=chunk)
print("finished", flush=True)
"""


def test_bulk__an_apply_killed_half_way_is_finished_by_a_rerun_acting_once_per_job(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    chunk = int(os.environ.get("BULK_KILL_CHUNK", "5"))
    jobs = _cancelled(settings, int(os.environ.get("BULK_KILL_N", "3")) * chunk, "outage 9")
    made = bulk_preview(settings, "retry", BulkFilter(error="outage 9"))
    order = [i.id for i in bulk_show_items(conn, made.id)]
    assert settings.database_url is not None
    env = {
        **os.environ,
        "ENGINE_DATABASE_URL": settings.database_url.get_secret_value(),
        "ENGINE_ADMIN_LOCK_TIMEOUT_S": "120",  # waits for the held job past this test's kill
    }
    with psycopg.connect(conn.info.dsn, password=conn.info.password) as holder:
        # a job of the second chunk held: the apply waits on it inside that chunk's transaction
        holder.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR UPDATE", (order[chunk + 2],))
        child = subprocess.Popen(
            [sys.executable, "-c", _APPLIER, str(made.id), str(chunk)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().startswith("chunk 1 committed")
            wait_until(
                lambda: conn.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                ).fetchone(),
                what="the apply's wait for the held job",
            )
        finally:
            child.kill()  # SIGKILL: no cleanup of any kind
            child.wait()
    assert child.returncode == -9
    first = {e["target_id"] for e in _bulk_entries(conn, "retry")}
    assert first == set(order[:chunk])  # the first chunk only: the second's rolled back
    assert _outcomes(conn, made.id) == dict.fromkeys(order[:chunk], "done")

    rerun = bulk_apply(settings, made.id, reason="db back", actor="kim")
    assert sorted(rerun.done) == sorted(order[chunk:])  # exactly the rest
    assert rerun.earlier == {"done": chunk} and rerun.complete
    entries = _bulk_entries(conn, "retry")
    assert sorted(e["target_id"] for e in entries) == sorted(map(str, jobs))  # one per job
    assert all(_status(conn, j) != "cancelled" for j in jobs)
    with pytest.raises(PreviewClosed, match="applied already, by kim"):
        bulk_apply(settings, made.id, reason="again")


def test_bulk__a_busy_item_is_left_without_an_outcome_and_a_rerun_finishes_it(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    jobs = _cancelled(settings, 3, "outage 10")
    made = bulk_preview(settings, "retry", BulkFilter(error="outage 10"))
    fast = fast_settings(settings, admin_lock_timeout_s=0.2)
    with psycopg.connect(conn.info.dsn, password=conn.info.password) as holder:
        holder.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR UPDATE", (jobs[1],))
        first = bulk_apply(fast, made.id, reason="db back")
    assert [b.id for b in first.busy] == [str(jobs[1])] and not first.complete
    assert "run the same --apply again" in first.left()
    again = bulk_apply(fast, made.id, reason="db back")
    assert again.done == [str(jobs[1])] and again.complete
    assert len(_bulk_entries(conn, "retry")) == 3


def bulk_show_items(conn: psycopg.Connection[Any], preview: uuid.UUID) -> list[BulkItem]:
    row = conn.execute("SELECT items FROM engine_bulk_previews WHERE id = %s", (preview,))
    found = row.fetchone()
    assert found is not None
    return [BulkItem(*r) for r in found["items"]]


def _outcomes(conn: psycopg.Connection[Any], preview: uuid.UUID) -> dict[str, str]:
    rows = conn.execute(
        "SELECT item, outcome FROM engine_bulk_preview_outcomes WHERE preview_id = %s",
        (preview,),
    ).fetchall()
    return {r["item"]: r["outcome"] for r in rows}


def test_bulk__a_job_whose_fingerprint_is_active_is_refused_and_the_rest_retried(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    jobs = _cancelled(settings, 3, "outage 11")
    made = bulk_preview(settings, "retry", BulkFilter(error="outage 11"))
    again = submit("chain", {"n": 0}, settings=settings, registry=flows_registry()).job_id
    applied = bulk_apply(settings, made.id, reason="db back")  # the set statement is refused
    assert sorted(applied.done) == sorted(map(str, jobs[1:]))  # so each job is tried alone
    assert [r.id for r in applied.refused] == [str(jobs[0])]
    assert f"job {again} with the same flow and parameters is active" in applied.refused[0].why
    assert applied.complete and _status(conn, jobs[0]) == "cancelled"
    assert sorted(e["target_id"] for e in _bulk_entries(conn, "retry")) == sorted(applied.done)


def test_bulk__two_dead_letters_of_one_job_replay_it_once(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    (job,) = _cancelled(settings, 1, "outage 12")
    conn.execute(  # a second step run of the job, dead as the first
        "INSERT INTO engine_step_runs SELECT (jsonb_populate_record(NULL::engine_step_runs, "
        "to_jsonb(s) || jsonb_build_object('id', gen_random_uuid(), 'step', 'twin'))).* "
        "FROM engine_step_runs AS s WHERE job_id = %s",
        (job,),
    )
    runs = conn.execute("SELECT id FROM engine_step_runs WHERE job_id = %s", (job,)).fetchall()
    letters = [
        dead_letter_insert_step(conn, job_id=job, step_run_id=r["id"], reason="db down", error=None)
        for r in runs
    ]
    made = bulk_preview(settings, "replay", BulkFilter(flow="chain"))
    assert made.total == 2
    applied = bulk_apply(settings, made.id, reason="db back")
    assert applied.done == [str(letters[0])]
    assert [(s.id, s.why) for s in applied.skipped] == [
        (str(letters[1]), "its job changed since the preview: now running")
    ]
    replays = conn.execute(
        "SELECT count(*) AS n FROM engine_events WHERE job_id = %s AND kind = 'replayed'", (job,)
    ).fetchone()
    assert replays is not None and replays["n"] == 1
    assert [e["target_id"] for e in _bulk_entries(conn, "replay")] == [str(letters[0])]
