"""A wait's summary: published by the step, stored with its fenced park, kept after the wake."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
import waitflows
from harness import fast_settings, run_of, thread_worker, wait_job_ended, wait_until
from pydantic import BaseModel

from engine import StepContext, awaiting_approval, signal, store, submit
from engine.config import Settings
from engine.errors import OutputRefused
from engine.flow.registry import Registry
from engine.reports import render_job_report
from engine.runner import claim
from engine.store import Claimed, db
from engine.transports.message import StepMessage
from engine.waits.signals import summary_json

MODULES = ["testflows", "waitflows"]

SUMMARY = {"rejected": 2, "documents": [{"number": "D-1", "reason": "unbalanced"}]}
HOSTILE = {
    "note": "<script>alert(1)</script>",
    "documents": [{"number": "<b>D-2</b>", "reason": "a & b"}, {"number": "D-3", "extra": 1}],
    "totals": {"debit": "1.00", "by": "<i>x</i>"},
}


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


def gate_of(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any]:
    """The gate's step run; ``{}`` before its step is reached."""
    row = conn.execute(
        "SELECT * FROM engine_step_runs WHERE job_id = %s AND step = 'gate'", (job_id,)
    ).fetchone()
    return {} if row is None else dict(row)


def waiting_details(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT detail FROM engine_history WHERE job_id = %s AND kind = 'waiting' ORDER BY at, id",
        (job_id,),
    ).fetchall()
    return [r["detail"] for r in rows]


