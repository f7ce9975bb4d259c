"""The month-end close as one job, through workers: and with workers killed (-9) in the middle.

The close runs the posting and then the costing of its period as child jobs, which
inherit its hold of the period's concurrency key; every other job of the period
waits for the whole close, including while its posting awaits an approval.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from erp_checks import assert_costs_equal_reference
from harness import (
    fast_settings,
    run_of,
    start_worker_process,
    thread_worker,
    wait_job_ended,
    wait_until,
)

from engine import Refused, Registry, audit_trail, load_queries, signal, submit
from engine.config import Settings
from engine.jobs import admin
from engine.reports import render_job_report
from flows.erp import checks, periods
from flows.tools.seed import seed

PERIOD = "2026-11"
# a killed worker's lease and message come back within seconds, not the FAST minute; a
# step killed before its commit is charged an attempt, and a kill at half the commits
# may hit one step several times: the cap is not what these tests are about
QUICK_RECOVERY = {"lease_s": 2.0, "heartbeat_s": 0.5, "visibility_s": 3.0, "max_attempts": 12}
FLOWS = ["flows.close", "flows.costing", "flows.posting"]
# the chaos harness's oracle: holds of one key by two jobs, neither an ancestor of the other
KEY_OVERLAP = load_queries(str(Path(__file__).parents[1] / "chaos" / "chaos.sql"))[
    "oracle_key_overlap"
]


@pytest.fixture
def registry() -> Registry:
    return Registry.load(FLOWS)


@pytest.fixture
def fast(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("ERP_POSTING_CHUNK_SIZE", "100")
    return fast_settings(
        settings, flow_modules=FLOWS, concurrency=2, reports_dir=tmp_path / "reports"
    )


@pytest.fixture
def made(conn: psycopg.Connection[Any]) -> Any:
    return seed(conn, stores=5, brands=2, employees=10, items=8, period=PERIOD, seed=4)


def summary(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any]:
    return dict(run_of(conn, job_id, "month_end")["output"])


def children(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT id, flow, status, child_key, created_at, finished_at, error FROM engine_jobs "
        "WHERE parent_job_id = %s ORDER BY child_key",
        (job_id,),
    ).fetchall()
    return [dict(r) for r in rows]


def span(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> tuple[Any, Any]:
    """From the job's first claim to its end (the events' database times)."""
    row = conn.execute(
        "SELECT min(at) FILTER (WHERE kind = 'claimed') AS first, "
        "max(at) FILTER (WHERE kind IN ('job_done', 'job_failed')) AS last "
        "FROM engine_history WHERE job_id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None and row["first"] is not None and row["last"] is not None
    return row["first"], row["last"]


def why_not_done(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str:
    """The errors of a job tree's ended step runs: what a failed assertion should show."""
    rows = conn.execute(
        "WITH RECURSIVE tree AS (SELECT id FROM engine_jobs WHERE id = %s "
        "UNION ALL SELECT j.id FROM engine_jobs j JOIN tree t ON j.parent_job_id = t.id) "
        "SELECT j.flow, s.step, s.status, s.attempts, s.error FROM engine_step_runs s "
        "JOIN engine_jobs j ON j.id = s.job_id WHERE s.job_id IN (SELECT id FROM tree) "
        "AND s.status IN ('dead', 'cancelled')",
        (job_id,),
    ).fetchall()
    return "; ".join(
        f"{r['flow']}.{r['step']} {r['status']} after {r['attempts']}: {r['error']}" for r in rows
    )


