"""Signals: one per job and name, sent by the ERP or an operator, read by a waiting step.

A signal is recorded once (unique per job and name) under its job's row
lock, which a step run starting to wait takes too: whichever commits first,
the other sees it, so no signal is missed by a step that starts to wait at
the same moment (see ``step_wait_if_leased``).
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from engine.store.errors import wrap_errors
from engine.store.queries import load
from engine.store.wait_rows import SignalRow, WaitState

__all__ = [
    "signal_insert_if_absent",
    "signal_select",
    "signal_select_by_job",
    "signal_select_for_wait",
]

_q = load("signals")


@wrap_errors
def signal_insert_if_absent(
    conn: psycopg.Connection[Any],
    job_id: uuid.UUID,
    name: str,
    data: Any,
    sent_by: str | None,
) -> SignalRow | None:
    """Record the signal; ``None``: one with this name was recorded for the job already."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q["signal_insert_if_absent"],
            {"job_id": job_id, "name": name, "data": Jsonb(data), "sent_by": sent_by},
        )
        row = cur.fetchone()
    return None if row is None else SignalRow.from_row(row)


@wrap_errors
def signal_select(conn: psycopg.Connection[Any], job_id: uuid.UUID, name: str) -> SignalRow | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["signal_select"], {"job_id": job_id, "name": name})
        row = cur.fetchone()
    return None if row is None else SignalRow.from_row(row)


@wrap_errors
def signal_select_for_wait(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, step_run_id: uuid.UUID, name: str
) -> WaitState:
    """The signal ``name`` of the job if sent, and whether the step run's wait for it ran out."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["signal_select_for_wait"], {"step_run_id": step_run_id, "name": name})
        row = cur.fetchone()
    if row is None:
        return WaitState(None, False, None)
    signal = None if row["name"] is None else SignalRow.from_row(row)
    return WaitState(signal, bool(row["timed_out"]), row["wait_until"], tuple(row["wait_past"]))


@wrap_errors
def signal_select_by_job(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[SignalRow]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["signal_select_by_job"], {"job_id": job_id})
        return [SignalRow.from_row(r) for r in cur]
