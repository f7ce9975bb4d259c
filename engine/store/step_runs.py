"""Step runs: inserted (with their outbox rows), checkpointed, retried, dead, cancelled.

Each guarded statement returns a typed outcome; zero rows is never a silent
``None`` for the caller to forget (``False`` or ``None`` from a fenced write
means "lease lost"). A step run is checkpointed, retried, dead-lettered or
parked only while its lease token is current (invariants 5 and 16). It is
claimed in :mod:`engine.store.claims` and its lease renewed or released in
:mod:`engine.store.leases`, whose statements share ``sql/step_runs.sql``; it
waits and is woken in :mod:`engine.store.step_waits` (``sql/step_waits.sql``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import ClientCursor
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

from engine.store import prepared
from engine.store.batch import Executes
from engine.store.errors import wrap_errors
from engine.store.queries import load
from engine.store.rows import (
    UNTIMED,
    CancelledRun,
    Checkpoint,
    Checkpointed,
    Claimed,
    ExpiredExhausted,
    NewStepRun,
    Ran,
    SliceKey,
    StepCounts,
    StepState,
    SweepSlice,
    column,
)

__all__ = [
    "checkpoint_put_if_leased",
    "checkpoint_put_many_if_leased",
    "step_cancel_by_job",
    "step_cancel_if_job_ended_many",
    "step_count_by_status",
    "step_counts_by_job",
    "step_dead_if_expired_exhausted_many",
    "step_dead_if_leased",
    "step_outputs_select",
    "step_release_charged_if_leased",
    "step_reopen_by_job",
    "step_reopen_by_jobs",
    "step_retry_if_leased",
    "step_run_insert_many_announced",
    "step_run_insert_many_with_outbox",
    "step_savepoint_rollback",
    "step_select_queue_lag",
    "step_select_status",
    "step_sweep_slice",
]

_q = load("step_runs")


def _fenced(claimed: Claimed, **params: Any) -> dict[str, Any]:
    """The parameters of a write guarded by ``claimed``'s lease (its row, job and token)."""
    return {"id": claimed.id, "job_id": claimed.job_id, "token": claimed.token, **params}


def _runs_params(
    job_id: uuid.UUID, runs: Sequence[NewStepRun], *, published: bool
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "published": published,
        "ids": [r.id for r in runs],
        "steps": [r.step for r in runs],
        "fanout_keys": [r.fanout_key for r in runs],
        "fingerprints": [r.fingerprint for r in runs],
        "max_attempts": [r.max_attempts for r in runs],
        "items": [None if r.item is None else Jsonb(r.item) for r in runs],
        "concurrency_keys": [r.concurrency_key for r in runs],
        "concurrency_limits": [r.concurrency_limit for r in runs],
        "concurrency_per_job": [r.concurrency_per_job for r in runs],
    }


@wrap_errors
def step_run_insert_many_with_outbox(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, runs: Sequence[NewStepRun]
) -> list[int]:
    """Insert the step runs not inserted yet, each with an outbox row; the outbox ids."""
    if not runs:
        return []
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_run_insert_many"], _runs_params(job_id, runs, published=False))
        return [row["id"] for row in cur.fetchall()]


@wrap_errors
def step_run_insert_many_announced(
    conn: Executes, job_id: uuid.UUID, runs: Sequence[NewStepRun]
) -> None:
    """Insert the step runs not inserted yet, their outbox rows already published.

    For a transport that sends their messages in this same transaction; no
    result is read, so it can be batched.
    """
    if runs:
        conn.execute(_q["step_run_insert_many"], _runs_params(job_id, runs, published=True))


@wrap_errors
def step_savepoint_rollback(conn: psycopg.Connection[Any]) -> None:
    """Undo what followed the step's savepoint (set with its checkpoint), in the group."""
    conn.execute(_q["step_savepoint_rollback"])


@wrap_errors
def step_select_status(conn: psycopg.Connection[Any], step_run_id: uuid.UUID) -> StepState | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_select_status"], {"id": step_run_id})
        row = cur.fetchone()
    return None if row is None else StepState(str(row["status"]), str(row["job_status"]))


