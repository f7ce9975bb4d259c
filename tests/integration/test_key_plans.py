"""A job's statements read the rows they are about, not the backlog, whatever the statistics.

With no statistics (a new database; the test server and the bench run without
autovacuum), or statistics from when the queue was short, a claim of a batch
locked its jobs by reading every active job through the partial index of active
jobs and keeping the batch's (2,000 jobs behind a batch of 10: 13 ms a claim,
most of the bench's time in PostgreSQL). Each statement a worker runs on a job
by its key (claims, a job's end or cancel, and a round's set-based checkpoints,
step counts and parents' wakes) is planned here with a backlog behind it, with
no statistics and with a short queue's, and no scan of the jobs or the step runs
may read more than about the rows it is about.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from engine.store.queries import load

BACKLOG = 2000
BATCH = 10
STEP_RUNS = load("engine/store/sql/step_runs.sql")
STEP_WAITS = load("engine/store/sql/step_waits.sql")
JOBS = load("engine/store/sql/jobs.sql")


def backlog(conn: psycopg.Connection[Any], jobs: int = BACKLOG) -> list[dict[str, Any]]:
    """``jobs`` pending jobs of three pending step runs each; the first step run of BATCH."""
    conn.execute(
        "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint)"
        " SELECT gen_random_uuid(), 'noop', 1, '{}',"
        " encode(sha256(gen_random_uuid()::text::bytea), 'hex')"
        " FROM generate_series(1, %s) AS g",
        (jobs,),
    )
    conn.execute(
        "INSERT INTO engine_step_runs (id, job_id, step, fingerprint, max_attempts)"
        " SELECT gen_random_uuid(), j.id, s, repeat('a', 64), 3"
        " FROM engine_jobs AS j, unnest(ARRAY['a', 'b', 'c']) AS s"
        " WHERE NOT EXISTS (SELECT FROM engine_step_runs AS r WHERE r.job_id = j.id)"
    )
    return conn.execute(
        "SELECT id, job_id FROM engine_step_runs WHERE step = 'a' ORDER BY id LIMIT %s", (BATCH,)
    ).fetchall()


def _claim_many(conn: psycopg.Connection[Any], wanted: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "ids": [w["id"] for w in wanted],
        "job_ids": [w["job_id"] for w in wanted],
        "worker": "w1",
        "lease_s": 30.0,
        "runnable": ["noop:1"],
    }


def _claim(conn: psycopg.Connection[Any], wanted: list[dict[str, Any]]) -> dict[str, Any]:
    first = wanted[0]
    return {
        "id": first["id"],
        "job_id": first["job_id"],
        "worker": "w1",
        "lease_s": 30.0,
        "runnable": ["noop:1"],
    }


def _finish(conn: psycopg.Connection[Any], wanted: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "job_id": wanted[0]["job_id"],
        "status": "failed",
        "error": None,
        "worker": "w1",
        "event": "job_failed",
    }


def _wake_many(conn: psycopg.Connection[Any], wanted: list[dict[str, Any]]) -> dict[str, Any]:
    return {"child_job_id": [w["job_id"] for w in wanted]}


def _cancel(conn: psycopg.Connection[Any], wanted: list[dict[str, Any]]) -> dict[str, Any]:
    return {"job_id": wanted[0]["job_id"], "reason": "test"}


def _checkpoint_many(conn: psycopg.Connection[Any], wanted: list[dict[str, Any]]) -> dict[str, Any]:
    """A round's checkpoints: the batch's step runs running under a lease each."""
    leased = conn.execute(
        "UPDATE engine_step_runs SET status = 'running', attempts = 1, lease_owner = 'w1',"
        " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute'"
        " WHERE id = ANY(%s) RETURNING id, job_id, lease_token",
        ([w["id"] for w in wanted],),
    ).fetchall()
    return {
        "ids": [r["id"] for r in leased],
        "job_ids": [r["job_id"] for r in leased],
        "tokens": [r["lease_token"] for r in leased],
        "outputs": [Jsonb({}) for _ in leased],
        "timed": [False for _ in leased],
        "started_at": [None for _ in leased],
        "ran_s": [None for _ in leased],
        "with_output": [False for _ in leased],
        "worker": "w1",
    }


Params = Callable[[psycopg.Connection[Any], list[dict[str, Any]]], dict[str, Any]]
STATEMENTS: dict[str, tuple[str, Params, int]] = {
    # name: the statement, its parameters for the batch, and how many rows it is about
    "step_claim_many_if_available": (STEP_RUNS["step_claim_many_if_available"], _claim_many, BATCH),
    "step_claim_if_available": (STEP_RUNS["step_claim_if_available"], _claim, 1),
    "job_finish_if_active_logged": (JOBS["job_finish_if_active_logged"], _finish, 1),
    "job_cancel_if_active": (JOBS["job_cancel_if_active"], _cancel, 1),
    "step_wake_parent_many": (STEP_WAITS["step_wake_parent_many"], _wake_many, BATCH),
    "checkpoint_put_many_if_leased": (
        STEP_RUNS["checkpoint_put_many_if_leased"],
        _checkpoint_many,
        BATCH,
    ),
    "step_counts_by_jobs": (STEP_RUNS["step_counts_by_jobs"], _claim_many, 3 * BATCH),
}


def rows_read(plan: dict[str, Any]) -> dict[str, int]:
    """Per scan of the jobs or the step runs (table, or index): the rows it read."""
    read: dict[str, int] = {}
    stack = [plan]
    while stack:
        node = stack.pop()
        stack += node.get("Plans", [])
        name = node.get("Index Name") or node.get("Relation Name") or ""
        if "Scan" in node["Node Type"] and name.startswith(("engine_jobs", "engine_step_runs")):
            rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            read[f"{node['Node Type']} {name}"] = rows * node["Actual Loops"]
    return read


def outline(node: dict[str, Any], depth: int = 0) -> list[str]:
    """The plan, a node a line: type, relation or index, rows x loops, conditions."""
    conditions = [node[k] for k in ("Index Cond", "Filter", "Join Filter") if k in node]
    name = node.get("Index Name") or node.get("Relation Name") or ""
    lines = [
        f"{'  ' * depth}{node['Node Type']} {name} rows={node.get('Actual Rows')}"
        f" loops={node.get('Actual Loops')} {' '.join(conditions)}"
    ]
    for child in node.get("Plans", []):
        lines += outline(child, depth + 1)
    return lines


@pytest.mark.parametrize("statistics", ["none", "of a short queue"])
@pytest.mark.parametrize("statement", sorted(STATEMENTS))
def test_by_key__reads_its_own_rows_not_the_backlog(
    conn: psycopg.Connection[Any], statement: str, statistics: str
) -> None:
    if statistics != "none":
        # analyzed while a few jobs were queued (autovacuum's threshold is 50 rows and
        # 10%): the backlog that follows is planned as a short queue
        backlog(conn, 20)
        conn.execute("ANALYZE engine_jobs, engine_step_runs")
    text, params, about = STATEMENTS[statement]
    with conn.transaction(force_rollback=True):
        (row,) = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + text, params(conn, backlog(conn))
        ).fetchall()
    plan = row["QUERY PLAN"]
    plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    read = rows_read(plan)
    assert read, "it reads no job or step run"
    assert max(read.values()) <= 2 * about, (read, "\n".join(outline(plan)))
