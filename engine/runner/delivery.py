"""Delivery: a message in, a claim or a refusal, the message acknowledged as it should be.

Each refusal reason (:mod:`engine.runner.claim`) leaves the message where the
next attempt, or nobody, will find it (a refusal costs no attempt). A won
claim is handed to the slot's :class:`~engine.runner.execution.Executor`; an
eager successor its checkpoint claimed comes back on the outcome and runs
next (:meth:`StepRunner.run_continuation`). A lease this slot cannot use is
given back at once with its attempt (:meth:`StepRunner.give_back`).

A batch of deliveries (:meth:`StepRunner.handle_batch`) is claimed in one
statement, then run in rounds: the step runs claimed, then the eager
successors their checkpoints claimed, and so on; the quick step runs of a
round share one commit (:mod:`engine.runner.group`), in job order (the one
lock order); those that take no StepContext go first, their checkpoints in
one message (:mod:`engine.runner.rounds`). The step runs waiting their turn
keep their leases renewed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from engine import store
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.errors import MalformedMessage, UnknownFlow
from engine.flow.registry import Registry
from engine.infra import faults
from engine.jobs.plan import Outputs
from engine.runner.claim import claim, claim_many
from engine.runner.execution import Executor
from engine.runner.lease import Heartbeat, Lease
from engine.runner.outcome import Continuation, Outcome
from engine.runner.rounds import RoundMember, pure, run_round
from engine.store.rows import Claimed, ClaimRefused
from engine.store.status import EventKind
from engine.transports.announce import announce
from engine.transports.base import Received, Transport
from engine.transports.message import StepMessage

log = logging.getLogger(__name__)

# A step run refused here because its flow version is not loaded, while a live worker
# has it loaded: its fresh copy is due after this long (at most ENGINE_REFUSAL_DELAY_S),
# so the refusal never holds it back from that worker, and never spins here.
HANDOFF_S = 1.0


@dataclass
class _Member:
    """A claimed step run of a batch, waiting its turn under a watched lease."""

    lease: Lease
    known: Outputs
    check_lease: bool = False  # see Continuation

    @property
    def flow(self) -> str:
        return self.lease.claimed.flow

    @property
    def step(self) -> str:
        return self.lease.claimed.step


def keyed(member: _Member) -> bool:
    """Does ``member`` hold a concurrency key's slot (so its checkpoint commits alone)?"""
    return member.lease.claimed.concurrency_key is not None


