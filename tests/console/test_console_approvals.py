"""Approvals through the console refuse as the engine does: the submitter (admins included),
no reason; each refusal audited by the console's role; the relaxed setting's banner."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from consolesupport import csrf_of, sign_in
from harness import fast_settings, thread_worker, wait_job_ended
from starlette.testclient import TestClient

from engine import submit
from engine.config import Settings
from engine.console.app import create_app
from engine.console.settings import ConsoleSettings
from engine.flow.registry import Registry


def _gated(settings: Settings, by: str, n: int = 1) -> uuid.UUID:
    """A pending ``gated`` job (no worker runs here: the signal is kept for its step)."""
    registry = Registry.load(["approvalflows"])
    return submit("gated", {"n": n}, settings=settings, registry=registry, submitted_by=by).job_id


def _decide(client: TestClient, job: uuid.UUID, decision: str, reason: str = "") -> str:
    token = csrf_of(client.get("/approvals").text)
    r = client.post(
        f"/runs/{job}/decide",
        data={"csrf": token, "signal": "approve", "decision": decision, "reason": reason},
    )
    assert r.status_code == 200
    return r.text


def _entries(conn: psycopg.Connection[Any], job: uuid.UUID) -> list[tuple[str, str, str, Any]]:
    rows = conn.execute(
        "SELECT actor, source, action, detail FROM engine_audit WHERE job_id = %s ORDER BY id",
        (job,),
    ).fetchall()
    return [(r["actor"], r["source"], r["action"], r["detail"].get("rule")) for r in rows]


def _signalled(conn: psycopg.Connection[Any], job: uuid.UUID) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM engine_signals WHERE job_id = %s", (job,)
    ).fetchone()
    assert row is not None
    return int(row["n"])


@pytest.mark.parametrize("who", ["anna", "adam"])
def test_console__the_submitter_cannot_approve_admins_included(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any], who: str
) -> None:
    job = _gated(settings, by=who)
    page = _decide(client_for(who), job, "approve", "looks fine")
    assert "refused: approval &#39;approve&#39;" in page
    assert f"{who} submitted this job" in page
    assert _signalled(conn, job) == 0
    assert _entries(conn, job) == [(who, "console", "signal_refused", "submitter")]


def test_console__approve_and_reject_need_a_reason(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = _gated(settings, by="otto")
    anna = client_for("anna")
    for decision in ("approve", "reject"):
        page = _decide(anna, job, decision, "  ")
        assert "needs a reason, approve and reject alike" in page
    assert _signalled(conn, job) == 0
    assert _entries(conn, job) == [("anna", "console", "signal_refused", "reason")] * 2
    page = _decide(anna, job, "approve", "checked the rejections")
    assert f"job {job} approved" in page
    assert _signalled(conn, job) == 1
    assert "self-approval" not in page


def test_console__relaxed_shows_its_banner_on_every_page_and_audits_a_self_approval(
    settings: Settings,
    console_conf: ConsoleSettings,
    people: Any,
    conn: psycopg.Connection[Any],
) -> None:
    relaxed = settings.model_copy(update={"allow_self_approval": True})
    app = create_app(relaxed, console_conf, Registry.load(["testflows", "flows.tools"]))
    with TestClient(app, base_url="http://127.0.0.1") as anna:
        assert 'id="self-approval"' in anna.get("/signin").text
        sign_in(anna, "anna", people["anna"][1])
        job = _gated(relaxed, by="anna")
        for path in ("/", "/approvals", "/dead-letters", "/schedules", "/workers", "/audit"):
            assert 'id="self-approval"' in anna.get(path).text, path
        assert 'id="self-approval"' in anna.get(f"/runs/{job}.html").text
        page = _decide(anna, job, "approve", "one-person shop")
        assert f"job {job} approved" in page
    assert _signalled(conn, job) == 1
    assert [e[:3] for e in _entries(conn, job)] == [
        ("anna", "console", "self_approval"),
        ("anna", "console", "signal"),
    ]


def test_console__a_rejected_job_offers_no_retry_and_a_retry_is_refused(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    fast = fast_settings(settings, flow_modules=["approvalflows"])
    job = _gated(fast, by="otto")
    page = _decide(client_for("anna"), job, "reject", "the counts are wrong")
    assert f"job {job} rejected" in page
    with thread_worker(fast, Registry.load(["approvalflows"])):
        assert wait_job_ended(conn, job) == "failed"
    otto = client_for("otto")
    page = otto.get(f"/runs/{job}.html").text
    assert "Retry job" not in page
    assert 'id="rejected"' in page
    token = csrf_of(page)
    refused = otto.post(f"/runs/{job}/retry", data={"csrf": token, "reason": "again"}).text
    assert "a rejection is the data&#39;s decision" in refused
    status = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert status == {"status": "failed"}
    assert conn.execute("SELECT count(*) AS n FROM engine_dead_letters").fetchone() == {"n": 0}
    assert conn.execute("SELECT count(*) AS n FROM engine_alerts").fetchone() == {"n": 0}
