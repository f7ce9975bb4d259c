"""SQLAlchemy engine and sessions for the typed read side (:mod:`engine.store.models`)."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

from engine import db
from engine.config import Settings, mask_url
from engine.errors import DatabaseUnavailable


def sqlalchemy_engine(settings: Settings, **kwargs: Any) -> Engine:
    """An engine on the configured database (the embedded one included).

    The connection comes from :func:`engine.db.conninfo`, so there is one way
    to find the database and the URL never has to be rewritten for SQLAlchemy.
    """
    info = db.conninfo(settings)

    def creator() -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(info, connect_timeout=settings.connect_timeout_s)
        except psycopg.OperationalError as exc:
            # the CLI exits 3 for it, like every other unreachable-database error
            raise DatabaseUnavailable(
                f"cannot connect to PostgreSQL at {settings.masked_database_url()}: "
                f"{mask_url(str(exc)).strip()}"
            ) from None

    kwargs.setdefault("poolclass", NullPool)
    return create_engine("postgresql+psycopg://", creator=creator, **kwargs)
