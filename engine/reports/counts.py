"""Counts: the metrics' figures from the database, for ``engine status --json`` and scripts.

A worker's Prometheus counters (:mod:`engine.infra.metrics`) count what that worker
did since it started; these count what every worker did, from the tables:
step runs by status, open dead letters, the queue lag (the same query as the
``engine_queue_lag_seconds`` gauge) and, per flow and step, what attempts
came to, from the append-only event history.
"""

from __future__ import annotations

from typing import Any

import psycopg
from pydantic import BaseModel

from engine import store
from engine.config import Settings
from engine.store import db
from engine.store.status import StepStatus

__all__ = ["Counts", "StepOutcomes", "read_counts"]


class StepOutcomes(BaseModel):
    """What the attempts of one step of one flow came to, over the whole history."""

    flow: str
    step: str
    claimed: int  # attempts begun (reclaims included)
    reclaimed: int  # claimed from a lease that had expired
    succeeded: int
    failed: int  # the step raised: then retried, dead-lettered by its worker, or rejected
    retried: int
    dead_lettered: int  # by its worker or by the sweeper (last lease lapsed)
    rejected: int  # the step refused its input data (Reject): the job failed, no dead letter
    fenced: int  # refused at commit: the lease had been taken


class Counts(BaseModel):
    """The database's counts, as ``engine status --json`` prints them under ``counts``."""

    step_runs: dict[str, int]  # every status, 0 included
    dead_letters: dict[str, int]  # open (not replayed): step, message and total
    queue_lag_seconds: float
    steps: list[StepOutcomes]


def read_counts(settings: Settings) -> Counts:
    """Read every count in one transaction (one snapshot)."""
    with db.connect(settings) as conn, conn.transaction():
        return counts_on(conn)


def counts_on(conn: psycopg.Connection[Any]) -> Counts:
    """:func:`read_counts` on the caller's connection and transaction."""
    by_status = store.step_count_by_status(conn)
    dead = store.dead_letter_count_open(conn)
    return Counts(
        step_runs={s.value: by_status.get(s.value, 0) for s in StepStatus},
        dead_letters={
            "step": dead.get("step", 0),
            "message": dead.get("message", 0),
            "total": sum(dead.values()),
        },
        queue_lag_seconds=round(store.step_select_queue_lag(conn), 3),
        steps=[StepOutcomes.model_validate(row) for row in store.event_count_by_step(conn)],
    )
