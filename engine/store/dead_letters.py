"""Dead letters: step runs past their attempt cap, and messages that cannot be handled.

A step run's dead letter is written by the worker or the sweeper that
dead-lettered it, once until its job is replayed (a partial unique index), so
one failure raises one alert. A message's dead letter keeps its body as data
with the reason; an operator lists, replays or purges them (``engine dlq``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import psycopg
from psycopg.types.json import Jsonb

from engine.store.errors import wrap_errors
from engine.store.events import event_insert
from engine.store.named import NamedQueries
from engine.store.queries import load
from engine.store.status import EventKind

__all__ = [
    "Delivery",
    "dead_letter_count_open",
    "dead_letter_delete_closed",
    "dead_letter_delete_if_closed",
    "dead_letter_insert_message_if_new",
    "dead_letter_insert_message_logged",
    "dead_letter_insert_step",
    "dead_letter_mark_replayed_by_job",
    "dead_letter_mark_replayed_by_jobs",
    "dead_letter_mark_replayed_if_open",
    "dead_letter_select_for_preview",
    "dead_letter_select_jobs_of",
    "dead_letter_select_locked",
    "dead_letter_select_many_locked",
    "dead_letter_select_one",
    "dead_letter_select_open",
]

_q = NamedQueries(load("dead_letters"))


@wrap_errors
def dead_letter_insert_step(
    conn: psycopg.Connection[Any],
    *,
    job_id: uuid.UUID,
    step_run_id: uuid.UUID,
    reason: str,
    error: dict[str, Any] | None,
) -> int | None:
    """The new dead letter's id; ``None`` when the step run was dead-lettered already."""
    params = {
        "job_id": job_id,
        "step_run_id": step_run_id,
        "reason": reason,
        "error": None if error is None else Jsonb(error),
    }
    return _new_id(_q.first(conn, "dead_letter_insert_step", params))


@wrap_errors
def dead_letter_insert_message_if_new(
    conn: psycopg.Connection[Any], message_id: str | None, body: str, reason: str
) -> int | None:
    """The new dead letter's id; ``None`` when this message id was recorded already."""
    params = {"message_id": message_id, "body": body, "reason": reason}
    return _new_id(_q.first(conn, "dead_letter_insert_message_if_new", params))


def _new_id(row: dict[str, Any] | None) -> int | None:
    return None if row is None else int(row["id"])


class Delivery(Protocol):
    """What a dead letter keeps of a delivered message (a transport's ``Received``)."""

    @property
    def message_id(self) -> str: ...

    @property
    def body(self) -> str: ...


def dead_letter_insert_message_logged(
    conn: psycopg.Connection[Any], worker: str, received: Delivery, reason: str
) -> int | None:
    """Keep a message that can never be handled, with its reason; the new dead letter's id.

    ``None``: the same message was recorded already (it came back before its
    delete). Joins the caller's transaction when there is one (so its alert
    commits with it), otherwise runs in its own.
    """
    with conn.transaction():
        body = received.body.replace("\x00", "\\x00")[:8192]  # text columns cannot hold NUL
        dl_id = dead_letter_insert_message_if_new(conn, received.message_id, body, reason)
        event_insert(
            conn,
            EventKind.MESSAGE_DROPPED,
            worker=worker,
            detail={"reason": reason, "message_id": received.message_id},
        )
    return dl_id


@wrap_errors
def dead_letter_select_open(conn: psycopg.Connection[Any], limit: int) -> list[dict[str, Any]]:
    return _q.rows(conn, "dead_letter_select_open", {"limit": limit})


@wrap_errors
def dead_letter_select_one(conn: psycopg.Connection[Any], dl_id: int) -> dict[str, Any] | None:
    return _q.first(conn, "dead_letter_select_one", {"id": dl_id})


@wrap_errors
def dead_letter_mark_replayed_if_open(conn: psycopg.Connection[Any], dl_id: int) -> bool:
    return _q.run(conn, "dead_letter_mark_replayed_if_open", {"id": dl_id}) == 1


@wrap_errors
def dead_letter_mark_replayed_by_job(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> None:
    """Close the open step dead letters of a job being replayed, so a new failure alerts again."""
    _q.run(conn, "dead_letter_mark_replayed_by_job", {"job_id": job_id})


@wrap_errors
def dead_letter_delete_closed(conn: psycopg.Connection[Any]) -> int:
    return _q.run(conn, "dead_letter_delete_closed")


@wrap_errors
def dead_letter_count_open(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Open dead letters (not replayed) by source (``step``, ``message``)."""
    return {str(r["source"]): int(r["n"]) for r in _q.rows(conn, "dead_letter_count_open")}


@wrap_errors
def dead_letter_select_for_preview(
    conn: psycopg.Connection[Any],
    *,
    flow: str | None,
    replayed: bool | None,
    purgeable: bool,
    error_text: str | None,
    since: Any,
    until: Any,
    tags: list[tuple[str, str]],
    limit: int,
) -> list[dict[str, Any]]:
    """The dead letters a bulk filter finds, oldest first, at most ``limit``."""
    params = {
        "flow": flow,
        "replayed": replayed,
        "purgeable": purgeable,
        "error_text": error_text,
        "since": since,
        "until": until,
        "tag_names": [n for n, _ in tags],
        "tag_values": [v for _, v in tags],
        "limit": limit,
    }
    return _q.rows(conn, "dead_letter_select_for_preview", params)


@wrap_errors
def dead_letter_select_locked(
    conn: psycopg.Connection[Any], dead_letter_id: int
) -> dict[str, Any] | None:
    """One dead letter under its row lock (``None``: deleted meanwhile)."""
    return _q.first(conn, "dead_letter_select_locked", {"id": dead_letter_id})


@wrap_errors
def dead_letter_delete_if_closed(conn: psycopg.Connection[Any], dead_letter_id: int) -> bool:
    """Delete one dead letter that needs no action (a message, or replayed); whether it was."""
    return bool(_q.run(conn, "dead_letter_delete_if_closed", {"id": dead_letter_id}))


@wrap_errors
def dead_letter_mark_replayed_by_jobs(
    conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID]
) -> None:
    """:func:`dead_letter_mark_replayed_by_job` for many jobs, one statement."""
    _q.run(conn, "dead_letter_mark_replayed_by_jobs", {"ids": list(ids)})


@wrap_errors
def dead_letter_select_jobs_of(
    conn: psycopg.Connection[Any], ids: Sequence[int]
) -> list[uuid.UUID]:
    """The jobs of these dead letters (to lock their rows first: the lock order)."""
    return [r["job_id"] for r in _q.rows(conn, "dead_letter_select_jobs_of", {"ids": list(ids)})]


@wrap_errors
def dead_letter_select_many_locked(
    conn: psycopg.Connection[Any], ids: Sequence[int]
) -> list[dict[str, Any]]:
    """A bulk chunk's dead letters under their row locks (after their jobs' rows)."""
    return _q.rows(conn, "dead_letter_select_many_locked", {"ids": list(ids)})
