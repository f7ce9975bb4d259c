"""Transports: how "step run X is ready" reaches workers.

The database is the source of truth (invariant 1); a transport only delivers
ids, at least once (see :mod:`engine.transports.base` for the contract).
``postgres`` keeps its queue in a table of the engine's database (the
embedded default); ``sqs`` is the production path (an SQS standard queue,
configured by ``ENGINE_SQS_*``; ``sqs_queues`` creates its queues). Only
these modules talk to a queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import Settings
    from engine.transports.base import Transport


def transport_for(settings: Settings) -> Transport:
    """The configured transport (``ENGINE_TRANSPORT``)."""
    if settings.transport == "postgres":
        from engine.transports.postgres import PostgresTransport

        return PostgresTransport(settings)
    if settings.transport == "sqs":
        from engine.transports.sqs import SqsSettings, SqsTransport

        return SqsTransport(SqsSettings())
    from engine.errors import ConfigError

    raise ConfigError(f"ENGINE_TRANSPORT={settings.transport!r} is not known; valid: postgres, sqs")
