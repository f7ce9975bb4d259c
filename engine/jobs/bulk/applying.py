"""A bulk action applied: the preview's frozen set only, each item re-checked under its lock.

Resumable and exact under a crash: every transaction of an apply locks the
preview's row first (``bulk_preview_lock``: two applies of one preview take
turns), leaves out the items that have an outcome already, and records each
item's outcome (done, skipped: changed since the preview, refused: the single
action's rule, with why) in the transaction that acts on it. An apply that
stops half way (a crash, a kill, an outage) committed its chunks and nothing
of the one it was in; running it again acts on the items with no outcome yet,
never twice on one. The preview is applied once every item has an outcome.

A retry or replay takes its items a chunk (``CHUNK``) per transaction,
set-based (:mod:`engine.jobs.bulk.reopening`: the chunk's rows locked in one
statement, compared, the unchanged ones reopened in a few statements); what
that pass hands back, and every item of a cancel or purge, goes one by one
(``_SAVEPOINTS`` a transaction). One by one, a job is locked and compared
(:func:`~engine.jobs.bulk.previews.job_check`); a dead letter after its job's
row (the store's lock order). The action is the single one's (:func:`engine.jobs.admin.retry_in`,
:func:`~engine.jobs.admin.cancel_in`), each item in a savepoint of its own,
audited per item with the preview's id; what it publishes goes after the
transaction commits. An item locked by someone else past the operator's lock
wait gets no outcome (``busy``): a re-run tries it again.
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
from engine.jobs.bulk.reopening import Chunk, reopen_chunk
from engine.store import db
from engine.store.status import AuditSource
from engine.transports import transport_for
from engine.transports.base import Transport

__all__ = ["CHUNK", "BulkApplied", "BulkSkip", "apply"]

CHUNK = 500
"""Items an apply takes at a time (the hooks called, then acted on)."""

# Items per transaction acted on one by one. Each is a savepoint (and a retry's reopen one
# more): 25 keep a transaction under the 64 subtransactions a backend caches, past which every
# other session's snapshot must read pg_subtrans (the subtransaction overflow slowdown).
_SAVEPOINTS = 25


@dataclass(frozen=True)
class BulkSkip:
    """An item not acted on: it changed since the preview, or the action refused it."""

    id: str
    was: str
    why: str


@dataclass
class BulkApplied:
    """What one run of :func:`apply` did: the ids acted on, the ones skipped (changed) or
    refused; ``busy``, those locked by someone else (no outcome: a re-run tries them again);
    ``earlier``, the outcomes earlier runs recorded, by kind; ``complete``, whether every item
    of the preview has an outcome now (the preview is applied)."""

    preview_id: uuid.UUID
    action: str
    done: list[str] = field(default_factory=list)
    skipped: list[BulkSkip] = field(default_factory=list)
    refused: list[BulkSkip] = field(default_factory=list)
    busy: list[BulkSkip] = field(default_factory=list)
    earlier: dict[str, int] = field(default_factory=dict)
    complete: bool = False

    def tally(self, outcomes: list[tuple[BulkItem, str, str | None]]) -> None:
        """Count a set-based chunk's outcomes in."""
        for item, kind, why in outcomes:
            if kind == "done":
                self.done.append(item.id)
            else:
                self.skipped.append(BulkSkip(item.id, item.state, why or ""))

    def left(self) -> str:
        """What an earlier run did and what is left for a re-run, in words ("" when neither)."""
        said = []
        if self.earlier:
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.earlier.items()))
            said.append(f"an earlier run of this apply recorded {kinds}")
        if self.busy:
            said.append(
                f"{len(self.busy)} item(s) locked by someone else were left: run the same "
                "--apply again to finish them"
            )
        return "; ".join(said)

    def as_json(self) -> dict[str, Any]:
        def listed(skips: list[BulkSkip]) -> list[dict[str, str]]:
            return [{"id": s.id, "was": s.was, "why": s.why} for s in skips]

        return {
            "preview_id": str(self.preview_id),
            "action": self.action,
            "done": len(self.done),
            "skipped": listed(self.skipped),
            "refused": listed(self.refused),
            "busy": listed(self.busy),
            "earlier": self.earlier,
            "complete": self.complete,
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
    chunk: int = CHUNK,
) -> BulkApplied:
    """Act on a preview's items with no outcome yet, each re-checked under its lock; see the module.

    ``action``, when given, must be the preview's (``engine cancel --apply``
    of a retry's preview is refused). ``reason`` is required (audited per
    item). ``before_item`` is a test's hook, called before each item is locked.
    """
    if not (reason or "").strip():
        raise BadInput("a bulk apply needs a reason (--reason R): it is audited with every item")
    if chunk < 1:
        raise BadInput(f"bad chunk size {chunk!r}: at least 1")
    who = (actor or "").strip() or operator()
    transport = transport or transport_for(settings)
    with (
        admin.operator_action(
            settings, f"apply of bulk preview {preview_id}", "engine_bulk_previews"
        ),
        _connect(settings) as conn,
    ):
        with conn.transaction():
            head = _lock_open(conn, preview_id)
            if action is not None and head["action"] != action:
                raise BadInput(
                    f"bulk preview {preview_id} is a {head['action']} preview, not {action}: "
                    f"apply it with the {head['action']} command"
                )
            row = store.bulk_preview_select_one(conn, preview_id)
            assert row is not None  # locked just now
            earlier = store.bulk_outcome_counts(conn, preview_id)
        done = BulkApplied(preview_id, head["action"], earlier=earlier)
        items = [BulkItem(*r) for r in row["items"]]
        act = _Act(settings, conn, transport, head["action"], who, source, reason, preview_id)
        for start in range(0, len(items), chunk):
            part = items[start : start + chunk]
            if before_item is not None:
                for item in part:
                    before_item(item)
            with conn.transaction():
                _lock_open(conn, preview_id)
                todo = _not_recorded(conn, preview_id, part)
                try:
                    with conn.transaction():
                        did = reopen_chunk(
                            conn,
                            transport,
                            act.action,
                            todo,
                            who=who,
                            source=source,
                            reason=reason,
                            preview_id=preview_id,
                        )
                except Contention:  # a row of it locked by someone else: item by item
                    did = Chunk(single=todo)
                store.bulk_outcome_insert_many(
                    conn, preview_id, [(i.id, kind, why) for i, kind, why in did.outcomes]
                )
            if did.announced is not None:
                did.announced.publish_after_commit(conn)
            done.tally(did.outcomes)
            for sub in range(0, len(did.single), _SAVEPOINTS):
                act.some(did.single[sub : sub + _SAVEPOINTS], done)
        with conn.transaction():
            store.bulk_preview_lock(conn, preview_id)
            done.complete = store.bulk_preview_mark_applied_if_complete(conn, preview_id, who)
    return done


