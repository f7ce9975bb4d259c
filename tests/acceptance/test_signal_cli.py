"""``engine signal`` as a user runs it; a posting batch waiting for approval, resumed by it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import engine_cli as engine
from harness import start_worker_process, wait_job_ended, wait_until

from engine.config import Settings
from engine.worker.processes import WorkerProcess
from flows import posting
from flows.tools.seed import seed

pytestmark = pytest.mark.acceptance

PERIOD = "2026-11"


def _stop(proc: WorkerProcess) -> str:
    proc.stop(grace_s=30)
    assert proc.stdout is not None
    return proc.stdout.read()


def _signals(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute("SELECT job_id, name FROM engine_signals").fetchall()]


def test_cli__signal_bad_input_exits_2_naming_the_value(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    seed(conn, stores=1, brands=1, employees=2, items=3, period=PERIOD, seed=1)
    submitted = engine(settings, "submit", "posting", "--period", PERIOD, "--json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["job_id"]
    example = engine(settings, "submit", "example", "--period", PERIOD, "--json")
    example_id = json.loads(example.stdout)["job_id"]
    cases = [
        (("not-a-uuid", "approve"), "invalid job id 'not-a-uuid'"),
        ((str(uuid.UUID(int=7)), "approve"), f"no job with id {uuid.UUID(int=7)}"),
        ((job_id, "approve", "--data", "{by: acct}"), "invalid --data '{by: acct}': not JSON"),
        ((job_id, "Approve!"), "invalid signal name 'Approve!'"),
        # a typo: posting declares "approve" only
        (
            (job_id, "aprove", "--data", '{"by": "a"}'),
            f"signal 'aprove' is not declared by flow posting (version {posting.flow.version}) of "
            f"job {job_id}: "
            "valid signals: 'approve'",
        ),
        ((example_id, "approve"), "it declares no signals"),
    ]
    for args, message in cases:
        result = engine(settings, "signal", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
    assert _signals(conn) == [], "a refused signal records nothing"

    # an approval: from someone other than its submitter (this CLI user), with a reason
    ok = ("--by", "acct", "--data", '{"by": "a", "reason": "r"}')
    sent = engine(settings, "signal", job_id, "approve", *ok, "--json")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) | {"at": None} == {
        "job_id": job_id,
        "name": "approve",
        "data": {"by": "a", "reason": "r"},
        "sent_by": json.loads(sent.stdout)["sent_by"],
        "at": None,
        "created": True,
        "woken": 0,
    }
    same = engine(settings, "signal", job_id, "approve", *ok)
    assert same.returncode == 0, same.stderr
    assert "already" in same.stdout and "nothing changed" in same.stdout
    other = engine(
        settings, "signal", job_id, "approve", "--by", "acct", "--data", '{"reason": "b"}'
    )
    assert other.returncode == 2
    assert f"signal 'approve' was sent to job {job_id} already" in other.stderr

    assert engine(settings, "cancel", job_id).returncode == 0
    ended = engine(settings, "signal", job_id, "later")
    assert ended.returncode == 2
    assert f"job {job_id} is cancelled; only a pending or running job can be signalled" in (
        ended.stderr
    )


def test_cli__posting_waits_for_approval_and_resumes_by_engine_signal(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    made = seed(conn, stores=3, brands=1, employees=6, items=10, period=PERIOD, seed=2)
    assert made.bad_documents.get("unbalanced", 0) + made.bad_documents.get("unknown_account", 0)
    workers = [
        start_worker_process(settings, flow_modules=["flows.posting"], concurrency=2)
        for _ in range(2)
    ]
    try:
        submitted = engine(
            settings, "submit", "posting", "--period", PERIOD, "--approve-rejects-over", "0",
            "--json",
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        job_id = json.loads(submitted.stdout)["job_id"]

        def reconcile() -> dict[str, Any]:
            view = json.loads(engine(settings, "status", job_id, "--json").stdout)
            return next((s for s in view["steps"] if s["step"] == "reconcile"), {})

        wait_until(
            lambda: reconcile().get("status") == "waiting", timeout=120, what="the approval wait"
        )
        waiting = reconcile()
        assert (waiting["wait_signal"], waiting["attempts"], waiting["lease_owner"]) == (
            "approve",
            0,
            None,
        )
        shown = engine(settings, "status", job_id)
        assert "signal approve" in shown.stdout, shown.stdout

        typo = engine(settings, "signal", job_id, "aprove", "--data", '{"by":"acct"}')
        assert typo.returncode == 2, typo.stderr
        assert "signal 'aprove' is not declared" in typo.stderr
        assert "valid signals: 'approve'" in typo.stderr
        assert _signals(conn) == [] and reconcile()["status"] == "waiting"

        approved = engine(
            settings, "signal", job_id, "approve", "--by", "controller@erp",
            "--data", '{"by": "acct", "reason": "known till errors"}',
        )  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        assert "1 waiting step run(s) resumed" in approved.stdout
        assert wait_job_ended(conn, uuid.UUID(job_id), timeout=120) == "done"
    finally:
        outputs = [_stop(w) for w in workers]
    status = json.loads(engine(settings, "status", job_id, "--json").stdout)
    assert status["job"]["status"] == "done", outputs
    assert [s["name"] for s in status["signals"]] == ["approve"]
    # the approver is who sent the signal (the CLI's user@host), not a name in its data
    sender = status["signals"][0]["sent_by"]
    assert sender == "controller@erp"
    report = engine(settings, "report", job_id)
    assert report.returncode == 0, report.stderr
    page = Path(report.stdout.strip()).read_text(encoding="utf-8")
    assert f"Approved by <strong>{sender}</strong>" in page
