"""Delivery: a message in, a claim or a refusal, the message acknowledged as it should be.

Each refusal reason (:mod:`engine.runner.claim`) leaves the message where the
next attempt, or nobody, will find it (a refusal costs no attempt,
:mod:`engine.runner.refusal`). A won
claim is handed to the slot's :class:`~engine.runner.execution.Executor`; an
eager successor its checkpoint claimed comes back on the outcome and runs
next (:meth:`StepRunner.run_continuation`). A lease this slot cannot use is
given back at once with its attempt (:meth:`StepRunner.give_back`).

A batch of deliveries (:meth:`StepRunner.handle_batch`) is claimed in one
statement, then run in rounds: the step runs claimed, then the eager
successors their checkpoints claimed, and so on; the quick step runs of a
round share one commit (:mod:`engine.runner.group`), in job order (the one
lock order); those that take no StepContext go first, their checkpoints in
one message (a :class:`~engine.runner.rounds.Round`). The step runs waiting
their turn keep their leases renewed; each becomes an
:class:`~engine.runner.attempt.Attempt` when its turn comes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from engine import store
from engine.errors import MalformedMessage, UnknownFlow
from engine.flow import Flow, Step
from engine.infra import faults
from engine.jobs.plan import Outputs
from engine.runner.attempt import Attempt
from engine.runner.claim import claim, claim_many
from engine.runner.execution import Executor
from engine.runner.lease import Lease
from engine.runner.outcome import Continuation, Outcome
from engine.runner.refusal import HANDOFF_S, Refusals
from engine.runner.rounds import Round, pure
from engine.runner.services import SlotServices
from engine.runner.timing import Timing
from engine.store.rows import Claimed, ClaimRefused
from engine.transports.base import Received
from engine.transports.message import StepMessage

__all__ = ["HANDOFF_S", "StepRunner"]

log = logging.getLogger(__name__)


@dataclass
class _Member:
    """A claimed step run of a batch, waiting its turn under a watched lease."""

    lease: Lease
    known: Outputs
    check_lease: bool = False  # see Continuation

    @property
    def claimed(self) -> Claimed:
        return self.lease.claimed

    @property
    def flow(self) -> str:
        return self.claimed.flow

    @property
    def step(self) -> str:
        return self.claimed.step


def keyed(member: _Member) -> bool:
    """Does ``member`` hold a concurrency key's slot (so its checkpoint commits alone)?"""
    return member.claimed.concurrency_key is not None


