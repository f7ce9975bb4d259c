"""Claims: a step run taken by one worker, with a fresh lease token and one attempt.

A claim is one conditional statement (invariant 2): of the workers that try,
one gets the row back, with a new token that fences every later write about
the step run (renewal and release: :mod:`engine.store.leases`; checkpoint,
retry, dead, park: :mod:`engine.store.step_runs`). The job row is locked
first (the one lock order: job, then its concurrency key, then its step
runs), and a key never has more holders than its limit (invariant 17). Zero
rows is a normal outcome: :class:`~engine.store.rows.ClaimRefused` says why,
and a refusal that is not the step's fault costs no attempt (invariant 14).

Three ways in, one claiming statement each:

- :func:`step_claim_if_available`: one delivery; the only claim that waits
  for its concurrency key's slot, and the one that reads why it was refused
  (a read that never writes);
- :func:`step_claim_many_if_available`: a batch of deliveries; a step run
  with a concurrency key is left for the one-by-one claim;
- :func:`step_run_insert_claimed`: an eager successor, inserted already
  leased in the checkpoint's transaction that made it ready.

The statements are blocks of ``sql/step_runs.sql``, next to the table's other
writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from engine.store.batch import Batch, Executes
from engine.store.errors import wrap_errors
from engine.store.queries import load
from engine.store.rows import Claimed, ClaimRefused, NewStepRun, QueuedClaim

__all__ = ["step_claim_if_available", "step_claim_many_if_available", "step_run_insert_claimed"]

_q = load("step_runs")


def _first(cur: psycopg.Cursor[dict[str, Any]]) -> dict[str, Any] | None:
    return cur.fetchone()


@wrap_errors
def step_claim_if_available(
    conn: psycopg.Connection[Any],
    *,
    step_run_id: uuid.UUID,
    job_id: uuid.UUID,
    worker: str,
    lease_s: float,
    runnable: Sequence[str],
) -> Claimed | ClaimRefused:
    """Claim in the current transaction (the caller commits); see ``ClaimRefused``.

    ``runnable`` lists the ``flow:version`` pairs this worker can run; a step
    run of any other is not claimed, so refusing it costs no attempt.
    """
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q["step_claim_if_available"],
            {
                "id": step_run_id,
                "job_id": job_id,
                "worker": worker,
                "lease_s": lease_s,
                "runnable": list(runnable),
            },
        )
        row = _first(cur)
        if row is not None:
            return Claimed.from_row(row)
        cur.execute(_q["step_select_claim_refusal"], {"id": step_run_id, "job_id": job_id})
        return _refusal(_first(cur), runnable)


@wrap_errors
def step_claim_many_if_available(
    conn: psycopg.Connection[Any],
    wanted: Sequence[tuple[uuid.UUID, uuid.UUID]],
    *,
    worker: str,
    lease_s: float,
    runnable: Sequence[str],
) -> list[Claimed]:
    """Claim every claimable step run of ``wanted`` ((step run, job) pairs) in one statement.

    Those not returned (taken, not due, finished, of a version this worker
    lacks, or with a concurrency key) are for the caller to claim one by one,
    which says why (:func:`step_claim_if_available`).
    """
    if not wanted:
        return []
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q["step_claim_many_if_available"],
            {
                "ids": [step_run_id for step_run_id, _ in wanted],
                "job_ids": [job_id for _, job_id in wanted],
                "worker": worker,
                "lease_s": lease_s,
                "runnable": list(runnable),
            },
        )
        return [Claimed.from_row(row) for row in cur.fetchall()]


def _refusal(row: dict[str, Any] | None, runnable: Sequence[str]) -> ClaimRefused:
    if row is None:
        return ClaimRefused("unknown")
    if row["job_status"] not in ("pending", "running") or row["status"] in (
        "done",
        "dead",
        "cancelled",
    ):
        return ClaimRefused("finished")
    if row["status"] == "waiting":
        return ClaimRefused("waiting")
    if row["lease_live"]:
        return ClaimRefused("held", retry_in_s=row["lease_left_s"])
    if f"{row['flow']}:{row['flow_version']}" not in runnable:
        return ClaimRefused("not_runnable")
    if row["attempts"] >= row["max_attempts"]:
        return ClaimRefused("exhausted")
    if row["due_in_s"] <= 0 and row["over_limit"]:
        return ClaimRefused("over_limit", key=row["concurrency_key"])
    return ClaimRefused("not_due", retry_in_s=row["due_in_s"])


@wrap_errors
def step_run_insert_claimed(
    conn: Executes,
    run: NewStepRun,
    *,
    job_id: uuid.UUID,
    flow: str,
    params: dict[str, Any],
    worker: str,
    lease_s: float,
    traceparent: str | None = None,
) -> QueuedClaim:
    """Insert ``run`` already leased to ``worker``, in the caller's transaction (batchable).

    For a step run the caller's checkpoint has just made ready: it is created
    and claimed together, and commits with that checkpoint or not at all.
    Over its concurrency limit it is created pending (no attempt) instead,
    to be announced by its key's holder; :meth:`QueuedClaim.result` is then
    ``None``.
    """
    values = {
        "id": run.id,
        "job_id": job_id,
        "step": run.step,
        "fanout_key": run.fanout_key,
        "fingerprint": run.fingerprint,
        "max_attempts": run.max_attempts,
        "item": None if run.item is None else Jsonb(run.item),
        "concurrency_key": run.concurrency_key,
        "concurrency_limit": run.concurrency_limit,
        "concurrency_per_job": run.concurrency_per_job,
        "worker": worker,
        "lease_s": lease_s,
    }
    if isinstance(conn, Batch) and run.concurrency_key is None:
        # with the round's other keyless successors, as one statement
        shared = {"worker": values.pop("worker"), "lease_s": values.pop("lease_s")}
        for keyed in ("concurrency_key", "concurrency_limit"):
            values.pop(keyed)
        reply = conn.add_row(_q["step_run_insert_claimed_many"], values, shared)
        return QueuedClaim(reply, flow, params, traceparent)
    if isinstance(conn, Batch):
        return QueuedClaim(
            conn.execute(_q["step_run_insert_claimed"], values), flow, params, traceparent
        )
    cur = conn.cursor(row_factory=dict_row)
    cur.execute(_q["step_run_insert_claimed"], values)
    return QueuedClaim(cur, flow, params, traceparent)