def assert_closed_exactly_once(conn: psycopg.Connection[Any], made: Any, s: dict[str, Any]) -> None:
    """Every document posted or rejected once, every store costed once, the period closed."""
    in_period = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'posted') AS posted, "
        "count(*) FILTER (WHERE status = 'rejected') AS rejected, "
        "count(*) FILTER (WHERE status = 'unposted') AS unposted "
        "FROM erp_documents WHERE period = %s",
        (PERIOD,),
    ).fetchone()
    assert in_period == {
        "posted": s["documents_posted"],
        "rejected": s["documents_rejected"],
        "unposted": 0,
    }
    assert s["documents_rejected"] == made.bad_documents.get(
        "unbalanced", 0
    ) + made.bad_documents.get("unknown_account", 0)
    journals = conn.execute(
        "SELECT count(*) FILTER (WHERE source = 'document') AS documents, "
        "count(*) FILTER (WHERE source = 'costing') AS costing FROM erp_journals"
    ).fetchone()
    assert journals is not None and journals["documents"] == s["documents_posted"]
    assert journals["costing"] == sum(
        1 for c in s["per_store"] if any(k.startswith("costing:") for k in c["journal_ids"])
    )
    assert s["stores"] == 5 and len({c["store"]["code"] for c in s["per_store"]}) == 5
    report = checks.check_period(conn, PERIOD)
    assert report.ok, report.problems
    assert report.status == "closed"
    # the job checked before closing; afterwards the closed period's own check holds too
    checked = {c["name"] for c in s["checks"]["checks"] if not c["skipped"]}
    assert checked | {"closed books unchanged"} == {c.name for c in report.checks if not c.skipped}
    tb = s["trial_balance"]
    assert tb["debit"] == tb["credit"] != "0.00"


def test_close__the_month_end_as_one_job_posts_costs_checks_and_closes(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], made: Any
) -> None:
    job = submit("close", {"period": PERIOD}, settings=fast, registry=registry, submitted_by="ann")
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id, timeout=120) == "done"
    s = summary(conn, job.job_id)
    assert_closed_exactly_once(conn, made, s)
    assert s["closed_by"] == f"close job {job.job_id} for ann"
    kids = children(conn, job.job_id)
    assert [(k["child_key"], k["flow"], k["status"]) for k in kids] == [
        ("costing", "costing", "done"),
        ("posting", "posting", "done"),
    ]
    by_key = {k["child_key"]: k["id"] for k in kids}
    assert (s["posting_job"], s["costing_job"]) == (
        str(by_key["posting"]),
        str(by_key["costing"]),
    )
    # costing followed posting: it was submitted only once the posting had ended
    assert kids[0]["created_at"] > kids[1]["finished_at"]
    history = periods.history(conn, PERIOD)
    assert [(e.action, e.actor) for e in history] == [
        ("costed", f"costing job {by_key['costing']}"),
        ("closed", f"close job {job.job_id} for ann"),
    ]
    # the engine's audit trail: the close, by its submitter, committed with the step
    (entry,) = audit_trail(fast)
    assert (entry.action, entry.target_kind, entry.target_id, entry.actor, entry.source) == (
        "close",
        "period",
        PERIOD,
        "ann",
        "api",
    )
    assert entry.job_id == job.job_id
    page = Path(render_job_report(fast, job.job_id, registry=registry)).read_text(encoding="utf-8")
    for text in (
        "closed by close job",
        f'then costed by child job <span class="mono">{by_key["costing"]}</span>',
        "Trial balance",
        "Books check",
        "COGS per brand",
        "Period history",
    ):
        assert text in page, text
    with pytest.raises(Refused, match="period 2026-11 is closed"):
        submit("close", {"period": PERIOD}, settings=fast, registry=registry)


