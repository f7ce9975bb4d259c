"""The one place driver errors become the engine's (:mod:`engine.errors`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

import psycopg

from engine.config import Settings
from engine.errors import ConfigError, Contention, DatabaseUnavailable, StoreError
from engine.infra.secrets import mask_url

# lost a race, not a fault: a lock wait past lock_timeout, a deadlock, a
# serialisation failure; and a prepared statement a pooler's server session
# did not have, or already had from another client (the connection stops
# preparing: engine.store.prepared): not done, try again (invariant 18)
_CONTENTION = (
    psycopg.errors.LockNotAvailable,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
    psycopg.errors.InvalidSqlStatementName,
    psycopg.errors.DuplicatePreparedStatement,
)

P = ParamSpec("P")
R = TypeVar("R")


def wrap_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Re-raise psycopg errors as ``StoreError`` (the original stays as ``__cause__``).

    Lock timeouts, deadlocks, serialisation failures and a prepared statement
    missing (or duplicated) behind a pooler become ``Contention``: callers
    treat them as a normal race outcome (e.g. "not claimed") or retry.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            # psycopg's own, or one SQLAlchemy wraps (the read side) as ``orig``
            orig = exc if isinstance(exc, psycopg.Error) else getattr(exc, "orig", None)
            if not isinstance(orig, psycopg.Error):
                raise
            text = mask_url(str(orig)).strip()
            if isinstance(orig, _CONTENTION):
                raise Contention(f"{fn.__name__}: {text}") from exc
            if isinstance(orig, psycopg.errors.UndefinedTable):
                raise StoreError(
                    f"{fn.__name__}: the database is not migrated ({text.splitlines()[0]}); "
                    "run `engine migrate`"
                ) from exc
            raise StoreError(f"{fn.__name__}: {text}") from exc

    return wrapper


@contextlib.contextmanager
def connect_errors(settings: Settings) -> Iterator[None]:
    """Turn a failed connection attempt into :class:`DatabaseUnavailable` or :class:`ConfigError`.

    For every connection the engine opens (psycopg and SQLAlchemy alike).
    Raised ``from None``: the driver's message may quote the URL, password
    included; the message here names the masked URL.
    """
    try:
        yield
    except psycopg.OperationalError as exc:
        role = settings.session_role
        if role and (reason := _role_refusal(str(exc), role)):
            # not an outage: waiting will not create the role or grant it
            raise ConfigError(
                f"PostgreSQL at {settings.masked_database_url()} refused role {role!r} "
                f"({reason}): run `engine migrate` (migrations 0006 and 0026 create "
                "engine_worker and engine_console), make the login a member of the role, or set "
                "ENGINE_WORKER_ROLE= or ENGINE_CONSOLE_ROLE= (empty) to keep the login's own role"
            ) from None
        # the CLI exits 3 for it; a worker waits it out
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {settings.masked_database_url()}: "
            f"{mask_url(str(exc)).strip()}"
        ) from None


def _role_refusal(message: str, role: str) -> str | None:
    """The server's reason when it refused to let the session take ``role``."""
    for reason in (f'role "{role}" does not exist', f'permission denied to set role "{role}"'):
        if reason in message:
            return reason
    return None
