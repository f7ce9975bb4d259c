"""Transports: how "step run X is ready" reaches workers.

The database is the source of truth (invariant 1); a transport only delivers
ids, at least once. ``postgres`` keeps its queue in a table of the engine's
database (the embedded default); the SQS transport is the production path.
Only these modules talk to a queue.
"""

from __future__ import annotations

from engine.config import Settings
from engine.outbox import Publisher


def publisher_for(settings: Settings) -> Publisher:
    """The outbox publisher of the configured transport."""
    from engine.transports.postgres import PostgresTransport

    return PostgresTransport()
