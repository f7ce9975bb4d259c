"""Leases: a claimed step run's lease, renewed or given back by its token's holder.

A claim (:mod:`engine.store.claims`) gives a step run a lease: a token and an
expiry by the database clock (invariant 3). Only the holder of the current
token renews it (invariant 4), and a lease that holds a concurrency slot is
never renewed once expired, since its slot may have gone to the next holder
(invariant 17). Giving a step run back returns the attempt its claim took, so
a release costs the step nothing and never leaves a row at its cap
(invariants 12 to 14). A step handing something on (a child job) asks
first whether its lease is still live (:func:`lease_live`). Either
statement matching zero rows means the lease was lost: the caller stops
working on the step run; it is not an error. The other ways a lease ends
(checkpoint, retry, dead, park) are fenced writes in
:mod:`engine.store.step_runs`.

A lease's owner is the claiming worker's slot, ``<worker id>/<slot>``
(:func:`lease_owner`); whatever relates a lease to its worker maps the owner
with :func:`worker_of`, or in SQL with its mirror ``engine_worker_of(owner)``
(migration 0028), never by comparing the owner with a worker id.

The statements are blocks of ``sql/step_runs.sql``.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

import psycopg

from engine.store.errors import wrap_errors
from engine.store.queries import load
from engine.store.rows import column

__all__ = [
    "lease_extend_if_owner",
    "lease_live",
    "lease_owner",
    "lease_release_free_if_owner",
    "lease_release_if_owner",
    "worker_of",
]

_q = load("step_runs")
# the slot a lease owner ends with; engine_worker_of (migration 0028) strips the same
_SLOT = re.compile(r"/[0-9]+\Z")


def lease_owner(worker_id: str, slot: int) -> str:
    """The owner a worker's slot claims under: ``host:pid/0`` for slot 0 of ``host:pid``."""
    return f"{worker_id}/{slot}"


def worker_of(owner: str) -> str:
    """The worker a lease owner belongs to: the owner without its last ``/<slot>``.

    The one mapping in Python (its SQL twin is ``engine_worker_of``): a worker
    id may contain ``/`` itself; an owner without a slot is its own worker.
    """
    return _SLOT.sub("", owner)


@wrap_errors
def lease_extend_if_owner(
    conn: psycopg.Connection[Any], step_run_id: uuid.UUID, token: uuid.UUID, lease_s: float
) -> datetime | None:
    """The new expiry, or ``None``: the lease is lost."""
    row = conn.execute(
        _q["lease_extend_if_owner"], {"id": step_run_id, "token": token, "lease_s": lease_s}
    ).fetchone()
    return None if row is None else column(row, "lease_expires_at")


@wrap_errors
def lease_release_if_owner(
    conn: psycopg.Connection[Any], step_run_id: uuid.UUID, token: uuid.UUID
) -> bool:
    """Give the step run back with the attempt it took; ``False``: the lease was lost already."""
    cur = conn.execute(_q["lease_release_if_owner"], {"id": step_run_id, "token": token})
    return cur.rowcount == 1


@wrap_errors
def lease_release_free_if_owner(
    conn: psycopg.Connection[Any], step_run_id: uuid.UUID, token: uuid.UUID, max_free: int
) -> int | None:
    """Give back a step run whose body ran, with its attempt, counting it (at most ``max_free``).

    Its free releases since it last parked, this one included; ``None``: the
    lease was lost already, or ``max_free`` are spent (charge it instead).
    """
    row = conn.execute(
        _q["lease_release_free_if_owner"], {"id": step_run_id, "token": token, "max": max_free}
    ).fetchone()
    return None if row is None else int(column(row, "free_releases"))


@wrap_errors
def lease_live(conn: psycopg.Connection[Any], step_run_id: uuid.UUID, token: uuid.UUID) -> bool:
    """Is ``token``'s lease on the step run still held and live, by the database clock?"""
    row = conn.execute(_q["lease_live"], {"id": step_run_id, "token": token}).fetchone()
    return bool(row is not None and column(row, "live"))
