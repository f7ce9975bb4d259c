"""A step run whose lease lapsed holds nothing: no key's slot kept, taken or handed on.

A keyed step run holds its key's slot by its lease while it runs. Once that
lease lapsed (its worker paused past it, its heartbeat starved by a long C
call), a claim of the key counts it out and admits the next holder. From
then on, nothing the lapsed run does may keep, take or hand on the slot: not
a park on a signal or on its children (a park keeps the slot by status, and
children inherit it), not a checkpoint, not a child submitted. And each of
those statements serialises with the claims of its key: one that found its
lease live commits before a claim counts the holders, never after.

Time is moved by ageing rows (``lease_expires_at`` in the past), as in
``test_concurrency_keys.py``; a starved heartbeat is one whose interval is
longer than the test (``heartbeat_s`` 25 s): it never renews in time.
Flows: ``tests/support/keyedflows.py``.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, run_of, thread_worker, wait_until

from engine import store, submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.runner import claim
from engine.store import Claimed, ClaimRefused, db
from engine.transports.message import StepMessage

REGISTRY = Registry.load(["testflows", "keyedflows"])
ALL = REGISTRY.runnable()


@pytest.fixture
def fast(settings: Settings) -> Settings:
    # a heartbeat that never beats within a test: a starved one
    return fast_settings(
        settings,
        concurrency=1,
        heartbeat_s=25.0,
        flow_modules=["testflows", "keyedflows"],
        over_limit_delay_s=900.0,
        republish_after_s=300.0,
    )


def submit_keyed(settings: Settings, flow: str, **params: Any) -> uuid.UUID:
    return submit(flow, params, settings=settings, registry=REGISTRY).job_id


def message(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str) -> StepMessage:
    return StepMessage(job_id=job_id, step_run_id=run_of(conn, job_id, step)["id"])


def lapse(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> None:
    """The job's running step runs' leases lapse (their worker paused past them)."""
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE job_id = %s AND status = 'running'",
        (job_id,),
    )


def holders(conn: psycopg.Connection[Any], key: str) -> int:
    """How many step runs hold ``key`` now, as a job outside every family counts them."""
    row = conn.execute(
        "SELECT runs FROM engine_concurrency_holders(%s, gen_random_uuid(), NULL)", (key,)
    ).fetchone()
    assert row is not None
    return int(row["runs"])


# -- the statements, one by one ---------------------------------------------------------


def test_park__a_lapsed_holder_cannot_park_on_a_signal_beside_the_next_holder(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    holder, waiter = (submit_keyed(fast, "keyed_gate", group="sig", n=i) for i in range(2))
    with db.connect(fast, autocommit=True) as c:
        paused = claim(c, message(conn, holder, "b"), "paused", 30, ALL)
        assert isinstance(paused, Claimed)
        lapse(conn, holder)
        assert isinstance(claim(c, message(conn, waiter, "b"), "next", 30, ALL), Claimed)
        # the paused worker wakes up and its step asks to wait for "go"
        with c.transaction():
            assert store.job_lock_if_active(c, holder)
            parked = store.step_wait_if_leased(
                c, paused, signal="go", timeout_s=3600.0, until=None, past=()
            )
    assert parked is None, "a lapsed lease parks nothing"
    b = run_of(conn, holder, "b")
    assert (b["status"], b["concurrency_kept"]) == ("running", False)
    assert holders(conn, "gate:sig") == 1


def test_park__a_lapsed_parent_cannot_park_for_its_children_beside_the_next_holder(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    parent, outsider = (submit_keyed(fast, "keyed_spawner", group="kids", n=i) for i in range(2))
    with db.connect(fast, autocommit=True) as c:
        paused = claim(c, message(conn, parent, "spawn"), "paused", 30, ALL)
        assert isinstance(paused, Claimed)
        lapse(conn, parent)
        assert isinstance(claim(c, message(conn, outsider, "spawn"), "next", 30, ALL), Claimed)
        with c.transaction():
            assert store.job_lock_if_active(c, parent)
            store.job_lock_children(c, paused.id)
            parked = store.step_wait_children_if_leased(c, paused, timeout_s=3600.0, past=())
    assert parked is None, "a lapsed lease parks nothing, and hands no slot to children"
    assert run_of(conn, parent, "spawn")["concurrency_kept"] is False
    assert holders(conn, "spawn:kids") == 1


def test_checkpoint__a_keyed_checkpoint_and_a_claim_of_its_key_serialise(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    holder, waiter = (submit_keyed(fast, "keyed", group="ser", n=i) for i in range(2))
    with (
        db.connect(fast, autocommit=True) as checkpointing,
        db.connect(fast, autocommit=True) as claiming,
    ):
        # a short lease, to lapse by the database clock while its checkpoint is open
        held = claim(checkpointing, message(conn, holder, "b"), "slow", 1, ALL)
        assert isinstance(held, Claimed)
        result: list[Claimed | ClaimRefused] = []
        claimer = threading.Thread(
            target=lambda: result.append(
                claim(claiming, message(conn, waiter, "b"), "next", 30, ALL)
            )
        )
        with checkpointing.transaction():
            # the lease is live when the checkpoint writes ...
            done = store.checkpoint_put_if_leased(
                checkpointing,
                step_run_id=held.id,
                job_id=holder,
                token=held.token,
                output={"step": "b", "n": 0},
                worker="slow",
            )
            assert done is not None
            # ... and lapses before its transaction commits (a slow group, a pause)
            wait_until(lambda: past(conn, held.lease_expires_at), what="the lease to lapse")
            claimer.start()
            # the claim of the same key waits for this commit rather than counting
            # the holder out while its writes are not committed yet
            wait_until(
                lambda: waiting_on_a_lock(conn, claiming), timeout=10, what="the claim to wait"
            )
            assert not result, "the claim was decided before the keyed checkpoint committed"
        claimer.join(timeout=10)
    assert result and isinstance(result[0], Claimed), "after the commit the slot is free"
    assert run_of(conn, holder, "b")["status"] == "done"


def past(conn: psycopg.Connection[Any], at: Any) -> bool:
    row = conn.execute("SELECT clock_timestamp() > %s AS past", (at,)).fetchone()
    return bool(row and row["past"])


def waiting_on_a_lock(conn: psycopg.Connection[Any], other: psycopg.Connection[Any]) -> bool:
    row = conn.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (other.info.backend_pid,)
    ).fetchone()
    return row is not None and row["wait_event_type"] == "Lock"


def test_checkpoint__a_claim_that_counted_a_lapsed_holder_out_refuses_its_checkpoint(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    holder, waiter = (submit_keyed(fast, "keyed", group="late", n=i) for i in range(2))
    with (
        db.connect(fast, autocommit=True) as paused_conn,
        db.connect(fast, autocommit=True) as claiming,
    ):
        paused = claim(paused_conn, message(conn, holder, "b"), "paused", 30, ALL)
        assert isinstance(paused, Claimed)
        lapse(conn, holder)
        with claiming.transaction():
            # the claim of the next holder has counted the lapsed one out, not committed yet
            assert isinstance(claim(claiming, message(conn, waiter, "b"), "next", 30, ALL), Claimed)
            result: list[Any] = []

            def checkpoint() -> None:
                with paused_conn.transaction():
                    result.append(
                        store.checkpoint_put_if_leased(
                            paused_conn,
                            step_run_id=paused.id,
                            job_id=holder,
                            token=paused.token,
                            output={"step": "b", "n": 0},
                            worker="paused",
                        )
                    )

            late = threading.Thread(target=checkpoint)
            late.start()
            wait_until(
                lambda: waiting_on_a_lock(conn, paused_conn) or bool(result),
                timeout=10,
                what="the checkpoint to wait or end",
            )
        late.join(timeout=10)
    assert result == [None], "the lapsed holder's checkpoint commits nothing"
    assert holders(conn, "group:late") == 1


# -- a worker whose heartbeat starved -----------------------------------------------


def hold(tmp_path: Path, name: str) -> tuple[str, Path, Path]:
    base = tmp_path / name
    return str(base), Path(f"{base}.started"), Path(f"{base}.release")


def test_worker__a_starved_holder_parks_nothing_once_another_job_took_its_slot(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold_file, started, release = hold(tmp_path, "gate")
    holder = submit_keyed(fast, "keyed_gate", group="starved", hold_file=hold_file)
    with thread_worker(fast, REGISTRY):
        wait_until(started.exists, what="the holder to start")
        # its worker's heartbeat starves past the lease; another job takes the key
        lapse(conn, holder)
        outsider = submit_keyed(fast, "keyed_gate", group="starved", n=1)
        with db.connect(fast, autocommit=True) as c:
            assert isinstance(claim(c, message(conn, outsider, "b"), "next", 30, ALL), Claimed)
        release.touch()
        wait_until(lambda: events(conn, holder, "fenced"), what="the holder's park to be refused")
    b = run_of(conn, holder, "b")
    assert (b["status"], b["concurrency_kept"]) == ("running", False)
    assert holders(conn, "gate:starved") == 1, "one holder: the outsider"
    assert not effects(conn, holder), "nothing of the lapsed run committed"


def test_worker__a_starved_parent_submits_no_child_once_another_job_took_its_slot(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    hold_file, started, release = hold(tmp_path, "spawn")
    parent = submit_keyed(
        fast, "keyed_spawner", group="orphans", hold_file=hold_file, hold_step="spawn"
    )
    with thread_worker(fast, REGISTRY):
        wait_until(started.exists, what="the parent to start")
        lapse(conn, parent)
        outsider = submit_keyed(fast, "keyed_spawner", group="orphans", n=1)
        with db.connect(fast, autocommit=True) as c:
            assert isinstance(claim(c, message(conn, outsider, "spawn"), "next", 30, ALL), Claimed)
        release.touch()
        [fenced] = wait_until(
            lambda: events(conn, parent, "fenced"), what="the parent to be fenced"
        )
    assert "may not submit child 'kid'" in fenced["detail"]["reason"]
    kids = conn.execute(
        "SELECT count(*) AS n FROM engine_jobs WHERE parent_job_id = %s", (parent,)
    ).fetchone()
    assert kids == {"n": 0}, "no child inherits a slot its parent lost"
    assert holders(conn, "spawn:orphans") == 1


def events(conn: psycopg.Connection[Any], job_id: uuid.UUID, kind: str) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT kind, detail FROM engine_history WHERE job_id = %s AND kind = %s ORDER BY at, id",
        (job_id, kind),
    ).fetchall()


def effects(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[str]:
    rows = conn.execute("SELECT step FROM test_effects WHERE job_id = %s", (job_id,)).fetchall()
    return [r["step"] for r in rows]