def test_close__fails_naming_the_broken_identity_and_leaves_the_period_open(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], made: Any
) -> None:
    # a carried-forward balance tampered with: next period's openings != closings
    with thread_worker(fast, registry):
        for flow in ("posting", "costing"):
            job = submit(flow, {"period": PERIOD}, settings=fast, registry=registry)
            assert wait_job_ended(conn, job.job_id, timeout=120) == "done"
        conn.execute(
            "UPDATE erp_opening_balances SET value = value + 1 WHERE (store_id, item_id) = "
            "(SELECT store_id, item_id FROM erp_opening_balances WHERE period = '2026-12' "
            "ORDER BY 1, 2 LIMIT 1) AND period = '2026-12'"
        )
        close = submit("close", {"period": PERIOD}, settings=fast, registry=registry)
        assert wait_job_ended(conn, close.job_id, timeout=120) == "failed"
    error = conn.execute(
        "SELECT error FROM engine_step_runs WHERE job_id = %s AND step = 'check'", (close.job_id,)
    ).fetchone()
    assert error is not None
    assert "openings of 2026-12 = closings: 1 store(s) differ: ST001 (1 items)" in str(error)
    status = conn.execute("SELECT status FROM erp_periods WHERE period = %s", (PERIOD,)).fetchone()
    assert status == {"status": "costed"}
    assert audit_trail(fast) == [], "a close that failed records nothing"


def test_close__workers_killed_minus_9_in_the_middle_resume_and_close_exactly_once(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], made: Any
) -> None:
    """Each worker process SIGKILLs itself at a step's commit with probability 1/2 (before or
    after it), and a new one takes over, until the job ends."""
    job = submit(
        "close",
        {"period": PERIOD},
        settings=fast.model_copy(update=QUICK_RECOVERY),
        registry=registry,
    )
    kills, rounds = 0, 0

    def job_ended() -> bool:
        row = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job.job_id,)).fetchone()
        return row is not None and row["status"] in ("done", "failed", "cancelled")

    while not job_ended():
        rounds += 1
        # the close and its two children commit ~30 times; a worker dies at half of them
        assert rounds <= 120, f"no progress after {rounds} worker processes"
        fault = "before_commit" if rounds % 2 else "after_commit"
        worker = start_worker_process(
            fast,
            faults=f"{fault}=kill:0.5",
            concurrency=1,
            flow_modules=FLOWS,
            **QUICK_RECOVERY,
        )
        try:
            wait_until(
                lambda w=worker: not w.alive() or job_ended(),  # type: ignore[misc]
                timeout=90,
                what="the worker to die or the job to end",
            )
            died = not worker.alive()
        finally:
            worker.kill()  # a no-op for a worker that died
        if died and worker.returncode != -9:
            output = worker.stdout.read() if worker.stdout is not None else ""
            raise AssertionError(f"worker exited {worker.returncode}: {output[-2000:]}")
        kills += died
    print(f"close job survived {kills} kill(s) in {rounds} worker processes")
    assert kills >= 1, "no worker was killed: the test proved nothing"
    assert wait_job_ended(conn, job.job_id) == "done", why_not_done(conn, job.job_id)
    assert_closed_exactly_once(conn, made, summary(conn, job.job_id))


def test_close__workers_killed_minus_9_mid_costing_resume_and_cost_every_store_once(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], made: Any
) -> None:
    """A quiet worker runs the close until its costing child is submitted, then stops; from
    there on worker processes SIGKILL themselves at a commit with probability 0.6, a new
    one each time: kills land while the costing solves and costs its stores, and the books
    come out as if nothing had happened."""
    fast = fast.model_copy(update={"max_attempts": QUICK_RECOVERY["max_attempts"]})
    job = submit("close", {"period": PERIOD}, settings=fast, registry=registry)

    def costing_child() -> dict[str, Any] | None:
        return next((c for c in children(conn, job.job_id) if c["flow"] == "costing"), None)

    def job_ended() -> bool:
        row = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job.job_id,)).fetchone()
        return row is not None and row["status"] in ("done", "failed", "cancelled")

    with thread_worker(fast.model_copy(update={"concurrency": 1}), registry):
        wait_until(lambda: costing_child() is not None, timeout=120, what="the costing child")
    kills, mid_costing, rounds = 0, 0, 0
    while not job_ended():
        rounds += 1
        assert rounds <= 80, f"no progress after {rounds} worker processes"
        fault = "before_commit" if rounds % 2 else "after_commit"
        worker = start_worker_process(
            fast, faults=f"{fault}=kill:0.6", concurrency=1, flow_modules=FLOWS, **QUICK_RECOVERY
        )
        try:
            wait_until(
                lambda w=worker: not w.alive() or job_ended(),  # type: ignore[misc]
                timeout=90,
                what="the worker to die or the close to end",
            )
            died = not worker.alive()
        finally:
            worker.kill()
        if died and worker.returncode != -9:
            output = worker.stdout.read() if worker.stdout is not None else ""
            raise AssertionError(f"worker exited {worker.returncode}: {output[-2000:]}")
        child = costing_child()
        kills += died
        mid_costing += died and child is not None and child["status"] == "running"
    print(f"close survived {kills} kill(s), {mid_costing} while its costing ran")
    assert mid_costing >= 1, "no worker was killed while the costing ran: the test proved nothing"
    assert wait_job_ended(conn, job.job_id) == "done", why_not_done(conn, job.job_id)
    assert_closed_exactly_once(conn, made, summary(conn, job.job_id))
    assert assert_costs_equal_reference(conn, PERIOD) > 0
    solves = conn.execute("SELECT count(*) AS n FROM erp_average_solves").fetchone()
    assert solves == {"n": 1}


