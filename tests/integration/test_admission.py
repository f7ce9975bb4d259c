"""A flow's admission check runs inside the submit's transaction; flows can ask which jobs run."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from engine import Flow, Refused, Registry, StepContext, active_jobs, job_info, submit
from engine.config import Settings
from engine.errors import DefinitionError, StoreError
from engine.store import db


class Params(BaseModel):
    account: str
    note: str = ""


class Out(BaseModel):
    ok: bool


def make_flow(name: str = "guarded") -> Flow:
    flow = Flow(name, params=Params)

    @flow.admit
    def admit(params: Params, conn: psycopg.Connection[Any]) -> None:
        """The account exists and is open (share-locked until the job commits)."""
        row = conn.execute(
            "SELECT open FROM admission_accounts WHERE name = %s FOR SHARE", (params.account,)
        ).fetchone()
        if row is None or not row["open"]:
            raise Refused(f"account {params.account!r} is not open")

    @flow.step()
    def only(params: Params, ctx: StepContext) -> Out:
        return Out(ok=True)

    return flow


@pytest.fixture
def accounts(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TABLE admission_accounts (name text PRIMARY KEY, open boolean NOT NULL)")
    conn.execute("INSERT INTO admission_accounts VALUES ('a', true), ('b', false)")


@pytest.fixture
def registry() -> Registry:
    return Registry([make_flow(), make_flow("other")])


def jobs(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone()
    assert row is not None
    return int(row["n"])


def test_admission__a_refused_submit_writes_nothing_and_names_why(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any], accounts: None
) -> None:
    with pytest.raises(Refused, match="account 'b' is not open"):
        submit("guarded", {"account": "b"}, settings=settings, registry=registry)
    assert jobs(conn) == 0
    ok = submit("guarded", {"account": "a"}, settings=settings, registry=registry)
    assert ok.created and jobs(conn) == 1


def test_admission__inside_the_callers_transaction_a_refusal_leaves_it_usable(
    settings: Settings, registry: Registry, accounts: None
) -> None:
    with db.connect(settings) as own:
        with pytest.raises(Refused):
            submit("guarded", {"account": "b"}, conn=own, settings=settings, registry=registry)
        assert own.execute("SELECT 1 AS one").fetchone() == {"one": 1}
        own.rollback()


def test_admission__its_lock_lasts_until_the_job_commits(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any], accounts: None
) -> None:
    """An account closed while a submit's transaction is open waits for it, then sees the job."""
    closing_started = threading.Event()
    with db.connect(settings) as caller:
        submit("guarded", {"account": "a"}, conn=caller, settings=settings, registry=registry)

        def close_account() -> int:
            with db.connect(settings, autocommit=True) as other:
                other.execute("SET lock_timeout = '30s'")
                closing_started.set()
                other.execute("UPDATE admission_accounts SET open = false WHERE name = 'a'")
                return len(active_jobs(other, flows=["guarded"], params={"account": "a"}))

        with ThreadPoolExecutor(1) as pool:
            closing = pool.submit(close_account)
            assert closing_started.wait(10)
            # the update waits on the admission's FOR SHARE until the caller commits
            waiting = conn.execute(
                "SELECT count(*) AS n FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE admission_accounts%%'"
            ).fetchone()
            while waiting == {"n": 0} and not closing.done():
                waiting = conn.execute(
                    "SELECT count(*) AS n FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE admission_accounts%%'"
                ).fetchone()
            assert not closing.done(), "the update did not wait for the submit's lock"
            caller.commit()
            assert closing.result(timeout=30) == 1, "after the wait, the job is visible"
    with pytest.raises(Refused):
        submit("guarded", {"account": "a", "note": "x"}, settings=settings, registry=registry)


def test_admission__a_driver_error_in_the_check_is_a_store_error(
    settings: Settings, registry: Registry
) -> None:
    # no admission_accounts table in this database
    with pytest.raises(StoreError, match="flow 'guarded': its admission check failed"):
        submit("guarded", {"account": "a"}, settings=settings, registry=registry)


def test_admission__one_per_flow_and_shown_by_describe() -> None:
    flow = make_flow()
    with pytest.raises(DefinitionError, match="has an admission check already"):
        flow.admit(lambda params, conn: None)
    assert "admission: admit  The account exists and is open" in flow.describe()


def test_active_jobs__matches_flow_and_contained_params_and_leaves_out_one(
    settings: Settings, registry: Registry, conn: psycopg.Connection[Any], accounts: None
) -> None:
    first = submit("guarded", {"account": "a"}, settings=settings, registry=registry)
    second = submit(
        "guarded", {"account": "a", "note": "again"}, settings=settings, registry=registry
    )
    submit("other", {"account": "a"}, settings=settings, registry=registry, submitted_by="ann")
    found = active_jobs(conn, flows=["guarded"], params={"account": "a"})
    assert [j.id for j in found] == [first.job_id, second.job_id]
    assert [j.id for j in active_jobs(conn, flows=["guarded"], exclude=first.job_id)] == [
        second.job_id
    ]
    assert active_jobs(conn, flows=["guarded"], params={"account": "b"}) == []
    assert len(active_jobs(conn, flows=["guarded", "other"])) == 3
    conn.execute(
        "UPDATE engine_jobs SET status = 'done', finished_at = now() WHERE id = %s", (first.job_id,)
    )
    assert [j.id for j in active_jobs(conn, flows=["guarded"])] == [second.job_id]
    info = job_info(conn, first.job_id)
    assert (
        info is not None and info.flow == "guarded" and info.params == {"account": "a", "note": ""}
    )
    others = active_jobs(conn, flows=["other"])
    assert others[0].submitted_by == "ann"
