"""Admission: a flow's own check that a submit may proceed, in the submit's transaction.

A flow registers one with :meth:`engine.Flow.admit`. It sees the parsed
parameters and the submit's connection, reads (and may share-lock) the rows
the job depends on, and raises :class:`engine.Refused` with a message naming
what is missing. Running inside the submit's transaction, before the job row
is written, means a refused submit writes nothing, and a lock it takes lasts
until the job is visible to everyone. The engine knows nothing of what is
checked; it only runs the check and keeps its errors in the engine's tree.
"""

from __future__ import annotations

from typing import Any

import psycopg
from pydantic import BaseModel

from engine.errors import EngineError, StoreError
from engine.flow import Flow

__all__ = ["admit"]


def admit(flow: Flow, params: BaseModel, conn: psycopg.Connection[Any]) -> None:
    """Run ``flow``'s admission check, if it has one; raise what refuses the submit."""
    check = flow.admission
    if check is None:
        return
    try:
        check(params, conn)
    except EngineError:
        raise
    except psycopg.Error as exc:
        # flows run their own SQL: its driver errors join the engine's tree here
        raise StoreError(f"flow {flow.name!r}: its admission check failed: {exc}") from exc
