"""The audit trail: who did what, on what, when and why (DESIGN.md invariant 19).

Every operator action (``engine cancel``, ``retry``, ``dlq replay``, ``dlq
purge``, ``signal``, ``schedule add|remove|pause|resume|run``, and a flow's
own, such as the books' close and reopen of a month) writes one row of ``engine_audit`` **in
the transaction of the action itself**. An action that is refused (a cancel
of a finished job: exit 2) or fails rolls back and records nothing: every
entry is an action that took effect, and what was refused is the command's
message, not the trail's. One exception, on purpose: an approval that
segregation of duties refuses (:mod:`engine.waits.approvals`) is recorded
as ``signal_refused``, on a connection of its own, since who tried to
approve what they may not is what an auditor asks for. The table is append-only (migration 0019).

Who is the person: ``--by NAME`` on the command line, else :func:`operator`
(``user@host``, the form the engine records as ``submitted_by`` and a
signal's sender). The source says where the action was taken: ``cli``, the
web ``console``, or Python code (``api``).

A flow records its own actions with :func:`record_action` on the
connection of its transaction, with no SQL of its own; ``engine audit``
(and :func:`audit_trail`) lists the entries newest first.

**Tamper evidence** (migration 0026). At commit the database gives each entry
the next position ``seq`` (gapless), the previous entry's hash and its own:
``sha256(prev_hash || canonical)``, where ``canonical`` is a JSON array of the
entry's columns rendered by PostgreSQL the same way in every session (UTC
microseconds, jsonb's sorted text). A one-row head records the last position
and hash. :func:`verify_chain` (``engine audit verify``) reads the chain in
order with each entry's canonical text, recomputes every hash here
(:func:`entry_hash`) and names the first entry deleted (a missing position, or
a head beyond the last entry), changed (its hash no longer matches), or
replaced or reordered (the next entry links to another hash), and any entry
written with the chain's trigger disabled. This catches whoever did it, the
table's owner included, unless the owner rewrote the whole chain and its head
consistently: that only a head hash kept outside the database shows, so
verify prints the head hash to keep and checks a kept one (``expect_head``).

Who may write what is the database's rule too: the console's role writes
source ``console`` only; the worker's role writes source ``api`` only, for a
job that has not ended, as that job's submitter or as ``job <id>``.
"""

from __future__ import annotations

import getpass
import hashlib
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
from engine.errors import BadInput, checked
from engine.infra.json_fields import json_fields
from engine.store import db, jsonb
from engine.store.status import AuditSource

__all__ = [
    "GENESIS",
    "Audited",
    "ChainReport",
    "audit_trail",
    "entry_hash",
    "operator",
    "record_action",
    "verify_chain",
]

GENESIS = "0" * 64
"""The ``prev_hash`` of the first entry (and the head of an empty trail)."""

_HASH = re.compile(r"[0-9a-f]{64}")
_BATCH = 1000
_MAX_PROBLEMS = 20

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
        return json_fields(self)


def _word(what: str, value: str) -> str:
    expected = (
        "a lowercase letter, then up to 62 lowercase letters, digits, '_', '.' or '-' "
        "(e.g. 'close')"
    )
    return checked(value, _WORD, f"audit {what}", expected)


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
    (``close``, ``month``); ``detail`` any JSON object. A bad value raises
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
    settings: Settings | None = None,
    *,
    job_id: uuid.UUID | None = None,
    actor: str | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 50,
) -> list[Audited]:
    """The newest ``limit`` entries, newest first: all, or those matching every filter given.

    ``actor`` and ``action`` match exactly; ``since`` (inclusive) and ``until``
    (exclusive) bound the entry's time.
    """
    with db.connect(settings or Settings(), autocommit=True) as conn:
        rows = store.audit_select_recent(
            conn,
            job_id=job_id,
            actor=actor,
            action=action,
            since=since,
            until=until,
            limit=limit,
        )
    return [Audited.from_row(r) for r in rows]


def entry_hash(prev_hash: str, canonical: str) -> str:
    """An entry's hash as the chain's trigger computes it (migration 0026), hex:
    ``sha256(prev_hash || canonical)`` over UTF-8."""
    return hashlib.sha256((prev_hash + canonical).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ChainReport:
    """What :func:`verify_chain` found: ``problems`` is empty when the chain is intact.

    ``first_bad`` is the position (``seq``) of the first entry deleted, changed
    or replaced, when there is one; ``head_hash`` is the hash to keep outside
    the database (``--expect-head`` of a later verify).
    """

    count: int
    head_seq: int
    head_hash: str
    problems: tuple[str, ...]
    first_bad: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "count": self.count,
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "first_bad": self.first_bad,
            "problems": list(self.problems),
        }


