"""Claims: a message in, one conditional statement decides who runs the step run.

A message only says "step run X of job J may be ready"; PostgreSQL decides.
The claim is one conditional UPDATE ... RETURNING (invariant 2): pending, or
running with an expired lease (by the database clock, invariant 3), becomes
running with a fresh lease token and attempts + 1. One row: this worker won.
Zero rows, a serialization failure, a deadlock or a lock wait past
``lock_timeout``: someone else owns it or it is done, a normal outcome, never
an error. A refusal says why (not runnable here, over its concurrency limit,
finished), costs no attempt (invariant 14) and is recorded as an event. The
statements themselves are :mod:`engine.store.claims`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import psycopg

from engine import store
from engine.errors import Contention
from engine.store.rows import Claimed, ClaimRefused
from engine.store.status import EventKind
from engine.transports.message import StepMessage

__all__ = ["claim", "claim_many"]


def claim(
    conn: psycopg.Connection[Any],
    message: StepMessage,
    worker: str,
    lease_s: float,
    runnable: Sequence[str],
) -> Claimed | ClaimRefused:
    """Claim the step run of ``message`` and commit (invariant 2).

    On an autocommit connection (the worker's) the claim, the job start and
    the claim event are one statement, so one round trip; otherwise they run
    in a transaction of their own. Only jobs of a ``flow:version`` in
    ``runnable`` are claimed (a refusal costs no attempt). Losing is normal:
    zero rows, a serialization failure (SQLSTATE 40001), a deadlock or a lock
    wait past ``lock_timeout`` are all "not claimed".
    """
    try:
        with nullcontext() if conn.autocommit else conn.transaction():
            result = store.step_claim_if_available(
                conn,
                step_run_id=message.step_run_id,
                job_id=message.job_id,
                worker=worker,
                lease_s=lease_s,
                runnable=runnable,
            )
            if isinstance(result, ClaimRefused) and result.reason != "unknown":
                store.event_insert(
                    conn,
                    EventKind.CLAIM_REFUSED,
                    job_id=message.job_id,
                    step_run_id=message.step_run_id,
                    worker=worker,
                    detail={"reason": result.reason}
                    | ({"key": result.key} if result.key is not None else {}),
                )
            return result
    except Contention:
        return ClaimRefused("race")


def claim_many(
    conn: psycopg.Connection[Any],
    messages: Sequence[StepMessage],
    worker: str,
    lease_s: float,
    runnable: Sequence[str],
) -> list[Claimed]:
    """Claim every claimable step run of ``messages`` in one statement (and commit).

    Those left out are claimed one by one with :func:`claim`, which says why
    a refused one was refused; a lost race here only sends them that way.
    """
    try:
        with nullcontext() if conn.autocommit else conn.transaction():
            return store.step_claim_many_if_available(
                conn,
                [(m.step_run_id, m.job_id) for m in messages],
                worker=worker,
                lease_s=lease_s,
                runnable=runnable,
            )
    except Contention:
        return []
