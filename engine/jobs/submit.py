"""Submit a job: idempotent by fingerprint, enqueued only after commit.

``submit`` writes the job, its first ready step runs and their outbox rows in
one transaction. Given the caller's own connection or SQLAlchemy session it
joins that transaction, so an ERP request that rolls back leaves no job and no
message (invariant 8). A second submit while a job with the same fingerprint
is active returns that job with ``created=False``: losing the unique-index
race is a normal outcome (invariant 7).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from pydantic import BaseModel

from engine import store, tracing
from engine.config import Settings
from engine.errors import EngineError, InvalidParameters, StoreError
from engine.flow import Flow
from engine.flow.registry import Registry
from engine.infra.json_fields import json_fields
from engine.jobs.fingerprint import job_fingerprint
from engine.jobs.plan import root_runs
from engine.jobs.search import PARAM_TAG
from engine.jobs.transaction import in_transaction
from engine.store import jsonb
from engine.store.status import JobStatus
from engine.transports import transport_for
from engine.transports.announce import announce
from engine.transports.outbox import Publisher

if TYPE_CHECKING:
    from engine.jobs.transaction import Connectable

log = logging.getLogger(__name__)

# Each lost race re-reads the winner; the winner can only vanish by finishing
# in between, so a handful of rounds is plenty.
_MAX_ROUNDS = 5
_MAX_TAG = 200  # engine_job_tags.value


@dataclass(frozen=True)
class Submitted:
    """What a submit did: the job, and whether this call created it."""

    job_id: uuid.UUID
    flow: str
    status: JobStatus
    created: bool
    fingerprint: str
    outbox_ids: tuple[int, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return json_fields(self, omit=("outbox_ids",))


def submit(
    flow: str | Flow,
    params: Mapping[str, Any] | BaseModel,
    *,
    conn: Connectable | None = None,
    settings: Settings | None = None,
    registry: Registry | None = None,
    publisher: Publisher | None = None,
    submitted_by: str | None = None,
    scheduled_for: datetime | None = None,
) -> Submitted:
    """Submit ``flow`` with ``params``; see the module docstring for the guarantees.

    Without ``conn`` the engine opens its own transaction, commits it and
    publishes at once. With a psycopg connection, a SQLAlchemy ``Connection``
    or ``Session``, the rows join its open transaction (one is begun if
    needed) and the caller commits; on an autocommit psycopg connection the
    submit is one transaction of its own. The first messages leave at the
    caller's commit: in that same commit with the PostgreSQL transport, by a
    ``NOTIFY`` that wakes the workers' relay otherwise (a ``Session`` also
    publishes from its after-commit hook).

    ``scheduled_for`` (an aware datetime) marks the job as the run of a
    schedule for that time: it is part of the job's fingerprint and of its
    ``submitted`` event (:mod:`engine.schedules.schedules` passes it).
    """
    settings = settings or Settings()
    declared = (
        (registry or Registry.load(settings.flow_modules)).get(flow)
        if isinstance(flow, str)
        else flow
    )
    model = parse_params(declared, params)
    publisher = publisher or transport_for(settings)

    def work(raw: psycopg.Connection[Any], notify: bool) -> Submitted:
        return submit_in(
            raw,
            declared,
            model,
            settings,
            submitted_by,
            publisher,
            notify=notify,
            scheduled_for=scheduled_for,
        )

    # traced, the submit is a span, and its context goes on the job row (engine.tracing)
    with tracing.submit_span(declared.name):
        return in_transaction(
            conn, settings, publisher, work, after_commit_fault="after_submit_commit"
        )


def parse_params(flow: Flow, params: Mapping[str, Any] | BaseModel) -> BaseModel:
    """``params`` as ``flow``'s parameter model; :class:`InvalidParameters` naming what is wrong."""
    if isinstance(params, flow.params):
        return params
    if isinstance(params, BaseModel):
        raise InvalidParameters(
            flow.name,
            [f"expected {flow.params.__name__}, got a {type(params).__name__}"],
        )
    return flow.parse_params(params)