class StepRunner:
    """Handles deliveries on one executor slot (one connection, one heartbeat)."""

    def __init__(self, services: SlotServices) -> None:
        self.services = services
        self.runnable = services.registry.runnable()
        # the eager successor the last checkpoint claimed for this slot, not run yet
        self.continuation: Continuation | None = None
        # whether the slot's next receive takes a batch (see _run_rounds)
        self.wants_batch = False
        self.executor = Executor(services)
        self.refusals = Refusals(services)

    @property
    def conn(self) -> psycopg.Connection[Any]:
        return self.executor.conn

    @property
    def current(self) -> Attempt | None:
        """The attempt executing now, if any."""
        return self.executor.current

    def handle(self, received: Received) -> Outcome:
        try:
            message = StepMessage.decode(received.body)
        except MalformedMessage as exc:
            return self.refusals.malformed(received, str(exc))
        sent = time.monotonic()
        result = claim(
            self.conn, message, self.services.worker, self.services.settings.lease_s, self.runnable
        )
        if isinstance(result, ClaimRefused):
            return self.refusals.refused(received, message, result)
        self.executor.clock.claimed(result, self.services.settings.lease_s, sent)
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
                outcomes.append(self.refusals.malformed(received, str(exc)))
        won: dict[Any, Claimed] = {}
        if len(messages) > 1:
            sent = time.monotonic()
            for claimed in claim_many(
                self.conn,
                [message for _, message in messages],
                self.services.worker,
                self.services.settings.lease_s,
                self.runnable,
            ):
                won[claimed.id] = claimed
                self.executor.clock.claimed(claimed, self.services.settings.lease_s, sent)
        members: list[_Member] = []
        for received, message in messages:
            # a copy of the same message twice in one batch is claimed once
            result: Claimed | ClaimRefused | None = won.pop(message.step_run_id, None)
            if result is None:
                sent = time.monotonic()
                result = claim(
                    self.conn,
                    message,
                    self.services.worker,
                    self.services.settings.lease_s,
                    self.runnable,
                )
                if isinstance(result, Claimed):
                    self.executor.clock.claimed(result, self.services.settings.lease_s, sent)
            if isinstance(result, ClaimRefused):
                outcomes.append(self.refusals.refused(received, message, result))
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
            quick.sort(key=lambda m: m.claimed.job_id.bytes)
            for member in slow[1:]:
                self._give_back_member(member, "claimed in a batch behind a step that is not quick")
            following: list[_Member] = []
            # the pure ones checkpoint together first, in one message (engine.runner.rounds)
            together, quick = self._together(quick)
            for attempt, outcome in zip(together, self._run_together(together), strict=True):
                outcomes.append(outcome)
                ran.append(attempt.claimed)
                following += self._following(outcome.continuation)
            members = quick + slow[:1]
            for index, member in enumerate(members):
                if not self.services.may_continue():
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
                ran.append(member.claimed)
                continuation, self.continuation = self.continuation, None
                following += self._following(continuation)
            group.commit()
            members = following
        # the next receive takes a batch only while what this slot runs is quick
        self.wants_batch = bool(ran) and all(group.quick(c.flow, c.step) for c in ran)
        return outcomes

    def _following(self, continuation: Continuation | None) -> list[_Member]:
        """The eager successor a checkpoint claimed, watched, for the next round."""
        if continuation is None:
            return []
        return [self._continued(continuation)]

    def _together(self, quick: list[_Member]) -> tuple[list[Attempt], list[_Member]]:
        """Of ``quick`` (in job order), those a round runs together, and the rest.

        Steps without a context and without a concurrency key (each keyed
        checkpoint commits alone: :mod:`engine.runner.group`), of distinct
        jobs, on the PostgreSQL transport; two at least, and none while the
        worker is stopping.
        """
        if (
            len(quick) < 2
            or not self.services.transport.transactional
            or not self.services.may_continue()
        ):
            return [], quick
        together: list[Attempt] = []
        rest: list[_Member] = []
        jobs: set[Any] = set()
        for member in quick:
            claimed = member.claimed
            try:
                flow = self.services.registry.get(member.flow)
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
                together.append(self._attempt(flow, step, member))
                jobs.add(claimed.job_id)
        if len(together) < 2:
            return [], quick
        return together, rest

    def _run_together(self, together: list[Attempt]) -> list[Outcome]:
        if not together:
            return []
        for attempt in together:
            if attempt.receipt is not None:
                faults.hit("after_claim")
        return Round(self.executor, together).run()

    def _give_back_member(self, member: _Member, reason: str) -> None:
        self.executor.heartbeat.unwatch(member.lease)
        self.give_back(member.lease, reason=reason)

    def _run_member(self, member: _Member) -> Outcome:
        claimed = member.claimed
        lost = self.executor.group.lost
        if claimed.id in lost:
            # an eager successor claimed in a group that was rolled back: it was
            # never created; its predecessor was given back and makes it again
            lost.discard(claimed.id)
            self.executor.heartbeat.unwatch(member.lease)
            return Outcome("released", "claimed in a group that was rolled back", claimed.id)
        try:
            flow = self.services.registry.get(claimed.flow)
            step = flow.steps[claimed.step]
        except (UnknownFlow, KeyError) as exc:
            # a worker deployed without this flow must not hold it: give it back
            self.executor.heartbeat.unwatch(member.lease)
            self.executor.group.commit()
            log.error("cannot run %s/%s here: %s", claimed.flow, claimed.step, exc)
            self.give_back(member.lease, reason=f"flow or step not registered here: {exc}")
            return Outcome("refused", f"flow or step not registered: {exc}", claimed.id)
        attempt = self._attempt(flow, step, member)
        if member.check_lease:
            # An external transport's publish and delete came between the
            # commit that claimed it and now, and may have outlasted its lease
            # (invariant 9): renew it, or leave it to whoever reclaimed it.
            expires = store.lease_extend_if_owner(
                self.conn, claimed.id, claimed.token, self.services.settings.lease_s
            )
            if expires is None:
                self.executor.heartbeat.unwatch(member.lease)
                return self.executor.failures.fenced(
                    attempt, "eager successor's lease lapsed before it started"
                )
        outcome = self.executor.run(attempt)
        self.continuation = outcome.continuation
        return outcome

    def _attempt(self, flow: Flow, step: Step, member: _Member) -> Attempt:
        worker = self.services.worker
        trace = self.services.traces.attempt(member.claimed, worker)
        return Attempt(flow, step, member.lease, member.known, worker, trace)

    def held(self) -> list[Lease]:
        """The leases this slot holds now: the step running and those waiting their turn."""
        return self.executor.heartbeat.watched()

    def run_continuation(self) -> Outcome | None:
        """Run the eager successor the last step claimed; ``None`` if there is none."""
        continuation, self.continuation = self.continuation, None
        if continuation is None:
            return None
        return self._run_member(self._continued(continuation))

    def _continued(self, continuation: Continuation) -> _Member:
        return self._watched(
            continuation.claimed, None, continuation.known, continuation.check_lease
        )

    def _watched(
        self, claimed: Claimed, receipt: str | None, known: Outputs, check_lease: bool = False
    ) -> _Member:
        """``claimed`` as a member whose lease the heartbeat renews from now on."""
        lease = Lease(claimed, receipt, Timing(self.executor.clock))
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
