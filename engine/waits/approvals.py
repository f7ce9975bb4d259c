"""Approvals: segregation of duties on the signals a flow declares as approvals.

A flow says which of its signals are decisions someone must take for it
(``Flow(..., signals=("approve",), approvals=("approve",))``); a job records
them at submit (migration 0029). Sending one (:func:`engine.signal`, hence
``engine signal`` and the console's Approve and Reject) is refused with
:class:`~engine.errors.ApprovalRefused`, and nothing of the signal is
written, when:

- ``sender``: no sender is known (a signal from code that names nobody);
- ``submitter``: the sender submitted the job, or its parent, grandparent,
  ... (a posting a close submitted is approved by someone other than who
  submitted the close); admins included: the role does not matter here;
- ``barred``: the sender is one of the names the job barred from approving it
  (``ctx.bar_approvers(...)`` in one of its steps, committed with that step:
  a posting bars whoever requeued or redated the documents it judges); the
  engine gives the names no other meaning;
- ``reason``: the data has no non-empty ``reason`` (approve and reject alike).

Who is who is the engine's record: a job's ``submitted_by`` (the CLI's
``user@host`` or ``--by``, a console user's name, Python's ``submitted_by``)
against the signal's sender (``--by`` or ``user@host``, the console's user,
Python's ``sent_by``). Names compare without case and surrounding blanks,
and a bare name (a console user) matches the user part of ``user@host``: in
doubt, the same person. A job whose submitter is not recorded (Python's
``submit`` without ``submitted_by``) has no one to compare against.

Each refusal is recorded in the audit trail (``signal_refused``) on a
connection of its own, in autocommit, so that it stays when the caller's
transaction rolls back (the refusal raises through it).

``ENGINE_ALLOW_SELF_APPROVAL`` (:attr:`Settings.allow_self_approval`)
relaxes the ``submitter`` and ``barred`` rules for a one-person shop: the
approval is sent, and a ``self_approval`` entry records it in the signal's
own transaction. The other two rules stay.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import ApprovalRefused
from engine.jobs.audit import operator, record_action
from engine.store import db
from engine.store.status import AuditSource

__all__ = [
    "BARRED_TAG",
    "Approval",
    "check_approval",
    "record_self_approval",
    "same_person",
]

BARRED_TAG = "approval.barred"
"""The job tag under which a job carries the names barred from approving it."""


@dataclass(frozen=True)
class Approval:
    """An approval signal let through: by whom, and whose job it is if its sender's own."""

    sender: str
    reason: str
    self_approved_as: str | None = None  # the submitter the sender is, when relaxed


def same_person(sender: str, submitter: str) -> bool:
    """Whether ``sender`` and ``submitter`` name the same person (in doubt: yes)."""
    a, b = sender.strip().casefold(), submitter.strip().casefold()
    if a == b:
        return True
    user_a, _, host_a = a.partition("@")
    user_b, _, host_b = b.partition("@")
    return (not host_a or not host_b) and user_a == user_b


def check_approval(
    conn: psycopg.Connection[Any],
    settings: Settings,
    job_id: uuid.UUID,
    name: str,
    data: Any,
    sent_by: str | None,
    source: AuditSource | str,
) -> Approval | None:
    """``None``: ``name`` is no approval of the job; the approval let through; or refused.

    Called under the job's row lock, before the signal is written. A refusal
    is audited on a connection of its own, then raised.
    """
    approvals, parties = store.job_select_approval_parties(conn, job_id)
    if not approvals or name not in approvals:
        return None
    sender = (sent_by or "").strip()
    given = data.get("reason") if isinstance(data, dict) else None
    reason = given.strip() if isinstance(given, str) else ""

    def refuse(rule: str, message: str) -> ApprovalRefused:
        # audited on a connection of its own (autocommit): the entry outlives the caller's
        # transaction, which the refusal rolls back
        with db.connect(settings, autocommit=True) as audit_conn:
            record_action(
                audit_conn,
                "signal_refused",
                "job",
                job_id,
                actor=sender or operator(),
                source=source,
                job_id=job_id,
                reason=given if reason else None,
                detail={"signal": name, "rule": rule, "sender": sent_by, "message": message},
            )
        return ApprovalRefused(message, job_id=job_id, signal=name, sender=sent_by, rule=rule)

    if not sender:
        raise refuse(
            "sender",
            f"approval {name!r} of job {job_id} refused: no sender is known; say who approves "
            "(engine signal --by NAME, the console's signed-in user, or sent_by= in Python)",
        )
    own = [p for p in parties if p["submitted_by"] and same_person(sender, p["submitted_by"])]
    if own and not settings.allow_self_approval:
        first = own[0]
        whose = (
            "this job"
            if first["depth"] == 0
            else f"job {first['id']}, {'its parent' if first['depth'] == 1 else 'an ancestor'}"
        )
        raise refuse(
            "submitter",
            f"approval {name!r} of job {job_id} refused: {sender} submitted {whose}"
            + ("" if first["submitted_by"] == sender else f" (as {first['submitted_by']})")
            + ", and whoever submits a job cannot approve it; "
            "someone else must send it (a one-person shop may set ENGINE_ALLOW_SELF_APPROVAL)",
        )
    barred = [
        value
        for tag, value in store.tag_select_by_job(conn, job_id)
        if tag == BARRED_TAG and same_person(sender, value)
    ]
    if barred and not settings.allow_self_approval:
        raise refuse(
            "barred",
            f"approval {name!r} of job {job_id} refused: {sender} is barred from approving it"
            + ("" if barred[0] == sender else f" (as {barred[0]})")
            + " by the job itself (who prepared what it decides on cannot approve it); "
            "someone else must send it (a one-person shop may set ENGINE_ALLOW_SELF_APPROVAL)",
        )
    if not reason:
        raise refuse(
            "reason",
            f"approval {name!r} of job {job_id} refused: it needs a reason, approve and reject "
            """alike (e.g. --data '{"decision": "approve", "reason": "checked the rejections"}')""",
        )
    relaxed = own[0]["submitted_by"] if own else (barred[0] if barred else None)
    return Approval(sender, reason, relaxed)


def record_self_approval(
    conn: psycopg.Connection[Any],
    job_id: uuid.UUID,
    name: str,
    approval: Approval,
    source: AuditSource | str,
) -> None:
    """Audit an approval its job's own submitter sent (relaxed), in the signal's transaction."""
    record_action(
        conn,
        "self_approval",
        "job",
        job_id,
        actor=approval.sender,
        source=source,
        job_id=job_id,
        reason=approval.reason,
        detail={"signal": name, "submitted_by": approval.self_approved_as},
    )