def _lock_open(conn: psycopg.Connection[Any], preview_id: uuid.UUID) -> dict[str, Any]:
    """Lock the preview's row; its row if it may be applied now, else why not (raised).

    An apply begins before the preview expires; one begun (an outcome recorded) may be
    finished after, each item re-checked against its previewed state all the same.
    """
    head = store.bulk_preview_lock(conn, preview_id)
    if head is None:
        raise BadInput(f"no bulk preview {preview_id}; `--dry-run` writes one and prints its id")
    if head["applied_at"] is not None:
        raise PreviewClosed(
            f"bulk preview {preview_id} was applied already, by {head['applied_by']} at "
            f"{head['applied_at']:%Y-%m-%d %H:%M:%S %Z}; a preview is applied once: "
            "run --dry-run again for what the filter finds now"
        )
    if head["expired"] and not head["begun"]:
        raise PreviewClosed(
            f"bulk preview {preview_id} expired at {head['expires_at']:%Y-%m-%d %H:%M:%S %Z}; "
            "run --dry-run again for what the filter finds now, and apply that"
        )
    return head


def _not_recorded(
    conn: psycopg.Connection[Any], preview_id: uuid.UUID, items: list[BulkItem]
) -> list[BulkItem]:
    """Those of ``items`` with no outcome yet (read under the preview's lock)."""
    recorded = store.bulk_outcome_select_recorded(conn, preview_id, [i.id for i in items])
    return [i for i in items if i.id not in recorded]


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

    def some(self, items: list[BulkItem], done: BulkApplied) -> None:
        """The single action on each of ``items`` with no outcome yet, in one transaction."""
        after: list[Callable[[], object]] = []
        with self.conn.transaction():
            _lock_open(self.conn, self.preview_id)
            todo = _not_recorded(self.conn, self.preview_id, items)
            outcomes = [self.one(item, done, after) for item in todo]
            store.bulk_outcome_insert_many(
                self.conn, self.preview_id, [o for o in outcomes if o is not None]
            )
        for publish in after:
            publish()

    def one(
        self, item: BulkItem, done: BulkApplied, after: list[Callable[[], object]]
    ) -> tuple[str, str, str | None] | None:
        """Act on one item in a savepoint of its own; its outcome to record (``None``: busy)."""
        try:
            with self.conn.transaction():
                changed = (
                    self._dead_letter(item, after)
                    if self.action in DEAD_LETTER_ACTIONS
                    else self._job(item, after)
                )
        except Contention as exc:  # locked by someone else: no outcome, a re-run tries again
            done.busy.append(BulkSkip(item.id, item.state, f"busy: {exc}"))
            return None
        except BadInput as exc:  # the single action's refusal, Refused included
            done.refused.append(BulkSkip(item.id, item.state, str(exc)))
            return (item.id, "refused", str(exc))
        if changed is not None:
            done.skipped.append(BulkSkip(item.id, item.state, changed))
            return (item.id, "skipped", changed)
        done.done.append(item.id)
        return (item.id, "done", None)

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