class StepRunner:
    """Handles deliveries on one executor slot (one connection, one heartbeat)."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: Registry,
        transport: Transport,
        worker: str,
        conn: psycopg.Connection[Any],
        heartbeat: Heartbeat,
        alerts: AlertRecorder,
        may_continue: Callable[[], bool] = lambda: True,
        on_outage: Callable[[BaseException, str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.transport = transport
        self.worker = worker
        self.alerts = alerts
        self.runnable = registry.runnable()
        # the eager successor the last checkpoint claimed for this slot, not run yet
        self.continuation: Continuation | None = None
        # whether the slot's next receive takes a batch (see _run_rounds)
        self.wants_batch = False
        self.executor = Executor(
            settings=settings,
            registry=registry,
            transport=transport,
            worker=worker,
            conn=conn,
            heartbeat=heartbeat,
            alerts=alerts,
            may_continue=may_continue,
            on_outage=on_outage,
        )

    @property
    def conn(self) -> psycopg.Connection[Any]:
        return self.executor.conn

    @property
    def current(self) -> Lease | None:
        """The lease of the step run executing now, if any."""
        return self.executor.current

    def handle(self, received: Received) -> Outcome:
        try:
            message = StepMessage.decode(received.body)
        except MalformedMessage as exc:
            return self._malformed(received, str(exc))
        sent = time.monotonic()
        result = claim(self.conn, message, self.worker, self.settings.lease_s, self.runnable)
        if isinstance(result, ClaimRefused):
            return self._refused(received, message, result)
        self.executor.clock.claimed(result, self.settings.lease_s, sent)
        faults.hit("after_claim")
        return self._run_member(self._watched(result, received.receipt, {}))

    def handle_batch(self, batch: Sequence[Received]) -> list[Outcome]:
        """Claim ``batch`` in one statement, then run what was won and what it leads to."""
        outcomes: list[Outcome] = []
        messages: list[tuple[Received, StepMessage]] = []
        for received in batch:
            try:
                messages.append((received, StepMessage.decode(received.body)))
            except MalformedMessage as exc:
                outcomes.append(self._malformed(received, str(exc)))
        won: dict[Any, Claimed] = {}
        if len(messages) > 1:
            sent = time.monotonic()
            for claimed in claim_many(
                self.conn,
                [message for _, message in messages],
                self.worker,
                self.settings.lease_s,
                self.runnable,
            ):
                won[claimed.id] = claimed
                self.executor.clock.claimed(claimed, self.settings.lease_s, sent)
        members: list[_Member] = []
        for received, message in messages:
            # a copy of the same message twice in one batch is claimed once
            result: Claimed | ClaimRefused | None = won.pop(message.step_run_id, None)
            if result is None:
                sent = time.monotonic()
                result = claim(
                    self.conn, message, self.worker, self.settings.lease_s, self.runnable
                )
                if isinstance(result, Claimed):
                    self.executor.clock.claimed(result, self.settings.lease_s, sent)
            if isinstance(result, ClaimRefused):
                outcomes.append(self._refused(received, message, result))
                continue
            members.append(self._watched(result, received.receipt, {}))
        outcomes += self._run_rounds(members)
        return outcomes

    def _run_rounds(self, members: list[_Member]) -> list[Outcome]:
        """Run ``members``, then the eager successors they claimed, round after round.

        In a round the quick step runs go first, in job order (the one lock
        order of their shared transaction), then one step run that is not
        quick; the other step runs that are not quick are given back first,
        for other slots to run beside it rather than wait behind it.
        """
        outcomes: list[Outcome] = []
        group = self.executor.group
        ran: list[Claimed] = []
        while members:
            quick = [m for m in members if group.quick(m.flow, m.step)]
            slow = [m for m in members if not group.quick(m.flow, m.step)]
            quick.sort(key=lambda m: m.lease.claimed.job_id.bytes)
            for member in slow[1:]:
                self._give_back_member(member, "claimed in a batch behind a step that is not quick")
            following: list[_Member] = []
            # the pure ones checkpoint together first, in one message (engine.runner.rounds)
            together, quick = self._together(quick)
            for rounded, outcome in zip(together, self._run_together(together), strict=True):
                outcomes.append(outcome)
                ran.append(rounded.lease.claimed)
                continuation = outcome.continuation
                if continuation is not None:
                    following.append(
                        self._watched(
                            continuation.claimed, None, continuation.known, continuation.check_lease
                        )
                    )
            members = quick + slow[:1]
            for index, member in enumerate(members):
                if not self.executor.may_continue():
                    group.commit()
                    for rest in members[index:]:
                        self._give_back_member(rest, "worker stopping")
                    break
                if member.lease.receipt is not None:
                    faults.hit("after_claim")
                if len(quick) > 1 and index < len(quick) and not keyed(member):
                    group.begin(member.flow, member.step)
                else:
                    # alone: not quick, or holding a key (its checkpoint holds the
                    # key's lock until it commits, so it never waits for a neighbour)
                    group.commit()
                outcomes.append(self._run_member(member))
                ran.append(member.lease.claimed)
                continuation, self.continuation = self.continuation, None
                if continuation is not None:
                    following.append(
                        self._watched(
                            continuation.claimed, None, continuation.known, continuation.check_lease
                        )
                    )
            group.commit()
            members = following
        # the next receive takes a batch only while what this slot runs is quick
        self.wants_batch = bool(ran) and all(group.quick(c.flow, c.step) for c in ran)
        return outcomes

    def _together(self, quick: list[_Member]) -> tuple[list[RoundMember], list[_Member]]:
        """Of ``quick`` (in job order), those a round runs together, and the rest.

        Steps without a context and without a concurrency key (each keyed
        checkpoint commits alone: :mod:`engine.runner.group`), of distinct
        jobs, on the PostgreSQL transport; two at least, and none while the
        worker is stopping.
        """
        if len(quick) < 2 or not self.transport.transactional or not self.executor.may_continue():
            return [], quick
        together: list[RoundMember] = []
        rest: list[_Member] = []
        jobs: set[Any] = set()
        for member in quick:
            claimed = member.lease.claimed
            try:
                flow = self.registry.get(member.flow)
                step = flow.steps[member.step]
            except (UnknownFlow, KeyError):
                rest.append(member)  # given back on the one-by-one path
                continue
            if (
                not pure(step)
                or member.check_lease
                or claimed.job_id in jobs
                or claimed.concurrency_key is not None
            ):
                rest.append(member)
            else:
                together.append(RoundMember(flow, step, member.lease, member.known))
                jobs.add(claimed.job_id)
        if len(together) < 2:
            return [], quick
        return together, rest

    def _run_together(self, together: list[RoundMember]) -> list[Outcome]:
        if not together:
            return []
        for member in together:
            if member.lease.receipt is not None:
                faults.hit("after_claim")
        return run_round(self.executor, together)

    def _give_back_member(self, member: _Member, reason: str) -> None:
        self.executor.heartbeat.unwatch(member.lease)
        self.give_back(member.lease, reason=reason)

    def _run_member(self, member: _Member) -> Outcome:
        claimed = member.lease.claimed
        lost = self.executor.group.lost
        if claimed.id in lost:
            # an eager successor claimed in a group that was rolled back: it was
            # never created; its predecessor was given back and makes it again
            lost.discard(claimed.id)
            self.executor.heartbeat.unwatch(member.lease)
            return Outcome("released", "claimed in a group that was rolled back", claimed.id)
        if member.check_lease:
            # An external transport's publish and delete came between the
            # commit that claimed it and now, and may have outlasted its lease
            # (invariant 9): renew it, or leave it to whoever reclaimed it.
            expires = store.lease_extend_if_owner(
                self.conn, claimed.id, claimed.token, self.settings.lease_s
            )
            if expires is None:
                self.executor.heartbeat.unwatch(member.lease)
                return self.executor.failures.fenced(
                    member.lease, "eager successor's lease lapsed before it started"
                )
        try:
            flow = self.registry.get(claimed.flow)
            step = flow.steps[claimed.step]
        except (UnknownFlow, KeyError) as exc:
            # a worker deployed without this flow must not hold it: give it back
            self.executor.heartbeat.unwatch(member.lease)
            self.executor.group.commit()
            log.error("cannot run %s/%s here: %s", claimed.flow, claimed.step, exc)
            self.give_back(member.lease, reason=f"flow or step not registered here: {exc}")
            return Outcome("refused", f"flow or step not registered: {exc}", claimed.id)
        outcome = self.executor.run(flow, step, member.lease, member.known)
        self.continuation = outcome.continuation
        return outcome

    def held(self) -> list[Lease]:
        """The leases this slot holds now: the step running and those waiting their turn."""
        return self.executor.heartbeat.watched()

    def run_continuation(self) -> Outcome | None:
        """Run the eager successor the last step claimed; ``None`` if there is none."""
        continuation, self.continuation = self.continuation, None
        if continuation is None:
            return None
        return self._run_member(
            self._watched(continuation.claimed, None, continuation.known, continuation.check_lease)
        )

    def _watched(
        self, claimed: Claimed, receipt: str | None, known: Outputs, check_lease: bool = False
    ) -> _Member:
        """``claimed`` as a member whose lease the heartbeat renews from now on."""
        lease = Lease(claimed, receipt, clock=self.executor.clock)
        self.executor.heartbeat.watch(lease)
        return _Member(lease, known, check_lease)

    def give_back(
        self, lease: Lease, conn: psycopg.Connection[Any] | None = None, *, reason: str
    ) -> bool:
        """Release the lease at once and make the step run visible to other workers.

        See :meth:`engine.runner.failures.Failures.give_back`. ``False``: the
        lease was lost already.
        """
        return self.executor.failures.give_back(lease, conn, reason=reason)

    def _send_round_again(
        self,
        received: Received,
        message: StepMessage,
        delay_s: float,
        *,
        not_runnable: bool = False,
    ) -> None:
        """Replace the delivery by a fresh copy due after ``delay_s`` (a refusal at no attempt).

        ``not_runnable``: its flow version is not loaded here; while a live
        worker has it loaded the copy is due after :data:`HANDOFF_S` instead
        (at most ``delay_s``), so this refusal never hides it from that worker
        (a step run a reclaim announced would wait the whole refusal delay).

        Returning the same copy would count receives, and SQS would move it to
        its dead-letter queue. The copy is an outbox row like any announcement,
        which the sweeper reads as "announced": otherwise it would add a copy
        every ``republish_after_s`` while the step run waits, each refused
        and sent round again. On the PostgreSQL transport the copy and the
        delete commit together; on SQS the delete follows the publish.
        """
        conn = self.conn
        inside = self.transport.transactional
        with conn.transaction():
            if not_runnable:
                outbox_id = store.outbox_insert_after_not_runnable(
                    conn,
                    message.step_run_id,
                    handoff_s=min(HANDOFF_S, delay_s),
                    delay_s=delay_s,
                    live_s=self.settings.worker_live_s,
                )
            else:
                outbox_id = store.outbox_insert_after(conn, message.step_run_id, delay_s)
            announced = announce(conn, self.transport, outbox_ids=[outbox_id])
            if inside:
                self.transport.delete([received.receipt], conn)
        announced.publish_after_commit(conn)
        if not inside:
            # a failed publish is relayed by the sweeper: the outbox row is committed
            self.transport.delete([received.receipt])

    def _malformed(self, received: Received, reason: str) -> Outcome:
        with self.conn.transaction():  # the dead letter and its alert commit together
            dead_letter = store.dead_letter_insert_message_logged(
                self.conn, self.worker, received, reason
            )
            alerted = self.alerts.record(self.conn, dead_letter)
        if alerted:
            self.alerts.wake()
        self.transport.dead_letter(received, reason)
        log.warning("malformed message %s dead-lettered: %s", received.message_id, reason)
        return Outcome("malformed", reason)

    def _refused(self, received: Received, message: StepMessage, refused: ClaimRefused) -> Outcome:
        if refused.reason == "unknown":
            with self.conn.transaction():
                store.event_insert(
                    self.conn,
                    EventKind.MESSAGE_DROPPED,
                    worker=self.worker,
                    detail={
                        "reason": "unknown step run",
                        "step_run_id": str(message.step_run_id),
                        "job_id": str(message.job_id),
                    },
                )
            log.info("dropped message for unknown step run %s", message.step_run_id)
            self.transport.delete([received.receipt])
            return Outcome("dropped", "unknown step run", message.step_run_id)
        if refused.reason in ("finished", "waiting"):
            # a waiting step run is announced anew when its signal or deadline wakes it
            self.transport.delete([received.receipt])
        elif refused.reason == "not_runnable":
            # a worker of another deploy (a rolling update) can run it: at once if one is live
            self._send_round_again(
                received, message, self.settings.refusal_delay_s, not_runnable=True
            )
        elif refused.reason == "over_limit":
            # Waiting for a slot of its key is not a failure. The delayed copy is a
            # backstop only: a holder of the key that finishes announces the next
            # waiting step run in its own commit, so nobody polls in a tight loop.
            self._send_round_again(received, message, self.settings.over_limit_delay_s)
        elif refused.reason == "race":
            # a lock wait or a deadlock lost to another transaction: soon again
            self.transport.extend([received.receipt], 1.0)
        elif refused.reason == "not_due" and refused.retry_in_s > 0:
            # come back when the backoff ends rather than after a full visibility timeout
            self.transport.extend([received.receipt], min(refused.retry_in_s + 0.5, 43_000))
        elif refused.reason == "held":
            # Leave the copy as a backup should the holder die, but hidden for long:
            # each return counts as a receive, and on SQS too many receives move it
            # to the dead-letter queue while the step is still running. Liveness
            # does not rest on it: the sweeper re-announces an expired lease.
            hide = max(refused.retry_in_s, self.settings.republish_after_s) * 2
            self.transport.extend([received.receipt], min(hide, 43_000))
        # exhausted: leave the copy; the sweeper dead-letters the step run
        return Outcome("refused", refused.reason, message.step_run_id)
