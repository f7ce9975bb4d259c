"""The PostgreSQL transport: a queue table with SQS's at-least-once contract."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from engine.messages import StepMessage
from engine.store.errors import wrap_errors
from engine.store.queries import load

_q = load(str(Path(__file__).with_suffix(".sql")))


class PostgresTransport:
    """Messages are rows of ``engine_queue`` in the engine's own database."""

    @wrap_errors
    def publish(self, conn: psycopg.Connection[Any], messages: Sequence[StepMessage]) -> None:
        """Send ``messages`` inside ``conn``'s transaction (they commit with it)."""
        conn.execute(_q["queue_send_many"], {"bodies": [m.encode() for m in messages]})