def test_wait__summary_is_stored_with_the_park_listed_in_the_inbox_and_kept_after_the_wake(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit("approval", {"summary": SUMMARY}, settings=fast, registry=registry).job_id
    plain = submit("approval", {"n": 1}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        wait_until(
            lambda: (
                gate_of(conn, job).get("status") == "waiting"
                and gate_of(conn, plain).get("status") == "waiting"
            ),
            what="both gates to wait",
        )
        assert gate_of(conn, job)["wait_summary"] == SUMMARY
        assert gate_of(conn, plain)["wait_summary"] is None
        assert waiting_details(conn, job)[0]["summary"] == SUMMARY
        inbox = {a.job_id: a for a in awaiting_approval(conn)}
        assert set(inbox) >= {job, plain}
        mine = inbox[job]
        assert (mine.flow, mine.step, mine.signal, mine.summary) == (
            "approval",
            "gate",
            "go",
            SUMMARY,
        )
        assert mine.parent_job_id is None and mine.deadline is None
        assert mine.params["summary"] == SUMMARY
        assert inbox[plain].summary is None
        signal(job, "go", {"decision": "approve"}, settings=fast, sent_by="acct")
        assert wait_job_ended(conn, job) == "done"
        # a job that ended waits no more: the inbox drops it
        assert job not in {a.job_id for a in awaiting_approval(conn)}
    # kept on the step run after the wake, as the record of what was approved
    assert gate_of(conn, job)["wait_summary"] == SUMMARY


def test_wait__a_summary_json_cannot_carry_fails_the_step_naming_the_field(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit("approval", {"summary_nan": True}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        wait_until(lambda: gate_of(conn, job).get("error"), what="the gate to fail")
    gate = gate_of(conn, job)
    assert gate["error"]["type"] == "OutputRefused"
    assert "wait summary field 'totals.ratio' is NaN" in gate["error"]["message"]
    assert gate["wait_summary"] is None
    assert waiting_details(conn, job) == []


def test_wait__a_stale_attempt_parks_nothing_and_stores_no_summary(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit("approval", {"summary": SUMMARY}, settings=fast, registry=registry).job_id

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
    gate = gate_of(conn, job)
    assert (gate["status"], gate["wait_signal"], gate["wait_summary"]) == ("running", None, None)
    assert waiting_details(conn, job) == []
    assert job not in {a.job_id for a in awaiting_approval(conn)}


def test_park__a_lapsed_holder_stores_no_summary_beside_the_next_holder(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    keyed = Registry.load(["testflows", "keyedflows"])
    holder, waiter = (
        submit("keyed_gate", {"group": "sig", "n": i}, settings=fast, registry=keyed).job_id
        for i in range(2)
    )

    def message(job_id: uuid.UUID) -> StepMessage:
        return StepMessage(job_id=job_id, step_run_id=run_of(conn, job_id, "b")["id"])

    with db.connect(fast, autocommit=True) as c:
        paused = claim(c, message(holder), "paused", 30, keyed.runnable())
        assert isinstance(paused, Claimed)
        conn.execute(
            "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
            "WHERE job_id = %s AND status = 'running'",
            (holder,),
        )
        assert isinstance(claim(c, message(waiter), "next", 30, keyed.runnable()), Claimed)
        # the paused worker wakes up and its step asks to wait for "go", with a summary
        with c.transaction():
            assert store.job_lock_if_active(c, holder)
            parked = store.step_wait_if_leased(
                c, paused, signal="go", timeout_s=3600.0, until=None, summary=SUMMARY
            )
    assert parked is None, "a lapsed lease parks nothing"
    b = run_of(conn, holder, "b")
    assert (b["status"], b["wait_signal"], b["wait_summary"]) == ("running", None, None)
    assert holder not in {a.job_id for a in awaiting_approval(conn)}


class _Totals(BaseModel):
    debit: Decimal
    ratio: float


def test_summary_json__models_and_dicts_become_json_and_bad_values_are_named() -> None:
    assert summary_json(None) is None
    assert summary_json(_Totals(debit=Decimal("1.50"), ratio=0.5)) == {
        "debit": "1.50",
        "ratio": 0.5,
    }
    assert summary_json({"t": _Totals(debit=Decimal("2"), ratio=1.0), "n": [Decimal("3")]}) == {
        "t": {"debit": "2", "ratio": 1.0},
        "n": ["3"],
    }
    with pytest.raises(OutputRefused, match=r"wait summary field 'docs\[1\]\.note' is a object"):
        summary_json({"docs": [{"note": "ok"}, {"note": object()}]})
    with pytest.raises(OutputRefused, match="wait summary field 'ratio' is NaN"):
        summary_json(_Totals(debit=Decimal(0), ratio=math.nan))
    with pytest.raises(OutputRefused, match="pydantic model or a dict"):
        summary_json(["not", "an", "object"])  # type: ignore[arg-type]


def test_report__shows_a_waits_summary_generically_escaped_while_it_waits_and_after(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    job = submit("approval", {"summary": HOSTILE}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        wait_until(lambda: gate_of(conn, job).get("status") == "waiting", what="the gate")
        page = Path(render_job_report(fast, job, out_dir=tmp_path / "w", registry=registry))
        text = page.read_text()
        assert "What it shows the approver" in text
        # scalars as a definition list, a list of objects as a table with every key a column
        assert "<dt>note</dt><dd>&lt;script&gt;alert(1)&lt;/script&gt;</dd>" in text
        assert "<th>number</th><th>reason</th><th>extra</th>" in text
        assert "<td>&lt;b&gt;D-2&lt;/b&gt;</td><td>a &amp; b</td>" in text
        assert "<dt>by</dt><dd>&lt;i&gt;x&lt;/i&gt;</dd>" in text
        for raw in ("<script>alert(1)", "<b>D-2</b>", "<i>x</i>"):
            assert raw not in text
        signal(job, "go", {"decision": "approve"}, settings=fast, sent_by="acct")
        assert wait_job_ended(conn, job) == "done"
    text = Path(render_job_report(fast, job, out_dir=tmp_path / "d", registry=registry)).read_text()
    assert "is waiting for signal" not in text
    assert "showed its approver while it waited for signal <code>go</code>" in text
    assert "Signal sent by <strong>acct</strong>" in text
    assert "<td>&lt;b&gt;D-2&lt;/b&gt;</td>" in text
