"""Alerts and their deliveries: one alert per dead letter, one delivery per sink.

An alert is written in the transaction that wrote its dead letter, so a dead
letter without its alert (or the reverse) never commits. The same holds for
a schedule's fire that submitted no job; orphaned flow versions and schedules
whose flow no live worker loads are alerted by the sweeper, each once per
key (a partial unique index). Deliveries are
claimed like step runs (a conditional UPDATE with a fresh token and a claim
that lapses), so whichever worker's dispatcher finds one sends it, a lapsed
claim is taken over, and an outcome is recorded only by the claim's holder.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from engine.store.errors import wrap_errors
from engine.store.named import NamedQueries
from engine.store.queries import load
from engine.store.rows import ClaimedDelivery
from engine.store.status import FireOutcome

__all__ = [
    "alert_delivery_claim_due_many",
    "alert_delivery_mark_delivered_if_claimed",
    "alert_delivery_mark_failed_if_claimed",
    "alert_delivery_reset_abandoned",
    "alert_delivery_select_by_alert",
    "alert_exists",
    "alert_insert_for_dead_letter",
    "alert_insert_for_orphaned_versions",
    "alert_insert_for_release",
    "alert_insert_for_schedule_fire",
    "alert_insert_for_unloaded_schedules",
    "alert_select_recent",
]

_q = NamedQueries(load("alerts"))


@wrap_errors
def alert_insert_for_dead_letter(
    conn: psycopg.Connection[Any], dead_letter_id: int, sinks: Sequence[str]
) -> int | None:
    """The new alert's id; ``None`` when this dead letter was alerted already."""
    params = {"dead_letter_id": dead_letter_id, "sinks": list(sinks)}
    return _new_id(_q.first(conn, "alert_insert_for_dead_letter", params))


@wrap_errors
def alert_insert_for_release(
    conn: psycopg.Connection[Any],
    step_run_id: uuid.UUID,
    *,
    error_line: str,
    reason: str,
    sinks: Sequence[str],
) -> int | None:
    """Alert a step run's attempt charged past its free releases; ``None``: alerted already."""
    params = {
        "step_run_id": step_run_id,
        "error_line": error_line,
        "reason": reason,
        "sinks": list(sinks),
    }
    return _new_id(_q.first(conn, "alert_insert_for_release", params))


@wrap_errors
def alert_insert_for_orphaned_versions(
    conn: psycopg.Connection[Any], *, live_s: float, alert_after_s: float, sinks: Sequence[str]
) -> list[tuple[int, str, int]]:
    """Alert each flow version orphaned past ``alert_after_s``, once per episode.

    Returns ``(alert_id, flow, version)`` of the alerts this call made; a
    version alerted already in this episode (by any sweeper) is not again.
    """
    params = {"live_s": live_s, "alert_after_s": alert_after_s, "sinks": list(sinks)}
    rows = _q.rows(conn, "alert_insert_for_orphaned_versions", params)
    return [(int(r["id"]), str(r["flow"]), int(r["flow_version"])) for r in rows]


@wrap_errors
def alert_insert_for_schedule_fire(
    conn: psycopg.Connection[Any],
    *,
    schedule_id: int,
    scheduled_for: datetime,
    outcome: FireOutcome,
    error: str,
    sinks: Sequence[str],
) -> int | None:
    """The new alert's id; ``None`` when this schedule's time was alerted already."""
    params = {
        "schedule_id": schedule_id,
        "scheduled_for": scheduled_for,
        "outcome": outcome.value,
        "error": error,
        "sinks": list(sinks),
    }
    return _new_id(_q.first(conn, "alert_insert_for_schedule_fire", params))


@wrap_errors
def alert_insert_for_unloaded_schedules(
    conn: psycopg.Connection[Any], *, live_s: float, alert_after_s: float, sinks: Sequence[str]
) -> list[tuple[int, str, str]]:
    """Alert each schedule due while no live worker loads its flow, once per scheduled time.

    Returns ``(alert_id, schedule, flow)`` of the alerts this call made.
    """
    params = {"live_s": live_s, "alert_after_s": alert_after_s, "sinks": list(sinks)}
    rows = _q.rows(conn, "alert_insert_for_unloaded_schedules", params)
    return [(int(r["id"]), str(r["schedule"]), str(r["flow"])) for r in rows]


@wrap_errors
def alert_delivery_claim_due_many(
    conn: psycopg.Connection[Any],
    *,
    owner: str,
    sinks: Sequence[str],
    limit: int,
    claim_s: float,
) -> list[ClaimedDelivery]:
    params = {"owner": owner, "sinks": list(sinks), "limit": limit, "claim_s": claim_s}
    rows = _q.rows(conn, "alert_delivery_claim_due_many", params)
    return [ClaimedDelivery.from_row(r) for r in rows]


@wrap_errors
def alert_delivery_mark_delivered_if_claimed(
    conn: psycopg.Connection[Any], delivery: ClaimedDelivery
) -> bool:
    """``False``: the claim lapsed and another dispatcher owns the delivery now."""
    params = {"alert_id": delivery.alert_id, "sink": delivery.sink, "token": delivery.token}
    return _q.run(conn, "alert_delivery_mark_delivered_if_claimed", params) == 1


@wrap_errors
def alert_delivery_mark_failed_if_claimed(
    conn: psycopg.Connection[Any],
    delivery: ClaimedDelivery,
    *,
    error: str,
    delay_s: float,
    max_attempts: int,
) -> str | None:
    """The delivery's new status (``pending`` or ``abandoned``); ``None``: the claim lapsed."""
    params = {
        "alert_id": delivery.alert_id,
        "sink": delivery.sink,
        "token": delivery.token,
        "error": error,
        "delay_s": delay_s,
        "max_attempts": max_attempts,
    }
    row = _q.first(conn, "alert_delivery_mark_failed_if_claimed", params)
    return None if row is None else str(row["status"])


@wrap_errors
def alert_delivery_reset_abandoned(
    conn: psycopg.Connection[Any], alert_id: int | None = None
) -> int:
    """Make abandoned deliveries (of one alert, or all) pending again; how many."""
    return _q.run(conn, "alert_delivery_reset_abandoned", {"alert_id": alert_id})


@wrap_errors
def alert_exists(conn: psycopg.Connection[Any], alert_id: int) -> bool:
    return _q.first(conn, "alert_exists", {"alert_id": alert_id}) is not None


@wrap_errors
def alert_delivery_select_by_alert(
    conn: psycopg.Connection[Any], alert_id: int
) -> list[dict[str, Any]]:
    """The deliveries of one alert, by sink (empty: no such alert)."""
    return _q.rows(conn, "alert_delivery_select_by_alert", {"alert_id": alert_id})


@wrap_errors
def alert_select_recent(
    conn: psycopg.Connection[Any], *, limit: int, pending_only: bool = False
) -> list[dict[str, Any]]:
    params = {"limit": limit, "pending_only": pending_only}
    return _q.rows(conn, "alert_select_recent", params)


def _new_id(row: dict[str, Any] | None) -> int | None:
    """A new alert's id; ``None``: its key was alerted already (the insert made no row)."""
    return None if row is None else int(row["id"])
