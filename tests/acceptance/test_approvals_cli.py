"""`engine signal` of an approval and `engine retry` of a rejected job, as a user runs them."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from harness import engine_cli as engine
from harness import fast_settings, thread_worker, wait_job_ended

from engine import Registry, signal, submit
from engine.config import Settings
from engine.jobs.audit import operator

pytestmark = pytest.mark.acceptance

MODULES = ["approvalflows"]


def _gated(settings: Settings, by: str, n: int = 1) -> uuid.UUID:
    registry = Registry.load(MODULES)
    return submit("gated", {"n": n}, settings=settings, registry=registry, submitted_by=by).job_id


def test_cli__an_approval_from_the_submitter_or_without_a_reason_exits_2_and_is_audited(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    me = operator()  # the CLI's sender: user@host, as it records a submitter
    job = _gated(settings, by=me)
    mine = engine(settings, "signal", str(job), "approve", "--data", '{"reason": "fine"}')
    assert mine.returncode == 2, mine.stderr
    assert f"{me} submitted this job" in mine.stderr
    assert "warning" not in mine.stderr
    bare = engine(settings, "signal", str(job), "approve", "--by", "bob", "--data", "{}")
    assert bare.returncode == 2, bare.stderr
    assert "needs a reason, approve and reject alike" in bare.stderr
    ok = engine(
        settings, "signal", str(job), "approve", "--by", "bob", "--data", '{"reason": "checked"}'
    )
    assert ok.returncode == 0, ok.stderr
    rows = conn.execute(
        "SELECT actor, source, action, detail->>'rule' AS rule FROM engine_audit "
        "WHERE job_id = %s ORDER BY id",
        (job,),
    ).fetchall()
    assert [(r["actor"], r["source"], r["action"], r["rule"]) for r in rows] == [
        (me, "cli", "signal_refused", "submitter"),
        ("bob", "cli", "signal_refused", "reason"),
        ("bob", "cli", "signal", None),
    ]


def test_cli__relaxed_lets_the_submitter_approve_with_a_warning(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    me = operator()
    job = _gated(settings, by=me)
    relaxed = {"ENGINE_ALLOW_SELF_APPROVAL": "1"}
    sent = engine(
        settings, "signal", str(job), "approve", "--data", '{"reason": "alone"}', env=relaxed
    )
    assert sent.returncode == 0, sent.stderr
    assert "warning: ENGINE_ALLOW_SELF_APPROVAL is on" in sent.stderr
    actions = conn.execute(
        "SELECT action FROM engine_audit WHERE job_id = %s ORDER BY id", (job,)
    ).fetchall()
    assert [a["action"] for a in actions] == ["self_approval", "signal"]


def test_cli__retry_of_a_rejected_job_exits_2_saying_to_submit_anew(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    fast = fast_settings(settings, flow_modules=MODULES)
    registry = Registry.load(MODULES)
    job = _gated(fast, by="ann")
    signal(job, "approve", {"decision": "reject", "reason": "wrong"}, settings=fast, sent_by="bob")
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "failed"
    retried = engine(settings, "retry", str(job))
    assert retried.returncode == 2, retried.stderr
    assert "a rejection is the data's decision" in retried.stderr
    assert "submit a new job" in retried.stderr
