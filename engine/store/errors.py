"""The one place driver errors become :class:`engine.errors.StoreError`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import psycopg

from engine.config import mask_url
from engine.errors import Contention, StoreError

# lost a race, not a fault: a lock wait past lock_timeout, a deadlock, a
# serialisation failure
_CONTENTION = (
    psycopg.errors.LockNotAvailable,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
)

P = ParamSpec("P")
R = TypeVar("R")


def wrap_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Re-raise psycopg errors as ``StoreError`` (the original stays as ``__cause__``).

    Lock timeouts, deadlocks and serialisation failures become ``Contention``:
    callers treat them as a normal race outcome (e.g. "not claimed") or retry.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except _CONTENTION as exc:
            raise Contention(f"{fn.__name__}: {mask_url(str(exc)).strip()}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"{fn.__name__}: {mask_url(str(exc)).strip()}") from exc

    return wrapper
