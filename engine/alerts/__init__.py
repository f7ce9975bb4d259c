"""Alerts: exactly one per dead letter, recorded with it, delivered to every sink.

And ``source: release``: a step run given back at no charge past
``ENGINE_FREE_RELEASES_MAX`` (its checkpoint kept losing lock waits) has
that attempt charged, alerted once with the reason
(:meth:`engine.runner.failures.Failures.release_free`).

One more kind (``source: version``): a flow version that active jobs need
and no live worker has loaded for ``ENGINE_VERSION_ORPHAN_ALERT_S`` gets one
alert per orphan episode, recorded by the sweeper (:mod:`engine.worker.roster`)
and delivered the same way. And ``source: schedule``: a scheduled time that
did not submit its job gets one alert per schedule and time, whether its
submit was refused or raised (recorded by the firer with the fire) or no live
worker loads its flow (recorded by the sweeper once it is
``ENGINE_SCHEDULE_UNLOADED_ALERT_S`` late).

A dead letter (a step run past its attempt cap, a message that can never be
handled) is written together with its alert, in one transaction, by
:class:`AlertRecorder`: one alert row per dead letter (a unique key), and one
delivery row per configured sink (``ENGINE_ALERT_SINKS``: ``log``, ``sns``,
``webhook``). Whichever worker's :class:`~engine.alerts.dispatch.AlertDispatcher`
finds a due delivery claims it (a conditional UPDATE with a token, like a
step run), sends it, and records the outcome; a sink that was down is tried
again with backoff, and a delivered alert is never sent again. Several
workers, or several sweepers seeing the same expired lease, still make one
alert and one delivery per sink.

The one window left is the sink's own: a dispatcher that dies after a sink
accepted the alert but before its commit leaves the claim to lapse, and the
next dispatcher sends it again. Every payload carries the alert's id so the
receiver can tell.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import psycopg

from engine import store
from engine.store.rows import ClaimedDelivery
from engine.store.status import FireOutcome

__all__ = ["Alert", "AlertRecorder", "AlertSink"]


@dataclass(frozen=True)
class Alert:
    """What an alert says: the dead letter's job, flow, step, attempts and error."""

    reason: str
    job_id: uuid.UUID | None = None
    step_run_id: uuid.UUID | None = None
    flow: str | None = None
    step: str | None = None
    attempts: int | None = None
    error: str = ""  # the last error's first line
    report_link: str | None = None
    alert_id: int | None = None
    source: str = "step"
    created_at: datetime | None = None
    flow_version: int | None = None
    schedule: str | None = None
    scheduled_for: datetime | None = None

    @classmethod
    def of_delivery(cls, delivery: ClaimedDelivery, report_link: str | None) -> Alert:
        """The alert a claimed delivery sends (``report_link``: the job's report, if any)."""
        return cls(
            # first lines only: a driver's DETAIL lines may quote a document's values, which
            # stay in the database (the report shows them) and never go to a chat or a pager
            reason=delivery.reason.partition("\n")[0],
            job_id=delivery.job_id,
            step_run_id=delivery.step_run_id,
            flow=delivery.flow,
            step=delivery.step,
            attempts=delivery.attempts,
            error=delivery.error_line,
            report_link=report_link,
            alert_id=delivery.alert_id,
            source=delivery.source,
            created_at=delivery.created_at,
            flow_version=delivery.flow_version,
            schedule=delivery.schedule,
            scheduled_for=delivery.scheduled_for,
        )

    @property
    def title(self) -> str:
        """One line: what died where."""
        if self.source == "message":
            return "dead letter: a message that can never be handled"
        if self.source == "version":
            return f"flow {self.flow} version {self.flow_version}: loaded by no live worker"
        if self.source == "schedule":
            return f"schedule {self.schedule}: {self.error}"
        if self.source == "release":
            where = f"{self.flow or '?'}/{self.step or '?'}"
            return f"attempt charged: {where} of job {self.job_id} kept being released for free"
        where = f"{self.flow or '?'}/{self.step or '?'}"
        return f"dead letter: {where} of job {self.job_id}"

    def fields(self) -> dict[str, Any]:
        """The alert as JSON-ready fields (a webhook's or an SNS message's data)."""
        return {
            "alert_id": self.alert_id,
            "source": self.source,
            "job_id": None if self.job_id is None else str(self.job_id),
            "flow": self.flow,
            "flow_version": self.flow_version,
            "step": self.step,
            "step_run_id": None if self.step_run_id is None else str(self.step_run_id),
            "attempts": self.attempts,
            "error": self.error,
            "reason": self.reason,
            "report": self.report_link,
            "created_at": None if self.created_at is None else self.created_at.isoformat(),
            "schedule": self.schedule,
            "scheduled_for": None if self.scheduled_for is None else self.scheduled_for.isoformat(),
        }

    def text(self) -> str:
        """A few readable lines: the title, then each field that is known."""
        lines = [self.title]
        # a schedule's error is its title; its reason says which time and what to do
        told = self.source in ("message", "version", "schedule")
        for name, value in (
            ("schedule", self.schedule),
            (
                "scheduled for",
                None if self.scheduled_for is None else self.scheduled_for.isoformat(),
            ),
            ("job", self.job_id if self.source != "version" else None),
            ("oldest job", self.job_id if self.source == "version" else None),
            ("flow", self.flow),
            ("version", self.flow_version),
            ("step", self.step),
            ("attempts", self.attempts),
            ("error", self.error if self.source not in ("version", "schedule") else None),
            ("report", self.report_link),
            ("reason", self.reason if told else None),
            ("alert", self.alert_id),
        ):
            if value not in (None, ""):
                lines.append(f"{name}: {value}")
        return "\n".join(lines)


