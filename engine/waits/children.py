"""Child jobs: a step submits jobs of its own, then waits for them holding nothing.

``ctx.submit_child("post_store", {"store": 7})`` submits a job in the step's
own fenced transaction, recording its parent job, the step run that
submitted it and its key (the child's index in the step, or a name given).
Its fingerprint holds the parent step run and the key, and the key is unique
per step run whatever the child's status: a rerun of the step (after a
crash, a retry or a wake) gets the same child back, never a second one.

``ctx.wait_for_children(timeout=...)`` returns the children's outcomes once
every one has ended (done, failed or cancelled: the step decides what a
failed child means). Until then it raises :class:`~engine.waits.wait.Wait`: unlike
a wait for a signal, what the step wrote so far **commits** with the park
(the children it submitted, above all), in one fenced transaction that moves
the step run to ``waiting``, freeing its lease, worker slot and attempt (its
concurrency key's slot it keeps, and its children inherit it: see
:mod:`engine.flow.concurrency`). So a step submits its children and waits for
them before it writes anything else.

A child's end (:func:`engine.jobs.ending.job_ended`, on every path that ends a job)
makes the waiting parent step run pending and announces it, in the
transaction that ended the child; the step runs again from its start, finds
its children, and either returns their outcomes or parks again while some
are active. A child ending while its parent is about to park is seen by the
park: the park locks the parent job row, then the children rows (waiting
for a child's ending transaction to commit), then parks only if a child is
still active. Cancelling a job cancels its active children
(:func:`engine.store.job_cancel_if_active`).

Retrying a job (:func:`engine.jobs.admin.retry_job`) retries the failed or
cancelled children of its step runs that run again, in the same transaction
(:func:`engine.store.job_reopen_if_ended`), keeping their ids and keys. Each
such step run waits for them again, in its key's slot if one is free. So
the rerun step's ``submit_child`` finds them running again, and
``wait_for_children`` returns their new outcomes. A done child is never run
again.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from engine import store
from engine.errors import checked
from engine.flow.retry import Fail
from engine.infra.json_fields import json_fields
from engine.jobs.fingerprint import job_fingerprint
from engine.jobs.submit import Submitted, parse_params, submit_in
from engine.store.status import JobStatus
from engine.waits.wait import Wait, timed_out

if TYPE_CHECKING:
    import psycopg

    from engine.config import Settings
    from engine.flow import Flow
    from engine.flow.registry import Registry
    from engine.transports.outbox import Publisher

CHILD_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")

_ENDED = (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


def check_child_key(key: str) -> str:
    """``key`` if it is a valid child key; :class:`BadInput` naming it otherwise."""
    expected = (
        "a letter or digit, then up to 127 letters, digits, '_', '.', ':' or '-' (e.g. 'store-7')"
    )
    return checked(key, CHILD_KEY, "child key", expected)


@dataclass(frozen=True)
class Child:
    """A child job as its parent step sees it once it ended.

    ``output`` is a done child's result: the checkpoint of its step run that
    finished last (its flow's last step, for a flow that ends in one step);
    ``None`` for a failed or cancelled child, whose ``error`` says why.
    ``rejected``: the child failed because a step of it refused its data
    (``engine.Reject``): the data's decision, not a fault. A parent ends with
    ``Reject`` too, rather than ``Fail`` (which dead-letters and alerts).
    """

    job_id: uuid.UUID
    key: str
    flow: str
    status: JobStatus
    error: str | None
    finished_at: datetime | None
    output: dict[str, Any] | None = None  # a done child's last checkpoint
    rejected: bool = False

    @property
    def ok(self) -> bool:
        """Whether the child is done (not failed, not cancelled)."""
        return self.status is JobStatus.DONE

    def as_json(self) -> dict[str, Any]:
        return json_fields(self)


class ChildrenTimeout(Fail):
    """Some children were still active at the wait's deadline.

    A step may catch it and decide (cancel them, carry on); left unhandled it
    fails the step at once (the deadline would not move on a retry).
    """

    def __init__(self, active: list[uuid.UUID], deadline: datetime | None) -> None:
        self.active = active
        self.deadline = deadline
        ids = ", ".join(str(a) for a in active)
        super().__init__(f"child jobs {ids} had not ended by {deadline}")


@dataclass(frozen=True)
class ChildSubmitter:
    """What a step needs to submit children: the worker's settings, flows and transport."""

    settings: Settings
    registry: Registry
    publisher: Publisher

    def submit(
        self,
        conn: psycopg.Connection[Any],
        parent: store.ChildOf,
        flow: str | Flow,
        params: Mapping[str, Any] | BaseModel,
    ) -> Submitted:
        """The child ``parent.key`` of the step run: the one submitted before, or a new one.

        Joins ``conn``'s transaction (the step's); its first messages leave at
        that commit (a ``NOTIFY`` wakes the relays on an external queue).
        """
        check_child_key(parent.key)
        if isinstance(flow, str):
            flow = self.registry.get(flow)
        model = parse_params(flow, params)
        existing = store.job_select_child(conn, parent.step_run_id, parent.key)
        if existing is not None:
            fingerprint = job_fingerprint(
                flow.name, flow.version, model, None, (parent.step_run_id, parent.key)
            )
            return Submitted(existing.id, existing.flow, existing.status, False, fingerprint)
        return submit_in(
            conn,
            flow,
            model,
            self.settings,
            f"job {parent.job_id}",
            self.publisher,
            notify=True,
            parent=parent,
        )


def wait_for_children(
    conn: psycopg.Connection[Any],
    step_run_id: uuid.UUID,
    timeout: timedelta | None,
    past: tuple[datetime | None, ...] = (),
) -> list[Child]:
    """The step run's children once all ended; :class:`Wait`; :class:`ChildrenTimeout`.

    ``past``: the deadlines of the waits the step passed before this one in
    this run (``None``: it returned), see :mod:`engine.waits.wait`.
    """
    if timeout is not None and timeout < timedelta(0):
        raise ValueError(f"timeout must not be negative, got {timeout}")
    rows = store.job_select_children(conn, step_run_id)
    active = [r.id for r in rows if r.status not in _ENDED]
    if not active:
        return [
            Child(r.id, r.key, r.flow, r.status, r.error, r.finished_at, r.output, r.rejected)
            for r in rows
        ]
    deadline = timed_out(store.step_select_children_timed_out(conn, step_run_id), past)
    if deadline is not None:
        raise ChildrenTimeout(active, deadline)
    raise Wait(
        children=True, timeout_s=None if timeout is None else timeout.total_seconds(), past=past
    )
