"""A bulk action applied: the preview's frozen set only, each item re-checked under its lock.

The preview is claimed once (``bulk_preview_claim_if_open``); items are acted
on a chunk per transaction, each in a savepoint of its own, so one refusal or
lock timeout skips that item alone. A job is locked and compared
(:func:`~engine.jobs.bulk.previews.job_check`); a dead letter after its job's
row (the store's lock order). The action is the single one's
(:func:`engine.jobs.admin.retry_in`, :func:`~engine.jobs.admin.cancel_in`),
audited per item with the preview's id; what it publishes goes after the
chunk commits. The preview is marked applied before its first item: an apply
that stops half way (a crash, an outage) leaves the rest undone, and a new
dry run finds what is left, in the state it is in now.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import BadInput, Contention, PreviewClosed
from engine.jobs import admin
from engine.jobs.audit import operator, record_action
from engine.jobs.bulk.filtering import DEAD_LETTER_ACTIONS
from engine.jobs.bulk.previews import BulkItem, job_check
from engine.store import db
from engine.store.status import AuditSource
from engine.transports import transport_for
from engine.transports.base import Transport

__all__ = ["BulkApplied", "BulkSkip", "apply"]

# Items per transaction. Each item is a savepoint (and a retry's reopen one more): 25 keep
# a transaction under the 64 subtransactions a backend caches, past which every other
# session's snapshot must read pg_subtrans (the subtransaction overflow slowdown).
_CHUNK = 25


@dataclass(frozen=True)
class BulkSkip:
    """An item not acted on: it changed since the preview, or the action refused it."""

    id: str
    was: str
    why: str


@dataclass(frozen=True)
class BulkApplied:
    """What :func:`apply` did: the ids acted on, the ones skipped (changed) or refused."""

    preview_id: uuid.UUID
    action: str
    done: list[str] = field(default_factory=list)
    skipped: list[BulkSkip] = field(default_factory=list)
    refused: list[BulkSkip] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        def listed(skips: list[BulkSkip]) -> list[dict[str, str]]:
            return [{"id": s.id, "was": s.was, "why": s.why} for s in skips]

        return {
            "preview_id": str(self.preview_id),
            "action": self.action,
            "done": len(self.done),
            "skipped": listed(self.skipped),
            "refused": listed(self.refused),
        }


def apply(
    settings: Settings,
    preview_id: uuid.UUID,
    *,
    reason: str,
    action: str | None = None,
    actor: str | None = None,
    source: AuditSource = AuditSource.CLI,
    transport: Transport | None = None,
    before_item: Callable[[BulkItem], None] | None = None,
) -> BulkApplied:
    """Act on a preview's set only, each item re-checked under its lock; see the module.

    ``action``, when given, must be the preview's (``engine cancel --apply``
    of a retry's preview is refused). ``reason`` is required (audited per
    item). ``before_item`` is a test's hook, called before each item is locked.
    """
    if not (reason or "").strip():
        raise BadInput("a bulk apply needs a reason (--reason R): it is audited with every item")
    who = (actor or "").strip() or operator()
    transport = transport or transport_for(settings)
    with (
        admin.operator_action(
            settings, f"apply of bulk preview {preview_id}", "engine_bulk_previews"
        ),
        _connect(settings) as conn,
    ):
        with conn.transaction():
            claimed = store.bulk_preview_claim_if_open(conn, preview_id, who)
            if claimed is None:
                raise _closed(conn, preview_id)
            if action is not None and claimed["action"] != action:
                raise BadInput(
                    f"bulk preview {preview_id} is a {claimed['action']} preview, not {action}: "
                    f"apply it with the {claimed['action']} command"
                )
        done = BulkApplied(preview_id, claimed["action"])
        items = [BulkItem(*r) for r in claimed["items"]]
        act = _Act(settings, conn, transport, claimed["action"], who, source, reason, preview_id)
        for start in range(0, len(items), _CHUNK):
            after: list[Callable[[], object]] = []
            with conn.transaction():
                for item in items[start : start + _CHUNK]:
                    if before_item is not None:
                        before_item(item)
                    act.one(item, done, after)
            for publish in after:
                publish()
    return done


def _closed(conn: psycopg.Connection[Any], preview_id: uuid.UUID) -> BadInput:
    row = store.bulk_preview_select_one(conn, preview_id)
    if row is None:
        return BadInput(f"no bulk preview {preview_id}; `--dry-run` writes one and prints its id")
    if row["applied_at"] is not None:
        return PreviewClosed(
            f"bulk preview {preview_id} was applied already, by {row['applied_by']} at "
            f"{row['applied_at']:%Y-%m-%d %H:%M:%S %Z}; a preview is applied once: "
            "run --dry-run again for what the filter finds now"
        )
    return PreviewClosed(
        f"bulk preview {preview_id} expired at {row['expires_at']:%Y-%m-%d %H:%M:%S %Z}; "
        "run --dry-run again for what the filter finds now, and apply that"
    )


@dataclass
class _Act:
    """One item at a time, in its own savepoint of the chunk's transaction."""

    settings: Settings
    conn: psycopg.Connection[Any]
    transport: Transport
    action: str
    who: str
    source: AuditSource
    reason: str
    preview_id: uuid.UUID

    def one(self, item: BulkItem, done: BulkApplied, after: list[Callable[[], object]]) -> None:
        try:
            with self.conn.transaction():
                changed = (
                    self._dead_letter(item, after)
                    if self.action in DEAD_LETTER_ACTIONS
                    else self._job(item, after)
                )
        except Contention as exc:
            done.skipped.append(BulkSkip(item.id, item.state, f"busy: {exc}"))
            return
        except BadInput as exc:  # the single action's refusal, Refused included
            done.refused.append(BulkSkip(item.id, item.state, str(exc)))
            return
        if changed is not None:
            done.skipped.append(BulkSkip(item.id, item.state, changed))
        else:
            done.done.append(item.id)

    @property
    def _detail(self) -> dict[str, Any]:
        return {"preview": str(self.preview_id)}

    def _job(self, item: BulkItem, after: list[Callable[[], object]]) -> str | None:
        job_id = uuid.UUID(item.id)
        row = store.job_select_state_locked(self.conn, job_id)
        if row is None:
            return "no longer exists"
        now = job_check(row["status"], row["finished_at"])
        if now != item.check:
            return f"changed since the preview: now {row['status']}"
        if self.action == "cancel":
            message = f"cancelled by {self.who}: {self.reason}"
            ended = admin.cancel_in(
                self.conn,
                self.transport,
                job_id,
                message,
                who=self.who,
                source=self.source,
                reason=self.reason,
                detail=self._detail,
            )
            after.append(lambda: ended.after_commit(self.conn, self.settings))
        else:
            _, announced = admin.retry_in(
                self.conn,
                self.transport,
                job_id,
                actor=self.who,
                source=self.source,
                reason=self.reason,
                detail=self._detail,
            )
            after.append(lambda: announced.publish_after_commit(self.conn))
        return None

    def _dead_letter(self, item: BulkItem, after: list[Callable[[], object]]) -> str | None:
        letter = int(item.id)
        state, _, job_status = item.check.partition("|")
        peek = store.dead_letter_select_one(self.conn, letter)
        if peek is not None and peek["job_id"] is not None:  # its job's row first: lock order
            job = store.job_select_state_locked(self.conn, peek["job_id"])
            if (job["status"] if job else "") != job_status:
                return f"its job changed since the preview: now {job['status'] if job else '-'}"
        row = store.dead_letter_select_locked(self.conn, letter)
        if row is None:
            return "no longer exists (purged)"
        if ("open" if row["replayed_at"] is None else "replayed") != state:
            return "changed since the preview: now replayed"
        if self.action == "purge":
            if not store.dead_letter_delete_if_closed(self.conn, letter):
                raise BadInput(f"dead letter {letter} is open: only closed ones are purged")
            record_action(
                self.conn,
                "purge",
                "dead_letter",
                letter,
                actor=self.who,
                source=self.source,
                job_id=row["job_id"],
                reason=self.reason,
                detail=self._detail,
            )
        elif row["source"] == "step":
            _, announced = admin.retry_in(
                self.conn,
                self.transport,
                row["job_id"],
                actor=self.who,
                source=self.source,
                reason=self.reason,
                replay_of=letter,
                detail=self._detail,
            )
            after.append(lambda: announced.publish_after_commit(self.conn))
        else:
            store.dead_letter_mark_replayed_if_open(self.conn, letter)
            record_action(
                self.conn,
                "replay",
                "dead_letter",
                letter,
                actor=self.who,
                source=self.source,
                reason=self.reason,
                detail={"source": "message", **self._detail},
            )
            # sent before the commit, as a single replay sends it: a failed commit leaves a
            # message sent twice at worst (delivery is at least once), never one lost
            self.transport.send_raw(row["message_body"])
        return None


def _connect(settings: Settings) -> psycopg.Connection[Any]:
    """An operator command's connection: its shorter lock wait, as :mod:`engine.jobs.admin`'s."""
    return db.connect(settings, lock_timeout_s=settings.admin_lock_timeout_s)