def test_close__the_period_stays_held_while_its_posting_child_awaits_approval(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], made: Any
) -> None:
    """A costing of the period submitted while the close's posting waits for an accountant
    runs only once the whole close ended: never beside its posting, its costing or its checks."""
    job = submit(
        "close", {"period": PERIOD, "approve_rejects_over": 0}, settings=fast, registry=registry
    )
    with thread_worker(fast, registry):
        wait_until(
            lambda: any(
                k["child_key"] == "posting"
                and conn.execute(
                    "SELECT 1 FROM engine_step_runs WHERE job_id = %s AND step = 'reconcile' "
                    "AND status = 'waiting'",
                    (k["id"],),
                ).fetchone()
                for k in children(conn, job.job_id)
            ),
            timeout=120,
            what="the posting child to wait for its approval",
        )
        outsider = submit("costing", {"period": PERIOD}, settings=fast, registry=registry)
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM engine_history WHERE job_id = %s AND kind = 'claim_refused'",
                (outsider.job_id,),
            ).fetchone(),
            what="the outsider to be refused the period's slot",
        )
        [posting_child] = children(conn, job.job_id)
        ok = {"reason": "known"}
        signal(posting_child["id"], "approve", ok, settings=fast, sent_by="accountant")
        assert wait_job_ended(conn, outsider.job_id, timeout=120) == "done"
        assert wait_job_ended(conn, job.job_id, timeout=120) == "done"
    s = summary(conn, job.job_id)
    assert s["approval"]["by"] == "accountant"
    assert s["documents_rejected"] > 0
    # the outsider ran no step while the posting waited, nor beside the close's children
    first, _ = span(conn, outsider.job_id)
    for kid in children(conn, job.job_id):
        assert span(conn, kid["id"])[1] < first, kid["child_key"]
    refused = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE job_id = %s AND kind = 'claim_refused'",
        (outsider.job_id,),
    ).fetchone()
    assert refused is not None and refused["n"] >= 1
    checked = conn.execute("SELECT status FROM erp_periods WHERE period = %s", (PERIOD,)).fetchone()
    assert checked == {"status": "closed"}
    # the oracle agrees: the close's hold (its books step waiting for its children) covers
    # its children's (inherited, not an overlap), and no other job's hold meets them
    keys = conn.execute(KEY_OVERLAP).fetchone()
    assert keys is not None and keys["overlapping"] == 0
    assert keys["held_waiting"] == 2  # the close's books step, the posting's reconcile


