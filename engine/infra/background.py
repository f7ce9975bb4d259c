"""A worker's background loop: a daemon thread with a connection of its own.

The schedule firer, the alert dispatcher and the pruner run beside the
worker's main loop in the same way: rounds until the worker's stop event is
set; while the worker sees PostgreSQL down, no round (its main loop probes)
but a look again within a second; a failed round closes the connection (the
next round opens a fresh one), reports an outage to the worker or logs any
other failure, and waits one interval. What a round does, how long it waits
after one and how a failure is logged is each loop's own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, ClassVar, TypedDict

import psycopg

from engine.config import Settings
from engine.infra import logs
from engine.infra.outage import Outage, is_outage

__all__ = ["BackgroundLoop", "LoopWiring"]

log = logging.getLogger(__name__)


class LoopWiring(TypedDict):
    """What a worker gives each of its loops: its stop, its outage, its connections."""

    stop: threading.Event
    outage: Outage
    connect: Callable[[], psycopg.Connection[Any]]


class BackgroundLoop:
    """Rounds of :meth:`_turn` in a daemon thread until :attr:`stop` is set."""

    #: what the loop is called in outage reports; its thread's name is the same, dashed
    name: ClassVar[str]
    #: the autocommit of the loop's own connection
    autocommit: ClassVar[bool] = True

    def __init__(
        self,
        settings: Settings,
        *,
        connect: Callable[[], psycopg.Connection[Any]],
        stop: threading.Event | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.settings = settings
        self.stop = stop if stop is not None else threading.Event()
        self.outage = outage
        self._connect = connect
        self._conn: psycopg.Connection[Any] | None = None
        self._thread: threading.Thread | None = None

    # -- what each loop says ----------------------------------------------------------------

    def _interval_s(self) -> float:
        """The wait after a failed round (and, within a second, the look during an outage)."""
        raise NotImplementedError

    def _turn(self) -> float:
        """One round; the seconds to wait before the next (0: the next at once)."""
        raise NotImplementedError

    def _round_failed(self, exc: Exception) -> None:
        """Log a round that failed other than by an outage."""
        log.exception("%s round failed; next round in %s s", self.name, self._interval_s())

    def _pause(self, seconds: float) -> None:
        self.stop.wait(seconds)

    # -- the thread -------------------------------------------------------------------------

    def start(self) -> None:
        """Run :meth:`run` in a daemon thread until :attr:`stop` is set."""
        # its log lines carry the worker's context (the worker binds it before starting us)
        self._thread = threading.Thread(
            target=logs.inheriting(self.run), name=self.name.replace(" ", "-"), daemon=True
        )
        self._thread.start()

    def run(self) -> None:
        """Rounds until :attr:`stop` is set; database outages are waited out."""
        try:
            while not self.stop.is_set():
                if self.outage is not None and self.outage.down.is_set():
                    # the worker's main loop probes; look again once it is over
                    self.stop.wait(min(1.0, self._interval_s()))
                    continue
                try:
                    wait_s = self._turn()
                except Exception as exc:
                    self._close()
                    if is_outage(exc):
                        if self.outage is not None:
                            self.outage.failed(exc, self.name)
                    else:
                        self._round_failed(exc)
                    wait_s = self._interval_s()
                if wait_s > 0:
                    self._pause(wait_s)
        finally:
            self._close()

    def close(self, timeout_s: float) -> None:
        """Stop the thread; a round in progress ends within ``timeout_s``."""
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    # -- its connection ---------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
            self._conn.autocommit = self.autocommit
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                log.debug("closing the %s's connection failed", self.name, exc_info=True)
            self._conn = None
