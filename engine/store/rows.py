"""What the store's statements return: typed rows and outcomes, not cursors.

Every module of the store and every caller shares these types, so they live
apart from the statements: ``jobs`` and ``step_runs`` both need ``Claimed``
and ``NewStepRun`` without importing each other.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine.store.batch import Reply
from engine.store.errors import wrap_errors
from engine.store.status import JobStatus

__all__ = [
    "CancelledRun",
    "Checkpoint",
    "Checkpointed",
    "ClaimRefused",
    "Claimed",
    "ClaimedDelivery",
    "ExpiredExhausted",
    "FingerprintTaken",
    "JobRow",
    "NewStepRun",
    "PendingOutbox",
    "QueuedClaim",
    "Ran",
    "Reopen",
    "SliceKey",
    "StepCounts",
    "StepState",
    "SweepSlice",
]


@dataclass(frozen=True)
class JobRow:
    id: uuid.UUID
    flow: str
    status: JobStatus
    created_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> JobRow:
        return cls(row["id"], row["flow"], JobStatus(row["status"]), row["created_at"])


@dataclass(frozen=True)
class NewStepRun:
    """A step run to schedule: its key (step, fan-out key) is unique per job."""

    id: uuid.UUID
    step: str
    fanout_key: str
    fingerprint: str
    max_attempts: int
    item: Any = None
    # rendered from the flow's (or step's) Concurrency when the run is created
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    concurrency_per_job: bool = False


@dataclass(frozen=True)
class Claimed:
    """This worker won the claim: it holds the lease until ``lease_expires_at``."""

    id: uuid.UUID
    job_id: uuid.UUID
    flow: str
    params: dict[str, Any]
    step: str
    fanout_key: str
    fingerprint: str
    attempt: int
    max_attempts: int
    token: uuid.UUID
    lease_expires_at: datetime
    item: Any
    reclaimed_from: str | None  # the previous owner, when its lease had expired
    concurrency_key: str | None = None  # the slot this claim holds, if its step declares one
    attempt_base: int = 0  # attempts used before this retry round (engine retry)
    retries: int = 0  # retry rounds so far
    # the W3C trace context its job was submitted under (engine.tracing); None untraced
    traceparent: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Claimed:
        reclaimed = row["previous_owner"] if row["previous_status"] == "running" else None
        return cls(
            id=row["id"],
            job_id=row["job_id"],
            flow=row["flow"],
            params=row["params"],
            step=row["step"],
            fanout_key=row["fanout_key"],
            fingerprint=row["fingerprint"],
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            token=row["lease_token"],
            lease_expires_at=row["lease_expires_at"],
            item=row["item"],
            reclaimed_from=reclaimed,
            concurrency_key=row.get("concurrency_key"),
            attempt_base=row.get("attempt_base") or 0,
            retries=row.get("retries") or 0,
            traceparent=row.get("traceparent"),
        )


@dataclass(frozen=True)
class ClaimRefused:
    """Zero rows: a normal outcome. ``reason`` says what to do with the message.

    - ``unknown``: no such step run (of that job): drop the message;
    - ``finished``: done, dead or cancelled, or its job ended: delete the message;
    - ``held``: another worker holds a live lease: leave the message to come back;
    - ``not_runnable``: its flow, or that flow's version, is not loaded in this
      worker (a rolling deploy): leave it for a worker that has it, at no attempt;
    - ``not_due``: a retry whose backoff has not ended: leave it;
    - ``waiting``: it waits for a signal or a time; its wake announces it anew: delete the message;
    - ``exhausted``: the last attempt's holder died; the sweeper dead-letters it;
    - ``over_limit``: over its concurrency limit (``key`` has as many holders
      with live leases as its limit allows): not an error and no attempt; it
      is announced again when a holder of ``key`` finishes;
    - ``race``: a lock wait timed out, a deadlock or serialisation failure: try later.
    """

    reason: str
    retry_in_s: float = 0.0
    key: str | None = None  # the concurrency key, for ``over_limit``

    @property
    def explanation(self) -> str:
        """The reason in words, for logs and events."""
        if self.reason == "over_limit":
            return f"over its concurrency limit (key {self.key!r})"
        return self.reason


class QueuedClaim:
    """An eager successor's claim, sent in the checkpoint's transaction and read after its commit.

    With the PostgreSQL transport it travels in the commit's batch, so its
    row can only be read once that batch has been sent.
    """

    def __init__(
        self,
        cur: psycopg.Cursor[dict[str, Any]] | Reply,
        flow: str,
        params: dict[str, Any],
        traceparent: str | None = None,
    ):
        self._cur = cur
        self._job = {"flow": flow, "params": params, "traceparent": traceparent}
        # read by result(): created pending (its key's lock busy or no slot free)
        self.created_pending = False

    @wrap_errors
    def result(self) -> Claimed | None:
        """The claim, or ``None``: the step run existed already (not ours), or was
        created pending because its concurrency key had no slot free."""
        try:
            row = self._cur.fetchone()
        finally:
            self._cur.close()
        if row is None or row.get("status", "running") != "running":
            self.created_pending = row is not None
            return None
        return Claimed.from_row(
            {**row, **self._job, "previous_status": "pending", "previous_owner": None}
        )


@dataclass(frozen=True)
class StepCounts:
    total: int
    done: int


@dataclass(frozen=True)
class StepState:
    """Why a fenced write matched nothing: the step run's and its job's status now."""

    status: str
    job_status: str

    @property
    def cancelled(self) -> bool:
        """The step run was cancelled (with its job, or as a sibling of a failed one)."""
        return self.status == "cancelled"


@dataclass(frozen=True)
class Ran:
    """When an attempt's step ran on its worker, for an event of the attempt (its end, or a
    renewal while it is live).

    ``started_at`` is on the database's clock (invariant 3: never a worker's
    wall clock), as the worker's slot converts its monotonic clock onto it
    (:class:`engine.runner.lease.DbClock`); stored as the event's
    ``started_at`` and ``ran_s``.
    """

    started_at: datetime | None = None  # None: the step never started (given back first)
    ran_s: float | None = None  # None: never started, or not stopped yet

    def params(self) -> dict[str, Any]:
        """The statement's parameters: ``timed`` (recorded at all), and the two figures."""
        ran = None if self.ran_s is None else round(self.ran_s, 6)
        return {"timed": True, "started_at": self.started_at, "ran_s": ran}