@wrap_errors
def checkpoint_put_if_leased(
    conn: psycopg.Connection[Any],
    *,
    step_run_id: uuid.UUID,
    job_id: uuid.UUID,
    token: uuid.UUID,
    output: Any,
    worker: str,
    with_output: bool = False,
    begin: Callable[[], None] | None = None,
    savepoint: bool = False,
    ran: Ran | None = None,
) -> Checkpointed | None:
    """Lock the job, store the output and mark done; ``None``: the lease was lost (roll back).

    Two statements in one message and one round trip: the guarded checkpoint,
    then the step counts of the job, in a snapshot taken after the lock was
    granted (each statement of a simple query has its own snapshot). ``begin``,
    when given, opens the caller's transaction first. With ``savepoint`` the
    step's savepoint is set in the same message, first (a step in a group
    commit, :mod:`engine.runner.group`; :func:`step_savepoint_rollback`).
    ``ran``: when the step ran, recorded by its ``succeeded`` event.

    Not a pipeline: psycopg flushes each pipelined statement and ends the
    pipeline with a Flush after its Sync, and PostgreSQL arms
    ``idle_in_transaction_session_timeout`` only on a Sync or a whole query.
    A worker frozen (SIGSTOP, a stalled VM) after a pipelined checkpoint kept
    its session "active" or idle with no timer, holding the job's row lock
    until the process died; one simple-query message either arrives whole or
    not at all, and ends with the server idle in transaction, timer armed.
    """
    if begin is not None:
        begin()
    params = {
        "id": step_run_id,
        "job_id": job_id,
        "token": token,
        "output": Jsonb(output),
        "worker": worker,
        "with_output": with_output,
        **(UNTIMED if ran is None else ran.params()),
    }
    with ClientCursor(conn, row_factory=tuple_row) as cur:
        message = [_q["step_savepoint"].rstrip().rstrip(";")] if savepoint else []
        message.append(prepared.execute_text(conn, cur, _q["checkpoint_put_if_leased"], params))
        message.append(prepared.execute_text(conn, cur, _q["step_counts_by_job"], params))
        prepared.send(cur, message)
        # (job_status, checkpointed, output), then (step, total, done) rows
        if savepoint:
            cur.nextset()
        row = cur.fetchone()
        cur.nextset()
        counts = {step: StepCounts(total, done) for step, total, done in cur.fetchall()}
    return Checkpointed(str(row[0]), counts, row[2]) if row is not None and row[1] else None


@wrap_errors
def checkpoint_put_many_if_leased(
    conn: psycopg.Connection[Any], checkpoints: Sequence[Checkpoint], worker: str
) -> list[Checkpointed | None]:
    """:func:`checkpoint_put_if_leased` for step runs of different jobs, in one round trip.

    One message of two statements, in the caller's open transaction: every
    checkpoint (the jobs locked in id order: the one lock order), then the
    jobs' step counts. Each is guarded by its own token; a refused one
    (``None``) wrote nothing, and its neighbours are as they would be without it.
    """
    if not checkpoints:
        return []
    timed = [UNTIMED if c.ran is None else c.ran.params() for c in checkpoints]
    params = {
        "ids": [c.step_run_id for c in checkpoints],
        "job_ids": [c.job_id for c in checkpoints],
        "tokens": [c.token for c in checkpoints],
        "outputs": [Jsonb(c.output) for c in checkpoints],
        "timed": [t["timed"] for t in timed],
        "started_at": [t["started_at"] for t in timed],
        "ran_s": [t["ran_s"] for t in timed],
        "with_output": [c.with_output for c in checkpoints],
        "worker": worker,
    }
    with ClientCursor(conn, row_factory=tuple_row) as cur:
        prepared.send(
            cur,
            [
                prepared.execute_text(conn, cur, _q["checkpoint_put_many_if_leased"], params),
                prepared.execute_text(conn, cur, _q["step_counts_by_jobs"], params),
            ],
        )
        # (job_status, checkpointed, output) per checkpoint in order; then (job, step, total, done)
        rows = cur.fetchall()
        cur.nextset()
        counts: dict[uuid.UUID, dict[str, StepCounts]] = {}
        for job_id, step, total, done in cur.fetchall():
            counts.setdefault(job_id, {})[step] = StepCounts(total, done)
    return [
        Checkpointed(str(status), counts.get(c.job_id, {}), output) if checkpointed else None
        for c, (status, checkpointed, output) in zip(checkpoints, rows, strict=True)
    ]


@wrap_errors
def step_retry_if_leased(
    conn: psycopg.Connection[Any],
    claimed: Claimed,
    delay_s: float,
    error: dict[str, Any],
) -> datetime | None:
    """Back to pending after ``delay_s``; the time it becomes due, or ``None`` (lease lost)."""
    return _pending_after(conn, "step_retry_if_leased", claimed, delay_s, error)


@wrap_errors
def step_release_charged_if_leased(
    conn: psycopg.Connection[Any],
    claimed: Claimed,
    delay_s: float,
    error: dict[str, Any],
) -> datetime | None:
    """Back to pending after ``delay_s``, its attempt charged, no job row locked (its free
    releases are spent); when it becomes due, or ``None`` (lease lost, or at its cap)."""
    return _pending_after(conn, "step_release_charged_if_leased", claimed, delay_s, error)


