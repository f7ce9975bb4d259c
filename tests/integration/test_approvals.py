"""Segregation of duties on approvals, in the engine: refused alike whoever calls, and audited.

A flow declares which of its signals are approvals (``approvalflows.gated``:
``approve``); ``engine.signal`` refuses one from an unknown sender, from whoever
submitted the job or an ancestor job, or without a reason, and records each
refusal in the audit trail on a connection of its own.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, thread_worker, wait_job_ended, wait_until

from engine import ApprovalRefused, Flow, Refused, Registry, signal, submit
from engine.config import Settings
from engine.errors import BadInput, DefinitionError
from engine.jobs import admin
from engine.reports import render_job_report
from engine.store.status import AuditSource

MODULES = ["approvalflows"]
ANN = "ann@books"  # who submits
BOB = "bob@books"  # an accountant who did not


@pytest.fixture
def registry() -> Registry:
    return Registry.load(MODULES)


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings, flow_modules=MODULES)


def gated(fast: Settings, registry: Registry, by: str | None = ANN, n: int = 1) -> uuid.UUID:
    return submit("gated", {"n": n}, settings=fast, registry=registry, submitted_by=by).job_id


def refusals(conn: psycopg.Connection[Any], job: uuid.UUID) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in conn.execute(
            "SELECT actor, source, action, reason, detail FROM engine_audit "
            "WHERE job_id = %s AND action IN ('signal_refused', 'self_approval') ORDER BY id",
            (job,),
        ).fetchall()
    ]


def signals_of(conn: psycopg.Connection[Any], job: uuid.UUID) -> list[str]:
    rows = conn.execute("SELECT name FROM engine_signals WHERE job_id = %s", (job,)).fetchall()
    return [r["name"] for r in rows]


def refused(job: uuid.UUID, data: Any, settings: Settings, **kw: Any) -> ApprovalRefused:
    with pytest.raises(ApprovalRefused) as caught:
        signal(job, "approve", data, settings=settings, **kw)
    assert isinstance(caught.value, Refused) and isinstance(caught.value, BadInput)
    return caught.value


def test_flow__approvals_name_declared_signals() -> None:
    from pydantic import BaseModel

    class P(BaseModel):
        n: int = 0

    assert Flow("f", params=P, signals=("go", "ok"), approvals=("ok",)).approvals == ("ok",)
    with pytest.raises(DefinitionError, match="approval 'approve' is not a declared signal"):
        Flow("f", params=P, signals=("go",), approvals=("approve",))


def test_approval__the_submitter_is_refused_and_the_refusal_is_audited(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    job = gated(fast, registry)
    exc = refused(job, {"decision": "approve", "reason": "fine"}, fast, sent_by=ANN)
    assert (exc.job_id, exc.signal, exc.sender, exc.rule) == (job, "approve", ANN, "submitter")
    assert f"{ANN} submitted this job" in str(exc)
    # a console user's bare name is the same person as the CLI's user@host (in doubt: refuse)
    assert refused(job, {"reason": "fine"}, fast, sent_by=" Ann ").rule == "submitter"
    assert signals_of(conn, job) == []
    entries = refusals(conn, job)
    assert [(e["actor"], e["source"], e["action"], e["reason"]) for e in entries] == [
        (ANN, "api", "signal_refused", "fine"),
        ("Ann", "api", "signal_refused", "fine"),
    ]
    assert entries[0]["detail"]["rule"] == "submitter"
    assert entries[0]["detail"]["signal"] == "approve"


def test_approval__another_person_with_a_reason_approves(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    job = gated(fast, registry)
    sent = signal(job, "approve", {"reason": "checked"}, settings=fast, sent_by=BOB)
    assert sent.created
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    assert refusals(conn, job) == []


def test_approval__a_plain_signal_is_no_approval(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    job = gated(fast, registry)
    assert signal(job, "note", {}, settings=fast, sent_by=ANN).created


def test_approval__a_reason_is_needed_to_approve_and_to_reject(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    job = gated(fast, registry)
    for data in (
        None,
        {"decision": "approve"},
        {"decision": "reject"},
        {"decision": "reject", "reason": "   "},
        {"decision": "approve", "reason": 7},
        "approve",
    ):
        exc = refused(job, data, fast, sent_by=BOB)
        assert exc.rule == "reason", data
        assert "needs a reason, approve and reject alike" in str(exc)
    assert signals_of(conn, job) == []
    assert {e["detail"]["rule"] for e in refusals(conn, job)} == {"reason"}
    assert len(refusals(conn, job)) == 6


def test_approval__an_unknown_sender_is_refused(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    job = gated(fast, registry)
    for sender in (None, "", "  "):
        assert refused(job, {"reason": "ok"}, fast, sent_by=sender).rule == "sender"
    assert signals_of(conn, job) == []
    assert len(refusals(conn, job)) == 3


def test_approval__a_job_with_no_recorded_submitter_is_approved_by_any_named_sender(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    job = gated(fast, registry, by=None)
    assert signal(job, "approve", {"reason": "ok"}, settings=fast, sent_by=ANN).created


def test_approval__the_parents_submitter_is_refused_on_the_child(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    parent = submit(
        "gatekeeper", {"n": 2}, settings=fast, registry=registry, submitted_by=ANN
    ).job_id

    def child() -> uuid.UUID | None:
        row = conn.execute(
            "SELECT id FROM engine_jobs WHERE parent_job_id = %s", (parent,)
        ).fetchone()
        return None if row is None else row["id"]

    with thread_worker(fast, registry):
        kid = wait_until(child, what="the gated child")
        exc = refused(kid, {"reason": "mine"}, fast, sent_by=ANN)
        assert exc.rule == "submitter"
        assert f"job {parent}, its parent" in str(exc)
        signal(kid, "approve", {"reason": "checked"}, settings=fast, sent_by=BOB)
        assert wait_job_ended(conn, parent) == "done"
    [entry] = refusals(conn, kid)
    assert (entry["actor"], entry["detail"]["rule"]) == (ANN, "submitter")


def test_approval__the_refusal_outlives_the_callers_rolled_back_transaction(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    job = gated(fast, registry)
    url = fast.database_url.get_secret_value()  # type: ignore[union-attr]
    with (
        psycopg.connect(url) as caller,
        pytest.raises(ApprovalRefused),
        caller.transaction(),
    ):
        signal(job, "approve", {"reason": "x"}, conn=caller, settings=fast, sent_by=ANN)
    assert signals_of(conn, job) == []
    assert [e["detail"]["rule"] for e in refusals(conn, job)] == ["submitter"]


@pytest.mark.parametrize(
    ("role", "source"),
    [("engine_worker", AuditSource.API), ("engine_console", AuditSource.CONSOLE)],
)
def test_approval__the_worker_and_console_roles_record_their_refusals(
    fast: Settings,
    registry: Registry,
    conn: psycopg.Connection[Any],
    role: str,
    source: AuditSource,
) -> None:
    job = gated(fast, registry)
    as_role = fast.model_copy(update={"session_role": role})
    for sender, rule in ((ANN, "submitter"), (None, "sender")):
        exc = refused(job, {"reason": "x"}, as_role, sent_by=sender, source=source)
        assert exc.rule == rule
    entries = refusals(conn, job)
    assert [(e["source"], e["detail"]["rule"]) for e in entries] == [
        (source.value, "submitter"),
        (source.value, "sender"),
    ]
    chained = conn.execute(
        "SELECT count(*) AS n FROM engine_audit WHERE job_id = %s AND hash IS NOT NULL", (job,)
    ).fetchone()
    assert chained == {"n": 2}


def test_approval__relaxed_lets_the_submitter_approve_audited_but_still_needs_a_reason(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    relaxed = fast.model_copy(update={"allow_self_approval": True})
    job = gated(relaxed, registry)
    assert refused(job, {"decision": "approve"}, relaxed, sent_by=ANN).rule == "reason"
    assert refused(job, {"reason": "x"}, relaxed, sent_by=None).rule == "sender"
    sent = signal(job, "approve", {"reason": "one-person shop"}, settings=relaxed, sent_by=ANN)
    assert sent.created
    last = refusals(conn, job)[-1]
    assert (last["actor"], last["action"], last["reason"]) == (
        ANN,
        "self_approval",
        "one-person shop",
    )
    assert last["detail"] == {"signal": "approve", "submitted_by": ANN}
    # someone else's approval is no self-approval
    other = gated(relaxed, registry, by=BOB, n=2)
    signal(other, "approve", {"reason": "ok"}, settings=relaxed, sent_by=ANN)
    assert refusals(conn, other) == []


def test_approval__names_the_job_barred_are_refused_others_approve(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    job = submit(
        "barring", {"barred": ["cyd@books", "dee"]}, settings=fast, registry=registry
    ).job_id
    with thread_worker(fast, registry):
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT status FROM engine_step_runs WHERE job_id = %s AND step = 'wait'",
                    (job,),
                ).fetchone()
                == {"status": "waiting"}
            ),
            what="the approval wait",
        )
        for who in ("cyd@books", "Cyd", "dee@books"):
            exc = refused(job, {"reason": "I prepared it"}, fast, sent_by=who)
            assert exc.rule == "barred", who
            assert "is barred from approving it" in str(exc)
            assert "by the job itself" in str(exc)
        assert signals_of(conn, job) == []
        assert [e["detail"]["rule"] for e in refusals(conn, job)] == ["barred"] * 3
        relaxed = fast.model_copy(update={"allow_self_approval": True})
        signal(job, "approve", {"reason": "one-person shop"}, settings=relaxed, sent_by="dee")
        assert wait_job_ended(conn, job) == "done"
    last = refusals(conn, job)[-1]
    assert (last["action"], last["detail"]) == (
        "self_approval",
        {"signal": "approve", "submitted_by": "dee"},
    )


def test_approval__relaxed_is_off_by_default_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGINE_ALLOW_SELF_APPROVAL", raising=False)
    assert Settings().allow_self_approval is False
    monkeypatch.setenv("ENGINE_ALLOW_SELF_APPROVAL", "1")
    assert Settings().allow_self_approval is True


def test_reject__a_rejected_job_has_no_dead_letter_nor_alert_and_is_not_retried(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    job = gated(fast, registry)
    signal(job, "approve", {"decision": "reject", "reason": "wrong"}, settings=fast, sent_by=BOB)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "failed"
    row = conn.execute("SELECT rejected, error FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert row is not None and row["rejected"] is True
    assert "rejected by bob@books: wrong" in row["error"]
    assert conn.execute("SELECT count(*) AS n FROM engine_dead_letters").fetchone() == {"n": 0}
    assert conn.execute("SELECT count(*) AS n FROM engine_alerts").fetchone() == {"n": 0}
    with pytest.raises(Refused, match="a rejection is the data's decision") as caught:
        admin.retry_job(fast, job)
    assert f"job {job} was rejected" in str(caught.value)
    assert "submit a new job" in str(caught.value)
    status = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert status == {"status": "failed"}
    page = Path(render_job_report(fast, job, out_dir=tmp_path, registry=registry)).read_text()
    assert 'id="rejected"' in page and "submit a new job" in page


def test_reject__a_rejected_child_ends_its_parent_rejected_with_no_dead_letter_nor_alert(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    parent = submit(
        "gatekeeper", {"n": 3}, settings=fast, registry=registry, submitted_by=ANN
    ).job_id

    def child() -> uuid.UUID | None:
        row = conn.execute(
            "SELECT id FROM engine_jobs WHERE parent_job_id = %s", (parent,)
        ).fetchone()
        return None if row is None else row["id"]

    with thread_worker(fast, registry):
        kid = wait_until(child, what="the gated child")
        signal(kid, "approve", {"decision": "reject", "reason": "no"}, settings=fast, sent_by=BOB)
        assert wait_job_ended(conn, parent) == "failed"
    rows = conn.execute(
        "SELECT id, status, rejected FROM engine_jobs WHERE id = ANY(%s)", ([parent, kid],)
    ).fetchall()
    assert {(r["id"], r["status"], r["rejected"]) for r in rows} == {
        (parent, "failed", True),
        (kid, "failed", True),
    }
    assert conn.execute("SELECT count(*) AS n FROM engine_dead_letters").fetchone() == {"n": 0}
    assert conn.execute("SELECT count(*) AS n FROM engine_alerts").fetchone() == {"n": 0}
    for job in (parent, kid):
        with pytest.raises(Refused, match="rejected"):
            admin.retry_job(fast, job)
