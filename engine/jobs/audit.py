"""The audit trail: who did what, on what, when and why (DESIGN.md invariant 19).

Every operator action (``engine cancel``, ``retry``, ``dlq replay``, ``dlq
purge``, ``signal``, ``schedule add|remove|pause|resume|run``, and a flow's
own, such as the books' close and reopen of a period) writes one row of ``engine_audit`` **in
the transaction of the action itself**. An action that is refused (a cancel
of a finished job: exit 2) or fails rolls back and records nothing: every
entry is an action that took effect, and what was refused is the command's
message, not the trail's. The table is append-only (migration 0019).

Who is the person: ``--by NAME`` on the command line, else :func:`operator`
(``user@host``, the form the engine records as ``submitted_by`` and a
signal's sender). The source says where the action was taken: ``cli``, the
web ``console``, or Python code (``api``).

A flow records its own actions with :func:`record_action` on the
connection of its transaction, with no SQL of its own; ``engine audit``
(and :func:`audit_trail`) lists the entries newest first.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import BadInput
from engine.store import db, jsonb
from engine.store.status import AuditSource

__all__ = ["Audited", "audit_trail", "operator", "record_action"]

_WORD = re.compile(r"[a-z][a-z0-9_.-]{0,62}")


def operator() -> str:
    """Who runs this process, as the audit trail records it: ``user@host``.

    The OS user (``getpass.getuser()``; the numeric uid when it has no name)
    and the machine, so that two operators named ``root`` on two hosts differ.
    """
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class Audited:
    """One entry of the audit trail, as recorded (``at`` is the database's clock)."""

    id: int
    at: datetime
    actor: str
    source: str
    action: str
    target_kind: str
    target_id: str | None
    job_id: uuid.UUID | None
    reason: str | None
    detail: dict[str, Any]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Audited:
        return cls(**{k: row[k] for k in cls.__dataclass_fields__})

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "source": self.source,
            "action": self.action,
            "target_kind": self.target_kind,
            "target_id": self.target_id,
            "job_id": None if self.job_id is None else str(self.job_id),
            "reason": self.reason,
            "detail": self.detail,
        }


def _word(what: str, value: str) -> str:
    if not isinstance(value, str) or not _WORD.fullmatch(value):
        raise BadInput(
            f"invalid audit {what} {value!r}: expected a lowercase letter, then up to 62 "
            "lowercase letters, digits, '_', '.' or '-' (e.g. 'close')"
        )
    return value


def record_action(
    conn: psycopg.Connection[Any],
    action: str,
    target_kind: str,
    target_id: str | uuid.UUID | int | None = None,
    *,
    actor: str | None = None,
    source: AuditSource | str = AuditSource.API,
    job_id: uuid.UUID | None = None,
    reason: str | None = None,
    detail: dict[str, Any] | None = None,
) -> Audited:
    """Record an operator's action in the caller's transaction; the entry as written.

    Call it on the connection of the transaction that does the action, so
    that the entry commits with it, or not at all. ``actor`` defaults to
    :func:`operator`; ``action`` and ``target_kind`` are lowercase words
    (``close``, ``period``); ``detail`` any JSON object. A bad value raises
    :class:`BadInput` before anything is written.
    """
    try:
        origin = AuditSource(source)
    except ValueError:
        valid = ", ".join(s.value for s in AuditSource)
        raise BadInput(f"invalid audit source {source!r}; valid: {valid}") from None
    who = (actor or "").strip() or operator()
    # what the database cannot store (NaN, a NUL, ...) is BadInput naming it, not a StoreError
    for noun, value in (("actor", who), ("target", target_id), ("reason", reason)):
        jsonb.checked(value, f"audit {noun}")
    jsonb.checked(detail, "audit detail")
    row = store.audit_insert(
        conn,
        actor=who,
        source=origin.value,
        action=_word("action", action),
        target_kind=_word("target kind", target_kind),
        target_id=None if target_id is None else str(target_id),
        job_id=job_id,
        reason=reason,
        detail=detail,
    )
    return Audited.from_row(row)


def audit_trail(
    settings: Settings | None = None, *, job_id: uuid.UUID | None = None, limit: int = 50
) -> list[Audited]:
    """The newest ``limit`` entries, newest first: all, or those concerning ``job_id``."""
    with db.connect(settings or Settings(), autocommit=True) as conn:
        rows = store.audit_select_recent(conn, job_id=job_id, limit=limit)
    return [Audited.from_row(r) for r in rows]
