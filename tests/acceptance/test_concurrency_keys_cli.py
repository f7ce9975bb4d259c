"""Concurrency keys through the CLI with worker processes: two periods in parallel,
one period's posting and costing never side by side.

The proof is the events table: per concurrency key, the span of every step
run (its claim to its checkpoint) of one job never overlaps a span of
another job of that key, while spans of the two periods' keys do.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import engine_cli as engine
from harness import wait_job_ended, wait_until, worker_env

from engine.config import Settings
from engine.worker.processes import WorkerProcess, start_worker, stop_all

pytestmark = pytest.mark.acceptance
NOV, DEC = "2026-11", "2026-12"
FLOWS = ["flows.costing", "flows.posting", "flows.close"]

# the spans of the step runs that hold a key, from the events: claimed -> succeeded
SPANS = """
WITH spans AS (
    SELECT s.concurrency_key AS key, j.flow, j.params ->> 'period' AS period, s.job_id,
           s.step, s.fanout_key,
           min(e.at) FILTER (WHERE e.kind IN ('claimed', 'reclaimed')) AS claimed,
           max(e.at) FILTER (WHERE e.kind = 'succeeded') AS checkpointed
    FROM engine_step_runs AS s
    JOIN engine_jobs AS j ON j.id = s.job_id
    JOIN engine_history AS e ON e.step_run_id = s.id
    WHERE s.concurrency_key IS NOT NULL
    GROUP BY 1, 2, 3, 4, 5, 6
)
"""

OVERLAPS = (
    SPANS
    + """
SELECT a.key, count(*) FILTER (WHERE a.job_id <> b.job_id
                                 AND a.claimed < b.checkpointed
                                 AND b.claimed < a.checkpointed) AS overlapping_pairs,
       count(*) FILTER (WHERE a.job_id <> b.job_id) AS pairs_of_other_jobs
FROM spans AS a JOIN spans AS b ON a.key = b.key AND (a.job_id, a.step, a.fanout_key)
                                                    < (b.job_id, b.step, b.fanout_key)
GROUP BY a.key ORDER BY a.key
"""
)

ACROSS_PERIODS = (
    SPANS
    + """
SELECT count(*) AS overlapping_pairs
FROM spans AS a JOIN spans AS b ON a.key = 'period:2026-11' AND b.key = 'period:2026-12'
WHERE a.claimed < b.checkpointed AND b.claimed < a.checkpointed
"""
)

PER_JOB = (
    SPANS
    + """
SELECT key, flow, count(*) AS step_runs, min(claimed) AS first_claimed,
       max(checkpointed) AS last_checkpointed
FROM spans GROUP BY key, flow, job_id ORDER BY min(claimed)
"""
)


def submit(settings: Settings, *args: str) -> uuid.UUID:
    result = engine(settings, "submit", *args, "--json")
    assert result.returncode == 0, result.stderr
    return uuid.UUID(json.loads(result.stdout)["job_id"])


def workers(settings: Settings, tmp_path: Path, tag: str) -> list[WorkerProcess]:
    env = worker_env(
        settings,
        flow_modules=FLOWS,
        concurrency=2,
        lock_timeout_s=120.0,
        statement_timeout_s=300.0,
    )
    env["ERP_POSTING_CHUNK_SIZE"] = "10"
    return [
        start_worker(env=env, output=tmp_path / f"{tag}-{i}.log", log_level="INFO")
        for i in range(2)
    ]


def test_concurrency_keys_cli__two_periods_run_in_parallel_one_periods_jobs_never_overlap(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seeded = engine(
        settings, "seed", "--stores", "3", "--brands", "1", "--employees", "3", "--items", "5",
        "--period", NOV, "--seed", "8",
    )  # fmt: skip
    assert seeded.returncode == 0, seeded.stderr
    # November posted, then ST001 costed for it, which opens December for ST001 (its
    # starting point carried)
    procs = workers(settings, tmp_path, "setup")
    try:
        posted = engine(settings, "submit", "posting", "--period", NOV, "--wait")
        assert posted.returncode == 0, posted.stderr
        first = engine(settings, "submit", "costing", "--period", NOV, "--store", "ST001", "--wait")
        assert first.returncode == 0, first.stderr
    finally:
        stop_all(procs, 20)

    # November's posting and costing, submitted while no worker runs
    nov_posting = submit(settings, "posting", "--period", NOV)
    nov_costing = submit(settings, "costing", "--period", NOV)
    # Whichever November job starts first stays in its first step, on the period's row,
    # while holding the key: the other waits for it; December has its own key.
    held = psycopg.connect(settings.database_url.get_secret_value())  # type: ignore[union-attr]
    procs = workers(settings, tmp_path, "run")
    try:
        held.execute("SELECT 1 FROM erp_periods WHERE period = %s FOR UPDATE", (NOV,))

        def november_waits() -> bool:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE kind = 'claim_refused'"
                "   AND detail ->> 'reason' = 'over_limit') AS refused,"
                " count(*) FILTER (WHERE kind = 'claimed') AS claimed "
                "FROM engine_history WHERE job_id IN (%s, %s)",
                (nov_posting, nov_costing),
            ).fetchone()
            return row is not None and row["refused"] >= 1 and row["claimed"] == 1

        wait_until(november_waits, timeout=60, what="one November job to hold the key")
        dec_posting = submit(settings, "posting", "--period", DEC)
        dec_costing = engine(settings, "submit", "costing", "--period", DEC, "--store", "ST001",
                             "--wait", "--json")  # fmt: skip
        assert dec_costing.returncode == 0, dec_costing.stderr
        assert wait_job_ended(conn, dec_posting, timeout=60) == "done"
        # December finished while November's holder still runs and the other waits
        running = conn.execute(
            "SELECT count(*) AS n FROM engine_step_runs WHERE job_id IN (%s, %s) "
            "AND status = 'running'",
            (nov_posting, nov_costing),
        ).fetchone()
        assert running is not None and running["n"] == 1
        held.rollback()  # November goes on
        for job in (nov_posting, nov_costing):
            assert wait_job_ended(conn, job, timeout=120) == "done"
    finally:
        held.close()
        stop_all(procs, 20)

    overlaps = conn.execute(OVERLAPS).fetchall()
    per_job = conn.execute(PER_JOB).fetchall()
    # the closing note's figures (pytest -s shows them)
    print("\nkey             flow     step runs  first claimed    last checkpointed")
    for r in per_job:
        print(
            f"{r['key']:<15} {r['flow']:<8} {r['step_runs']:>9}  "
            f"{r['first_claimed']:%H:%M:%S.%f}  {r['last_checkpointed']:%H:%M:%S.%f}"
        )
    for r in overlaps:
        print(
            f"{r['key']}: {r['overlapping_pairs']} overlapping of "
            f"{r['pairs_of_other_jobs']} pairs of step runs of different jobs"
        )
    by_key = {r["key"]: r for r in overlaps}
    assert set(by_key) == {"period:2026-11", "period:2026-12"}
    for key, row in by_key.items():
        assert row["pairs_of_other_jobs"] > 0, key
        assert row["overlapping_pairs"] == 0, (key, per_job)
    across = conn.execute(ACROSS_PERIODS).fetchone()
    assert across is not None and across["overlapping_pairs"] > 0, "the periods ran in parallel"
    print(f"period:2026-11 x period:2026-12: {across['overlapping_pairs']} overlapping pairs")