def _pending_after(
    conn: psycopg.Connection[Any], name: str, claimed: Claimed, delay_s: float, error: Any
) -> datetime | None:
    """A fenced write ``name`` that makes the step run pending ``delay_s`` from now with
    ``error``: when it becomes due, or ``None`` (zero rows: lease lost, or at its cap)."""
    params = _fenced(claimed, delay_s=delay_s, error=Jsonb(error))
    row = conn.execute(_q[name], params).fetchone()
    return None if row is None else column(row, "available_at")


@wrap_errors
def step_dead_if_leased(
    conn: psycopg.Connection[Any], claimed: Claimed, error: dict[str, Any]
) -> bool:
    """Dead-letter the step run while our lease is current; ``False``: the lease was lost."""
    cur = conn.execute(_q["step_dead_if_leased"], _fenced(claimed, error=Jsonb(error)))
    return cur.rowcount == 1


@wrap_errors
def step_dead_if_expired_exhausted_many(conn: psycopg.Connection[Any]) -> list[ExpiredExhausted]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_dead_if_expired_exhausted_many"])
        return [
            ExpiredExhausted(r["id"], r["job_id"], r["attempts"], r["step"], r["flow"]) for r in cur
        ]


@wrap_errors
def step_sweep_slice(
    conn: psycopg.Connection[Any],
    *,
    pending_after: SliceKey,
    running_after: SliceKey,
    limit: int,
) -> SweepSlice:
    """The slice of up to ``limit`` pending step runs after ``pending_after`` (when due, id)
    and as many running ones after ``running_after`` (lease expiry, id)."""
    params = {
        "pending_at": pending_after[0],
        "pending_id": pending_after[1],
        "running_at": running_after[0],
        "running_id": running_after[1],
        "limit": limit,
    }
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_sweep_slice"], params)
        ends = {r["status"]: r for r in cur}  # a part with no step run has no row
    pending, running = ends.get("pending"), ends.get("running")
    return SweepSlice(
        pending_after,
        (pending["at"], pending["id"]) if pending else pending_after,
        pending is not None and pending["n"] >= limit,
        running_after,
        (running["at"], running["id"]) if running else running_after,
        running is not None and running["n"] >= limit,
    )


@wrap_errors
def step_cancel_if_job_ended_many(
    conn: psycopg.Connection[Any], queued: SweepSlice, *, limit: int
) -> list[CancelledRun]:
    """Finish as cancelled the step runs left active under ended jobs (up to ``limit`` jobs):
    those of ``queued`` (a sweep's slice, pending and running) and every waiting one."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_cancel_if_job_ended_many"], {**queued.params(), "limit": limit})
        return [CancelledRun(r["id"], r["job_id"], r["attempts"]) for r in cur]


@wrap_errors
def step_counts_by_job(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, StepCounts]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_counts_by_job"], {"job_id": job_id})
        return {r["step"]: StepCounts(r["total"], r["done"]) for r in cur}


@wrap_errors
def step_outputs_select(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, steps: Sequence[str]
) -> dict[str, list[tuple[str, Any]]]:
    """Checkpoints of ``steps``: step -> [(fan-out key, output)], keys in item order."""
    found: dict[str, list[tuple[str, Any]]] = {s: [] for s in steps}
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_outputs_select"], {"job_id": job_id, "steps": list(steps)})
        for r in cur:
            found[r["step"]].append((r["fanout_key"], r["output"]))
    for outputs in found.values():
        outputs.sort(key=lambda kv: (len(kv[0]), kv[0]))  # "10" after "9": keys are indexes
    return found


@wrap_errors
def step_cancel_by_job(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> int:
    """Cancel the job's pending and running step runs (its row lock held): how many."""
    return conn.execute(_q["step_cancel_by_job"], {"job_id": job_id}).rowcount


@wrap_errors
def step_reopen_by_job(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[uuid.UUID]:
    """Put the job's dead and cancelled step runs back to pending (its row lock held), each
    in a new retry round with its own attempt budget again: their ids."""
    return [run for run, _ in step_reopen_by_jobs(conn, [job_id])]


@wrap_errors
def step_select_queue_lag(conn: psycopg.Connection[Any]) -> float:
    """Seconds the oldest step run claimable now has waited; 0.0 when none is."""
    row = conn.execute(_q["step_select_queue_lag"]).fetchone()
    return 0.0 if row is None else float(column(row, "lag_s"))


@wrap_errors
def step_count_by_status(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """How many step runs are in each status (statuses with none are absent)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_count_by_status"])
        return {str(r["status"]): int(r["n"]) for r in cur}


@wrap_errors
def step_reopen_by_jobs(
    conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID]
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """:func:`step_reopen_by_job` for many jobs (their rows locked): (step run, job) pairs."""
    rows = conn.execute(_q["step_reopen_by_jobs"], {"ids": list(ids)}).fetchall()
    return [(column(r, "id"), column(r, "job_id")) for r in rows]