def test_close__a_failed_child_fails_the_close_naming_the_child_and_its_error(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], made: Any
) -> None:
    job = submit(
        "close", {"period": PERIOD, "approve_rejects_over": 0}, settings=fast, registry=registry
    )
    with thread_worker(fast, registry):
        wait_until(
            lambda: any(
                conn.execute(
                    "SELECT 1 FROM engine_step_runs WHERE job_id = %s AND step = 'reconcile' "
                    "AND status = 'waiting'",
                    (k["id"],),
                ).fetchone()
                for k in children(conn, job.job_id)
            ),
            timeout=120,
            what="the posting child to wait for its approval",
        )
        [kid] = children(conn, job.job_id)
        admin.cancel(fast, kid["id"], "the accountant refused the rejections", actor="acct")
        assert wait_job_ended(conn, job.job_id, timeout=120) == "failed"
    error = conn.execute(
        "SELECT error FROM engine_step_runs WHERE job_id = %s AND step = 'books'", (job.job_id,)
    ).fetchone()
    assert error is not None
    message = error["error"]["message"]
    assert message == (
        f"posting child job {kid['id']} (posting) cancelled: "
        "cancelled by acct: the accountant refused the rejections"
    )
    # no costing was started after a posting that did not end well; the period stays open
    assert [k["child_key"] for k in children(conn, job.job_id)] == ["posting"]
    status = conn.execute("SELECT status FROM erp_periods WHERE period = %s", (PERIOD,)).fetchone()
    assert status == {"status": "open"}


def test_close__a_close_failed_by_its_cancelled_posting_is_resumed_by_retry(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], made: Any
) -> None:
    """`engine retry CLOSE` retries its cancelled posting child (same job, inside the close's
    slot of the period) and the close finishes: posts, costs, checks and closes the period."""
    job = submit(
        "close", {"period": PERIOD, "approve_rejects_over": 0}, settings=fast, registry=registry
    )

    def posting_awaits_approval() -> bool:
        return any(
            conn.execute(
                "SELECT 1 FROM engine_step_runs WHERE job_id = %s AND step = 'reconcile' "
                "AND status = 'waiting'",
                (k["id"],),
            ).fetchone()
            for k in children(conn, job.job_id)
        )

    with thread_worker(fast, registry):
        wait_until(posting_awaits_approval, timeout=120, what="the posting to await approval")
        [kid] = children(conn, job.job_id)
        admin.cancel(fast, kid["id"], "the accountant refused the rejections")
        assert wait_job_ended(conn, job.job_id, timeout=120) == "failed"
        # the accountant changes their mind: the close is retried, not resubmitted
        reopened = admin.retry_job(fast, job.job_id)
        assert reopened.children == (kid["id"],)
        books = run_of(conn, job.job_id, "books")
        assert books["status"] == "waiting" and books["concurrency_kept"], (
            "the close's books step waits for its posting again, holding the period's slot"
        )
        wait_until(posting_awaits_approval, timeout=120, what="the posting to await it again")
        signal(kid["id"], "approve", {"reason": "known"}, settings=fast, sent_by="accountant")
        assert wait_job_ended(conn, job.job_id, timeout=120) == "done"
    kids = children(conn, job.job_id)
    assert [(k["child_key"], k["status"]) for k in kids] == [
        ("costing", "done"),
        ("posting", "done"),
    ]
    assert [k["id"] for k in kids if k["child_key"] == "posting"] == [kid["id"]]
    assert summary(conn, job.job_id)["approval"]["by"] == "accountant"
    status = conn.execute("SELECT status FROM erp_periods WHERE period = %s", (PERIOD,)).fetchone()
    assert status == {"status": "closed"}
    # the posting's events show both attempts, the operator's cancel and retry between them
    kinds = [
        r["kind"]
        for r in conn.execute(
            "SELECT kind FROM engine_history WHERE job_id = %s "
            "AND kind IN ('cancelled', 'replayed', 'job_done') ORDER BY at, id",
            (kid["id"],),
        ).fetchall()
    ]
    assert kinds == ["cancelled", "replayed", "job_done"]
    keys = conn.execute(KEY_OVERLAP).fetchone()
    assert keys is not None and keys["overlapping"] == 0
    assert_report_renders = render_job_report(fast, kid["id"], registry=registry)
    assert Path(assert_report_renders).exists()
