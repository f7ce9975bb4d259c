"""Operator statements: dead letters, job status and progress."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from engine.store.errors import wrap_errors
from engine.store.queries import load

_q = load("admin")


@wrap_errors
def dead_letter_select_open(conn: psycopg.Connection[Any], limit: int) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["dead_letter_select_open"], {"limit": limit})
        return cur.fetchall()


@wrap_errors
def dead_letter_select_one(conn: psycopg.Connection[Any], dl_id: int) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["dead_letter_select_one"], {"id": dl_id})
        return cur.fetchone()


@wrap_errors
def dead_letter_mark_replayed_if_open(conn: psycopg.Connection[Any], dl_id: int) -> bool:
    return conn.execute(_q["dead_letter_mark_replayed_if_open"], {"id": dl_id}).rowcount == 1


@wrap_errors
def dead_letter_delete_closed(conn: psycopg.Connection[Any]) -> int:
    return conn.execute(_q["dead_letter_delete_closed"]).rowcount


@wrap_errors
def job_select_status(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["job_select_status"], {"job_id": job_id})
        row = cur.fetchone()
    return None if row is None else str(row["status"])


@wrap_errors
def job_progress(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["job_progress"], {"job_id": job_id})
        return cur.fetchone()