def _expected_head(value: str | None) -> str | None:
    if value is None:
        return None
    head = value.strip().lower()
    if not _HASH.fullmatch(head):
        raise BadInput(
            f"invalid head hash {value!r}: expected the 64 hexadecimal digits "
            "`engine audit verify` printed"
        )
    return head


def verify_chain(
    settings: Settings | None = None, *, expect_head: str | None = None
) -> ChainReport:
    """Walk the audit trail's hash chain and name the first entry deleted, changed or reordered.

    One read-only REPEATABLE READ transaction (the head and the entries are of
    one moment), the entries a batch at a time in chain order. ``expect_head``:
    a head hash kept from an earlier verify; the chain must still contain it
    (it may have grown since). A bad ``expect_head`` raises :class:`BadInput`.
    """
    kept = _expected_head(expect_head)
    problems: list[str] = []
    first_bad: int | None = None

    def bad(seq: int | None, message: str) -> None:
        nonlocal first_bad
        if first_bad is None and seq is not None and not problems:
            first_bad = seq
        if len(problems) < _MAX_PROBLEMS:
            problems.append(message)

    prev, last_seq, last_id = GENESIS, 0, None
    kept_found = kept is None or kept == GENESIS
    with db.connect(settings or Settings()) as conn:
        conn.read_only = True
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with conn.transaction():
            head = store.audit_select_head(conn)
            while True:
                rows = store.audit_select_chain_after(conn, after=last_seq, limit=_BATCH)
                for r in rows:
                    seq, entry_id = r["seq"], r["id"]
                    if seq != last_seq + 1:
                        after = (
                            f"#{last_seq} (id {last_id})" if last_id is not None else "the start"
                        )
                        gone = f"#{last_seq + 1}" + (
                            f" to #{seq - 1}" if seq - 1 > last_seq + 1 else ""
                        )
                        bad(
                            last_seq + 1,
                            f"entry {gone} deleted: the chain goes from {after} "
                            f"to #{seq} (id {entry_id})",
                        )
                    contiguous = seq == last_seq + 1
                    hashed = entry_hash(r["prev_hash"] or "", r["canonical"]) == r["hash"]
                    if contiguous and r["prev_hash"] != prev and last_id is None:
                        bad(
                            seq,
                            f"entry #{seq} (id {entry_id}) does not start the chain: it was "
                            f"written after an entry with hash {r['prev_hash']} (entries "
                            "before it deleted and the rest renumbered)",
                        )
                    elif contiguous and r["prev_hash"] != prev and hashed:
                        # #seq is whole, but the entry it was written after is not there
                        bad(
                            last_seq,
                            f"entry #{last_seq} (id {last_id}) changed or replaced: "
                            f"entry #{seq} (id {entry_id}) was written after an entry "
                            f"with hash {r['prev_hash']}, not #{last_seq}'s {prev}",
                        )
                    elif contiguous and r["prev_hash"] != prev:
                        bad(
                            seq,
                            f"entry #{seq} (id {entry_id}) changed, moved or replaced: it "
                            f"does not follow #{last_seq} and no longer matches its hash",
                        )
                    elif not hashed:
                        bad(
                            seq,
                            f"entry #{seq} (id {entry_id}) changed or moved: its content "
                            "no longer matches its hash",
                        )
                    prev, last_seq, last_id = r["hash"], seq, entry_id
                    kept_found = kept_found or r["hash"] == kept
                if len(rows) < _BATCH:
                    break
            count = last_seq
            if head is None:
                bad(None, "the chain's head record (engine_audit_head) is gone")
            elif head["seq"] > last_seq:
                gone = f"#{last_seq + 1}" + (
                    f" to #{head['seq']}" if head["seq"] > last_seq + 1 else ""
                )
                bad(
                    last_seq + 1,
                    f"entry {gone} deleted: the head records #{head['seq']} "
                    f"(id {head['last_id']}), the chain ends at #{last_seq}",
                )
            elif head["seq"] < last_seq or head["hash"] != prev:
                bad(
                    head["seq"],
                    f"the head (#{head['seq']}, {head['hash']}) is not the chain's last "
                    f"entry #{last_seq} ({prev}): the head was rewritten",
                )
            for entry_id in store.audit_select_unchained(conn, limit=_MAX_PROBLEMS):
                bad(
                    None,
                    f"entry id {entry_id} is not in the chain "
                    "(written with the chain's trigger disabled)",
                )
    if not kept_found:
        bad(
            None,
            f"the head hash you kept ({kept}) is not in the chain: the trail was "
            "rewritten or cut short since",
        )
    return ChainReport(
        count=count,
        head_seq=last_seq,
        head_hash=prev,
        problems=tuple(problems),
        first_bad=first_bad,
    )
