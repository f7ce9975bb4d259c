"""What a flow may ask about jobs: one job, and the active jobs working on the same data.

Also where a job id a person typed becomes a job (:func:`resolve_job_id`):
a whole UUID, or a unique prefix of one, as ``engine runs`` shows them cut.

A flow that changes the state its jobs depend on (closing the books of a
month, say) must know whether such jobs are still running. It asks here,
in its own transaction, rather than reading the engine's tables: which
jobs of these flows, with parameters containing these values, are pending
or running.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import AmbiguousJobId, BadInput, NoSuchJob
from engine.jobs.watch import watch_job
from engine.store import jsonb
from engine.store.status import JobStatus

__all__ = [
    "MIN_JOB_ID_PREFIX",
    "JobInfo",
    "active_jobs",
    "job_id_or_prefix",
    "job_info",
    "job_version",
    "resolve_job_id",
    "wait_for_job",
]


@dataclass(frozen=True)
class JobInfo:
    """A job as a flow sees it."""

    id: uuid.UUID
    flow: str
    status: JobStatus
    params: dict[str, Any]
    submitted_by: str | None
    created_at: datetime

    @classmethod
    def _of(cls, row: Mapping[str, Any]) -> JobInfo:
        return cls(
            row["id"],
            row["flow"],
            JobStatus(row["status"]),
            dict(row["params"]),
            row["submitted_by"],
            row["created_at"],
        )


def active_jobs(
    conn: psycopg.Connection[Any],
    *,
    flows: Sequence[str],
    params: Mapping[str, Any] | None = None,
    exclude: uuid.UUID | None = None,
) -> list[JobInfo]:
    """Pending or running jobs of ``flows`` whose parameters contain ``params``, oldest first.

    ``params={"month": "2026-11"}`` matches every job submitted with that
    month, whatever its other parameters; ``exclude`` leaves one job out
    (the caller's own).
    """
    wanted = jsonb.checked(dict(params or {}), "params")
    rows = store.job_select_active_matching(conn, flows=list(flows), params=wanted, exclude=exclude)
    return [JobInfo._of(r) for r in rows]


def job_info(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> JobInfo | None:
    """The job with this id, or ``None``."""
    row = store.job_select_info(conn, job_id)
    return None if row is None else JobInfo._of(row)


def job_version(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str | None:
    """A token that changes whenever the job's status, events or audit entries do.

    ``None``: no such job. What a page showing the job live polls, cheaply.
    """
    return store.job_select_version(conn, job_id)


MIN_JOB_ID_PREFIX = 4
"""Hex digits a job id prefix needs (as git's abbreviated hashes): fewer match too many jobs."""

_SHOWN_CANDIDATES = 5
_HEX = frozenset("0123456789abcdef")


def job_id_or_prefix(text: str) -> uuid.UUID | str:
    """``text`` as a whole job id, or as the hex digits of a prefix to look up.

    A prefix is hex digits, dashes anywhere (``acb145ad-837f-48``), at least
    :data:`MIN_JOB_ID_PREFIX` digits; a trailing ``…`` (a cut id copied from
    ``engine runs``) is ignored. Anything else is :class:`~engine.errors.BadInput`
    naming it. Needs no database.
    """
    with contextlib.suppress(ValueError):
        return uuid.UUID(text.strip())
    digits = text.strip().rstrip("…").rstrip(".").replace("-", "").lower()
    if len(digits) == 32 and set(digits) <= _HEX:
        return uuid.UUID(digits)
    if not digits or not set(digits) <= _HEX or len(digits) > 32:
        raise BadInput(
            f"invalid job id {text!r}: expected a UUID or a unique prefix of one "
            f"(at least {MIN_JOB_ID_PREFIX} hex digits, e.g. acb145ad)"
        )
    if len(digits) < MIN_JOB_ID_PREFIX:
        raise BadInput(
            f"job id prefix {text!r} is too short: give at least {MIN_JOB_ID_PREFIX} hex digits"
        )
    return digits


def resolve_job_id(conn: psycopg.Connection[Any], text: str) -> uuid.UUID:
    """The job id ``text`` names: a whole UUID as given, or the one job whose id starts with it.

    See :func:`job_id_or_prefix` for what is accepted. A whole UUID is not
    looked up (the command that uses it says when there is no such job).
    A pruned job (its summary, :mod:`engine.retention`) is found as a live
    one is. Raises :class:`~engine.errors.NoSuchJob` when no job's id starts with the
    prefix, and :class:`~engine.errors.AmbiguousJobId` naming a few (id, flow,
    status, created) when several do.
    """
    digits = job_id_or_prefix(text)
    if isinstance(digits, uuid.UUID):
        return digits
    # the ids a prefix covers are one range in uuid (byte) order: the primary key answers it
    low = uuid.UUID(digits.ljust(32, "0"))
    high = uuid.UUID(digits.ljust(32, "f"))
    rows = store.job_select_by_id_range(conn, low, high, limit=_SHOWN_CANDIDATES + 1)
    if not rows:
        raise NoSuchJob(text, prefix=True)
    if len(rows) == 1:
        return uuid.UUID(str(rows[0]["id"]))
    shown = [
        f"{r['id']} ({r['flow']}, {r['status']}{', pruned' if r['pruned'] else ''}, "
        f"{r['created_at']:%Y-%m-%d %H:%M})"
        for r in rows[:_SHOWN_CANDIDATES]
    ]
    raise AmbiguousJobId(text, shown, more=len(rows) > len(shown))


def wait_for_job(
    settings: Settings,
    job_id: uuid.UUID,
    *,
    progress: bool = True,
    poll_s: float = 0.5,
    stop: threading.Event | None = None,
) -> JobStatus:
    """Block until the job ends; its final status (:func:`engine.jobs.watch.watch_job`'s poll)."""
    show = progress and sys.stdout.isatty()
    with _progress(f"job {str(job_id)[:8]}", show) as update:
        last = watch_job(
            settings, job_id, lambda p: update(p.total, p.done), poll_s=poll_s, stop=stop
        )
    return last.status


@contextlib.contextmanager
def _progress(description: str, show: bool) -> Iterator[Callable[[int, int], None]]:
    """``update(total, completed)`` of a progress bar, or of nothing when not ``show``."""
    try:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )
    except ImportError:
        show = False
    if not show:
        yield lambda _total, _done: None
        return

    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with bar:
        task = bar.add_task(description, total=None)
        yield lambda total, done: bar.update(task, total=total, completed=done)