def submit_in(
    conn: psycopg.Connection[Any],
    flow: Flow,
    params: BaseModel,
    settings: Settings,
    submitted_by: str | None,
    publisher: Publisher,
    *,
    notify: bool,
    scheduled_for: datetime | None = None,
    parent: store.ChildOf | None = None,
) -> Submitted:
    """Write the job, its first step runs and their announcements in ``conn``'s transaction.

    A transport whose queue is in this database gets its messages in this same
    transaction, so they exist exactly when it commits. Otherwise outbox rows
    are written, and with ``notify`` a ``NOTIFY`` wakes the workers' relays
    the moment the caller commits (nothing is sent on rollback). The flow's
    admission check runs first, in the same transaction.
    """
    # the caller's bad input, named: not a driver error that aborts its transaction
    jsonb.checked(submitted_by, "submitter")
    params_json = jsonb.model_json(
        params, "params", error=lambda m: InvalidParameters(flow.name, [m])
    )
    admit(flow, params, conn)
    searchable = search_tags(flow, params)
    child_of = None if parent is None else (parent.step_run_id, parent.key)
    fingerprint = job_fingerprint(flow.name, flow.version, params, scheduled_for, child_of)
    # what the job's row does not say of its submit (its row is its submitted event)
    submitted: dict[str, Any] = {}
    if scheduled_for is not None:
        submitted["scheduled_for"] = scheduled_for.isoformat()
    for _ in range(_MAX_ROUNDS):
        job_id = uuid.uuid4()
        row = store.job_insert_if_absent(
            conn,
            job_id=job_id,
            flow=flow.name,
            flow_version=flow.version,
            params=params_json,
            fingerprint=fingerprint,
            submitted_by=submitted_by,
            parent=parent,
            signals=flow.signals,
            approvals=flow.approvals,
            traceparent=tracing.traceparent(),
            submitted_detail=submitted,
        )
        if row is not None:
            tracing.submitted(job_id, created=True)
            for name, values in searchable.items():
                store.tag_insert_many(conn, job_id, name, values)
            runs = root_runs(flow, job_id, params_json, settings)
            announced = announce(conn, publisher, job_id=job_id, new_runs=runs, notify=notify)
            return Submitted(row.id, row.flow, row.status, True, fingerprint, announced.outbox_ids)
        existing = store.job_select_active_by_fingerprint(conn, fingerprint)
        if existing is not None:
            tracing.submitted(existing.id, created=False)
            return Submitted(existing.id, existing.flow, existing.status, False, fingerprint)
    raise EngineError(
        f"submit of flow {flow.name!r} lost {_MAX_ROUNDS} races in a row for fingerprint "
        f"{fingerprint[:12]}...; the job keeps finishing between insert and lookup"
    )


def search_tags(flow: Flow, params: BaseModel) -> dict[str, list[str]]:
    """The tags of ``flow``'s searchable parameters (``Flow(searchable=...)``): ``param.NAME``
    with the value as text (each element of a list; none for ``None`` or an empty value)."""
    dumped = params.model_dump(mode="json", include=set(flow.searchable))
    tags: dict[str, list[str]] = {}
    for name in flow.searchable:
        value = dumped.get(name)
        values = [v for v in (value if isinstance(value, list) else [value]) if v is not None]
        if any(isinstance(v, dict | list) for v in values):
            raise InvalidParameters(flow.name, [f"{name}: a searchable parameter is one value"])
        texts = [v if isinstance(v, str) else json.dumps(v) for v in values]
        if any(len(t) > _MAX_TAG for t in texts):
            raise InvalidParameters(
                flow.name, [f"{name}: a searchable value is at most {_MAX_TAG} characters"]
            )
        if texts := [t for t in texts if t]:
            tags[PARAM_TAG + name] = texts
    return tags


def admit(flow: Flow, params: BaseModel, conn: psycopg.Connection[Any]) -> None:
    """Run ``flow``'s admission check, if it has one; raise what refuses the submit."""
    check = flow.admission
    if check is None:
        return
    try:
        check(params, conn)
    except EngineError:
        raise
    except psycopg.Error as exc:
        # flows run their own SQL: its driver errors join the engine's tree here
        raise StoreError(f"flow {flow.name!r}: its admission check failed: {exc}") from exc