UNTIMED: dict[str, Any] = {"timed": False, "started_at": None, "ran_s": None}
"""The parameters of an attempt's end that records no start (a caller that has none)."""


@dataclass(frozen=True)
class Checkpoint:
    """One step run's output to store under its lease token (a batch of checkpoints)."""

    step_run_id: uuid.UUID
    job_id: uuid.UUID
    token: uuid.UUID
    output: Any
    with_output: bool = False
    ran: Ran | None = None  # when its step ran, for its succeeded event


@dataclass(frozen=True)
class Checkpointed:
    """The checkpoint committed (with its transaction): what scheduling needs next.

    ``counts`` is read by a statement that starts after the job row lock was
    taken, so it sees every completion of this job committed before ours.
    ``output`` is the checkpoint as stored (only when asked for).
    """

    job_status: str
    counts: dict[str, StepCounts]
    output: Any


@dataclass(frozen=True)
class ExpiredExhausted:
    id: uuid.UUID
    job_id: uuid.UUID
    attempts: int
    step: str
    flow: str


SliceKey = tuple[datetime, uuid.UUID]


@dataclass(frozen=True)
class SweepSlice:
    """A sweep round's slice of the queue: the pending step runs in ``(pending_after,
    pending_upto]`` by (available_at, id) and the running ones in ``(running_after,
    running_upto]`` by (lease_expires_at, id); an empty part's upto is its after.
    ``pending_full`` and ``running_full``: the part reached the scan (the next slice goes on
    after it; otherwise it starts over)."""

    pending_after: SliceKey
    pending_upto: SliceKey
    pending_full: bool
    running_after: SliceKey
    running_upto: SliceKey
    running_full: bool

    def params(self) -> dict[str, Any]:
        """The bounds as engine_sweep_slice's parameters."""
        return {
            "pending_after_at": self.pending_after[0],
            "pending_after_id": self.pending_after[1],
            "pending_upto_at": self.pending_upto[0],
            "pending_upto_id": self.pending_upto[1],
            "running_after_at": self.running_after[0],
            "running_after_id": self.running_after[1],
            "running_upto_at": self.running_upto[0],
            "running_upto_id": self.running_upto[1],
        }


@dataclass(frozen=True)
class CancelledRun:
    id: uuid.UUID
    job_id: uuid.UUID
    attempts: int


@dataclass(frozen=True)
class FingerprintTaken:
    """A reopen refused: another job with the same fingerprint is active."""

    active_job_id: uuid.UUID | None


@dataclass(frozen=True)
class Reopen:
    """What a retry reopened: a job and the children that ended badly under it.

    ``jobs``: the job, then its reopened descendants, parents before children.
    ``pending``: their step runs back to pending, to announce. ``waiting``:
    their step runs waiting again for the children reopened with them (not
    announced: a child's end wakes them).
    """

    jobs: list[uuid.UUID]
    pending: list[uuid.UUID]
    waiting: list[uuid.UUID]

    @property
    def children(self) -> list[uuid.UUID]:
        """The descendants reopened with the job."""
        return self.jobs[1:]

    @property
    def step_runs(self) -> int:
        """How many step runs run again (pending or waiting)."""
        return len(self.pending) + len(self.waiting)


@dataclass(frozen=True)
class PendingOutbox:
    id: int
    step_run_id: uuid.UUID
    job_id: uuid.UUID
    delay_s: float


@dataclass(frozen=True)
class ClaimedDelivery:
    """One sink's delivery of one alert, claimed by this dispatcher until its claim lapses."""

    alert_id: int
    sink: str
    delivery_attempt: int
    token: uuid.UUID
    dead_letter_id: int | None
    source: str
    job_id: uuid.UUID | None
    step_run_id: uuid.UUID | None
    flow: str | None
    step: str | None
    attempts: int | None
    error_line: str
    reason: str
    created_at: datetime
    flow_version: int | None = None  # an orphaned version's alert
    schedule: str | None = None  # a schedule's alert: its name and the time that did not fire
    scheduled_for: datetime | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ClaimedDelivery:
        return cls(
            alert_id=row["alert_id"],
            sink=row["sink"],
            delivery_attempt=row["delivery_attempts"],
            token=row["claim_token"],
            dead_letter_id=row["dead_letter_id"],
            source=row["source"],
            job_id=row["job_id"],
            step_run_id=row["step_run_id"],
            flow=row["flow"],
            step=row["step"],
            attempts=row["attempts"],
            error_line=row["error_line"],
            reason=row["reason"],
            created_at=row["created_at"],
            flow_version=row.get("flow_version"),
            schedule=row.get("schedule"),
            scheduled_for=row.get("scheduled_for"),
        )


def column(row: Any, name: str) -> Any:
    """Column ``name`` of ``row`` (its first, as a tuple): callers' connections vary."""
    if isinstance(row, dict):
        return row[name]
    return row[0]
