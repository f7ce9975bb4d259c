"""Child jobs on PostgreSQL: a step submits jobs and waits for them, holding no slot."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import childflows
import psycopg
import pytest
from harness import fast_settings, thread_worker, wait_job_ended, wait_until

from engine import StepContext, signal, store, submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.jobs import admin

MODULES = ["testflows", "childflows"]


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings, flow_modules=MODULES)


@pytest.fixture
def registry() -> Registry:
    return Registry.load(MODULES)


@pytest.fixture(autouse=True)
def _no_hooks() -> Iterator[None]:
    yield
    childflows.HOOKS.clear()


def children_of(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT id, status, child_key, parent_step_run_id FROM engine_jobs "
        "WHERE parent_job_id = %s ORDER BY child_key",
        (job_id,),
    ).fetchall()
    return [dict(r) for r in rows]


def spawn_run(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM engine_step_runs WHERE job_id = %s AND step = 'spawn'", (job_id,)
    ).fetchone()
    assert row is not None
    return dict(row)


def status_of(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str:
    row = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row["status"])


def waiting_for(conn: psycopg.Connection[Any], job_id: uuid.UUID, step: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM engine_step_runs WHERE job_id = %s AND step = %s AND status = 'waiting'",
        (job_id, step),
    ).fetchone()
    return row is not None


def brood(fast: Settings, registry: Registry, **params: Any) -> uuid.UUID:
    return submit("brood", params, settings=fast, registry=registry).job_id


def test_children__run_on_a_one_slot_worker_while_the_parent_waits_holding_nothing(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = brood(fast, registry, children=2)
    # one slot: were the waiting parent to hold it, no child could ever run
    with thread_worker(fast, registry, worker_id="one-slot"):
        assert wait_job_ended(conn, job) == "done"
    kids = children_of(conn, job)
    assert [k["child_key"] for k in kids] == ["0", "1"]
    assert {k["status"] for k in kids} == {"done"}
    spawn = spawn_run(conn, job)
    assert {k["parent_step_run_id"] for k in kids} == {spawn["id"]}
    assert spawn["attempts"] == 1, "waiting for children costs no attempt"
    outcomes = spawn["output"]["outcomes"]
    assert [(o["key"], o["job_id"], o["status"], o["output"]) for o in outcomes] == [
        ("0", str(kids[0]["id"]), "done", {"value": 0}),
        ("1", str(kids[1]["id"]), "done", {"value": 10}),
    ]
    tally = conn.execute(
        "SELECT output FROM engine_step_runs WHERE job_id = %s AND step = 'tally'", (job,)
    ).fetchone()
    assert tally is not None and tally["output"] == {"done": 2, "failed": 0}
    woken = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE job_id = %s AND kind = 'woken' "
        "AND detail->>'by' = 'child'",
        (job,),
    ).fetchone()
    assert woken is not None and woken["n"] >= 1


def test_children__a_rerun_of_the_step_gets_the_same_children_not_new_ones(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    # held children: the parent parks, then reruns once per child's end and
    # submits again each time; its first attempt also crashes after submitting
    job = brood(fast, registry, children=2, hold=True, retry_after_submit=True)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting_for(conn, job, "spawn"), what="the parent to wait")
        kids = children_of(conn, job)
        assert len(kids) == 2, "the crashed attempt's children rolled back with it"
        for k in kids:
            wait_until(lambda k=k: waiting_for(conn, k["id"], "work"), what="a child to hold")
            signal(k["id"], "release", settings=fast)
        assert wait_job_ended(conn, job) == "done"
    after = children_of(conn, job)
    assert [k["id"] for k in after] == [k["id"] for k in kids]
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs WHERE flow = 'kid'").fetchone() == {
        "n": 2
    }
    spawn = spawn_run(conn, job)
    assert spawn["attempts"] == 2, "the Retry cost one attempt, the waits none"


def test_children__a_failed_child_is_reported_to_the_parent_which_decides(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = brood(fast, registry, children=2, fail_child=1)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    outcomes = spawn_run(conn, job)["output"]["outcomes"]
    assert [o["status"] for o in outcomes] == ["done", "failed"]
    assert outcomes[1]["output"] is None
    assert "child 1 fails" in (outcomes[1]["error"] or "")


def test_children__cancelling_the_parent_cancels_its_active_children(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = brood(fast, registry, children=2, hold=True)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting_for(conn, job, "spawn"), what="the parent to wait")
        kids = children_of(conn, job)
        for k in kids:
            wait_until(lambda k=k: waiting_for(conn, k["id"], "work"), what="a child to hold")
        admin.cancel(fast, job, "not needed", actor="ann")
        assert status_of(conn, job) == "cancelled"
        for k in kids:
            assert status_of(conn, k["id"]) == "cancelled"
            run = conn.execute(
                "SELECT status FROM engine_step_runs WHERE job_id = %s", (k["id"],)
            ).fetchone()
            assert run is not None and run["status"] == "cancelled"
    error = conn.execute("SELECT error FROM engine_jobs WHERE id = %s", (kids[0]["id"],)).fetchone()
    assert error is not None and error["error"] == "parent cancelled: cancelled by ann: not needed"


def test_children__a_child_cancelled_alone_wakes_the_parent_with_its_outcome(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = brood(fast, registry, children=1, hold=True)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting_for(conn, job, "spawn"), what="the parent to wait")
        (kid,) = children_of(conn, job)
        admin.cancel(fast, kid["id"], "operator")
        assert wait_job_ended(conn, job) == "done"
    assert [o["status"] for o in spawn_run(conn, job)["output"]["outcomes"]] == ["cancelled"]


def test_children__a_child_ending_between_the_look_and_the_park_is_not_missed(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = brood(fast, registry, children=2, hold=True)
    two_slots = fast.model_copy(update={"concurrency": 2})
    with thread_worker(two_slots, registry):
        wait_until(lambda: waiting_for(conn, job, "spawn"), what="the parent to wait")
        first, second = children_of(conn, job)
        for k in (first, second):
            wait_until(lambda k=k: waiting_for(conn, k["id"], "work"), what="a child to hold")

        def end_second(ctx: StepContext) -> None:
            # the rerun found the second child active; it ends before the park
            childflows.HOOKS.pop("before_wait")
            signal(second["id"], "release", settings=fast)
            assert wait_job_ended(conn, second["id"]) == "done"

        childflows.HOOKS["before_wait"] = end_second
        signal(first["id"], "release", settings=fast)
        assert wait_job_ended(conn, job) == "done"
    details = conn.execute(
        "SELECT detail FROM engine_history WHERE job_id = %s AND kind = 'waiting' ORDER BY at, id",
        (job,),
    ).fetchall()
    assert [d["detail"]["resumed"] for d in details] == [False, True]
    assert [o["status"] for o in spawn_run(conn, job)["output"]["outcomes"]] == ["done", "done"]


def test_children__the_reports_link_parent_and_children(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    from engine.reports import render_job_report

    job = brood(fast, registry, children=2)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    kids = children_of(conn, job)
    parent_html = Path(render_job_report(fast, job, out_dir=tmp_path, registry=registry))
    parent_text = parent_html.read_text(encoding="utf-8")
    for k in kids:
        assert f'href="../runs/{k["id"]}.html"' in parent_text
    child_html = Path(render_job_report(fast, kids[0]["id"], out_dir=tmp_path, registry=registry))
    child_text = child_html.read_text(encoding="utf-8")
    assert f'href="../runs/{job}.html"' in child_text
    assert "Child job <code>0</code> of" in child_text
    # the link resolves beside the report
    assert (parent_html.parent / f"{kids[0]['id']}.html").exists()


def test_children__the_deadline_holds_across_wakes_and_then_times_the_wait_out(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = brood(fast, registry, children=2, hold=True, timeout_s=3 * 86400)

    def parks() -> int:
        row = conn.execute(
            "SELECT count(*) AS n FROM engine_history WHERE job_id = %s AND kind = 'waiting'",
            (job,),
        ).fetchone()
        return 0 if row is None else int(row["n"])

    with thread_worker(fast, registry):
        wait_until(lambda: waiting_for(conn, job, "spawn"), what="the parent to wait")
        deadline = spawn_run(conn, job)["wait_until"]
        assert deadline is not None
        first, second = children_of(conn, job)
        wait_until(lambda: waiting_for(conn, first["id"], "work"), what="a child to hold")
        signal(first["id"], "release", settings=fast)
        # woken by the first child's end, the step parks again for the second
        wait_until(lambda: parks() == 2 and waiting_for(conn, job, "spawn"), what="a re-park")
        assert spawn_run(conn, job)["wait_until"] == deadline, "a wake does not move it"
        conn.execute(
            "UPDATE engine_step_runs SET wait_until = now() - interval '1 s' WHERE id = %s",
            (spawn_run(conn, job)["id"],),
        )
        assert wait_job_ended(conn, job) == "done"
    spawn = spawn_run(conn, job)
    assert spawn["output"]["timed_out"] is True
    assert status_of(conn, second["id"]) in ("pending", "running"), "the step decides about it"


def test_status__shows_a_parents_children_and_a_childs_parent(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    import json

    from click.testing import CliRunner

    from engine.cli.main import main

    job = brood(fast, registry, children=2, hold=True)
    assert fast.database_url is not None
    env = {
        "ENGINE_DATABASE_URL": fast.database_url.get_secret_value(),
        "ENGINE_FLOW_MODULES": ",".join(MODULES),
        "COLUMNS": "160",
    }
    with thread_worker(fast, registry):
        wait_until(lambda: waiting_for(conn, job, "spawn"), what="the parent to wait")
        kids = children_of(conn, job)
        shown = CliRunner().invoke(main, ["status", str(job)], env=env)
        assert shown.exit_code == 0, shown.output
        print(shown.output)
        assert "children" in shown.output
        for k in kids:
            assert str(k["id"]) in shown.output
        as_json = CliRunner().invoke(main, ["status", str(job), "--json"], env=env)
        data = json.loads(as_json.output)
        assert [c["job_id"] for c in data["children"]] == [str(k["id"]) for k in kids]
        assert [c["key"] for c in data["children"]] == ["0", "1"]
        assert data["parent"] is None
        child = CliRunner().invoke(main, ["status", str(kids[0]["id"])], env=env)
        print(child.output)
        assert f"child 0 of brood job {job}" in child.output
        admin.cancel(fast, job)


def test_children__a_parent_failing_elsewhere_cancels_its_active_children(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = brood(fast, registry, children=2, hold=True, fail_sibling=True)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting_for(conn, job, "spawn"), what="the parent to wait")
        kids = children_of(conn, job)
        for k in kids:
            wait_until(lambda k=k: waiting_for(conn, k["id"], "work"), what="a child to hold")
        wait_until(lambda: waiting_for(conn, job, "sibling"), what="the sibling to wait")
        signal(job, "boom", settings=fast)
        assert wait_job_ended(conn, job) == "failed"
    for k in kids:
        assert status_of(conn, k["id"]) == "cancelled"
    assert spawn_run(conn, job)["status"] == "cancelled"


def test_children__the_childs_last_commit_announces_the_woken_parent_itself(
    settings: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    # no sweeper to re-announce what nobody announced: the child's last
    # checkpoint (its job's end in the checkpoint's batch) wakes the parent
    # and sends its message in the same commit, or the parent never runs
    quiet = fast_settings(
        settings, flow_modules=MODULES, sweep_interval_s=3600.0, republish_after_s=3600.0
    )
    job = brood(quiet, registry, children=1)
    with thread_worker(quiet, registry, worker_id="no-sweeper"):
        assert wait_job_ended(conn, job) == "done"
    woken = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE job_id = %s AND kind = 'woken'", (job,)
    ).fetchone()
    assert woken is not None and woken["n"] >= 1


# --- retry of a parent whose child ended badly (issue 27, item 4) ---


def strict(fast: Settings, registry: Registry, **params: Any) -> uuid.UUID:
    return submit("strict", params, settings=fast, registry=registry).job_id


def events_of(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[tuple[str, int | None]]:
    rows = conn.execute(
        "SELECT kind, attempt FROM engine_history WHERE job_id = %s "
        "AND kind IN ('claimed', 'succeeded', 'dead_lettered', 'replayed', 'cancelled', "
        "'waiting') ORDER BY at, id",
        (job_id,),
    ).fetchall()
    return [(r["kind"], r["attempt"]) for r in rows]


def cli_env(fast: Settings) -> dict[str, str]:
    assert fast.database_url is not None
    return {
        "ENGINE_DATABASE_URL": fast.database_url.get_secret_value(),
        "ENGINE_FLOW_MODULES": ",".join(MODULES),
        "COLUMNS": "200",
    }


def failed_strict(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, flag: Path
) -> tuple[uuid.UUID, list[dict[str, Any]]]:
    """A strict parent failed by its child 1, which failed while ``flag`` existed."""
    flag.write_text("broken")
    job = strict(fast, registry, children=2, flaky_child=1, fail_flag=str(flag))
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "failed"
    kids = children_of(conn, job)
    assert [k["status"] for k in kids] == ["done", "failed"]
    flag.unlink()  # the data is fixed
    return job, kids


def test_retry__a_parent_whose_child_failed_retries_the_child_and_finishes(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    from engine.reports.context import build_run_report
    from engine.store.read import sqlalchemy_engine

    job, kids = failed_strict(fast, conn, registry, tmp_path / "flag")
    reopened = admin.retry_job(fast, job)
    assert reopened.children == (kids[1]["id"],), "the done child is not retried"
    assert status_of(conn, kids[1]["id"]) == "running"
    # the parent's step waits for the child again; the child's step is pending
    spawn = spawn_run(conn, job)
    assert (spawn["status"], spawn["wait_children"]) == ("waiting", True)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    after = children_of(conn, job)
    assert [(k["id"], k["status"]) for k in after] == [(k["id"], "done") for k in kids]
    outcomes = spawn_run(conn, job)["output"]["outcomes"]
    assert [o["output"] for o in outcomes] == [{"value": 0}, {"value": 10}]
    # the done child ran once; the failed one twice, with the retry between
    assert events_of(conn, kids[0]["id"]) == [("claimed", 1), ("succeeded", 1)]
    assert events_of(conn, kids[1]["id"]) == [
        ("claimed", 1),
        ("dead_lettered", 1),
        ("replayed", None),
        ("claimed", 2),
        ("succeeded", 2),
    ]
    replayed = conn.execute(
        "SELECT detail FROM engine_history WHERE job_id = %s AND kind = 'replayed'", (job,)
    ).fetchone()
    assert replayed is not None and replayed["detail"]["children"] == [str(kids[1]["id"])]
    # the child's report shows both attempts on its timeline
    engine = sqlalchemy_engine(fast)
    try:
        report = build_run_report(engine, kids[1]["id"], registry)
    finally:
        engine.dispose()
    assert [(a.attempt, a.outcome) for a in report.attempts] == [
        (1, "dead_lettered"),
        (2, "succeeded"),
    ]


def test_retry__the_cli_retries_a_parent_with_its_failed_child(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from engine.cli.main import main

    job, kids = failed_strict(fast, conn, registry, tmp_path / "flag")
    env = cli_env(fast)
    result = CliRunner().invoke(main, ["retry", str(job)], env=env)
    assert result.exit_code == 0, result.output
    assert f"child job(s) retried with it: {kids[1]['id']}" in result.output
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    assert [k["status"] for k in children_of(conn, job)] == ["done", "done"]


def test_retry__a_parent_whose_child_was_cancelled_runs_the_child_again(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = strict(fast, registry, children=1, hold=True)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting_for(conn, job, "spawn"), what="the parent to wait")
        (kid,) = children_of(conn, job)
        wait_until(lambda: waiting_for(conn, kid["id"], "work"), what="the child to hold")
        admin.cancel(fast, kid["id"], "not needed", actor="ann")
        assert wait_job_ended(conn, job) == "failed"
        error = spawn_run(conn, job)["error"]["message"]
        assert error == f"child 0 job {kid['id']} cancelled: cancelled by ann: not needed"
        assert admin.retry_job(fast, job).children == (kid["id"],)
        # the child holds again (its wait ran again), under the same id
        wait_until(lambda: waiting_for(conn, kid["id"], "work"), what="the child to hold again")
        assert status_of(conn, job) == "running"
        signal(kid["id"], "release", settings=fast)
        assert wait_job_ended(conn, job) == "done"
    assert [(k["id"], k["status"]) for k in children_of(conn, job)] == [(kid["id"], "done")]
    kinds = [k for k, _ in events_of(conn, kid["id"])]
    assert kinds.count("claimed") >= 2 and "replayed" in kinds


def test_retry__a_child_alone_is_refused_while_its_parent_failed_naming_the_parent(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from engine.cli.main import main
    from engine.errors import BadInput

    job, kids = failed_strict(fast, conn, registry, tmp_path / "flag")
    with pytest.raises(BadInput, match=f"retry the parent with `engine retry {job}`"):
        admin.retry_job(fast, kids[1]["id"])
    env = cli_env(fast)
    result = CliRunner().invoke(main, ["retry", str(kids[1]["id"])], env=env)
    assert result.exit_code == 2
    assert str(job) in result.output
    assert status_of(conn, kids[1]["id"]) == "failed", "nothing changed"


def test_children__wait_again_after_a_caught_timeout_with_a_new_deadline_then_they_end(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = brood(fast, registry, children=1, hold=True, timeout_s=3600, rewait_s=3 * 86400)
    with thread_worker(fast, registry):
        wait_until(lambda: waiting_for(conn, job, "spawn"), what="the parent to wait")
        first = spawn_run(conn, job)
        (kid,) = children_of(conn, job)
        wait_until(lambda: waiting_for(conn, kid["id"], "work"), what="the child to hold")
        conn.execute(
            "UPDATE engine_step_runs SET wait_until = now() - interval '1 s' WHERE id = %s",
            (first["id"],),
        )

        def waits_again() -> bool:
            run = spawn_run(conn, job)
            return run["status"] == "waiting" and run["wait_until"] > first["wait_until"]

        # woken at its deadline, the step catches ChildrenTimeout and waits again
        wait_until(waits_again, what="the parent to wait again, with a new deadline")
        again = spawn_run(conn, job)
        assert again["wait_until"] - again["claimed_at"] > timedelta(days=2)
        assert len(again["wait_past"]) == 1
        signal(kid["id"], "release", settings=fast)
        assert wait_job_ended(conn, job) == "done"
    spawn = spawn_run(conn, job)
    assert spawn["output"]["timed_out"] is False
    assert [o["status"] for o in spawn["output"]["outcomes"]] == ["done"]
    assert status_of(conn, kid["id"]) == "done"


def _cancelled_chain(conn: psycopg.Connection[Any], depth: int) -> list[uuid.UUID]:
    """A cancelled job, its cancelled child, theirs, ... ``depth`` deep, each waiting in a
    cancelled step run; the rows stored deepest first (each parent link written after the
    one below it), so that a scan in storage order meets children before parents."""
    jobs = [uuid.uuid4() for _ in range(depth)]
    runs = [uuid.uuid4() for _ in range(depth)]
    for n, (job, run) in enumerate(zip(jobs, runs, strict=True)):
        conn.execute(
            "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, status,"
            " finished_at) VALUES (%s, 'chain', 1, '{}', %s, 'cancelled', now())",
            (job, f"{n:064x}"),
        )
        conn.execute(
            "INSERT INTO engine_step_runs (id, job_id, step, fingerprint, status, max_attempts)"
            " VALUES (%s, %s, 'spawn', %s, 'cancelled', 3)",
            (run, job, f"{n:064x}"),
        )
    for n in reversed(range(1, depth)):
        conn.execute(
            "UPDATE engine_jobs SET parent_job_id = %s, parent_step_run_id = %s, child_key = 'k'"
            " WHERE id = %s",
            (jobs[n - 1], runs[n - 1], jobs[n]),
        )
    return jobs


@pytest.mark.parametrize(
    "plan",
    ["as planned", "enable_nestloop = off, enable_mergejoin = off", "enable_hashjoin = off"],
)
def test_retry__reopens_a_tree_parents_before_children_whatever_the_plan(
    conn: psycopg.Connection[Any], plan: str
) -> None:
    # the order is the lock order and what a retry reports (parents before children);
    # it was the join's order: a hash join over the rows in storage order reported a
    # grandchild before its parent (seen once in CI)
    root, *below = _cancelled_chain(conn, 4)
    with conn.transaction():
        for setting in plan.split(", ") if "=" in plan else []:
            conn.execute(f"SET LOCAL {setting}")
        reopened = store.job_reopen_if_ended(conn, root)
    assert isinstance(reopened, store.Reopen)
    assert list(reopened.children) == below


def test_wake__two_children_ending_in_one_batch_wake_their_parent_once(
    conn: psycopg.Connection[Any],
) -> None:
    # a round's ended jobs wake their parents in one statement: as one after the other
    # would, the first child's end wakes the parent step run and the second finds it awake
    parent, spawn = uuid.uuid4(), uuid.uuid4()
    conn.execute(
        "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, status)"
        " VALUES (%s, 'chain', 1, '{}', repeat('a', 64), 'running')",
        (parent,),
    )
    conn.execute(
        "INSERT INTO engine_step_runs (id, job_id, step, fingerprint, status, max_attempts,"
        " wait_children) VALUES (%s, %s, 'spawn', repeat('a', 64), 'waiting', 3, true)",
        (spawn, parent),
    )
    kids = [uuid.uuid4() for _ in range(2)]
    for n, kid in enumerate(kids):
        conn.execute(
            "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, status,"
            " finished_at, parent_job_id, parent_step_run_id, child_key)"
            " VALUES (%s, 'chain', 1, '{}', %s, 'done', now(), %s, %s, %s)",
            (kid, f"{n + 1:064x}", parent, spawn, f"kid-{n}"),
        )
    with conn.transaction():
        batch = store.Batch(conn)
        replies = [store.step_wake_parent_batched(batch, kid) for kid in kids]
        assert len(batch) == 1, "one statement for both"
        batch.send()
    answers = [r.fetchall() for r in replies]
    assert sorted(answers, key=len) == [[], [{"id": spawn}]], "woken once, by either child"
    assert spawn_run(conn, parent)["status"] == "pending"
    woken = conn.execute(
        "SELECT count(*) AS n FROM engine_events WHERE step_run_id = %s AND kind = 'woken'",
        (spawn,),
    ).fetchone()
    assert woken == {"n": 1}