class AlertSink(Protocol):
    """Somewhere alerts go; ``send`` raises when the alert did not get there."""

    @property
    def name(self) -> str: ...

    def send(self, alert: Alert) -> None: ...


@dataclass
class AlertRecorder:
    """Writes a dead letter's alert in the dead letter's own transaction.

    ``sinks`` names the delivery rows to make (the sinks this worker is
    configured with). The caller calls :meth:`wake` once its transaction
    committed, so the worker's dispatcher sends without waiting for its next
    round (before the commit it would find nothing).
    """

    sinks: Sequence[str]
    wake: Callable[[], None] = field(default=lambda: None)

    def record(self, conn: psycopg.Connection[Any], dead_letter_id: int | None) -> bool:
        """Write the alert of a dead letter this transaction just made.

        ``True`` when this call made the alert; ``False`` when there is no new
        dead letter (``None``: another worker or sweeper made it) or the dead
        letter was alerted already.
        """
        if dead_letter_id is None:
            return False
        return store.alert_insert_for_dead_letter(conn, dead_letter_id, self.sinks) is not None

    def record_release(
        self, conn: psycopg.Connection[Any], step_run_id: uuid.UUID, *, error_line: str, reason: str
    ) -> bool:
        """Alert the attempt of ``step_run_id`` this transaction charged past its free releases.

        ``False`` when that attempt was alerted already.
        """
        return (
            store.alert_insert_for_release(
                conn, step_run_id, error_line=error_line, reason=reason, sinks=self.sinks
            )
            is not None
        )

    def record_orphaned_versions(
        self, conn: psycopg.Connection[Any], *, live_s: float, alert_after_s: float
    ) -> list[tuple[int, str, int]]:
        """Alert every flow version orphaned past ``alert_after_s``, once per orphan episode.

        ``(alert_id, flow, version)`` of each alert this call made (none for a
        version some sweeper alerted already in its episode).
        """
        return store.alert_insert_for_orphaned_versions(
            conn, live_s=live_s, alert_after_s=alert_after_s, sinks=self.sinks
        )

    def record_schedule_fire(
        self,
        conn: psycopg.Connection[Any],
        *,
        schedule_id: int,
        scheduled_for: datetime,
        outcome: FireOutcome,
        error: str,
    ) -> bool:
        """Alert a fire this transaction recorded as ``refused`` or ``error``.

        ``False`` when that schedule's time was alerted already.
        """
        return (
            store.alert_insert_for_schedule_fire(
                conn,
                schedule_id=schedule_id,
                scheduled_for=scheduled_for,
                outcome=outcome,
                error=error,
                sinks=self.sinks,
            )
            is not None
        )

    def record_unloaded_schedules(
        self, conn: psycopg.Connection[Any], *, live_s: float, alert_after_s: float
    ) -> list[tuple[int, str, str]]:
        """Alert every schedule due past ``alert_after_s`` whose flow no live worker loads.

        Once per schedule and scheduled time; ``(alert_id, schedule, flow)``
        of each alert this call made.
        """
        return store.alert_insert_for_unloaded_schedules(
            conn, live_s=live_s, alert_after_s=alert_after_s, sinks=self.sinks
        )
