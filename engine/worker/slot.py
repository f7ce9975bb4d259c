"""An executor slot: one thread of a worker that claims and runs step runs.

A worker has ``ENGINE_CONCURRENCY`` slots (:class:`engine.worker.worker.Worker`
starts them and stops them). Each slot has its own connection, its own
:class:`~engine.runner.StepRunner` and its own heartbeat. It takes a batch of
deliveries from the worker's inbox, claims and runs them (eager successors in
the same call), then tries to receive its next batch itself, without
waiting, and hands itself back to the main thread only when none is visible.

Invariants kept here (numbered in DESIGN.md):

- 4: each slot's heartbeat renews the leases and extends the visibility of
  the step runs it holds, on a thread of its own;
- 11: a message the slot cannot handle never ends its thread: the failure is
  logged, the connection is opened afresh, and the deliveries come back;
- 12: a slot receives nothing once the worker is stopping, and gives back
  at once what it received while it was told to stop;
- 15: during a database outage a slot receives nothing (on SQS each receive
  counts towards the redrive to the dead-letter queue) and makes visible
  again the deliveries it could not claim.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from engine import tracing
from engine.infra import logs
from engine.infra.outage import is_outage
from engine.runner import StepRunner
from engine.runner.lease import Heartbeat
from engine.runner.services import SlotServices
from engine.store.leases import lease_owner
from engine.transports.base import Received

if TYPE_CHECKING:
    from engine.worker.worker import Worker

__all__ = ["Slot"]

log = logging.getLogger(__name__)


class Slot:
    """One executor slot of ``worker``: a thread that runs the batches it is handed.

    ``connect`` opens the slot's connection (again after one broke).
    """

    def __init__(
        self, worker: Worker, index: int, *, connect: Callable[[], psycopg.Connection[Any]]
    ) -> None:
        self.worker = worker
        self._connect = connect
        self.name = lease_owner(worker.worker_id, index)
        self.heartbeat = Heartbeat(
            worker.settings, worker.transport, self.name, on_outage=worker.outage.failed
        )
        self.runner: StepRunner | None = None
        # what the slot's collaborators share; its connection is opened in _runner
        self._services: SlotServices | None = None
        self.busy = False
        self.thread = threading.Thread(
            target=logs.inheriting(self._loop), name=f"slot-{index}", daemon=True
        )

    def _runner(self) -> StepRunner:
        if self.runner is None or self.runner.conn.closed:
            conn = self._connect()
            # a claim is one statement (one round trip); the step's own
            # transaction is begun explicitly by the runner
            conn.autocommit = True
            self.runner = StepRunner(self._services_on(conn))
        return self.runner

    def _services_on(self, conn: psycopg.Connection[Any]) -> SlotServices:
        """The slot's services, built once, on ``conn`` (a fresh one after one broke)."""
        if self._services is None:
            worker = self.worker
            self._services = SlotServices(
                settings=worker.settings,
                registry=worker.registry,
                transport=worker.transport,
                worker=self.name,
                conn=conn,
                heartbeat=self.heartbeat,
                alerts=worker.alerts,
                may_continue=lambda: not worker.stop_event.is_set(),
                on_outage=worker.outage.failed,
                traces=tracing.traces(),
            )
        else:
            self._services = self._services.evolve(conn=conn)
        return self._services

    def _loop(self) -> None:
        inbox = self.worker.inbox
        batch: list[Received] | None = None
        while True:
            if not batch:
                batch = inbox.get()
                if batch is None:
                    return
            self.busy = True
            try:
                runner = self._runner()
                # claimed in one statement; eager successors run in the same call
                for outcome in runner.handle_batch(batch):
                    self.worker.outcome(outcome)
            except Exception as exc:
                # a broken connection or an unexpected driver error: the
                # deliveries come back after their visibility timeout, eager
                # successors once their leases lapse (the sweeper); start afresh
                if self.runner is not None:
                    self.runner.executor.heartbeat.unwatch()
                    self.runner.executor.group.abandon()
                if is_outage(exc):
                    self.worker.outage.failed(exc, f"slot {self.name}")
                    self._give_back_unclaimed(batch)
                else:
                    log.exception(
                        "slot %s failed handling message(s) %s",
                        self.name,
                        ", ".join(r.message_id for r in batch),
                    )
                if self.runner is not None:
                    self.runner.conn.close()
            finally:
                self.busy = False
            batch = self._receive_next()
            if not batch:
                self.worker.slot_freed()

    def _give_back_unclaimed(self, batch: list[Received]) -> None:
        # Nobody receives during an outage, so the copies can be visible at once
        # and are claimed as soon as the database is back (with the PostgreSQL
        # transport this fails too, and the copies return after their visibility).
        try:
            self.worker.transport.release([r.receipt for r in batch])
        except Exception:
            log.debug("could not release %d deliveries during the outage", len(batch))

    def _receive_next(self) -> list[Received]:
        """Visible messages for this slot (a claim batch), without waiting; none, or stopping.

        Keeps a busy worker's slot from idling while the main thread wakes up
        and receives for it; only the main thread waits for messages.
        """
        worker = self.worker
        if worker.stop_event.is_set() or worker.outage.down.is_set():
            return []
        try:
            # a batch while this slot's steps are quick (group commit), else one
            runner = self.runner
            size = worker.settings.claim_batch if runner is not None and runner.wants_batch else 1
            batch = worker.transport.receive(size, worker.settings.visibility_s, 0.0)
            if batch and worker.stop_event.is_set():
                worker.transport.release([r.receipt for r in batch])
                return []
        except Exception as exc:
            # never out of the slot's thread: the main thread receives instead
            if is_outage(exc):
                worker.outage.failed(exc, f"slot {self.name}")
            else:
                log.warning(
                    "slot %s: receive failed; the main thread receives", self.name, exc_info=True
                )
            return []
        return batch
